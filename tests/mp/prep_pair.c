/* A stream call whose preparation failed, taken off the queue with the call after it: the
 * progress thread runs a send and a receive on two streams of one device as one exchange
 * (progress.c's take_partner), so when the first one's preparation failed it fails both,
 * the partner "not run" with the first one's reason. That reason was read from the first
 * request after finishing it had freed it (a stream call nobody waits on): a use after
 * free, which the ASan build reports.
 *
 *   prep_pair   (3 ranks through ringlet-run, RINGLET_DEVICE=sim, a short RINGLET_TIMEOUT (6 s),
 *                --dir D: a folder the ranks share)
 *
 * Rank 1 never uses device memory, so its cuda_ipc probe never comes. Ranks 0 and 2 first
 * exchange device buffers on streams (their probes made, their connections up). Then rank
 * 0 holds its queue, as a call run on the caller's thread does (by construction: the
 * progress thread cannot take anything meanwhile), and queues, on two streams of its
 * device: a receive from rank 1, whose preparation waits for rank 1's probe until the
 * deadline and fails (the call is queued all the same), then a send to rank 2. It lets
 * the queue go: both are taken together. Rank 0's communicator must fail naming rank 1,
 * and both streams must go on. Rank 2 holds its own queue with its receive of that send
 * in it: rank 0's failure reaches its communicator while the receive cannot end, and
 * ringlet_comm_last_error must then say why (it said nothing until the receive ended).
 * Prints "prep_pair: rank R: OK ..." and exits 0 when all holds.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "comm.h"
#include "device.h"
#include "ringlet.h"

static int g_rank;
static const rl_device_ops *D;

#define FAIL(...)                                                                                                      \
    do {                                                                                                               \
        printf("FAIL rank %d: ", g_rank);                                                                              \
        printf(__VA_ARGS__);                                                                                           \
        printf("\n");                                                                                                  \
        exit(1);                                                                                                       \
    } while (0)

#define DEV(call)                                                                                                      \
    do {                                                                                                               \
        if ((call) != RL_DEV_OK) FAIL("%s: %s", #call, rl_dev_error());                                                \
    } while (0)

static void file_touch(const char *dir, const char *name) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    if (f) fclose(f);
}

/* Waits (120 s at most) for the file; 1 when it came. */
static int file_wait(const char *dir, const char *name) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    for (int k = 0; k < 24000; k++) {
        if (access(path, F_OK) == 0) return 1;
        struct timespec ts = {0, 5 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    return 0;
}

/* The communicator's asynchronous error, within 60 s. */
static ringlet_result_t async_error(ringlet_comm_t comm) {
    ringlet_result_t rc = RINGLET_SUCCESS;
    for (int k = 0; k < 60000 && (rc = ringlet_comm_get_async_error(comm)) == RINGLET_SUCCESS; k++) {
        struct timespec ts = {0, 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    return rc;
}

int main(int argc, char **argv) {
    const char *dir = argc == 3 && !strcmp(argv[1], "--dir") ? argv[2] : NULL;
    if (!dir) return fprintf(stderr, "usage: prep_pair --dir D\n"), 2;
    setvbuf(stdout, NULL, _IOLBF, 0);
    D = rl_device();
    if (!D) {
        printf("SKIP: no device backend: %s\n", rl_device_unavailable());
        return 77;
    }
    ringlet_comm_t comm;
    if (ringlet_comm_init_env(&comm) != RINGLET_SUCCESS) FAIL("%s", ringlet_comm_last_error(NULL));
    int P;
    ringlet_comm_rank(comm, &g_rank);
    ringlet_comm_size(comm, &P);
    if (P != 3) FAIL("run with 3 ranks");
    enum { N = 4099 };
    if (g_rank == 1) { /* never uses device memory */
        if (!file_wait(dir, "done")) FAIL("rank 0 never said it was done");
        ringlet_comm_destroy(comm);
        printf("prep_pair: rank 1: OK (the rank without device memory)\n");
        return 0;
    }
    int peer = 2 - g_rank; /* 0 <-> 2 */
    void *buf[2];
    rl_dev_stream_t s[2];
    DEV(D->set_device(0));
    for (int i = 0; i < 2; i++) {
        DEV(D->mem_alloc(&buf[i], N * 4));
        DEV(D->stream_create(&s[i]));
    }
    /* Warm-up: ranks 0 and 2 exchange device buffers (probes made, connections up). */
    uint32_t host[N];
    for (int i = 0; i < N; i++) host[i] = (uint32_t)(i * 2654435761u) ^ (uint32_t)g_rank;
    DEV(D->memcpy_async(buf[0], host, sizeof host, s[0]));
    ringlet_result_t rc = ringlet_group_start();
    if (!rc) rc = ringlet_send(buf[0], N, RINGLET_UINT32, peer, comm, s[0]);
    if (!rc) rc = ringlet_recv(buf[1], N, RINGLET_UINT32, peer, comm, s[0]);
    ringlet_result_t grc = ringlet_group_end();
    if (rc || grc) FAIL("warm-up exchange: %s", ringlet_comm_last_error(comm));
    DEV(D->stream_sync(s[0])); /* first: a copy into pageable memory behind a held stream hangs */
    DEV(D->memcpy_async(host, buf[1], sizeof host, s[0]));
    DEV(D->stream_sync(s[0]));
    if (ringlet_comm_get_async_error(comm)) FAIL("warm-up exchange: %s", ringlet_comm_last_error(comm));
    for (int i = 0; i < N; i++)
        if (host[i] != ((uint32_t)(i * 2654435761u) ^ (uint32_t)peer)) FAIL("warm-up exchange: element %d wrong", i);

    /* Hold the queue as a call run on its caller's thread does (progress.c's claim): the
     * progress thread takes nothing until it is let go. */
    struct ringlet_comm *c = comm;
    pthread_mutex_lock(&c->q_mu);
    int idle = !c->q_head && !c->running;
    if (idle) c->running = 1;
    pthread_mutex_unlock(&c->q_mu);
    if (!idle) FAIL("the queue was not idle after the warm-up");
    if (g_rank == 2) {
        /* The receive of rank 0's send, queued and held: rank 0's failure reaches this
         * communicator before the call can end, and the error must say why at once. */
        if (!file_wait(dir, "queued")) FAIL("rank 0 never queued its calls");
        rc = ringlet_recv(buf[1], N, RINGLET_UINT32, 0, comm, s[1]);
        if (rc) FAIL("the receive from rank 0 was refused at the call: %s", ringlet_comm_last_error(comm));
        file_touch(dir, "queued.2");
        ringlet_result_t arc = async_error(comm);
        const char *m = ringlet_comm_last_error(comm);
        if (arc != RINGLET_ERR_REMOTE || !strstr(m, "rank 0 failed"))
            FAIL("the asynchronous error while the receive is held: %s: '%s'", ringlet_strerror(arc), m);
        printf("prep_pair: rank 2: OK the asynchronous error said why, its call still queued: %s\n", m);
        pthread_mutex_lock(&c->q_mu);
        c->running = 0;
        pthread_cond_signal(&c->q_cv);
        pthread_mutex_unlock(&c->q_mu);
        DEV(D->stream_sync(s[1]));
    } else {
        /* Its preparation waits for rank 1's probe until the deadline, then it is queued. */
        rc = ringlet_recv(buf[1], N, RINGLET_UINT32, 1, comm, s[1]);
        if (rc) FAIL("the receive from rank 1 was refused at the call: %s", ringlet_comm_last_error(comm));
        rc = ringlet_send(buf[0], N, RINGLET_UINT32, 2, comm, s[0]);
        if (rc) FAIL("the send to rank 2 was refused at the call: %s", ringlet_comm_last_error(comm));
        pthread_mutex_lock(&c->q_mu);
        int both = c->q_head && c->q_head->next && c->q_head->next == c->q_tail && c->q_head->prep_rc &&
                   !c->q_tail->prep_rc;
        pthread_mutex_unlock(&c->q_mu);
        if (!both) FAIL("the queue did not hold the failed receive and then the send");
        file_touch(dir, "queued");
        if (!file_wait(dir, "queued.2")) FAIL("rank 2 never queued its receive");
        pthread_mutex_lock(&c->q_mu);
        c->running = 0;
        pthread_cond_signal(&c->q_cv);
        pthread_mutex_unlock(&c->q_mu);
        ringlet_result_t arc = async_error(comm);
        const char *m = ringlet_comm_last_error(comm);
        if (arc == RINGLET_SUCCESS || !strstr(m, "rank 1")) FAIL("the communicator after the failed receive: %s: %s",
                                                                   ringlet_strerror(arc), m);
        for (int i = 0; i < 2; i++) DEV(D->stream_sync(s[i]));
        printf("prep_pair: rank 0: OK the failed receive and the send with it: %s\n", m);
        file_touch(dir, "done");
    }
    ringlet_comm_destroy(comm);
    for (int i = 0; i < 2; i++) {
        DEV(D->stream_destroy(s[i]));
        DEV(D->mem_free(buf[i]));
    }
    return 0;
}
