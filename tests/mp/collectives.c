/* Multi-process correctness test of every collective (public API only).
 *
 * Every rank runs the same grid of cases:
 *   collective (allreduce, broadcast, reduce, allgather, reduce_scatter,
 *               send/recv ring, barrier)
 *   x dtype x op (reducing collectives) x count {0, 1, P-1, P+1, max-count}
 *   x {out of place, in place} x {blocking, non-blocking (i-form + test/wait)}
 *   x root {0, P/2, P-1} (broadcast, reduce).
 * For allgather / reduce_scatter the count is the per-rank block (sendcount /
 * recvcount), so the buffers hold P * count elements.
 *
 * Inputs are random: element i of rank r's input in case k is a pure function of
 * (seed, r, k, i) (a counter-based hash), so every rank regenerates every other
 * rank's input on the fly and checks its own result against a reference computed
 * locally; no reference ever goes through the library under test.
 *
 * Integers are checked bit-exact (sum/prod wrap modulo 2^bits, avg = wrapped sum as
 * the signed/unsigned type divided by P truncating toward zero). min/max are exact
 * for every type. Floating-point sum/avg/prod are checked against a reference
 * computed in double with this bound (u = eps/2 the unit roundoff of the type,
 * eps = 2^-10 float16, 2^-7 bfloat16, 2^-23 float32, 2^-52 float64;
 * S = sum_r |x_r|, ref = the exact result in double):
 *
 *   sum:  |got - ref| <= P * eps * S + eps * |ref| + P * tiny
 *   avg:  |got - ref| <= eps * S     + eps * |ref| + P * tiny
 *   prod: |got - ref| <= (P + 1) * eps * |ref|
 *
 * Why: the ring reduces the P inputs in some unspecified order with P-1 pairwise
 * steps, each rounded to the type (16-bit types: computed in float32, rounded to the
 * 16-bit type after every step). Any such recursive summation has
 * |err| <= (P-1) * u * S + O(u^2) (Higham, Accuracy and Stability of Numerical
 * Algorithms, 2nd ed., sec. 4.2); P * eps * S = 2P * u * S bounds it with more than
 * 2x slack for the second-order term. eps * |ref| allows one further rounding of the
 * result (a final conversion to the 16-bit type, the division of avg). avg is the
 * sum divided by P, so its sum term shrinks by P (the same holds when a library
 * divides every input by P first). tiny is the spacing of the subnormals
 * (2^-24 for float16), the absolute error of a rounding whose result underflows,
 * which a relative bound cannot cover when a sum cancels to almost zero. For prod,
 * inputs are in [0.5, 1.5) so no product under/overflows and each of the P-1
 * multiplications has relative error <= u: (1+u)^(P-1) - 1 <= P * eps. Inputs for
 * sum/avg/min/max are in [-1, 1); 16-bit inputs are made as float in that range and
 * rounded to nearest even by this file's own conversion, and the reference uses the
 * converted values.
 *
 * Floating-point all-reduce results must also be the same on every rank, bit for bit:
 * each rank folds every such result (and its case number) into a 64-bit digest, and the
 * ranks compare digests at the end (an all-gather of one word each).
 *
 * Besides the values, each case checks: the return code; that non-blocking requests
 * are set to NULL when done; that nothing outside the result is written (guard
 * bytes before and after every buffer, the non-root recvbuf of reduce when one is
 * given, the non-root buffer of in-place reduce, the other blocks of an in-place
 * reduce_scatter); and that out-of-place sendbufs are not modified.
 * Barrier: a rotating rank sleeps 20 ms and records the CLOCK_MONOTONIC time at which
 * it entered the barrier; every rank checks that its barrier returned after that
 * time (the launcher runs every rank on one host, where CLOCK_MONOTONIC is shared).
 *
 * Options:
 *   --max-count N   the large count (default 1000003); 0 leaves it out
 *   --quick         each dtype with two ops only (every op still runs, on 4 dtypes)
 *   --seed S        base seed (default 20240613)
 *   --large MODE    full: every variant at the large count too; rotate (default):
 *                   at the large count every collective x dtype x op runs once, the
 *                   variant (in place or not, root, blocking or not) rotating
 *   --phase K       start the rotation at K (default 0): a run with --phase 1 gives every
 *                   collective x dtype x op the other in-place variant at the large count
 *   --colls LIST    comma-separated subset of allreduce,broadcast,reduce,allgather,
 *                   reduce_scatter,sendrecv,barrier
 *   --dtypes LIST   comma-separated subset of the dtypes (int8,uint8,int32,uint32,int64,
 *                   uint64,float16,float32,float64,bfloat16; default all). With --quick each
 *                   keeps its two ops (dtype index mod 5 and the one two further on), so
 *                   e.g. int8,float16,float32,float64 still runs every op.
 *   --memory device every buffer in device memory (the device layer's backend:
 *                   RINGLET_DEVICE=sim in CI, cuda on a GPU). Each buffer has a device twin
 *                   of the same layout, guards included; the bytes a case set up are copied
 *                   to the twin before the call and back after it, both on a stream of the
 *                   test's, and every check reads what came back. Three cases in four pass
 *                   that stream to the call (stream-ordered: the copy to the device is still
 *                   queued when the call returns, and the copy back is queued right after
 *                   it, so a library that does not wait for the stream, or does not hold it,
 *                   reads or returns the wrong bytes); the fourth passes NULL (the call
 *                   blocks) after synchronising the copy. Send/receive use the same order in
 *                   both forms: even ranks send first, odd ranks receive first.
 *   --memory odd-device  odd ranks (RANK) as --memory device, even ranks host memory:
 *                   one call meets both kinds (every rank must still choose the same
 *                   algorithm, whatever its own buffers' kind)
 *   --verbose       print every case
 * Output: one summary line per rank, "collectives: rank R of P: N cases checked,
 * F failed (T s)"; failures (at most 30 lines per rank) before it. Exit 0 iff none
 * failed.
 */
#include <inttypes.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "device.h" /* the device layer's backends: device memory and streams for --memory device */
#include "ringlet.h"

enum { C_ALLREDUCE, C_BROADCAST, C_REDUCE, C_ALLGATHER, C_REDUCE_SCATTER, C_SENDRECV, C_BARRIER, C_NUM };
static const char *const coll_name[C_NUM] = {"allreduce",      "broadcast", "reduce",  "allgather",
                                             "reduce_scatter", "sendrecv",  "barrier"};
static const char *const dt_name[RINGLET_NUM_DATATYPES] = {"int8",    "uint8",   "int32",   "uint32",  "int64",
                                                           "uint64",  "float16", "float32", "float64", "bfloat16"};
static const size_t dt_size[RINGLET_NUM_DATATYPES] = {1, 1, 4, 4, 8, 8, 2, 4, 8, 2};
static const char *const op_name[RINGLET_NUM_OPS] = {"sum", "prod", "max", "min", "avg"};

#define GUARD 64       /* sentinel bytes before and after every buffer */
#define SENT 0xA5      /* the sentinel byte */
#define MAX_PRINT 30   /* failure lines per rank */

typedef struct {
    int coll, dt, op, root, inplace, nb;
    size_t count;
    uint64_t idx; /* case index: the same on every rank */
} case_t;

typedef struct {
    unsigned char *base;
    size_t cap;           /* bytes usable between the guards */
    unsigned char *dbase; /* --memory device: the device twin of base (same layout) */
    size_t used;          /* bytes from base the current case set up (guards included) */
} buf_t;

static ringlet_comm_t g_comm;
static int g_rank, g_P;
static uint64_t g_seed = 20240613u;
static long g_cases, g_failed, g_printed;
/* FNV-1a over every floating-point all-reduce result, in case order (the same on every
 * rank when the results are). */
static uint64_t g_digest = 1469598103934665603ull;
static void digest(uint64_t idx, const void *p, size_t bytes) {
    const unsigned char *b = p;
    for (int k = 0; k < 8; k++) g_digest = (g_digest ^ ((idx >> (8 * k)) & 0xff)) * 1099511628211ull;
    for (size_t i = 0; i < bytes; i++) g_digest = (g_digest ^ b[i]) * 1099511628211ull;
}
static int g_verbose;
static double g_t_call; /* seconds spent inside the calls under test */
static buf_t g_sbuf, g_rbuf, g_cpy, g_exp;
static const rl_device_ops *g_dev;    /* --memory device */
static rl_dev_stream_t g_stream;      /* the test's stream (device mode) */
static void *g_call_stream;           /* the stream the current case passes, or NULL */

/* ---------------------------------------------------------------- helpers */

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static inline uint64_t mix64(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static inline uint64_t rnd(uint64_t key, size_t i) { return mix64(key + ((uint64_t)i + 1) * 0x9E3779B97F4A7C15ull); }

static uint64_t case_key(uint64_t idx, int rank) {
    return mix64(mix64(g_seed * 0x2545F4914F6CDD1Dull + (uint64_t)rank + 1) ^ (idx * 0xD6E8FEB86659FD93ull + 7));
}

/* IEEE binary16 <-> float, round to nearest even. */
static uint16_t f2h(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    uint32_t sign = (x >> 16) & 0x8000u, ax = x & 0x7fffffffu;
    if (ax >= 0x7f800000u) return (uint16_t)(sign | (ax > 0x7f800000u ? 0x7e00u : 0x7c00u));
    if (ax >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u); /* >= 65520 rounds to inf */
    if (ax < 0x38800000u) {                                    /* below 2^-14: subnormal or zero */
        if (ax <= 0x33000000u) return (uint16_t)sign;           /* <= 2^-25 rounds to 0 (tie to even) */
        uint32_t e = ax >> 23, m = (ax & 0x7fffffu) | 0x800000u, shift = 126 - e;
        uint32_t r = m >> shift, rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
        if (rem > half || (rem == half && (r & 1))) r++;
        return (uint16_t)(sign | r);
    }
    uint32_t r = ax - 0x38000000u; /* rebias the exponent; round the low 13 bits to nearest even */
    return (uint16_t)(sign | ((r + 0xfffu + ((r >> 13) & 1u)) >> 13));
}

static float h2f_table[65536]; /* h2f_slow of every half, filled once in main */

static inline float h2f(uint16_t h) { return h2f_table[h]; }

static float h2f_slow(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu, x;
    float f;
    if (e == 0) {
        f = (float)m * 0x1p-24f;
        memcpy(&x, &f, 4);
        x |= sign;
    } else if (e == 31) {
        x = sign | 0x7f800000u | (m << 13);
    } else {
        x = sign | ((e + 112) << 23) | (m << 13);
    }
    memcpy(&f, &x, 4);
    return f;
}

static uint16_t f2b(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40u);
    x += 0x7fffu + ((x >> 16) & 1u);
    return (uint16_t)(x >> 16);
}

static float b2f(uint16_t b) {
    uint32_t x = (uint32_t)b << 16;
    float f;
    memcpy(&f, &x, 4);
    return f;
}

static int is_float(int dt) {
    return dt == RINGLET_FLOAT16 || dt == RINGLET_FLOAT32 || dt == RINGLET_FLOAT64 || dt == RINGLET_BFLOAT16;
}
static int is_signed(int dt) { return dt == RINGLET_INT8 || dt == RINGLET_INT32 || dt == RINGLET_INT64; }

/* The bit pattern of element i of the input whose key is `key`. */
static inline uint64_t gen_bits(int dt, int op, uint64_t key, size_t i) {
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
        uint64_t b;
        memcpy(&b, &d, 8);
        return b;
    }
    default: {
        /* exact in float: k * 2^-23 - 1 with k < 2^24 */
        float f = op == RINGLET_PROD ? (float)(0.5 + (double)(z >> 40) * 0x1p-24)
                                     : (float)((double)(z >> 40) * 0x1p-23 - 1.0);
        uint32_t b;
        if (dt == RINGLET_FLOAT16) return f2h(f);
        if (dt == RINGLET_BFLOAT16) return f2b(f);
        memcpy(&b, &f, 4);
        return b;
    }
    }
}

static inline void store_bits(int dt, void *p, size_t j, uint64_t b) {
    switch (dt_size[dt]) {
    case 1: ((uint8_t *)p)[j] = (uint8_t)b; break;
    case 2: ((uint16_t *)p)[j] = (uint16_t)b; break;
    case 4: ((uint32_t *)p)[j] = (uint32_t)b; break;
    default: ((uint64_t *)p)[j] = b; break;
    }
}

static inline uint64_t load_bits(int dt, const void *p, size_t j) {
    switch (dt_size[dt]) {
    case 1: return ((const uint8_t *)p)[j];
    case 2: return ((const uint16_t *)p)[j];
    case 4: return ((const uint32_t *)p)[j];
    default: return ((const uint64_t *)p)[j];
    }
}

static inline double bits_to_double(int dt, uint64_t b) {
    switch (dt) {
    case RINGLET_FLOAT16: return h2f((uint16_t)b);
    case RINGLET_BFLOAT16: return b2f((uint16_t)b);
    case RINGLET_FLOAT32: {
        uint32_t u = (uint32_t)b;
        float f;
        memcpy(&f, &u, 4);
        return f;
    }
    default: {
        double d;
        memcpy(&d, &b, 8);
        return d;
    }
    }
}

/* Sign- or zero-extended integer value of a bit pattern. */
static inline int64_t bits_to_int(int dt, uint64_t b) {
    switch (dt) {
    case RINGLET_INT8: return (int8_t)(uint8_t)b;
    case RINGLET_INT32: return (int32_t)(uint32_t)b;
    default: return (int64_t)b;
    }
}

static uint64_t width_mask(int dt) {
    size_t s = dt_size[dt];
    return s == 8 ? ~0ull : ((1ull << (8 * s)) - 1);
}

static void fmt_bits(int dt, uint64_t b, char *out, size_t n) {
    if (is_float(dt)) {
        if (dt_size[dt] == 2)
            snprintf(out, n, "%.9g (0x%04" PRIx64 ")", bits_to_double(dt, b), b);
        else
            snprintf(out, n, "%.17g", bits_to_double(dt, b));
    } else if (is_signed(dt)) {
        snprintf(out, n, "%" PRId64, bits_to_int(dt, b));
    } else {
        snprintf(out, n, "%" PRIu64, b);
    }
}

static void case_desc(const case_t *c, char *out, size_t n) {
    char root[16] = "-";
    if (c->coll == C_BROADCAST || c->coll == C_REDUCE) snprintf(root, sizeof root, "%d", c->root);
    snprintf(out, n, "%s dtype=%s op=%s count=%zu inplace=%d root=%s api=%s case=%" PRIu64 " P=%d",
             coll_name[c->coll], c->coll == C_BARRIER ? "-" : dt_name[c->dt],
             (c->coll == C_ALLREDUCE || c->coll == C_REDUCE || c->coll == C_REDUCE_SCATTER) ? op_name[c->op] : "-",
             c->count, c->inplace, root,
             c->coll == C_SENDRECV ? (c->nb ? "isend+irecv" : "send/recv") : (c->nb ? "nonblocking" : "blocking"),
             c->idx, g_P);
}

static void failf(const case_t *c, const char *what) {
    /* counts one failed check of this case and prints it (the first MAX_PRINT) */
    g_failed++;
    if (g_printed++ >= MAX_PRINT) return;
    char d[256];
    case_desc(c, d, sizeof d);
    printf("FAIL rank %d: %s: %s\n", g_rank, d, what);
}

/* A call returned an error: nothing after it can be trusted; stop the job. */
static void fatal_rc(const case_t *c, const char *call, ringlet_result_t rc) {
    char d[256];
    case_desc(c, d, sizeof d);
    printf("FAIL rank %d: %s: %s returned %d (%s): %s\n", g_rank, d, call, (int)rc, ringlet_strerror(rc),
           ringlet_comm_last_error(g_comm));
    printf("collectives: rank %d of %d: %ld cases checked, %ld failed (stopped at the error above)\n", g_rank, g_P,
           g_cases, g_failed + 1);
    fflush(stdout);
    ringlet_comm_abort(g_comm);
    exit(1);
}

/* twin (device mode): a device twin, and the host side in pinned memory, so that the
 * copies between them are asynchronous (a copy from pageable memory may synchronise). */
static void buf_init(buf_t *b, size_t cap, int twin) {
    size_t bytes = (cap + 2 * GUARD + 63) / 64 * 64;
    b->cap = cap;
    b->dbase = NULL;
    if (twin && g_dev) {
        if (g_dev->host_alloc((void **)&b->base, bytes) != RL_DEV_OK ||
            g_dev->mem_alloc((void **)&b->dbase, bytes) != RL_DEV_OK) {
            printf("FAIL rank %d: device or pinned memory (%zu bytes): %s\n", g_rank, bytes, rl_dev_error());
            exit(1);
        }
        return;
    }
    b->base = aligned_alloc(64, bytes);
    if (!b->base) {
        printf("rank %d: out of memory (%zu bytes)\n", g_rank, cap);
        exit(1);
    }
}
static inline void *bp(const buf_t *b) { return b->base + GUARD; }

/* Sentinel over [0, used) and both guards. */
static void sentinel(buf_t *b, size_t used) {
    memset(b->base, SENT, used + 2 * GUARD);
    b->used = used + 2 * GUARD;
}

static void check_guards(const case_t *c, const buf_t *b, size_t used, const char *name) {
    for (size_t i = 0; i < GUARD; i++) {
        if (b->base[i] != SENT || b->base[GUARD + used + i] != SENT) {
            char w[160];
            snprintf(w, sizeof w, "%s: guard byte %s the buffer was written (offset %s%zu)", name,
                     b->base[i] != SENT ? "before" : "after", b->base[i] != SENT ? "-" : "+",
                     b->base[i] != SENT ? GUARD - i : used + i);
            failf(c, w);
            return;
        }
    }
}

/* Every byte of p[0, bytes) still the sentinel. */
static void check_untouched(const case_t *c, const void *p, size_t bytes, const char *name) {
    const unsigned char *q = p;
    for (size_t i = 0; i < bytes; i++) {
        if (q[i] != SENT) {
            char w[200];
            snprintf(w, sizeof w, "%s must not be written, but byte %zu of %zu changed (0x%02x)", name, i, bytes, q[i]);
            failf(c, w);
            return;
        }
    }
}

static void fill_input(int dt, int op, uint64_t key, void *p, size_t off, size_t n) {
    for (size_t j = 0; j < n; j++) store_bits(dt, p, j, gen_bits(dt, op, key, off + j));
}

/* got[0..n) must equal exp[0..n) bit for bit. */
static void check_equal(const case_t *c, const void *got, const void *exp, size_t n, const char *what) {
    size_t es = dt_size[c->dt];
    if (n == 0 || memcmp(got, exp, n * es) == 0) return;
    size_t first = n, bad = 0;
    for (size_t j = 0; j < n; j++) {
        if (load_bits(c->dt, got, j) != load_bits(c->dt, exp, j)) {
            if (first == n) first = j;
            bad++;
        }
    }
    char g[64], e[64], w[400];
    fmt_bits(c->dt, load_bits(c->dt, got, first), g, sizeof g);
    fmt_bits(c->dt, load_bits(c->dt, exp, first), e, sizeof e);
    snprintf(w, sizeof w, "%s: first bad index %zu (%zu of %zu bad): got %s, expected %s", what, first, bad, n, g, e);
    failf(c, w);
}

static double eps_of(int dt) {
    switch (dt) {
    case RINGLET_FLOAT16: return 0x1p-10;
    case RINGLET_BFLOAT16: return 0x1p-7;
    case RINGLET_FLOAT32: return 0x1p-23;
    default: return 0x1p-52;
    }
}
static double tiny_of(int dt) {
    switch (dt) {
    case RINGLET_FLOAT16: return 0x1p-24;
    case RINGLET_BFLOAT16: return 0x1p-133;
    case RINGLET_FLOAT32: return 0x1p-149;
    default: return 0x1p-1074;
    }
}

/* got[j], j < n, must be the reduction over all ranks of element off + j of their
 * inputs in case c. */
static void check_reduction(const case_t *c, const void *got, size_t off, size_t n, const char *what) {
    const int dt = c->dt, op = c->op, P = g_P;
    uint64_t keys[1024];
    for (int r = 0; r < P; r++) keys[r] = case_key(c->idx, r);
    size_t bad = 0, first = 0;
    char detail[400] = "";
    if (is_float(dt)) {
        const double eps = eps_of(dt), tiny = tiny_of(dt);
        for (size_t j = 0; j < n; j++) {
            double ref = bits_to_double(dt, gen_bits(dt, op, keys[0], off + j)), s = fabs(ref);
            for (int r = 1; r < P; r++) {
                double v = bits_to_double(dt, gen_bits(dt, op, keys[r], off + j));
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
            double g = bits_to_double(dt, load_bits(dt, got, j));
            if (!(fabs(g - ref) <= bound)) {
                if (bad++ == 0) {
                    first = j;
                    char gs[64];
                    fmt_bits(dt, load_bits(dt, got, j), gs, sizeof gs);
                    const char *rule = op == RINGLET_SUM    ? "P*eps*sum|x| + eps*|ref| + P*tiny"
                                       : op == RINGLET_AVG  ? "eps*sum|x| + eps*|ref| + P*tiny"
                                       : op == RINGLET_PROD ? "(P+1)*eps*|ref|"
                                                            : "exact";
                    snprintf(detail, sizeof detail, "got %s, expected %.17g, |diff| %.3g > bound %.3g (%s, eps=%g)",
                             gs, ref, fabs(g - ref), bound, rule, eps);
                }
            }
        }
    } else {
        const uint64_t mask = width_mask(dt);
        const int sgn = is_signed(dt);
        for (size_t j = 0; j < n; j++) {
            uint64_t acc = gen_bits(dt, op, keys[0], off + j);
            int64_t sacc = bits_to_int(dt, acc);
            for (int r = 1; r < P; r++) {
                uint64_t v = gen_bits(dt, op, keys[r], off + j);
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
            uint64_t g = load_bits(dt, got, j);
            if (g != acc) {
                if (bad++ == 0) {
                    first = j;
                    char gs[64], es[64];
                    fmt_bits(dt, g, gs, sizeof gs);
                    fmt_bits(dt, acc, es, sizeof es);
                    snprintf(detail, sizeof detail, "got %s, expected %s (bit-exact)", gs, es);
                }
            }
        }
    }
    if (bad) {
        char w[700];
        snprintf(w, sizeof w, "%s: first bad index %zu (%zu of %zu bad): %s", what, first, bad, n, detail);
        failf(c, w);
    }
}

static ringlet_result_t do_call2(const case_t *c, const void *s, void *r, size_t n, int peer_send, int peer_recv);

static void dev_check(const char *what, int rc) {
    if (rc == RL_DEV_OK) return;
    printf("FAIL rank %d: %s: %s\n", g_rank, what, rl_dev_error());
    printf("collectives: rank %d of %d: %ld cases checked, %ld failed (stopped at the error above)\n", g_rank, g_P,
           g_cases, g_failed + 1);
    exit(1);
}

/* The device twin of a pointer into g_sbuf or g_rbuf (NULL stays NULL). */
static void *twin(const void *p) {
    const buf_t *bufs[2] = {&g_sbuf, &g_rbuf};
    for (int i = 0; p && i < 2; i++)
        if ((const unsigned char *)p >= bufs[i]->base && (const unsigned char *)p <= bufs[i]->base + bufs[i]->cap + 2 * GUARD)
            return bufs[i]->dbase + ((const unsigned char *)p - bufs[i]->base);
    return NULL;
}

/* Issue the case's call (blocking or i-form + test/wait); device mode: on the twins. */
static ringlet_result_t do_call(const case_t *c, const void *s, void *r, size_t n, int peer_send, int peer_recv) {
    buf_t *bufs[2] = {&g_sbuf, &g_rbuf};
    if (g_dev) {
        for (int i = 0; i < 2; i++)
            if (bufs[i]->used)
                dev_check("copy to the device", g_dev->memcpy_async(bufs[i]->dbase, bufs[i]->base, bufs[i]->used, g_stream));
        g_call_stream = c->idx % 4 == 3 ? NULL : (void *)g_stream;
        if (!g_call_stream) dev_check("stream_sync", g_dev->stream_sync(g_stream));
        s = twin(s);
        r = twin(r);
    }
    const double t0 = now_s();
    ringlet_result_t rc = do_call2(c, s, r, n, peer_send, peer_recv);
    g_t_call += now_s() - t0;
    if (g_dev) {
        /* Queued behind the call on a stream call: it must see the result. */
        for (int i = 0; i < 2; i++)
            if (bufs[i]->used)
                dev_check("copy from the device", g_dev->memcpy_async(bufs[i]->base, bufs[i]->dbase, bufs[i]->used, g_stream));
        dev_check("stream_sync", g_dev->stream_sync(g_stream));
    }
    return rc;
}

static ringlet_result_t do_call2(const case_t *c, const void *s, void *r, size_t n, int peer_send, int peer_recv) {
    ringlet_comm_t cm = g_comm;
    const int dt = c->dt, op = c->op, root = c->root;
    void *st = g_call_stream;
    ringlet_result_t rc = RINGLET_SUCCESS;
    if (!c->nb) {
        switch (c->coll) {
        case C_ALLREDUCE: rc = ringlet_allreduce(s, r, n, dt, op, cm, st); break;
        case C_BROADCAST: rc = ringlet_broadcast(s, r, n, dt, root, cm, st); break;
        case C_REDUCE: rc = ringlet_reduce(s, r, n, dt, op, root, cm, st); break;
        case C_ALLGATHER: rc = ringlet_allgather(s, r, n, dt, cm, st); break;
        case C_REDUCE_SCATTER: rc = ringlet_reduce_scatter(s, r, n, dt, op, cm, st); break;
        case C_BARRIER: rc = ringlet_barrier(cm, st); break;
        case C_SENDRECV:
            if (g_rank % 2 == 0) {
                rc = ringlet_send(s, n, dt, peer_send, cm, st);
                if (rc != RINGLET_SUCCESS) fatal_rc(c, "ringlet_send", rc);
                rc = ringlet_recv(r, n, dt, peer_recv, cm, st);
                if (rc != RINGLET_SUCCESS) fatal_rc(c, "ringlet_recv", rc);
            } else {
                rc = ringlet_recv(r, n, dt, peer_recv, cm, st);
                if (rc != RINGLET_SUCCESS) fatal_rc(c, "ringlet_recv", rc);
                rc = ringlet_send(s, n, dt, peer_send, cm, st);
                if (rc != RINGLET_SUCCESS) fatal_rc(c, "ringlet_send", rc);
            }
            break;
        }
        if (rc != RINGLET_SUCCESS) fatal_rc(c, coll_name[c->coll], rc);
        return rc;
    }
    ringlet_request_t req = NULL, req2 = NULL;
    switch (c->coll) {
    case C_ALLREDUCE: rc = ringlet_iallreduce(s, r, n, dt, op, cm, st, &req); break;
    case C_BROADCAST: rc = ringlet_ibroadcast(s, r, n, dt, root, cm, st, &req); break;
    case C_REDUCE: rc = ringlet_ireduce(s, r, n, dt, op, root, cm, st, &req); break;
    case C_ALLGATHER: rc = ringlet_iallgather(s, r, n, dt, cm, st, &req); break;
    case C_REDUCE_SCATTER: rc = ringlet_ireduce_scatter(s, r, n, dt, op, cm, st, &req); break;
    case C_BARRIER: rc = ringlet_ibarrier(cm, st, &req); break;
    case C_SENDRECV:
        /* Device memory: a rank's sends and receives run one after another (a send and the
         * receive issued right after it together), so odd ranks receive first. */
        if (g_dev && g_rank % 2) {
            rc = ringlet_irecv(r, n, dt, peer_recv, cm, st, &req2);
            if (rc != RINGLET_SUCCESS) fatal_rc(c, "ringlet_irecv", rc);
        }
        rc = ringlet_isend(s, n, dt, peer_send, cm, st, &req);
        if (rc != RINGLET_SUCCESS) fatal_rc(c, "ringlet_isend", rc);
        if (!g_dev || g_rank % 2 == 0) {
            rc = ringlet_irecv(r, n, dt, peer_recv, cm, st, &req2);
            if (rc != RINGLET_SUCCESS) fatal_rc(c, "ringlet_irecv", rc);
        }
        if (req2 == NULL) failf(c, "ringlet_irecv returned success but no request");
        break;
    }
    if (rc != RINGLET_SUCCESS) fatal_rc(c, "the non-blocking call", rc);
    if (req == NULL) {
        failf(c, "non-blocking call returned success but no request");
        return rc;
    }
    if (c->idx & 1) { /* one ringlet_test before the wait */
        int done = -1;
        rc = ringlet_test(&req, &done);
        if (done != 0 && done != 1) failf(c, "ringlet_test did not set *done to 0 or 1");
        if (done == 1) {
            if (req != NULL) failf(c, "ringlet_test reported done but left *request non-NULL");
            if (rc != RINGLET_SUCCESS) fatal_rc(c, "ringlet_test", rc);
        } else if (rc != RINGLET_SUCCESS) {
            fatal_rc(c, "ringlet_test (not done)", rc);
        }
    }
    if (req2 != NULL) { /* isend+irecv: wait for the receive first */
        rc = ringlet_wait(&req2);
        if (rc != RINGLET_SUCCESS) fatal_rc(c, "ringlet_wait (irecv)", rc);
        if (req2 != NULL) failf(c, "ringlet_wait left *request non-NULL");
    }
    if (req != NULL) {
        rc = ringlet_wait(&req);
        if (rc != RINGLET_SUCCESS) fatal_rc(c, "ringlet_wait", rc);
        if (req != NULL) failf(c, "ringlet_wait left *request non-NULL");
    }
    return rc;
}

/* ---------------------------------------------------------------- cases */

static void run_case(const case_t *c) {
    const int P = g_P, me = g_rank, dt = c->dt, op = c->op;
    const size_t n = c->count, es = dt_size[dt], nb = n * es;
    const uint64_t mykey = case_key(c->idx, me);
    unsigned char *S = bp(&g_sbuf), *R = bp(&g_rbuf), *E = bp(&g_exp);
    if (g_verbose) {
        char d[256];
        case_desc(c, d, sizeof d);
        printf("case %s\n", d);
    }
    g_cases++;
    g_sbuf.used = g_rbuf.used = 0;
    switch (c->coll) {
    case C_ALLREDUCE:
        sentinel(&g_rbuf, nb);
        if (c->inplace) {
            fill_input(dt, op, mykey, R, 0, n);
            do_call(c, R, R, n, 0, 0);
        } else {
            sentinel(&g_sbuf, nb);
            fill_input(dt, op, mykey, S, 0, n);
            memcpy(bp(&g_cpy), S, nb);
            do_call(c, S, R, n, 0, 0);
            check_guards(c, &g_sbuf, nb, "sendbuf");
            check_equal(c, S, bp(&g_cpy), n, "sendbuf modified");
        }
        check_guards(c, &g_rbuf, nb, "recvbuf");
        check_reduction(c, R, 0, n, "result");
        if (is_float(dt)) digest(c->idx, R, nb);
        break;
    case C_REDUCE: {
        const int root = me == c->root;
        sentinel(&g_rbuf, nb);
        if (c->inplace) {
            fill_input(dt, op, mykey, R, 0, n);
            if (!root) memcpy(bp(&g_cpy), R, nb);
            do_call(c, R, R, n, 0, 0);
            if (root)
                check_reduction(c, R, 0, n, "result on root");
            else
                check_equal(c, R, bp(&g_cpy), n, "in-place buffer of a non-root rank modified");
        } else {
            sentinel(&g_sbuf, nb);
            fill_input(dt, op, mykey, S, 0, n);
            memcpy(bp(&g_cpy), S, nb);
            /* non-root: recvbuf NULL in every other case, a sentinel buffer otherwise */
            void *rv = (root || (c->idx & 2) == 0) ? (void *)R : NULL;
            do_call(c, S, rv, n, 0, 0);
            check_guards(c, &g_sbuf, nb, "sendbuf");
            check_equal(c, S, bp(&g_cpy), n, "sendbuf modified");
            if (root)
                check_reduction(c, R, 0, n, "result on root");
            else if (rv)
                check_untouched(c, R, nb, "recvbuf of a non-root rank");
        }
        check_guards(c, &g_rbuf, nb, "recvbuf");
        break;
    }
    case C_BROADCAST: {
        const int root = me == c->root;
        sentinel(&g_rbuf, nb);
        if (c->inplace) {
            if (root) fill_input(dt, op, mykey, R, 0, n);
            do_call(c, R, R, n, 0, 0);
        } else {
            /* non-root sendbuf: this rank's own data, which must be neither read nor written */
            sentinel(&g_sbuf, nb);
            fill_input(dt, op, mykey, S, 0, n);
            memcpy(bp(&g_cpy), S, nb);
            do_call(c, S, R, n, 0, 0);
            check_guards(c, &g_sbuf, nb, "sendbuf");
            check_equal(c, S, bp(&g_cpy), n, "sendbuf modified");
        }
        check_guards(c, &g_rbuf, nb, "recvbuf");
        fill_input(dt, op, case_key(c->idx, c->root), E, 0, n);
        check_equal(c, R, E, n, "result");
        break;
    }
    case C_ALLGATHER: {
        const size_t tot = nb * (size_t)P;
        sentinel(&g_rbuf, tot);
        if (c->inplace) {
            fill_input(dt, op, mykey, R + (size_t)me * nb, 0, n);
            do_call(c, R + (size_t)me * nb, R, n, 0, 0);
        } else {
            sentinel(&g_sbuf, nb);
            fill_input(dt, op, mykey, S, 0, n);
            memcpy(bp(&g_cpy), S, nb);
            do_call(c, S, R, n, 0, 0);
            check_guards(c, &g_sbuf, nb, "sendbuf");
            check_equal(c, S, bp(&g_cpy), n, "sendbuf modified");
        }
        check_guards(c, &g_rbuf, tot, "recvbuf");
        for (int r = 0; r < P; r++) {
            char w[64];
            snprintf(w, sizeof w, "block of rank %d", r);
            fill_input(dt, op, case_key(c->idx, r), E, 0, n);
            check_equal(c, R + (size_t)r * nb, E, n, w);
        }
        break;
    }
    case C_REDUCE_SCATTER: {
        const size_t tot = nb * (size_t)P;
        if (c->inplace) {
            sentinel(&g_rbuf, tot);
            fill_input(dt, op, mykey, R, 0, n * (size_t)P);
            memcpy(bp(&g_cpy), R, tot);
            do_call(c, R, R + (size_t)me * nb, n, 0, 0);
            check_guards(c, &g_rbuf, tot, "buffer");
            check_reduction(c, R + (size_t)me * nb, (size_t)me * n, n, "result");
            for (int r = 0; r < P; r++) {
                if (r == me) continue;
                char w[96];
                snprintf(w, sizeof w, "in place: block %d of sendbuf (not this rank's result) modified", r);
                check_equal(c, R + (size_t)r * nb, bp(&g_cpy) + (size_t)r * nb, n, w);
            }
        } else {
            sentinel(&g_sbuf, tot);
            sentinel(&g_rbuf, nb);
            fill_input(dt, op, mykey, S, 0, n * (size_t)P);
            memcpy(bp(&g_cpy), S, tot);
            do_call(c, S, R, n, 0, 0);
            check_guards(c, &g_sbuf, tot, "sendbuf");
            check_equal(c, S, bp(&g_cpy), n * (size_t)P, "sendbuf modified");
            check_guards(c, &g_rbuf, nb, "recvbuf");
            check_reduction(c, R, (size_t)me * n, n, "result");
        }
        break;
    }
    case C_SENDRECV: {
        const int next = (me + 1) % P, prev = (me + P - 1) % P;
        sentinel(&g_sbuf, nb);
        sentinel(&g_rbuf, nb);
        fill_input(dt, op, mykey, S, 0, n);
        memcpy(bp(&g_cpy), S, nb);
        do_call(c, S, R, n, next, prev);
        check_guards(c, &g_sbuf, nb, "sendbuf");
        check_equal(c, S, bp(&g_cpy), n, "sendbuf modified");
        check_guards(c, &g_rbuf, nb, "recvbuf");
        fill_input(dt, op, case_key(c->idx, prev), E, 0, n);
        check_equal(c, R, E, n, "message from the previous rank");
        break;
    }
    case C_BARRIER: {
        /* one rank enters late; nobody may leave before it entered */
        const int late = (int)(c->idx % (uint64_t)P);
        int64_t t_enter = 0;
        if (me == late) {
            struct timespec ts = {0, 20 * 1000 * 1000};
            nanosleep(&ts, NULL);
            t_enter = (int64_t)(now_s() * 1e9);
        }
        do_call(c, NULL, NULL, 0, 0, 0);
        int64_t t_exit = (int64_t)(now_s() * 1e9);
        ringlet_result_t rc = ringlet_broadcast(&t_enter, &t_enter, 1, RINGLET_INT64, late, g_comm, NULL);
        if (rc != RINGLET_SUCCESS) fatal_rc(c, "ringlet_broadcast (of the barrier's entry time)", rc);
        if (t_exit < t_enter) {
            char w[160];
            snprintf(w, sizeof w, "barrier returned %.3f ms before rank %d entered it", (t_enter - t_exit) * 1e-6, late);
            failf(c, w);
        }
        break;
    }
    }
    fflush(stdout);
}

/* ---------------------------------------------------------------- grid */

/* Sets want[i] for every name in the comma-separated list s that names[i] holds; -1 when
 * one is unknown. Used for --colls and --dtypes. */
static int parse_names(const char *s, const char *const *names, int n, int *want) {
    for (int i = 0; i < n; i++) want[i] = 0;
    char tmp[256];
    snprintf(tmp, sizeof tmp, "%s", s);
    for (char *save = NULL, *t = strtok_r(tmp, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        int found = 0;
        for (int i = 0; i < n; i++)
            if (strcmp(t, names[i]) == 0) want[i] = found = 1;
        if (!found) return -1;
    }
    return 0;
}

static void usage(void) {
    fprintf(stderr, "usage: collectives [--max-count N] [--quick] [--seed S] [--large full|rotate] "
                    "[--phase K] [--colls a,b,...] [--dtypes a,b,...] [--memory host|device|odd-device] "
                    "[--verbose]\n");
    exit(2);
}

int main(int argc, char **argv) {
    size_t max_count = 1000003;
    int quick = 0, large_full = 0, want[C_NUM], want_dt[RINGLET_NUM_DATATYPES], device = 0;
    uint64_t rot = 0; /* rotation of the variants at the large count */
    for (int i = 0; i < C_NUM; i++) want[i] = 1;
    for (int i = 0; i < RINGLET_NUM_DATATYPES; i++) want_dt[i] = 1;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--max-count") == 0 && i + 1 < argc)
            max_count = strtoull(argv[++i], NULL, 10);
        else if (strcmp(argv[i], "--seed") == 0 && i + 1 < argc)
            g_seed = strtoull(argv[++i], NULL, 0);
        else if (strcmp(argv[i], "--phase") == 0 && i + 1 < argc)
            rot = strtoull(argv[++i], NULL, 10);
        else if (strcmp(argv[i], "--quick") == 0)
            quick = 1;
        else if (strcmp(argv[i], "--verbose") == 0)
            g_verbose = 1;
        else if (strcmp(argv[i], "--large") == 0 && i + 1 < argc) {
            i++;
            if (strcmp(argv[i], "full") == 0)
                large_full = 1;
            else if (strcmp(argv[i], "rotate") == 0)
                large_full = 0;
            else
                usage();
        } else if (strcmp(argv[i], "--memory") == 0 && i + 1 < argc) {
            i++;
            if (strcmp(argv[i], "odd-device") == 0) { /* the rank is known from the launcher here */
                const char *rk = getenv("RANK");
                device = rk && atoi(rk) % 2 == 1;
            } else if (strcmp(argv[i], "device") == 0 || strcmp(argv[i], "host") == 0) {
                device = strcmp(argv[i], "device") == 0;
            } else {
                usage();
            }
        } else if (strcmp(argv[i], "--colls") == 0 && i + 1 < argc) {
            if (parse_names(argv[++i], coll_name, C_NUM, want) != 0) usage();
        } else if (strcmp(argv[i], "--dtypes") == 0 && i + 1 < argc) {
            if (parse_names(argv[++i], dt_name, RINGLET_NUM_DATATYPES, want_dt) != 0) usage();
        } else
            usage();
    }
    setvbuf(stdout, NULL, _IOLBF, 0);
    for (uint32_t h = 0; h < 65536; h++) h2f_table[h] = h2f_slow((uint16_t)h);
    if (device) {
        g_dev = rl_device();
        if (!g_dev) {
            printf("FAIL: --memory device, but no device backend: %s\n", rl_device_unavailable());
            return 1;
        }
        /* One device per local rank, as a job on a multi-GPU host would use them. */
        int ndev = 0;
        const char *lr = getenv("LOCAL_RANK");
        if (g_dev->count(&ndev) != RL_DEV_OK || ndev < 1 ||
            g_dev->set_device((lr ? atoi(lr) : 0) % ndev) != RL_DEV_OK || g_dev->stream_create(&g_stream) != RL_DEV_OK) {
            printf("FAIL: device setup: %s\n", rl_dev_error());
            return 1;
        }
    }

    ringlet_result_t rc = ringlet_comm_init_env(&g_comm);
    if (rc != RINGLET_SUCCESS) {
        printf("FAIL: ringlet_comm_init_env returned %d (%s): %s\n", (int)rc, ringlet_strerror(rc),
               ringlet_comm_last_error(NULL));
        return 1;
    }
    if (ringlet_comm_rank(g_comm, &g_rank) != RINGLET_SUCCESS || ringlet_comm_size(g_comm, &g_P) != RINGLET_SUCCESS ||
        g_P < 1 || g_P > 1024 || g_rank < 0 || g_rank >= g_P) {
        printf("FAIL: ringlet_comm_rank/size failed or out of range (rank %d, size %d)\n", g_rank, g_P);
        return 1;
    }
    const int P = g_P;
    const char *env_rank = getenv("RANK"), *env_size = getenv("WORLD_SIZE");
    if (env_rank && env_size && (atoi(env_rank) != g_rank || atoi(env_size) != P)) {
        printf("FAIL rank %d: communicator says rank %d of %d, environment RANK=%s WORLD_SIZE=%s\n", g_rank, g_rank,
               P, env_rank, env_size);
        g_failed++;
    }
    for (int dt = 0; dt < RINGLET_NUM_DATATYPES; dt++) {
        if (ringlet_datatype_size((ringlet_datatype_t)dt) != dt_size[dt]) {
            printf("FAIL rank %d: ringlet_datatype_size(%s) = %zu, expected %zu\n", g_rank, dt_name[dt],
                   ringlet_datatype_size((ringlet_datatype_t)dt), dt_size[dt]);
            g_failed++;
        }
    }

    /* counts: 0, 1, P-1, P+1, max_count; without repeats */
    size_t counts[5], ncounts = 0;
    size_t cand[5] = {0, 1, (size_t)P - 1, (size_t)P + 1, max_count};
    for (int i = 0; i < 5; i++) {
        int dup = 0;
        for (size_t j = 0; j < ncounts; j++) dup |= counts[j] == cand[i];
        if (!dup && !(i == 4 && max_count == 0)) counts[ncounts++] = cand[i];
    }
    size_t big = 0;
    for (size_t i = 0; i < ncounts; i++) big = counts[i] > big ? counts[i] : big;
    size_t cap = (big * (size_t)P + 16) * 8;
    buf_init(&g_sbuf, cap, 1);
    buf_init(&g_rbuf, cap, 1);
    buf_init(&g_cpy, cap, 0);
    buf_init(&g_exp, (big + 16) * 8, 0);

    int roots[3], nroots = 0;
    int rc3[3] = {0, P / 2, P - 1};
    for (int i = 0; i < 3; i++) {
        int dup = 0;
        for (int j = 0; j < nroots; j++) dup |= roots[j] == rc3[i];
        if (!dup) roots[nroots++] = rc3[i];
    }

    const double t0 = now_s();
    uint64_t idx = 0;
    for (size_t ci = 0; ci < ncounts; ci++) {
        const size_t n = counts[ci];
        const int rotate = !large_full && n == max_count && n > (size_t)P + 1;
        const double tc = now_s(), tcall = g_t_call;
        long cases0 = g_cases;
        for (int coll = 0; coll < C_NUM; coll++) {
            if (!want[coll]) continue;
            if (coll == C_SENDRECV && P < 2) continue;
            const int reducing = coll == C_ALLREDUCE || coll == C_REDUCE || coll == C_REDUCE_SCATTER;
            const int rooted = coll == C_BROADCAST || coll == C_REDUCE;
            const int ndt = coll == C_BARRIER ? 1 : RINGLET_NUM_DATATYPES;
            for (int dt = 0; dt < ndt; dt++) {
                if (coll != C_BARRIER && !want_dt[dt]) continue; /* the barrier has no dtype */
                for (int op = 0; op < (reducing ? RINGLET_NUM_OPS : 1); op++) {
                    if (quick && reducing && op != dt % RINGLET_NUM_OPS && op != (dt + 2) % RINGLET_NUM_OPS)
                        continue;
                    if (rotate) {
                        /* one variant of this collective x dtype x op, rotating */
                        case_t c = {coll, dt, op, roots[rot % (uint64_t)nroots], 0, 0, n, idx++};
                        c.inplace = coll == C_SENDRECV || coll == C_BARRIER ? 0 : (int)(rot & 1);
                        c.nb = (int)((rot >> 1) & 1);
                        rot++;
                        run_case(&c);
                        continue;
                    }
                    for (int ri = 0; ri < (rooted ? nroots : 1); ri++) {
                        for (int inplace = 0; inplace < 2; inplace++) {
                            if (inplace && (coll == C_SENDRECV || coll == C_BARRIER)) continue;
                            for (int nbm = 0; nbm < 2; nbm++) {
                                case_t c = {coll, dt, op, roots[ri], inplace, nbm, n, idx++};
                                run_case(&c);
                            }
                        }
                    }
                }
            }
        }
        if (g_verbose || n >= 100000)
            printf("collectives: rank %d: count %zu%s: %ld cases in %.2f s (%.2f s in the calls)\n", g_rank, n,
                   rotate ? " (rotating)" : "", g_cases - cases0, now_s() - tc, g_t_call - tcall);
    }

    rc = ringlet_barrier(g_comm, NULL);
    if (rc != RINGLET_SUCCESS) {
        printf("FAIL rank %d: final ringlet_barrier returned %d: %s\n", g_rank, (int)rc, ringlet_comm_last_error(g_comm));
        g_failed++;
    }
    /* Floating-point all-reduce results identical on every rank (host memory here). */
    uint64_t *digests = calloc((size_t)P, sizeof *digests);
    if (digests && (rc = ringlet_allgather(&g_digest, digests, 1, RINGLET_UINT64, g_comm, NULL)) != RINGLET_SUCCESS) {
        printf("FAIL rank %d: the digests' all-gather returned %d: %s\n", g_rank, (int)rc, ringlet_comm_last_error(g_comm));
        g_failed++;
    }
    for (int r = 0; digests && rc == RINGLET_SUCCESS && r < P; r++)
        if (digests[r] != digests[0]) {
            printf("FAIL rank %d: floating-point all-reduce results differ between ranks: rank %d's digest %016llx, "
                   "rank 0's %016llx\n", g_rank, r, (unsigned long long)digests[r], (unsigned long long)digests[0]);
            g_failed++;
            break;
        }
    free(digests);
    rc = ringlet_comm_destroy(g_comm);
    if (rc != RINGLET_SUCCESS) {
        printf("FAIL rank %d: ringlet_comm_destroy returned %d (%s)\n", g_rank, (int)rc, ringlet_strerror(rc));
        g_failed++;
    }
    if (g_printed > MAX_PRINT) printf("rank %d: %ld failure lines not printed\n", g_rank, g_printed - MAX_PRINT);
    printf("collectives: rank %d of %d: %ld cases checked, %ld failed (%.1f s, %.1f s of it in the calls)%s\n", g_rank,
           P, g_cases, g_failed, now_s() - t0, g_t_call, g_dev ? " on device memory" : "");
    if (g_dev) {
        g_dev->mem_free(g_sbuf.dbase);
        g_dev->mem_free(g_rbuf.dbase);
        g_dev->host_free(g_sbuf.base);
        g_dev->host_free(g_rbuf.base);
        g_sbuf.base = g_rbuf.base = NULL;
        g_dev->stream_destroy(g_stream);
    }
    free(g_sbuf.base);
    free(g_rbuf.base);
    free(g_cpy.base);
    free(g_exp.base);
    return g_failed ? 1 : 0;
}
