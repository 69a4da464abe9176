/* The device layer: the only code of ringlet that calls CUDA (kernels/ aside).
 *
 * One interface of coarse, stream-ordered operations, the ones algorithms and
 * transports need: device memory (also memory a peer process on the host can map),
 * pinned host memory the device reads and writes, asynchronous copies, the reduction
 * kernels, events, and flags in memory that one side writes and a stream waits on.
 * It knows data types and ops (for the kernels) and nothing else of ringlet.
 *
 * Backends (one per process, chosen at the first call by RINGLET_DEVICE), both the same
 * logic (backend_ops.inc) over a CUDA runtime (rt.h):
 *   cuda   the CUDA runtime and kernels/reduce_cuda.cu (device.c picks it by default
 *          when the build has CUDA and a device is usable)
 *   sim    a simulated GPU on the CPU (simgpu_*.c): device memory host code cannot touch,
 *          streams that run on threads of their own, the CPU kernels, and CUDA's rules;
 *          for tests, and for people without a GPU
 *   none   no device: every pointer is host memory (the default without CUDA)
 * RINGLET_DEVICE=auto (or unset) | cuda | sim | none.
 *
 * Holds. A stream waiting for a flag the host sets later (wait_flag) is held. On a GPU a
 * call that can synchronise the device (allocations, frees, IPC mappings, a kernel's
 * first, lazy, load) made while a stream is held may never return. So such calls go
 * through the quiet sections below, which wait until no stream is held and keep new holds
 * out meanwhile, and holds are made inside hold sections (RINGLET_STREAM_HOLD: how).
 *
 * Conventions: every function returns 0 on success and RL_DEV_ERR on failure, with the
 * reason in rl_dev_error() (the calling thread's last error, e.g. "cudaMemcpyAsync:
 * invalid argument"); event_query also returns RL_DEV_NOT_READY. Work enqueued on a
 * stream runs after everything enqueued on it before, and asynchronously: a failure
 * inside it (a kernel that reads memory the device cannot reach) is reported by a
 * later call, as CUDA reports its sticky errors. Pointers are addresses as the
 * caller sees them: device memory from mem_alloc or mem_import, pinned host memory
 * from host_alloc, or ordinary (pageable) host memory, which copies accept and
 * kernels do not.
 */
#ifndef RINGLET_DEVICE_H
#define RINGLET_DEVICE_H

#include <stddef.h>
#include <stdint.h>

#include "ringlet.h"

#ifdef __cplusplus
extern "C" {
#endif

enum { RL_DEV_OK = 0, RL_DEV_NOT_READY = 1, RL_DEV_ERR = -1 };

typedef struct rl_dev_stream_s *rl_dev_stream_t; /* cuda: a cudaStream_t */
typedef struct rl_dev_event_s *rl_dev_event_t;   /* cuda: a cudaEvent_t */

/* The stream handles that name a stream of the calling thread's current device: NULL and
 * CUDA's legacy default stream (RINGLET_STREAM_DEFAULT, 0x1), and cudaStreamPerThread
 * (0x2), the thread's own default stream there. */
static inline int rl_dev_stream_is_current(const void *s) {
    return !s || s == (const void *)1 || s == (const void *)2;
}

/* What a peer process on the same host needs to map device memory (mem_export). */
#define RL_DEV_HANDLE_BYTES 128
typedef struct rl_dev_handle {
    unsigned char bytes[RL_DEV_HANDLE_BYTES];
} rl_dev_handle;

typedef struct rl_device_ops {
    const char *name; /* "cuda", "sim" */

    /* Devices and the calling thread's current device (as cudaSetDevice). */
    int (*count)(int *n);
    /* Makes device dev ready for ringlet's work, once per device: every kernel loaded
     * into its context (never lazily behind a held stream), and the way streams are held
     * chosen (backend_ops.inc: none by default, sync; RINGLET_STREAM_HOLD=memop|kernel
     * asks for a stream memory operation or a spinning kernel). Can synchronise the device:
     * inside a quiet section. The calling thread's current device is kept. */
    int (*device_ready)(int dev);
    /* "memop", "kernel" or "sync" (ringlet's calls hold no stream: a stream call waits on
     * the host until its operation is done; wait_flag and write_flag, asked for anyway,
     * use memory operations where the device has them): how device_ready chose to hold
     * streams of dev. */
    const char *(*hold_kind)(int dev);
    /* The device of a stream (NULL, RINGLET_STREAM_DEFAULT: the current device's). */
    int (*stream_device)(rl_dev_stream_t s, int *dev);
    int (*set_device)(int dev);
    int (*get_device)(int *dev);
    /* Passing through a device: device_enter makes dev the calling thread's current device
     * and says in *saved what device_leave puts back (-1: nothing changed). device_leave
     * restores the device only where its primary context exists: a thread that never
     * chose a device reads as device 0, and selecting device 0 again would make a context
     * there (GPU memory on a device the process never used); that thread stays on dev. */
    int (*device_enter)(int dev, int *saved);
    void (*device_leave)(int saved);
    /* Whether dev's primary context exists in this process. */
    int (*context_active)(int dev, int *active);
    /* The device whose memory p points into (device memory from mem_alloc or
     * mem_import), or -1 for host memory, pinned or not. Never fails. */
    int (*ptr_device)(const void *p);
    /* Whether p is host memory a kernel reaches (pinned: host_alloc's); 0 for pageable
     * memory (a kernel's access faults, and the fault is sticky) and device memory. */
    int (*ptr_host_mapped)(const void *p);

    /* Device memory on the current device; exportable to peer processes. */
    int (*mem_alloc)(void **p, size_t bytes);
    /* Waits for every stream of the device first (as cudaFree does). */
    int (*mem_free)(void *p);
    /* Pinned host memory: host code reads and writes it, copies run at full speed, and
     * kernels (and flag waits) on any stream read and write it directly. */
    int (*host_alloc)(void **p, size_t bytes);
    int (*host_free)(void *p);
    /* A handle for memory from mem_alloc (the start of the allocation), and mapping it
     * in another process of the same host (a new address there, in the current device's
     * context; mem_unimport unmaps it in that context, whatever device is current then).
     * A handle to memory that was freed since is refused, not mapped. */
    int (*mem_export)(void *p, rl_dev_handle *h);
    int (*mem_import)(const rl_dev_handle *h, void **p);
    int (*mem_unimport)(void *p);

    /* Streams run their work in order; streams of one device run concurrently. */
    int (*stream_create)(rl_dev_stream_t *s);
    /* Returns at once and the work queued goes on (CUDA, and the simulator): a caller
     * that frees or unmaps what the work touches waits for it first (an event). */
    int (*stream_destroy)(rl_dev_stream_t s);
    /* Blocks the calling thread until the stream's work is done (tests and tools; the
     * core polls events instead, within its deadlines). */
    int (*stream_sync)(rl_dev_stream_t s);
    /* Whether work enqueued on s now would be captured into a CUDA graph (stream
     * capture) rather than run; and, for tests, a capture's begin (global mode) and end
     * (its graph destroyed). */
    int (*stream_capturing)(rl_dev_stream_t s, int *yes);
    int (*stream_begin_capture)(rl_dev_stream_t s);
    int (*stream_end_capture)(rl_dev_stream_t s);
    /* For tests: the calling thread's stream capture mode (cudaThreadExchangeStreamCaptureMode:
     * 0 global, 1 thread-local, 2 relaxed) becomes *mode, and *mode the one it had. The
     * layer's own queries, synchronisations, allocations and frees run in thread-local mode
     * whatever the thread's (backend_ops.inc: local_mode_begin). */
    int (*thread_capture_mode)(int *mode);

    /* Events mark a point in a stream: query says whether everything enqueued on the
     * stream before the last record is done (an event never recorded is done). */
    int (*event_create)(rl_dev_event_t *e);
    int (*event_destroy)(rl_dev_event_t e);
    int (*event_record)(rl_dev_event_t e, rl_dev_stream_t s);
    int (*event_query)(rl_dev_event_t e); /* RL_DEV_OK done, RL_DEV_NOT_READY, RL_DEV_ERR */
    /* Work enqueued on s from now on waits for the event's last record. */
    int (*stream_wait_event)(rl_dev_stream_t s, rl_dev_event_t e);

    /* Copies bytes in any direction (device, pinned or pageable host memory). */
    int (*memcpy_async)(void *dst, const void *src, size_t bytes, rl_dev_stream_t s);
    int (*memset_async)(void *dst, int value, size_t bytes, rl_dev_stream_t s);
    /* Reduction kernels, kernels/reduce.h's contract: dst[i] = a[i] op b[i] (avg
     * reduces as a sum), and buf[i] /= divisor. Operands are device or pinned memory. */
    int (*reduce)(void *dst, const void *a, const void *b, size_t n, ringlet_datatype_t dt, ringlet_op_t op,
                  rl_dev_stream_t s);
    int (*divide)(void *buf, size_t n, ringlet_datatype_t dt, int divisor, rl_dev_stream_t s);
    /* dst[i] = src[i] * scalar, scalar one element of dt in host memory (read at the call). */
    int (*scale)(void *dst, const void *src, size_t n, ringlet_datatype_t dt, const void *scalar, rl_dev_stream_t s);
    /* dst[i] = (dt)(src[i] * scale) between the floating types (kernels/convert.h). */
    int (*convert)(void *dst, ringlet_datatype_t dt, const void *src, ringlet_datatype_t st, size_t n, double scale,
                   rl_dev_stream_t s);
    /* dst[i] = srcs[0][i] op ... op srcs[nsrc-1][i] in one kernel (1 <= nsrc <= 64),
     * rounded as nsrc - 1 reduce calls round; dst may be any source. */
    int (*reduce_many)(void *dst, const void *const *srcs, int nsrc, size_t n, ringlet_datatype_t dt,
                       ringlet_op_t op, rl_dev_stream_t s);

    /* Flags: 8-byte words in pinned or device memory (also memory imported from a
     * peer). wait_flag holds the stream until *flag >= value (values below 2^62; call it
     * inside a hold section, on the stream's device, made ready); write_flag stores value
     * once the stream's earlier work is done (visible to the host and to peers). */
    int (*wait_flag)(volatile uint64_t *flag, uint64_t value, rl_dev_stream_t s);
    int (*write_flag)(volatile uint64_t *flag, uint64_t value, rl_dev_stream_t s);
} rl_device_ops;

/* The process's backend; NULL when it has none (every pointer is host memory). The
 * first call decides; a backend that RINGLET_DEVICE asks for and that cannot run here
 * gives NULL, with the reason in rl_device_unavailable(). */
const rl_device_ops *rl_device(void);
/* Why rl_device() is NULL ("" when it is not). */
const char *rl_device_unavailable(void);
/* The device of p, or -1 (also when there is no backend). */
int rl_dev_ptr_device(const void *p);
/* With no backend (rl_device() NULL): whether a call's buffers a and b (either may be
 * NULL) are device memory all the same, of a CUDA the program itself runs (a driver it
 * loaded knows them), or simulated memory made without the sim backend (tests): taken for
 * host memory, the host would touch them and fault. 1 when a is, 2 when b is (and a not),
 * 0 when neither or a backend runs (it classifies them: rl_dev_ptr_device). unserved.c. */
int rl_dev_unserved_pair(const void *a, const void *b);
/* Looks now whether the program has loaded a CUDA driver (a communicator's init: the
 * per-call look is rare, unserved.c says why). */
void rl_dev_unserved_look(void);

/* The calling thread's last error of the device layer. */
const char *rl_dev_error(void);
/* Whether that error is a sticky one (a kernel faulted: the process's device context is
 * unusable, and every later CUDA call fails with it). */
int rl_dev_error_sticky(void);
/* For backends: sets it (printf-style, not sticky) and returns RL_DEV_ERR. */
int rl_dev_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* For backends: marks the error just set as sticky. */
void rl_dev_mark_sticky(void);

/* ---- quiet sections and hold sections (device.c) ---- */

/* Waits (timeout_s at most) until no stream of the process is held and no hold section
 * is open, then keeps holds out until rl_dev_quiet_end. Nests in one thread. RL_DEV_ERR
 * on timeout, naming what. Frees deferred by rl_dev_free_later are made here. */
int rl_dev_quiet_begin(double timeout_s, const char *what);
void rl_dev_quiet_end(void);
/* A quiet section only if one can start at once (no stream held, no hold section open);
 * 1 if it started (end it with rl_dev_quiet_end). */
int rl_dev_quiet_try(void);
/* Whether the calling thread is in a quiet section. */
int rl_dev_in_quiet(void);
/* A hold section: wait_flag calls go between these (and no quiet section is open
 * meanwhile). Waits (timeout_s at most) while another thread is in a quiet section. */
int rl_dev_hold_begin(double timeout_s);
void rl_dev_hold_end(void);
/* For backends: a stream was held until *flag reaches value (cyclic: as CUDA's GEQ
 * memory operation compares). */
void rl_dev_hold_note(volatile uint64_t *flag, uint64_t value, int cyclic);
/* The holds not released yet (their flag below their value). */
int rl_dev_holds_active(void);
/* For backends: device dev's context opened the IPC mapping p (one more open); -1 out of
 * memory. take: one open of p closed, and the device that opened it (-1: not noted). */
int rl_dev_import_note(void *p, int dev);
int rl_dev_import_take(void *p);
/* Frees memory (RL_DEV_MEM_*; an import: unmaps it) now when no stream is held and no
 * work noted stuck is pending, else at the next quiet section after that. 1 when it was
 * freed now (0: kept for later, or the free failed, with a warning). */
enum { RL_DEV_MEM_DEVICE = 0, RL_DEV_MEM_PINNED = 1, RL_DEV_MEM_IMPORTED = 2 };
int rl_dev_free_later(void *p, int kind);
/* A free the program asked for (ringlet_mem_free, ringlet_host_free; kind DEVICE or
 * PINNED): made now in a quiet section, unless work noted stuck is pending, behind which
 * CUDA's free would wait (for ever if it never ends): then kept as rl_dev_free_later keeps
 * ours (*kept = 1), once p is checked to be memory of that kind. */
int rl_dev_free_user(void *p, int kind, double timeout_s, const char *what, int *kept);
/* Whether work noted stuck (below) is still pending: frees are kept for later. */
int rl_dev_work_stuck(void);
/* Work of ours queued on stream s did not finish by its deadline: something ahead of it
 * on the device does not end (a kernel of the program's own that waits, say). A free
 * waits for the whole device on CUDA and would hang behind it, so until the work queued
 * on s so far is done, rl_dev_free_later keeps every free for later (a leak if it never
 * ends, never a hang). */
void rl_dev_note_stuck(rl_dev_stream_t s);
/* The same for an event already recorded after that work (on device dev), which the
 * note then owns (destroys once done): 1, or 0 where no note could be made (out of
 * memory, a forked child; the event is still the caller's). */
int rl_dev_note_stuck_event(rl_dev_event_t ev, int dev);

extern const rl_device_ops rl_device_sim;
#ifdef RINGLET_CUDA
extern const rl_device_ops rl_device_cuda;
#endif

#ifdef __cplusplus
}
#endif
#endif
