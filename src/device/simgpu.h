/* The simulated GPU (RINGLET_DEVICE=sim): internal interface between its memory part
 * (simgpu_mem.c) and its streams (simgpu_stream.c). See device.h for what it promises and
 * ../shared/DESIGN.md for why it exists: every device path of ringlet runs in CI on it,
 * under the sanitizers, with rules strict enough to fail where a GPU would.
 *
 * Memory. Device memory is a memfd mapped twice: PROT_NONE at the address callers get
 * (a host dereference crashes, as on a GPU), read-write for the simulator's engine
 * (copies and kernels). Pinned memory is ordinary memory the simulator knows about.
 * Everything else is pageable host memory: copies take it, kernels do not.
 * Streams. A thread per stream runs its operations in order, after the enqueueing call
 * returned, optionally after a random delay (RINGLET_SIM_JITTER, microseconds).
 * Errors. A fault inside a kernel (pageable or misaligned operand) is sticky, as on a GPU:
 * every later call fails with it. */
#ifndef RINGLET_SIMGPU_H
#define RINGLET_SIMGPU_H

#include <stddef.h>

#include "device.h"

/* Where the engine reaches [p, p + bytes): */
enum { SIM_MEM_DEVICE = 0, SIM_MEM_PINNED = 1, SIM_MEM_PAGEABLE = 2, SIM_MEM_BAD = -1 };
/* Classifies the range and gives the engine's address of it (device memory: through the
 * engine mapping; pinned and pageable: p itself). SIM_MEM_BAD: the range starts in an
 * allocation and runs past its end (why says so, RL_DEV_ERR-style text). */
int sim_translate(const void *p, size_t bytes, void **eng, char *why, size_t whylen);

/* The sticky error: once set (the first message wins), every call fails with it. */
void sim_set_sticky(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* RL_DEV_ERR with the sticky message as the thread's error, or RL_DEV_OK. */
int sim_sticky_check(void);
/* Non-zero once the sticky error is set. */
int sim_sticky(void);

/* Blocks until no stream of the process has queued or running work (cudaFree does the
 * same before it frees). */
void sim_sync_all(void);
/* The calling thread's current device (set_device). */
int sim_current_device(void);

/* Memory operations of the ops table (simgpu_mem.c). */
int sim_count(int *n);
int sim_set_device(int dev);
int sim_get_device(int *dev);
int sim_ptr_device(const void *p);
int sim_mem_alloc(void **p, size_t bytes);
int sim_mem_free(void *p);
int sim_host_alloc(void **p, size_t bytes);
int sim_host_free(void *p);
int sim_mem_export(void *p, rl_dev_handle *h);
int sim_mem_import(const rl_dev_handle *h, void **p);
int sim_mem_unimport(void *p);

#endif
