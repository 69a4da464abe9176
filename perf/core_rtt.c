/* How far apart two CPUs are: the round trip of one cache line between two processes, each
 * pinned to one of them, in nanoseconds (the median of 5 trials).
 *
 *   core_rtt [CPU_A CPU_B [ROUND_TRIPS]]   (default: the first two CPUs this process may
 *                                           use, 20000 round trips per trial)
 *
 * perf/compare runs it before each measurement. On a virtual machine the host may move
 * the vCPUs under the guest: two vCPUs that share a last-level cache hand a line over in
 * some tens of nanoseconds, two on different dies (or sockets) in some hundreds, and every
 * copy between the ranks on them (shared memory, loopback TCP) slows down with it. A table
 * whose passes disagree can then be read against where the vCPUs were.
 * Prints "core_rtt: cpu A <-> cpu B: X ns" and exits 0, or says why not and exits 1. */
#define _GNU_SOURCE
#include <errno.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define TRIALS 5
#define DEADLINE_S 5.0 /* a trial that takes longer has lost its partner */

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static int pin(int cpu) {
    cpu_set_t s;
    CPU_ZERO(&s);
    CPU_SET(cpu, &s);
    return sched_setaffinity(0, sizeof s, &s);
}

/* Waits for *line to reach want; 0, or -1 past the deadline or when the partner wrote
 * -2 (it could not start). */
static int wait_for(_Atomic long *line, long want, double until) {
    long v;
    for (unsigned spins = 0; (v = atomic_load_explicit(line, memory_order_acquire)) != want; spins++)
        if (v == -2 || ((spins & 0xffff) == 0 && now_s() > until)) return -1;
    return 0;
}

/* One side of the ping-pong: waits for its turn (first, first + 2, ...) and passes the
 * line on. Returns 0, or -1 when the partner stopped answering. */
static int play(_Atomic long *line, long first, long n) {
    double until = now_s() + DEADLINE_S;
    for (long v = first; v < 2 * n; v += 2) {
        if (wait_for(line, v, until) != 0) return -1;
        atomic_store_explicit(line, v + 1, memory_order_release);
    }
    return 0;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static int parse_int(const char *s, long lo, long hi, long *out) {
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi) return -1;
    *out = v;
    return 0;
}

int main(int argc, char **argv) {
    long cpu[2] = {-1, -1}, n = 20000;
    if (argc != 1 && argc != 3 && argc != 4) {
        fprintf(stderr, "usage: core_rtt [CPU_A CPU_B [ROUND_TRIPS]]\n");
        return 1;
    }
    if (argc >= 3 && (parse_int(argv[1], 0, CPU_SETSIZE - 1, &cpu[0]) || parse_int(argv[2], 0, CPU_SETSIZE - 1, &cpu[1]) ||
                      cpu[0] == cpu[1])) {
        fprintf(stderr, "core_rtt: two different CPU numbers, please (got '%s' and '%s')\n", argv[1], argv[2]);
        return 1;
    }
    if (argc == 4 && parse_int(argv[3], 1, 100000000, &n)) {
        fprintf(stderr, "core_rtt: ROUND_TRIPS must be 1..100000000 (got '%s')\n", argv[3]);
        return 1;
    }
    if (cpu[0] < 0) { /* the first two CPUs this process may run on */
        cpu_set_t s;
        if (sched_getaffinity(0, sizeof s, &s) != 0) {
            printf("core_rtt: n/a (sched_getaffinity: %s)\n", strerror(errno));
            return 1;
        }
        for (int c = 0, k = 0; c < CPU_SETSIZE && k < 2; c++)
            if (CPU_ISSET(c, &s)) cpu[k++] = c;
        if (cpu[1] < 0) {
            printf("core_rtt: n/a (this process may run on one CPU only)\n");
            return 1;
        }
    }
    /* The line, alone in its page: nothing else of either process shares it. */
    _Atomic long *line = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (line == MAP_FAILED) {
        printf("core_rtt: n/a (mmap: %s)\n", strerror(errno));
        return 1;
    }
    double ns[TRIALS];
    for (int t = 0; t < TRIALS; t++) {
        atomic_store(line, -1);
        pid_t child = fork();
        if (child < 0) {
            printf("core_rtt: n/a (fork: %s)\n", strerror(errno));
            return 1;
        }
        if (child == 0) {
            if (pin((int)cpu[1]) != 0) {
                atomic_store_explicit(line, -2, memory_order_release); /* the parent stops at once */
                _exit(2);
            }
            atomic_store_explicit(line, 0, memory_order_release); /* pinned: the parent may start */
            _exit(play(line, 1, n) == 0 ? 0 : 3);
        }
        int ok = pin((int)cpu[0]) == 0 && wait_for(line, 0, now_s() + DEADLINE_S) == 0;
        double t0 = now_s();
        ok = ok && play(line, 0, n) == 0 && wait_for(line, 2 * n, now_s() + DEADLINE_S) == 0;
        double t1 = now_s();
        int st = 0;
        if (!ok) kill(child, SIGKILL);
        waitpid(child, &st, 0);
        if (!ok || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
            printf("core_rtt: n/a (cpu %ld <-> cpu %ld: %s)\n", cpu[0], cpu[1],
                   WIFEXITED(st) && WEXITSTATUS(st) == 2 ? "cannot pin to the second CPU"
                   : !ok                                 ? "cannot pin, or the partner stopped answering"
                                                         : "the partner failed");
            return 1;
        }
        ns[t] = (t1 - t0) * 1e9 / (double)n;
    }
    qsort(ns, TRIALS, sizeof ns[0], cmp_double);
    printf("core_rtt: cpu %ld <-> cpu %ld: %.0f ns\n", cpu[0], cpu[1], ns[TRIALS / 2]);
    return 0;
}
