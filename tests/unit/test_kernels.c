/* Unit test for the CPU reduction kernels (kernels/reduce_cpu.c, interface in
 * kernels/reduce.h).
 *
 *   - float16 / bfloat16 conversions: edge values, all 65536 bit patterns of each,
 *     every rounding tie, random floats; against this file's own reference
 *     conversions (frexp / ldexp / rint, nothing shared with the library);
 *   - rl_reduce_host: every dtype x op, lengths 0 .. 100003, unaligned element
 *     offsets, dst apart / dst == a / dst == b / dst == a == b / a == b, guard bytes
 *     around every buffer; bit-exact against a scalar reference (a NaN result only
 *     has to be a NaN);
 *   - rl_divide_host for every dtype, negative integers included;
 *   - the caller's floating-point settings (flush-to-zero, denormals-are-zero, rounding
 *     upward, the invalid trap) change no bit of any float reduction, divide, scaling or
 *     conversion, and are the caller's again after each call (x86-64);
 *   - the first calls come from several threads at once (dispatch set-up under TSan);
 *   - every instruction set the CPU has: the test runs itself again with
 *     RINGLET_CPU_ISA=<each lower one>;
 *   - prints (does not assert) float32 sum bandwidth at 64 MiB next to memcpy.
 *
 * Seed: RINGLET_TEST_SEED=<n> (default: from the clock); printed first.
 * RINGLET_TEST_NO_BENCH=1 skips the bandwidth lines. Exit 0 = pass, 1 = fail. */
#include "reduce.h"
#include "convert.h"
#include "fpenv.h"

#include <float.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#if defined(__x86_64__)
#include <xmmintrin.h>
#endif

extern char **environ;

static int failures;
static long checks;

#define MAX_PRINTED 60
static void fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void fail(const char *fmt, ...) {
    failures++;
    if (failures > MAX_PRINTED) {
        if (failures == MAX_PRINTED + 1) printf("FAIL ... (further failures not printed)\n");
        return;
    }
    va_list ap;
    va_start(ap, fmt);
    printf("FAIL ");
    vprintf(fmt, ap);
    printf("\n");
    va_end(ap);
}

/* ---------------------------------------------------------------------------- */
/* random numbers: splitmix64                                                   */
/* ---------------------------------------------------------------------------- */
static uint64_t rng_state;
static uint64_t rnd(void) {
    uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}
static uint64_t rnd_below(uint64_t n) { return rnd() % n; }

static uint32_t fbits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}
static float bitsf(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}
static double bitsd(uint64_t u) {
    double f;
    memcpy(&f, &u, 8);
    return f;
}

/* ---------------------------------------------------------------------------- */
/* reference conversions, written from the definitions of the formats          */
/* ---------------------------------------------------------------------------- */
static int h_is_nan(uint16_t h) { return (h & 0x7c00) == 0x7c00 && (h & 0x3ff) != 0; }
static int bf_is_nan(uint16_t b) { return (b & 0x7f80) == 0x7f80 && (b & 0x7f) != 0; }

/* Generic decode of a binary16-like format: E exponent bits, M mantissa bits. The
 * NaN bit pattern is the documented one: payload moved up, sign kept. */
static float ref_decode(uint16_t v, int ebits, int mbits, int shift_to_f32) {
    int bias = (1 << (ebits - 1)) - 1;
    int e = (v >> mbits) & ((1 << ebits) - 1);
    int m = v & ((1 << mbits) - 1);
    int neg = v >> 15;
    double r;
    if (e == (1 << ebits) - 1) {
        if (m) return bitsf(((uint32_t)neg << 31) | 0x7f800000u | ((uint32_t)m << shift_to_f32));
        r = INFINITY;
    } else if (e == 0) {
        r = ldexp(m, 1 - bias - mbits);
    } else {
        r = ldexp((1 << mbits) + m, e - bias - mbits);
    }
    return (float)(neg ? -r : r);
}
static float ref_h2f(uint16_t h) { return ref_decode(h, 5, 10, 13); }
static float ref_bf2f(uint16_t b) { return ref_decode(b, 8, 7, 16); }

/* Round a float to a binary16-like format, nearest even, via frexp and rint. */
static uint16_t ref_encode(float f, int ebits, int mbits) {
    int bias = (1 << (ebits - 1)) - 1;
    int emax = bias;
    uint16_t sign = signbit(f) ? 0x8000 : 0;
    uint16_t inf = (uint16_t)(((1 << ebits) - 1) << mbits);
    if (isnan(f)) {
        /* documented: quiet NaN, sign and the top payload bits kept */
        uint32_t x = fbits(f);
        uint16_t payload = (uint16_t)((x & 0x7fffff) >> (23 - mbits));
        return (uint16_t)(sign | inf | (1u << (mbits - 1)) | payload);
    }
    double v = fabs((double)f);
    if (isinf(f)) return sign | inf;
    double min_normal = ldexp(1.0, 1 - bias);
    if (v < min_normal) {
        double q = rint(v / ldexp(1.0, 1 - bias - mbits)); /* in units of the smallest subnormal */
        return (uint16_t)(sign | (uint16_t)q);             /* q == 2^mbits is the smallest normal */
    }
    int e;
    double fr = frexp(v, &e); /* v = fr * 2^e, fr in [0.5, 1) */
    double sig = rint(ldexp(fr, mbits + 1));
    int E = e - 1;
    if (sig == ldexp(1.0, mbits + 1)) {
        sig = ldexp(1.0, mbits);
        E++;
    }
    if (E > emax) return sign | inf;
    return (uint16_t)(sign | ((E + bias) << mbits) | ((int)sig - (1 << mbits)));
}
static uint16_t ref_f2h(float f) { return ref_encode(f, 5, 10); }
static uint16_t ref_f2bf(float f) { return ref_encode(f, 8, 7); }

/* ---------------------------------------------------------------------------- */
/* conversion tests                                                             */
/* ---------------------------------------------------------------------------- */
static void check_f2h(float f, uint16_t want, const char *what) {
    checks++;
    uint16_t got = rl_float_to_half(f), ref = ref_f2h(f);
    if (got != want || ref != want)
        fail("float_to_half(%s = %a, bits 0x%08x) = 0x%04x, want 0x%04x (reference 0x%04x)", what, (double)f,
             fbits(f), got, want, ref);
}
static void check_f2bf(float f, uint16_t want, const char *what) {
    checks++;
    uint16_t got = rl_float_to_bf16(f), ref = ref_f2bf(f);
    if (got != want || ref != want)
        fail("float_to_bf16(%s = %a, bits 0x%08x) = 0x%04x, want 0x%04x (reference 0x%04x)", what, (double)f,
             fbits(f), got, want, ref);
}
static void check_h2f(uint16_t h, uint32_t want, const char *what) {
    checks++;
    uint32_t got = fbits(rl_half_to_float(h)), ref = fbits(ref_h2f(h));
    if (got != want || ref != want)
        fail("half_to_float(%s = 0x%04x) = 0x%08x, want 0x%08x (reference 0x%08x)", what, h, got, want, ref);
}
static void check_bf2f(uint16_t b, uint32_t want, const char *what) {
    checks++;
    uint32_t got = fbits(rl_bf16_to_float(b)), ref = fbits(ref_bf2f(b));
    if (got != want || ref != want)
        fail("bf16_to_float(%s = 0x%04x) = 0x%08x, want 0x%08x (reference 0x%08x)", what, b, got, want, ref);
}

static void test_conversion_edges(void) {
    /* float -> half */
    check_f2h(0.0f, 0x0000, "+0");
    check_f2h(-0.0f, 0x8000, "-0");
    check_f2h(1.0f, 0x3c00, "1");
    check_f2h(-2.0f, 0xc000, "-2");
    check_f2h(0.333333333f, 0x3555, "1/3");
    check_f2h(65504.0f, 0x7bff, "max half");
    check_f2h(nextafterf(65520.0f, 0.0f), 0x7bff, "just below 65520");
    check_f2h(65520.0f, 0x7c00, "65520 (tie, to even = inf)");
    check_f2h(-65520.0f, 0xfc00, "-65520");
    check_f2h(1e10f, 0x7c00, "1e10");
    check_f2h(FLT_MAX, 0x7c00, "FLT_MAX");
    check_f2h(INFINITY, 0x7c00, "+inf");
    check_f2h(-INFINITY, 0xfc00, "-inf");
    check_f2h(0x1p-24f, 0x0001, "2^-24 (smallest subnormal)");
    check_f2h(-0x1p-24f, 0x8001, "-2^-24");
    check_f2h(0x1p-25f, 0x0000, "2^-25 (tie, to even = 0)");
    check_f2h(nextafterf(0x1p-25f, 1.0f), 0x0001, "just above 2^-25");
    check_f2h(0x3p-25f, 0x0002, "3 * 2^-25 (tie, to even = 2 units)");
    check_f2h(0x5p-25f, 0x0002, "5 * 2^-25 (tie, to even = 2 units)");
    check_f2h(0x3ffp-24f, 0x03ff, "largest subnormal");
    check_f2h(0x1p-14f, 0x0400, "2^-14 (smallest normal)");
    check_f2h(0x1p-14f - 0x1p-25f, 0x0400, "2^-14 - 2^-25 (tie, to even = smallest normal)");
    check_f2h(0x1p-14f - 0x1p-24f, 0x03ff, "2^-14 - 2^-24");
    check_f2h(1.0f + 0x1p-11f, 0x3c00, "1 + 2^-11 (tie, to even = 1)");
    check_f2h(1.0f + 0x3p-11f, 0x3c02, "1 + 3 * 2^-11 (tie, to even = up)");
    check_f2h(1.0f + 0x1p-10f, 0x3c01, "1 + 2^-10");
    check_f2h(nextafterf(1.0f + 0x1p-11f, 2.0f), 0x3c01, "just above 1 + 2^-11");
    check_f2h(2047.5f, 0x6800, "2047.5 -> 2048");
    check_f2h(1e-40f, 0x0000, "float subnormal");
    check_f2h(-1e-40f, 0x8000, "-float subnormal");
    check_f2h(0x1p-30f, 0x0000, "2^-30");
    check_f2h(bitsf(0x7fc00000u), 0x7e00, "quiet NaN");
    check_f2h(bitsf(0xffc00000u), 0xfe00, "-quiet NaN");
    check_f2h(bitsf(0x7f800001u), 0x7e00, "NaN with low payload only (must stay NaN)");
    check_f2h(bitsf(0x7fa00000u), 0x7f00, "signalling NaN (quieted, payload kept)");
    /* half -> float */
    check_h2f(0x0000, 0x00000000u, "+0");
    check_h2f(0x8000, 0x80000000u, "-0");
    check_h2f(0x3c00, 0x3f800000u, "1");
    check_h2f(0x0001, fbits(0x1p-24f), "smallest subnormal");
    check_h2f(0x8001, fbits(-0x1p-24f), "-smallest subnormal");
    check_h2f(0x03ff, fbits(0x3ffp-24f), "largest subnormal");
    check_h2f(0x0400, fbits(0x1p-14f), "smallest normal");
    check_h2f(0x7bff, fbits(65504.0f), "max");
    check_h2f(0xfbff, fbits(-65504.0f), "-max");
    check_h2f(0x7c00, 0x7f800000u, "+inf");
    check_h2f(0xfc00, 0xff800000u, "-inf");
    check_h2f(0x7e00, 0x7fc00000u, "quiet NaN");
    check_h2f(0x7c01, 0x7f802000u, "signalling NaN (payload kept)");
    check_h2f(0xfe01, 0xffc02000u, "-NaN with payload");
    /* float -> bfloat16 */
    check_f2bf(0.0f, 0x0000, "+0");
    check_f2bf(-0.0f, 0x8000, "-0");
    check_f2bf(1.0f, 0x3f80, "1");
    check_f2bf(bitsf(0x3f808000u), 0x3f80, "tie, to even = down");
    check_f2bf(bitsf(0x3f818000u), 0x3f82, "tie, to even = up");
    check_f2bf(bitsf(0x3f808001u), 0x3f81, "just above tie");
    check_f2bf(bitsf(0x3f807fffu), 0x3f80, "just below tie");
    check_f2bf(bitsf(0x7f7f0000u), 0x7f7f, "max bf16");
    check_f2bf(bitsf(0x7f7f7fffu), 0x7f7f, "just below max + half ulp");
    check_f2bf(bitsf(0x7f7f8000u), 0x7f80, "max + half ulp (tie, to even = inf)");
    check_f2bf(FLT_MAX, 0x7f80, "FLT_MAX");
    check_f2bf(-FLT_MAX, 0xff80, "-FLT_MAX");
    check_f2bf(INFINITY, 0x7f80, "+inf");
    check_f2bf(-INFINITY, 0xff80, "-inf");
    check_f2bf(bitsf(0x00000001u), 0x0000, "smallest float subnormal");
    check_f2bf(bitsf(0x00008000u), 0x0000, "subnormal tie, to even = 0");
    check_f2bf(bitsf(0x00018000u), 0x0002, "subnormal tie, to even = up");
    check_f2bf(bitsf(0x00010000u), 0x0001, "smallest bf16 subnormal");
    check_f2bf(bitsf(0x007fffffu), 0x0080, "largest float subnormal -> smallest normal");
    check_f2bf(bitsf(0x7fc00000u), 0x7fc0, "quiet NaN");
    check_f2bf(bitsf(0x7f800001u), 0x7fc0, "NaN with low payload only (must stay NaN)");
    check_f2bf(bitsf(0xff800001u), 0xffc0, "-NaN with low payload only");
    check_f2bf(bitsf(0x7fa10000u), 0x7fe1, "signalling NaN (quieted, payload kept)");
    /* bfloat16 -> float */
    check_bf2f(0x0000, 0x00000000u, "+0");
    check_bf2f(0x8000, 0x80000000u, "-0");
    check_bf2f(0x3f80, 0x3f800000u, "1");
    check_bf2f(0x0001, 0x00010000u, "smallest subnormal");
    check_bf2f(0x7f7f, 0x7f7f0000u, "max");
    check_bf2f(0x7f80, 0x7f800000u, "+inf");
    check_bf2f(0xff80, 0xff800000u, "-inf");
    check_bf2f(0x7fc0, 0x7fc00000u, "quiet NaN");
    check_bf2f(0x7f81, 0x7f810000u, "signalling NaN (payload kept)");
}

/* All 65536 patterns: decode against the reference, and encode(decode(x)) == x
 * (NaN: == x with the quiet bit set). */
static void test_conversion_exhaustive(void) {
    for (uint32_t v = 0; v < 65536; v++) {
        uint16_t h = (uint16_t)v;
        checks += 4;
        uint32_t got = fbits(rl_half_to_float(h)), ref = fbits(ref_h2f(h));
        if (got != ref) fail("half_to_float(0x%04x) = 0x%08x, reference 0x%08x", h, got, ref);
        uint16_t back = rl_float_to_half(rl_half_to_float(h));
        uint16_t want = h_is_nan(h) ? (uint16_t)(h | 0x0200) : h;
        if (back != want) fail("float_to_half(half_to_float(0x%04x)) = 0x%04x, want 0x%04x", h, back, want);

        got = fbits(rl_bf16_to_float(h));
        ref = fbits(ref_bf2f(h));
        if (got != ref) fail("bf16_to_float(0x%04x) = 0x%08x, reference 0x%08x", h, got, ref);
        back = rl_float_to_bf16(rl_bf16_to_float(h));
        want = bf_is_nan(h) ? (uint16_t)(h | 0x0040) : h;
        if (back != want) fail("float_to_bf16(bf16_to_float(0x%04x)) = 0x%04x, want 0x%04x", h, back, want);
    }
}

/* Every rounding boundary: the midpoint between each pair of adjacent finite values
 * (exact in float) rounds to the even one; one float ulp either side rounds to the
 * nearer one. Both signs. */
static void test_conversion_ties(int bf16) {
    uint16_t top = bf16 ? 0x7f7f : 0x7bff;
    for (uint32_t h = 0; h <= top; h++) {
        double lo = bf16 ? ref_bf2f((uint16_t)h) : ref_h2f((uint16_t)h);
        uint16_t next = (uint16_t)(h + 1);
        double hi = h < top ? (bf16 ? ref_bf2f(next) : ref_h2f(next))
                            : (bf16 ? ldexp(1.0, 128) : 65536.0); /* where inf would be */
        float mid = (float)(lo + (hi - lo) / 2);
        if ((double)mid != lo + (hi - lo) / 2) {
            fail("test bug: midpoint above 0x%04x not exact in float", h);
            continue;
        }
        uint16_t even = (h & 1) ? (uint16_t)(h + 1) : (uint16_t)h;
        float below = nextafterf(mid, 0.0f), above = nextafterf(mid, INFINITY);
        for (int neg = 0; neg < 2; neg++) {
            float s = neg ? -1.0f : 1.0f;
            uint16_t sg = neg ? 0x8000 : 0;
            uint16_t (*conv)(float) = bf16 ? rl_float_to_bf16 : rl_float_to_half;
            uint16_t (*refc)(float) = bf16 ? ref_f2bf : ref_f2h;
            float in[3] = {s * below, s * mid, s * above};
            uint16_t want[3] = {(uint16_t)(sg | h), (uint16_t)(sg | even), (uint16_t)(sg | (h + 1))};
            for (int k = 0; k < 3; k++) {
                checks += 2;
                uint16_t got = conv(in[k]), r = refc(in[k]);
                if (got != want[k] || r != want[k])
                    fail("%s(0x%08x) = 0x%04x, want 0x%04x (reference 0x%04x)", bf16 ? "float_to_bf16" : "float_to_half",
                         fbits(in[k]), got, want[k], r);
            }
        }
    }
}

static void test_conversion_random(void) {
    for (int i = 0; i < 1000000; i++) {
        uint32_t x = (uint32_t)rnd();
        if (i & 1) x = (x & 0x807fffffu) | ((uint32_t)(100 + rnd_below(60)) << 23); /* near the half range */
        float f = bitsf(x);
        checks += 2;
        uint16_t got = rl_float_to_half(f), ref = ref_f2h(f);
        if (got != ref) fail("float_to_half(0x%08x) = 0x%04x, reference 0x%04x", x, got, ref);
        got = rl_float_to_bf16(f);
        ref = ref_f2bf(f);
        if (got != ref) fail("float_to_bf16(0x%08x) = 0x%04x, reference 0x%04x", x, got, ref);
    }
}

/* ---------------------------------------------------------------------------- */
/* reduction reference                                                          */
/* ---------------------------------------------------------------------------- */
static const char *dt_name[RINGLET_NUM_DATATYPES] = {"int8", "uint8", "int32", "uint32", "int64",
                                                     "uint64", "float16", "float32", "float64", "bfloat16"};
static const char *op_name[RINGLET_NUM_OPS] = {"sum", "prod", "max", "min", "avg"};
static const size_t dt_size[RINGLET_NUM_DATATYPES] = {1, 1, 4, 4, 8, 8, 2, 4, 8, 2};

/* fmin/fmax as documented: a NaN operand is ignored, -0 < +0. */
static double ref_fmin(double a, double b) {
    if (isnan(a)) return b;
    if (isnan(b)) return a;
    if (a == 0 && b == 0) return (signbit(a) || signbit(b)) ? -0.0 : 0.0;
    return a < b ? a : b;
}
static double ref_fmax(double a, double b) {
    if (isnan(a)) return b;
    if (isnan(b)) return a;
    if (a == 0 && b == 0) return (signbit(a) && signbit(b)) ? -0.0 : 0.0;
    return a > b ? a : b;
}
static float ref_f32op(ringlet_op_t op, float a, float b) {
    switch (op) {
    case RINGLET_SUM:
    case RINGLET_AVG: return a + b;
    case RINGLET_PROD: return a * b;
    case RINGLET_MIN: return (float)ref_fmin(a, b);
    case RINGLET_MAX: return (float)ref_fmax(a, b);
    default: return 0;
    }
}
static double ref_f64op(ringlet_op_t op, double a, double b) {
    switch (op) {
    case RINGLET_SUM:
    case RINGLET_AVG: return a + b;
    case RINGLET_PROD: return a * b;
    case RINGLET_MIN: return ref_fmin(a, b);
    case RINGLET_MAX: return ref_fmax(a, b);
    default: return 0;
    }
}

/* Integers: sum and prod computed modulo 2^64 on unsigned values, then truncated;
 * min and max compare the values as the type reads them. */
#define REF_INT(T, UT)                                                                     \
    {                                                                                      \
        T x, y, r;                                                                         \
        memcpy(&x, a, sizeof x);                                                           \
        memcpy(&y, b, sizeof y);                                                           \
        switch (op) {                                                                      \
        case RINGLET_SUM:                                                                  \
        case RINGLET_AVG: {                                                                \
            UT u = (UT)((uint64_t)(UT)x + (uint64_t)(UT)y);                                \
            memcpy(&r, &u, sizeof r);                                                      \
            break;                                                                         \
        }                                                                                  \
        case RINGLET_PROD: {                                                               \
            UT u = (UT)((uint64_t)(UT)x * (uint64_t)(UT)y);                                \
            memcpy(&r, &u, sizeof r);                                                      \
            break;                                                                         \
        }                                                                                  \
        case RINGLET_MIN: r = x < y ? x : y; break;                                        \
        default: r = x > y ? x : y; break;                                                 \
        }                                                                                  \
        memcpy(out, &r, sizeof r);                                                         \
        return;                                                                            \
    }

static void ref_op(ringlet_datatype_t dt, ringlet_op_t op, const void *a, const void *b, void *out) {
    switch (dt) {
    case RINGLET_INT8: REF_INT(int8_t, uint8_t)
    case RINGLET_UINT8: REF_INT(uint8_t, uint8_t)
    case RINGLET_INT32: REF_INT(int32_t, uint32_t)
    case RINGLET_UINT32: REF_INT(uint32_t, uint32_t)
    case RINGLET_INT64: REF_INT(int64_t, uint64_t)
    case RINGLET_UINT64: REF_INT(uint64_t, uint64_t)
    case RINGLET_FLOAT32: {
        float x, y, r;
        memcpy(&x, a, 4);
        memcpy(&y, b, 4);
        r = ref_f32op(op, x, y);
        memcpy(out, &r, 4);
        return;
    }
    case RINGLET_FLOAT64: {
        double x, y, r;
        memcpy(&x, a, 8);
        memcpy(&y, b, 8);
        r = ref_f64op(op, x, y);
        memcpy(out, &r, 8);
        return;
    }
    case RINGLET_FLOAT16:
    case RINGLET_BFLOAT16: {
        uint16_t x, y, r;
        memcpy(&x, a, 2);
        memcpy(&y, b, 2);
        if (dt == RINGLET_FLOAT16)
            r = ref_f2h(ref_f32op(op, ref_h2f(x), ref_h2f(y)));
        else
            r = ref_f2bf(ref_f32op(op, ref_bf2f(x), ref_bf2f(y)));
        memcpy(out, &r, 2);
        return;
    }
    default: return;
    }
}

/* Equal, or both NaN (NaN payloads are not specified). */
static int same_value(ringlet_datatype_t dt, const void *want, const void *got) {
    if (memcmp(want, got, dt_size[dt]) == 0) return 1;
    uint16_t h1, h2;
    switch (dt) {
    case RINGLET_FLOAT32: {
        float x, y;
        memcpy(&x, want, 4);
        memcpy(&y, got, 4);
        return isnan(x) && isnan(y);
    }
    case RINGLET_FLOAT64: {
        double x, y;
        memcpy(&x, want, 8);
        memcpy(&y, got, 8);
        return isnan(x) && isnan(y);
    }
    case RINGLET_FLOAT16:
        memcpy(&h1, want, 2);
        memcpy(&h2, got, 2);
        return h_is_nan(h1) && h_is_nan(h2);
    case RINGLET_BFLOAT16:
        memcpy(&h1, want, 2);
        memcpy(&h2, got, 2);
        return bf_is_nan(h1) && bf_is_nan(h2);
    default: return 0;
    }
}

static void fmt_value(ringlet_datatype_t dt, const void *p, char *buf, size_t len) {
    int8_t i8;
    uint8_t u8;
    int32_t i32;
    uint32_t u32;
    int64_t i64;
    uint64_t u64;
    uint16_t h;
    float f;
    double d;
    switch (dt) {
    case RINGLET_INT8: memcpy(&i8, p, 1); snprintf(buf, len, "%d", i8); break;
    case RINGLET_UINT8: memcpy(&u8, p, 1); snprintf(buf, len, "%u", u8); break;
    case RINGLET_INT32: memcpy(&i32, p, 4); snprintf(buf, len, "%" PRId32, i32); break;
    case RINGLET_UINT32: memcpy(&u32, p, 4); snprintf(buf, len, "%" PRIu32, u32); break;
    case RINGLET_INT64: memcpy(&i64, p, 8); snprintf(buf, len, "%" PRId64, i64); break;
    case RINGLET_UINT64: memcpy(&u64, p, 8); snprintf(buf, len, "%" PRIu64, u64); break;
    case RINGLET_FLOAT16: memcpy(&h, p, 2); snprintf(buf, len, "0x%04x (%g)", h, (double)ref_h2f(h)); break;
    case RINGLET_BFLOAT16: memcpy(&h, p, 2); snprintf(buf, len, "0x%04x (%g)", h, (double)ref_bf2f(h)); break;
    case RINGLET_FLOAT32: memcpy(&f, p, 4); snprintf(buf, len, "%a (0x%08x)", (double)f, fbits(f)); break;
    case RINGLET_FLOAT64: memcpy(&d, p, 8); snprintf(buf, len, "%a", d); break;
    default: snprintf(buf, len, "?"); break;
    }
}

/* ---------------------------------------------------------------------------- */
/* input generation                                                             */
/* ---------------------------------------------------------------------------- */
static double special_value(void) {
    static const double sp[] = {0.0, -0.0, INFINITY, -INFINITY, NAN, -NAN, 1.0, -1.0, 0.5, 3.0};
    return sp[rnd_below(sizeof sp / sizeof sp[0])];
}
static void gen_values(ringlet_datatype_t dt, void *buf, size_t n) {
    unsigned char *p = buf;
    for (size_t i = 0; i < n; i++) {
        uint64_t r = rnd();
        switch (dt) {
        case RINGLET_FLOAT32: {
            float f;
            unsigned k = (unsigned)(r & 15);
            if (k == 0)
                f = (float)special_value();
            else if (k == 1) /* float subnormals, FLT_MAX and FLT_MIN */
                f = bitsf((uint32_t)(r >> 32) & 0x807fffffu);
            else if (k == 2)
                f = (r & 0x100) ? FLT_MAX : -FLT_MIN;
            else /* moderate magnitudes, so that sums and products mostly stay finite */
                f = bitsf(((uint32_t)(r >> 32) & 0x807fffffu) | ((uint32_t)(97 + (r >> 8) % 60) << 23));
            memcpy(p + 4 * i, &f, 4);
            break;
        }
        case RINGLET_FLOAT64: {
            double d;
            unsigned k = (unsigned)(r & 15);
            if (k == 0)
                d = special_value();
            else if (k == 1)
                d = bitsd(rnd() & 0x800fffffffffffffull);
            else if (k == 2)
                d = (r & 0x100) ? DBL_MAX : -DBL_MIN;
            else
                d = bitsd((rnd() & 0x800fffffffffffffull) | ((uint64_t)(1000 + (r >> 8) % 48) << 52));
            memcpy(p + 8 * i, &d, 8);
            break;
        }
        case RINGLET_FLOAT16:
        case RINGLET_BFLOAT16: {
            uint16_t h = (uint16_t)r; /* any pattern: NaN, inf, subnormals included */
            if ((r >> 16) & 1) {      /* or a value near 1, where sums round */
                if (dt == RINGLET_FLOAT16)
                    h = (uint16_t)((h & 0x83ff) | ((12 + (r >> 20) % 6) << 10));
                else
                    h = (uint16_t)((h & 0x807f) | ((124 + (r >> 20) % 6) << 7));
            }
            memcpy(p + 2 * i, &h, 2);
            break;
        }
        default: /* integers: any bits */
            memcpy(p + dt_size[dt] * i, &r, dt_size[dt]);
            break;
        }
    }
}

/* ---------------------------------------------------------------------------- */
/* reduction tests                                                              */
/* ---------------------------------------------------------------------------- */
#define GUARD 64 /* bytes of guard pattern either side of every buffer */
#define GUARD_BYTE 0xA5

typedef struct {
    unsigned char *base; /* allocation */
    unsigned char *data; /* base + GUARD + offset */
    size_t bytes;        /* data bytes */
    size_t total;
} gbuf_t;

/* A 64-byte aligned allocation with the data at `offset` bytes past the alignment,
 * guard bytes all round. */
static gbuf_t gbuf_new(size_t bytes, size_t offset) {
    gbuf_t g;
    g.total = GUARD + offset + bytes + GUARD;
    g.total = (g.total + 63) / 64 * 64;
    g.base = aligned_alloc(64, g.total);
    if (!g.base) {
        printf("out of memory\n");
        exit(1);
    }
    memset(g.base, GUARD_BYTE, g.total);
    g.data = g.base + GUARD + offset;
    g.bytes = bytes;
    return g;
}
static int gbuf_guard_ok(const gbuf_t *g) {
    for (unsigned char *p = g->base; p < g->data; p++)
        if (*p != GUARD_BYTE) return 0;
    for (unsigned char *p = g->data + g->bytes; p < g->base + g->total; p++)
        if (*p != GUARD_BYTE) return 0;
    return 1;
}

enum { APART, DST_IS_A, DST_IS_B, ALL_SAME, A_IS_B, NUM_MODES };
static const char *mode_name[NUM_MODES] = {"dst apart", "dst == a", "dst == b", "dst == a == b", "a == b, dst apart"};

static void compare_array(const char *what, ringlet_datatype_t dt, const unsigned char *want, const unsigned char *got,
                          const unsigned char *a, const unsigned char *b, size_t n) {
    size_t es = dt_size[dt];
    for (size_t i = 0; i < n; i++) {
        checks++;
        if (!same_value(dt, want + i * es, got + i * es)) {
            char sa[64], sb[64], sw[64], sg[64];
            fmt_value(dt, a + i * es, sa, sizeof sa);
            fmt_value(dt, b + i * es, sb, sizeof sb);
            fmt_value(dt, want + i * es, sw, sizeof sw);
            fmt_value(dt, got + i * es, sg, sizeof sg);
            fail("%s: element %zu of %zu: a = %s, b = %s: got %s, want %s", what, i, n, sa, sb, sg, sw);
            return; /* one line per case */
        }
    }
}

static void test_reduce_case(ringlet_datatype_t dt, ringlet_op_t op, size_t n, int mode, const size_t off[3]) {
    size_t es = dt_size[dt], bytes = n * es;
    unsigned char *a0 = malloc(bytes + 1), *b0 = malloc(bytes + 1), *want = malloc(bytes + 1);
    gen_values(dt, a0, n);
    gen_values(dt, b0, n);
    /* make some pairs equal or opposite: ties for min/max, x - x for sum */
    for (size_t i = 0; i < n; i++)
        if (rnd_below(16) == 0) {
            memcpy(b0 + i * es, a0 + i * es, es);
            if (rnd() & 1) b0[i * es + es - 1] ^= 0x80; /* flip the sign bit (top byte, little endian) */
        }
    if (mode == ALL_SAME || mode == A_IS_B) memcpy(b0, a0, bytes);
    for (size_t i = 0; i < n; i++) ref_op(dt, op, a0 + i * es, b0 + i * es, want + i * es);

    gbuf_t A = gbuf_new(bytes, off[0] * es), B = gbuf_new(bytes, off[1] * es), D = gbuf_new(bytes, off[2] * es);
    memcpy(A.data, a0, bytes);
    memcpy(B.data, b0, bytes);
    void *dst = D.data, *pa = A.data, *pb = B.data;
    switch (mode) {
    case DST_IS_A: dst = pa; break;
    case DST_IS_B: dst = pb; break;
    case ALL_SAME: dst = pb = pa; break;
    case A_IS_B: pb = pa; break;
    default: break;
    }
    rl_reduce_host(dst, pa, pb, n, dt, op);

    char what[160];
    snprintf(what, sizeof what, "reduce %s %s n=%zu (%s, offsets %zu/%zu/%zu elements)", dt_name[dt], op_name[op], n,
             mode_name[mode], off[0], off[1], off[2]);
    compare_array(what, dt, want, dst, a0, b0, n);
    /* inputs that are not dst must be untouched */
    checks += 4;
    if (pa != dst && memcmp(pa, a0, bytes) != 0) fail("%s: input a was modified", what);
    if (pb != dst && memcmp(pb, b0, bytes) != 0) fail("%s: input b was modified", what);
    if (!gbuf_guard_ok(&A) || !gbuf_guard_ok(&B) || !gbuf_guard_ok(&D)) fail("%s: wrote outside the buffers", what);
    free(A.base);
    free(B.base);
    free(D.base);
    free(a0);
    free(b0);
    free(want);
}

static void test_reduce_all(void) {
    static const size_t lengths[] = {0, 1, 7, 31, 63, 64, 65, 129, 1000, 100003};
    for (int dt = 0; dt < RINGLET_NUM_DATATYPES; dt++)
        for (int op = 0; op < RINGLET_NUM_OPS; op++)
            for (size_t li = 0; li < sizeof lengths / sizeof lengths[0]; li++)
                for (int mode = 0; mode < NUM_MODES; mode++)
                    for (int o = lengths[li] > 10000; o < 2; o++) { /* long: unaligned only */
                        size_t off[3] = {0, 0, 0};
                        if (o) /* element offsets that break every vector alignment */
                            for (int k = 0; k < 3; k++) off[k] = 1 + rnd_below(15);
                        test_reduce_case((ringlet_datatype_t)dt, (ringlet_op_t)op, lengths[li], mode, off);
                    }
    /* n == 0 touches nothing, not even NULL pointers */
    for (int dt = 0; dt < RINGLET_NUM_DATATYPES; dt++) {
        rl_reduce_host(NULL, NULL, NULL, 0, (ringlet_datatype_t)dt, RINGLET_SUM);
        rl_divide_host(NULL, 0, (ringlet_datatype_t)dt, 3);
    }
}

/* Every float16 / bfloat16 pattern through the vector path of every op, against
 * itself (min/max: identity up to NaN quieting) and against shuffled partners. */
static void test_reduce_half_exhaustive(void) {
    const size_t n = 65536;
    uint16_t *a = malloc(n * 2), *b = malloc(n * 2), *d = malloc(n * 2), *w = malloc(n * 2);
    ringlet_datatype_t dts[2] = {RINGLET_FLOAT16, RINGLET_BFLOAT16};
    for (int t = 0; t < 2; t++) {
        ringlet_datatype_t dt = dts[t];
        for (int round = 0; round < 4; round++) {
            for (size_t i = 0; i < n; i++) a[i] = (uint16_t)i;
            if (round == 0)
                memcpy(b, a, n * 2);
            else
                for (size_t i = 0; i < n; i++) b[i] = (uint16_t)rnd();
            for (int op = 0; op < RINGLET_NUM_OPS; op++) {
                for (size_t i = 0; i < n; i++) ref_op(dt, (ringlet_op_t)op, &a[i], &b[i], &w[i]);
                rl_reduce_host(d, a, b, n, dt, (ringlet_op_t)op);
                char what[96];
                snprintf(what, sizeof what, "exhaustive %s %s round %d", dt_name[dt], op_name[op], round);
                compare_array(what, dt, (unsigned char *)w, (unsigned char *)d, (unsigned char *)a,
                              (unsigned char *)b, n);
            }
        }
    }
    free(a);
    free(b);
    free(d);
    free(w);
}

/* Every pair of special values, every op, every float type. */
static void test_reduce_specials(void) {
    static const double sp[] = {0.0, -0.0, INFINITY, -INFINITY, NAN, -NAN, 1.0, -1.0, 2.0,
                                FLT_MIN, -FLT_MIN, 0x1p-140, -0x1p-140, FLT_MAX, -FLT_MAX, 65504.0, 0x1p-24, 0x1p-25};
    enum { NS = sizeof sp / sizeof sp[0], N = NS * NS };
    static const ringlet_datatype_t dts[] = {RINGLET_FLOAT16, RINGLET_FLOAT32, RINGLET_FLOAT64, RINGLET_BFLOAT16};
    unsigned char a[N * 8], b[N * 8], d[N * 8], w[N * 8];
    for (size_t t = 0; t < sizeof dts / sizeof dts[0]; t++) {
        ringlet_datatype_t dt = dts[t];
        size_t es = dt_size[dt];
        for (int i = 0; i < NS; i++)
            for (int j = 0; j < NS; j++) {
                size_t k = (size_t)(i * NS + j);
                double x[2] = {sp[i], sp[j]};
                unsigned char *out[2] = {a + k * es, b + k * es};
                for (int m = 0; m < 2; m++) {
                    float f = (float)x[m];
                    uint16_t h = dt == RINGLET_FLOAT16 ? ref_f2h(f) : ref_f2bf(f);
                    if (dt == RINGLET_FLOAT32) memcpy(out[m], &f, 4);
                    else if (dt == RINGLET_FLOAT64) memcpy(out[m], &x[m], 8);
                    else memcpy(out[m], &h, 2);
                }
            }
        for (int op = 0; op < RINGLET_NUM_OPS; op++) {
            for (size_t k = 0; k < N; k++) ref_op(dt, (ringlet_op_t)op, a + k * es, b + k * es, w + k * es);
            rl_reduce_host(d, a, b, N, dt, (ringlet_op_t)op);
            char what[64];
            snprintf(what, sizeof what, "special values %s %s", dt_name[dt], op_name[op]);
            compare_array(what, dt, w, d, a, b, N);
        }
    }
}

/* ---------------------------------------------------------------------------- */
/* divide                                                                       */
/* ---------------------------------------------------------------------------- */
static void ref_div(ringlet_datatype_t dt, const void *in, void *out, int dv) {
#define REF_IDIV(T)                                                                        \
    {                                                                                      \
        T x;                                                                               \
        memcpy(&x, in, sizeof x);                                                          \
        x = (T)(x / (T)dv);                                                                \
        memcpy(out, &x, sizeof x);                                                         \
        return;                                                                            \
    }
    switch (dt) {
    case RINGLET_INT8: {
        int8_t x;
        memcpy(&x, in, 1);
        x = (int8_t)(x / dv);
        memcpy(out, &x, 1);
        return;
    }
    case RINGLET_UINT8: {
        uint8_t x;
        memcpy(&x, in, 1);
        x = (uint8_t)((unsigned)x / (unsigned)dv);
        memcpy(out, &x, 1);
        return;
    }
    case RINGLET_INT32: REF_IDIV(int32_t)
    case RINGLET_UINT32: REF_IDIV(uint32_t)
    case RINGLET_INT64: REF_IDIV(int64_t)
    case RINGLET_UINT64: REF_IDIV(uint64_t)
    case RINGLET_FLOAT32: {
        float x;
        memcpy(&x, in, 4);
        x = x / (float)dv;
        memcpy(out, &x, 4);
        return;
    }
    case RINGLET_FLOAT64: {
        double x;
        memcpy(&x, in, 8);
        x = x / (double)dv;
        memcpy(out, &x, 8);
        return;
    }
    case RINGLET_FLOAT16:
    case RINGLET_BFLOAT16: {
        uint16_t h;
        memcpy(&h, in, 2);
        h = dt == RINGLET_FLOAT16 ? ref_f2h(ref_h2f(h) / (float)dv) : ref_f2bf(ref_bf2f(h) / (float)dv);
        memcpy(out, &h, 2);
        return;
    }
    default: return;
    }
#undef REF_IDIV
}

static void test_divide_case(ringlet_datatype_t dt, const void *in, size_t n, int dv, size_t off) {
    size_t es = dt_size[dt], bytes = n * es;
    unsigned char *want = malloc(bytes + 1);
    for (size_t i = 0; i < n; i++) {
        if (dv > 1)
            ref_div(dt, (const unsigned char *)in + i * es, want + i * es, dv);
        else
            memcpy(want + i * es, (const unsigned char *)in + i * es, es); /* divisor < 2: unchanged */
    }
    gbuf_t G = gbuf_new(bytes, off * es);
    memcpy(G.data, in, bytes);
    rl_divide_host(G.data, n, dt, dv);
    char what[128];
    snprintf(what, sizeof what, "divide %s n=%zu by %d (offset %zu)", dt_name[dt], n, dv, off);
    compare_array(what, dt, want, G.data, in, in, n);
    checks++;
    if (!gbuf_guard_ok(&G)) fail("%s: wrote outside the buffer", what);
    free(G.base);
    free(want);
}

static void test_divide(void) {
    static const int divisors[] = {-3, 0, 1, 2, 3, 4, 5, 7, 8, 16, 100, 1000, 65537, 2147483647};
    static const size_t lengths[] = {1, 7, 64, 65, 1000, 100003};
    for (int dt = 0; dt < RINGLET_NUM_DATATYPES; dt++)
        for (size_t li = 0; li < sizeof lengths / sizeof lengths[0]; li++) {
            size_t n = lengths[li];
            unsigned char *in = malloc(n * dt_size[dt]);
            gen_values((ringlet_datatype_t)dt, in, n);
            for (size_t di = 0; di < sizeof divisors / sizeof divisors[0]; di++)
                test_divide_case((ringlet_datatype_t)dt, in, n, divisors[di], rnd_below(8));
            /* a random divisor too: the 8/32-bit paths divide in double */
            test_divide_case((ringlet_datatype_t)dt, in, n, 2 + (int)rnd_below(0x7ffffffd), 0);
            test_divide_case((ringlet_datatype_t)dt, in, n, 2 + (int)rnd_below(300), 0);
            free(in);
        }

    /* negative integers truncate toward zero */
    {
        int8_t in[] = {-7, -128, 127, -1, 0, 5, -6, -3};
        int8_t by2[] = {-3, -64, 63, 0, 0, 2, -3, -1}, by3[] = {-2, -42, 42, 0, 0, 1, -2, -1};
        int8_t t[8];
        memcpy(t, in, sizeof t);
        rl_divide_host(t, 8, RINGLET_INT8, 2);
        checks++;
        if (memcmp(t, by2, sizeof t)) fail("divide int8 negatives by 2");
        memcpy(t, in, sizeof t);
        rl_divide_host(t, 8, RINGLET_INT8, 3);
        checks++;
        if (memcmp(t, by3, sizeof t)) fail("divide int8 negatives by 3");
    }
    {
        int32_t in[] = {INT32_MIN, -5, -1, 7, INT32_MAX, -2147483647, -9, 9};
        int32_t by4[] = {-536870912, -1, 0, 1, 536870911, -536870911, -2, 2};
        checks++;
        rl_divide_host(in, 8, RINGLET_INT32, 4);
        if (memcmp(in, by4, sizeof in)) fail("divide int32 negatives by 4");
    }
    {
        int64_t in[] = {INT64_MIN, -5, -1, 7, INT64_MAX, -10, -11};
        int64_t by3[] = {INT64_MIN / 3, -1, 0, 2, INT64_MAX / 3, -3, -3};
        checks++;
        rl_divide_host(in, 7, RINGLET_INT64, 3);
        if (memcmp(in, by3, sizeof in)) fail("divide int64 negatives by 3");
    }
    {
        uint32_t in[] = {UINT32_MAX, 5, 0, 4294967294u};
        uint32_t by7[] = {UINT32_MAX / 7, 0, 0, 4294967294u / 7};
        checks++;
        rl_divide_host(in, 4, RINGLET_UINT32, 7);
        if (memcmp(in, by7, sizeof in)) fail("divide uint32 by 7");
    }
    /* exhaustive 8-bit, divisors 2..300 */
    for (int dv = 2; dv <= 300; dv++) {
        int8_t s[256];
        uint8_t u[256];
        for (int i = 0; i < 256; i++) {
            s[i] = (int8_t)(i - 128);
            u[i] = (uint8_t)i;
        }
        rl_divide_host(s, 256, RINGLET_INT8, dv);
        rl_divide_host(u, 256, RINGLET_UINT8, dv);
        for (int i = 0; i < 256; i++) {
            checks += 2;
            if (s[i] != (i - 128) / dv) fail("divide int8 %d by %d = %d", i - 128, dv, s[i]);
            if (u[i] != i / dv) fail("divide uint8 %d by %d = %d", i, dv, u[i]);
        }
    }
    /* float avg of halves: 3 * 1/3 rounds as one float division */
    {
        uint16_t h[2] = {0x3c00, 0x4200}; /* 1, 3 */
        rl_divide_host(h, 2, RINGLET_FLOAT16, 3);
        checks++;
        if (h[0] != ref_f2h(1.0f / 3.0f) || h[1] != 0x3c00)
            fail("divide float16 {1, 3} by 3 = {0x%04x, 0x%04x}", h[0], h[1]);
    }
}

/* ---------------------------------------------------------------------------- */
/* first calls from several threads                                             */
/* ---------------------------------------------------------------------------- */
#define NTHREADS 4
static void *thread_main(void *arg) {
    int id = (int)(intptr_t)arg;
    size_t n = 10000;
    float *a = malloc(n * 4), *b = malloc(n * 4);
    int bad = 0;
    for (int rep = 0; rep < 20; rep++) {
        for (size_t i = 0; i < n; i++) {
            a[i] = (float)(i + (size_t)id);
            b[i] = 1.0f;
        }
        rl_reduce_host(a, a, b, n, RINGLET_FLOAT32, RINGLET_SUM);
        for (size_t i = 0; i < n; i++)
            if (a[i] != (float)(i + (size_t)id) + 1.0f) bad = 1;
        if (rl_reduce_host_isa() == NULL) bad = 1;
    }
    free(a);
    free(b);
    return (void *)(intptr_t)bad;
}
static void test_threads(void) {
    pthread_t th[NTHREADS];
    int started = 0;
    for (int i = 0; i < NTHREADS; i++)
        if (pthread_create(&th[i], NULL, thread_main, (void *)(intptr_t)i) == 0) started++;
        else break;
    for (int i = 0; i < started; i++) {
        void *r;
        pthread_join(th[i], &r);
        checks++;
        if (r) fail("thread %d: wrong result", i);
    }
}

/* ---------------------------------------------------------------------------- */
/* bandwidth (printed, not asserted)                                            */
/* ---------------------------------------------------------------------------- */
#if defined(__SANITIZE_THREAD__)
#define TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define TSAN 1
#endif
#endif
#ifndef TSAN
#define TSAN 0
#endif
#if defined(__SANITIZE_ADDRESS__)
#define SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define SANITIZED 1
#endif
#endif
#if !defined(SANITIZED)
#define SANITIZED TSAN
#endif

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void bench(void) {
    const size_t bytes = (size_t)64 << 20;
    const int reps = SANITIZED ? 2 : 7;
    unsigned char *a = aligned_alloc(64, bytes), *b = aligned_alloc(64, bytes), *d = aligned_alloc(64, bytes);
    if (!a || !b || !d) {
        printf("bench: out of memory, skipped\n");
        free(a), free(b), free(d);
        return;
    }
    /* finite values everywhere */
    for (size_t i = 0; i < bytes / 4; i++) {
        ((float *)a)[i] = (float)(i & 1023);
        ((float *)b)[i] = 0.5f;
    }
    memset(d, 0, bytes);
    struct {
        const char *name;
        int kind; /* 0 memcpy, 1 reduce apart, 2 reduce in place */
        ringlet_datatype_t dt;
        double traffic; /* bytes moved per call, in units of the buffer size */
    } cases[] = {
        {"memcpy", 0, RINGLET_FLOAT32, 2},
        {"float32 sum, dst apart", 1, RINGLET_FLOAT32, 3},
        {"float32 sum, dst == a", 2, RINGLET_FLOAT32, 3},
        {"float16 sum, dst apart", 1, RINGLET_FLOAT16, 3},
        {"bfloat16 sum, dst apart", 1, RINGLET_BFLOAT16, 3},
        {"float64 sum, dst apart", 1, RINGLET_FLOAT64, 3},
        {"int32 sum, dst apart", 1, RINGLET_INT32, 3},
    };
    printf("bandwidth at 64 MiB per buffer, best of %d, GB/s of memory traffic (read + write)%s:\n", reps,
           SANITIZED ? " [sanitizer build: not meaningful]" : "");
    double memcpy_gbs = 0;
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        double best = 1e30;
        size_t n = bytes / dt_size[cases[c].dt];
        for (int r = 0; r < reps; r++) {
            double t0 = now();
            if (cases[c].kind == 0)
                memcpy(d, a, bytes);
            else if (cases[c].kind == 1)
                rl_reduce_host(d, a, b, n, cases[c].dt, RINGLET_SUM);
            else
                rl_reduce_host(d, d, b, n, cases[c].dt, RINGLET_SUM);
            double t = now() - t0;
            if (t < best) best = t;
        }
        double gbs = cases[c].traffic * (double)bytes / best / 1e9;
        if (cases[c].kind == 0) memcpy_gbs = gbs;
        printf("  %-26s %7.2f GB/s  (%5.2f ms, %.2fx memcpy)\n", cases[c].name, gbs, best * 1e3,
               memcpy_gbs > 0 ? gbs / memcpy_gbs : 0.0);
    }
    free(a);
    free(b);
    free(d);
}

/* ---------------------------------------------------------------------------- */
/* the caller's floating-point settings                                         */
/* ---------------------------------------------------------------------------- */
#if defined(__x86_64__)
/* The calling thread's floating-point settings change no result (kernels/fpenv.h): with
 * flush-to-zero, denormals-are-zero, rounding upward and the invalid-operation trap set
 * in MXCSR (as torch.set_flush_denormal, a library built with -Ofast, fesetround and
 * feenableexcept leave a thread), every float dtype x op, the divide, the scaling and the
 * conversions give the same bits as in the default environment, and the caller finds its
 * MXCSR as it set it after each call. Without the switch the subnormal results flush to
 * zero, the sums round up, and the first NaN made traps (SIGFPE). */
#define MXCSR_DEFAULT 0x1F80u
#define MXCSR_ODD ((MXCSR_DEFAULT & ~0x80u) | 0x8000u | 0x0040u | 0x4000u) /* -IM, +FTZ, +DAZ, round up */

static unsigned fp_call_odd(void (*call)(void *), void *arg) {
    _mm_setcsr(MXCSR_ODD);
    call(arg);
    unsigned after = _mm_getcsr();
    _mm_setcsr(MXCSR_DEFAULT);
    return after;
}

typedef struct {
    int kind; /* 0 reduce, 1 divide, 2 scale, 3 convert */
    ringlet_datatype_t dt, st;
    ringlet_op_t op;
    void *dst;
    const void *a, *b;
    size_t n;
} fp_call_t;

static void fp_call(void *arg) {
    fp_call_t *c = arg;
    size_t es = dt_size[c->dt];
    switch (c->kind) {
    case 0: rl_reduce_host(c->dst, c->a, c->b, c->n, c->dt, c->op); break;
    case 1:
        memcpy(c->dst, c->a, c->n * es);
        rl_divide_host(c->dst, c->n, c->dt, 3);
        break;
    case 2: rl_scale_host(c->dst, c->a, c->n, c->dt, c->b); break;
    default: rl_convert_host(c->dst, c->dt, c->a, c->st, c->n, 1.0 / 3.0); break;
    }
}

/* Runs c in the default environment and under MXCSR_ODD, and compares the bits. */
static void fp_check(fp_call_t *c, const char *what) {
    size_t bytes = c->n * dt_size[c->dt];
    unsigned char *want = malloc(bytes), *got = malloc(bytes);
    c->dst = want;
    fp_call(c);
    c->dst = got;
    unsigned after = fp_call_odd(fp_call, c);
    checks++;
    if ((after & ~0x3Fu) != MXCSR_ODD) fail("fp environment, %s: the caller's MXCSR %#x came back as %#x", what, MXCSR_ODD, after);
    size_t es = dt_size[c->dt], bad = 0, first = 0;
    for (size_t i = 0; i < c->n; i++)
        if (memcmp(want + i * es, got + i * es, es) && !bad++) first = i;
    checks++;
    if (bad) {
        char w[64], g[64];
        fmt_value(c->dt, want + first * es, w, sizeof w);
        fmt_value(c->dt, got + first * es, g, sizeof g);
        fail("fp environment, %s: %zu of %zu elements differ from the default environment's (first [%zu]: %s, got %s)",
             what, bad, c->n, first, w, g);
    }
    free(want);
    free(got);
}

/* Values of dt with every third one subnormal (gen_values gives few). */
static void gen_fp_values(ringlet_datatype_t dt, void *buf, size_t n) {
    gen_values(dt, buf, n);
    unsigned char *p = buf;
    for (size_t i = 0; i < n; i += 3) {
        uint64_t r = rnd() | 1; /* not zero */
        switch (dt) {
        case RINGLET_FLOAT32: { uint32_t v = (uint32_t)r & 0x807fffffu; memcpy(p + 4 * i, &v, 4); break; }
        case RINGLET_FLOAT64: { uint64_t v = r & 0x800fffffffffffffull; memcpy(p + 8 * i, &v, 8); break; }
        case RINGLET_FLOAT16: { uint16_t v = (uint16_t)(r & 0x83ffu); memcpy(p + 2 * i, &v, 2); break; }
        default: { uint16_t v = (uint16_t)(r & 0x807fu); memcpy(p + 2 * i, &v, 2); break; }
        }
    }
}

static void fp_narrow_call(void *arg) {
    double *x = arg;
    float f = rl_fpenv_to_float(x[0]);
    memcpy(&x[1], &f, sizeof f);
}

static void test_fp_environment(void) {
    enum { N = 4099 };
    /* rl_fpenv_to_float (the GPU conversion's factor): 1/3, 1 + 2^-30 and a subnormal float
     * narrowed as round-to-nearest narrows them, under round-up with FTZ. */
    static const double wides[] = {1.0 / 3.0, 1.0 + 0x1p-30, 0x1.2345678p-140};
    for (size_t i = 0; i < sizeof wides / sizeof wides[0]; i++) {
        volatile double w = wides[i];
        float want = (float)w, got;
        double x[2] = {w, 0};
        unsigned after = fp_call_odd(fp_narrow_call, x);
        memcpy(&got, &x[1], sizeof got);
        checks++;
        if (memcmp(&want, &got, sizeof want) || (after & ~0x3Fu) != MXCSR_ODD)
            fail("fp environment: rl_fpenv_to_float(%a) gave %a, want %a (MXCSR %#x after)", (double)w, (double)got,
                 (double)want, after);
    }
    static const ringlet_datatype_t fts[] = {RINGLET_FLOAT16, RINGLET_FLOAT32, RINGLET_FLOAT64, RINGLET_BFLOAT16};
    char what[128];
    for (size_t t = 0; t < sizeof fts / sizeof fts[0]; t++) {
        ringlet_datatype_t dt = fts[t];
        size_t es = dt_size[dt];
        unsigned char *a = malloc(N * es), *b = malloc(N * es), scalar[8];
        gen_fp_values(dt, a, N);
        gen_fp_values(dt, b, N);
        for (int op = 0; op < RINGLET_NUM_OPS; op++) {
            fp_call_t c = {.kind = 0, .dt = dt, .op = (ringlet_op_t)op, .a = a, .b = b, .n = N};
            snprintf(what, sizeof what, "reduce %s %s", dt_name[dt], op_name[op]);
            fp_check(&c, what);
        }
        fp_call_t d = {.kind = 1, .dt = dt, .a = a, .n = N};
        snprintf(what, sizeof what, "divide %s by 3", dt_name[dt]);
        fp_check(&d, what);
        gen_values(dt, scalar, 1); /* a scaling factor that rounds */
        if (dt == RINGLET_FLOAT32) { float k = 0.1f; memcpy(scalar, &k, 4); }
        if (dt == RINGLET_FLOAT64) { double k = 0.1; memcpy(scalar, &k, 8); }
        fp_call_t sc = {.kind = 2, .dt = dt, .a = a, .b = scalar, .n = N};
        snprintf(what, sizeof what, "scale %s", dt_name[dt]);
        fp_check(&sc, what);
        for (size_t u = 0; u < sizeof fts / sizeof fts[0]; u++) {
            fp_call_t cv = {.kind = 3, .dt = fts[u], .st = dt, .a = a, .n = N};
            snprintf(what, sizeof what, "convert %s to %s, scaled by 1/3", dt_name[dt], dt_name[fts[u]]);
            fp_check(&cv, what);
        }
        free(a);
        free(b);
    }
}
#else
static void test_fp_environment(void) { printf("test_kernels: not x86-64, floating-point environment not tested\n"); }
#endif

/* ---------------------------------------------------------------------------- */
/* the other instruction sets: run this program again with RINGLET_CPU_ISA set  */
/* ---------------------------------------------------------------------------- */
static void run_other_isas(const char *self_isa, uint64_t seed) {
    static const char *isas[] = {"avx512f", "avx2", "default"};
    char seedbuf[32];
    snprintf(seedbuf, sizeof seedbuf, "%" PRIu64, seed);
    for (size_t k = 0; k < sizeof isas / sizeof isas[0]; k++) {
        if (strcmp(isas[k], self_isa) == 0) continue;
        setenv("RINGLET_CPU_ISA", isas[k], 1);
        setenv("RINGLET_TEST_CHILD", "1", 1);
        setenv("RINGLET_TEST_SEED", seedbuf, 1);
        char *argv[] = {(char *)"test_kernels", NULL};
        pid_t pid;
        fflush(stdout);
        int rc = posix_spawn(&pid, "/proc/self/exe", NULL, NULL, argv, environ);
        if (rc != 0) {
            fail("could not run the test again for isa %s (posix_spawn: %s)", isas[k], strerror(rc));
            continue;
        }
        int status = 0;
        while (waitpid(pid, &status, 0) < 0) {
        }
        checks++;
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) fail("the run with RINGLET_CPU_ISA=%s failed", isas[k]);
    }
    unsetenv("RINGLET_CPU_ISA");
    unsetenv("RINGLET_TEST_CHILD");
}

/* rl_reduce_host_many equals nsrc - 1 pairwise rl_reduce_host calls, bit for bit, for
 * every dtype x op, 1 to 9 sources, lengths across the internal block size, dst being a
 * source or not. */
static void test_reduce_many(void) {
    enum { MAXS = 9 };
    const size_t lens[] = {1, 7, 4095, 4096, 4097, 10007};
    for (int dt = 0; dt < RINGLET_NUM_DATATYPES; dt++)
        for (int op = 0; op < RINGLET_NUM_OPS; op++)
            for (size_t li = 0; li < sizeof lens / sizeof lens[0]; li++) {
                size_t n = lens[li], es = dt_size[dt], bytes = n * es;
                int nsrc = 1 + (int)rnd_below(MAXS), alias = (int)rnd_below(nsrc + 1) - 1; /* -1: none */
                unsigned char *src[MAXS], *want = malloc(bytes), *dst = malloc(bytes);
                for (int k = 0; k < nsrc; k++) {
                    src[k] = malloc(bytes);
                    gen_values((ringlet_datatype_t)dt, src[k], n);
                }
                memcpy(want, src[0], bytes);
                for (int k = 1; k < nsrc; k++) rl_reduce_host(want, want, src[k], n, dt, op);
                unsigned char *out = alias >= 0 ? src[alias] : dst;
                const void *srcs[MAXS];
                for (int k = 0; k < nsrc; k++) srcs[k] = src[k];
                rl_reduce_host_many(out, srcs, nsrc, n, dt, op);
                for (size_t i = 0; i < n; i++) {
                    checks++;
                    if (!same_value(dt, want + i * es, out + i * es)) {
                        fail("reduce_many %s %s n=%zu nsrc=%d alias=%d: element %zu differs from the pairwise "
                             "reduction", dt_name[dt], op_name[op], n, nsrc, alias, i);
                        break;
                    }
                }
                for (int k = 0; k < nsrc; k++) free(src[k]);
                free(want);
                free(dst);
            }
}

int main(void) {
    int child = getenv("RINGLET_TEST_CHILD") != NULL;
    const char *seed_env = getenv("RINGLET_TEST_SEED");
    uint64_t seed = seed_env ? strtoull(seed_env, NULL, 0) : (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 32);
    rng_state = seed;

    test_threads(); /* first: the dispatcher is set up by racing threads */
    const char *isa = rl_reduce_host_isa();
    printf("test_kernels: seed %" PRIu64 " (RINGLET_TEST_SEED=%" PRIu64 " repeats it), isa %s\n", seed, seed, isa);
    if (child) {
        const char *want = getenv("RINGLET_CPU_ISA");
        if (want && strcmp(want, isa) != 0) {
            printf("test_kernels: isa %s not supported on this CPU, skipped\n", want);
            return 0;
        }
    }

    if (!child) {
        test_conversion_edges();
        test_conversion_exhaustive();
        test_conversion_ties(0);
        test_conversion_ties(1);
        test_conversion_random();
    }
    test_reduce_all();
    test_reduce_specials();
    test_reduce_half_exhaustive();
    test_reduce_many();
    test_divide();
    test_fp_environment();
    if (!child) {
        const char *nb = getenv("RINGLET_TEST_NO_BENCH");
        if (!(nb && *nb && strcmp(nb, "0") != 0)) bench();
        if (TSAN) /* the other ISAs' loops are single-threaded: nothing more for TSan to see */
            printf("test_kernels: thread sanitizer build, other ISAs not run\n");
        else
            run_other_isas(isa, seed);
    }

    printf("test_kernels%s%s: %ld checks, %d failures\n", child ? " isa " : "", child ? isa : "", checks, failures);
    return failures ? 1 : 0;
}
