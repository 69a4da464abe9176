/* Unit test for waiters bound to a core of their own (comm.c's bound_alone, wait.c: a
 * TCP waiter there never yields, since a yield could only give its core to another job):
 *   - two ranks of one host over TCP (forked processes), each bound to its own core at
 *     init: the communicator says so, and 200 all-reduces of 70000 random int32 (the
 *     ring over the sockets) are bit-exact with not one yield on the calling thread;
 *     Then rank 1 starts each of 5 small all-reduces 2 ms late: a wait of rank 0 that
 *     stopped polling to sleep must have polled for RL_ALONE_SPIN_US first (so that a
 *     peer that lost its core for a time slice is met polling), not the 50 us of others;
 *   - both bound to one core: not bound alone (a yield is how the peer gets to run), and
 *     the same calls are bit-exact;
 *   - unbound: not bound alone.
 * With one core allowed, only the shared-core half runs. Exit status 0 on success.
 */
#include <inttypes.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "comm.h"
#include "ringlet.h"
#include "util.h"
#include "wait.h"

enum { CALLS = 200, COUNT = 70000 };

static int failures;

#define CHECK(cond, ...)                                                                                               \
    do {                                                                                                               \
        if (!(cond) && failures++ < 20) printf("FAIL " __VA_ARGS__), printf("\n"), fflush(stdout);                    \
    } while (0)

static void set_cores(const cpu_set_t *s) {
    if (sched_setaffinity(0, sizeof *s, s) != 0) perror("sched_setaffinity"), exit(2);
}

static void pin(int core) {
    cpu_set_t s;
    CPU_ZERO(&s);
    CPU_SET(core, &s);
    set_cores(&s);
}

/* Element i of rank r's input in call k, drawn the same way on both ranks. */
static int32_t input(uint32_t seed, int k, int i, int r) {
    uint32_t x = (seed + (uint32_t)k * 7919u) * 2654435761u ^ ((uint32_t)i * 40503u + (uint32_t)r * 0x9e3779b9u);
    x ^= x >> 15, x *= 2246822519u, x ^= x >> 13;
    return (int32_t)x;
}

/* CALLS all-reduces, each checked against the sum of both ranks' inputs; returns how many
 * times the calling thread's waits yielded meanwhile. */
static unsigned long calls(ringlet_comm_t c, int rank, uint32_t seed) {
    int32_t *in = malloc(COUNT * sizeof *in), *out = malloc(COUNT * sizeof *out);
    if (!in || !out) printf("FAIL out of memory\n"), exit(1);
    unsigned long y0 = rl_wait_yields();
    for (int k = 0; k < CALLS && !failures; k++) {
        for (int i = 0; i < COUNT; i++) in[i] = input(seed, k, i, rank);
        ringlet_result_t rc = ringlet_allreduce(in, out, COUNT, RINGLET_INT32, RINGLET_SUM, c, NULL);
        CHECK(rc == RINGLET_SUCCESS, "rank %d call %d: %s", rank, k, ringlet_strerror(rc));
        for (int i = 0; i < COUNT && !rc; i++) {
            int32_t want = (int32_t)((uint32_t)input(seed, k, i, 0) + (uint32_t)input(seed, k, i, 1));
            CHECK(out[i] == want, "rank %d call %d [%d]: %" PRId32 ", want %" PRId32, rank, k, i, out[i], want);
        }
    }
    unsigned long y = rl_wait_yields() - y0;
    free(in), free(out);
    return y;
}

/* Small all-reduces that rank 1 starts late: rank 0's calls that slept must have
 * lasted the bound-alone poll at least. */
static void late_calls(ringlet_comm_t c, int rank, uint32_t seed) {
    enum { LATE = 5, LATE_US = 2000 };
    for (int k = 0; k < LATE && !failures; k++) {
        int32_t in[3], out[3];
        for (int i = 0; i < 3; i++) in[i] = input(seed, k, i, rank);
        if (rank == 1) {
            struct timespec ts = {0, LATE_US * 1000};
            nanosleep(&ts, NULL);
        }
        unsigned long s0 = rl_wait_sleeps();
        double t0 = rl_now();
        ringlet_result_t rc = ringlet_allreduce(in, out, 3, RINGLET_INT32, RINGLET_SUM, c, NULL);
        double took = rl_now() - t0;
        unsigned long slept = rl_wait_sleeps() - s0;
        CHECK(rc == RINGLET_SUCCESS, "rank %d late call %d: %s", rank, k, ringlet_strerror(rc));
        for (int i = 0; i < 3 && !rc; i++) {
            int32_t want = (int32_t)((uint32_t)input(seed, k, i, 0) + (uint32_t)input(seed, k, i, 1));
            CHECK(out[i] == want, "rank %d late call %d [%d]: %" PRId32 ", want %" PRId32, rank, k, i, out[i], want);
        }
        if (rank == 0)
            CHECK(!slept || took >= RL_ALONE_SPIN_US * 1e-6,
                  "rank 0 late call %d: its wait slept after %.0f us (polls %d us before sleeping when bound alone)", k,
                  took * 1e6, RL_ALONE_SPIN_US);
    }
}

/* One communicator with this rank's cores set as asked (core < 0: all allowed). */
static void phase(const char *what, ringlet_unique_id_t id, int rank, int core, const cpu_set_t *all, int want_alone,
                  uint32_t seed) {
    if (core >= 0) pin(core);
    else set_cores(all);
    ringlet_comm_t c;
    ringlet_result_t rc = ringlet_comm_init_rank(&c, 2, id, rank);
    if (rc) printf("FAIL rank %d %s: init: %s\n", rank, what, ringlet_strerror(rc)), exit(1);
    CHECK(c->bound_alone == want_alone, "rank %d %s: bound_alone %d, want %d", rank, what, c->bound_alone,
          want_alone);
    unsigned long y = calls(c, rank, seed);
    if (want_alone) CHECK(y == 0, "rank %d %s: the waits yielded %lu times", rank, what, y);
    if (want_alone) late_calls(c, rank, seed + 1);
    printf("rank %d %s: %d calls checked, %lu yields\n", rank, what, CALLS, y), fflush(stdout);
    ringlet_comm_destroy(c);
}

static int child(int rank, const ringlet_unique_id_t id[3], int core_a, int core_b, const cpu_set_t *all) {
    alarm(240);
    phase("both on one core", id[0], rank, core_a, all, 0, 3);
    if (core_b >= 0) {
        phase("each on its own core", id[1], rank, rank ? core_b : core_a, all, 1, 5);
        phase("unbound", id[2], rank, -1, all, 0, 9);
    }
    return failures ? 1 : 0;
}

int main(void) {
    setenv("RINGLET_TIMEOUT", "60", 0);
    setenv("RINGLET_TRANSPORT", "tcp", 1);
    cpu_set_t all;
    if (sched_getaffinity(0, sizeof all, &all) != 0) return perror("sched_getaffinity"), 1;
    int core_a = -1, core_b = -1;
    for (int i = 0; i < CPU_SETSIZE && core_b < 0; i++)
        if (CPU_ISSET(i, &all)) *(core_a < 0 ? &core_a : &core_b) = i;
    ringlet_unique_id_t id[3];
    for (int i = 0; i < 3; i++)
        if (ringlet_get_unique_id(&id[i]) != RINGLET_SUCCESS) return printf("FAIL ringlet_get_unique_id\n"), 1;
    fflush(stdout);
    pid_t pid[2];
    for (int r = 0; r < 2; r++)
        if ((pid[r] = fork()) == 0) _exit(child(r, id, core_a, core_b, &all));
    int rc = 0;
    for (int r = 0; r < 2; r++) {
        int st = 0;
        waitpid(pid[r], &st, 0);
        int code = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
        if (code) rc = 1, printf("FAIL rank %d exited with %d\n", r, code);
    }
    if (core_b < 0) printf("one core allowed here: only the shared-core half ran\n");
    printf(rc ? "FAILED\n" : "OK\n");
    return rc;
}
