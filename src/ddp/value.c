/* Single values of the DDP layer on host memory: the error flag each rank writes into its
 * last bucket, and its read-back. float16/bfloat16 go through ringlet_convert_async (on
 * host memory it converts at once), as the bucket compression does. */
#include <math.h>
#include <string.h>

#include "ddp_internal.h"

void rl_ddp_store_value(void *dst, ringlet_datatype_t dtype, double v) {
    switch (dtype) {
    case RINGLET_INT8: { int8_t x = (int8_t)v; memcpy(dst, &x, 1); break; }
    case RINGLET_UINT8: { uint8_t x = (uint8_t)v; memcpy(dst, &x, 1); break; }
    case RINGLET_INT32: { int32_t x = (int32_t)v; memcpy(dst, &x, 4); break; }
    case RINGLET_UINT32: { uint32_t x = (uint32_t)v; memcpy(dst, &x, 4); break; }
    case RINGLET_INT64: { int64_t x = (int64_t)v; memcpy(dst, &x, 8); break; }
    case RINGLET_UINT64: { uint64_t x = (uint64_t)v; memcpy(dst, &x, 8); break; }
    case RINGLET_FLOAT16:
    case RINGLET_BFLOAT16: { float x = (float)v; ringlet_convert_async(dst, dtype, &x, RINGLET_FLOAT32, 1, 1.0, NULL); break; }
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
    case RINGLET_FLOAT16:
    case RINGLET_BFLOAT16: { float x = NAN; ringlet_convert_async(&x, RINGLET_FLOAT32, src, dtype, 1, 1.0, NULL); return x; }
    case RINGLET_FLOAT32: { float x; memcpy(&x, src, 4); return x; }
    case RINGLET_FLOAT64: { double x; memcpy(&x, src, 8); return x; }
    default: return NAN;
    }
}
