/* Internal to the DDP layer (include/ringlet_ddp.h; src/ddp), which uses only the public
 * include/ringlet.h: parameter/buffer registration with a cross-rank check (create.c),
 * coalesced broadcasts (broadcast.c), gradient buckets (buckets.c) reduced with
 * non-blocking all-reduces while backward runs (step.c), host and device buffer
 * operations (memory.c, value.c), introspection (info.c), helpers (common.c).
 *
 * Life of an iteration (state in struct ringlet_ddp):
 *   pre_forward(1)  resets the per-iteration marks (ready[], pending per bucket).
 *   grad_ready(i)   copies a small gradient i into its bucket slot (or, compressing,
 *                   into the wire buffer as float16/bfloat16, times 1/nranks); a large
 *                   one stays where it is and will be all-reduced in place; decrements
 *                   the bucket's pending count; then launches every bucket from
 *                   next_launch on whose pending count is 0 (in index order, so every
 *                   rank issues the same all-reduces in the same order; averaging is the
 *                   all-reduce's RINGLET_AVG).
 *   finish()        marks the parameters nobody reported (unused, or an error), which
 *                   launches the rest; waits for the buckets in order and copies each
 *                   one's small gradients back as soon as it is in (so the copy of
 *                   bucket k overlaps the all-reduce of bucket k+1).
 *   rebuild_buckets: at the end of the first synchronising iteration, rank 0's report
 *                   order is broadcast and the buckets reassigned in it.
 *
 * Error flag: the last bucket carries one extra element (after its packed slots). Each
 * rank writes 1 there when it has found a usage error in this iteration before launching
 * that bucket, else 0; after the all-reduce, a nonzero value from the others makes every
 * rank's finish fail, so an error found on one rank is reported on all of them, and no
 * rank waits for a collective that another skipped (the erring rank still runs every
 * bucket).
 *
 * find_unused_parameters: after the last bucket, a uint8 MAX all-reduce of the
 * "used here" marks tells which parameters no rank used; their gradients are left as
 * they were (as PyTorch's DDP does).
 */
#ifndef RINGLET_DDP_INTERNAL_H
#define RINGLET_DDP_INTERNAL_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "ringlet.h"
#include "ringlet_ddp.h"

#if defined(__GNUC__) || defined(__clang__)
#define RL_DDP_HIDDEN __attribute__((visibility("hidden")))
#define RL_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define RL_DDP_HIDDEN
#define RL_PRINTF(a, b)
#endif

#define MSG_MAX 640
#define ALIGN_BYTES 64                 /* parameter slots in a bucket start on this boundary */
#define BCAST_SLOT_BYTES ((size_t)16 << 20) /* one coalesced broadcast message (two in flight); RINGLET_DDP_BCAST_BYTES */
#define DIRECT_MIN_BYTES ((size_t)1 << 20) /* RINGLET_DDP_DIRECT_BYTES */
#define SUMMARY_WORDS 8
#define SUMMARY_MAGIC 0x72646470u      /* "rddp" */
#define MAX_NDIM 64

typedef struct {
    char *name;
    void *data;
    void *grad;
    size_t count, bytes;
    ringlet_datatype_t dtype;
    ringlet_ddp_memory_t memory;
    int ndim;
    int64_t *shape;
    int bucket;
    size_t offset; /* elements from the bucket's start */
    int direct;    /* large, uncompressed: all-reduced on its own, in place where its gradient is */
    void *launch_on; /* this iteration: where a direct parameter's all-reduce runs (gradient or slot) */
    /* this iteration: not reported by its finish (an error without find_unused_parameters):
     * zeros in, and its result stays in its slot, never written into the gradient last
     * given, which the framework may have freed since (zero_grad(set_to_none=True)) */
    int unreported;
} tensor_t;

/* A bucket's memory: [packed slots][flag (last bucket only)][direct slots], each slot
 * aligned. The packed part (with the flag) travels as one all-reduce, from the bucket
 * (gradients are copied in); every direct parameter as one all-reduce of its own, run in
 * place on its gradient memory (no copy in or out) or on its slot (a gradient view, or
 * a parameter without gradient). Compressed buckets have no direct parameters. */
typedef struct {
    ringlet_datatype_t dtype, wire;
    ringlet_op_t op;    /* RINGLET_AVG (averaging, uncompressed) or RINGLET_SUM */
    size_t count;       /* elements of the whole bucket (slots, gaps, flag) */
    size_t packed_count; /* elements of the packed part, flag included */
    size_t flag_index;  /* the flag element (last bucket) */
    int has_flag;
    void *mem;          /* count elements of dtype; the gradient views */
    void *wire_mem;     /* count elements of wire (compression); == mem otherwise */
    int *params;        /* in assignment order */
    int nparams;
    int pending;        /* parameters not reported yet in this iteration */
    int launched;
    ringlet_request_t *reqs; /* packed part, then one per direct parameter */
    int nreqs, maxreqs;
    double t_launch, t_done;
    double t_complete;  /* first seen complete (polled at each report, waited in finish) */
    ringlet_result_t rc; /* its result once the request is gone */
    int first_pos;      /* place of its first parameter in the assignment order */
} bucket_t;

typedef enum { IT_NONE, IT_SYNC, IT_NOSYNC, IT_FINISHED } iter_state_t;

struct ringlet_ddp {
    ringlet_comm_t comm;
    int rank, nranks;
    int on_device;  /* the tensors are device memory: buckets and staging too, work on stream */
    int device;     /* device memory: the tensors' device (-1: none found, or host memory) */
    void *stream;   /* device: the stream every copy, kernel and collective is ordered on */
    /* device: pinned memory a stored value is copied from (a copy from pageable memory
     * would wait for the stream, which ringlet may hold), one slot per call site */
    unsigned char *value_pinned;
    ringlet_result_t mem_rc; /* the first memory operation that failed (device) */
    char mem_msg[MSG_MAX];
    ringlet_ddp_options_t opt;
    tensor_t *params, *buffers;
    int nparams, nbuffers;
    int nsync_buffers; /* the first ones: broadcast before forwards (the rest at construction only) */
    bucket_t *buckets;
    int nbuckets;
    double scale;

    /* iteration */
    iter_state_t state;
    int prev_forward_synced;
    uint8_t *ready, *used_local, *used_global;
    ringlet_request_t used_req;
    int used_launched;
    int nready, next_launch;
    ringlet_result_t iter_rc; /* first error of this iteration */
    char iter_msg[MSG_MAX];
    double own_flag;
    /* device memory: the last finish's error flags, summed over the ranks by a small
     * host all-reduce queued behind the buckets, collected by the next call
     * (ddp_settle_previous) */
    double flag_send, flag_recv;
    ringlet_request_t flag_req;
    int flag_pending, flag_own_error;

    /* buffer broadcasts */
    unsigned char *staging;
    size_t staging_slot;
    size_t bcast_cap; /* largest coalesced broadcast message */
    size_t direct_min; /* gradients of this many bytes or more are all-reduced in place (0: never) */

    /* rebuild_buckets */
    int *order;          /* this iteration's report order */
    int norder;
    int rebuilt;
    bucket_t **retired;  /* assignments replaced by a rebuild (their memory may still be viewed) */
    int *retired_n;
    int nretired;

    ringlet_ddp_stats_t stats;
    pthread_mutex_t mu;
    char last_error[MSG_MAX];
};

/* common.c */
RL_DDP_HIDDEN extern _Thread_local char ddp_t_last_error[MSG_MAX];
/* snprintf into a message buffer; truncation is fine (and not warned about). */
RL_DDP_HIDDEN int ddp_msgf(char *buf, size_t n, const char *fmt, ...) RL_PRINTF(3, 4);
/* Records the message on the object (if any) and the thread; returns rc. */
RL_DDP_HIDDEN ringlet_result_t ddp_set_error(struct ringlet_ddp *d, ringlet_result_t rc, const char *fmt, ...)
    RL_PRINTF(3, 4);
RL_DDP_HIDDEN double ddp_now_s(void);
RL_DDP_HIDDEN const char *ddp_dtype_name(ringlet_datatype_t t);
RL_DDP_HIDDEN int ddp_is_floating(ringlet_datatype_t t);
RL_DDP_HIDDEN size_t ddp_align_up(size_t x, size_t a);
RL_DDP_HIDDEN void *ddp_alloc_zero(size_t bytes);
RL_DDP_HIDDEN const char *ddp_tname(const tensor_t *t, const char *kind, int i, char *buf, size_t n);
RL_DDP_HIDDEN void ddp_format_shape(char *buf, size_t n, ringlet_datatype_t dtype, int memory, int ndim,
                                    const int64_t *shape);

/* memory.c: host memory at once, device memory on the DDP's stream */
/* Every call that queues device work runs between these two (the tensors' device current). */
RL_DDP_HIDDEN ringlet_result_t ddp_device_enter(struct ringlet_ddp *d, const char *fn, int *prev);
RL_DDP_HIDDEN void ddp_device_leave(int prev);
RL_DDP_HIDDEN void *ddp_dstream(const struct ringlet_ddp *d);
RL_DDP_HIDDEN int ddp_stream_other_device(const struct ringlet_ddp *d, void *stream);
RL_DDP_HIDDEN int ddp_same_memory(const struct ringlet_ddp *d, const void *g);
RL_DDP_HIDDEN void *ddp_mem_alloc(struct ringlet_ddp *d, size_t bytes);
RL_DDP_HIDDEN void ddp_mem_free(int on_device, void *p);
RL_DDP_HIDDEN void ddp_mem_copy(struct ringlet_ddp *d, void *dst, const void *src, size_t bytes);
RL_DDP_HIDDEN void ddp_mem_zero(struct ringlet_ddp *d, void *dst, size_t bytes);
RL_DDP_HIDDEN void ddp_mem_convert(struct ringlet_ddp *d, void *dst, ringlet_datatype_t dt, const void *src,
                                   ringlet_datatype_t st, size_t n, double scale);
RL_DDP_HIDDEN void ddp_mem_store_value(struct ringlet_ddp *d, void *dst, ringlet_datatype_t t, double v);
RL_DDP_HIDDEN double ddp_mem_load_value(struct ringlet_ddp *d, const void *src, ringlet_datatype_t t);

/* value.c: one element of host memory written from / read into a double */
RL_DDP_HIDDEN void rl_ddp_store_value(void *dst, ringlet_datatype_t dtype, double v);
RL_DDP_HIDDEN double rl_ddp_load_value(const void *src, ringlet_datatype_t dtype);

/* broadcast.c */
RL_DDP_HIDDEN ringlet_result_t ddp_bcast_tensors(struct ringlet_ddp *d, const tensor_t *ts, int n,
                                                 unsigned char *staging, size_t slot);
/* The staging slot that ddp_bcast_tensors needs for these tensors (the staging is two of
 * them): the bytes of those packed together, at most cap, at least ALIGN_BYTES. */
RL_DDP_HIDDEN size_t ddp_staging_slot(const tensor_t *ts, int n, size_t cap);
RL_DDP_HIDDEN ringlet_result_t ddp_sync_buffers(struct ringlet_ddp *d);

/* buckets.c */
RL_DDP_HIDDEN void ddp_free_buckets(int on_device, bucket_t *bs, int n);
RL_DDP_HIDDEN ringlet_result_t ddp_build_buckets(struct ringlet_ddp *d);
RL_DDP_HIDDEN void *ddp_slot_ptr(const struct ringlet_ddp *d, const tensor_t *p);
RL_DDP_HIDDEN void ddp_rebuild(struct ringlet_ddp *d);

/* step.c */
RL_DDP_HIDDEN void ddp_iter_fail(struct ringlet_ddp *d, ringlet_result_t rc, const char *msg);
RL_DDP_HIDDEN ringlet_result_t ddp_check_param(struct ringlet_ddp *d, int i, const char *fn);
/* Device memory: collects what the last finish left in flight (its requests, the error
 * flag) and reports its failures, naming fn. Nothing to do on host memory. */
RL_DDP_HIDDEN ringlet_result_t ddp_settle_previous(struct ringlet_ddp *d, const char *fn);

#define CHECK_DDP(d, fn)                                                                                               \
    do {                                                                                                               \
        if (!(d)) return ddp_set_error(NULL, RINGLET_ERR_INVALID_ARGUMENT, "%s: ddp is NULL", fn);                          \
    } while (0)

#endif
