/* The CUDA runtime behind rt.h's table: each entry is the runtime call of the same name
 * (linked statically, so the library loads on a machine with no driver), the launchers of
 * kernels/reduce_cuda.cu, and the driver's stream memory operations, found at run time
 * through cudaGetDriverEntryPointByVersion (no link to libcuda).
 *
 * Pinned memory is cudaHostAlloc'd mapped and portable; on the 64-bit platforms CUDA
 * supports (unified virtual addressing) its host address is also its device address, so
 * kernels and memory operations take it as is. IPC: the legacy cudaIpc handles (one per
 * cudaMalloc allocation; they work between processes on one GPU, which ringlet allows and
 * NCCL refuses). */
#ifdef RINGLET_CUDA

#include <cuda.h>
#include <cuda_runtime_api.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "reduce_cuda.h"
#include "rt.h"

/* cudaStreamGetDevice (the fallback below) is CUDA 12.8's; cudaGetDriverEntryPointByVersion 12.5's. */
#if CUDART_VERSION < 12080
#error "ringlet's CUDA backend needs CUDA 12.8 or newer (make CUDA=0 builds without it)"
#endif

_Static_assert(RL_RT_SUCCESS == (int)cudaSuccess, "codes");
_Static_assert(RL_RT_ERR_INVALID_VALUE == (int)cudaErrorInvalidValue, "codes");
_Static_assert(RL_RT_ERR_MEMORY_ALLOCATION == (int)cudaErrorMemoryAllocation, "codes");
_Static_assert(RL_RT_ERR_INITIALIZATION == (int)cudaErrorInitializationError, "codes");
_Static_assert(RL_RT_ERR_INVALID_DEVICE_POINTER == (int)cudaErrorInvalidDevicePointer, "codes");
_Static_assert(RL_RT_ERR_NO_DEVICE == (int)cudaErrorNoDevice, "codes");
_Static_assert(RL_RT_ERR_INVALID_DEVICE == (int)cudaErrorInvalidDevice, "codes");
_Static_assert(RL_RT_ERR_INVALID_CONTEXT == (int)cudaErrorDeviceUninitialized, "codes");
_Static_assert(RL_RT_ERR_MAP_FAILED == (int)cudaErrorMapBufferObjectFailed, "codes");
_Static_assert(RL_RT_ERR_PEER_UNSUPPORTED == (int)cudaErrorPeerAccessUnsupported, "codes");
_Static_assert(RL_RT_ERR_INVALID_HANDLE == (int)cudaErrorInvalidResourceHandle, "codes");
_Static_assert(RL_RT_ERR_NOT_READY == (int)cudaErrorNotReady, "codes");
_Static_assert(RL_RT_ERR_ILLEGAL_ADDRESS == (int)cudaErrorIllegalAddress, "codes");
_Static_assert(RL_RT_ERR_MISALIGNED_ADDRESS == (int)cudaErrorMisalignedAddress, "codes");
_Static_assert(RL_RT_ERR_LAUNCH_TIMEOUT == (int)cudaErrorLaunchTimeout, "codes");
_Static_assert(RL_RT_ERR_ASSERT == (int)cudaErrorAssert, "codes");
_Static_assert(RL_RT_ERR_HARDWARE_STACK == (int)cudaErrorHardwareStackError, "codes");
_Static_assert(RL_RT_ERR_ILLEGAL_INSTRUCTION == (int)cudaErrorIllegalInstruction, "codes");
_Static_assert(RL_RT_ERR_INVALID_ADDRESS_SPACE == (int)cudaErrorInvalidAddressSpace, "codes");
_Static_assert(RL_RT_ERR_INVALID_PC == (int)cudaErrorInvalidPc, "codes");
_Static_assert(RL_RT_ERR_LAUNCH_FAILURE == (int)cudaErrorLaunchFailure, "codes");
_Static_assert(RL_RT_ERR_NOT_PERMITTED == (int)cudaErrorNotPermitted, "codes");
_Static_assert(RL_RT_ERR_NOT_SUPPORTED == (int)cudaErrorNotSupported, "codes");
_Static_assert(RL_RT_ERR_ILLEGAL_STATE == (int)cudaErrorIllegalState, "codes");
_Static_assert(RL_RT_ERR_CAPTURE_UNSUPPORTED == (int)cudaErrorStreamCaptureUnsupported, "codes");
_Static_assert(RL_RT_ERR_CAPTURE_INVALIDATED == (int)cudaErrorStreamCaptureInvalidated, "codes");
_Static_assert(RL_RT_ERR_CAPTURE_UNMATCHED == (int)cudaErrorStreamCaptureUnmatched, "codes");
_Static_assert(RL_RT_ERR_CAPTURE_UNJOINED == (int)cudaErrorStreamCaptureUnjoined, "codes");
_Static_assert(RL_RT_ERR_CAPTURE_IMPLICIT == (int)cudaErrorStreamCaptureImplicit, "codes");
_Static_assert(RL_RT_ERR_CAPTURED_EVENT == (int)cudaErrorCapturedEvent, "codes");
_Static_assert(RL_RT_ERR_CAPTURE_WRONG_THREAD == (int)cudaErrorStreamCaptureWrongThread, "codes");
_Static_assert(RL_RT_ERR_UNKNOWN == (int)cudaErrorUnknown, "codes");

#define CS(s) ((cudaStream_t)(s))

static int get_device_count(int *n) {
    *n = 0;
    return (int)cudaGetDeviceCount(n);
}
static int set_device(int dev) { return (int)cudaSetDevice(dev); }
static int get_device(int *dev) { return (int)cudaGetDevice(dev); }

/* A driver entry point as CUDA 12.0 defined it (no link to libcuda), or NULL; *why (may be
 * NULL) then says why. */
static void *driver_fn(const char *name, char *why, size_t whylen) {
    void *fn = NULL;
    enum cudaDriverEntryPointQueryResult q = cudaDriverEntryPointSymbolNotFound;
    cudaError_t e = cudaGetDriverEntryPointByVersion(name, &fn, 12000, cudaEnableDefault, &q);
    if (e == cudaSuccess && q == cudaDriverEntryPointSuccess && fn) return fn;
    if (e != cudaSuccess) cudaGetLastError(); /* only what this lookup left there */
    if (why)
        snprintf(why, whylen, "the driver has no %s (%s)", name,
                 e != cudaSuccess ? cudaGetErrorString(e) : "symbol not found");
    return NULL;
}

/* cuDevicePrimaryCtxGetState. Without it a context reads as existing (the caller then
 * restores the device as cudaSetDevice would). */
typedef CUresult (*primary_state_fn)(CUdevice, unsigned int *, int *);
static pthread_once_t g_primary_once = PTHREAD_ONCE_INIT;
static primary_state_fn g_primary_state;

static void find_primary_state(void) {
    g_primary_state = (primary_state_fn)driver_fn("cuDevicePrimaryCtxGetState", NULL, 0);
}

static int primary_ctx_active(int dev, int *active) {
    *active = 1;
    pthread_once(&g_primary_once, find_primary_state);
    unsigned int flags = 0;
    if (g_primary_state && g_primary_state((CUdevice)dev, &flags, active) != CUDA_SUCCESS) *active = 1;
    return RL_RT_SUCCESS;
}

/* The driver calls that answer which device a pointer or a stream is on without the
 * runtime's side effects: cudaPointerGetAttributes on a host pointer makes a primary
 * context on the thread's current device (device 0 on a thread that never chose one:
 * Mooncake#2330), which every host-buffer call of a job would pay for on GPU 0; and
 * cudaStreamGetDevice (cuStreamGetDevice) is refused during stream capture on some drivers
 * (cccl#9119), which would fail, even invalidate, the capture check of every call.
 * cuStreamGetCtx and the context's device are allowed there. Each falls back to the
 * runtime's call where the driver lacks one. */
typedef CUresult (*ptr_attrs_fn)(unsigned int, CUpointer_attribute *, void **, CUdeviceptr);
typedef CUresult (*stream_ctx_fn)(CUstream, CUcontext *);
typedef CUresult (*ctx_push_fn)(CUcontext);
typedef CUresult (*ctx_pop_fn)(CUcontext *);
typedef CUresult (*ctx_device_fn)(CUdevice *);
static pthread_once_t g_where_once = PTHREAD_ONCE_INIT;
static ptr_attrs_fn g_ptr_attrs;
static stream_ctx_fn g_stream_ctx;
static ctx_push_fn g_ctx_push;
static ctx_pop_fn g_ctx_pop;
static ctx_device_fn g_ctx_device;

static void find_where(void) {
    g_ptr_attrs = (ptr_attrs_fn)driver_fn("cuPointerGetAttributes", NULL, 0);
    g_stream_ctx = (stream_ctx_fn)driver_fn("cuStreamGetCtx", NULL, 0);
    g_ctx_push = (ctx_push_fn)driver_fn("cuCtxPushCurrent", NULL, 0);
    g_ctx_pop = (ctx_pop_fn)driver_fn("cuCtxPopCurrent", NULL, 0);
    g_ctx_device = (ctx_device_fn)driver_fn("cuCtxGetDevice", NULL, 0);
}

static int pointer_device(const void *p) {
    pthread_once(&g_where_once, find_where);
    if (g_ptr_attrs) {
        /* Unlike its singular form, it succeeds on memory CUDA does not know (type 0). */
        unsigned int type = 0, managed = 0;
        int ordinal = -1;
        CUpointer_attribute what[3] = {CU_POINTER_ATTRIBUTE_MEMORY_TYPE, CU_POINTER_ATTRIBUTE_IS_MANAGED,
                                       CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL};
        void *into[3] = {&type, &managed, &ordinal};
        if (g_ptr_attrs(3, what, into, (CUdeviceptr)(uintptr_t)p) == CUDA_SUCCESS)
            return type == CU_MEMORYTYPE_DEVICE || managed ? ordinal : -1;
    }
    struct cudaPointerAttributes a;
    if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
        cudaGetLastError(); /* a host pointer CUDA never saw: not an error here */
        return -1;
    }
    return a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged ? a.device : -1;
}

/* Host memory CUDA knows (pinned or registered) and has mapped at the same address for
 * kernels of the current context (UVA: host_alloc's, cudaHostAllocMapped | Portable; a
 * registration without cudaHostRegisterPortable is its own context's). Pageable memory is
 * unknown to CUDA (type 0): a kernel's access to it faults, save on systems with HMM or
 * ATS, where ringlet refuses it all the same. Asked with the kernel's device current. */
static int pointer_host_mapped(const void *p) {
    pthread_once(&g_where_once, find_where);
    if (g_ptr_attrs) {
        unsigned int type = 0;
        void *dptr = NULL;
        CUpointer_attribute what[2] = {CU_POINTER_ATTRIBUTE_MEMORY_TYPE, CU_POINTER_ATTRIBUTE_DEVICE_POINTER};
        void *into[2] = {&type, &dptr};
        if (g_ptr_attrs(2, what, into, (CUdeviceptr)(uintptr_t)p) == CUDA_SUCCESS)
            return type == CU_MEMORYTYPE_HOST && dptr == p;
    }
    struct cudaPointerAttributes a;
    if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
        cudaGetLastError();
        return 0;
    }
    return a.type == cudaMemoryTypeHost && a.devicePointer == p;
}

static int rt_malloc(void **p, size_t bytes) {
    *p = NULL;
    return (int)cudaMalloc(p, bytes);
}
static int rt_free(void *p) { return (int)cudaFree(p); }
static int host_alloc(void **p, size_t bytes) {
    *p = NULL;
    return (int)cudaHostAlloc(p, bytes ? bytes : 1, cudaHostAllocMapped | cudaHostAllocPortable);
}
static int free_host(void *p) { return (int)cudaFreeHost(p); }

/* The handle: cudaIpcMemHandle_t, then the device. */
struct cu_handle {
    cudaIpcMemHandle_t ipc;
    int32_t device;
};
_Static_assert(sizeof(struct cu_handle) <= RL_DEV_HANDLE_BYTES, "device handle too small");

static int ipc_get_handle(rl_dev_handle *h, void *p) {
    struct cu_handle ch;
    memset(&ch, 0, sizeof ch);
    cudaError_t e = cudaIpcGetMemHandle(&ch.ipc, p);
    if (e != cudaSuccess) return (int)e;
    ch.device = pointer_device(p);
    memset(h, 0, sizeof *h);
    memcpy(h->bytes, &ch, sizeof ch);
    return RL_RT_SUCCESS;
}

static int ipc_open(void **p, const rl_dev_handle *h) {
    struct cu_handle ch;
    memcpy(&ch, h->bytes, sizeof ch);
    *p = NULL;
    return (int)cudaIpcOpenMemHandle(p, ch.ipc, cudaIpcMemLazyEnablePeerAccess);
}
static int ipc_close(void *p) { return (int)cudaIpcCloseMemHandle(p); }

static int stream_create(rl_dev_stream_t *s, int blocking) {
    cudaStream_t cs = NULL;
    cudaError_t e = cudaStreamCreateWithFlags(&cs, blocking ? cudaStreamDefault : cudaStreamNonBlocking);
    *s = (rl_dev_stream_t)cs;
    return (int)e;
}
static int stream_destroy(rl_dev_stream_t s) { return (int)cudaStreamDestroy(CS(s)); }
static int stream_synchronize(rl_dev_stream_t s) { return (int)cudaStreamSynchronize(CS(s)); }

static int stream_get_device(rl_dev_stream_t s, int *dev) {
    /* The legacy stream (NULL, or 0x1) and the per-thread one (0x2) are the current device's. */
    if (!s || s == RL_RT_STREAM_LEGACY || s == RL_RT_STREAM_PER_THREAD) return (int)cudaGetDevice(dev);
    pthread_once(&g_where_once, find_where);
    CUcontext ctx = NULL, popped = NULL;
    CUdevice d = 0;
    if (g_stream_ctx && g_ctx_push && g_ctx_pop && g_ctx_device && g_stream_ctx((CUstream)s, &ctx) == CUDA_SUCCESS &&
        ctx && g_ctx_push(ctx) == CUDA_SUCCESS) {
        CUresult r = g_ctx_device(&d);
        g_ctx_pop(&popped);
        if (r == CUDA_SUCCESS) {
            *dev = (int)d; /* a CUdevice is its ordinal (cuDeviceGet's) */
            return RL_RT_SUCCESS;
        }
    }
    return (int)cudaStreamGetDevice(CS(s), dev);
}

static int stream_begin_capture(rl_dev_stream_t s) {
    return (int)cudaStreamBeginCapture(CS(s), cudaStreamCaptureModeGlobal);
}

static int stream_end_capture(rl_dev_stream_t s) {
    cudaGraph_t g = NULL;
    cudaError_t e = cudaStreamEndCapture(CS(s), &g);
    if (g) cudaGraphDestroy(g);
    return (int)e;
}

static int stream_is_capturing(rl_dev_stream_t s, int *yes) {
    enum cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
    cudaError_t e = cudaStreamIsCapturing(CS(s), &st);
    *yes = e == cudaSuccess && st != cudaStreamCaptureStatusNone;
    return (int)e;
}

_Static_assert(RL_RT_CAPTURE_GLOBAL == (int)cudaStreamCaptureModeGlobal &&
                   RL_RT_CAPTURE_THREAD_LOCAL == (int)cudaStreamCaptureModeThreadLocal &&
                   RL_RT_CAPTURE_RELAXED == (int)cudaStreamCaptureModeRelaxed,
               "capture modes");

static int thread_exchange_capture_mode(int *mode) {
    enum cudaStreamCaptureMode m = (enum cudaStreamCaptureMode)*mode;
    cudaError_t e = cudaThreadExchangeStreamCaptureMode(&m);
    *mode = (int)m;
    return (int)e;
}

static int event_create(rl_dev_event_t *e) {
    cudaEvent_t ce = NULL;
    cudaError_t r = cudaEventCreateWithFlags(&ce, cudaEventDisableTiming);
    *e = (rl_dev_event_t)ce;
    return (int)r;
}
static int event_destroy(rl_dev_event_t e) { return (int)cudaEventDestroy((cudaEvent_t)e); }
static int event_record(rl_dev_event_t e, rl_dev_stream_t s) { return (int)cudaEventRecord((cudaEvent_t)e, CS(s)); }
static int event_query(rl_dev_event_t e) { return (int)cudaEventQuery((cudaEvent_t)e); }
static int stream_wait_event(rl_dev_stream_t s, rl_dev_event_t e) {
    return (int)cudaStreamWaitEvent(CS(s), (cudaEvent_t)e, 0);
}
static int memcpy_async(void *dst, const void *src, size_t bytes, rl_dev_stream_t s) {
    return (int)cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, CS(s));
}
static int memset_async(void *dst, int value, size_t bytes, rl_dev_stream_t s) {
    return (int)cudaMemsetAsync(dst, value, bytes, CS(s));
}

/* The code of this thread's latest failure that the runtime did not record as its last
 * error (a driver call, a launcher's refusal), until failure_recorded reads it. */
static _Thread_local int t_unrecorded;
static int unrecorded(int e) {
    if (e) t_unrecorded = e;
    return e;
}
static int failure_recorded(int e) {
    int recorded = t_unrecorded != e;
    t_unrecorded = 0;
    return recorded;
}

/* A launcher's status: its refusal of the arguments (misaligned, unknown type or op)
 * returns invalid value with no CUDA call failed, which left the thread's last error as
 * it was; a failed launch left its own code there. (Where the program's own unread error
 * is invalid value too, the two cannot be told apart: it is taken as the launch's.) */
static int launched(int e) {
    if (e && cudaPeekAtLastError() != (cudaError_t)e) unrecorded(e);
    return e;
}

static int get_last_error(void) { return (int)cudaGetLastError(); }
static int peek_at_last_error(void) { return (int)cudaPeekAtLastError(); }
static const char *error_string(int e) { return cudaGetErrorString((cudaError_t)e); }
static const char *error_detail(void) { return ""; }

static int launch_reduce(void *dst, const void *a, const void *b, size_t n, ringlet_datatype_t dt, ringlet_op_t op,
                         rl_dev_stream_t s) {
    return launched(rl_reduce_device(dst, a, b, n, dt, op, s));
}
static int launch_reduce_many(void *dst, const void *const *srcs, int nsrc, size_t n, ringlet_datatype_t dt,
                              ringlet_op_t op, rl_dev_stream_t s) {
    return launched(rl_reduce_device_many(dst, srcs, nsrc, n, dt, op, s));
}
static int launch_scale(void *dst, const void *src, size_t n, ringlet_datatype_t dt, const void *scalar,
                        rl_dev_stream_t s) {
    return launched(rl_scale_device(dst, src, n, dt, scalar, s));
}
static int launch_convert(void *dst, ringlet_datatype_t dt, const void *src, ringlet_datatype_t st, size_t n,
                          double scale, rl_dev_stream_t s) {
    return launched(rl_convert_device(dst, dt, src, st, n, scale, s));
}
static int launch_divide(void *buf, size_t n, ringlet_datatype_t dt, int divisor, rl_dev_stream_t s) {
    return launched(rl_divide_device(buf, n, dt, divisor, s));
}
static int launch_wait_flag(volatile uint64_t *flag, uint64_t value, rl_dev_stream_t s) {
    return launched(rl_stream_wait_flag(flag, value, s));
}
static int launch_write_flag(volatile uint64_t *flag, uint64_t value, rl_dev_stream_t s) {
    return launched(rl_stream_write_flag(flag, value, s));
}

/* ---- stream memory operations, from the driver ---- */

typedef CUresult (*wait_value64_fn)(CUstream, CUdeviceptr, cuuint64_t, unsigned int);
typedef CUresult (*write_value64_fn)(CUstream, CUdeviceptr, cuuint64_t, unsigned int);
typedef CUresult (*device_attribute_fn)(int *, CUdevice_attribute, CUdevice);

static pthread_once_t g_memops_once = PTHREAD_ONCE_INIT;
static wait_value64_fn g_wait64;
static write_value64_fn g_write64;
static device_attribute_fn g_attribute;
static char g_memops_why[160];

/* The memory operations' entry points (the v2 ones, CUDA 12.0's default); the first missing
 * one is named in g_memops_why. */
static void *entry_point(const char *name) {
    return driver_fn(name, g_memops_why[0] ? NULL : g_memops_why, sizeof g_memops_why);
}

static void find_memops(void) {
    g_wait64 = (wait_value64_fn)entry_point("cuStreamWaitValue64");
    g_write64 = (write_value64_fn)entry_point("cuStreamWriteValue64");
    g_attribute = (device_attribute_fn)entry_point("cuDeviceGetAttribute");
}

static int memops_supported(int dev, int *yes, char *why, size_t whylen) {
    *yes = 0;
    pthread_once(&g_memops_once, find_memops);
    if (!g_wait64 || !g_write64 || !g_attribute) {
        snprintf(why, whylen, "%s", g_memops_why);
        return RL_RT_SUCCESS;
    }
    int v = 0;
    CUresult r = g_attribute(&v, CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS, (CUdevice)dev);
    if (r != CUDA_SUCCESS) snprintf(why, whylen, "cuDeviceGetAttribute failed (CUresult %d)", (int)r);
    else if (!v) snprintf(why, whylen, "device %d has no 64-bit stream memory operations", dev);
    *yes = r == CUDA_SUCCESS && v;
    return RL_RT_SUCCESS;
}

/* A driver call's status: CUresult shares its numbers with cudaError_t (1 invalid value, 3
 * not initialised, 201 invalid context, 400 invalid handle, 700 illegal address, 801 not
 * supported, ...), so it is kept as it is; the driver never sets the runtime's last error. */
static int from_driver(CUresult r) { return unrecorded((int)r); }

static int stream_wait_value64(rl_dev_stream_t s, volatile uint64_t *addr, uint64_t value) {
    pthread_once(&g_memops_once, find_memops);
    if (!g_wait64) return unrecorded(RL_RT_ERR_NOT_SUPPORTED);
    return from_driver(g_wait64((CUstream)s, (CUdeviceptr)(uintptr_t)addr, value, CU_STREAM_WAIT_VALUE_GEQ));
}

static int stream_write_value64(rl_dev_stream_t s, volatile uint64_t *addr, uint64_t value) {
    pthread_once(&g_memops_once, find_memops);
    if (!g_write64) return unrecorded(RL_RT_ERR_NOT_SUPPORTED);
    return from_driver(g_write64((CUstream)s, (CUdeviceptr)(uintptr_t)addr, value, CU_STREAM_WRITE_VALUE_DEFAULT));
}

const rl_rt rl_rt_cuda = {
    .name = "cuda",
    .get_device_count = get_device_count,
    .set_device = set_device,
    .get_device = get_device,
    .primary_ctx_active = primary_ctx_active,
    .pointer_device = pointer_device,
    .pointer_host_mapped = pointer_host_mapped,
    .malloc = rt_malloc,
    .free = rt_free,
    .host_alloc = host_alloc,
    .free_host = free_host,
    .ipc_get_handle = ipc_get_handle,
    .ipc_open = ipc_open,
    .ipc_close = ipc_close,
    .stream_create = stream_create,
    .stream_destroy = stream_destroy,
    .stream_synchronize = stream_synchronize,
    .stream_get_device = stream_get_device,
    .stream_begin_capture = stream_begin_capture,
    .stream_end_capture = stream_end_capture,
    .stream_is_capturing = stream_is_capturing,
    .thread_exchange_capture_mode = thread_exchange_capture_mode,
    .event_create = event_create,
    .event_destroy = event_destroy,
    .event_record = event_record,
    .event_query = event_query,
    .stream_wait_event = stream_wait_event,
    .memcpy_async = memcpy_async,
    .memset_async = memset_async,
    .get_last_error = get_last_error,
    .peek_at_last_error = peek_at_last_error,
    .error_string = error_string,
    .error_detail = error_detail,
    .failure_recorded = failure_recorded,
    .load_kernels = rl_cuda_load_kernels,
    .launch_reduce = launch_reduce,
    .launch_reduce_many = launch_reduce_many,
    .launch_scale = launch_scale,
    .launch_convert = launch_convert,
    .launch_divide = launch_divide,
    .launch_wait_flag = launch_wait_flag,
    .launch_write_flag = launch_write_flag,
    .memops_supported = memops_supported,
    .stream_wait_value64 = stream_wait_value64,
    .stream_write_value64 = stream_write_value64,
};

#else
/* A build without CUDA has no CUDA runtime (device.c then offers sim and none). */
typedef int rl_no_cuda_runtime;
#endif
