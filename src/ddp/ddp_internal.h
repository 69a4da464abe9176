/* Internal to the DDP layer (src/ddp): single values on host memory.
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

/* Writes the value v (small integer) as one element of dtype (floating or integer). */
RL_DDP_HIDDEN void rl_ddp_store_value(void *dst, ringlet_datatype_t dtype, double v);
/* Reads one element of dtype as a double. */
RL_DDP_HIDDEN double rl_ddp_load_value(const void *src, ringlet_datatype_t dtype);

#endif
