/* Where an operation's buffers live, and how the algorithms touch them: host memory at
 * once with the CPU kernels, device memory by enqueueing copies and the CUDA kernels on
 * the communicator's compute stream (devcomm.h), in order. The algorithms are written
 * once for both. */
#ifndef RINGLET_MEM_H
#define RINGLET_MEM_H

#include "comm.h"
#include "devcomm.h"

typedef struct rl_mem {
    struct rl_devcomm *dev; /* NULL: host memory */
    ringlet_result_t rc;    /* the first enqueue that failed (device), else success */
    char err[RL_MSG_MAX];
    struct rl_reduce_pool *pool; /* host: the communicator's reduction threads (NULL: this thread alone) */
} rl_mem;

/* dst = a op b over n elements (avg reduces as a sum), buf /= divisor, dst = src.
 * Device: operands are device memory or pinned staging memory. Host: reduce and divide
 * are split over m->pool's threads when large enough (reduce_pool.h). */
void rl_mem_reduce(rl_mem *m, void *dst, const void *a, const void *b, size_t n, ringlet_datatype_t dt,
                   ringlet_op_t op);
void rl_mem_divide(rl_mem *m, void *buf, size_t n, ringlet_datatype_t dt, int divisor);
/* dst = src * scalar (scalar: one element of dt in host memory). */
void rl_mem_scale(rl_mem *m, void *dst, const void *src, size_t n, ringlet_datatype_t dt, const void *scalar);
/* dst = srcs[0] op ... op srcs[nsrc-1] in one pass (device: one kernel); dst may be any source. */
void rl_mem_reduce_many(rl_mem *m, void *dst, const void *const *srcs, int nsrc, size_t n, ringlet_datatype_t dt,
                        ringlet_op_t op);
void rl_mem_copy(rl_mem *m, void *dst, const void *src, size_t bytes);

/* Waits until the device work enqueued through m so far is done (the staging copies and
 * the transports' own streams do not wait for the compute stream): a copy or scaling
 * whose result the exchange then reads. Nothing on host memory. */
ringlet_result_t rl_mem_fence(struct ringlet_comm *c, rl_mem *m, char *err);

/* Scratch host memory for partial results, grown (never per call once large enough);
 * freed at teardown. */
void *rl_comm_temp(struct ringlet_comm *c, size_t bytes);

#endif
