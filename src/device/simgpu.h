/* The simulated GPU (RINGLET_DEVICE=sim): a CUDA runtime on the CPU (rt.h's rl_rt_sim),
 * and the internal interface between its parts:
 *   simgpu_rt.c      errors (per thread, sticky), devices, kernel loading, the table
 *   simgpu_mem.c     device and pinned memory, IPC
 *   simgpu_stream.c  streams, events, the operations they run, held streams
 *   simgpu_launch.c  kernels (the CPU twins) and stream memory operations
 * See rt.h for the rules it holds and ../../shared/DESIGN.md for why it exists: every
 * device path of ringlet runs in CI on it, under the sanitizers, with rules strict enough
 * to fail where a GPU would.
 *
 * Memory. Device memory is a memfd mapped twice: PROT_NONE at the address callers get
 * (a host dereference crashes, as on a GPU), read-write for the simulator's engine
 * (copies and kernels). Pinned memory is ordinary memory the simulator knows about.
 * Everything else is pageable host memory: copies take it, kernels do not.
 * Streams. A thread per stream runs its operations in order, after the enqueueing call
 * returned, optionally after a random delay (RINGLET_SIM_JITTER, microseconds). A stream
 * queues at most RINGLET_SIM_QUEUE_DEPTH operations (1024): a call that queues on a full one
 * blocks until one ends, as on a GPU.
 * Errors. A fault inside a kernel (pageable or misaligned operand) is sticky, as on a GPU:
 * every later call fails with it. */
#ifndef RINGLET_SIMGPU_H
#define RINGLET_SIMGPU_H

#include <stddef.h>
#include <stdint.h>

#include "rt.h"

/* ---- errors (simgpu_rt.c) ---- */

/* Fails the call: code becomes the thread's last error (unless a sticky error holds it),
 * the message its detail; returns code. */
int sim_fail(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* A driver call leaves the runtime's last error alone: saved = sim_thread_error() before
 * it, sim_driver_failed(rc, saved) after it (returns rc; on a failure puts saved back). */
int sim_thread_error(void);
int sim_driver_failed(int rc, int saved);
/* The sticky error: once set (the first wins), every call fails with it. */
void sim_set_sticky(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The sticky code as the thread's error (sim_fail), or RL_RT_SUCCESS. */
int sim_sticky_check(void);
/* Non-zero once the sticky error is set. */
int sim_sticky(void);

/* ---- devices and kernel loading (simgpu_rt.c) ---- */

int sim_device_count(void);
/* The calling thread's current device (a context on it: CUDA makes one there for any call
 * that needs one, rt.h). */
int sim_current_device(void);
/* A runtime call's start: a context on the thread's current device, as CUDA makes one;
 * fails (RL_RT_ERR_INITIALIZATION) in a child forked after the parent used the GPU. */
int sim_make_context(void);
/* RL_RT_ERR_INITIALIZATION, said, in a child forked after the parent used the GPU. */
int sim_forked_check(void);
/* The same, then the sticky error as the thread's error (sim_sticky_check), or RL_RT_SUCCESS. */
int sim_call_begin(void);
/* Before a kernel's first launch: loads it (lazily, unless CUDA_MODULE_LOADING=EAGER),
 * which waits for the device to be idle. kernel: an index below SIM_KERNELS. */
#define SIM_KERNELS 256
int sim_kernel_loaded(int kernel, const char *name);
int sim_load_all_kernels(void);

/* ---- memory (simgpu_mem.c) ---- */

/* Where the engine reaches [p, p + bytes): */
enum { SIM_MEM_DEVICE = 0, SIM_MEM_PINNED = 1, SIM_MEM_PAGEABLE = 2, SIM_MEM_BAD = -1 };
/* Classifies the range and gives the engine's address of it (device memory: through the
 * engine mapping; pinned and pageable: p itself). SIM_MEM_BAD: the range starts in an
 * allocation and runs past its end (why says so). */
int sim_translate(const void *p, size_t bytes, void **eng, char *why, size_t whylen);
int sim_pointer_device(const void *p);
/* Whether this process ever made simulated memory (cheap: asked on every call's buffers
 * when no backend runs, rl_dev_unserved_pair). */
int sim_memory_seen(void);
int sim_pointer_host_mapped(const void *p);
/* The device whose memory (or context) p is when a kernel on device dev may not touch it,
 * else -1: memory this process allocated on another device (no peer access, which ringlet
 * never enables), or memory imported from another process in another device's context
 * (CUDA maps it into the context current at the open, with lazy peer access from that
 * device to the memory's, not from others). */
int sim_peer_denied(const void *p, int dev);
int sim_malloc(void **p, size_t bytes);
int sim_free(void *p);
int sim_host_alloc(void **p, size_t bytes);
int sim_free_host(void *p);
int sim_ipc_get_handle(rl_dev_handle *h, void *p);
int sim_ipc_open(void **p, const rl_dev_handle *h);
int sim_ipc_close(void *p);

/* ---- streams (simgpu_stream.c) ---- */

/* A call that can synchronise the device (what: its name): waits until no stream has
 * queued or running work; RL_RT_ERR_SIM_DEADLOCK (with the thread's error set) when a
 * stream is held by a flag wait that is not met, since on a GPU the wait would not end. */
int sim_device_sync(const char *what);
/* The same without stream capture's rule (a kernel loaded lazily at its launch, which
 * CUDA allows during a capture). Everything else refuses while a capture is active. */
int sim_device_sync_loading(const char *what);
/* A call that may synchronise the device, and is not said to (CUDA's documentation): it
 * fails as sim_device_sync would where that would hang (a held stream) or is forbidden (a
 * capture), and waits for nothing. */
int sim_device_may_sync(const char *what);
/* Whether queued or running work of any stream uses memory in [eng, eng + bytes) (engine
 * addresses); *device: that stream's device. */
int sim_work_uses(const void *eng, size_t bytes, int *device);

/* One operation of a stream. */
enum { OP_COPY, OP_MEMSET, OP_REDUCE, OP_REDUCE_MANY, OP_SCALE, OP_CONVERT, OP_DIVIDE, OP_RECORD, OP_WAIT_EVENT,
       OP_WAIT_FLAG, OP_WRITE_FLAG, OP_WAIT_VALUE, OP_WRITE_VALUE, OP_FAULT };

#define SIM_MAX_SOURCES 64

typedef struct sim_op {
    int kind;
    void *dst;
    const void *a, *b;
    void *owned;                       /* a copy from pageable memory: the bytes staged at the call */
    const void *srcs[SIM_MAX_SOURCES]; /* reduce_many: engine addresses */
    unsigned char scalar[8];           /* scale: the scalar, taken at the call */
    int nsrc;
    size_t n; /* bytes (copy, memset) or elements (kernels) */
    int value, divisor;
    ringlet_datatype_t dt, st; /* st: convert's source type */
    double fscale;             /* convert */
    ringlet_op_t rop;
    rl_dev_event_t ev;
    uint64_t gen;  /* record / wait: the event's generation; flags: the value */
    int fault;     /* OP_FAULT: the sticky code */
    char msg[200]; /* fault */
    uint64_t qseq; /* when it was queued, across streams (hardware work queues) */
    struct sim_op *next;
} sim_op;

sim_op *sim_new_op(int kind);
/* Queues o on s (NULL or RL_RT_STREAM_LEGACY: the current device's legacy stream), after
 * checking that s is usable; frees o on failure. */
int sim_enqueue(rl_dev_stream_t s, sim_op *o, const char *what);
/* The device of a stream. */
int sim_stream_device(rl_dev_stream_t s, int *dev);
/* Blocks until s has run everything enqueued on it so far. */
int sim_stream_reached(rl_dev_stream_t s, const char *what);

int sim_stream_create(rl_dev_stream_t *s, int blocking);
int sim_stream_destroy(rl_dev_stream_t s);
int sim_stream_synchronize(rl_dev_stream_t s);
int sim_stream_begin_capture(rl_dev_stream_t s);
int sim_stream_end_capture(rl_dev_stream_t s);
int sim_stream_is_capturing(rl_dev_stream_t s, int *yes);
int sim_thread_exchange_capture_mode(int *mode);
int sim_event_create(rl_dev_event_t *e);
int sim_event_destroy(rl_dev_event_t e);
int sim_event_record(rl_dev_event_t e, rl_dev_stream_t s);
int sim_event_query(rl_dev_event_t e);
int sim_stream_wait_event(rl_dev_stream_t s, rl_dev_event_t e);
int sim_memcpy_async(void *dst, const void *src, size_t bytes, rl_dev_stream_t s);
int sim_memset_async(void *dst, int value, size_t bytes, rl_dev_stream_t s);

/* ---- kernels and memory operations (simgpu_launch.c) ---- */

int sim_launch_reduce(void *dst, const void *a, const void *b, size_t n, ringlet_datatype_t dt, ringlet_op_t op,
                      rl_dev_stream_t s);
int sim_launch_reduce_many(void *dst, const void *const *srcs, int nsrc, size_t n, ringlet_datatype_t dt,
                           ringlet_op_t op, rl_dev_stream_t s);
int sim_launch_scale(void *dst, const void *src, size_t n, ringlet_datatype_t dt, const void *scalar,
                     rl_dev_stream_t s);
int sim_launch_convert(void *dst, ringlet_datatype_t dt, const void *src, ringlet_datatype_t st, size_t n,
                       double scale, rl_dev_stream_t s);
int sim_launch_divide(void *buf, size_t n, ringlet_datatype_t dt, int divisor, rl_dev_stream_t s);
int sim_launch_wait_flag(volatile uint64_t *flag, uint64_t value, rl_dev_stream_t s);
int sim_launch_write_flag(volatile uint64_t *flag, uint64_t value, rl_dev_stream_t s);
int sim_memops_supported(int dev, int *yes, char *why, size_t whylen);
int sim_stream_wait_value64(rl_dev_stream_t s, volatile uint64_t *addr, uint64_t value);
int sim_stream_write_value64(rl_dev_stream_t s, volatile uint64_t *addr, uint64_t value);

#endif
