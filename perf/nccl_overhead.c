/* What the NCCL layer adds per call: an 8-byte all-reduce on host memory through
 * ncclAllReduce (libnccl.so.2) and through ringlet_allreduce on the same ranks, in
 * alternating rounds of ITERS calls each; prints the median per-call time of each and
 * their difference. Run by perf/nccl_overhead.sh under ringlet-run (2 ranks by default). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "nccl.h"
#include "ringlet.h"

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}
static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    int rounds = argc > 1 ? atoi(argv[1]) : 9, iters = argc > 2 ? atoi(argv[2]) : 20000;
    int rank = atoi(getenv("RANK") ? getenv("RANK") : "0"), P = atoi(getenv("WORLD_SIZE") ? getenv("WORLD_SIZE") : "1");
    ringlet_comm_t rc;
    if (ringlet_comm_init_env(&rc)) return fprintf(stderr, "%s\n", ringlet_comm_last_error(NULL)), 1;
    /* The NCCL communicator's id goes over the ringlet one (a broadcast of 128 bytes). */
    ncclUniqueId id;
    if (rank == 0 && ncclGetUniqueId(&id)) return 1;
    if (ringlet_broadcast(&id, &id, sizeof id, RINGLET_UINT8, 0, rc, NULL)) return 1;
    ncclComm_t nc;
    if (ncclCommInitRank(&nc, P, id, rank)) return fprintf(stderr, "nccl init: %s\n", ncclGetLastError(NULL)), 1;
    double *tn = calloc((size_t)rounds, sizeof *tn), *tr = calloc((size_t)rounds, sizeof *tr);
    float in[2] = {(float)rank, 1.0f}, out[2] = {0, 0}; /* 8 bytes */
    for (int w = 0; w < 2000; w++) ncclAllReduce(in, out, 2, ncclFloat32, ncclSum, nc, NULL); /* warm up both */
    for (int w = 0; w < 2000; w++) ringlet_allreduce(in, out, 2, RINGLET_FLOAT32, RINGLET_SUM, rc, NULL);
    int bad = 0;
    for (int r = 0; r < rounds; r++) {
        double t0 = now();
        for (int i = 0; i < iters; i++) bad |= ncclAllReduce(in, out, 2, ncclFloat32, ncclSum, nc, NULL) != ncclSuccess;
        tn[r] = (now() - t0) / iters * 1e6;
        t0 = now();
        for (int i = 0; i < iters; i++)
            bad |= ringlet_allreduce(in, out, 2, RINGLET_FLOAT32, RINGLET_SUM, rc, NULL) != RINGLET_SUCCESS;
        tr[r] = (now() - t0) / iters * 1e6;
    }
    float want = (float)(P * (P - 1) / 2);
    bad |= out[0] != want || out[1] != (float)P;
    qsort(tn, (size_t)rounds, sizeof *tn, cmp);
    qsort(tr, (size_t)rounds, sizeof *tr, cmp);
    if (rank == 0)
        printf("8-byte all-reduce, host memory, %d ranks, median of %d rounds of %d calls: ncclAllReduce %.3f us, "
               "ringlet_allreduce %.3f us, NCCL layer adds %.3f us per call%s\n",
               P, rounds, iters, tn[rounds / 2], tr[rounds / 2], tn[rounds / 2] - tr[rounds / 2],
               bad ? " (WRONG RESULTS)" : "");
    ncclCommDestroy(nc);
    ringlet_comm_destroy(rc);
    free(tn), free(tr);
    return bad;
}
