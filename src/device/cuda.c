/* The device layer's CUDA backend: the CUDA runtime (linked statically, so the library
 * loads on a machine without a driver) and the kernels of kernels/reduce_cuda.cu.
 *
 * Pinned memory is cudaHostAlloc'd mapped and portable; on the 64-bit platforms CUDA
 * supports (unified virtual addressing) its host address is also its device address,
 * so kernels and flag waits take it as is. IPC: the legacy cudaIpc handles (one per
 * cudaMalloc allocation; they work between processes on one GPU, which ringlet allows
 * and NCCL refuses). */
#ifdef RINGLET_CUDA

#include <cuda_runtime_api.h>
#include <string.h>

#include "device.h"
#include "reduce_cuda.h"

static int fail(const char *what, cudaError_t e) {
    cudaGetLastError(); /* clear a non-sticky error, so that the next call does not report it */
    return rl_dev_fail("%s: %s", what, cudaGetErrorString(e));
}

#define CHECK(what, call)                                                                                              \
    do {                                                                                                               \
        cudaError_t e_ = (call);                                                                                       \
        if (e_ != cudaSuccess) return fail(what, e_);                                                                  \
    } while (0)

static int cu_count(int *n) {
    *n = 0;
    CHECK("cudaGetDeviceCount", cudaGetDeviceCount(n));
    return RL_DEV_OK;
}

static int cu_set_device(int dev) {
    CHECK("cudaSetDevice", cudaSetDevice(dev));
    return RL_DEV_OK;
}

static int cu_get_device(int *dev) {
    CHECK("cudaGetDevice", cudaGetDevice(dev));
    return RL_DEV_OK;
}

static int cu_ptr_device(const void *p) {
    struct cudaPointerAttributes a;
    if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
        cudaGetLastError();
        return -1;
    }
    return a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged ? a.device : -1;
}

static int cu_mem_alloc(void **p, size_t bytes) {
    *p = NULL;
    CHECK("cudaMalloc", cudaMalloc(p, bytes));
    return RL_DEV_OK;
}

static int cu_mem_free(void *p) {
    CHECK("cudaFree", cudaFree(p));
    return RL_DEV_OK;
}

static int cu_host_alloc(void **p, size_t bytes) {
    *p = NULL;
    CHECK("cudaHostAlloc", cudaHostAlloc(p, bytes ? bytes : 1, cudaHostAllocMapped | cudaHostAllocPortable));
    return RL_DEV_OK;
}

static int cu_host_free(void *p) {
    CHECK("cudaFreeHost", cudaFreeHost(p));
    return RL_DEV_OK;
}

/* The handle: cudaIpcMemHandle_t, then the device. */
struct cu_handle {
    cudaIpcMemHandle_t ipc;
    int32_t device;
};
_Static_assert(sizeof(struct cu_handle) <= RL_DEV_HANDLE_BYTES, "device handle too small");

static int cu_mem_export(void *p, rl_dev_handle *h) {
    struct cu_handle ch;
    memset(&ch, 0, sizeof ch);
    CHECK("cudaIpcGetMemHandle", cudaIpcGetMemHandle(&ch.ipc, p));
    ch.device = cu_ptr_device(p);
    memset(h, 0, sizeof *h);
    memcpy(h->bytes, &ch, sizeof ch);
    return RL_DEV_OK;
}

static int cu_mem_import(const rl_dev_handle *h, void **p) {
    struct cu_handle ch;
    memcpy(&ch, h->bytes, sizeof ch);
    *p = NULL;
    CHECK("cudaIpcOpenMemHandle", cudaIpcOpenMemHandle(p, ch.ipc, cudaIpcMemLazyEnablePeerAccess));
    return RL_DEV_OK;
}

static int cu_mem_unimport(void *p) {
    CHECK("cudaIpcCloseMemHandle", cudaIpcCloseMemHandle(p));
    return RL_DEV_OK;
}

static int cu_stream_create(rl_dev_stream_t *s) {
    cudaStream_t cs;
    /* Never blocking on the legacy default stream, which would wait for the user's
     * streams while this library holds them. */
    CHECK("cudaStreamCreateWithFlags", cudaStreamCreateWithFlags(&cs, cudaStreamNonBlocking));
    *s = (rl_dev_stream_t)cs;
    return RL_DEV_OK;
}

static int cu_stream_destroy(rl_dev_stream_t s) {
    CHECK("cudaStreamDestroy", cudaStreamDestroy((cudaStream_t)s));
    return RL_DEV_OK;
}

static int cu_stream_sync(rl_dev_stream_t s) {
    CHECK("cudaStreamSynchronize", cudaStreamSynchronize((cudaStream_t)s));
    return RL_DEV_OK;
}

static int cu_event_create(rl_dev_event_t *e) {
    cudaEvent_t ce;
    CHECK("cudaEventCreateWithFlags", cudaEventCreateWithFlags(&ce, cudaEventDisableTiming));
    *e = (rl_dev_event_t)ce;
    return RL_DEV_OK;
}

static int cu_event_destroy(rl_dev_event_t e) {
    CHECK("cudaEventDestroy", cudaEventDestroy((cudaEvent_t)e));
    return RL_DEV_OK;
}

static int cu_event_record(rl_dev_event_t e, rl_dev_stream_t s) {
    CHECK("cudaEventRecord", cudaEventRecord((cudaEvent_t)e, (cudaStream_t)s));
    return RL_DEV_OK;
}

static int cu_event_query(rl_dev_event_t e) {
    cudaError_t r = cudaEventQuery((cudaEvent_t)e);
    if (r == cudaErrorNotReady) return RL_DEV_NOT_READY;
    if (r != cudaSuccess) return fail("cudaEventQuery", r);
    return RL_DEV_OK;
}

static int cu_stream_wait_event(rl_dev_stream_t s, rl_dev_event_t e) {
    CHECK("cudaStreamWaitEvent", cudaStreamWaitEvent((cudaStream_t)s, (cudaEvent_t)e, 0));
    return RL_DEV_OK;
}

static int cu_memcpy_async(void *dst, const void *src, size_t bytes, rl_dev_stream_t s) {
    CHECK("cudaMemcpyAsync", cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, (cudaStream_t)s));
    return RL_DEV_OK;
}

static int cu_memset_async(void *dst, int value, size_t bytes, rl_dev_stream_t s) {
    CHECK("cudaMemsetAsync", cudaMemsetAsync(dst, value, bytes, (cudaStream_t)s));
    return RL_DEV_OK;
}

static int cu_reduce(void *dst, const void *a, const void *b, size_t n, ringlet_datatype_t dt, ringlet_op_t op,
                     rl_dev_stream_t s) {
    CHECK("reduction kernel", (cudaError_t)rl_reduce_device(dst, a, b, n, dt, op, s));
    return RL_DEV_OK;
}

static int cu_reduce_many(void *dst, const void *const *srcs, int nsrc, size_t n, ringlet_datatype_t dt,
                          ringlet_op_t op, rl_dev_stream_t s) {
    CHECK("reduction kernel (many sources)", (cudaError_t)rl_reduce_device_many(dst, srcs, nsrc, n, dt, op, s));
    return RL_DEV_OK;
}

static int cu_scale(void *dst, const void *src, size_t n, ringlet_datatype_t dt, const void *scalar, rl_dev_stream_t s) {
    CHECK("scaling kernel", (cudaError_t)rl_scale_device(dst, src, n, dt, scalar, s));
    return RL_DEV_OK;
}

static int cu_convert(void *dst, ringlet_datatype_t dt, const void *src, ringlet_datatype_t st, size_t n, double scale,
                      rl_dev_stream_t s) {
    CHECK("conversion kernel", (cudaError_t)rl_convert_device(dst, dt, src, st, n, scale, s));
    return RL_DEV_OK;
}

static int cu_divide(void *buf, size_t n, ringlet_datatype_t dt, int divisor, rl_dev_stream_t s) {
    CHECK("division kernel", (cudaError_t)rl_divide_device(buf, n, dt, divisor, s));
    return RL_DEV_OK;
}

static int cu_wait_flag(volatile uint64_t *flag, uint64_t value, rl_dev_stream_t s) {
    CHECK("flag wait kernel", (cudaError_t)rl_stream_wait_flag(flag, value, s));
    return RL_DEV_OK;
}

static int cu_write_flag(volatile uint64_t *flag, uint64_t value, rl_dev_stream_t s) {
    CHECK("flag write kernel", (cudaError_t)rl_stream_write_flag(flag, value, s));
    return RL_DEV_OK;
}

const rl_device_ops rl_device_cuda = {
    .name = "cuda",
    .count = cu_count,
    .set_device = cu_set_device,
    .get_device = cu_get_device,
    .ptr_device = cu_ptr_device,
    .mem_alloc = cu_mem_alloc,
    .mem_free = cu_mem_free,
    .host_alloc = cu_host_alloc,
    .host_free = cu_host_free,
    .mem_export = cu_mem_export,
    .mem_import = cu_mem_import,
    .mem_unimport = cu_mem_unimport,
    .stream_create = cu_stream_create,
    .stream_destroy = cu_stream_destroy,
    .stream_sync = cu_stream_sync,
    .event_create = cu_event_create,
    .event_destroy = cu_event_destroy,
    .event_record = cu_event_record,
    .event_query = cu_event_query,
    .stream_wait_event = cu_stream_wait_event,
    .memcpy_async = cu_memcpy_async,
    .memset_async = cu_memset_async,
    .reduce = cu_reduce,
    .divide = cu_divide,
    .scale = cu_scale,
    .convert = cu_convert,
    .reduce_many = cu_reduce_many,
    .wait_flag = cu_wait_flag,
    .write_flag = cu_write_flag,
};

#else
/* A build without CUDA has no cuda backend (device.c then offers sim and none). */
typedef int rl_no_cuda_backend;
#endif
