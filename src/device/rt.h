/* The CUDA runtime as the device layer uses it: one table of the runtime calls, with
 * CUDA's meaning, and two implementations of it.
 *
 *   rl_rt_cuda  the CUDA runtime itself (rt_cuda.c) and the launchers of
 *               kernels/reduce_cuda.cu
 *   rl_rt_sim   the simulated GPU (simgpu_*.c), which holds CUDA's rules as strictly as
 *               CUDA does (below)
 *
 * The backend logic (backend_ops.inc) is written once against this table and compiled
 * over each of them, so the code that runs on a GPU is the code CI tests over the
 * simulator, kernels' arithmetic aside.
 *
 * Every call returns an error code with CUDA's value (rl_rt_err below), and a call that
 * fails leaves its code as the calling thread's last error, not ready included (an event
 * query that finds the event pending), except the driver's calls (memops_supported and
 * the stream memory operations: the driver never touches the runtime's last error) and a
 * launcher's refusal of its arguments before any CUDA call (the CUDA backend's kernels/
 * *.cu): there the thread's last error stays what it was, perhaps an error of the
 * program's own that it has not read yet, and failure_recorded says so. get_last_error
 * returns it and clears it,
 * peek_at_last_error only returns it. A sticky error (a kernel that faulted) is returned
 * by every later call and never cleared. The launch_* entries have cudaLaunchKernel's
 * contract: they return their own launch's status, whatever error the thread held before.
 *
 * Rules the simulator holds, each as CUDA does (or stricter where CUDA may either wait or
 * not; see ../../shared/DESIGN.md):
 *   - calls that can synchronise the device (malloc, free, host_alloc, free_host,
 *     ipc_open) wait for every stream; one that would wait for a stream held by a flag
 *     wait (wait_flag launch, stream_wait_value64) fails with RL_RT_ERR_SIM_DEADLOCK,
 *     naming the call, where a GPU would hang (with RINGLET_SIM_ON_DEADLOCK=exit, the
 *     suite's default, the process ends there instead). ipc_close may synchronise and is not said
 *     to wait: it fails where a held stream would hang it, waits for nothing, and stops
 *     the process where queued or running work still uses the memory it unmaps;
 *   - malloc does not clear the memory (the simulator fills it with 0xFF bytes);
 *   - a device's streams share CUDA_DEVICE_MAX_CONNECTIONS hardware queues (8 unset), and
 *     an unmet wait blocks what other streams of its queue queued after it;
 *   - stream_destroy returns at once; the work queued on the stream still runs (and a
 *     synchronisation of the device waits for it), so what that work uses must stay;
 *     the handle itself is invalid at once (a call that names it fails);
 *   - a kernel's first launch in the process loads it (CUDA_MODULE_LOADING=LAZY, the
 *     default): that waits for the device to be idle, as above; load_kernels loads them
 *     all at once;
 *   - a child forked after the process's first CUDA call (the driver's initialisation:
 *     get_device_count too, without any context) cannot use CUDA: every call fails
 *     (RL_RT_ERR_INITIALIZATION);
 *   - the current device is per thread; streams and events belong to the device current
 *     when they were made; recording an event on a stream of another device, or
 *     launching a kernel on a stream of a device that is not current, fails; a call that
 *     names a stream, an event or memory makes a context on the thread's current device
 *     (primary_ctx_active says so), whatever device the object is on, except
 *     stream_get_device and pointer_device, which ringlet asks before it selects a device
 *     (rl_rt_cuda answers both through the driver, cuStreamGetCtx and
 *     cuPointerGetAttributes, which make no context: the runtime's own calls would, on a
 *     host pointer at least; stream_get_device is also allowed on a capturing stream,
 *     where cuStreamGetDevice is refused: stream.sh's capture case, in the GPU suite's
 *     stream-p2; the context a host pointer would make needs two GPUs to see);
 *   - ipc_open maps the memory into the context of the device current at the call; a
 *     kernel on another device may not touch that mapping (an illegal address), and each
 *     context counts its own opens; memory of another device needs peer access between
 *     the two (opened with lazy peer access; RINGLET_SIM_PEER=0: none, as GPUs on PCIe
 *     without P2P, and the open fails with RL_RT_ERR_PEER_UNSUPPORTED); ipc_close is
 *     refused (RL_RT_ERR_INVALID_CONTEXT) unless the device that opened the mapping is
 *     current (stricter than CUDA says: it documents only that a context must be
 *     current; the mapping is that context's);
 *   - copies into pageable host memory, and host-to-host ones, return once done
 *     (synchronous with respect to their stream); one from pageable memory to the device
 *     takes the bytes at the call and returns at once, the copy itself in stream order
 *     (CUDA "might" return early or wait for the stream: the simulator returns early,
 *     and refuses a pageable copy on a capturing stream);
 *   - the legacy default stream (NULL or RL_RT_STREAM_LEGACY) waits for the work of every
 *     blocking stream of its device, and they wait for its;
 *   - stream capture (global mode): a stream being captured runs nothing of what is
 *     enqueued on it (it goes into a graph); an event recorded there is a node of the
 *     capture, and a stream that waits for it joins the capture. Synchronising a
 *     capturing stream fails (capture unsupported), querying such an event fails
 *     (captured event), and both invalidate the capture; so does a call CUDA counts as
 *     potentially unsafe (a query, a synchronisation, a call that can synchronise the
 *     device) while a capture forbids it by the calling thread's capture mode: in global
 *     mode (a thread's default) any capture, another thread's too; in thread-local mode
 *     the thread's own; in relaxed mode none;
 *     work on the legacy stream, or asking it whether it captures, while a blocking stream
 *     of its device captures fails (capture implicit; the work also invalidates it). The capture's end fails when it was invalidated, or
 *     (stricter than CUDA, which allows a rejoin) when another stream joined it.
 */
#ifndef RINGLET_DEVICE_RT_H
#define RINGLET_DEVICE_RT_H

#include <stddef.h>
#include <stdint.h>

#include "device.h"

#ifdef __cplusplus
extern "C" {
#endif

/* CUDA's error codes (driver_types.h; rt_cuda.c checks that they agree), and one of the
 * simulator's own. */
enum rl_rt_err {
    RL_RT_SUCCESS = 0,
    RL_RT_ERR_INVALID_VALUE = 1,
    RL_RT_ERR_MEMORY_ALLOCATION = 2,
    RL_RT_ERR_INITIALIZATION = 3, /* cudaErrorInitializationError */
    RL_RT_ERR_INVALID_DEVICE_POINTER = 17,
    RL_RT_ERR_NO_DEVICE = 100,
    RL_RT_ERR_INVALID_DEVICE = 101,
    RL_RT_ERR_INVALID_CONTEXT = 201, /* cudaErrorDeviceUninitialized: "invalid device context" */
    RL_RT_ERR_MAP_FAILED = 205,
    RL_RT_ERR_PEER_UNSUPPORTED = 217, /* cudaErrorPeerAccessUnsupported */
    RL_RT_ERR_INVALID_HANDLE = 400,
    RL_RT_ERR_ILLEGAL_STATE = 401,
    RL_RT_ERR_NOT_READY = 600,
    RL_RT_ERR_ILLEGAL_ADDRESS = 700,
    RL_RT_ERR_LAUNCH_TIMEOUT = 702,
    RL_RT_ERR_ASSERT = 710,
    RL_RT_ERR_HARDWARE_STACK = 714,
    RL_RT_ERR_ILLEGAL_INSTRUCTION = 715,
    RL_RT_ERR_MISALIGNED_ADDRESS = 716,
    RL_RT_ERR_INVALID_ADDRESS_SPACE = 717,
    RL_RT_ERR_INVALID_PC = 718,
    RL_RT_ERR_LAUNCH_FAILURE = 719, /* 702 to 719: sticky ones (backend_ops.inc, fail), as 700 and 716 */
    RL_RT_ERR_NOT_PERMITTED = 800,
    RL_RT_ERR_NOT_SUPPORTED = 801,
    RL_RT_ERR_CAPTURE_UNSUPPORTED = 900, /* cudaErrorStreamCaptureUnsupported */
    RL_RT_ERR_CAPTURE_INVALIDATED = 901,
    RL_RT_ERR_CAPTURE_UNMATCHED = 903,
    RL_RT_ERR_CAPTURE_UNJOINED = 904,
    RL_RT_ERR_CAPTURE_IMPLICIT = 906,
    RL_RT_ERR_CAPTURED_EVENT = 907, /* cudaErrorCapturedEvent: the event's last record was a capture's node */
    RL_RT_ERR_CAPTURE_WRONG_THREAD = 908, /* cudaErrorStreamCaptureWrongThread: ended by another thread */
    RL_RT_ERR_UNKNOWN = 999,
    /* The simulator refused a call that would never return on a GPU. */
    RL_RT_ERR_SIM_DEADLOCK = 10001,
};

/* cudaStreamLegacy: the legacy default stream, as RINGLET_STREAM_DEFAULT is. */
#define RL_RT_STREAM_LEGACY ((rl_dev_stream_t)1)
/* cudaStreamPerThread: the calling thread's own default stream on its current device (a
 * blocking one: it and the legacy stream wait for each other), another stream in every
 * thread that names it. */
#define RL_RT_STREAM_PER_THREAD ((rl_dev_stream_t)2)

/* CUDA's stream capture modes (cudaStreamCaptureMode; rt_cuda.c checks them). */
enum rl_rt_capture_mode { RL_RT_CAPTURE_GLOBAL = 0, RL_RT_CAPTURE_THREAD_LOCAL = 1, RL_RT_CAPTURE_RELAXED = 2 };

typedef struct rl_rt {
    const char *name; /* "cuda", "sim" */

    int (*get_device_count)(int *n);
    /* cudaSetDevice makes the device's primary context (CUDA 12: at once); cudaGetDevice
     * does not, and on a thread that never chose a device it says 0. */
    int (*set_device)(int dev);
    int (*get_device)(int *dev);
    /* Whether the device's primary context exists in this process
     * (cuDevicePrimaryCtxGetState): a context costs GPU memory, so code that only passes
     * through a device must not make one on another. */
    int (*primary_ctx_active)(int dev, int *active);
    /* The device of p's memory (device memory, also a peer's mapped), or -1 for host
     * memory, pinned or not; never fails. */
    int (*pointer_device)(const void *p);
    /* Whether p is host memory that kernels reach at the same address (pinned and mapped:
     * host_alloc's); 0 for pageable host memory and for device memory; never fails. */
    int (*pointer_host_mapped)(const void *p);

    int (*malloc)(void **p, size_t bytes);
    int (*free)(void *p);
    int (*host_alloc)(void **p, size_t bytes); /* mapped and portable */
    int (*free_host)(void *p);
    int (*ipc_get_handle)(rl_dev_handle *h, void *p);
    int (*ipc_open)(void **p, const rl_dev_handle *h);
    int (*ipc_close)(void *p);

    /* blocking: waits for the legacy default stream, and it for this (cudaStreamDefault);
     * else cudaStreamNonBlocking. */
    int (*stream_create)(rl_dev_stream_t *s, int blocking);
    int (*stream_destroy)(rl_dev_stream_t s);
    int (*stream_synchronize)(rl_dev_stream_t s);
    int (*stream_get_device)(rl_dev_stream_t s, int *dev);
    /* cudaStreamBeginCapture (global mode); cudaStreamEndCapture, the graph made
     * destroyed at once; cudaStreamIsCapturing: yes while active or invalidated. */
    int (*stream_begin_capture)(rl_dev_stream_t s);
    int (*stream_end_capture)(rl_dev_stream_t s);
    int (*stream_is_capturing)(rl_dev_stream_t s, int *yes);
    /* cudaThreadExchangeStreamCaptureMode: the calling thread's mode (rl_rt_capture_mode)
     * becomes *mode, and *mode the one it had. */
    int (*thread_exchange_capture_mode)(int *mode);
    int (*event_create)(rl_dev_event_t *e); /* timing disabled */
    int (*event_destroy)(rl_dev_event_t e);
    int (*event_record)(rl_dev_event_t e, rl_dev_stream_t s);
    int (*event_query)(rl_dev_event_t e); /* RL_RT_SUCCESS, RL_RT_ERR_NOT_READY, or an error */
    int (*stream_wait_event)(rl_dev_stream_t s, rl_dev_event_t e);
    int (*memcpy_async)(void *dst, const void *src, size_t bytes, rl_dev_stream_t s);
    int (*memset_async)(void *dst, int value, size_t bytes, rl_dev_stream_t s);

    int (*get_last_error)(void);
    int (*peek_at_last_error)(void);
    const char *(*error_string)(int e);
    /* What the last failed call on this thread said beyond its code (the simulator's
     * detail, "" when none); the CUDA runtime has none. */
    const char *(*error_detail)(void);
    /* Right after a call of this thread failed with e: 1 when it left e as the thread's
     * last error (then the caller may clear it), 0 when the thread's last error is still
     * what it was before the call (a driver call, a launcher's own refusal). */
    int (*failure_recorded)(int e);

    /* Loads every kernel of the launchers below in the current device's context. */
    int (*load_kernels)(void);
    /* Kernels (kernels/reduce_cuda.h's contracts), each a launch on s. */
    int (*launch_reduce)(void *dst, const void *a, const void *b, size_t n, ringlet_datatype_t dt, ringlet_op_t op,
                         rl_dev_stream_t s);
    int (*launch_reduce_many)(void *dst, const void *const *srcs, int nsrc, size_t n, ringlet_datatype_t dt,
                              ringlet_op_t op, rl_dev_stream_t s);
    int (*launch_scale)(void *dst, const void *src, size_t n, ringlet_datatype_t dt, const void *scalar,
                        rl_dev_stream_t s);
    int (*launch_convert)(void *dst, ringlet_datatype_t dt, const void *src, ringlet_datatype_t st, size_t n,
                          double scale, rl_dev_stream_t s);
    int (*launch_divide)(void *buf, size_t n, ringlet_datatype_t dt, int divisor, rl_dev_stream_t s);
    /* A kernel that spins until *flag >= value (unsigned), and one that stores value. */
    int (*launch_wait_flag)(volatile uint64_t *flag, uint64_t value, rl_dev_stream_t s);
    int (*launch_write_flag)(volatile uint64_t *flag, uint64_t value, rl_dev_stream_t s);

    /* Stream memory operations (the driver's cuStreamWaitValue64 / cuStreamWriteValue64):
     * whether device dev offers them (a property of each device: why says why not), a wait
     * until (int64_t)(*addr - value) >= 0, and a store. addr: pinned or device memory. */
    int (*memops_supported)(int dev, int *yes, char *why, size_t whylen);
    int (*stream_wait_value64)(rl_dev_stream_t s, volatile uint64_t *addr, uint64_t value);
    int (*stream_write_value64)(rl_dev_stream_t s, volatile uint64_t *addr, uint64_t value);
} rl_rt;

extern const rl_rt rl_rt_sim;
#ifdef RINGLET_CUDA
extern const rl_rt rl_rt_cuda;
#endif

#ifdef __cplusplus
}
#endif
#endif
