/* Reduction kernels: the one interface for host (CPU) buffers.
 * Knows data types and ops, nothing else of ringlet. */
#ifndef RINGLET_KERNELS_REDUCE_H
#define RINGLET_KERNELS_REDUCE_H

#include <stddef.h>
#include <stdint.h>
#include "ringlet.h"

/* dst[i] = a[i] op b[i] for i < n. dst may alias a or b (exactly, not partially).
 * RINGLET_AVG reduces as a sum; the caller divides at the end (rl_divide_host).
 * float16 / bfloat16 are computed in float32 and rounded once (round to nearest even).
 * Integer sum/prod wrap modulo 2^bits. min/max of floats: NaN handling follows fmin/fmax. */
void rl_reduce_host(void *dst, const void *a, const void *b, size_t n, ringlet_datatype_t dt, ringlet_op_t op);

/* buf[i] = buf[i] / divisor: the last step of avg. Integers truncate toward zero. */
void rl_divide_host(void *buf, size_t n, ringlet_datatype_t dt, int divisor);

/* IEEE half and bfloat16 conversions (round to nearest even, NaN stays NaN). */
float rl_half_to_float(uint16_t h);
uint16_t rl_float_to_half(float f);
float rl_bf16_to_float(uint16_t b);
uint16_t rl_float_to_bf16(float f);

/* Name of the instruction set the dispatcher picked ("avx512f", "avx2", "default"). */
const char *rl_reduce_host_isa(void);

#endif
