/* A program written for NCCL (ringlet's nccl.h), linked to ringlet's libnccl.so.2, run by
 * ringlet-run (RANK, WORLD_SIZE; rank 0 hands the unique id over in a file of --dir, by
 * default a folder of the job in $TMPDIR or /tmp, and removes it once every rank joined).
 * Buffers are host memory or (--memory device) memory from ncclMemAlloc, filled and
 * read through the device layer; calls use stream 0. Random inputs (small integers, so
 * that every float result is exact); every result is checked byte for byte.
 *
 *   nccl_api --case all|fault|abortcall|initall|pairs|abortinit|threads [--memory host|device] [--count N]
 *            [--dir D]
 *
 *   all      a non-blocking communicator (init polled through ncclCommGetAsyncError) and
 *            a blocking one from ncclCommSplit: all-reduce in every datatype with sum,
 *            prod, max, min (avg in the float types), broadcast and ncclBcast, reduce,
 *            all-gather, reduce-scatter, all-to-all, gather, scatter at every root, a
 *            group of sends and receives with every peer, a group of collectives; split
 *            by parity with keys reversed and NCCL_SPLIT_NOCOLOR; a bad split argument on
 *            one rank (a negative color; a NULL newcomm in a group) failing every rank's
 *            split, naming it; pre-multiplied sums (host
 *            scalar; device scalar on device memory); float8 refused; register and
 *            deregister; the calls ringlet does not provide; NCCL 2.28's device API (teams
 *            from the communicator, ncclDevCommCreate refused); finalize, destroy.
 *   fault    rank 1 aborts while the others call (rank 2 only once it saw rank 1 gone):
 *            their non-blocking all-reduce ends in ncclRemoteError through ncclCommGetAsyncError, their blocking one returns it,
 *            and ncclGetLastError names rank 1, for the communicator and, from another
 *            thread, for the process (ncclGetLastError(NULL), as PyTorch's watchdog asks).
 *   abortcall (2 ranks) on rank 0, a thread waits in a blocking all-reduce rank 1 never
 *            joins, then in a grouped one (waiting in ncclGroupEnd), and the main thread
 *            aborts the communicator meanwhile (as PyTorch's watchdog does): the abort
 *            returns, the call returns an error, and nothing is used after it was freed
 *            (the sanitizer builds see that; the main thread aborts once the layer counts
 *            the call under way: an abort before it began would free the handle the late
 *            call reads).
 *   initall  one process: ncclCommInitAll with 3 ranks, a grouped all-reduce over them,
 *            destroyed one by one. With NCCL_COMM_BLOCKING=0 they are non-blocking: one
 *            thread issues an all-reduce on each outside a group (each returns
 *            ncclInProgress; a blocking one would wait for the others until the deadline;
 *            nccl.sh runs this without a device backend, where stream 0 would order them).
 *   pairs    two ranks per process, both made by one thread (ncclCommInitRank in a
 *            group); grouped all-reduce, broadcast and sends over both; split in a group
 *            (by parity, keys reversed; then with NCCL_SPLIT_NOCOLOR) and an all-reduce
 *            over the halves; everything destroyed one by one.
 *   abortinit one process: a non-blocking init as rank 0 of 2 whose rank 1 never comes;
 *            ncclCommGetAsyncError says ncclInProgress, then ncclCommAbort must stop the
 *            init and return (within 5 s; RINGLET_TIMEOUT is far longer in the test).
 *            Before the abort, a child forked from the process: its calls on the
 *            communicator (async error, an all-reduce, destroy) fail with
 *            ncclInvalidUsage saying it forked, none waiting for the parent's init.
 *   threads  one process: 3 ranks made by ncclCommInitRank on threads of their own, split
 *            there; this thread runs grouped all-reduces on them and destroys the 6
 *            handles one by one, within RINGLET_TIMEOUT / 2 (a destroy inside a group
 *            with a call on the communicator is refused).
 * Prints "nccl_api: rank R of P: N checks, F failed"; exit 0 iff none failed.
 */
#include <errno.h>
#include <pthread.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "device.h"
#include "ringlet.h" /* ringlet_get_device: the device a host-memory communicator has */
/* By path: in a CUDA build the toolkit's include folder comes before src/nccl on the
 * command line, and its nccl.h (NVIDIA's, without the device API's host calls) would be
 * found first; this program is written against ringlet's. */
#include "../../src/nccl/nccl.h"
#include "../../src/nccl/shim.h" /* abortcall: a call counted under way on a handle (white-box) */

static int g_rank, g_P;
static long g_checks, g_failed;
static const rl_device_ops *D;
static size_t g_N = 10007;
static const char *g_dir = NULL; /* --dir, or a folder in $TMPDIR (main) */

#define FAIL(...)                                                                                                      \
    do {                                                                                                               \
        g_failed++;                                                                                                    \
        if (g_failed < 30) {                                                                                           \
            printf("FAIL rank %d: ", g_rank);                                                                          \
            printf(__VA_ARGS__);                                                                                       \
            printf("\n");                                                                                              \
        }                                                                                                              \
    } while (0)

/* A call's result must be one of two codes (the second -1 if only one will do). */
#define EXPECT(call, want, alt)                                                                                        \
    do {                                                                                                               \
        ncclResult_t r_ = (call);                                                                                      \
        g_checks++;                                                                                                    \
        if (r_ != (want) && (int)r_ != (alt))                                                                          \
            FAIL("line %d: %s returned %d (%s: %s), expected %d", __LINE__, #call, (int)r_, ncclGetErrorString(r_),   \
                 ncclGetLastError(NULL), (int)(want));                                                                 \
    } while (0)
#define OK(call) EXPECT(call, ncclSuccess, -1)

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static uint64_t mix(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
static int is_unsigned(ncclDataType_t d) { return d == ncclUint8 || d == ncclUint32 || d == ncclUint64; }
/* Element i of rank r in case k: small integers ([-3, 3], unsigned [0, 3]). */
static int val(int r, int k, size_t i, ncclDataType_t d) {
    int v = (int)(mix((uint64_t)r * 1000003u + (uint64_t)k * 7919u + i) % 7) - 3;
    return is_unsigned(d) ? (v < 0 ? -v : v) : v;
}

static size_t dsize(ncclDataType_t d) {
    static const size_t s[] = {1, 1, 4, 4, 8, 8, 2, 4, 8, 2};
    return s[d];
}
static uint16_t f2h(float f) { /* exact for small integers */
    uint32_t x;
    memcpy(&x, &f, 4);
    if (!(x & 0x7fffffffu)) return (uint16_t)((x >> 16) & 0x8000u);
    uint32_t e = ((x >> 23) & 0xff) - 127 + 15;
    return (uint16_t)(((x >> 16) & 0x8000u) | (e << 10) | ((x >> 13) & 0x3ffu));
}
/* Writes the integer v as element i of type d. */
static void enc(void *p, size_t i, ncclDataType_t d, long long v) {
    switch (d) {
    case ncclInt8: ((int8_t *)p)[i] = (int8_t)v; break;
    case ncclUint8: ((uint8_t *)p)[i] = (uint8_t)v; break;
    case ncclInt32: ((int32_t *)p)[i] = (int32_t)v; break;
    case ncclUint32: ((uint32_t *)p)[i] = (uint32_t)v; break;
    case ncclInt64: ((int64_t *)p)[i] = (int64_t)v; break;
    case ncclUint64: ((uint64_t *)p)[i] = (uint64_t)v; break;
    case ncclFloat16: ((uint16_t *)p)[i] = f2h((float)v); break;
    case ncclFloat32: ((float *)p)[i] = (float)v; break;
    case ncclFloat64: ((double *)p)[i] = (double)v; break;
    case ncclBfloat16: {
        float f = (float)v;
        uint32_t x;
        memcpy(&x, &f, 4);
        ((uint16_t *)p)[i] = (uint16_t)(x >> 16);
        break;
    }
    default: break;
    }
}

/* ---- buffers: host memory, or device memory from ncclMemAlloc ---- */
static void *balloc(size_t bytes) {
    void *p = NULL;
    if (D) {
        if (ncclMemAlloc(&p, bytes + 8) != ncclSuccess) {
            printf("FAIL rank %d: ncclMemAlloc: %s\n", g_rank, ncclGetLastError(NULL));
            exit(1);
        }
    } else if (!(p = calloc(1, bytes + 8))) {
        exit(1);
    }
    return p;
}
static void bfree(void *p) {
    if (D) ncclMemFree(p);
    else free(p);
}
static void sync_default(void) {
    if (D && D->stream_sync((rl_dev_stream_t)(void *)1) != RL_DEV_OK) FAIL("stream sync: %s", rl_dev_error());
}
static void put(void *dst, const void *src, size_t bytes) {
    if (!bytes) return;
    if (!D) {
        memcpy(dst, src, bytes);
        return;
    }
    if (D->memcpy_async(dst, src, bytes, (rl_dev_stream_t)(void *)1) != RL_DEV_OK) FAIL("copy in: %s", rl_dev_error());
    sync_default();
}
static void get(void *dst, const void *src, size_t bytes) {
    if (!bytes) return;
    sync_default();
    if (!D) {
        memcpy(dst, src, bytes);
        return;
    }
    if (D->memcpy_async(dst, src, bytes, (rl_dev_stream_t)(void *)1) != RL_DEV_OK) FAIL("copy out: %s", rl_dev_error());
    sync_default();
}

/* Non-blocking communicators: a call returns ncclInProgress or ncclSuccess; then the
 * async error is polled (deadline 120 s) until it settles, and must be ncclSuccess. */
static ncclResult_t settle(ncclComm_t c) {
    ncclResult_t a = ncclInProgress;
    double t0 = now();
    while (now() - t0 < 120) {
        if (ncclCommGetAsyncError(c, &a) != ncclSuccess) return ncclInternalError;
        if (a != ncclInProgress) return a;
        usleep(200);
    }
    return ncclInProgress;
}
/* ncclCommSplit, and where it runs on (a non-blocking parent's split outside a group says
 * ncclInProgress, as NCCL's), its end through the new communicator. */
static ncclResult_t split_settled(ncclComm_t c, int color, int key, ncclComm_t *s, ncclConfig_t *cfg) {
    ncclResult_t rc = ncclCommSplit(c, color, key, s, cfg);
    if (rc == ncclInProgress) rc = s && *s ? settle(*s) : ncclSuccess;
    return rc;
}
#define NB(comm, call)                                                                                                 \
    do {                                                                                                               \
        EXPECT(call, ncclInProgress, ncclSuccess);                                                                     \
        OK(settle(comm));                                                                                              \
    } while (0)

/* Compares got (bytes) with want; names the case. */
static void check_bytes(const char *what, const void *got, const void *want, size_t n, size_t es) {
    g_checks += (long)n;
    for (size_t i = 0; i < n; i++)
        if (memcmp((const char *)got + i * es, (const char *)want + i * es, es)) {
            FAIL("%s: element %zu of %zu differs", what, i, n);
            return;
        }
}

/* ---- all-reduce: every datatype and op ---- */
static void test_allreduce_types(ncclComm_t c, int blocking) {
    size_t n = g_N;
    static const ncclRedOp_t ops[] = {ncclSum, ncclProd, ncclMax, ncclMin, ncclAvg};
    for (int d = 0; d < 10; d++) {
        ncclDataType_t dt = (ncclDataType_t)d;
        size_t es = dsize(dt);
        unsigned char *in = malloc(n * es), *want = malloc(n * es), *got = malloc(n * es);
        void *sb = balloc(n * es), *rb = balloc(n * es);
        for (int oi = 0; oi < 5; oi++) {
            ncclRedOp_t op = ops[oi];
            int isfloat = dt == ncclFloat16 || dt == ncclFloat32 || dt == ncclFloat64 || dt == ncclBfloat16;
            if (op == ncclAvg && !isfloat) continue;
            int k = d * 10 + oi;
            for (size_t i = 0; i < n; i++) {
                long long acc = 0;
                for (int r = 0; r < g_P; r++) {
                    long long v = val(r, k, i, dt) * (op == ncclAvg ? g_P : 1);
                    if (r == 0) acc = v;
                    else if (op == ncclSum || op == ncclAvg) acc += v;
                    else if (op == ncclProd) acc *= v;
                    else if (op == ncclMax) acc = v > acc ? v : acc;
                    else acc = v < acc ? v : acc;
                }
                if (op == ncclAvg) acc /= g_P; /* exact: every input is a multiple of P */
                enc(in, i, dt, val(g_rank, k, i, dt) * (op == ncclAvg ? g_P : 1));
                enc(want, i, dt, acc);
                if (isfloat && op == ncclProd && acc == 0) {
                    /* A float product that is zero is -0 when an odd number of factors is negative. */
                    int neg = 0;
                    for (int r = 0; r < g_P; r++) neg += val(r, k, i, dt) < 0;
                    if (neg & 1) ((unsigned char *)want)[(i + 1) * es - 1] |= 0x80; /* the sign bit (little endian) */
                }
            }
            put(sb, in, n * es);
            int inplace = oi & 1;
            void *dst = inplace ? sb : rb;
            if (blocking) OK(ncclAllReduce(sb, dst, n, dt, op, c, NULL));
            else NB(c, ncclAllReduce(sb, dst, n, dt, op, c, NULL));
            get(got, dst, n * es);
            char what[96];
            snprintf(what, sizeof what, "allreduce dtype %d op %d%s", d, (int)op, inplace ? " in place" : "");
            check_bytes(what, got, want, n, es);
        }
        bfree(sb), bfree(rb);
        free(in), free(want), free(got);
    }
}

/* ---- the other collectives, int32 and bfloat16 ---- */
static void test_collectives(ncclComm_t c, int blocking, int k0) {
    const ncclDataType_t types[] = {ncclInt32, ncclBfloat16};
    for (int ti = 0; ti < 2; ti++) {
        ncclDataType_t dt = types[ti];
        size_t n = g_N, es = dsize(dt), P = (size_t)g_P, R = (size_t)g_rank;
        unsigned char *h = malloc(n * P * es), *want = malloc(n * P * es), *got = malloc(n * P * es);
        void *sb = balloc(n * P * es), *rb = balloc(n * P * es);
        int k = k0 + ti * 100;
#define RUN(call) do { if (blocking) OK(call); else NB(c, call); } while (0)
        for (int root = 0; root < g_P; root++, k += 10) {
            /* broadcast, out of place then ncclBcast */
            for (size_t i = 0; i < n; i++) enc(h, i, dt, val((int)R, k, i, dt)), enc(want, i, dt, val(root, k, i, dt));
            put(sb, h, n * es);
            RUN(ncclBroadcast(sb, rb, n, dt, root, c, NULL));
            get(got, rb, n * es);
            check_bytes("broadcast", got, want, n, es);
            put(sb, h, n * es);
            RUN(ncclBcast(sb, n, dt, root, c, NULL));
            get(got, sb, n * es);
            check_bytes("bcast", got, want, n, es);
            /* reduce (sum) */
            for (size_t i = 0; i < n; i++) {
                long long s = 0;
                for (int r = 0; r < g_P; r++) s += val(r, k + 1, i, dt);
                enc(h, i, dt, val((int)R, k + 1, i, dt)), enc(want, i, dt, s);
            }
            put(sb, h, n * es);
            RUN(ncclReduce(sb, rb, n, dt, ncclSum, root, c, NULL));
            if (g_rank == root) get(got, rb, n * es), check_bytes("reduce", got, want, n, es);
            /* gather */
            for (size_t i = 0; i < n; i++) enc(h, i, dt, val((int)R, k + 2, i, dt));
            for (size_t q = 0; q < P; q++)
                for (size_t i = 0; i < n; i++) enc(want, q * n + i, dt, val((int)q, k + 2, i, dt));
            put(sb, h, n * es);
            RUN(ncclGather(sb, rb, n, dt, root, c, NULL));
            if (g_rank == root) get(got, rb, n * P * es), check_bytes("gather", got, want, n * P, es);
            /* scatter: the root's block q goes to rank q */
            for (size_t q = 0; q < P; q++)
                for (size_t i = 0; i < n; i++) enc(h, q * n + i, dt, val(root, k + 3, q * n + i, dt));
            for (size_t i = 0; i < n; i++) enc(want, i, dt, val(root, k + 3, R * n + i, dt));
            put(sb, h, n * P * es);
            RUN(ncclScatter(sb, rb, n, dt, root, c, NULL));
            get(got, rb, n * es);
            check_bytes("scatter", got, want, n, es);
        }
        /* all-gather */
        for (size_t i = 0; i < n; i++) enc(h, i, dt, val((int)R, k, i, dt));
        for (size_t q = 0; q < P; q++)
            for (size_t i = 0; i < n; i++) enc(want, q * n + i, dt, val((int)q, k, i, dt));
        put(sb, h, n * es);
        RUN(ncclAllGather(sb, rb, n, dt, c, NULL));
        get(got, rb, n * P * es);
        check_bytes("allgather", got, want, n * P, es);
        /* reduce-scatter (max) */
        for (size_t i = 0; i < n * P; i++) enc(h, i, dt, val((int)R, k + 1, i, dt));
        for (size_t i = 0; i < n; i++) {
            long long m = -100;
            for (int r = 0; r < g_P; r++) m = val(r, k + 1, R * n + i, dt) > m ? val(r, k + 1, R * n + i, dt) : m;
            enc(want, i, dt, m);
        }
        put(sb, h, n * P * es);
        RUN(ncclReduceScatter(sb, rb, n, dt, ncclMax, c, NULL));
        get(got, rb, n * es);
        check_bytes("reduce_scatter", got, want, n, es);
        /* all-to-all: block q of rank r is val(r, ., q*n + i); rank R receives block R of each */
        for (size_t i = 0; i < n * P; i++) enc(h, i, dt, val((int)R, k + 2, i, dt));
        for (size_t q = 0; q < P; q++)
            for (size_t i = 0; i < n; i++) enc(want, q * n + i, dt, val((int)q, k + 2, R * n + i, dt));
        put(sb, h, n * P * es);
        RUN(ncclAlltoAll(sb, rb, n, dt, c, NULL));
        get(got, rb, n * P * es);
        check_bytes("alltoall", got, want, n * P, es);
        /* the same all-to-all made of grouped sends and receives (deadlocks unless the
         * group runs them at once) */
        put(sb, h, n * P * es);
        OK(ncclGroupStart());
        for (int q = 0; q < g_P; q++) {
            OK(ncclSend((char *)sb + (size_t)q * n * es, n, dt, q, c, NULL));
            OK(ncclRecv((char *)rb + (size_t)q * n * es, n, dt, q, c, NULL));
        }
        OK(ncclGroupEnd());
        if (!blocking) OK(settle(c));
        get(got, rb, n * P * es);
        check_bytes("grouped send/recv", got, want, n * P, es);
        /* a group of collectives runs in order: all-reduce into rb, then broadcast of rb */
        for (size_t i = 0; i < n; i++) {
            long long s = 0;
            for (int r = 0; r < g_P; r++) s += val(r, k + 3, i, dt);
            enc(h, i, dt, val((int)R, k + 3, i, dt)), enc(want, i, dt, s);
        }
        put(sb, h, n * es);
        OK(ncclGroupStart());
        OK(ncclAllReduce(sb, rb, n, dt, ncclSum, c, NULL));
        OK(ncclBroadcast(rb, sb, n, dt, g_P - 1, c, NULL));
        OK(ncclGroupEnd());
        if (!blocking) OK(settle(c));
        get(got, sb, n * es);
        check_bytes("grouped allreduce then broadcast", got, want, n, es);
#undef RUN
        bfree(sb), bfree(rb);
        free(h), free(want), free(got);
    }
}

/* ---- split by parity, keys reversed; rank 0 opts out where P >= 3 ---- */
static void test_split(ncclComm_t c) {
    int color = g_P >= 3 && g_rank == 0 ? NCCL_SPLIT_NOCOLOR : g_rank % 2;
    ncclComm_t s = NULL;
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    cfg.blocking = 1;
    OK(split_settled(c, color, -g_rank, &s, &cfg));
    g_checks++;
    if (color == NCCL_SPLIT_NOCOLOR) {
        if (s) FAIL("split with NCCL_SPLIT_NOCOLOR gave a communicator");
        return;
    }
    if (!s) {
        FAIL("split gave no communicator");
        return;
    }
    int members[8], m = 0, n = -1, r = -1;
    for (int q = g_P - 1; q >= 0; q--)
        if (q % 2 == color && !(g_P >= 3 && q == 0)) members[m++] = q; /* ordered by key -q */
    OK(ncclCommCount(s, &n));
    OK(ncclCommUserRank(s, &r));
    int want_r = -1;
    for (int i = 0; i < m; i++)
        if (members[i] == g_rank) want_r = i;
    g_checks++;
    if (n != m || r != want_r) FAIL("split: rank %d of %d, expected %d of %d", r, n, want_r, m);
    /* Every member's old rank at its new rank: an all-gather shows membership and order. */
    int32_t *h = calloc((size_t)m, sizeof *h);
    void *sb = balloc(4), *rb = balloc(4 * (size_t)m);
    int32_t me = g_rank;
    put(sb, &me, 4);
    OK(ncclAllGather(sb, rb, 1, ncclInt32, s, NULL));
    get(h, rb, 4 * (size_t)m);
    g_checks += m;
    for (int i = 0; i < m; i++)
        if (h[i] != members[i]) FAIL("split: new rank %d is old rank %d, expected %d", i, h[i], members[i]);
    bfree(sb), bfree(rb), free(h);
    OK(ncclCommDestroy(s));
}

/* One rank's bad split argument (a negative color; then, inside a group, a NULL newcomm):
 * every rank's split fails, naming it, instead of the others waiting in its exchange. */
static void test_split_bad_args(ncclComm_t c) {
    int bad = g_P - 1, ok_rc;
    ncclComm_t s = NULL;
    ncclResult_t rc = ncclCommSplit(c, g_rank == bad ? -7 : 0, 0, &s, NULL);
    /* a non-blocking c's split fails through its new communicator (the caller's to
     * destroy); a blocking one's leaves no handle */
    int async = rc == ncclInProgress;
    if (async) rc = s ? settle(s) : ncclInternalError;
    char want[64];
    snprintf(want, sizeof want, "rank %d passed color -7", bad);
    g_checks++;
    if (rc != ncclInvalidArgument || (!async && s) || !strstr(ncclGetLastError(c), want))
        FAIL("split with color -7 on rank %d: %s: %s (want '%s')", bad, ncclGetErrorString(rc), ncclGetLastError(c), want);
    if (s) ncclCommDestroy(s), s = NULL;
    OK(ncclGroupStart());
    rc = ncclCommSplit(c, 0, 0, g_rank == bad ? NULL : &s, NULL);
    ncclResult_t end = ncclGroupEnd();
    snprintf(want, sizeof want, "rank %d passed a NULL newcomm", bad);
    g_checks++;
    if (rc != ncclSuccess || end != ncclInvalidArgument || !strstr(ncclGetLastError(NULL), want))
        FAIL("split in a group with a NULL newcomm on rank %d: %s, group end %s: %s (want '%s')", bad,
             ncclGetErrorString(rc), ncclGetErrorString(end), ncclGetLastError(NULL), want);
    if (s) ncclCommDestroy(s), s = NULL;
    /* A bad config on one rank alone (not made by NCCL_CONFIG_INITIALIZER; blocking 2, in a
     * group): that rank refuses at once, and the others' splits fail naming it, not at the
     * deadline in an exchange it never joined; c stays usable. */
    for (int k = 0; k < 2; k++) {
        ncclConfig_t badcfg = NCCL_CONFIG_INITIALIZER;
        if (k == 0) badcfg.magic = 0;
        else badcfg.blocking = 2;
        if (k == 1) OK(ncclGroupStart());
        rc = k == 0 ? split_settled(c, 0, 0, &s, g_rank == bad ? &badcfg : NULL)
                    : ncclCommSplit(c, 0, 0, &s, g_rank == bad ? &badcfg : NULL);
        if (k == 0 && s) ncclCommDestroy(s), s = NULL; /* a good rank's failed split (settled) */
        ncclResult_t end = k == 1 ? ncclGroupEnd() : ncclSuccess;
        const char *m = ncclGetLastError(NULL);
        if (g_rank == bad) {
            snprintf(want, sizeof want, k == 0 ? "NCCL_CONFIG_INITIALIZER" : "config.blocking is 2");
            ok_rc = rc == ncclInvalidArgument && (k == 0 || end == ncclInvalidArgument);
        } else {
            snprintf(want, sizeof want, "rank %d refused it", bad);
            ok_rc = (k == 0 ? rc : end) == ncclInvalidArgument && (k == 0 || rc == ncclSuccess);
        }
        g_checks++;
        /* (in a group, a good rank holds the failed split's handle until it destroys it) */
        if (!ok_rc || (s && (k == 0 || g_rank == bad)) || (g_rank == bad && k == 1 ? 0 : !strstr(m, want)))
            FAIL("split with a bad config (%s) on rank %d: %s, group end %s: %s (want '%s')",
                 k == 0 ? "magic 0, no group" : "blocking 2, in a group", bad, ncclGetErrorString(rc),
                 ncclGetErrorString(end), m, want);
        if (s) ncclCommDestroy(s), s = NULL;
    }
    int32_t x = g_rank + 1, sum = -1;
    void *sb = balloc(4), *rb = balloc(4);
    put(sb, &x, 4);
    EXPECT(ncclAllReduce(sb, rb, 1, ncclInt32, ncclSum, c, NULL), ncclSuccess, ncclInProgress);
    OK(settle(c));
    get(&sum, rb, 4);
    g_checks++;
    if (sum != g_P * (g_P + 1) / 2) FAIL("all-reduce on the parent after the refused splits gave %d", sum);
    bfree(sb), bfree(rb);
}

/* A split without a config takes its parent's, as NCCL's does: a split of the
 * non-blocking c is non-blocking; with a config whose blocking is unset, blocking (the
 * default). NCCL_COMM_BLOCKING=1 overrides every config, as in NCCL: then c and the
 * splits are blocking. */
static void test_split_inherits(ncclComm_t c) {
    const char *e = getenv("NCCL_COMM_BLOCKING");
    int forced = e && !strcmp(e, "1");
    ncclConfig_t unset = NCCL_CONFIG_INITIALIZER; /* blocking left unset: NCCL's default, 1 */
    for (int with_config = 0; with_config < 2; with_config++) {
        ncclComm_t s = NULL;
        OK(split_settled(c, 0, g_rank, &s, with_config ? &unset : NULL));
        if (!s) {
            FAIL("split (%s) gave no communicator", with_config ? "a config" : "no config");
            return;
        }
        int32_t x = 3 * g_rank + 1, sum = -1;
        void *sb = balloc(4), *rb = balloc(4);
        put(sb, &x, 4);
        EXPECT(ncclAllReduce(sb, rb, 1, ncclInt32, ncclSum, s, NULL),
               forced || with_config ? ncclSuccess : ncclInProgress, -1);
        OK(settle(s));
        get(&sum, rb, 4);
        g_checks++;
        if (sum != 3 * g_P * (g_P - 1) / 2 + g_P) FAIL("split: all-reduce gave %d", sum);
        bfree(sb), bfree(rb);
        OK(ncclCommDestroy(s));
    }
}

/* ---- pre-multiplied sums: each rank scales by (rank + 1) ---- */
static void test_premul(ncclComm_t c, int blocking) {
    size_t n = g_N;
    for (int res = 0; res < 2; res++) {
        if (res == ncclScalarDevice && !D) continue;
        float scalar = (float)(g_rank + 1), *h = malloc(n * 4), *want = malloc(n * 4), *got = malloc(n * 4);
        void *dscalar = NULL;
        if (res == ncclScalarDevice) dscalar = balloc(4), put(dscalar, &scalar, 4);
        ncclRedOp_t op;
        OK(ncclRedOpCreatePreMulSum(&op, res == ncclScalarDevice ? dscalar : &scalar, ncclFloat32,
                                    (ncclScalarResidence_t)res, c));
        for (size_t i = 0; i < n; i++) {
            long long s = 0;
            for (int r = 0; r < g_P; r++) s += (long long)(r + 1) * val(r, 900 + res, i, ncclFloat32);
            h[i] = (float)val(g_rank, 900 + res, i, ncclFloat32);
            want[i] = (float)s;
        }
        void *sb = balloc(n * 4), *rb = balloc(n * 4);
        put(sb, h, n * 4);
        if (blocking) OK(ncclAllReduce(sb, rb, n, ncclFloat32, op, c, NULL));
        else NB(c, ncclAllReduce(sb, rb, n, ncclFloat32, op, c, NULL));
        get(got, rb, n * 4);
        check_bytes(res ? "premul sum (host scalar)" : "premul sum (device scalar)", got, want, n, 4);
        /* the op is of float32: another type is refused */
        EXPECT(ncclAllReduce(sb, rb, n, ncclInt32, op, c, NULL), ncclInvalidArgument, -1);
        OK(ncclRedOpDestroy(op, c));
        /* as PyTorch's NCCL process group makes it in a coalesced call: the op made for the
         * call inside the group and destroyed as soon as the call returns, before
         * ncclGroupEnd runs it */
        memset(got, 0, n * 4);
        put(rb, got, n * 4);
        OK(ncclGroupStart());
        OK(ncclRedOpCreatePreMulSum(&op, res == ncclScalarDevice ? dscalar : &scalar, ncclFloat32,
                                    (ncclScalarResidence_t)res, c));
        OK(ncclAllReduce(sb, rb, n, ncclFloat32, op, c, NULL));
        OK(ncclRedOpDestroy(op, c));
        if (blocking) OK(ncclGroupEnd());
        else NB(c, ncclGroupEnd());
        get(got, rb, n * 4);
        check_bytes(res ? "premul sum in a group (host scalar)" : "premul sum in a group (device scalar)", got, want,
                    n, 4);
        bfree(sb), bfree(rb);
        if (dscalar) bfree(dscalar);
        free(h), free(want), free(got);
    }
}

/* float8 (blocking c): moved as bytes by an all-gather and a broadcast, bit for bit,
 * every byte value included; reduced: refused (the refusals below). */
static void test_float8(ncclComm_t c) {
    enum { M = 256 };
    size_t P = (size_t)g_P;
    uint8_t h[M], *want = malloc(M * P), *got = malloc(M * P);
    void *sb = balloc(M), *rb = balloc(M * P);
    for (int t = 0; t < 2; t++) {
        ncclDataType_t dt = t ? ncclFloat8e5m2 : ncclFloat8e4m3;
        for (size_t q = 0; q < P; q++)
            for (size_t i = 0; i < M; i++) want[q * M + i] = (uint8_t)(i * 7 + q * 31 + (size_t)t);
        memcpy(h, want + (size_t)g_rank * M, M);
        put(sb, h, M);
        OK(ncclAllGather(sb, rb, M, dt, c, NULL));
        get(got, rb, M * P);
        check_bytes("float8 allgather", got, want, M * P, 1);
        OK(ncclBroadcast(sb, rb, M, dt, 0, c, NULL));
        get(got, rb, M);
        check_bytes("float8 broadcast", got, want, M, 1);
    }
    bfree(sb), bfree(rb);
    free(want), free(got);
}

static void test_refusals(ncclComm_t c) {
    void *b = balloc(64);
    EXPECT(ncclAllReduce(b, b, 4, ncclFloat8e4m3, ncclSum, c, NULL), ncclInvalidArgument, -1);
    g_checks++;
    if (!strstr(ncclGetLastError(c), "float8")) FAIL("float8 refusal says: %s", ncclGetLastError(c));
    EXPECT(ncclAllReduce(b, b, 4, (ncclDataType_t)77, ncclSum, c, NULL), ncclInvalidArgument, -1);
    EXPECT(ncclAllReduce(b, b, 4, ncclInt32, ncclSum, NULL, NULL), ncclInvalidArgument, -1);
    EXPECT(ncclGroupEnd(), ncclInvalidUsage, -1);
    void *handle = NULL;
    OK(ncclCommRegister(c, b, 64, &handle));
    OK(ncclCommDeregister(c, handle));
    /* twice: refused, without reading the freed handle (ASan) */
    EXPECT(ncclCommDeregister(c, handle), ncclInvalidUsage, -1);
    OK(ncclCommDeregister(c, NULL)); /* as NCCL's */
    /* one left registered: the destroy frees it (LeakSanitizer under ASan) */
    void *kept = NULL;
    OK(ncclCommRegister(c, b, 32, &kept));
    ncclComm_t nc = c;
    EXPECT(ncclCommShrink(c, NULL, 0, &nc, NULL, NCCL_SHRINK_DEFAULT), ncclInvalidUsage, -1);
    g_checks++;
    if (nc) FAIL("ncclCommShrink left *newcomm set");
    EXPECT(ncclCommRevoke(c, NCCL_REVOKE_DEFAULT), ncclInvalidUsage, -1);
    ncclWindow_t w;
    EXPECT(ncclCommWindowRegister(c, b, 64, &w, NCCL_WIN_DEFAULT), ncclInvalidUsage, -1);
    ncclSimInfo_t si = NCCL_SIM_INFO_INITIALIZER;
    EXPECT(ncclGroupSimulateEnd(&si), ncclInvalidUsage, -1);
    ncclConfig_t bad = NCCL_CONFIG_INITIALIZER;
    bad.magic = 0;
    ncclComm_t x = NULL;
    EXPECT(ncclCommSplit(c, 0, 0, &x, &bad), ncclInvalidArgument, -1);
    /* A refused config leaves *comm NULL, so that a caller's cleanup may destroy it. */
    ncclUniqueId uid;
    memset(&uid, 0, sizeof uid);
    x = (ncclComm_t)&bad; /* not a communicator: it must be overwritten */
    EXPECT(ncclCommInitRankConfig(&x, 2, uid, 0, &bad), ncclInvalidArgument, -1);
    g_checks++;
    if (x) FAIL("ncclCommInitRankConfig with a refused config left *comm set");
    x = (ncclComm_t)&bad;
    EXPECT(ncclCommInitRankScalable(&x, 2, 0, 0, &uid, NULL), ncclInvalidArgument, -1);
    g_checks++;
    if (x) FAIL("ncclCommInitRankScalable with no ids left *comm set");
    /* An init refused inside a group spoils the group, as NCCL's: its end returns the
     * refusal and runs none of its calls (the all-reduce's result stays unwritten; the
     * group end returned success and ran it); c stays usable. (A refused split takes part,
     * failing at the group's end on every rank: it spoils nothing, test_split_bad_args.) */
    int32_t v = 7 * (g_rank + 1), old = -5, got = 0;
    void *sb = balloc(4), *rb = balloc(4);
    put(sb, &v, 4);
    put(rb, &old, 4);
    OK(ncclGroupStart());
    OK(ncclAllReduce(sb, rb, 1, ncclInt32, ncclSum, c, NULL));
    x = NULL;
    EXPECT(ncclCommInitRankConfig(&x, 2, uid, 0, &bad), ncclInvalidArgument, -1);
    EXPECT(ncclGroupEnd(), ncclInvalidArgument, -1);
    get(&got, rb, 4);
    g_checks++;
    if (got != old || !strstr(ncclGetLastError(NULL), "none of the group's calls ran"))
        FAIL("a group with a refused init: the all-reduce wrote %d (want %d untouched): %s", got, old,
             ncclGetLastError(NULL));
    OK(ncclAllReduce(sb, rb, 1, ncclInt32, ncclSum, c, NULL));
    get(&got, rb, 4);
    g_checks++;
    if (got != 7 * g_P * (g_P + 1) / 2) FAIL("all-reduce after the spoiled group gave %d", got);
    bfree(sb), bfree(rb);
    bfree(b);
}

/* ---- NCCL 2.28's device API, host side: ringlet's teams, and its refusals ---- */
static int team_is(ncclTeam_t t, int n, int r, int s) { return t.nRanks == n && t.rank == r && t.stride == s; }
static void test_device_api(ncclComm_t c) {
    ncclTeam_t w = ncclTeamWorld(c), l = ncclTeamLsa(c), rail = ncclTeamRail(c);
    g_checks += 3;
    if (!team_is(w, g_P, g_rank, 1)) FAIL("ncclTeamWorld: {%d, %d, %d}", w.nRanks, w.rank, w.stride);
    if (!team_is(l, 1, 0, 1)) FAIL("ncclTeamLsa: {%d, %d, %d} (the rank alone)", l.nRanks, l.rank, l.stride);
    if (!team_is(rail, g_P, g_rank, 1)) FAIL("ncclTeamRail: {%d, %d, %d}", rail.nRanks, rail.rank, rail.stride);
    for (int k = 0; k < g_P; k++) {
        g_checks++;
        if (ncclTeamRankToWorld(c, w, k) != k || ncclTeamRankToWorld(c, rail, k) != k)
            FAIL("ncclTeamRankToWorld: team rank %d is world rank %d (rail %d)", k, ncclTeamRankToWorld(c, w, k),
                 ncclTeamRankToWorld(c, rail, k));
    }
    g_checks += 3;
    if (ncclTeamRankToWorld(c, l, 0) != g_rank) FAIL("ncclTeamRankToWorld(lsa, 0): %d", ncclTeamRankToWorld(c, l, 0));
    if (ncclTeamRankToLsa(c, w, g_rank) != 0 || ncclTeamRankToLsa(c, l, 0) != 0)
        FAIL("ncclTeamRankToLsa of the rank itself: %d, %d", ncclTeamRankToLsa(c, w, g_rank), ncclTeamRankToLsa(c, l, 0));
    if (ncclTeamRankToWorld(c, w, g_P) != -1 || !strstr(ncclGetLastError(c), "out of range"))
        FAIL("ncclTeamRankToWorld of rank %d: %d (%s)", g_P, ncclTeamRankToWorld(c, w, g_P), ncclGetLastError(c));
    if (g_P > 1) {
        g_checks++;
        if (ncclTeamRankToLsa(c, w, (g_rank + 1) % g_P) != -1 || !strstr(ncclGetLastError(c), "LSA team"))
            FAIL("ncclTeamRankToLsa of another rank: %d (%s)", ncclTeamRankToLsa(c, w, (g_rank + 1) % g_P),
                 ncclGetLastError(c));
    }
    /* ringlet makes no device communicator: the call says so, through ncclGetLastError */
    long long dc[64] = {0}; /* room for NCCL's ncclDevComm, opaque in this header */
    EXPECT(ncclDevCommCreate(c, NULL, (ncclDevComm_t *)(void *)dc), ncclInvalidUsage, -1);
    g_checks++;
    if (!strstr(ncclGetLastError(c), "ncclDevCommCreate is not provided by ringlet"))
        FAIL("ncclDevCommCreate's error says: %s", ncclGetLastError(c));
    EXPECT(ncclDevCommDestroy(c, (const ncclDevComm_t *)(void *)dc), ncclInvalidUsage, -1);
    EXPECT(ncclDevCommCreate(NULL, NULL, (ncclDevComm_t *)(void *)dc), ncclInvalidArgument, -1);
    EXPECT(ncclLsaBarrierCreateRequirement(l, 1, NULL, NULL), ncclInvalidUsage, -1);
    EXPECT(ncclGinBarrierCreateRequirement(c, rail, 1, NULL, NULL), ncclInvalidUsage, -1);
    EXPECT(ncclLLA2ACreateRequirement(1, 64, NULL, NULL), ncclInvalidUsage, -1);
    g_checks += 2;
    if (ncclLLA2ACalcSlots(64, 8) != -1) FAIL("ncclLLA2ACalcSlots: %d, expected -1", ncclLLA2ACalcSlots(64, 8));
    if (ncclTeamWorld(NULL).nRanks != 0) FAIL("ncclTeamWorld(NULL) has %d ranks", ncclTeamWorld(NULL).nRanks);
}

/* rank 0 writes the id (atomically, by rename); the others wait for it (60 s). */
static int share_id(const char *dir, ncclUniqueId *id) {
    char path[512], tmp[520];
    snprintf(path, sizeof path, "%s/nccl-id", dir);
    if (g_rank == 0) {
        if (ncclGetUniqueId(id) != ncclSuccess) return printf("FAIL: ncclGetUniqueId: %s\n", ncclGetLastError(NULL)), -1;
        snprintf(tmp, sizeof tmp, "%s.tmp", path);
        FILE *f = fopen(tmp, "wb");
        if (!f || fwrite(id, sizeof *id, 1, f) != 1 || fclose(f) || rename(tmp, path))
            return printf("FAIL: writing %s: %s\n", path, strerror(errno)), -1;
        return 0;
    }
    double t0 = now();
    while (now() - t0 < 60) {
        FILE *f = fopen(path, "rb");
        if (f) {
            size_t got = fread(id, sizeof *id, 1, f);
            fclose(f);
            if (got == 1) return 0;
        }
        usleep(2000);
    }
    return printf("FAIL: no id in %s after 60 s\n", path), -1;
}

static void case_all(ncclComm_t c) {
    int n = -1, r = -1, dev = -2, version = 0;
    OK(ncclGetVersion(&version));
    g_checks++;
    if (version < 21900) FAIL("ncclGetVersion: %d", version);
    OK(ncclCommCount(c, &n));
    OK(ncclCommUserRank(c, &r));
    OK(ncclCommCuDevice(c, &dev));
    /* On host memory: the device current at init where the process has a device backend (a
     * GPU here: as NCCL's communicator has its CUDA device), else -1, as get_device says. */
    int cur = -2;
    if (ringlet_get_device(&cur) != RINGLET_SUCCESS) FAIL("ringlet_get_device: %s", ringlet_comm_last_error(NULL));
    g_checks++;
    if (n != g_P || r != g_rank || (D ? dev < 0 : dev != cur))
        FAIL("count %d rank %d device %d (expected %d)", n, r, dev, D ? -2 : cur);
    test_device_api(c);
    /* A blocking twin of the non-blocking communicator. */
    ncclComm_t b = NULL;
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    cfg.blocking = 1;
    OK(split_settled(c, 0, g_rank, &b, &cfg));
    test_allreduce_types(c, 0);
    test_allreduce_types(b, 1);
    test_collectives(c, 0, 1000);
    test_collectives(b, 1, 3000);
    test_split(c);
    test_split_bad_args(c);
    test_split_inherits(c);
    test_premul(c, 0);
    test_premul(b, 1);
    test_float8(b);
    test_refusals(b);
    OK(ncclCommFinalize(b));
    OK(ncclCommDestroy(b));
}

enum { SEEN_MAX = 1024 };

static void *last_error_main(void *p) {
    snprintf((char *)p, SEEN_MAX, "%s", ncclGetLastError(NULL));
    return NULL;
}

typedef struct {
    ncclComm_t c;
    void *buf;
    int grouped;
    ncclResult_t rc;
} call_arg;

static void *abortcall_main(void *p) {
    call_arg *a = p;
    if (a->grouped) {
        ncclResult_t s = ncclGroupStart(), r = ncclAllReduce(a->buf, a->buf, 1024, ncclFloat32, ncclSum, a->c, NULL);
        ncclResult_t e = ncclGroupEnd();
        a->rc = s ? s : r ? r : e;
    } else {
        a->rc = ncclAllReduce(a->buf, a->buf, 1024, ncclFloat32, ncclSum, a->c, NULL);
    }
    return NULL;
}

/* Whether a call is under way on c within secs (the layer counts it, and an abort then
 * leaves the handle to it): an abort before the call began would free the handle the late
 * call then reads. */
static int call_under_way(ncclComm_t c, double secs) {
    struct ncclComm *s = c;
    for (double t0 = now(); now() - t0 < secs; usleep(1000)) {
        pthread_mutex_lock(&s->mu);
        int n = s->calls;
        pthread_mutex_unlock(&s->mu);
        if (n > 0) return 1;
    }
    return 0;
}

/* abortcall (see the top). */
static void case_abortcall(ncclComm_t c) {
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    cfg.blocking = 1;
    ncclComm_t b[2] = {NULL, NULL};
    for (int k = 0; k < 2; k++) OK(split_settled(c, 0, g_rank, &b[k], &cfg));
    char path[600];
    snprintf(path, sizeof path, "%s/aborted", g_dir);
    if (g_rank == 1) {
        for (double t0 = now(); access(path, F_OK) != 0 && now() - t0 < 120;) usleep(1000);
        for (int k = 0; k < 2; k++) OK(ncclCommAbort(b[k]));
        OK(ncclCommAbort(c));
        return;
    }
    void *buf = balloc(4096);
    for (int k = 0; k < 2; k++) {
        call_arg a = {b[k], buf, k, ncclSuccess};
        pthread_t th;
        if (pthread_create(&th, NULL, abortcall_main, &a) != 0) {
            FAIL("cannot start a thread");
            break;
        }
        if (!call_under_way(b[k], 60)) FAIL("the thread's all-reduce did not begin within 60 s");
        OK(ncclCommAbort(b[k]));
        pthread_join(th, NULL);
        g_checks++;
        if (a.rc == ncclSuccess || a.rc == ncclInProgress)
            FAIL("%s all-reduce whose communicator was aborted returned %d", k ? "a grouped" : "an", (int)a.rc);
    }
    FILE *f = fopen(path, "w");
    if (f) fclose(f);
    bfree(buf);
    OK(ncclCommAbort(c));
}

static void case_fault(ncclComm_t c) {
    if (g_P >= 3 && g_rank < 2) {
        /* Rank 1 sends to rank 0 before it leaves: rank 0's connection from it is then made,
         * and its next call waits only for rank 2's (below). */
        void *m = balloc(64);
        NB(c, g_rank ? ncclSend(m, 16, ncclFloat32, 0, c, NULL) : ncclRecv(m, 16, ncclFloat32, 1, c, NULL));
        bfree(m);
    }
    ncclComm_t b = NULL;
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    cfg.blocking = 1;
    OK(split_settled(c, 0, g_rank, &b, &cfg));
    char path[600];
    snprintf(path, sizeof path, "%s/split-done.%d", g_dir, g_rank);
    if (g_rank != 1) {
        FILE *f = fopen(path, "w");
        if (f) fclose(f);
    }
    if (g_rank == 1) {
        /* Leaves without joining anything more, once every other rank's split has returned
         * (this rank's last message of it may still be on its way when its own returns). */
        for (int r = 0; r < g_P; r++) {
            if (r == 1) continue;
            snprintf(path, sizeof path, "%s/split-done.%d", g_dir, r);
            for (double t0 = now(); access(path, F_OK) != 0 && now() - t0 < 60;) usleep(1000);
        }
        OK(ncclCommAbort(b));
        OK(ncclCommAbort(c));
        return;
    }
    void *buf = balloc(4096);
    if (g_rank == 2) {
        /* Calls only once it knows rank 1 is gone: rank 0's call then meets the failure
         * while it waits for this rank to connect (on device memory, cuda_ipc's ready
         * step), a stop whose cause, rank 1, its error must still name. */
        ncclResult_t a = ncclSuccess;
        for (double t0 = now(); a == ncclSuccess && now() - t0 < 60; usleep(1000)) OK(ncclCommGetAsyncError(c, &a));
    }
    if (g_rank == 2) { /* on a communicator known to have failed: refused at once, or failing later */
        EXPECT(ncclAllReduce(buf, buf, 1024, ncclFloat32, ncclSum, c, NULL), ncclRemoteError, ncclInProgress);
    } else {
        /* Rank 1 may have left already (it goes once this rank's split-done is written):
         * then the call is refused at once, else it fails later; the error below either way */
        ncclResult_t r = ncclAllReduce(buf, buf, 1024, ncclFloat32, ncclSum, c, NULL);
        g_checks++;
        if (r != ncclInProgress && r != ncclSuccess && r != ncclRemoteError)
            FAIL("an all-reduce while rank 1 leaves returned %d (%s)", (int)r, ncclGetLastError(c));
    }
    EXPECT(settle(c), ncclRemoteError, -1);
    g_checks++;
    if (!strstr(ncclGetLastError(c), "rank 1")) FAIL("async error does not name rank 1: %s", ncclGetLastError(c));
    EXPECT(ncclAllReduce(buf, buf, 1024, ncclFloat32, ncclSum, b, NULL), ncclRemoteError, ncclInvalidUsage);
    if (D) sync_default();
    ncclResult_t a = ncclSuccess;
    OK(ncclCommGetAsyncError(b, &a));
    g_checks++;
    if (a != ncclRemoteError) FAIL("blocking communicator's async error is %d after rank 1 left", (int)a);
    g_checks++;
    if (!strstr(ncclGetLastError(b), "rank 1")) FAIL("error does not name rank 1: %s", ncclGetLastError(b));
    char seen[SEEN_MAX] = "";
    pthread_t th;
    if (pthread_create(&th, NULL, last_error_main, seen) == 0) pthread_join(th, NULL);
    g_checks++;
    if (!strstr(seen, "rank 1")) FAIL("ncclGetLastError(NULL) on another thread does not name rank 1: \"%s\"", seen);
    bfree(buf);
    OK(ncclCommAbort(b));
    OK(ncclCommAbort(c));
}

/* Three ranks of one process (initall, threads): rank r's data (val with seed `seed`) in
 * sendbuf r, recvbuf r beside it, both on device r mod the device count (as a CUDA program
 * sets the device before it allocates: ncclCommInitAll's choice without a devlist), and
 * the sum of the three. */
enum { N3 = 3 };
typedef struct {
    size_t n;
    int ndev;
    int32_t *h[N3], *want, *got;
    void *sb[N3], *rb[N3];
} ranks3;

static void ranks3_make(ranks3 *b, int seed) {
    b->n = g_N;
    b->ndev = 0;
    if (D) ringlet_device_count(&b->ndev);
    b->want = malloc(b->n * 4), b->got = malloc(b->n * 4);
    for (int r = 0; r < N3; r++) {
        if (D) ringlet_set_device(r % b->ndev);
        b->h[r] = malloc(b->n * 4);
        for (size_t i = 0; i < b->n; i++) b->h[r][i] = val(r, seed, i, ncclInt32);
        b->sb[r] = balloc(b->n * 4), b->rb[r] = balloc(b->n * 4);
        put(b->sb[r], b->h[r], b->n * 4);
    }
    for (size_t i = 0; i < b->n; i++) b->want[i] = b->h[0][i] + b->h[1][i] + b->h[2][i];
}

static void ranks3_free(ranks3 *b) {
    for (int r = 0; r < N3; r++) {
        if (D) ringlet_set_device(r % b->ndev);
        bfree(b->sb[r]), bfree(b->rb[r]), free(b->h[r]);
    }
    free(b->want), free(b->got);
}

static void case_initall(void) {
    enum { N = N3 };
    ncclComm_t comms[N];
    OK(ncclCommInitAll(comms, N, NULL));
    ranks3 b;
    ranks3_make(&b, 500);
    size_t n = b.n;
    int ndev = b.ndev;
    int32_t **h = b.h, *want = b.want, *got = b.got;
    void **sb = b.sb, **rb = b.rb;
#define ON_DEVICE(r) (D ? (void)ringlet_set_device((r) % ndev) : (void)0)
    OK(ncclGroupStart());
    for (int r = 0; r < N; r++) OK(ncclAllReduce(sb[r], rb[r], n, ncclInt32, ncclSum, comms[r], NULL));
    OK(ncclGroupEnd());
    for (int r = 0; r < N; r++) {
        ON_DEVICE(r);
        int dev = -2;
        OK(ncclCommCuDevice(comms[r], &dev));
        g_checks++;
        if (D && dev != r % ndev) FAIL("initall: comm %d is on device %d, expected %d", r, dev, r % ndev);
        get(got, rb[r], n * 4);
        check_bytes("initall allreduce", got, want, n, 4);
        int rk = -1;
        OK(ncclCommUserRank(comms[r], &rk));
        g_checks++;
        if (rk != r) FAIL("initall: comm %d has rank %d", r, rk);
    }
    /* The root's buffers passed where a rank does not use them (a reduce's recvbuf, a
     * broadcast's sendbuf, off the root), of another device than that rank's when there are
     * two: ignored, as NCCL documents (they were refused: buffers of two devices). */
    for (int r = 0; r < N; r++) ON_DEVICE(r), put(rb[r], h[r], n * 4); /* not the result */
    OK(ncclGroupStart());
    for (int r = 0; r < N; r++) OK(ncclReduce(sb[r], rb[0], n, ncclInt32, ncclSum, 0, comms[r], NULL));
    OK(ncclGroupEnd());
    for (int r = 0; r < N; r++) {
        ON_DEVICE(r);
        get(got, rb[r], n * 4);
        check_bytes(r ? "initall reduce: a non-root's recvbuf, untouched" : "initall reduce", got, r ? h[r] : want, n, 4);
    }
    OK(ncclGroupStart());
    for (int r = 0; r < N; r++) OK(ncclBroadcast(sb[0], rb[r], n, ncclInt32, 0, comms[r], NULL));
    OK(ncclGroupEnd());
    for (int r = 0; r < N; r++) ON_DEVICE(r), get(got, rb[r], n * 4), check_bytes("initall broadcast", got, h[0], n, 4);
    const char *e = getenv("NCCL_COMM_BLOCKING");
    if (e && !strcmp(e, "0")) {
        for (int r = 0; r < N; r++) ON_DEVICE(r), put(rb[r], h[r], n * 4); /* not the result */
        for (int r = 0; r < N; r++)
            EXPECT(ncclAllReduce(sb[r], rb[r], n, ncclInt32, ncclSum, comms[r], NULL), ncclInProgress, -1);
        for (int r = 0; r < N; r++) {
            OK(settle(comms[r]));
            ON_DEVICE(r);
            get(got, rb[r], n * 4);
            check_bytes("initall non-blocking allreduce", got, want, n, 4);
        }
    }
    for (int r = 0; r < N; r++) OK(ncclCommDestroy(comms[r])); /* one thread, one by one */
#undef ON_DEVICE
    ranks3_free(&b);
}

/* --case threads: one process, 3 ranks, each made by ncclCommInitRank on a thread of its own
 * (no group) and split there (color 0); this thread drives them (grouped all-reduces on
 * the parents and the children, checked), then destroys them one after another, children
 * first. NCCL's destroy is local: ringlet's waits for every rank's goodbye, and the first
 * destroy here waited out the deadline (RINGLET_TIMEOUT) for ranks this thread had yet to
 * destroy. A destroy while this thread's group has a call on the communicator is refused. */
typedef struct {
    ncclUniqueId id;
    int rank, n;
    ncclComm_t comm, kid;
    ncclResult_t rc;
} threads_arg;

static void *threads_init(void *p) {
    threads_arg *a = p;
    int ndev = 0;
    if (D) ringlet_device_count(&ndev), ringlet_set_device(a->rank % ndev);
    a->rc = ncclCommInitRank(&a->comm, a->n, a->id, a->rank);
    if (a->rc == ncclSuccess) a->rc = ncclCommSplit(a->comm, 0, a->rank, &a->kid, NULL);
    return NULL;
}

static void case_threads(void) {
    enum { N = N3 };
    threads_arg a[N];
    pthread_t th[N];
    ncclUniqueId id;
    OK(ncclGetUniqueId(&id));
    for (int r = 0; r < N; r++) {
        a[r] = (threads_arg){.id = id, .rank = r, .n = N};
        if (pthread_create(&th[r], NULL, threads_init, &a[r]) != 0) {
            FAIL("threads: no thread");
            return;
        }
    }
    for (int r = 0; r < N; r++) pthread_join(th[r], NULL);
    for (int r = 0; r < N; r++)
        if (a[r].rc != ncclSuccess) {
            FAIL("threads: rank %d's init or split: %d: %s", r, (int)a[r].rc, ncclGetLastError(NULL));
            return;
        }
    ranks3 b;
    ranks3_make(&b, 700);
    size_t n = b.n;
    int ndev = b.ndev;
    int32_t **h = b.h, *want = b.want, *got = b.got;
    void **sb = b.sb, **rb = b.rb;
#define ON_DEVICE(r) (D ? (void)ringlet_set_device((r) % ndev) : (void)0)
    for (int kid = 0; kid < 2; kid++) {
        OK(ncclGroupStart());
        for (int r = 0; r < N; r++)
            OK(ncclAllReduce(sb[r], rb[r], n, ncclInt32, ncclSum, kid ? a[r].kid : a[r].comm, NULL));
        if (!kid) EXPECT(ncclCommDestroy(a[0].comm), ncclInvalidUsage, -1); /* a call on it in the group */
        OK(ncclGroupEnd());
        for (int r = 0; r < N; r++) {
            ON_DEVICE(r);
            get(got, rb[r], n * 4);
            check_bytes(kid ? "threads: the children's allreduce" : "threads: allreduce", got, want, n, 4);
            put(rb[r], h[r], n * 4); /* not the result */
        }
    }
    double t0 = now(), limit = 10;
    const char *e = getenv("RINGLET_TIMEOUT");
    if (e && atof(e) > 0) limit = atof(e) / 2;
    for (int r = 0; r < N; r++) OK(ncclCommDestroy(a[r].kid)); /* one thread, one by one */
    for (int r = 0; r < N; r++) OK(ncclCommDestroy(a[r].comm));
    double dt = now() - t0;
    /* Non-blocking inits in a group, NCCL's documented pattern: each call says ncclSuccess
     * (it said ncclInProgress), ncclGroupEnd ncclInProgress until they are up. */
    ncclUniqueId id2;
    OK(ncclGetUniqueId(&id2));
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    cfg.blocking = 0;
    ncclComm_t g[N];
    OK(ncclGroupStart());
    for (int r = 0; r < N; r++) {
        ON_DEVICE(r);
        OK(ncclCommInitRankConfig(&g[r], N, id2, r, &cfg));
    }
    EXPECT(ncclGroupEnd(), ncclInProgress, ncclSuccess);
    for (int r = 0; r < N; r++) OK(settle(g[r]));
    OK(ncclGroupStart());
    for (int r = 0; r < N; r++) OK(ncclAllReduce(sb[r], rb[r], n, ncclInt32, ncclSum, g[r], NULL));
    EXPECT(ncclGroupEnd(), ncclInProgress, ncclSuccess);
    for (int r = 0; r < N; r++) {
        OK(settle(g[r]));
        ON_DEVICE(r);
        get(got, rb[r], n * 4);
        check_bytes("threads: the grouped non-blocking communicators' allreduce", got, want, n, 4);
    }
    for (int r = 0; r < N; r++) OK(ncclCommDestroy(g[r]));
    g_checks++;
    if (dt > limit)
        FAIL("threads: destroying the 6 handles one after another took %.1f s (RINGLET_TIMEOUT %s): a destroy "
             "waited for ranks this thread had yet to destroy", dt, e ? e : "unset");
    else
        printf("nccl_api: threads: 6 handles made on 3 threads destroyed one by one by one thread in %.1f ms\n",
               dt * 1e3);
#undef ON_DEVICE
    ranks3_free(&b);
}

/* Two ranks per process (ranks 2p and 2p+1 of 2P), both made by this thread with
 * ncclCommInitRank inside a group, as NCCL documents for several devices per thread: a
 * grouped all-reduce, broadcast and ring of sends over both, results checked; split in
 * groups; destroyed one by one, also by this thread. On the simulator with 2 devices: rank k of a process on
 * device k. */
static void case_pairs(void) {
    enum { K = 2 };
    ncclUniqueId id;
    if (share_id(g_dir, &id)) {
        FAIL("pairs: no unique id");
        return;
    }
    const int N = K * g_P;
    ncclComm_t comms[K] = {NULL, NULL}, other = NULL;
    int ndev = 0;
    if (D) ringlet_device_count(&ndev);
#define ON_DEVICE(k) (D ? (void)ringlet_set_device((k) % ndev) : (void)0)
    /* In the same group: another communicator, one rank per process (its own id), except
     * on rank 0, which makes its rank of it alone after the group. */
    ncclUniqueId id2;
    char path2[512];
    snprintf(path2, sizeof path2, "%s/other-id", g_dir);
    if (g_rank == 0) {
        OK(ncclGetUniqueId(&id2));
        FILE *f = fopen(path2, "wb");
        if (!f || fwrite(&id2, sizeof id2, 1, f) != 1 || fclose(f)) FAIL("pairs: cannot write %s", path2);
    } else {
        size_t got = 0;
        for (double t0 = now(); got != 1 && now() - t0 < 60; usleep(2000)) {
            FILE *f = fopen(path2, "rb");
            if (f) got = fread(&id2, sizeof id2, 1, f), fclose(f);
        }
        if (got != 1) FAIL("pairs: no id in %s", path2);
    }
    OK(ncclGroupStart());
    for (int k = 0; k < K; k++) {
        ON_DEVICE(k);
        OK(ncclCommInitRank(&comms[k], N, id, K * g_rank + k));
    }
    ON_DEVICE(0);
    if (g_rank != 0) OK(ncclCommInitRank(&other, g_P, id2, g_rank));
    OK(ncclGroupEnd());
    if (g_rank == 0) OK(ncclCommInitRank(&other, g_P, id2, 0));
    for (int k = 0; k < K; k++) {
        int n = -1, r = -1;
        OK(ncclCommCount(comms[k], &n));
        OK(ncclCommUserRank(comms[k], &r));
        g_checks++;
        if (n != N || r != K * g_rank + k) FAIL("pairs: comm %d is rank %d of %d, expected %d of %d", k, r, n, K * g_rank + k, N);
    }
    if (g_rank == 0) { /* every rank has joined */
        char path[512];
        snprintf(path, sizeof path, "%s/nccl-id", g_dir);
        unlink(path);
    }
    size_t n = g_N;
    int32_t *h[K], *want = malloc(n * 4), *got = malloc(n * 4);
    void *sb[K], *rb[K];
    for (int k = 0; k < K; k++) {
        ON_DEVICE(k);
        h[k] = malloc(n * 4);
        for (size_t i = 0; i < n; i++) h[k][i] = val(K * g_rank + k, 600, i, ncclInt32);
        sb[k] = balloc(n * 4), rb[k] = balloc(n * 4);
        put(sb[k], h[k], n * 4);
    }
    /* all-reduce */
    for (size_t i = 0; i < n; i++) {
        want[i] = 0;
        for (int r = 0; r < N; r++) want[i] += val(r, 600, i, ncclInt32);
    }
    OK(ncclGroupStart());
    for (int k = 0; k < K; k++) OK(ncclAllReduce(sb[k], rb[k], n, ncclInt32, ncclSum, comms[k], NULL));
    OK(ncclGroupEnd());
    for (int k = 0; k < K; k++) {
        ON_DEVICE(k);
        get(got, rb[k], n * 4);
        check_bytes("pairs allreduce", got, want, n, 4);
    }
    /* broadcast from the last rank, in place */
    for (size_t i = 0; i < n; i++) want[i] = val(N - 1, 600, i, ncclInt32);
    for (int k = 0; k < K; k++) ON_DEVICE(k), put(rb[k], h[k], n * 4);
    OK(ncclGroupStart());
    for (int k = 0; k < K; k++) OK(ncclBroadcast(rb[k], rb[k], n, ncclInt32, N - 1, comms[k], NULL));
    OK(ncclGroupEnd());
    for (int k = 0; k < K; k++) {
        ON_DEVICE(k);
        get(got, rb[k], n * 4);
        check_bytes("pairs broadcast", got, want, n, 4);
    }
    /* a ring of sends: rank r sends to r + 1, receives from r - 1 */
    OK(ncclGroupStart());
    for (int k = 0; k < K; k++) {
        int r = K * g_rank + k;
        OK(ncclSend(sb[k], n, ncclInt32, (r + 1) % N, comms[k], NULL));
        OK(ncclRecv(rb[k], n, ncclInt32, (r + N - 1) % N, comms[k], NULL));
    }
    OK(ncclGroupEnd());
    for (int k = 0; k < K; k++) {
        int from = (K * g_rank + k + N - 1) % N;
        for (size_t i = 0; i < n; i++) want[i] = val(from, 600, i, ncclInt32);
        ON_DEVICE(k);
        get(got, rb[k], n * 4);
        check_bytes("pairs send/recv", got, want, n, 4);
    }
    /* Split in a group: rank 2p + k takes color k, keys reversed (new rank P - 1 - p); an
     * all-reduce over both halves; then a split where the odd ranks give no color. */
    ncclComm_t half[K] = {NULL, NULL}, evens = NULL, none = (ncclComm_t)&none;
    ON_DEVICE(K - 1);
    OK(ncclGroupStart());
    for (int k = 0; k < K; k++) OK(ncclCommSplit(comms[k], k, -(K * g_rank + k), &half[k], NULL));
    OK(ncclGroupEnd());
    for (int k = 0; k < K; k++) {
        int hn = -1, hr = -1, hd = -2, pd = -2;
        OK(ncclCommCount(half[k], &hn));
        OK(ncclCommUserRank(half[k], &hr));
        g_checks++;
        if (hn != g_P || hr != g_P - 1 - g_rank)
            FAIL("pairs: split %d is rank %d of %d, expected %d of %d", k, hr, hn, g_P - 1 - g_rank, g_P);
        /* on its parent's device, not on the one current at the split (the last ON_DEVICE) */
        OK(ncclCommCuDevice(half[k], &hd));
        OK(ncclCommCuDevice(comms[k], &pd));
        g_checks++;
        if (hd != pd || (D && pd != k % ndev)) FAIL("pairs: split %d is on device %d, its parent on %d", k, hd, pd);
        ON_DEVICE(k);
        for (size_t i = 0; i < n; i++) h[k][i] = val(K * g_rank + k, 601, i, ncclInt32);
        put(sb[k], h[k], n * 4);
    }
    OK(ncclGroupStart());
    for (int k = 0; k < K; k++) OK(ncclAllReduce(sb[k], rb[k], n, ncclInt32, ncclSum, half[k], NULL));
    OK(ncclGroupEnd());
    for (int k = 0; k < K; k++) {
        for (size_t i = 0; i < n; i++) {
            want[i] = 0;
            for (int q = 0; q < g_P; q++) want[i] += val(K * q + k, 601, i, ncclInt32);
        }
        ON_DEVICE(k);
        get(got, rb[k], n * 4);
        check_bytes("pairs split allreduce", got, want, n, 4);
    }
    /* Two splits of the communicator in one group (they must not mix): the even ranks
     * (comms[0]) together, then by their process's parity; the odd ranks give no color. */
    ncclComm_t byproc = NULL, none2 = (ncclComm_t)&none2;
    OK(ncclGroupStart());
    ON_DEVICE(0);
    OK(ncclCommSplit(comms[0], 0, K * g_rank, &evens, NULL));
    OK(ncclCommSplit(comms[0], g_rank % 2, 0, &byproc, NULL));
    ON_DEVICE(1);
    OK(ncclCommSplit(comms[1], NCCL_SPLIT_NOCOLOR, 0, &none, NULL));
    OK(ncclCommSplit(comms[1], NCCL_SPLIT_NOCOLOR, 0, &none2, NULL));
    OK(ncclGroupEnd());
    int en = -1, bn = -1, br = -1;
    OK(ncclCommCount(evens, &en));
    OK(ncclCommCount(byproc, &bn));
    OK(ncclCommUserRank(byproc, &br));
    g_checks += 3;
    if (en != g_P) FAIL("pairs: the split of the even ranks has %d ranks, expected %d", en, g_P);
    if (bn != (g_P + 1 - g_rank % 2) / 2 || br != g_rank / 2)
        FAIL("pairs: the split by process parity gave rank %d of %d, expected %d of %d", br, bn, g_rank / 2,
             (g_P + 1 - g_rank % 2) / 2);
    if (none || none2) FAIL("pairs: a split with NCCL_SPLIT_NOCOLOR gave a communicator");
    OK(ncclCommDestroy(evens));
    OK(ncclCommDestroy(byproc));
    /* The other communicator goes first and alone: it is not one of the ranks of comms[],
     * so its destroy must not wait for theirs. Rank 0 (its root, whose destroy waits for
     * everybody's) says when it is done, and nobody destroys anything else before that: a
     * destroy held back until comms[] go (the group's comms made one set) would keep rank
     * 0 waiting until its deadline. */
    double t0 = now();
    OK(ncclCommDestroy(other));
    double dt = now() - t0;
    char gone[512];
    snprintf(gone, sizeof gone, "%s/other-gone", g_dir);
    if (g_rank == 0) {
        g_checks++;
        if (dt > 15) FAIL("pairs: destroying the other communicator took %.1f s (a rank held it back)", dt);
        FILE *f = fopen(gone, "w");
        if (f) fclose(f);
        unlink(path2);
    } else {
        for (double w = now(); access(gone, F_OK) != 0 && now() - w < 90;) usleep(2000);
    }
    /* Splits of non-blocking communicators outside a group, one thread splitting both its
     * ranks one after another: as NCCL's, each returns ncclInProgress and
     * ncclCommGetAsyncError follows it. Rank 2p's split cannot end before rank 2p + 1's has
     * begun, so both it and its parent say ncclInProgress then (the first split waited in
     * its exchange until RINGLET_TIMEOUT, the parent lost). */
    ncclComm_t nb[K] = {NULL, NULL}, nbs[K] = {NULL, NULL};
    ncclConfig_t nbcfg = NCCL_CONFIG_INITIALIZER;
    nbcfg.blocking = 0;
    OK(ncclGroupStart());
    for (int k = 0; k < K; k++) {
        ON_DEVICE(k);
        OK(ncclCommSplit(comms[k], 0, K * g_rank + k, &nb[k], &nbcfg));
    }
    EXPECT(ncclGroupEnd(), ncclSuccess, ncclInProgress);
    for (int k = 0; k < K; k++) OK(settle(nb[k]));
    ncclResult_t st0 = ncclSuccess, st1 = ncclSuccess;
    EXPECT(ncclCommSplit(nb[0], 0, K * g_rank, &nbs[0], NULL), ncclInProgress, -1);
    if (nbs[0]) OK(ncclCommGetAsyncError(nbs[0], &st0));
    OK(ncclCommGetAsyncError(nb[0], &st1));
    g_checks++;
    if (!nbs[0] || st0 != ncclInProgress || st1 != ncclInProgress)
        FAIL("pairs: a non-blocking split waiting for this process's other rank: handle %p, it says %d, its parent %d "
             "(want ncclInProgress, %d)", (void *)nbs[0], (int)st0, (int)st1, (int)ncclInProgress);
    EXPECT(ncclCommSplit(nb[1], 0, K * g_rank + 1, &nbs[1], NULL), ncclInProgress, -1);
    for (int k = 0; k < K; k++) {
        int sn = -1, sr = -1;
        if (!nbs[k]) continue;
        OK(settle(nbs[k]));
        OK(ncclCommCount(nbs[k], &sn));
        OK(ncclCommUserRank(nbs[k], &sr));
        g_checks++;
        if (sn != N || sr != K * g_rank + k) FAIL("pairs: non-blocking split %d is rank %d of %d", k, sr, sn);
        ON_DEVICE(k);
        for (size_t i = 0; i < n; i++) h[k][i] = val(K * g_rank + k, 602, i, ncclInt32);
        put(sb[k], h[k], n * 4);
    }
    if (nbs[0] && nbs[1]) {
        OK(ncclGroupStart());
        for (int k = 0; k < K; k++) OK(ncclAllReduce(sb[k], rb[k], n, ncclInt32, ncclSum, nbs[k], NULL));
        EXPECT(ncclGroupEnd(), ncclSuccess, ncclInProgress);
        for (size_t i = 0; i < n; i++) {
            want[i] = 0;
            for (int q = 0; q < N; q++) want[i] += val(q, 602, i, ncclInt32);
        }
        for (int k = 0; k < K; k++) {
            OK(settle(nbs[k]));
            ON_DEVICE(k);
            get(got, rb[k], n * 4);
            check_bytes("pairs non-blocking split allreduce", got, want, n, 4);
        }
    }
    for (int k = 0; k < K; k++) {
        if (nbs[k]) OK(ncclCommDestroy(nbs[k]));
        OK(ncclCommDestroy(nb[k]));
    }
    for (int k = 0; k < K; k++) OK(ncclCommDestroy(half[k]));  /* one thread, one by one */
    for (int k = 0; k < K; k++) OK(ncclCommDestroy(comms[k]));
    for (int k = 0; k < K; k++) ON_DEVICE(k), bfree(sb[k]), bfree(rb[k]), free(h[k]);
#undef ON_DEVICE
    free(want), free(got);
}

static void case_abortinit(void) {
    ncclUniqueId id;
    OK(ncclGetUniqueId(&id));
    ncclComm_t c = NULL;
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    cfg.blocking = 0;
    EXPECT(ncclCommInitRankConfig(&c, 2, id, 0, &cfg), ncclInProgress, ncclInProgress);
    if (!c) {
        FAIL("abortinit: no communicator handle from a non-blocking init");
        return;
    }
    ncclResult_t a = ncclSuccess;
    OK(ncclCommGetAsyncError(c, &a));
    g_checks++;
    if (a != ncclInProgress) FAIL("abortinit: the init whose peer never comes says %d, not ncclInProgress", (int)a);
    /* A child forked meanwhile (the init's thread is the parent's): each call fails at once,
     * none waits for that thread. */
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        int32_t x[4] = {0};
        ncclResult_t e = ncclSuccess, g = ncclCommGetAsyncError(c, &e);
        ncclResult_t r = ncclAllReduce(x, x, 4, ncclInt32, ncclSum, c, NULL), d = ncclCommDestroy(c);
        int said = strstr(ncclGetLastError(NULL), "forked") != NULL;
        if (g != ncclInvalidUsage || r != g || d != g || !said)
            printf("FAIL: abortinit: in a forked child: async error %d, all-reduce %d, destroy %d: %s\n", (int)g, (int)r,
                   (int)d, ncclGetLastError(NULL));
        fflush(stdout);
        _exit(g == ncclInvalidUsage && r == g && d == g && said ? 0 : 1);
    }
    int st = 0;
    g_checks++;
    if (pid < 0 || waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st) != 0)
        FAIL("abortinit: a child forked during the init: its calls did not all fail at once (status 0x%x)", st);
    double t0 = now();
    OK(ncclCommAbort(c));
    double dt = now() - t0;
    g_checks++;
    if (dt > 5) FAIL("abortinit: ncclCommAbort of an init waiting for its peer took %.3f s", dt);
    else printf("nccl_api: abortinit: ncclCommAbort stopped the waiting init in %.1f ms\n", dt * 1e3);
}

int main(int argc, char **argv) {
    const char *cas = "all", *dir = NULL;
    int device = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--case") && i + 1 < argc) cas = argv[++i];
        else if (!strcmp(argv[i], "--memory") && i + 1 < argc) device = !strcmp(argv[++i], "device");
        else if (!strcmp(argv[i], "--count") && i + 1 < argc) g_N = strtoull(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--dir") && i + 1 < argc) g_dir = dir = argv[++i];
        else return fprintf(stderr, "usage: nccl_api --case all|fault|abortcall|initall|pairs|abortinit|threads [--memory host|device] "
                              "[--count N] [--dir D]\n"), 2;
    }
    if (device && !(D = rl_device())) {
        printf("FAIL: --memory device, but no device backend: %s\n", rl_device_unavailable());
        return 1;
    }
    /* Without --dir: a folder of the job in the temporary folder (the ranks of one launch
     * share MASTER_PORT), never the working directory, which may be a source tree. */
    static char tmpdir[400];
    if (!dir) {
        const char *t = getenv("TMPDIR"), *port = getenv("MASTER_PORT");
        snprintf(tmpdir, sizeof tmpdir, "%s/ringlet-nccl_api-%d-%s", t && *t ? t : "/tmp", (int)getuid(),
                 port && *port ? port : "0");
        if (mkdir(tmpdir, 0700) != 0 && errno != EEXIST)
            return printf("FAIL: cannot make %s: %s\n", tmpdir, strerror(errno)), 1;
        g_dir = dir = tmpdir;
    }
    const char *er = getenv("RANK"), *ew = getenv("WORLD_SIZE");
    g_rank = er ? atoi(er) : 0;
    g_P = ew ? atoi(ew) : 1;
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (!strcmp(cas, "initall")) {
        g_P = 1;
        case_initall();
    } else if (!strcmp(cas, "pairs")) {
        case_pairs();
    } else if (!strcmp(cas, "abortinit")) {
        g_P = 1;
        case_abortinit();
    } else if (!strcmp(cas, "threads")) {
        g_P = 1;
        case_threads();
    } else {
        ncclUniqueId id;
        if (share_id(dir, &id)) return 1;
        ncclComm_t c = NULL;
        ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
        cfg.blocking = 0;
        /* NCCL_COMM_BLOCKING=1 overrides the config, as in NCCL: a blocking init */
        const char *eb = getenv("NCCL_COMM_BLOCKING");
        if (eb && !strcmp(eb, "1")) OK(ncclCommInitRankConfig(&c, g_P, id, g_rank, &cfg));
        else EXPECT(ncclCommInitRankConfig(&c, g_P, id, g_rank, &cfg), ncclInProgress, ncclSuccess);
        if (!c || settle(c) != ncclSuccess) {
            printf("FAIL rank %d: init: %s\n", g_rank, ncclGetLastError(c));
            return 1;
        }
        if (g_rank == 0) { /* every rank has joined, so has read it: a later run must not find it */
            char path[512];
            snprintf(path, sizeof path, "%s/nccl-id", dir);
            unlink(path);
        }
        if (!strcmp(cas, "fault")) {
            if (g_P < 2) return printf("FAIL: --case fault needs 2 ranks\n"), 1;
            case_fault(c);
        } else if (!strcmp(cas, "abortcall")) {
            if (g_P != 2) return printf("FAIL: --case abortcall needs 2 ranks\n"), 1;
            case_abortcall(c);
        } else {
            case_all(c);
            OK(ncclCommFinalize(c));
            OK(ncclCommDestroy(c));
        }
    }
    printf("nccl_api: rank %d of %d: %ld checks, %ld failed%s\n", g_rank, g_P, g_checks, g_failed,
           D ? " on device memory" : "");
    return g_failed ? 1 : 0;
}
