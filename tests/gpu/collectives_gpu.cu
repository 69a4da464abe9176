/* GPU correctness test of every collective on CUDA device buffers, stream-ordered
 * (public API only). The device-buffer twin of tests/mp/collectives.c.
 *
 * Each rank (ringlet_comm_init_env, launched by ringlet-run) uses device
 * LOCAL_RANK % (device count) and one CUDA stream (non-blocking by default, as
 * PyTorch's; --stream blocking makes one with cudaStreamCreate). Grid:
 *   collective (allreduce, broadcast, reduce, allgather, reduce_scatter,
 *               send/recv ring, barrier)
 *   x dtype x op (reducing collectives) x count {0, 1, P+1, max-count}
 *   x {out of place, in place}, on the stream;
 *   plus, once per collective x dtype x count, a call with stream NULL on the same
 *   device buffers (synchronous: the test synchronises before it, the call returns
 *   when the result is in place).
 * Root (broadcast, reduce) rotates with the case index. For allgather and
 * reduce_scatter the count is the per-rank block.
 *
 * One case on the stream, with no host synchronisation between its steps:
 *   (0) every 4th case: a kernel that spins 2 ms first, so that a library which reads
 *       the buffers before the stream got there reads the sentinel, not the input;
 *   (1) cudaMemsetAsync of each buffer and its guard bytes to a sentinel, then a
 *       kernel that writes this rank's random input: element i of rank r's input in
 *       case k is a pure function of (seed, r, k, i), by the same counter-based hash
 *       and per-dtype conversion as tests/mp/collectives.c, in __host__ __device__
 *       code shared by the host and the kernels;
 *   (2) the ringlet call with the stream (it must return at once);
 *   (3) kernels on the same stream that compare every element of the result with the
 *       reference, which they compute by regenerating every rank's input (so nothing
 *       that went through the library under test is trusted), and count mismatches
 *       and the first bad index into device counters; they also check the guard bytes
 *       before and after each buffer, that out-of-place sendbufs are unchanged, that a
 *       non-root recvbuf of reduce is not written, that a non-root in-place reduce
 *       buffer and the other blocks of an in-place reduce_scatter are unchanged;
 *   (4) only then the counters are copied (async, to pinned memory) and the stream
 *       synchronised (polled, with a deadline: a stream that never finishes is
 *       reported, not waited for forever), and ringlet_comm_get_async_error read.
 * --batch K issues K cases back to back and synchronises once (many stream-ordered
 * calls queued at once); details of a failure (the bad value) are printed for the
 * last case of a batch only, whose buffers are still intact.
 *
 * Tolerances (as tests/mp/collectives.c; eps = 2^-10 float16, 2^-7 bfloat16, 2^-23
 * float32, 2^-52 float64; S = sum_r |x_r|; ref = the reduction in double):
 *   integers and min/max: exact (sum/prod wrap; avg = wrapped sum / P toward zero);
 *   sum:  |got - ref| <= P * eps * S + eps * |ref| + P * tiny
 *   avg:  |got - ref| <= eps * S     + eps * |ref| + P * tiny
 *   prod: |got - ref| <= (P + 1) * eps * |ref|   (inputs in [0.5, 1.5))
 * NaN never passes.
 *
 * Also: a self-test of the generator (device fill == host generator) and of the
 * checker (an exact reference passes, one corrupted element is caught); the barrier
 * (on the stream: a rotating rank spins 20 ms on its stream before the barrier, and
 * the barrier call must return to the host before that spin ends; every rank's
 * stream-ordered timestamp after the barrier must follow the late rank's spin end,
 * by the GPU's global timer, checked when all ranks share one GPU; with stream
 * NULL: the host clock, as the host test); mixed host/device buffers in one call
 * return RINGLET_ERR_INVALID_ARGUMENT (device + pageable host, device + pinned host,
 * with and without a stream) and leave the communicator working.
 *
 * Options:
 *   --quick             each dtype with two ops only at the reducing collectives
 *   --max-count N       the large count (default 1000003); 0 leaves it out
 *   --seed S            base seed (default 20240613)
 *   --batch K           cases between synchronisations (default 1)
 *   --stream nonblocking|blocking   the stream's kind (default nonblocking)
 *   --stream-timeout S  seconds a synchronisation may take (default RINGLET_TIMEOUT + 60, or 360)
 *   --colls LIST        comma-separated subset of allreduce,broadcast,reduce,allgather,
 *                       reduce_scatter,sendrecv,barrier
 *   --probe             initialise, print "probe: ok" and exit 0 (the transport probe
 *                       of collectives_gpu.sh); exit 3 when init fails
 *   --verbose           print every case
 * Output: "collectives_gpu: rank R of P: N cases checked, F failed (...)" per rank,
 * failures (at most 30 lines per rank) before it. Exit 0 iff none failed.
 */
#include <cuda_runtime.h>

#include <inttypes.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ringlet.h"

#define HD __host__ __device__ inline

enum { C_ALLREDUCE, C_BROADCAST, C_REDUCE, C_ALLGATHER, C_REDUCE_SCATTER, C_SENDRECV, C_BARRIER, C_NUM };
static const char *const coll_name[C_NUM] = {"allreduce",      "broadcast", "reduce",  "allgather",
                                             "reduce_scatter", "sendrecv",  "barrier"};
static const char *const dt_name[RINGLET_NUM_DATATYPES] = {"int8",    "uint8",   "int32",   "uint32",  "int64",
                                                           "uint64",  "float16", "float32", "float64", "bfloat16"};
static const char *const op_name[RINGLET_NUM_OPS] = {"sum", "prod", "max", "min", "avg"};

#define GUARD 64     /* sentinel bytes before and after every buffer */
#define SENT 0xA5    /* the sentinel byte */
#define MAX_PRINT 30 /* failure lines per rank */
#define MAXREG 8     /* checked regions per case */

/* ================================================================ shared host/device code */

HD size_t dtsz(int dt) {
    switch (dt) {
    case RINGLET_INT8:
    case RINGLET_UINT8: return 1;
    case RINGLET_FLOAT16:
    case RINGLET_BFLOAT16: return 2;
    case RINGLET_INT32:
    case RINGLET_UINT32:
    case RINGLET_FLOAT32: return 4;
    default: return 8;
    }
}
HD int is_float(int dt) {
    return dt == RINGLET_FLOAT16 || dt == RINGLET_FLOAT32 || dt == RINGLET_FLOAT64 || dt == RINGLET_BFLOAT16;
}
HD int is_signed(int dt) { return dt == RINGLET_INT8 || dt == RINGLET_INT32 || dt == RINGLET_INT64; }

HD uint32_t f2u(float f) {
#ifdef __CUDA_ARCH__
    return __float_as_uint(f);
#else
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
#endif
}
HD float u2f(uint32_t u) {
#ifdef __CUDA_ARCH__
    return __uint_as_float(u);
#else
    float f;
    memcpy(&f, &u, 4);
    return f;
#endif
}
HD uint64_t d2u(double d) {
#ifdef __CUDA_ARCH__
    return (uint64_t)__double_as_longlong(d);
#else
    uint64_t u;
    memcpy(&u, &d, 8);
    return u;
#endif
}
HD double u2d(uint64_t u) {
#ifdef __CUDA_ARCH__
    return __longlong_as_double((long long)u);
#else
    double d;
    memcpy(&d, &u, 8);
    return d;
#endif
}

HD uint64_t mix64(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
HD uint64_t rnd(uint64_t key, size_t i) { return mix64(key + ((uint64_t)i + 1) * 0x9E3779B97F4A7C15ull); }
HD uint64_t case_key(uint64_t seed, uint64_t idx, int rank) {
    return mix64(mix64(seed * 0x2545F4914F6CDD1Dull + (uint64_t)rank + 1) ^ (idx * 0xD6E8FEB86659FD93ull + 7));
}

/* IEEE binary16 <-> float, round to nearest even (as tests/mp/collectives.c). */
HD uint16_t f2h(float f) {
    uint32_t x = f2u(f);
    uint32_t sign = (x >> 16) & 0x8000u, ax = x & 0x7fffffffu;
    if (ax >= 0x7f800000u) return (uint16_t)(sign | (ax > 0x7f800000u ? 0x7e00u : 0x7c00u));
    if (ax >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u);
    if (ax < 0x38800000u) {
        if (ax <= 0x33000000u) return (uint16_t)sign;
        uint32_t e = ax >> 23, m = (ax & 0x7fffffu) | 0x800000u, shift = 126 - e;
        uint32_t r = m >> shift, rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
        if (rem > half || (rem == half && (r & 1))) r++;
        return (uint16_t)(sign | r);
    }
    uint32_t r = ax - 0x38000000u;
    return (uint16_t)(sign | ((r + 0xfffu + ((r >> 13) & 1u)) >> 13));
}
HD float h2f(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu, x;
    if (e == 0) {
        x = f2u((float)m * 0x1p-24f) | sign;
    } else if (e == 31) {
        x = sign | 0x7f800000u | (m << 13);
    } else {
        x = sign | ((e + 112) << 23) | (m << 13);
    }
    return u2f(x);
}
HD uint16_t f2b(float f) {
    uint32_t x = f2u(f);
    if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40u);
    x += 0x7fffu + ((x >> 16) & 1u);
    return (uint16_t)(x >> 16);
}
HD float b2f(uint16_t b) { return u2f((uint32_t)b << 16); }

/* The bit pattern of element i of the input whose key is `key`. */
HD uint64_t gen_bits(int dt, int op, uint64_t key, size_t i) {
    uint64_t z = rnd(key, i);
    switch (dt) {
    case RINGLET_INT8:
    case RINGLET_UINT8: return z & 0xffu;
    case RINGLET_INT32:
    case RINGLET_UINT32: return z & 0xffffffffu;
    case RINGLET_INT64:
    case RINGLET_UINT64: return z;
    case RINGLET_FLOAT64: {
        double d = op == RINGLET_PROD ? 0.5 + (double)(z >> 11) * 0x1p-53 : (double)(z >> 11) * 0x1p-52 - 1.0;
        return d2u(d);
    }
    default: {
        float f = op == RINGLET_PROD ? (float)(0.5 + (double)(z >> 40) * 0x1p-24)
                                     : (float)((double)(z >> 40) * 0x1p-23 - 1.0);
        if (dt == RINGLET_FLOAT16) return f2h(f);
        if (dt == RINGLET_BFLOAT16) return f2b(f);
        return f2u(f);
    }
    }
}

HD void store_bits(int dt, void *p, size_t j, uint64_t b) {
    switch (dtsz(dt)) {
    case 1: ((uint8_t *)p)[j] = (uint8_t)b; break;
    case 2: ((uint16_t *)p)[j] = (uint16_t)b; break;
    case 4: ((uint32_t *)p)[j] = (uint32_t)b; break;
    default: ((uint64_t *)p)[j] = b; break;
    }
}
HD uint64_t load_bits(int dt, const void *p, size_t j) {
    switch (dtsz(dt)) {
    case 1: return ((const uint8_t *)p)[j];
    case 2: return ((const uint16_t *)p)[j];
    case 4: return ((const uint32_t *)p)[j];
    default: return ((const uint64_t *)p)[j];
    }
}
HD double bits_to_double(int dt, uint64_t b) {
    switch (dt) {
    case RINGLET_FLOAT16: return h2f((uint16_t)b);
    case RINGLET_BFLOAT16: return b2f((uint16_t)b);
    case RINGLET_FLOAT32: return u2f((uint32_t)b);
    default: return u2d(b);
    }
}
HD int64_t bits_to_int(int dt, uint64_t b) {
    switch (dt) {
    case RINGLET_INT8: return (int8_t)(uint8_t)b;
    case RINGLET_INT32: return (int32_t)(uint32_t)b;
    default: return (int64_t)b;
    }
}
HD uint64_t width_mask(int dt) {
    size_t s = dtsz(dt);
    return s == 8 ? ~0ull : ((1ull << (8 * s)) - 1);
}
HD double eps_of(int dt) {
    switch (dt) {
    case RINGLET_FLOAT16: return 0x1p-10;
    case RINGLET_BFLOAT16: return 0x1p-7;
    case RINGLET_FLOAT32: return 0x1p-23;
    default: return 0x1p-52;
    }
}
HD double tiny_of(int dt) {
    switch (dt) {
    case RINGLET_FLOAT16: return 0x1p-24;
    case RINGLET_BFLOAT16: return 0x1p-133;
    case RINGLET_FLOAT32: return 0x1p-149;
    default: return 0x1p-1074;
    }
}

/* What every kernel needs to regenerate the inputs of one case. */
struct CaseP {
    uint64_t seed, idx;
    int dt, op, P;
};

/* A checked region. Elements (of the case's dtype) unless a byte kind. */
enum {
    K_INPUT,  /* element j == input of `rank` at element off + j */
    K_BLOCKS, /* element j == input of rank j / blk at element j % blk (an all-gather result) */
    K_REDUCE, /* element j == the reduction over all ranks of element off + j (within the bound) */
    K_SENT,   /* byte j == SENT, j < n */
    K_GUARD   /* p is a buffer's base: bytes [0, GUARD) and [GUARD + n, 2 GUARD + n) == SENT */
};
struct Region {
    int kind, rank;
    const unsigned char *p;
    size_t n, off, blk;
};

/* The expected value of one element: exact bits, or a double and a bound. */
struct Expect {
    uint64_t bits;
    double ref, bound;
    int approx;
};

/* The reduction of element g over all ranks (mirrors check_reduction of the host test). */
HD void reduce_expect(const CaseP &c, size_t g, Expect *e) {
    const int dt = c.dt, op = c.op, P = c.P;
    if (is_float(dt)) {
        const double eps = eps_of(dt), tiny = tiny_of(dt);
        double ref = bits_to_double(dt, gen_bits(dt, op, case_key(c.seed, c.idx, 0), g)), s = fabs(ref);
        for (int r = 1; r < P; r++) {
            double v = bits_to_double(dt, gen_bits(dt, op, case_key(c.seed, c.idx, r), g));
            switch (op) {
            case RINGLET_SUM:
            case RINGLET_AVG: ref += v; s += fabs(v); break;
            case RINGLET_PROD: ref *= v; break;
            case RINGLET_MAX: ref = v > ref ? v : ref; break;
            default: ref = v < ref ? v : ref; break;
            }
        }
        double bound;
        switch (op) {
        case RINGLET_SUM: bound = P * eps * s + eps * fabs(ref) + P * tiny; break;
        case RINGLET_AVG:
            ref /= P;
            bound = eps * s + eps * fabs(ref) + P * tiny;
            break;
        case RINGLET_PROD: bound = (P + 1) * eps * fabs(ref); break;
        default: bound = 0; break;
        }
        e->ref = ref;
        e->bound = bound;
        e->approx = 1;
        e->bits = 0;
        return;
    }
    const uint64_t mask = width_mask(dt);
    const int sgn = is_signed(dt);
    uint64_t acc = gen_bits(dt, op, case_key(c.seed, c.idx, 0), g);
    int64_t sacc = bits_to_int(dt, acc);
    for (int r = 1; r < P; r++) {
        uint64_t v = gen_bits(dt, op, case_key(c.seed, c.idx, r), g);
        int64_t sv = bits_to_int(dt, v);
        switch (op) {
        case RINGLET_SUM:
        case RINGLET_AVG: acc += v; break;
        case RINGLET_PROD: acc *= v; break;
        case RINGLET_MAX:
            if (sgn ? sv > sacc : v > acc) acc = v, sacc = sv;
            break;
        default:
            if (sgn ? sv < sacc : v < acc) acc = v, sacc = sv;
            break;
        }
    }
    acc &= mask;
    if (op == RINGLET_AVG) {
        if (sgn)
            acc = (uint64_t)(bits_to_int(dt, acc) / P);
        else
            acc = acc / (uint64_t)P;
        acc &= mask;
    }
    e->bits = acc;
    e->approx = 0;
    e->ref = e->bound = 0;
}

/* Number of items (elements or bytes) a region's check visits. */
HD size_t region_items(const Region &r) { return r.kind == K_GUARD ? 2 * (size_t)GUARD : r.n; }

/* Item j of region r: its value in *got and whether it is right; *e the expectation. */
HD int region_item_ok(const CaseP &c, const Region &r, size_t j, uint64_t *got, Expect *e) {
    e->approx = 0;
    e->ref = e->bound = 0;
    switch (r.kind) {
    case K_SENT:
        *got = r.p[j];
        e->bits = SENT;
        return *got == SENT;
    case K_GUARD: {
        size_t b = j < GUARD ? j : GUARD + r.n + (j - GUARD);
        *got = r.p[b];
        e->bits = SENT;
        return *got == SENT;
    }
    case K_INPUT:
        *got = load_bits(c.dt, r.p, j);
        e->bits = gen_bits(c.dt, c.op, case_key(c.seed, c.idx, r.rank), r.off + j);
        return *got == e->bits;
    case K_BLOCKS:
        *got = load_bits(c.dt, r.p, j);
        e->bits = gen_bits(c.dt, c.op, case_key(c.seed, c.idx, (int)(j / r.blk)), j % r.blk);
        return *got == e->bits;
    default: {
        *got = load_bits(c.dt, r.p, j);
        reduce_expect(c, r.off + j, e);
        if (!e->approx) return *got == e->bits;
        double g = bits_to_double(c.dt, *got);
        return fabs(g - e->ref) <= e->bound; /* false for NaN */
    }
    }
}

/* ================================================================ kernels */

__global__ void k_fill(int dt, int op, uint64_t key, unsigned char *p, size_t off, size_t n) {
    for (size_t j = blockIdx.x * (size_t)blockDim.x + threadIdx.x; j < n; j += (size_t)gridDim.x * blockDim.x)
        store_bits(dt, p, j, gen_bits(dt, op, key, off + j));
}

__global__ void k_check(CaseP c, Region r, unsigned long long *bad, unsigned long long *first) {
    const size_t n = region_items(r);
    unsigned long long nb = 0, f = ~0ull;
    for (size_t j = blockIdx.x * (size_t)blockDim.x + threadIdx.x; j < n; j += (size_t)gridDim.x * blockDim.x) {
        uint64_t got;
        Expect e;
        if (!region_item_ok(c, r, j, &got, &e)) {
            nb++;
            if (j < f) f = j;
        }
    }
    if (nb) {
        atomicAdd(bad, nb);
        atomicMin(first, f);
    }
}

__device__ inline uint64_t global_ns() {
    uint64_t t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

/* Spins ns nanoseconds; writes the global timer at its end to *stamp (if given). */
__global__ void k_spin(uint64_t ns, unsigned long long *stamp) {
    uint64_t t0 = global_ns(), t;
    while ((t = global_ns()) - t0 < ns) __nanosleep(1000);
    if (stamp) *stamp = t;
}

__global__ void k_stamp(unsigned long long *stamp) { *stamp = global_ns(); }

/* ================================================================ host state */

typedef struct {
    int coll, dt, op, root, inplace, nostream;
    size_t count;
    uint64_t idx;
    int nreg;
    Region reg[MAXREG];
    char what[MAXREG][72];
} case_t;

static ringlet_comm_t g_comm;
static int g_rank, g_P, g_dev, g_same_gpu;
static uint64_t g_seed = 20240613u;
static long g_cases, g_failed, g_printed;
static int g_verbose, g_batch = 1;
static double g_stream_timeout = 360, g_max_call_ms;
static cudaStream_t g_stream;
static unsigned char *g_sbase, *g_rbase; /* device buffers, GUARD bytes before the data */
static size_t g_cap;                     /* bytes usable between the guards */
static unsigned long long *d_bad, *d_first, *d_ts; /* device counters [g_batch * MAXREG], timestamps [2] */
static unsigned long long *h_bad, *h_first;         /* pinned mirrors */
static case_t *g_pending;
static int g_npending;
static int g_nsm = 132;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static inline unsigned char *S_(void) { return g_sbase + GUARD; }
static inline unsigned char *R_(void) { return g_rbase + GUARD; }

static void fmt_bits(int dt, uint64_t b, char *out, size_t n) {
    if (is_float(dt)) {
        if (dtsz(dt) == 2)
            snprintf(out, n, "%.9g (0x%04" PRIx64 ")", bits_to_double(dt, b), b);
        else
            snprintf(out, n, "%.17g", bits_to_double(dt, b));
    } else if (is_signed(dt)) {
        snprintf(out, n, "%" PRId64, bits_to_int(dt, b));
    } else {
        snprintf(out, n, "%" PRIu64, b);
    }
}

static int is_reducing(int coll) { return coll == C_ALLREDUCE || coll == C_REDUCE || coll == C_REDUCE_SCATTER; }

static void case_desc(const case_t *c, char *out, size_t n) {
    char root[16] = "-";
    if (c->coll == C_BROADCAST || c->coll == C_REDUCE) snprintf(root, sizeof root, "%d", c->root);
    snprintf(out, n, "%s dtype=%s op=%s count=%zu inplace=%d root=%s stream=%s case=%" PRIu64 " P=%d",
             coll_name[c->coll], c->coll == C_BARRIER ? "-" : dt_name[c->dt], is_reducing(c->coll) ? op_name[c->op] : "-",
             c->count, c->inplace, root, c->nostream ? "NULL" : "yes", c->idx, g_P);
}

static void failf(const case_t *c, const char *what) {
    g_failed++;
    if (g_printed++ >= MAX_PRINT) return;
    if (c) {
        char d[256];
        case_desc(c, d, sizeof d);
        printf("FAIL rank %d: %s: %s\n", g_rank, d, what);
    } else {
        printf("FAIL rank %d: %s\n", g_rank, what);
    }
}

static void summary(const char *tail) {
    printf("collectives_gpu: rank %d of %d: %ld cases checked, %ld failed (%s)\n", g_rank, g_P, g_cases, g_failed,
           tail);
    fflush(stdout);
}

/* A ringlet call returned an error: nothing after it can be trusted; stop the job. */
static void fatal_rc(const case_t *c, const char *call, ringlet_result_t rc) {
    char d[256] = "setup";
    if (c) case_desc(c, d, sizeof d);
    printf("FAIL rank %d: %s: %s returned %d (%s): %s\n", g_rank, d, call, (int)rc, ringlet_strerror(rc),
           ringlet_comm_last_error(g_comm));
    g_failed++;
    summary("stopped at the error above");
    ringlet_comm_abort(g_comm);
    exit(1);
}

/* A CUDA call failed. */
static void fatal_cuda(const char *what, cudaError_t e) {
    printf("FAIL rank %d: %s: %s (%s)\n", g_rank, what, cudaGetErrorString(e), cudaGetErrorName(e));
    g_failed++;
    summary("stopped at the CUDA error above");
    if (g_comm) ringlet_comm_abort(g_comm);
    exit(1);
}

#define CK(call)                                            \
    do {                                                    \
        cudaError_t e_ = (call);                            \
        if (e_ != cudaSuccess) fatal_cuda(#call, e_);       \
    } while (0)
#define CK_LAUNCH(what)                                     \
    do {                                                    \
        cudaError_t e_ = cudaGetLastError();                \
        if (e_ != cudaSuccess) fatal_cuda(what, e_);        \
    } while (0)

/* Waits for the stream, polling, within g_stream_timeout. A stream that does not
 * finish means a library that holds it forever: report and leave at once (abort
 * could wait on the stuck thread). */
static void sync_stream(const case_t *c, const char *when) {
    const double t0 = now_s();
    for (;;) {
        cudaError_t e = cudaStreamQuery(g_stream);
        if (e == cudaSuccess) return;
        if (e != cudaErrorNotReady) fatal_cuda(when, e);
        if (now_s() - t0 > g_stream_timeout) {
            char d[256] = "-";
            if (c) case_desc(c, d, sizeof d);
            printf("FAIL rank %d: %s: the stream did not finish within %.0f s (%s); last case issued: %s; async "
                   "error: %s\n",
                   g_rank, when, g_stream_timeout, "the library holds the stream", d,
                   ringlet_comm_last_error(g_comm));
            g_failed++;
            summary("stopped: stream never finished");
            _exit(1);
        }
        usleep(20);
    }
}

static unsigned grid_for(size_t n) {
    size_t b = (n + 255) / 256;
    size_t cap = (size_t)g_nsm * 8;
    return (unsigned)(b < 1 ? 1 : b > cap ? cap : b);
}

static void fill(int dt, int op, int rank, uint64_t idx, unsigned char *p, size_t off, size_t n) {
    if (!n) return;
    k_fill<<<grid_for(n), 256, 0, g_stream>>>(dt, op, case_key(g_seed, idx, rank), p, off, n);
    CK_LAUNCH("fill kernel launch");
}

/* Sentinel over a buffer's data [0, used) and both guards. */
static void sentinel(unsigned char *base, size_t used) {
    CK(cudaMemsetAsync(base, SENT, used + 2 * GUARD, g_stream));
}

static void add_region(case_t *c, int kind, int rank, const void *p, size_t n, size_t off, size_t blk,
                       const char *what) {
    if (c->nreg >= MAXREG) {
        printf("rank %d: internal error: too many regions\n", g_rank);
        exit(1);
    }
    if (kind != K_GUARD && n == 0) return;
    Region r;
    r.kind = kind;
    r.rank = rank;
    r.p = (const unsigned char *)p;
    r.n = n;
    r.off = off;
    r.blk = blk;
    c->reg[c->nreg] = r;
    snprintf(c->what[c->nreg], sizeof c->what[0], "%s", what);
    c->nreg++;
}

static CaseP params(const case_t *c) {
    CaseP p;
    p.seed = g_seed;
    p.idx = c->idx;
    p.dt = c->dt;
    p.op = c->op;
    p.P = g_P;
    return p;
}

/* Enqueues the check kernels of every region of c into counter slot `slot`. */
static void launch_checks(const case_t *c, int slot) {
    CaseP p = params(c);
    for (int k = 0; k < c->nreg; k++) {
        size_t n = region_items(c->reg[k]);
        k_check<<<grid_for(n), 256, 0, g_stream>>>(p, c->reg[k], d_bad + (size_t)slot * MAXREG + k,
                                                   d_first + (size_t)slot * MAXREG + k);
        CK_LAUNCH("check kernel launch");
    }
}

/* Reports the counters of pending case c (slot s); details when its buffers are intact. */
static void report(const case_t *c, int s, int intact) {
    for (int k = 0; k < c->nreg; k++) {
        unsigned long long bad = h_bad[(size_t)s * MAXREG + k], first = h_first[(size_t)s * MAXREG + k];
        if (!bad) continue;
        const Region &r = c->reg[k];
        char w[700], detail[400] = "";
        if (intact && first < region_items(r)) {
            /* the bad item, read back, and the host's own expectation of it */
            const int bytes = r.kind == K_SENT || r.kind == K_GUARD;
            const size_t es = bytes ? 1 : dtsz(c->dt);
            const size_t at = r.kind == K_GUARD ? (first < GUARD ? first : GUARD + r.n + (first - GUARD)) : first;
            uint64_t got = 0; /* little-endian: the element's bits */
            if (cudaMemcpy(&got, r.p + at * es, es, cudaMemcpyDeviceToHost) == cudaSuccess) {
                Expect ex;
                ex.approx = 0;
                ex.ref = ex.bound = 0;
                int ok;
                if (bytes) {
                    ex.bits = SENT;
                    ok = got == SENT;
                } else if (r.kind == K_REDUCE) {
                    reduce_expect(params(c), r.off + first, &ex);
                    ok = ex.approx ? fabs(bits_to_double(c->dt, got) - ex.ref) <= ex.bound : got == ex.bits;
                } else {
                    const int src = r.kind == K_BLOCKS ? (int)(first / r.blk) : r.rank;
                    const size_t g = r.kind == K_BLOCKS ? first % r.blk : r.off + first;
                    ex.bits = gen_bits(c->dt, c->op, case_key(g_seed, c->idx, src), g);
                    ok = got == ex.bits;
                }
                const char *odd = ok ? " (the host finds this value right: device and host disagree, or a race)" : "";
                char gs[64], xs[64];
                if (bytes) {
                    snprintf(detail, sizeof detail, ": byte 0x%02x, expected the sentinel 0x%02x%s", (unsigned)got,
                             SENT, odd);
                } else if (ex.approx) {
                    fmt_bits(c->dt, got, gs, sizeof gs);
                    snprintf(detail, sizeof detail, ": got %s, expected %.17g, |diff| %.3g > bound %.3g%s", gs, ex.ref,
                             fabs(bits_to_double(c->dt, got) - ex.ref), ex.bound, odd);
                } else {
                    fmt_bits(c->dt, got, gs, sizeof gs);
                    fmt_bits(c->dt, ex.bits, xs, sizeof xs);
                    snprintf(detail, sizeof detail, ": got %s, expected %s%s", gs, xs, odd);
                }
            }
        }
        const char *unit = (r.kind == K_SENT || r.kind == K_GUARD) ? "byte" : "element";
        if (r.kind == K_GUARD)
            snprintf(w, sizeof w, "%s: guard byte %s the buffer written (%llu of %d bad, first at offset %s%llu)%s",
                     c->what[k], first < GUARD ? "before" : "after", bad, 2 * GUARD, first < GUARD ? "-" : "+",
                     first < GUARD ? (unsigned long long)(GUARD - first)
                                   : (unsigned long long)(r.n + (first - GUARD)),
                     detail);
        else
            snprintf(w, sizeof w, "%s: first bad %s %llu (%llu of %zu bad)%s", c->what[k], unit, first, bad, r.n,
                     detail);
        failf(c, w);
    }
}

/* Synchronises, reads the counters of every pending case, reports. */
static void flush(void) {
    if (!g_npending) return;
    const size_t nslots = (size_t)g_npending * MAXREG;
    CK(cudaMemcpyAsync(h_bad, d_bad, nslots * sizeof *d_bad, cudaMemcpyDeviceToHost, g_stream));
    CK(cudaMemcpyAsync(h_first, d_first, nslots * sizeof *d_first, cudaMemcpyDeviceToHost, g_stream));
    sync_stream(&g_pending[g_npending - 1], "synchronisation after the checks");
    ringlet_result_t ae = ringlet_comm_get_async_error(g_comm);
    if (ae != RINGLET_SUCCESS) fatal_rc(&g_pending[g_npending - 1], "a stream-ordered call (async error)", ae);
    for (int s = 0; s < g_npending; s++) report(&g_pending[s], s, s == g_npending - 1);
    g_npending = 0;
    fflush(stdout);
}

/* Starts a case in the current batch: resets its slot's counters. */
static int begin_slot(void) {
    if (g_npending == 0) {
        CK(cudaMemsetAsync(d_bad, 0, (size_t)g_batch * MAXREG * sizeof *d_bad, g_stream));
        CK(cudaMemsetAsync(d_first, 0xff, (size_t)g_batch * MAXREG * sizeof *d_first, g_stream));
    }
    return g_npending;
}

static void end_slot(const case_t *c) {
    g_pending[g_npending++] = *c;
    if (g_npending >= g_batch) flush();
}

/* ================================================================ calls */

static void call(const case_t *c, const void *s, void *r, size_t n) {
    ringlet_comm_t cm = g_comm;
    const ringlet_datatype_t dt = (ringlet_datatype_t)c->dt;
    const ringlet_op_t op = (ringlet_op_t)c->op;
    void *st = c->nostream ? NULL : (void *)g_stream;
    ringlet_result_t rc = RINGLET_SUCCESS;
    const double t0 = now_s();
    switch (c->coll) {
    case C_ALLREDUCE: rc = ringlet_allreduce(s, r, n, dt, op, cm, st); break;
    case C_BROADCAST: rc = ringlet_broadcast(s, r, n, dt, c->root, cm, st); break;
    case C_REDUCE: rc = ringlet_reduce(s, r, n, dt, op, c->root, cm, st); break;
    case C_ALLGATHER: rc = ringlet_allgather(s, r, n, dt, cm, st); break;
    case C_REDUCE_SCATTER: rc = ringlet_reduce_scatter(s, r, n, dt, op, cm, st); break;
    case C_BARRIER: rc = ringlet_barrier(cm, st); break;
    case C_SENDRECV: {
        const int next = (g_rank + 1) % g_P, prev = (g_rank + g_P - 1) % g_P;
        if (g_rank % 2 == 0) {
            rc = ringlet_send(s, n, dt, next, cm, st);
            if (rc != RINGLET_SUCCESS) fatal_rc(c, "ringlet_send", rc);
            rc = ringlet_recv(r, n, dt, prev, cm, st);
            if (rc != RINGLET_SUCCESS) fatal_rc(c, "ringlet_recv", rc);
        } else {
            rc = ringlet_recv(r, n, dt, prev, cm, st);
            if (rc != RINGLET_SUCCESS) fatal_rc(c, "ringlet_recv", rc);
            rc = ringlet_send(s, n, dt, next, cm, st);
            if (rc != RINGLET_SUCCESS) fatal_rc(c, "ringlet_send", rc);
        }
        break;
    }
    }
    const double ms = (now_s() - t0) * 1e3;
    if (!c->nostream && ms > g_max_call_ms) g_max_call_ms = ms;
    if (rc != RINGLET_SUCCESS) fatal_rc(c, coll_name[c->coll], rc);
}

/* ================================================================ cases */

static void run_barrier(case_t *c) {
    flush();
    g_cases++;
    const int late = (int)(c->idx % (uint64_t)g_P);
    const int me = g_rank;
    long long t_enter = 0, t_exit = 0;
    if (c->nostream) {
        if (me == late) {
            struct timespec ts = {0, 20 * 1000 * 1000};
            nanosleep(&ts, NULL);
            t_enter = (long long)(now_s() * 1e9);
        }
        call(c, NULL, NULL, 0);
        t_exit = (long long)(now_s() * 1e9);
    } else {
        const uint64_t spin_ns = 50ull * 1000 * 1000;
        CK(cudaMemsetAsync(d_ts, 0, 2 * sizeof *d_ts, g_stream));
        if (me == late) {
            k_spin<<<1, 1, 0, g_stream>>>(spin_ns, d_ts);
            CK_LAUNCH("spin kernel launch");
        }
        const double t0 = now_s();
        call(c, NULL, NULL, 0);
        const double dt_ms = (now_s() - t0) * 1e3;
        k_stamp<<<1, 1, 0, g_stream>>>(d_ts + 1);
        CK_LAUNCH("stamp kernel launch");
        if (me == late && dt_ms > 40) {
            char w[200];
            snprintf(w, sizeof w,
                     "ringlet_barrier with a stream took %.1f ms to return while the stream was busy for %.0f ms: "
                     "the call waited for the stream instead of returning at once",
                     dt_ms, spin_ns * 1e-6);
            failf(c, w);
        }
        sync_stream(c, "synchronisation after the barrier");
        ringlet_result_t ae = ringlet_comm_get_async_error(g_comm);
        if (ae != RINGLET_SUCCESS) fatal_rc(c, "ringlet_barrier on the stream (async error)", ae);
        unsigned long long ts[2];
        CK(cudaMemcpy(ts, d_ts, sizeof ts, cudaMemcpyDeviceToHost));
        t_enter = me == late ? (long long)ts[0] : 0;
        t_exit = (long long)ts[1];
    }
    /* the late rank's entry time to everyone (host buffers, no stream) */
    ringlet_result_t rc = ringlet_broadcast(&t_enter, &t_enter, 1, RINGLET_INT64, late, g_comm, NULL);
    if (rc != RINGLET_SUCCESS) fatal_rc(c, "ringlet_broadcast (of the barrier's entry time)", rc);
    if ((c->nostream || g_same_gpu) && t_exit < t_enter) {
        char w[200];
        snprintf(w, sizeof w, "barrier %s %.3f ms before rank %d entered it",
                 c->nostream ? "returned" : "released the stream", (t_enter - t_exit) * 1e-6, late);
        failf(c, w);
    }
}

static void run_case(case_t *c) {
    const int P = g_P, me = g_rank, dt = c->dt, op = c->op;
    const size_t n = c->count, es = dtsz(dt), nb = n * es;
    unsigned char *S = S_(), *R = R_();
    if (g_verbose) {
        char d[256];
        case_desc(c, d, sizeof d);
        printf("case %s\n", d);
    }
    if (c->coll == C_BARRIER) {
        run_barrier(c);
        return;
    }
    if (c->nostream) flush(); /* a synchronous call: nothing may be pending before the sync */
    g_cases++;
    c->nreg = 0;
    const int slot = begin_slot();
    /* (0) sometimes the stream is busy a while before the input is there */
    if (!c->nostream && c->idx % 4 == 1) {
        k_spin<<<1, 1, 0, g_stream>>>(2ull * 1000 * 1000, NULL);
        CK_LAUNCH("delay kernel launch");
    }
    const void *sarg = NULL;
    void *rarg = NULL;
    /* (1) sentinel and input; (3)'s regions */
    switch (c->coll) {
    case C_ALLREDUCE:
        sentinel(g_rbase, nb);
        if (c->inplace) {
            fill(dt, op, me, c->idx, R, 0, n);
            sarg = rarg = R;
        } else {
            sentinel(g_sbase, nb);
            fill(dt, op, me, c->idx, S, 0, n);
            sarg = S, rarg = R;
            add_region(c, K_INPUT, me, S, n, 0, 0, "sendbuf modified");
            add_region(c, K_GUARD, 0, g_sbase, nb, 0, 0, "sendbuf");
        }
        add_region(c, K_REDUCE, 0, R, n, 0, 0, "result");
        add_region(c, K_GUARD, 0, g_rbase, nb, 0, 0, "recvbuf");
        break;
    case C_REDUCE: {
        const int root = me == c->root;
        sentinel(g_rbase, nb);
        if (c->inplace) {
            fill(dt, op, me, c->idx, R, 0, n);
            sarg = rarg = R;
            if (root)
                add_region(c, K_REDUCE, 0, R, n, 0, 0, "result on root");
            else
                add_region(c, K_INPUT, me, R, n, 0, 0, "in-place buffer of a non-root rank modified");
        } else {
            sentinel(g_sbase, nb);
            fill(dt, op, me, c->idx, S, 0, n);
            sarg = S;
            /* non-root: recvbuf NULL in every other case, a sentinel buffer otherwise */
            rarg = (root || (c->idx & 2) == 0) ? (void *)R : NULL;
            add_region(c, K_INPUT, me, S, n, 0, 0, "sendbuf modified");
            add_region(c, K_GUARD, 0, g_sbase, nb, 0, 0, "sendbuf");
            if (root)
                add_region(c, K_REDUCE, 0, R, n, 0, 0, "result on root");
            else if (rarg)
                add_region(c, K_SENT, 0, R, nb, 0, 0, "recvbuf of a non-root rank written");
        }
        add_region(c, K_GUARD, 0, g_rbase, nb, 0, 0, "recvbuf");
        break;
    }
    case C_BROADCAST: {
        const int root = me == c->root;
        sentinel(g_rbase, nb);
        if (c->inplace) {
            if (root) fill(dt, op, me, c->idx, R, 0, n);
            sarg = rarg = R;
        } else {
            /* non-root sendbuf: this rank's own data, neither to be read nor written */
            sentinel(g_sbase, nb);
            fill(dt, op, me, c->idx, S, 0, n);
            sarg = S, rarg = R;
            add_region(c, K_INPUT, me, S, n, 0, 0, "sendbuf modified");
            add_region(c, K_GUARD, 0, g_sbase, nb, 0, 0, "sendbuf");
        }
        add_region(c, K_INPUT, c->root, R, n, 0, 0, "result (root's data)");
        add_region(c, K_GUARD, 0, g_rbase, nb, 0, 0, "recvbuf");
        break;
    }
    case C_ALLGATHER: {
        const size_t tot = nb * (size_t)P;
        sentinel(g_rbase, tot);
        if (c->inplace) {
            fill(dt, op, me, c->idx, R + (size_t)me * nb, 0, n);
            sarg = R + (size_t)me * nb, rarg = R;
        } else {
            sentinel(g_sbase, nb);
            fill(dt, op, me, c->idx, S, 0, n);
            sarg = S, rarg = R;
            add_region(c, K_INPUT, me, S, n, 0, 0, "sendbuf modified");
            add_region(c, K_GUARD, 0, g_sbase, nb, 0, 0, "sendbuf");
        }
        add_region(c, K_BLOCKS, 0, R, n * (size_t)P, 0, n, "result (block r = rank r's data)");
        add_region(c, K_GUARD, 0, g_rbase, tot, 0, 0, "recvbuf");
        break;
    }
    case C_REDUCE_SCATTER: {
        const size_t tot = nb * (size_t)P;
        if (c->inplace) {
            sentinel(g_rbase, tot);
            fill(dt, op, me, c->idx, R, 0, n * (size_t)P);
            sarg = R, rarg = R + (size_t)me * nb;
            add_region(c, K_REDUCE, 0, R + (size_t)me * nb, n, (size_t)me * n, 0, "result");
            add_region(c, K_INPUT, me, R, (size_t)me * n, 0, 0, "in place: a block before this rank's modified");
            add_region(c, K_INPUT, me, R + (size_t)(me + 1) * nb, (size_t)(P - me - 1) * n, (size_t)(me + 1) * n, 0,
                       "in place: a block after this rank's modified");
            add_region(c, K_GUARD, 0, g_rbase, tot, 0, 0, "buffer");
        } else {
            sentinel(g_sbase, tot);
            sentinel(g_rbase, nb);
            fill(dt, op, me, c->idx, S, 0, n * (size_t)P);
            sarg = S, rarg = R;
            add_region(c, K_INPUT, me, S, n * (size_t)P, 0, 0, "sendbuf modified");
            add_region(c, K_GUARD, 0, g_sbase, tot, 0, 0, "sendbuf");
            add_region(c, K_REDUCE, 0, R, n, (size_t)me * n, 0, "result");
            add_region(c, K_GUARD, 0, g_rbase, nb, 0, 0, "recvbuf");
        }
        break;
    }
    case C_SENDRECV: {
        const int prev = (me + P - 1) % P;
        sentinel(g_sbase, nb);
        sentinel(g_rbase, nb);
        fill(dt, op, me, c->idx, S, 0, n);
        sarg = S, rarg = R;
        add_region(c, K_INPUT, me, S, n, 0, 0, "sendbuf modified");
        add_region(c, K_GUARD, 0, g_sbase, nb, 0, 0, "sendbuf");
        add_region(c, K_INPUT, prev, R, n, 0, 0, "message from the previous rank");
        add_region(c, K_GUARD, 0, g_rbase, nb, 0, 0, "recvbuf");
        break;
    }
    }
    /* a synchronous call on device buffers: the input must be in place before it */
    if (c->nostream) sync_stream(c, "synchronisation before a call with stream NULL");
    /* (2) the call, (3) the checks right behind it on the same stream */
    call(c, sarg, rarg, n);
    launch_checks(c, slot);
    end_slot(c); /* (4) at the end of a batch */
}

/* ================================================================ self-tests */

/* The device generator equals the host's; the checker passes an exact reference and
 * catches one corrupted element or byte. Local to this rank (no communication). */
static void self_test(void) {
    const size_t n = 4099, off = 7;
    unsigned char *S = S_(), *R = R_();
    unsigned long long bad, first;
    uint64_t *host = (uint64_t *)malloc(n * 8), *dev = (uint64_t *)malloc(n * 8);
    if (!host || !dev) {
        printf("rank %d: out of memory\n", g_rank);
        exit(1);
    }
    case_t c;
    memset(&c, 0, sizeof c);
    c.coll = C_ALLREDUCE;
    c.idx = 0xfeedull;
    c.count = n;
    for (int dt = 0; dt < RINGLET_NUM_DATATYPES; dt++) {
        for (int op = 0; op < RINGLET_NUM_OPS; op++) {
            c.dt = dt;
            c.op = op;
            const size_t es = dtsz(dt);
            /* generator */
            fill(dt, op, g_rank, c.idx, S, off, n);
            CK(cudaMemcpyAsync(dev, S, n * es, cudaMemcpyDeviceToHost, g_stream));
            sync_stream(NULL, "self-test");
            const uint64_t key = case_key(g_seed, c.idx, g_rank);
            for (size_t j = 0; j < n; j++) {
                uint64_t h = gen_bits(dt, op, key, off + j), d = load_bits(dt, dev, j);
                if (h != d) {
                    char w[200];
                    snprintf(w, sizeof w, "self-test: device generator differs from the host's: %s %s element %zu: 0x%" PRIx64
                                          " vs 0x%" PRIx64,
                             dt_name[dt], op_name[op], j, d, h);
                    failf(NULL, w);
                    break;
                }
            }
            /* exact reference of the reduction (host), rounded to the type */
            CaseP p = params(&c);
            for (size_t j = 0; j < n; j++) {
                Expect e;
                reduce_expect(p, off + j, &e);
                uint64_t b = e.bits;
                if (e.approx) {
                    switch (dt) {
                    case RINGLET_FLOAT16: b = f2h((float)e.ref); break;
                    case RINGLET_BFLOAT16: b = f2b((float)e.ref); break;
                    case RINGLET_FLOAT32: b = f2u((float)e.ref); break;
                    default: b = d2u(e.ref); break;
                    }
                }
                store_bits(dt, host, j, b);
            }
            const size_t badj = (size_t)(dt * 131 + op * 17) % n;
            for (int corrupt = 0; corrupt < 2; corrupt++) {
                if (corrupt) {
                    uint64_t b = load_bits(dt, host, badj);
                    if (is_float(dt)) /* a NaN must never pass */
                        b = dt == RINGLET_FLOAT64 ? 0x7ff8000000000000ull
                            : dt == RINGLET_FLOAT32 ? 0x7fc00000u
                            : dt == RINGLET_FLOAT16 ? 0x7e00u
                                                    : 0x7fc0u;
                    else
                        b ^= 1;
                    store_bits(dt, host, badj, b);
                }
                CK(cudaMemcpyAsync(R, host, n * es, cudaMemcpyHostToDevice, g_stream));
                CK(cudaMemsetAsync(d_bad, 0, sizeof *d_bad, g_stream));
                CK(cudaMemsetAsync(d_first, 0xff, sizeof *d_first, g_stream));
                Region r = {K_REDUCE, 0, R, n, off, 0};
                k_check<<<grid_for(n), 256, 0, g_stream>>>(p, r, d_bad, d_first);
                CK_LAUNCH("check kernel launch");
                CK(cudaMemcpyAsync(&bad, d_bad, sizeof bad, cudaMemcpyDeviceToHost, g_stream));
                CK(cudaMemcpyAsync(&first, d_first, sizeof first, cudaMemcpyDeviceToHost, g_stream));
                sync_stream(NULL, "self-test");
                if (bad != (unsigned long long)corrupt || (corrupt && first != badj)) {
                    char w[240];
                    snprintf(w, sizeof w,
                             "self-test: checker on %s %s with %s reference counted %llu mismatches (first %llu), "
                             "expected %d",
                             dt_name[dt], op_name[op], corrupt ? "one corrupted element in an exact" : "an exact", bad,
                             first, corrupt);
                    failf(NULL, w);
                }
            }
        }
    }
    /* input and guard checkers */
    c.dt = RINGLET_UINT32;
    c.op = RINGLET_SUM;
    for (int corrupt = 0; corrupt < 2; corrupt++) {
        sentinel(g_sbase, n * 4);
        fill(c.dt, c.op, g_rank, c.idx, S, 0, n);
        if (corrupt) {
            CK(cudaMemsetAsync(S + 5 * 4, 0, 1, g_stream));
            CK(cudaMemsetAsync(S + n * 4 + 3, 0, 1, g_stream));
        }
        CK(cudaMemsetAsync(d_bad, 0, 2 * sizeof *d_bad, g_stream));
        CK(cudaMemsetAsync(d_first, 0xff, 2 * sizeof *d_first, g_stream));
        CaseP p = params(&c);
        Region ri = {K_INPUT, g_rank, S, n, 0, 0}, rg = {K_GUARD, 0, g_sbase, n * 4, 0, 0};
        k_check<<<grid_for(n), 256, 0, g_stream>>>(p, ri, d_bad, d_first);
        k_check<<<1, 256, 0, g_stream>>>(p, rg, d_bad + 1, d_first + 1);
        CK_LAUNCH("check kernel launch");
        unsigned long long b2[2], f2[2];
        CK(cudaMemcpyAsync(b2, d_bad, sizeof b2, cudaMemcpyDeviceToHost, g_stream));
        CK(cudaMemcpyAsync(f2, d_first, sizeof f2, cudaMemcpyDeviceToHost, g_stream));
        sync_stream(NULL, "self-test");
        if (b2[0] != (unsigned long long)corrupt || b2[1] != (unsigned long long)corrupt ||
            (corrupt && (f2[0] != 5 || f2[1] != GUARD + 3))) {
            char w[200];
            snprintf(w, sizeof w, "self-test: input/guard checkers (corrupt=%d) counted %llu/%llu (first %llu/%llu)",
                     corrupt, b2[0], b2[1], f2[0], f2[1]);
            failf(NULL, w);
        }
    }
    free(host);
    free(dev);
}

/* Mixed host/device buffers in one call are an argument error, with and without a
 * stream; the communicator keeps working (checked by everything after). */
static void mixed_test(void) {
    unsigned char *D = R_();
    void *pinned = NULL;
    CK(cudaHostAlloc(&pinned, 4096, cudaHostAllocDefault));
    char *pageable = (char *)malloc(4096);
    if (!pageable) exit(1);
    memset(pageable, 0, 4096);
    memset(pinned, 0, 4096);
    struct {
        const char *what;
        int kind; /* 0 allreduce, 1 allgather, 2 reduce_scatter, 3 broadcast */
        const void *s;
        void *r;
        int stream;
    } t[] = {
        {"allreduce(pageable host sendbuf, device recvbuf, stream)", 0, pageable, D, 1},
        {"allreduce(device sendbuf, pageable host recvbuf, stream NULL)", 0, D, pageable, 0},
        {"allreduce(pinned host sendbuf, device recvbuf, stream NULL)", 0, pinned, D, 0},
        {"allgather(device sendbuf, pinned host recvbuf, stream)", 1, D, pinned, 1},
        {"reduce_scatter(pageable host sendbuf, device recvbuf, stream)", 2, pageable, D, 1},
        {"broadcast(device sendbuf, pageable host recvbuf, stream)", 3, D, pageable, 1},
    };
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
        void *st = t[i].stream ? (void *)g_stream : NULL;
        ringlet_result_t rc;
        switch (t[i].kind) {
        case 0: rc = ringlet_allreduce(t[i].s, t[i].r, 4, RINGLET_FLOAT32, RINGLET_SUM, g_comm, st); break;
        case 1: rc = ringlet_allgather(t[i].s, t[i].r, 1, RINGLET_FLOAT32, g_comm, st); break;
        case 2: rc = ringlet_reduce_scatter(t[i].s, t[i].r, 1, RINGLET_FLOAT32, RINGLET_SUM, g_comm, st); break;
        default: rc = ringlet_broadcast(t[i].s, t[i].r, 4, RINGLET_FLOAT32, 0, g_comm, st); break;
        }
        g_cases++;
        if (rc != RINGLET_ERR_INVALID_ARGUMENT) {
            char w[300];
            snprintf(w, sizeof w, "mixed buffers: %s returned %d (%s), expected RINGLET_ERR_INVALID_ARGUMENT", t[i].what,
                     (int)rc, ringlet_strerror(rc));
            failf(NULL, w);
            if (rc == RINGLET_SUCCESS) {
                /* it was issued: the job's calls no longer match across ranks */
                summary("stopped: a mixed-buffer call was accepted");
                ringlet_comm_abort(g_comm);
                exit(1);
            }
        } else if (ringlet_comm_last_error(g_comm)[0] == '\0') {
            char w[200];
            snprintf(w, sizeof w, "mixed buffers: %s: no message in ringlet_comm_last_error", t[i].what);
            failf(NULL, w);
        }
    }
    sync_stream(NULL, "after the mixed-buffer calls");
    ringlet_result_t ae = ringlet_comm_get_async_error(g_comm);
    if (ae != RINGLET_SUCCESS) {
        char w[300];
        snprintf(w, sizeof w, "mixed buffers: the communicator failed after argument errors: %d: %s", (int)ae,
                 ringlet_comm_last_error(g_comm));
        failf(NULL, w);
    }
    CK(cudaFreeHost(pinned));
    free(pageable);
}

/* ================================================================ main */

static int parse_colls(const char *s, int *want) {
    for (int i = 0; i < C_NUM; i++) want[i] = 0;
    char tmp[256];
    snprintf(tmp, sizeof tmp, "%s", s);
    for (char *save = NULL, *t = strtok_r(tmp, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        int found = 0;
        for (int i = 0; i < C_NUM; i++)
            if (strcmp(t, coll_name[i]) == 0) want[i] = found = 1;
        if (!found) return -1;
    }
    return 0;
}

static void usage(void) {
    fprintf(stderr, "usage: collectives_gpu [--quick] [--max-count N] [--seed S] [--batch K] "
                    "[--stream nonblocking|blocking] [--stream-timeout S] [--colls a,b,...] [--probe] [--verbose]\n");
    exit(2);
}

int main(int argc, char **argv) {
    size_t max_count = 1000003;
    int quick = 0, probe = 0, blocking_stream = 0, want[C_NUM];
    for (int i = 0; i < C_NUM; i++) want[i] = 1;
    const char *rt = getenv("RINGLET_TIMEOUT");
    if (rt && atof(rt) > 0) g_stream_timeout = atof(rt) + 60;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--max-count") == 0 && i + 1 < argc)
            max_count = strtoull(argv[++i], NULL, 10);
        else if (strcmp(argv[i], "--seed") == 0 && i + 1 < argc)
            g_seed = strtoull(argv[++i], NULL, 0);
        else if (strcmp(argv[i], "--batch") == 0 && i + 1 < argc) {
            g_batch = atoi(argv[++i]);
            if (g_batch < 1 || g_batch > 100000) usage();
        } else if (strcmp(argv[i], "--stream") == 0 && i + 1 < argc) {
            i++;
            if (strcmp(argv[i], "blocking") == 0)
                blocking_stream = 1;
            else if (strcmp(argv[i], "nonblocking") == 0)
                blocking_stream = 0;
            else
                usage();
        } else if (strcmp(argv[i], "--stream-timeout") == 0 && i + 1 < argc) {
            g_stream_timeout = atof(argv[++i]);
            if (!(g_stream_timeout > 0)) usage();
        } else if (strcmp(argv[i], "--colls") == 0 && i + 1 < argc) {
            if (parse_colls(argv[++i], want) != 0) usage();
        } else if (strcmp(argv[i], "--quick") == 0)
            quick = 1;
        else if (strcmp(argv[i], "--probe") == 0)
            probe = 1;
        else if (strcmp(argv[i], "--verbose") == 0)
            g_verbose = 1;
        else
            usage();
    }
    setvbuf(stdout, NULL, _IOLBF, 0);

    /* the device: LOCAL_RANK % count, before the communicator (as frameworks do) */
    int ndev = 0;
    cudaError_t ce = cudaGetDeviceCount(&ndev);
    if (ce != cudaSuccess || ndev < 1) {
        printf("FAIL: no usable CUDA device (%s)\n", ce != cudaSuccess ? cudaGetErrorString(ce) : "count 0");
        return 1;
    }
    const char *lr = getenv("LOCAL_RANK");
    int local_rank = lr ? atoi(lr) : -1;
    g_dev = (local_rank >= 0 ? local_rank : 0) % ndev;
    CK(cudaSetDevice(g_dev));
    CK(cudaFree(0)); /* the context, now */

    ringlet_result_t rc = ringlet_comm_init_env(&g_comm);
    if (rc != RINGLET_SUCCESS) {
        printf("%s: ringlet_comm_init_env returned %d (%s): %s\n", probe ? "probe: init failed" : "FAIL", (int)rc,
               ringlet_strerror(rc), ringlet_comm_last_error(NULL));
        return probe ? 3 : 1;
    }
    if (ringlet_comm_rank(g_comm, &g_rank) != RINGLET_SUCCESS || ringlet_comm_size(g_comm, &g_P) != RINGLET_SUCCESS ||
        g_P < 1 || g_P > 4096 || g_rank < 0 || g_rank >= g_P) {
        printf("FAIL: ringlet_comm_rank/size failed or out of range (rank %d, size %d)\n", g_rank, g_P);
        return 1;
    }
    if (probe) {
        printf("probe: ok (rank %d of %d)\n", g_rank, g_P);
        rc = ringlet_comm_destroy(g_comm);
        return rc == RINGLET_SUCCESS ? 0 : 3;
    }
    if (local_rank < 0) {
        int l = 0;
        if (ringlet_comm_local_rank(g_comm, &l) == RINGLET_SUCCESS && l >= 0 && l % ndev != g_dev) {
            g_dev = l % ndev;
            CK(cudaSetDevice(g_dev));
        }
    }
    const int P = g_P;
    cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, g_dev));
    g_nsm = prop.multiProcessorCount > 0 ? prop.multiProcessorCount : 132;
    CK(blocking_stream ? cudaStreamCreate(&g_stream) : cudaStreamCreateWithFlags(&g_stream, cudaStreamNonBlocking));

    /* all ranks on one GPU? (then the GPU's global timer is one clock for all) */
    {
        unsigned char *all = (unsigned char *)calloc((size_t)P, 16);
        if (!all) exit(1);
        rc = ringlet_allgather(prop.uuid.bytes, all, 16, RINGLET_UINT8, g_comm, NULL);
        if (rc != RINGLET_SUCCESS) fatal_rc(NULL, "ringlet_allgather (of the GPU uuids, host buffers)", rc);
        g_same_gpu = 1;
        for (int r = 0; r < P; r++) g_same_gpu &= memcmp(all + (size_t)r * 16, all, 16) == 0;
        free(all);
    }

    /* counts: 0, 1, P+1, max_count; without repeats */
    size_t counts[4], ncounts = 0;
    size_t cand[4] = {0, 1, (size_t)P + 1, max_count};
    for (int i = 0; i < 4; i++) {
        int dup = 0;
        for (size_t j = 0; j < ncounts; j++) dup |= counts[j] == cand[i];
        if (!dup && !(i == 3 && max_count == 0)) counts[ncounts++] = cand[i];
    }
    size_t big = 4099; /* the self-test's size */
    for (size_t i = 0; i < ncounts; i++) big = counts[i] > big ? counts[i] : big;
    g_cap = (big * (size_t)P + 16) * 8;
    CK(cudaMalloc((void **)&g_sbase, g_cap + 2 * GUARD));
    CK(cudaMalloc((void **)&g_rbase, g_cap + 2 * GUARD));
    CK(cudaMalloc((void **)&d_bad, (size_t)g_batch * MAXREG * sizeof *d_bad));
    CK(cudaMalloc((void **)&d_first, (size_t)g_batch * MAXREG * sizeof *d_first));
    CK(cudaMalloc((void **)&d_ts, 2 * sizeof *d_ts));
    CK(cudaHostAlloc((void **)&h_bad, (size_t)g_batch * MAXREG * sizeof *h_bad, cudaHostAllocDefault));
    CK(cudaHostAlloc((void **)&h_first, (size_t)g_batch * MAXREG * sizeof *h_first, cudaHostAllocDefault));
    g_pending = (case_t *)calloc((size_t)g_batch, sizeof *g_pending);
    if (!g_pending) exit(1);

    if (g_rank == 0) {
        const char *tp = getenv("RINGLET_TRANSPORT");
        printf("collectives_gpu: P=%d, %s (%d SMs), %d device(s), transport %s, %s stream, counts", P, prop.name,
               g_nsm, ndev, tp && *tp ? tp : "(auto)", blocking_stream ? "blocking" : "non-blocking");
        for (size_t i = 0; i < ncounts; i++) printf(" %zu", counts[i]);
        printf(", batch %d%s%s\n", g_batch, quick ? ", quick" : "", g_same_gpu ? ", all ranks on one GPU" : "");
    }

    const double t0 = now_s();
    self_test();
    mixed_test();

    uint64_t idx = 0;
    for (size_t ci = 0; ci < ncounts; ci++) {
        const size_t n = counts[ci];
        const double tc = now_s();
        const long cases0 = g_cases;
        for (int coll = 0; coll < C_NUM; coll++) {
            if (!want[coll]) continue;
            if (coll == C_SENDRECV && P < 2) continue;
            if (coll == C_BARRIER) {
                for (int ns = 0; ns < 2; ns++) {
                    case_t c;
                    memset(&c, 0, sizeof c);
                    c.coll = coll;
                    c.nostream = ns;
                    c.idx = idx++;
                    run_case(&c);
                }
                continue;
            }
            const int reducing = is_reducing(coll);
            for (int dt = 0; dt < RINGLET_NUM_DATATYPES; dt++) {
                for (int op = 0; op < (reducing ? RINGLET_NUM_OPS : 1); op++) {
                    if (quick && reducing && op != dt % RINGLET_NUM_OPS && op != (dt + 2) % RINGLET_NUM_OPS)
                        continue;
                    /* on the stream: out of place and in place (send/recv: no in-place form) */
                    for (int inplace = 0; inplace < (coll == C_SENDRECV ? 1 : 2); inplace++) {
                        case_t c;
                        memset(&c, 0, sizeof c);
                        c.coll = coll;
                        c.dt = dt;
                        c.op = op;
                        c.count = n;
                        c.inplace = inplace;
                        c.idx = idx++;
                        c.root = (int)(c.idx % (uint64_t)P);
                        run_case(&c);
                    }
                    /* stream NULL, device buffers: once per collective x dtype x count */
                    if (!reducing || op == dt % RINGLET_NUM_OPS) {
                        case_t c;
                        memset(&c, 0, sizeof c);
                        c.coll = coll;
                        c.dt = dt;
                        c.op = op;
                        c.count = n;
                        c.inplace = coll == C_SENDRECV ? 0 : (int)((dt + ci) & 1);
                        c.nostream = 1;
                        c.idx = idx++;
                        c.root = (int)(c.idx % (uint64_t)P);
                        run_case(&c);
                    }
                }
            }
        }
        flush();
        if (g_verbose || n >= 100000)
            printf("collectives_gpu: rank %d: count %zu: %ld cases in %.2f s\n", g_rank, n, g_cases - cases0,
                   now_s() - tc);
    }
    flush();

    rc = ringlet_barrier(g_comm, NULL);
    if (rc != RINGLET_SUCCESS) {
        printf("FAIL rank %d: final ringlet_barrier returned %d: %s\n", g_rank, (int)rc, ringlet_comm_last_error(g_comm));
        g_failed++;
    }
    rc = ringlet_comm_get_async_error(g_comm);
    if (rc != RINGLET_SUCCESS) {
        printf("FAIL rank %d: ringlet_comm_get_async_error returned %d at the end: %s\n", g_rank, (int)rc,
               ringlet_comm_last_error(g_comm));
        g_failed++;
    }
    rc = ringlet_comm_destroy(g_comm);
    if (rc != RINGLET_SUCCESS) {
        printf("FAIL rank %d: ringlet_comm_destroy returned %d (%s)\n", g_rank, (int)rc, ringlet_strerror(rc));
        g_failed++;
    }
    g_comm = NULL;
    ce = cudaStreamSynchronize(g_stream);
    if (ce == cudaSuccess) ce = cudaGetLastError();
    if (ce != cudaSuccess) {
        printf("FAIL rank %d: CUDA error at the end: %s\n", g_rank, cudaGetErrorString(ce));
        g_failed++;
    }
    cudaStreamDestroy(g_stream);
    cudaFree(g_sbase);
    cudaFree(g_rbase);
    cudaFree(d_bad);
    cudaFree(d_first);
    cudaFree(d_ts);
    cudaFreeHost(h_bad);
    cudaFreeHost(h_first);
    free(g_pending);
    if (g_printed > MAX_PRINT) printf("rank %d: %ld failure lines not printed\n", g_rank, g_printed - MAX_PRINT);
    char tail[160];
    snprintf(tail, sizeof tail, "device %d, %.1f s, slowest stream call returned in %.2f ms", g_dev, now_s() - t0,
             g_max_call_ms);
    summary(tail);
    return g_failed ? 1 : 0;
}
