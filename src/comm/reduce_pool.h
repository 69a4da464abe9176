/* A communicator's reduction threads: a host-memory reduction (or avg's division) of a
 * chunk large enough is cut into contiguous element ranges, one per thread, each
 * starting on a cache line of dst; the caller runs one range itself and waits for the
 * others. Every element is computed as the single-threaded kernel computes it, so the
 * results are the same bit for bit.
 *
 * One job at a time: the thread that runs the communicator's operation. A call that
 * finds the pool busy, stopped or not worth it reduces on its own thread. */
#ifndef RINGLET_REDUCE_POOL_H
#define RINGLET_REDUCE_POOL_H

#include <stddef.h>

#include "ringlet.h"

struct rl_reduce_pool;

/* RINGLET_REDUCE_THREADS (auto, or threads reducing, the caller's included: 1 = off;
 * *threads 0 = auto) and RINGLET_REDUCE_MIN_BYTES (bytes per thread below which a
 * reduction is not split). 0, or -1 with the message in err (RL_MSG_MAX). */
int rl_reduce_pool_env(int *threads, size_t *min_bytes, char *err);

/* The pool for threads (0: auto, from the cores online and local_size, the ranks of
 * the communicator on this host); NULL when that comes to 1 (single-threaded) or memory
 * is short. Its threads start at the first reduction that splits. spin_s: how long a
 * waiting thread polls before it sleeps, when the host has a core for every thread. */
struct rl_reduce_pool *rl_reduce_pool_new(int rank, int threads, int local_size, size_t min_bytes, double spin_s);
/* The cores a rank of local_size on this host may take: those it is allowed to run on
 * (its CPU affinity: a launcher's binding, taskset, a cpuset), at most its share of
 * those online. The auto thread count is that less 2 (the pipe's own thread and the
 * transports'), from 1 to 8; polling only where every thread has a core of its own. */
long rl_reduce_cores_for_rank(long online, long allowed, int local_size);
/* Stops and joins the threads (after the job under way); later reductions run on the
 * caller's thread. Idempotent; NULL is a no-op. */
void rl_reduce_pool_stop(struct rl_reduce_pool *p);
void rl_reduce_pool_free(struct rl_reduce_pool *p);

/* rl_reduce_host and rl_divide_host (kernels/reduce.h), split when worth it; pool may
 * be NULL. */
void rl_pool_reduce(struct rl_reduce_pool *p, void *dst, const void *a, const void *b, size_t n,
                    ringlet_datatype_t dt, ringlet_op_t op);
void rl_pool_divide(struct rl_reduce_pool *p, void *buf, size_t n, ringlet_datatype_t dt, int divisor);

/* Tests: the threads of the pool (0 before they start or after a stop) and where part
 * k of parts begins, as an element index into n elements of size es at dst. */
int rl_reduce_pool_running(struct rl_reduce_pool *p);
size_t rl_reduce_pool_part_start(const void *dst, size_t es, size_t n, int k, int parts);

#endif
