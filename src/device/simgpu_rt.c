/* The simulated GPU's runtime front (simgpu.h): the per-thread last error and the sticky
 * error, the current device of each thread, kernel loading, and the rl_rt table. */
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "simgpu.h"
#include "util.h"

/* ---- errors ---- */

static _Thread_local int t_last;
static _Thread_local char t_detail[256];

static atomic_int g_sticky; /* its code, 0 while none */
static char g_sticky_msg[256];
static pthread_mutex_t g_sticky_mu = PTHREAD_MUTEX_INITIALIZER;

int sim_fail(int code, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(t_detail, sizeof t_detail, fmt, ap);
    va_end(ap);
    t_last = code;
    return code;
}

void sim_set_sticky(int code, const char *fmt, ...) {
    pthread_mutex_lock(&g_sticky_mu);
    if (!atomic_load(&g_sticky)) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(g_sticky_msg, sizeof g_sticky_msg, fmt, ap);
        va_end(ap);
        atomic_store(&g_sticky, code ? code : RL_RT_ERR_UNKNOWN);
    }
    pthread_mutex_unlock(&g_sticky_mu);
}

int sim_sticky(void) { return atomic_load(&g_sticky) != 0; }

/* CUDA's state does not survive fork(): in a child forked once the driver was initialised
 * (cuInit, which the runtime's first call makes: cudaGetDeviceCount too, as PyTorch's
 * NVML-based device count exists to avoid), every call fails; the parent's streams and
 * their threads are not in the child either. The fork generation (rl_fork_generation) at
 * the process's first call; none yet: UINT_MAX. */
static atomic_uint g_init_gen = UINT_MAX;

/* Every entry's first check: notes the first call, and fails in a child forked after it. */
int sim_forked_check(void) {
    unsigned gen = atomic_load(&g_init_gen), now = rl_fork_generation();
    if (gen == UINT_MAX && atomic_compare_exchange_strong(&g_init_gen, &gen, now)) return RL_RT_SUCCESS;
    if (gen == now) return RL_RT_SUCCESS;
    return sim_fail(RL_RT_ERR_INITIALIZATION, "this process (pid %d) was forked after its parent (pid %d) had used the "
                                              "(simulated) GPU: CUDA cannot be used in such a child (fork before "
                                              "using CUDA, or start the child with exec)",
                    (int)getpid(), (int)getppid());
}

int sim_sticky_check(void) {
    int rc = sim_forked_check();
    if (rc) return rc;
    int code = atomic_load(&g_sticky);
    if (!code) return RL_RT_SUCCESS;
    pthread_mutex_lock(&g_sticky_mu);
    sim_fail(code, "%s (a sticky error: the simulated device is unusable)", g_sticky_msg);
    pthread_mutex_unlock(&g_sticky_mu);
    return code;
}

/* The driver's calls leave the runtime's last error alone: after one failed, the thread's
 * last error is set back to what it was (saved, sim_thread_error before the call), and
 * failure_recorded says so once. */
static _Thread_local int t_unrecorded;
int sim_thread_error(void) { return t_last; }
int sim_driver_failed(int rc, int saved) {
    if (rc) t_last = saved, t_unrecorded = rc;
    return rc;
}
static int failure_recorded(int e) {
    int recorded = t_unrecorded != e;
    t_unrecorded = 0;
    return recorded;
}

static int get_last_error(void) {
    int sticky = atomic_load(&g_sticky);
    if (sticky) return sticky; /* never cleared */
    int e = t_last;
    t_last = RL_RT_SUCCESS;
    return e;
}

static int peek_at_last_error(void) {
    int sticky = atomic_load(&g_sticky);
    return sticky ? sticky : t_last;
}

static const char *error_string(int e) {
    switch (e) {
    case RL_RT_SUCCESS: return "no error";
    case RL_RT_ERR_INVALID_VALUE: return "invalid argument";
    case RL_RT_ERR_MEMORY_ALLOCATION: return "out of memory";
    case RL_RT_ERR_INITIALIZATION: return "initialization error";
    case RL_RT_ERR_INVALID_DEVICE_POINTER: return "invalid device pointer";
    case RL_RT_ERR_NO_DEVICE: return "no CUDA-capable device is detected";
    case RL_RT_ERR_INVALID_DEVICE: return "invalid device ordinal";
    case RL_RT_ERR_INVALID_CONTEXT: return "invalid device context";
    case RL_RT_ERR_MAP_FAILED: return "mapping of buffer object failed";
    case RL_RT_ERR_INVALID_HANDLE: return "invalid resource handle";
    case RL_RT_ERR_ILLEGAL_STATE: return "the operation cannot be performed in the present state";
    case RL_RT_ERR_NOT_READY: return "device not ready";
    case RL_RT_ERR_ILLEGAL_ADDRESS: return "an illegal memory access was encountered";
    case RL_RT_ERR_MISALIGNED_ADDRESS: return "misaligned address";
    case RL_RT_ERR_PEER_UNSUPPORTED: return "peer access is not supported between these two devices";
    case RL_RT_ERR_NOT_PERMITTED: return "operation not permitted";
    case RL_RT_ERR_NOT_SUPPORTED: return "operation not supported";
    case RL_RT_ERR_CAPTURE_UNSUPPORTED: return "operation not permitted when stream is capturing";
    case RL_RT_ERR_CAPTURE_INVALIDATED: return "operation failed due to a previous error during capture";
    case RL_RT_ERR_CAPTURE_UNMATCHED: return "capture was not initiated in this stream";
    case RL_RT_ERR_CAPTURE_UNJOINED: return "capturing stream has unjoined work";
    case RL_RT_ERR_CAPTURE_IMPLICIT: return "operation would make the legacy stream depend on a capturing blocking stream";
    case RL_RT_ERR_CAPTURED_EVENT: return "operation not permitted on an event last recorded in a capturing stream";
    case RL_RT_ERR_CAPTURE_WRONG_THREAD: return "attempt to terminate a thread-local capture sequence from another thread";
    case RL_RT_ERR_SIM_DEADLOCK: return "deadlock on a GPU (refused by the simulator)";
    default: return "unknown error";
    }
}

static const char *error_detail(void) { return t_detail; }

/* ---- devices ---- */

static _Thread_local int t_device;
/* Devices whose primary context exists: made by set_device, or by the first call on a
 * thread's current device that needs one (sim_current_device); not by get_device. */
static atomic_uchar g_context[64];

int sim_device_count(void) { return (int)rl_env_int("RINGLET_SIM_DEVICES", 1, 1, 64); }

static void make_context(int dev) { atomic_store(&g_context[dev], 1); }

int sim_current_device(void) {
    make_context(t_device);
    return t_device;
}

int sim_make_context(void) {
    int rc = sim_forked_check();
    if (!rc) (void)sim_current_device();
    return rc;
}

int sim_call_begin(void) {
    int rc = sim_make_context();
    return rc ? rc : sim_sticky_check();
}

static int primary_ctx_active(int dev, int *active) {
    int rc = sim_forked_check();
    if (rc) return *active = 0, rc;
    if (dev < 0 || dev >= sim_device_count())
        return *active = 0, sim_fail(RL_RT_ERR_INVALID_DEVICE, "primary_ctx_active: device %d does not exist", dev);
    *active = atomic_load(&g_context[dev]);
    return RL_RT_SUCCESS;
}

static int get_device_count(int *n) {
    *n = 0;
    int rc = sim_forked_check();
    if (rc) return rc;
    *n = sim_device_count();
    return RL_RT_SUCCESS;
}

static int set_device(int dev) {
    int rc = sim_sticky_check();
    if (rc) return rc;
    if (dev < 0 || dev >= sim_device_count())
        return sim_fail(RL_RT_ERR_INVALID_DEVICE, "set_device: device %d does not exist (RINGLET_SIM_DEVICES=%d)", dev,
                        sim_device_count());
    t_device = dev;
    make_context(dev); /* CUDA 12: cudaSetDevice makes the context at once */
    return RL_RT_SUCCESS;
}

static int get_device(int *dev) {
    int rc = sim_forked_check();
    if (rc) return rc;
    *dev = t_device;
    return RL_RT_SUCCESS;
}

/* ---- kernel loading ---- */

static atomic_uchar g_loaded[64][SIM_KERNELS];
static int g_eager = -1;
static pthread_once_t g_eager_once = PTHREAD_ONCE_INIT;

/* CUDA_MODULE_LOADING=EAGER loads everything when the context is made, before any work
 * can be queued; LAZY (CUDA 12.2's default, and PyTorch's setting) at first launch. */
static void read_loading_mode(void) {
    const char *m = getenv("CUDA_MODULE_LOADING");
    g_eager = m && !strcmp(m, "EAGER");
}

int sim_kernel_loaded(int kernel, const char *name) {
    pthread_once(&g_eager_once, read_loading_mode);
    int dev = sim_current_device();
    if (g_eager || kernel < 0 || kernel >= SIM_KERNELS || atomic_load(&g_loaded[dev][kernel])) return RL_RT_SUCCESS;
    char what[96];
    snprintf(what, sizeof what, "loading kernel %s at its first launch (CUDA_MODULE_LOADING=LAZY)", name);
    int rc = sim_device_sync_loading(what);
    if (rc) return rc;
    atomic_store(&g_loaded[dev][kernel], 1);
    return RL_RT_SUCCESS;
}

int sim_load_all_kernels(void) {
    int rc = sim_sticky_check();
    if (rc) return rc;
    pthread_once(&g_eager_once, read_loading_mode);
    if (!g_eager && (rc = sim_device_sync("load_kernels"))) return rc;
    for (int k = 0; k < SIM_KERNELS; k++) atomic_store(&g_loaded[sim_current_device()][k], 1);
    return RL_RT_SUCCESS;
}

const rl_rt rl_rt_sim = {
    .name = "sim",
    .get_device_count = get_device_count,
    .set_device = set_device,
    .get_device = get_device,
    .primary_ctx_active = primary_ctx_active,
    .pointer_device = sim_pointer_device,
    .pointer_host_mapped = sim_pointer_host_mapped,
    .malloc = sim_malloc,
    .free = sim_free,
    .host_alloc = sim_host_alloc,
    .free_host = sim_free_host,
    .ipc_get_handle = sim_ipc_get_handle,
    .ipc_open = sim_ipc_open,
    .ipc_close = sim_ipc_close,
    .stream_create = sim_stream_create,
    .stream_destroy = sim_stream_destroy,
    .stream_synchronize = sim_stream_synchronize,
    .stream_get_device = sim_stream_device,
    .stream_begin_capture = sim_stream_begin_capture,
    .stream_end_capture = sim_stream_end_capture,
    .stream_is_capturing = sim_stream_is_capturing,
    .thread_exchange_capture_mode = sim_thread_exchange_capture_mode,
    .event_create = sim_event_create,
    .event_destroy = sim_event_destroy,
    .event_record = sim_event_record,
    .event_query = sim_event_query,
    .stream_wait_event = sim_stream_wait_event,
    .memcpy_async = sim_memcpy_async,
    .memset_async = sim_memset_async,
    .get_last_error = get_last_error,
    .peek_at_last_error = peek_at_last_error,
    .error_string = error_string,
    .error_detail = error_detail,
    .failure_recorded = failure_recorded,
    .load_kernels = sim_load_all_kernels,
    .launch_reduce = sim_launch_reduce,
    .launch_reduce_many = sim_launch_reduce_many,
    .launch_scale = sim_launch_scale,
    .launch_convert = sim_launch_convert,
    .launch_divide = sim_launch_divide,
    .launch_wait_flag = sim_launch_wait_flag,
    .launch_write_flag = sim_launch_write_flag,
    .memops_supported = sim_memops_supported,
    .stream_wait_value64 = sim_stream_wait_value64,
    .stream_write_value64 = sim_stream_write_value64,
};
