/* Element-wise kernels of the DDP layer on host memory: float16/bfloat16 compression
 * of buckets for the wire (scaled by 1/nranks on the way), and back.
 *
 * Plain loops the compiler vectorises; float16 conversions use F16C (with AVX) when
 * the CPU has it, chosen once at run time, and a portable round-to-nearest-even
 * conversion otherwise. Scaling multiplies by the float32 value of the scale, as
 * PyTorch's fp16 compression hook divides before it rounds. */
#include <math.h>
#include <stdatomic.h>
#include <string.h>

#include "ddp_internal.h"

#if (defined(__x86_64__) || defined(__i386__)) && (defined(__GNUC__) || defined(__clang__))
#define RL_DDP_X86 1
#include <cpuid.h>
#include <immintrin.h>
#else
#define RL_DDP_X86 0
#endif

/* ---- scalar conversions ---- */

uint16_t rl_ddp_f32_to_f16(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    uint32_t sign = x & 0x80000000u;
    x ^= sign;
    uint16_t o;
    if (x >= (uint32_t)(127 + 16) << 23) {             /* >= 2^16: inf (or NaN) */
        o = x > 0x7f800000u ? 0x7e00 : 0x7c00;
    } else if (x < (uint32_t)113 << 23) {              /* < 2^-14: subnormal or zero */
        /* Adding 0.5 aligns the float16 subnormal's last bit with float32's last
         * mantissa bit, so the FPU's own rounding (to nearest even) rounds. */
        const uint32_t magic_u = (uint32_t)((127 - 15) + (23 - 10) + 1) << 23;
        float fx, magic;
        memcpy(&fx, &x, 4);
        memcpy(&magic, &magic_u, 4);
        fx += magic;
        uint32_t r;
        memcpy(&r, &fx, 4);
        o = (uint16_t)(r - magic_u);
    } else {                                           /* normal: rebias, round to nearest even */
        uint32_t odd = (x >> 13) & 1;
        x += ((uint32_t)(15 - 127) << 23) + 0xfffu + odd;
        o = (uint16_t)(x >> 13);
    }
    return (uint16_t)(o | (sign >> 16));
}

float rl_ddp_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t e = (h >> 10) & 0x1fu, m = h & 0x3ffu, r;
    if (e == 0) {
        float f = (float)m * 5.9604644775390625e-8f; /* m * 2^-24, exact */
        memcpy(&r, &f, 4);
        r |= sign;
    } else if (e == 31) {
        r = sign | 0x7f800000u | (m << 13);
    } else {
        r = sign | ((e + 112) << 23) | (m << 13);
    }
    float f;
    memcpy(&f, &r, 4);
    return f;
}

uint16_t rl_ddp_f32_to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40); /* quiet NaN */
    u += 0x7fffu + ((u >> 16) & 1);
    return (uint16_t)(u >> 16);
}

float rl_ddp_bf16_to_f32(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* ---- F16C ---- */

#if RL_DDP_X86
#define RL_DDP_F16C __attribute__((target("avx,f16c")))

RL_DDP_F16C static void f32_to_f16_f16c(uint16_t *dst, const float *src, size_t n, float s) {
    __m256 vs = _mm256_set1_ps(s);
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 v = _mm256_mul_ps(_mm256_loadu_ps(src + i), vs);
        _mm_storeu_si128((__m128i *)(void *)(dst + i), _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
    }
    for (; i < n; i++) dst[i] = rl_ddp_f32_to_f16(src[i] * s);
}

RL_DDP_F16C static void f16_to_f32_f16c(float *dst, const uint16_t *src, size_t n) {
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)(src + i))));
    for (; i < n; i++) dst[i] = rl_ddp_f16_to_f32(src[i]);
}

/* F16C instructions are VEX-encoded: AVX (with the OS saving its state) is needed too. */
static int cpu_has_f16c(void) {
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d)) return 0;
    return (c & bit_F16C) && (c & bit_AVX) && (c & bit_OSXSAVE) && __builtin_cpu_supports("avx");
}

static atomic_int f16c_state = -1; /* -1 unknown, 0 no, 1 yes; racing first calls agree */
static int use_f16c(void) {
    int s = atomic_load_explicit(&f16c_state, memory_order_relaxed);
    if (s < 0) {
        s = cpu_has_f16c();
        atomic_store_explicit(&f16c_state, s, memory_order_relaxed);
    }
    return s;
}
#endif

/* ---- kernels ---- */

void rl_ddp_compress(void *dst, ringlet_datatype_t wire, const void *src, ringlet_datatype_t dtype, size_t n,
                     double scale) {
    uint16_t *d = dst;
    float f = (float)scale;
    if (dtype == RINGLET_FLOAT32) {
        const float *s = src;
        if (wire == RINGLET_FLOAT16) {
#if RL_DDP_X86
            if (use_f16c()) {
                f32_to_f16_f16c(d, s, n, f);
                return;
            }
#endif
            for (size_t i = 0; i < n; i++) d[i] = rl_ddp_f32_to_f16(s[i] * f);
        } else {
            for (size_t i = 0; i < n; i++) d[i] = rl_ddp_f32_to_bf16(s[i] * f);
        }
    } else { /* float64 */
        const double *s = src;
        if (wire == RINGLET_FLOAT16)
            for (size_t i = 0; i < n; i++) d[i] = rl_ddp_f32_to_f16((float)(s[i] * scale));
        else
            for (size_t i = 0; i < n; i++) d[i] = rl_ddp_f32_to_bf16((float)(s[i] * scale));
    }
}

void rl_ddp_decompress(void *dst, ringlet_datatype_t dtype, const void *src, ringlet_datatype_t wire, size_t n) {
    const uint16_t *s = src;
    if (dtype == RINGLET_FLOAT32) {
        float *d = dst;
        if (wire == RINGLET_FLOAT16) {
#if RL_DDP_X86
            if (use_f16c()) {
                f16_to_f32_f16c(d, s, n);
                return;
            }
#endif
            for (size_t i = 0; i < n; i++) d[i] = rl_ddp_f16_to_f32(s[i]);
        } else {
            for (size_t i = 0; i < n; i++) d[i] = rl_ddp_bf16_to_f32(s[i]);
        }
    } else { /* float64 */
        double *d = dst;
        if (wire == RINGLET_FLOAT16)
            for (size_t i = 0; i < n; i++) d[i] = rl_ddp_f16_to_f32(s[i]);
        else
            for (size_t i = 0; i < n; i++) d[i] = rl_ddp_bf16_to_f32(s[i]);
    }
}

void rl_ddp_store_value(void *dst, ringlet_datatype_t dtype, double v) {
    switch (dtype) {
    case RINGLET_INT8: { int8_t x = (int8_t)v; memcpy(dst, &x, 1); break; }
    case RINGLET_UINT8: { uint8_t x = (uint8_t)v; memcpy(dst, &x, 1); break; }
    case RINGLET_INT32: { int32_t x = (int32_t)v; memcpy(dst, &x, 4); break; }
    case RINGLET_UINT32: { uint32_t x = (uint32_t)v; memcpy(dst, &x, 4); break; }
    case RINGLET_INT64: { int64_t x = (int64_t)v; memcpy(dst, &x, 8); break; }
    case RINGLET_UINT64: { uint64_t x = (uint64_t)v; memcpy(dst, &x, 8); break; }
    case RINGLET_FLOAT16: { uint16_t x = rl_ddp_f32_to_f16((float)v); memcpy(dst, &x, 2); break; }
    case RINGLET_BFLOAT16: { uint16_t x = rl_ddp_f32_to_bf16((float)v); memcpy(dst, &x, 2); break; }
    case RINGLET_FLOAT32: { float x = (float)v; memcpy(dst, &x, 4); break; }
    case RINGLET_FLOAT64: memcpy(dst, &v, 8); break;
    default: break;
    }
}

double rl_ddp_load_value(const void *src, ringlet_datatype_t dtype) {
    switch (dtype) {
    case RINGLET_INT8: { int8_t x; memcpy(&x, src, 1); return x; }
    case RINGLET_UINT8: { uint8_t x; memcpy(&x, src, 1); return x; }
    case RINGLET_INT32: { int32_t x; memcpy(&x, src, 4); return x; }
    case RINGLET_UINT32: { uint32_t x; memcpy(&x, src, 4); return x; }
    case RINGLET_INT64: { int64_t x; memcpy(&x, src, 8); return (double)x; }
    case RINGLET_UINT64: { uint64_t x; memcpy(&x, src, 8); return (double)x; }
    case RINGLET_FLOAT16: { uint16_t x; memcpy(&x, src, 2); return rl_ddp_f16_to_f32(x); }
    case RINGLET_BFLOAT16: { uint16_t x; memcpy(&x, src, 2); return rl_ddp_bf16_to_f32(x); }
    case RINGLET_FLOAT32: { float x; memcpy(&x, src, 4); return x; }
    case RINGLET_FLOAT64: { double x; memcpy(&x, src, 8); return x; }
    default: return NAN;
    }
}
