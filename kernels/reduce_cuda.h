/* Reduction kernels for device (CUDA) buffers: the same contract as reduce.h.
 * C interface, no CUDA types: a stream is a cudaStream_t passed as void *.
 * Every function enqueues on the stream and returns at once: 0, or the cudaError_t
 * of its own launch (cudaLaunchKernel's status: never an error an earlier call left on
 * the thread). Built only when RINGLET_CUDA is defined (nvcc found). */
#ifndef RINGLET_KERNELS_REDUCE_CUDA_H
#define RINGLET_KERNELS_REDUCE_CUDA_H

#include <stddef.h>
#include <stdint.h>

#include "ringlet.h"

#ifdef __cplusplus
extern "C" {
#endif

/* dst[i] = a[i] op b[i] for i < n, device pointers; dst may alias a or b exactly.
 * RINGLET_AVG reduces as a sum. float16/bfloat16 compute in float32, round once. */
int rl_reduce_device(void *dst, const void *a, const void *b, size_t n, ringlet_datatype_t dt, ringlet_op_t op,
                     void *stream);
/* dst[i] = srcs[0][i] op ... op srcs[nsrc-1][i] (1 <= nsrc <= 64), one launch, rounded as
 * nsrc - 1 calls of rl_reduce_device round; dst may be any source. */
int rl_reduce_device_many(void *dst, const void *const *srcs, int nsrc, size_t n, ringlet_datatype_t dt,
                          ringlet_op_t op, void *stream);
/* dst[i] = src[i] * scalar (one element of dt, given by the host), rl_scale_host's
 * semantics. dst may be src. */
int rl_scale_device(void *dst, const void *src, size_t n, ringlet_datatype_t dt, const void *scalar, void *stream);
/* dst[i] = (dt)(src[i] * scale) between the floating types, kernels/convert.h's
 * semantics (rl_convert_host). */
int rl_convert_device(void *dst, ringlet_datatype_t dt, const void *src, ringlet_datatype_t st, size_t n, double scale,
                      void *stream);
/* buf[i] /= divisor (avg's last step); integers truncate toward zero. */
int rl_divide_device(void *buf, size_t n, ringlet_datatype_t dt, int divisor, void *stream);
/* Makes the stream wait until *flag >= value, where flag is host-mapped pinned memory
 * (cudaHostAlloc(..., cudaHostAllocMapped)) seen through its device pointer; the host
 * sets it when an operation the stream depends on is done. */
int rl_stream_wait_flag(volatile const uint64_t *flag, uint64_t value, void *stream);
/* Stores value into *flag (pinned or device memory, also a peer's mapped memory) once
 * the stream's earlier work is done and visible. */
int rl_stream_write_flag(volatile uint64_t *flag, uint64_t value, void *stream);

/* Loads every kernel the functions above can launch into the current device's context
 * (cudaFuncGetAttributes on each): under lazy loading (CUDA_MODULE_LOADING=LAZY, CUDA
 * 12.2's default) a kernel's first launch loads it, which can wait for the whole device,
 * and so never ends while a stream is held. 0 or the cudaError_t. */
int rl_cuda_load_kernels(void);
/* convert_cuda.cu's part of it (rl_cuda_load_kernels calls it). */
int rl_cuda_load_convert_kernels(void);

/* For tests: every launcher above uses at most this many blocks (0, the default: each its
 * own limit, as many as fill the device for the reductions, 4096 for conversions), so
 * that a small size takes the paths a large one takes on a full grid (the grid-stride
 * steps, the second unrolled group of a thread). Process-wide. */
void rl_cuda_test_grid_cap(unsigned blocks);

#ifdef __cplusplus
}
#endif
#endif
