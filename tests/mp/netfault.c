/* One rank of tests/mp/netfault.sh: collectives over a network that delays, drops,
 * reorders or rate-limits packets, or that is cut, or with a peer stopped. Each rank
 * runs in its own network namespace with RINGLET_TRANSPORT=tcp and its own
 * RINGLET_HOSTID; the script starts them (RANK, WORLD_SIZE, MASTER_ADDR, ...) and
 * injects the fault.
 *
 *   netfault --mode work --sync DIR [--iters N] [--count N] [--seed S]
 *   netfault --mode fault --fault stop|cut --victim V --sync DIR [--mib M] [--bound S]
 *
 * work: N iterations (default 3) of: allreduce int32 sum of 1001 elements (the one-shot
 * path), allreduce int64 sum of `count` elements (default 300001; the ring) and a float64
 * max allreduce of its span over the ranks, allgather
 * uint8 of count/3 + it elements per rank, broadcast int32 of count/2 elements from
 * root it % P, reduce_scatter uint32 max of count/4 + 1 elements per rank, a barrier;
 * then 5 rounds of ping-pong (send/recv of one int64) between ranks 2k and 2k+1.
 * Every input element is a hash of (seed, iteration, collective, rank, index), so each
 * rank computes every result itself and checks it bit-exact; nothing else is allowed.
 * Prints "rank R: OK: N collectives checked in T s (large allreduce span: min X ms; round
 * trip to rank R+1: min Y ms)" (the round trip on even ranks) or
 * "rank R: FAIL ..." lines; exits 0 iff every result was right.
 *
 * fault: a warm-up barrier (operation #1), then an allreduce int32 sum of M MiB
 * (default 16; operation #2) that every rank starts and waits for. The victim arms the
 * library's fault injection RINGLET_FAULT_STOP=2:send:1: it SIGSTOPs itself just
 * before posting its second send of the allreduce, so only its first chunk can have
 * left it and every survivor provably still needs its data (each element of the result
 * needs every rank's input). The script then either leaves it stopped (--fault stop:
 * a hung peer) or cuts its link and continues it (--fault cut). Verdicts:
 *   a survivor: the wait fails with RINGLET_ERR_REMOTE or RINGLET_ERR_TIMEOUT within
 *     --bound seconds (default 15) of the call, with a message naming "rank V" and
 *     "allreduce", the async error set and the request cleared;
 *   the victim of a cut: the same, naming the operation and some other rank (the one it
 *     lost); its time includes the time it was stopped, so the script bounds it;
 *   the victim of a stop, continued after every survivor has gone: the wait fails (any
 *     message; its peers are gone), and it exits.
 * Each prints "rank R: OK failed in X s: <message>" or "rank R: FAIL ...". Then every
 * rank still running (all but a stopped victim) marks itself done in DIR and waits
 * (60 s at most) for the others, so that nobody's exit breaks a link while another
 * still waits for its verdict; then abort (must return), destroy, exit 0 iff OK.
 */
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <time.h>
#include <unistd.h>

#include "ringlet.h"

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static uint64_t mix(uint64_t x) {
    x += 0x9E3779B97F4A7C15ULL;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
    return x ^ (x >> 31);
}

/* Input element i of rank r in collective `coll` of iteration `it`. */
static uint64_t gen(uint64_t seed, int it, int coll, int r, size_t i) {
    return mix(seed ^ mix(((uint64_t)it << 40) ^ ((uint64_t)coll << 32) ^ ((uint64_t)r << 24) ^ mix(i)));
}

static int me = -1, P = 0, failures = 0;

/* A wrong element: what it is, where, what came, what should have. */
static void fail(const char *what, size_t at, long long got, long long want) {
    if (failures++ < 20) printf("rank %d: FAIL %s: element %zu is %lld, want %lld\n", me, what, at, got, want);
}

static int call_ok(ringlet_comm_t comm, ringlet_result_t rc, const char *what) {
    if (rc == RINGLET_SUCCESS) return 1;
    printf("rank %d: FAIL %s returned %d (%s): %s\n", me, what, (int)rc, ringlet_strerror(rc),
           ringlet_comm_last_error(comm));
    failures++;
    return 0;
}

static int work(ringlet_comm_t comm, int iters, size_t count, uint64_t seed) {
    const size_t small = 1001, nag = count / 3 + (size_t)iters, nbc = count / 2, nrs = count / 4 + 1;
    int32_t *a32 = malloc(small * sizeof *a32);
    int64_t *a64 = malloc(count * sizeof *a64), *b64 = malloc(count * sizeof *b64);
    uint8_t *ag = malloc(nag * (size_t)P);
    int32_t *bc = malloc(nbc * sizeof *bc);
    uint32_t *rs = malloc(nrs * (size_t)P * sizeof *rs), *rso = malloc(nrs * sizeof *rso);
    if (!a32 || !a64 || !b64 || !ag || !bc || !rs || !rso) {
        printf("rank %d: FAIL out of memory\n", me);
        return 1;
    }
    int ncoll = 0;
    double t0 = now_s(), best = 1e9;
    for (int it = 0; it < iters && failures == 0; it++) {
        /* 1. allreduce int32 sum, small (one-shot path), in place. Inputs < 2^24: no overflow. */
        for (size_t i = 0; i < small; i++) a32[i] = (int32_t)(gen(seed, it, 1, me, i) & 0x00ffffff);
        if (call_ok(comm, ringlet_allreduce(a32, a32, small, RINGLET_INT32, RINGLET_SUM, comm, NULL), "allreduce small"))
            for (size_t i = 0; i < small; i++) {
                int32_t want = 0;
                for (int r = 0; r < P; r++) want += (int32_t)(gen(seed, it, 1, r, i) & 0x00ffffff);
                if (a32[i] != want) fail("allreduce int32", i, a32[i], want);
            }
        ncoll++;

        /* 2. allreduce int64 sum, large (ring), out of place. Inputs < 2^56. */
        for (size_t i = 0; i < count; i++) a64[i] = (int64_t)(gen(seed, it, 2, me, i) >> 8);
        double ta = now_s();
        ringlet_result_t rc = ringlet_allreduce(a64, b64, count, RINGLET_INT64, RINGLET_SUM, comm, NULL);
        double tb = now_s();
        if (call_ok(comm, rc, "allreduce large"))
            for (size_t i = 0; i < count; i++) {
                int64_t want = 0;
                for (int r = 0; r < P; r++) want += (int64_t)(gen(seed, it, 2, r, i) >> 8);
                if (b64[i] != want) fail("allreduce int64", i, b64[i], want);
                if (a64[i] != (int64_t)(gen(seed, it, 2, me, i) >> 8))
                    fail("allreduce int64: the sendbuf changed", i, a64[i],
                         (long long)(gen(seed, it, 2, me, i) >> 8));
            }
        ncoll++;
        /* The allreduce's span: from the first rank's call to the last rank's return (one
         * monotonic clock: the ranks share the host). A rank's own time can be shorter than
         * its bytes need at a rate limit (its predecessor started earlier and sent ahead);
         * the span cannot: every byte a rank sends is needed by its receiver before that one
         * returns, and no rank sends before the first call. */
        double span[2] = {-ta, tb};
        if (call_ok(comm, ringlet_allreduce(span, span, 2, RINGLET_FLOAT64, RINGLET_MAX, comm, NULL), "allreduce span") &&
            span[0] + span[1] < best)
            best = span[0] + span[1];
        ncoll++;

        /* 3. allgather uint8, in place, an odd count. */
        memset(ag, 0xEE, nag * (size_t)P);
        for (size_t i = 0; i < nag; i++) ag[(size_t)me * nag + i] = (uint8_t)gen(seed, it, 3, me, i);
        if (call_ok(comm, ringlet_allgather(ag + (size_t)me * nag, ag, nag, RINGLET_UINT8, comm, NULL), "allgather"))
            for (size_t i = 0; i < nag * (size_t)P; i++) {
                uint8_t want = (uint8_t)gen(seed, it, 3, (int)(i / nag), i % nag);
                if (ag[i] != want) fail("allgather uint8", i, ag[i], want);
            }
        ncoll++;

        /* 4. broadcast int32 from a rotating root. */
        int root = it % P;
        for (size_t i = 0; i < nbc; i++) bc[i] = me == root ? (int32_t)gen(seed, it, 4, root, i) : -1;
        if (call_ok(comm, ringlet_broadcast(bc, bc, nbc, RINGLET_INT32, root, comm, NULL), "broadcast"))
            for (size_t i = 0; i < nbc; i++) {
                int32_t want = (int32_t)gen(seed, it, 4, root, i);
                if (bc[i] != want) fail("broadcast int32", i, bc[i], want);
            }
        ncoll++;

        /* 5. reduce_scatter uint32 max, out of place. */
        for (size_t i = 0; i < nrs * (size_t)P; i++) rs[i] = (uint32_t)gen(seed, it, 5, me, i);
        memset(rso, 0xEE, nrs * sizeof *rso);
        if (call_ok(comm, ringlet_reduce_scatter(rs, rso, nrs, RINGLET_UINT32, RINGLET_MAX, comm, NULL),
                    "reduce_scatter"))
            for (size_t i = 0; i < nrs; i++) {
                uint32_t want = 0;
                for (int r = 0; r < P; r++) {
                    uint32_t v = (uint32_t)gen(seed, it, 5, r, (size_t)me * nrs + i);
                    if (v > want) want = v;
                }
                if (rso[i] != want) fail("reduce_scatter uint32 max", i, rso[i], want);
            }
        ncoll++;

        call_ok(comm, ringlet_barrier(comm, NULL), "barrier");
        ncoll++;
    }
    /* Ping-pong between ranks 2k and 2k+1: the even rank's round trip needs its message
     * to cross the network and the answer to come back, so it takes at least twice the
     * one-way delay, however fast the rest is. */
    double rtt = 0;
    int partner = me ^ 1;
    for (int k = 0; k < 5 && failures == 0 && partner < P; k++) {
        int64_t ping = (int64_t)gen(seed, k, 6, me, 0), want = (int64_t)gen(seed, k, 6, partner, 0), got = 0;
        if (me % 2 == 0) {
            double ta = now_s();
            if (call_ok(comm, ringlet_send(&ping, 1, RINGLET_INT64, partner, comm, NULL), "send") &&
                call_ok(comm, ringlet_recv(&got, 1, RINGLET_INT64, partner, comm, NULL), "recv")) {
                double d = now_s() - ta;
                if (k == 0 || d < rtt) rtt = d;
                if (got != want) fail("ping-pong", 0, got, want);
            }
        } else if (call_ok(comm, ringlet_recv(&got, 1, RINGLET_INT64, partner, comm, NULL), "recv") &&
                   call_ok(comm, ringlet_send(&ping, 1, RINGLET_INT64, partner, comm, NULL), "send")) {
            if (got != want) fail("ping-pong", 0, got, want);
        }
    }
    if (failures == 0) {
        printf("rank %d: OK: %d collectives checked in %.2f s (large allreduce span: min %.1f ms", me, ncoll, now_s() - t0,
               best * 1e3);
        if (me % 2 == 0 && partner < P) printf("; round trip to rank %d: min %.1f ms", partner, rtt * 1e3);
        printf(")\n");
    }
    free(a32), free(a64), free(b64), free(ag), free(bc), free(rs), free(rso);
    return failures != 0;
}

/* Marks this rank done in dir and waits until `count` ranks are. */
static void meet(const char *dir, int count) {
    char path[4096];
    snprintf(path, sizeof path, "%s/done.%d", dir, me);
    int fd = open(path, O_CREAT | O_WRONLY, 0600);
    if (fd >= 0) close(fd);
    const double until = now_s() + 60.0;
    for (;;) {
        int n = 0;
        for (int r = 0; r < P; r++) {
            snprintf(path, sizeof path, "%s/done.%d", dir, r);
            n += access(path, F_OK) == 0;
        }
        if (n >= count) return;
        if (now_s() > until) {
            printf("rank %d: only %d of %d ranks reached the end within 60 s; leaving anyway\n", me, n, count);
            return;
        }
        struct timespec ts = {0, 10 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
}

/* Whether msg names "rank K" for some K other than `not`. */
static int names_other_rank(const char *msg, int not) {
    for (const char *p = strstr(msg, "rank "); p; p = strstr(p + 1, "rank ")) {
        int k;
        if (sscanf(p + 5, "%d", &k) == 1 && k != not && k >= 0 && k < P) return 1;
    }
    return 0;
}

static int fault(ringlet_comm_t comm, const char *kind, int victim, long mib, double bound, const char *dir) {
    const int stop = strcmp(kind, "stop") == 0;
    const size_t n = ((size_t)mib << 20) / sizeof(int32_t);
    int32_t *buf = malloc(n * sizeof *buf);
    if (!buf) {
        printf("rank %d: FAIL out of memory\n", me);
        return 1;
    }
    for (size_t i = 0; i < n; i++) buf[i] = (int32_t)(i % 1000) + me;

    ringlet_result_t rc = ringlet_barrier(comm, NULL); /* operation #1: every connection up */
    if (rc != RINGLET_SUCCESS) {
        printf("rank %d: FAIL warm-up barrier returned %d: %s\n", me, (int)rc, ringlet_comm_last_error(comm));
        return 1;
    }
    ringlet_request_t req = NULL;
    double t0 = now_s();
    rc = ringlet_iallreduce(buf, buf, n, RINGLET_INT32, RINGLET_SUM, comm, NULL, &req);
    if (rc != RINGLET_SUCCESS) {
        printf("rank %d: FAIL starting the allreduce returned %d: %s\n", me, (int)rc, ringlet_comm_last_error(comm));
        return 1;
    }
    rc = ringlet_wait(&req);
    double t1 = now_s();
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", ringlet_comm_last_error(comm));
    /* For a victim this includes the time it was stopped: the script bounds its exit. */
    double dt = t1 - t0;
    char why[512] = "";
    char want_rank[32];
    snprintf(want_rank, sizeof want_rank, "rank %d", victim);
    if (rc == RINGLET_SUCCESS) {
        snprintf(why, sizeof why, "the allreduce succeeded, though rank %d's data cannot all have arrived", victim);
    } else if (me == victim && stop) {
        /* Continued after the survivors left: any error will do. */
    } else if (rc != RINGLET_ERR_REMOTE && rc != RINGLET_ERR_TIMEOUT) {
        snprintf(why, sizeof why, "result %d (%s), want RINGLET_ERR_REMOTE or RINGLET_ERR_TIMEOUT", (int)rc,
                 ringlet_strerror(rc));
    } else if (!strstr(msg, "allreduce")) {
        snprintf(why, sizeof why, "the message does not name the operation 'allreduce'");
    } else if (me != victim && !strstr(msg, want_rank)) {
        snprintf(why, sizeof why, "the message does not name '%s'", want_rank);
    } else if (me == victim && !names_other_rank(msg, me)) {
        snprintf(why, sizeof why, "the message names no rank it lost");
    } else if (me != victim && dt > bound) {
        snprintf(why, sizeof why, "took %.2f s, want at most %.0f s", dt, bound);
    } else if (req != NULL) {
        snprintf(why, sizeof why, "ringlet_wait left *request non-NULL");
    } else if (ringlet_comm_get_async_error(comm) == RINGLET_SUCCESS) {
        snprintf(why, sizeof why, "ringlet_comm_get_async_error is still success after the failure");
    }
    const int ok = why[0] == 0;
    const char *role = me != victim ? "survivor" : stop ? "stopped victim, continued," : "cut victim";
    if (ok)
        printf("rank %d: OK %s failed in %.2f s: %s\n", me, role, dt, msg);
    else
        printf("rank %d: FAIL %s after %.2f s: %s; code %d (%s), message: %s\n", me, role, dt, why, (int)rc,
               ringlet_strerror(rc), msg);
    if (!(me == victim && stop)) meet(dir, stop ? P - 1 : P);
    double ta = now_s();
    ringlet_result_t arc = ringlet_comm_abort(comm);
    double tb = now_s();
    ringlet_result_t drc = ringlet_comm_destroy(comm);
    printf("rank %d: abort returned %d in %.2f s, destroy returned %d in %.2f s\n", me, (int)arc, tb - ta, (int)drc,
           now_s() - tb);
    free(buf);
    return !ok;
}

int main(int argc, char **argv) {
    const char *mode = NULL, *kind = NULL, *dir = NULL;
    int iters = 3, victim = -1;
    long mib = 16;
    size_t count = 300001;
    double bound = 15;
    uint64_t seed = 20240613;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v) mode = NULL, i = argc;
        else if (strcmp(a, "--mode") == 0) mode = v, i++;
        else if (strcmp(a, "--fault") == 0) kind = v, i++;
        else if (strcmp(a, "--sync") == 0) dir = v, i++;
        else if (strcmp(a, "--iters") == 0) iters = atoi(v), i++;
        else if (strcmp(a, "--count") == 0) count = strtoul(v, NULL, 10), i++;
        else if (strcmp(a, "--seed") == 0) seed = strtoull(v, NULL, 10), i++;
        else if (strcmp(a, "--victim") == 0) victim = atoi(v), i++;
        else if (strcmp(a, "--mib") == 0) mib = atol(v), i++;
        else if (strcmp(a, "--bound") == 0) bound = atof(v), i++;
        else mode = NULL, i = argc;
    }
    int work_mode = mode && strcmp(mode, "work") == 0;
    if (!mode || !dir || (!work_mode && strcmp(mode, "fault") != 0) || iters < 1 || count < 16 ||
        (!work_mode && (!kind || (strcmp(kind, "stop") != 0 && strcmp(kind, "cut") != 0) || victim < 0 || mib < 1))) {
        fprintf(stderr, "usage: netfault --mode work --sync DIR [--iters N] [--count N] [--seed S]\n"
                        "       netfault --mode fault --fault stop|cut --victim V --sync DIR [--mib M] [--bound S]\n");
        return 2;
    }
    /* If the script dies without cleaning up (SIGKILL), so does this process, even a
     * stopped one. */
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    setvbuf(stdout, NULL, _IOLBF, 0);
    const char *rank_env = getenv("RANK");
    if (!work_mode && rank_env && atoi(rank_env) == victim) setenv("RINGLET_FAULT_STOP", "2:send:1", 1);

    ringlet_comm_t comm = NULL;
    ringlet_result_t rc = ringlet_comm_init_env(&comm);
    if (rc != RINGLET_SUCCESS) {
        printf("rank %s: FAIL ringlet_comm_init_env returned %d: %s\n", rank_env ? rank_env : "?", (int)rc,
               ringlet_comm_last_error(NULL));
        return 1;
    }
    ringlet_comm_rank(comm, &me);
    ringlet_comm_size(comm, &P);
    if (!work_mode && victim >= P) {
        printf("rank %d: FAIL victim %d out of range for %d ranks\n", me, victim, P);
        return 1;
    }
    if (!work_mode) return fault(comm, kind, victim, mib, bound, dir);
    int bad = work(comm, iters, count, seed);
    rc = ringlet_comm_destroy(comm);
    if (rc != RINGLET_SUCCESS) {
        printf("rank %d: FAIL destroy returned %d: %s\n", me, (int)rc, ringlet_comm_last_error(NULL));
        bad = 1;
    }
    return bad;
}
