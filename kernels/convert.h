/* Conversions between floating types, with a scaling: dst[i] = (dst type)(src[i] * scale).
 * The types are float16, bfloat16, float32 and float64. From float64 the product is taken
 * in float64 (then rounded once to a narrower type: to float16 and bfloat16 through a
 * float rounded to odd, which rounds as a direct conversion would); from the other
 * types in float32, times (float)scale. Rounding is to nearest even; float16/bfloat16 to
 * float32 or float64 with scale 1 is exact. dst may equal src when the types are the
 * same size. Host memory: kernels/convert_cpu.c; device memory: rl_convert_device
 * (reduce_cuda.h), which computes the same. */
#ifndef RINGLET_KERNELS_CONVERT_H
#define RINGLET_KERNELS_CONVERT_H

#include <stddef.h>

#include "ringlet.h"

int rl_convert_supported(ringlet_datatype_t t); /* 1 for the four floating types */
void rl_convert_host(void *dst, ringlet_datatype_t dst_type, const void *src, ringlet_datatype_t src_type, size_t n,
                     double scale);

#endif
