/* Unit test for sends and receives posted on the caller's thread (api.c's post_here,
 * progress.c's rl_comm_try_post): two ranks of one host (forked processes), over shared
 * memory and over TCP, each phase on a communicator of its own:
 *   - blocking: ROUNDS exchanges of random lengths (0 bytes to past one 1 MiB piece,
 *     random bytes), rank 0 sending first and rank 1 receiving first; every byte checked,
 *     and every call posted by the calling thread (rl_p2p_posts), not the progress thread;
 *     with the ranks on cores of their own, the waits never yield (they poll as a
 *     collective run on the caller's thread does: nothing else needs the core);
 *   - non-blocking: each rank posts a receive and a send, then waits for them in either
 *     order: checked, and posted here too;
 *   - behind a queued collective: a non-blocking all-reduce, then at once a blocking
 *     send or receive (which must not overtake the all-reduce, whether the queue is still
 *     busy or not), then the all-reduce's wait: both checked bit-exact;
 *   - RINGLET_INLINE=0: the same blocking exchanges, all posted by the progress thread.
 * Exit status 0 on success.
 */
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "p2p.h"
#include "ringlet.h"
#include "wait.h"

enum { ROUNDS = 60, MAXLEN = (1 << 20) + 70000, COUNT = 5000 };

static int failures;

#define CHECK(cond, ...)                                                                                               \
    do {                                                                                                               \
        if (!(cond) && failures++ < 20) printf("FAIL " __VA_ARGS__), printf("\n"), fflush(stdout);                    \
    } while (0)

static uint32_t mix(uint32_t x) {
    x ^= x >> 16, x *= 0x7feb352du, x ^= x >> 15, x *= 0x846ca68bu, x ^= x >> 16;
    return x;
}

/* Length of round k's message (both ranks draw the same): mostly small, some past a piece. */
static size_t length(uint32_t seed, int k) {
    uint32_t x = mix(seed * 977u + (uint32_t)k);
    if (x % 10 == 0) return 0;
    if (x % 10 == 1) return MAXLEN - (mix(x) % 4096);
    return mix(x) % (x % 2 ? 300000u : 4096u);
}

/* Byte i of what rank `from` sends in round k. */
static uint8_t byte(uint32_t seed, int k, int from, size_t i) {
    return (uint8_t)mix(seed ^ ((uint32_t)k << 20) ^ ((uint32_t)from << 30) ^ (uint32_t)i * 2654435761u);
}

static void fill(uint8_t *b, size_t n, uint32_t seed, int k, int from) {
    for (size_t i = 0; i < n; i++) b[i] = byte(seed, k, from, i);
}

static size_t wrong(const uint8_t *b, size_t n, uint32_t seed, int k, int from) {
    for (size_t i = 0; i < n; i++)
        if (b[i] != byte(seed, k, from, i)) return i + 1;
    return 0;
}

static ringlet_comm_t open_comm(ringlet_unique_id_t id, int rank, const char *tp, const char *inl) {
    setenv("RINGLET_TRANSPORT", tp, 1);
    setenv("RINGLET_INLINE", inl, 1);
    ringlet_comm_t c;
    ringlet_result_t rc = ringlet_comm_init_rank(&c, 2, id, rank);
    if (rc) printf("FAIL rank %d %s: init: %s\n", rank, tp, ringlet_strerror(rc)), exit(1);
    return c;
}

/* ROUNDS blocking exchanges; returns the requests this thread posted meanwhile, and in
 * *yields how often its waits yielded. */
static unsigned long blocking(ringlet_comm_t c, int rank, const char *what, uint32_t seed, uint8_t *out, uint8_t *in,
                              unsigned long *yields) {
    unsigned long p0 = rl_p2p_posts(), y0 = rl_wait_yields();
    for (int k = 0; k < ROUNDS; k++) {
        size_t n = length(seed, k);
        fill(out, n, seed, k, rank);
        memset(in, 0xa5, n);
        ringlet_result_t a, b;
        if (rank == 0) {
            a = ringlet_send(out, n, RINGLET_UINT8, 1, c, NULL);
            b = ringlet_recv(in, n, RINGLET_UINT8, 1, c, NULL);
        } else {
            b = ringlet_recv(in, n, RINGLET_UINT8, 0, c, NULL);
            a = ringlet_send(out, n, RINGLET_UINT8, 0, c, NULL);
        }
        CHECK(a == RINGLET_SUCCESS && b == RINGLET_SUCCESS, "rank %d %s round %d (%zu bytes): send %s, recv %s", rank,
              what, k, n, ringlet_strerror(a), ringlet_strerror(b));
        size_t w = wrong(in, n, seed, k, 1 - rank);
        CHECK(w == 0, "rank %d %s round %d: byte %zu of %zu wrong", rank, what, k, w - 1, n);
    }
    *yields = rl_wait_yields() - y0;
    return rl_p2p_posts() - p0;
}

static unsigned long nonblocking(ringlet_comm_t c, int rank, const char *what, uint32_t seed, uint8_t *out,
                                 uint8_t *in) {
    unsigned long p0 = rl_p2p_posts();
    for (int k = 0; k < ROUNDS; k++) {
        size_t n = length(seed, k);
        fill(out, n, seed, k, rank);
        memset(in, 0xa5, n);
        ringlet_request_t rq, sq;
        ringlet_result_t a = ringlet_irecv(in, n, RINGLET_UINT8, 1 - rank, c, NULL, &rq);
        ringlet_result_t b = ringlet_isend(out, n, RINGLET_UINT8, 1 - rank, c, NULL, &sq);
        CHECK(a == RINGLET_SUCCESS && b == RINGLET_SUCCESS, "rank %d %s round %d: irecv %s, isend %s", rank, what, k,
              ringlet_strerror(a), ringlet_strerror(b));
        if (a || b) exit(1);
        if ((k + rank) % 2) a = ringlet_wait(&sq), b = ringlet_wait(&rq);
        else b = ringlet_wait(&rq), a = ringlet_wait(&sq);
        CHECK(a == RINGLET_SUCCESS && b == RINGLET_SUCCESS, "rank %d %s round %d: send %s, recv %s", rank, what, k,
              ringlet_strerror(a), ringlet_strerror(b));
        size_t w = wrong(in, n, seed, k, 1 - rank);
        CHECK(w == 0, "rank %d %s round %d: byte %zu of %zu wrong", rank, what, k, w - 1, n);
    }
    return rl_p2p_posts() - p0;
}

/* A queued all-reduce, a blocking send or receive right behind it, then its wait. */
static void behind_collective(ringlet_comm_t c, int rank, const char *what, uint32_t seed, uint8_t *out, uint8_t *in) {
    int32_t *x = malloc(COUNT * sizeof *x), *y = malloc(COUNT * sizeof *y);
    if (!x || !y) printf("FAIL out of memory\n"), exit(1);
    for (int k = 0; k < ROUNDS / 4; k++) {
        for (int i = 0; i < COUNT; i++) x[i] = (int32_t)mix(seed + (uint32_t)(k * COUNT + i) * 2u + (uint32_t)rank);
        ringlet_request_t q;
        ringlet_result_t a = ringlet_iallreduce(x, y, COUNT, RINGLET_INT32, RINGLET_SUM, c, NULL, &q);
        CHECK(a == RINGLET_SUCCESS, "rank %d %s round %d: iallreduce %s", rank, what, k, ringlet_strerror(a));
        if (a) exit(1);
        size_t n = length(seed, k);
        fill(out, n, seed, k, 0);
        memset(in, 0xa5, n);
        ringlet_result_t b = rank == 0 ? ringlet_send(out, n, RINGLET_UINT8, 1, c, NULL)
                                       : ringlet_recv(in, n, RINGLET_UINT8, 0, c, NULL);
        a = ringlet_wait(&q);
        CHECK(a == RINGLET_SUCCESS && b == RINGLET_SUCCESS, "rank %d %s round %d: all-reduce %s, p2p %s", rank, what,
              k, ringlet_strerror(a), ringlet_strerror(b));
        for (int i = 0; i < COUNT; i++) {
            uint32_t base = seed + (uint32_t)(k * COUNT + i) * 2u;
            int32_t want = (int32_t)(mix(base) + mix(base + 1u)); /* wraps as the library's int32 sum */
            if (y[i] != want) {
                CHECK(0, "rank %d %s round %d: all-reduce element %d is %d, want %d", rank, what, k, i, y[i], want);
                break;
            }
        }
        if (rank == 1) {
            size_t w = wrong(in, n, seed, k, 0);
            CHECK(w == 0, "rank %d %s round %d: byte %zu of %zu wrong", rank, what, k, w - 1, n);
        }
    }
    free(x);
    free(y);
}

static int child(int rank, const ringlet_unique_id_t id[5], int core) {
    alarm(240);
    if (core >= 0) {
        cpu_set_t one;
        CPU_ZERO(&one);
        CPU_SET(core, &one);
        if (sched_setaffinity(0, sizeof one, &one) != 0) perror("sched_setaffinity"), exit(2);
    }
    uint8_t *out = malloc(MAXLEN), *in = malloc(MAXLEN);
    if (!out || !in) printf("FAIL out of memory\n"), exit(1);
    const char *tps[2] = {"shm", "tcp"};
    for (int t = 0; t < 2; t++) {
        ringlet_comm_t c = open_comm(id[t], rank, tps[t], "1");
        char what[64];
        snprintf(what, sizeof what, "%s blocking", tps[t]);
        unsigned long y = 0, n = blocking(c, rank, what, 11u + (uint32_t)t, out, in, &y);
        CHECK(n == 2 * ROUNDS, "rank %d %s: %lu of %d calls posted on the calling thread", rank, what, n, 2 * ROUNDS);
        if (core >= 0) CHECK(y == 0, "rank %d %s: the waits yielded %lu times on a core of their own", rank, what, y);
        snprintf(what, sizeof what, "%s non-blocking", tps[t]);
        n = nonblocking(c, rank, what, 21u + (uint32_t)t, out, in);
        CHECK(n == 2 * ROUNDS, "rank %d %s: %lu of %d calls posted on the calling thread", rank, what, n, 2 * ROUNDS);
        snprintf(what, sizeof what, "%s behind an all-reduce", tps[t]);
        behind_collective(c, rank, what, 31u + (uint32_t)t, out, in);
        printf("rank %d %s: checked\n", rank, tps[t]), fflush(stdout);
        ringlet_comm_destroy(c);
    }
    ringlet_comm_t c = open_comm(id[2], rank, "tcp", "0");
    unsigned long y = 0, n = blocking(c, rank, "tcp RINGLET_INLINE=0", 41u, out, in, &y);
    CHECK(n == 0, "rank %d RINGLET_INLINE=0: %lu calls posted on the calling thread, want 0", rank, n);
    ringlet_comm_destroy(c);
    free(out);
    free(in);
    return failures ? 1 : 0;
}

int main(void) {
    setenv("RINGLET_TIMEOUT", "60", 0);
    /* Each rank on a core of its own where two are allowed (else -1: unbound). */
    cpu_set_t all;
    int cores[2] = {-1, -1}, found = 0;
    if (sched_getaffinity(0, sizeof all, &all) == 0)
        for (int i = 0; i < CPU_SETSIZE && found < 2; i++)
            if (CPU_ISSET(i, &all)) cores[found++] = i;
    if (found < 2) cores[0] = cores[1] = -1, printf("one core allowed here: the ranks run unbound\n");
    ringlet_unique_id_t id[5];
    for (int i = 0; i < 5; i++)
        if (ringlet_get_unique_id(&id[i]) != RINGLET_SUCCESS) return printf("FAIL ringlet_get_unique_id\n"), 1;
    fflush(stdout);
    pid_t pid[2];
    for (int r = 0; r < 2; r++)
        if ((pid[r] = fork()) == 0) _exit(child(r, id, cores[r]));
    int rc = 0;
    for (int r = 0; r < 2; r++) {
        int st = 0;
        waitpid(pid[r], &st, 0);
        int code = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
        if (code) rc = 1, printf("FAIL rank %d exited with %d\n", r, code);
    }
    printf(rc ? "FAILED\n" : "OK\n");
    return rc;
}
