/* Destroy with a transfer still posted, while the peer is alive and busy: at P = 3,
 * rank 2 posts an irecv from rank 1 that rank 1 never matches and destroys at once;
 * rank 1 computes for 12 s before it destroys. Rank 2's destroy must return promptly
 * (it may not wait for its peer to go away), rank 1's and rank 0's when rank 1 is done
 * (rank 0 waits for everybody's goodbye). The communicator worked before (a checked
 * all-reduce). The request is abandoned, as by a user who destroys without waiting. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "ringlet.h"

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

int main(void) {
    ringlet_comm_t c;
    if (ringlet_comm_init_env(&c)) {
        printf("%s\n", ringlet_comm_last_error(NULL));
        return 1;
    }
    int rank, P;
    ringlet_comm_rank(c, &rank);
    ringlet_comm_size(c, &P);
    uint32_t v = (uint32_t)rank * 2654435761u + 7, sum;
    if (ringlet_allreduce(&v, &sum, 1, RINGLET_UINT32, RINGLET_SUM, c, NULL)) {
        printf("allreduce: %s\n", ringlet_comm_last_error(c));
        return 1;
    }
    uint32_t want = 0;
    for (int r = 0; r < P; r++) want += (uint32_t)r * 2654435761u + 7;
    if (sum != want) {
        printf("allreduce wrong\n");
        return 1;
    }
    char *buf = calloc(100, 1);
    ringlet_request_t req;
    if (rank == 2 && ringlet_irecv(buf, 100, RINGLET_UINT8, 1, c, NULL, &req)) {
        printf("post: %s\n", ringlet_comm_last_error(c));
        return 1;
    }
    if (rank == 1) {
        struct timespec ts = {12, 0};
        nanosleep(&ts, NULL);
    }
    double t0 = now();
    ringlet_result_t rc = ringlet_comm_destroy(c);
    double dt = now() - t0;
    printf("rank %d: destroy returned %d after %.2f s\n", rank, rc, dt);
    /* The abandoned request is not touched again; its memory goes with the process. */
    free(buf);
    return rc != RINGLET_SUCCESS || (rank == 2 && dt > 5.0);
}
