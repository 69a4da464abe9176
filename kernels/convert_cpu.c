/* Conversions between the floating types with a scaling on the way (kernels/convert.h):
 * the DDP layer's float16/bfloat16 compression of gradient buckets and its way back, on
 * host memory and (through the simulated GPU) on simulated device memory. float32 and
 * float16 go through F16C where the CPU has it (chosen once); it rounds as the portable
 * conversion does (to nearest even). */
#include <math.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>

#include "convert.h"
#include "fpenv.h"
#include "reduce.h"

#if (defined(__x86_64__) || defined(__i386__)) && (defined(__GNUC__) || defined(__clang__))
#define RL_CV_X86 1
#include <cpuid.h>
#include <immintrin.h>
#else
#define RL_CV_X86 0
#endif

int rl_convert_supported(ringlet_datatype_t t) {
    return t == RINGLET_FLOAT16 || t == RINGLET_BFLOAT16 || t == RINGLET_FLOAT32 || t == RINGLET_FLOAT64;
}

static float load_f(const void *p, ringlet_datatype_t t, size_t i) {
    switch (t) {
    case RINGLET_FLOAT16: return rl_half_to_float(((const uint16_t *)p)[i]);
    case RINGLET_BFLOAT16: return rl_bf16_to_float(((const uint16_t *)p)[i]);
    default: return ((const float *)p)[i];
    }
}

static void store_f(void *p, ringlet_datatype_t t, size_t i, float v) {
    switch (t) {
    case RINGLET_FLOAT16: ((uint16_t *)p)[i] = rl_float_to_half(v); break;
    case RINGLET_BFLOAT16: ((uint16_t *)p)[i] = rl_float_to_bf16(v); break;
    case RINGLET_FLOAT32: ((float *)p)[i] = v; break;
    default: ((double *)p)[i] = (double)v; break;
    }
}

#if RL_CV_X86
#define RL_CV_F16C __attribute__((target("avx,f16c")))
RL_CV_F16C static void f32_to_f16_f16c(uint16_t *dst, const float *src, size_t n, float s) {
    __m256 vs = _mm256_set1_ps(s);
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 v = _mm256_mul_ps(_mm256_loadu_ps(src + i), vs);
        _mm_storeu_si128((__m128i *)(void *)(dst + i), _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
    }
    for (; i < n; i++) dst[i] = rl_float_to_half(src[i] * s);
}
RL_CV_F16C static void f16_to_f32_f16c(float *dst, const uint16_t *src, size_t n, float s) {
    __m256 vs = _mm256_set1_ps(s);
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 v = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)(src + i)));
        _mm256_storeu_ps(dst + i, _mm256_mul_ps(v, vs));
    }
    for (; i < n; i++) dst[i] = rl_half_to_float(src[i]) * s;
}
/* F16C is VEX-encoded: AVX with the OS saving its state is needed too. */
static int use_f16c(void) {
    static atomic_int state = -1; /* racing first calls agree */
    int s = atomic_load_explicit(&state, memory_order_relaxed);
    if (s < 0) {
        unsigned a, b, c, d;
        s = __get_cpuid(1, &a, &b, &c, &d) && (c & bit_F16C) && (c & bit_AVX) && (c & bit_OSXSAVE) &&
            __builtin_cpu_supports("avx");
        atomic_store_explicit(&state, s, memory_order_relaxed);
    }
    return s;
}
#endif

/* float64 to float rounded to odd: toward zero, the lowest mantissa bit set where that was
 * inexact. float holds more than twice a float16's or bfloat16's precision plus two bits,
 * so rounding this float to either (to nearest even) rounds the double once (through
 * float as it comes, the double would be rounded twice: 1 + 2^-11 + 2^-30 became the tie
 * 1 + 2^-11, then went down to 1 instead of up). */
static float to_float_odd(double v) {
    float f = (float)v;
    if (f != f) return f; /* NaN */
    if (fabs((double)f) > fabs(v)) f = nextafterf(f, 0.0f);
    if ((double)f != v) {
        uint32_t b;
        memcpy(&b, &f, sizeof b);
        b |= 1;
        memcpy(&f, &b, sizeof f);
    }
    return f;
}

__attribute__((noinline)) static void convert_host(void *dst, ringlet_datatype_t dt, const void *src,
                                                   ringlet_datatype_t st, size_t n, double scale) {
    if (st == RINGLET_FLOAT64) {
        const double *s = src;
        if (dt == RINGLET_FLOAT64) {
            double *d = dst;
            for (size_t i = 0; i < n; i++) d[i] = s[i] * scale;
        } else if (dt == RINGLET_FLOAT32) {
            for (size_t i = 0; i < n; i++) ((float *)dst)[i] = (float)(s[i] * scale);
        } else {
            for (size_t i = 0; i < n; i++) store_f(dst, dt, i, to_float_odd(s[i] * scale));
        }
        return;
    }
    float f = (float)scale;
#if RL_CV_X86
    if (use_f16c() && st == RINGLET_FLOAT32 && dt == RINGLET_FLOAT16) return f32_to_f16_f16c(dst, src, n, f);
    if (use_f16c() && st == RINGLET_FLOAT16 && dt == RINGLET_FLOAT32) return f16_to_f32_f16c(dst, src, n, f);
#endif
    if (st == dt && st == RINGLET_FLOAT32) {
        float *d = dst;
        const float *s = src;
        for (size_t i = 0; i < n; i++) d[i] = s[i] * f;
        return;
    }
    /* dst may be src (same type): each element is read before it is written. */
    for (size_t i = 0; i < n; i++) store_f(dst, dt, i, load_f(src, st, i) * f);
}

/* In the default floating-point environment (fpenv.h), as the reductions. */
void rl_convert_host(void *dst, ringlet_datatype_t dt, const void *src, ringlet_datatype_t st, size_t n,
                     double scale) {
    if (!n || !rl_convert_supported(dt) || !rl_convert_supported(st)) return;
    rl_fpenv e = rl_fpenv_enter();
    convert_host(dst, dt, src, st, n, scale);
    rl_fpenv_leave(e);
}
