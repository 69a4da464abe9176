/* Internal to the DDP layer (src/ddp): element-wise kernels on host memory.
 * The DDP layer uses only the public include/ringlet.h of the core. */
#ifndef RINGLET_DDP_INTERNAL_H
#define RINGLET_DDP_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "ringlet.h"

#if defined(__GNUC__) || defined(__clang__)
#define RL_DDP_HIDDEN __attribute__((visibility("hidden")))
#else
#define RL_DDP_HIDDEN
#endif

/* dst (wire dtype float16 or bfloat16) = src (float32 or float64) * scale, rounded to
 * nearest even. */
RL_DDP_HIDDEN void rl_ddp_compress(void *dst, ringlet_datatype_t wire, const void *src, ringlet_datatype_t dtype,
                                   size_t n, double scale);
/* dst (float32 or float64) = src (float16 or bfloat16), exact. */
RL_DDP_HIDDEN void rl_ddp_decompress(void *dst, ringlet_datatype_t dtype, const void *src, ringlet_datatype_t wire,
                                     size_t n);

/* Writes the value v (small integer) as one element of dtype (floating or integer). */
RL_DDP_HIDDEN void rl_ddp_store_value(void *dst, ringlet_datatype_t dtype, double v);
/* Reads one element of dtype as a double. */
RL_DDP_HIDDEN double rl_ddp_load_value(const void *src, ringlet_datatype_t dtype);

/* Scalar conversions (round to nearest even), exposed for the tests of the layer. */
RL_DDP_HIDDEN uint16_t rl_ddp_f32_to_f16(float f);
RL_DDP_HIDDEN float rl_ddp_f16_to_f32(uint16_t h);
RL_DDP_HIDDEN uint16_t rl_ddp_f32_to_bf16(float f);
RL_DDP_HIDDEN float rl_ddp_bf16_to_f32(uint16_t h);

#endif
