/* A rank for tests/mp/shm_full.sh: shared memory when /dev/shm fills up after init.
 *
 * 3 ranks on one host, over shared memory, in a private /dev/shm (the script mounts a
 * small tmpfs there). After init and one all-reduce, rank 0 fills /dev/shm to the last
 * page; the ranks learn it through a second all-reduce. From then on a page of shared
 * memory that ringlet did not reserve would be SIGBUS at its first touch, not an error:
 *   1. all-reduces of 16 KiB of int32 (twice, so both of the doorbell's board slots are
 *      written whole: that path publishes a rank's contribution in its doorbell page),
 *      checked exactly;
 *   2. rank 1 receives from rank 2, which it has no connection from (the ring's are
 *      0 -> 1 -> 2 -> 0) and which sends nothing: the receive's FIFO lies in rank 1's own
 *      segment, unreserved until a sender connects. The receive must fail with
 *      RINGLET_ERR_SYSTEM saying /dev/shm is full, and naming rank 2;
 *   3. an all-reduce of the three, checked.
 * Rank 0 then removes its filler. Prints "shm_full: rank R of P: N checks, F failed". */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "ringlet.h"

#define N 4096 /* int32: 16 KiB, RINGLET_BOARD_BYTES' default */

static int g_rank, g_P;
static long g_checks, g_failed;

#define CHECK(cond, ...)                                                                                               \
    do {                                                                                                               \
        g_checks++;                                                                                                    \
        if (!(cond)) {                                                                                                 \
            g_failed++;                                                                                                \
            printf("FAIL rank %d: ", g_rank);                                                                          \
            printf(__VA_ARGS__);                                                                                       \
            printf("\n");                                                                                              \
        }                                                                                                              \
    } while (0)

static int32_t value(int rank, int round, size_t i) {
    return (int32_t)(((uint32_t)i * 2654435761u + (uint32_t)round * 40503u) % 100000u) * (rank + 1) - 7 * rank;
}

static void allreduce_checked(ringlet_comm_t c, int round) {
    static int32_t x[N], y[N];
    for (size_t i = 0; i < N; i++) x[i] = value(g_rank, round, i);
    ringlet_result_t rc = ringlet_allreduce(x, y, N, RINGLET_INT32, RINGLET_SUM, c, NULL);
    size_t bad = 0;
    for (size_t i = 0; i < N && !rc; i++) {
        int32_t want = 0;
        for (int r = 0; r < g_P; r++) want += value(r, round, i);
        bad += y[i] != want;
    }
    CHECK(!rc && !bad, "all-reduce %d of %d int32 with /dev/shm full: %s, %zu wrong", round, N,
          rc ? ringlet_comm_last_error(c) : "ok", bad);
}

/* Takes every free block of /dev/shm: a file the size of what is free, then page by page. */
static int fill(const char *path) {
    int fd = open(path, O_CREAT | O_EXCL | O_RDWR, 0600);
    if (fd < 0) return -1;
    struct statvfs v;
    off_t at = 0;
    if (statvfs("/dev/shm", &v) == 0 && v.f_bavail > 1) {
        off_t free_bytes = (off_t)(v.f_bavail - 1) * (off_t)v.f_frsize;
        if (posix_fallocate(fd, 0, free_bytes) == 0) at = free_bytes;
    }
    while (posix_fallocate(fd, at, 4096) == 0) at += 4096;
    close(fd);
    return 0;
}

int main(void) {
    ringlet_comm_t c;
    if (ringlet_comm_init_env(&c)) return printf("FAIL: %s\n", ringlet_comm_last_error(NULL)), 1;
    ringlet_comm_rank(c, &g_rank);
    ringlet_comm_size(c, &g_P);
    if (g_P != 3) return printf("FAIL: shm_full needs 3 ranks, not %d\n", g_P), 1;
    char filler[64];
    snprintf(filler, sizeof filler, "/dev/shm/shm_full_filler.%d", (int)getpid());
    int32_t one = 1, sum = 0;
    ringlet_result_t rc = ringlet_allreduce(&one, &sum, 1, RINGLET_INT32, RINGLET_SUM, c, NULL);
    CHECK(!rc && sum == 3, "the first all-reduce: %s, sum %d", rc ? ringlet_comm_last_error(c) : "ok", (int)sum);
    if (g_rank == 0) CHECK(fill(filler) == 0, "could not create %s: %s", filler, strerror(errno));
    rc = ringlet_allreduce(&one, &sum, 1, RINGLET_INT32, RINGLET_SUM, c, NULL); /* rank 0 filled /dev/shm */
    CHECK(!rc && sum == 3, "the all-reduce after the fill: %s, sum %d", rc ? ringlet_comm_last_error(c) : "ok",
          (int)sum);
    allreduce_checked(c, 1);
    allreduce_checked(c, 2);
    if (g_rank == 1) {
        char buf[100];
        rc = ringlet_recv(buf, sizeof buf, RINGLET_UINT8, 2, c, NULL);
        const char *m = ringlet_comm_last_error(c);
        CHECK(rc == RINGLET_ERR_SYSTEM && strstr(m, "No space left on device") && strstr(m, "rank 2"),
              "receive from rank 2 with /dev/shm full: %s: %s", ringlet_strerror(rc), rc ? m : "succeeded");
        printf("shm_full: rank 1: receive with /dev/shm full: %s\n", m);
    }
    allreduce_checked(c, 3);
    if (g_rank == 0) unlink(filler);
    ringlet_comm_destroy(c);
    printf("shm_full: rank %d of %d: %ld checks, %ld failed\n", g_rank, g_P, g_checks, g_failed);
    return g_failed ? 1 : 0;
}
