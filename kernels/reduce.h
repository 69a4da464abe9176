/* Reduction kernels: the one interface for host (CPU) buffers.
 * Knows data types and ops, nothing else of ringlet.
 *
 * Implemented in kernels/reduce_cpu.c. Every function is thread-safe (no state
 * but the instruction-set choice, made once). Pointers must be aligned to the
 * element size, as C requires of any T * (buffers from malloc, or at a whole number
 * of elements past one, are). */
#ifndef RINGLET_KERNELS_REDUCE_H
#define RINGLET_KERNELS_REDUCE_H

#include <stddef.h>
#include <stdint.h>
#include "ringlet.h"

/* dst[i] = a[i] op b[i] for i < n. dst may alias a or b (exactly, not partially);
 * a may equal b. n == 0 does nothing (the pointers may then be NULL); an unknown dt
 * or op does nothing (callers validate arguments).
 *
 * - RINGLET_AVG reduces as a sum; the caller divides at the end (rl_divide_host).
 * - Integer sum/prod wrap modulo 2^bits (two's complement for signed types; no
 *   undefined behaviour). Integer min/max compare as the type reads (signed or not).
 * - float16 / bfloat16 are converted to float32, computed in float32 and rounded
 *   once (round to nearest even).
 * - Float sum/prod are IEEE operations in the type (float16/bfloat16: in float32).
 * - Float min/max follow fmin/fmax (IEEE 754-2019 minimumNumber/maximumNumber): a
 *   NaN operand is ignored, so the result is NaN only when both operands are NaN;
 *   -0 counts as less than +0 (min(-0, +0) = -0, max(-0, +0) = +0). The result
 *   thus does not depend on the order of a and b.
 * - Which NaN (payload, sign) comes out of an operation on NaNs is not specified.
 * - The results are the same, bit for bit (NaN payloads aside), whichever
 *   instruction set runs. */
void rl_reduce_host(void *dst, const void *a, const void *b, size_t n, ringlet_datatype_t dt, ringlet_op_t op);

/* dst[i] = srcs[0][i] op srcs[1][i] op ... op srcs[nsrc-1][i], left to right, each step
 * rounded as rl_reduce_host rounds it (so the result equals nsrc-1 calls of it, bit for
 * bit). dst may be any of the sources (every source is read before dst is written).
 * nsrc == 1 copies. */
void rl_reduce_host_many(void *dst, const void *const *srcs, int nsrc, size_t n, ringlet_datatype_t dt,
                         ringlet_op_t op);

/* dst[i] = src[i] * scalar (the pre-multiplied sum's scaling), scalar being one element of
 * dt: integers wrap modulo 2^bits, floats multiply in their type (float16 / bfloat16 in
 * float32, rounded once). dst may be src. */
void rl_scale_host(void *dst, const void *src, size_t n, ringlet_datatype_t dt, const void *scalar);

/* buf[i] = buf[i] / divisor: the last step of avg. Integers truncate toward zero
 * (C division: -7 / 2 = -3); unsigned types divide as unsigned. Floats divide in
 * their type (x / (float)divisor, x / (double)divisor); float16 / bfloat16 convert
 * to float32, divide, and round once to nearest even. A divisor below 2 leaves buf
 * unchanged. */
void rl_divide_host(void *buf, size_t n, ringlet_datatype_t dt, int divisor);

/* IEEE half and bfloat16 conversions (round to nearest even, NaN stays NaN).
 * To float: exact; a NaN keeps its sign and payload. From float: subnormals (of
 * either format) are rounded like any other value, overflow gives inf, a NaN gives
 * a quiet NaN with the same sign and the top bits of the payload (as the x86
 * conversion instructions do). Like the reductions, they assume the default
 * floating-point environment (round to nearest, no flush-to-zero). */
float rl_half_to_float(uint16_t h);
uint16_t rl_float_to_half(float f);
float rl_bf16_to_float(uint16_t b);
uint16_t rl_float_to_bf16(float f);

/* Name of the instruction set the dispatcher picked, chosen once at the first call
 * from what the CPU supports:
 *   "avx512f"  AVX-512 F + BW + DQ + VL (every AVX-512 CPU since Skylake-SP, Zen 4)
 *   "avx2"     AVX2 + F16C (Haswell, Zen and later)
 *   "default"  the compiler's baseline (SSE2 on x86-64; plain C elsewhere)
 * The environment variable RINGLET_CPU_ISA=<one of these names> asks for a lower
 * one than the best (to compare, or to work around a CPU problem); a name the CPU
 * cannot run is ignored. */
const char *rl_reduce_host_isa(void);

#endif
