/* Unit test for the doorbell's shared core (doorbell.h, rl_doorbell_core_shared; wait.c
 * yields to a peer on its core instead of spinning where it cannot run):
 *   - two ranks of one host (forked processes, shared memory) pinned to one core each
 *     see that the other last waited there; pinned to two cores, neither does;
 *   - 3000 all-reduces of random integers on one core, then on two, bit-exact on both
 *     ranks (the waits that yield, and those that sleep at once, lose nothing).
 * Skips (77) only where this process cannot create and map a shared-memory segment of
 * the doorbell's size itself (no usable /dev/shm); where it can, a communicator without
 * a doorbell fails the test. Exit status 0 on success.
 */
#include <fcntl.h>
#include <inttypes.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "comm.h"
#include "doorbell.h"
#include "ringlet.h"

enum { CALLS = 3000, COUNT = 7 };

static int failures;

#define CHECK(cond, ...)                                                                                               \
    do {                                                                                                               \
        if (!(cond) && failures++ < 20) printf("FAIL " __VA_ARGS__), printf("\n"), fflush(stdout);                    \
    } while (0)

static void pin(int core) {
    cpu_set_t s;
    CPU_ZERO(&s);
    CPU_SET(core, &s);
    if (sched_setaffinity(0, sizeof s, &s) != 0) perror("sched_setaffinity"), exit(2);
}

/* CALLS all-reduces of COUNT pseudo-random int32, each checked against the sum of both
 * ranks' inputs (every rank draws both from the same seed). */
static void calls(ringlet_comm_t c, int rank, uint32_t seed) {
    for (int k = 0; k < CALLS; k++) {
        int32_t in[COUNT], out[COUNT], want[COUNT];
        for (int i = 0; i < COUNT; i++) {
            uint32_t a = (seed + (uint32_t)k) * 2654435761u + (uint32_t)i * 40503u, b = a ^ 0x9e3779b9u;
            int32_t x[2] = {(int32_t)(a >> 3), (int32_t)(b >> 5)};
            in[i] = x[rank];
            want[i] = (int32_t)((uint32_t)x[0] + (uint32_t)x[1]);
        }
        ringlet_result_t rc = ringlet_allreduce(in, out, COUNT, RINGLET_INT32, RINGLET_SUM, c, NULL);
        CHECK(rc == RINGLET_SUCCESS, "rank %d call %d: %s", rank, k, ringlet_strerror(rc));
        if (rc) return;
        for (int i = 0; i < COUNT; i++)
            CHECK(out[i] == want[i], "rank %d call %d [%d]: %" PRId32 ", want %" PRId32, rank, k, i, out[i], want[i]);
    }
}

/* After a call (each rank's waits record its core, and the board maps the peer's
 * doorbell), this rank records its core and a second call makes sure the peer did too. */
static int shared_now(ringlet_comm_t c, int rank) {
    calls(c, rank, 1);
    rl_doorbell_core_shared(c);
    int32_t x = 1, y = 0;
    CHECK(ringlet_allreduce(&x, &y, 1, RINGLET_INT32, RINGLET_SUM, c, NULL) == RINGLET_SUCCESS && y == 2,
          "rank %d: the sync call", rank);
    return rl_doorbell_core_shared(c);
}

/* Whether this process can create, size and map a shared-memory segment (the doorbell
 * takes a page of one per rank). */
static int shm_usable(void) {
    char name[64];
    snprintf(name, sizeof name, "/ringlet-test-doorbell-%d", (int)getpid());
    int fd = shm_open(name, O_CREAT | O_EXCL | O_RDWR, 0600);
    if (fd < 0) return 0;
    shm_unlink(name);
    void *m = posix_fallocate(fd, 0, 4096) == 0 ? mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0) : MAP_FAILED;
    close(fd);
    if (m == MAP_FAILED) return 0;
    munmap(m, 4096);
    return 1;
}

static int child(int rank, ringlet_unique_id_t id, int core_a, int core_b) {
    alarm(240);
    pin(core_a);
    ringlet_comm_t c;
    ringlet_result_t rc = ringlet_comm_init_rank(&c, 2, id, rank);
    if (rc) return printf("rank %d: init: %s\n", rank, ringlet_strerror(rc)), 1;
    if (!c->db) {
        ringlet_comm_destroy(c);
        if (shm_usable()) return printf("FAIL rank %d: no shared doorbell, though /dev/shm works here\n", rank), 1;
        printf("SKIP: no usable /dev/shm here, so no shared doorbell\n");
        return 77;
    }
    CHECK(shared_now(c, rank) == 1, "rank %d: both ranks on core %d, but no peer seen there", rank, core_a);
    calls(c, rank, 7);
    if (core_b >= 0) {
        pin(rank ? core_b : core_a);
        CHECK(shared_now(c, rank) == 0, "rank %d: ranks on cores %d and %d, but a peer seen on this one", rank, core_a,
              core_b);
        calls(c, rank, 11);
    }
    ringlet_comm_destroy(c);
    return failures ? 1 : 0;
}

int main(void) {
    setenv("RINGLET_TIMEOUT", "60", 0);
    cpu_set_t allowed;
    if (sched_getaffinity(0, sizeof allowed, &allowed) != 0) return perror("sched_getaffinity"), 1;
    int core_a = -1, core_b = -1;
    for (int i = 0; i < CPU_SETSIZE && core_b < 0; i++)
        if (CPU_ISSET(i, &allowed)) *(core_a < 0 ? &core_a : &core_b) = i;
    ringlet_unique_id_t id;
    if (ringlet_get_unique_id(&id) != RINGLET_SUCCESS) return printf("FAIL ringlet_get_unique_id\n"), 1;
    fflush(stdout);
    pid_t pid[2];
    for (int r = 0; r < 2; r++)
        if ((pid[r] = fork()) == 0) _exit(child(r, id, core_a, core_b));
    int rc = 0, skipped = 0;
    for (int r = 0; r < 2; r++) {
        int st = 0;
        waitpid(pid[r], &st, 0);
        int code = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
        if (code == 77) skipped++;
        else if (code) rc = 1, printf("FAIL rank %d exited with %d\n", r, code);
    }
    if (!rc && skipped) return 77;
    if (core_b < 0) printf("one core allowed here: only the shared-core half ran\n");
    printf(rc ? "FAILED\n" : "OK\n");
    return rc;
}
