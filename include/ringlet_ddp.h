/* ringlet DDP: data-parallel training on top of a ringlet communicator.
 *
 * The duties of PyTorch's DistributedDataParallel, in C, for any framework (the
 * Python package python/ringlet wraps it for PyTorch):
 *
 *   - construction (collective): every rank registers the same list of parameters
 *     (value + gradient) and buffers (BatchNorm statistics and the like). The ranks
 *     check that their lists agree (count, shape, dtype, memory kind, and the options
 *     that must agree); a mismatch is an error on every rank, with the same message
 *     naming the first difference. Then rank 0's values of every parameter and buffer
 *     are broadcast, packed into large flat messages.
 *   - gradients go into buckets in reverse registration order (the order backward
 *     produces them): a bucket is closed once it holds first_bucket_cap_bytes (the first
 *     bucket: small, so that communication starts early) or bucket_cap_bytes (the
 *     others) or more, as PyTorch's DDP does (the parameter that crosses the cap stays in
 *     it); one bucket holds one dtype. Optionally (rebuild_buckets) they are reassigned
 *     once in the order the gradients actually became ready. The framework reports
 *     "gradient i is ready" (ringlet_ddp_grad_ready); a small gradient is copied into
 *     its bucket; a large one (RINGLET_DDP_DIRECT_BYTES, default 1 MiB, or more;
 *     uncompressed) is all-reduced in place in its own memory, with no copy in or out.
 *     A bucket whose gradients are all in starts its all-reduces at once (non-blocking:
 *     the packed small gradients as one message, each large one as its own) while
 *     backward goes on. Buckets start in index order on every rank, so all ranks issue
 *     the same collectives in the same order. ringlet_ddp_finish waits for every bucket
 *     and leaves the averaged gradients in the gradients (no copy where the gradient is
 *     its bucket slot: gradient_as_bucket_view, ringlet_ddp_grad_view). Averaging is the
 *     all-reduce's RINGLET_AVG (sum, then divide by nranks); with float16/bfloat16
 *     compression the gradients are multiplied by 1/nranks before they are rounded.
 *   - before each forward, ringlet_ddp_pre_forward broadcasts the buffers from rank 0
 *     (broadcast_buffers) and tells whether the coming backward synchronises
 *     gradients (no_sync: iterations that only accumulate locally, then one that
 *     reduces the accumulated sum).
 *
 * One iteration, as a framework drives it:
 *
 *     ringlet_ddp_pre_forward(ddp, RINGLET_DDP_SYNC);   // RINGLET_DDP_NO_SYNC inside no_sync
 *     forward ...
 *     backward: after gradient i is accumulated: ringlet_ddp_grad_ready(ddp, i, grad_i);
 *     ringlet_ddp_finish(ddp);                          // at the end of backward
 *     optimizer step ...
 *
 * Errors: every call returns a ringlet_result_t; ringlet_ddp_last_error(ddp) gives the
 * message (ringlet_ddp_last_error(NULL): the calling thread's last error, for
 * ringlet_ddp_create). Usage errors (a gradient reported twice, a parameter that got no
 * gradient, calls out of order) are RINGLET_ERR_INVALID_USAGE with a message naming
 * the parameter. When a rank finds such an error in an iteration before its last
 * bucket has started, it still runs every bucket (so no rank waits forever) and the
 * other ranks' ringlet_ddp_finish fail too ("N other rank(s) reported a DDP usage error
 * in this iteration"); the next ringlet_ddp_pre_forward starts a clean iteration.
 *
 * Memory: tensors are host memory (RINGLET_DDP_HOST) or device memory of the device
 * backend (RINGLET_DDP_DEVICE: CUDA, or the simulated GPU), all of one kind. On device
 * memory the buckets and the broadcast staging are device memory too, and every copy
 * into and out of a bucket, the float16/bfloat16 compression, the averaging and the
 * collectives are queued on one stream (options.stream, or ringlet_ddp_set_stream; the
 * default stream otherwise), never through the host: ringlet_ddp_finish returns once
 * the gradients' write-back is queued (without waiting on the host), and work queued on
 * that stream afterwards (the optimizer) sees the reduced gradients. Without a device backend a device tensor makes
 * ringlet_ddp_create fail with RINGLET_ERR_INVALID_USAGE on every rank. Device tensors are
 * all of one device, current on the thread that calls ringlet_ddp_create (the buckets are
 * made there, and the default stream is its own): it fails on every rank otherwise
 * (RINGLET_ERR_INVALID_ARGUMENT for two devices, RINGLET_ERR_INVALID_USAGE for another
 * device current). The later calls make that device current themselves for their
 * duration (as NCCL does with a communicator's), so a thread with another device current,
 * or none chosen, may drive the iterations; they give the caller's device back, except to
 * a thread that had never chosen one, which stays on the tensors' device (as
 * ringlet_device_leave does). A stream given (options.stream, ringlet_ddp_set_stream)
 * must be of that device: one of another device fails create on every rank, and
 * set_stream on its rank (RINGLET_ERR_INVALID_ARGUMENT; the stream stays as it was).
 *
 * Threads: calls on one DDP object are serialised by a lock, so they may come from
 * different threads (autograd's), but not concurrently with ringlet_ddp_destroy. The
 * DDP object uses the communicator; do not destroy the communicator first. Other
 * collectives may be issued on the same communicator between iterations (not while
 * buckets are in flight, unless every rank issues them at the same point).
 *
 * Uses only include/ringlet.h.
 */
#ifndef RINGLET_DDP_H
#define RINGLET_DDP_H

#include <stddef.h>
#include <stdint.h>

#include "ringlet.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ringlet_ddp *ringlet_ddp_t;

typedef enum {
    RINGLET_DDP_HOST = 0,   /* host (CPU) memory */
    RINGLET_DDP_DEVICE = 1, /* device memory of the device backend (CUDA or the simulated GPU) */
} ringlet_ddp_memory_t;

typedef enum {
    RINGLET_DDP_COMPRESS_NONE = 0,
    RINGLET_DDP_COMPRESS_FLOAT16 = 1,  /* float32/float64 buckets travel as float16 */
    RINGLET_DDP_COMPRESS_BFLOAT16 = 2, /* float32/float64 buckets travel as bfloat16 */
} ringlet_ddp_compression_t;

/* One parameter or buffer. Contiguous, count elements of dtype. Parameters must have
 * a floating dtype (float16, bfloat16, float32, float64); buffers may have any. */
typedef struct {
    const char *name;            /* optional (copied), used in messages; NULL: "parameter 3" */
    void *data;                  /* the values (broadcast from rank 0 at construction) */
    void *grad;                  /* parameters: the gradient (count elements, same dtype); may be
                                    NULL and given later to ringlet_ddp_grad_ready. Ignored for buffers. */
    size_t count;                /* elements */
    ringlet_datatype_t dtype;
    ringlet_ddp_memory_t memory;
    int ndim;                    /* with shape: number of dimensions (0 = a scalar, count 1) */
    const int64_t *shape;        /* NULL: 1-D of count elements; else ndim sizes whose product is count.
                                    The shape takes part in the cross-rank check only. */
} ringlet_ddp_tensor_t;

typedef struct {
    size_t struct_size;              /* sizeof(ringlet_ddp_options_t); set by ringlet_ddp_options_init */
    size_t bucket_cap_bytes;         /* default 25 MiB */
    size_t first_bucket_cap_bytes;   /* default 1 MiB */
    int broadcast_buffers;           /* default 1: pre_forward broadcasts buffers from rank 0 */
    int average_gradients;           /* default 1: divide the summed gradients by the number of ranks */
    int find_unused_parameters;      /* default 0: parameters not reported ready by ringlet_ddp_finish
                                        are an error; 1: they count as unused (zero gradient, or
                                        the content of their gradient memory when it is given), and
                                        a parameter unused on every rank keeps its gradient untouched
                                        (with gradient_as_bucket_view, where the gradient is its
                                        bucket slot, it is all-reduced in place like the rest of
                                        the bucket: the average of what the ranks hold there, as
                                        in PyTorch's DDP) */
    int gradient_as_bucket_view;     /* default 0: 1 makes every parameter's gradient live in its
                                        bucket (ringlet_ddp_grad_view): no copy in and out */
    ringlet_ddp_compression_t compression; /* default RINGLET_DDP_COMPRESS_NONE */
    int init_sync;                   /* default 1: broadcast parameters and buffers from rank 0 at
                                        construction */
    int rebuild_buckets;             /* default 0: 1 reassigns the buckets once, at the end of the first
                                        synchronising iteration, in the order rank 0 reported its
                                        gradients (as PyTorch's DDP does), so that a bucket holds
                                        gradients that become ready together. The bucket memory moves
                                        then: fetch ringlet_ddp_grad_view again (gradients that were
                                        bucket views are moved with their content; the old memory stays
                                        valid until ringlet_ddp_free_retired or ringlet_ddp_destroy).
                                        When a rank cannot make
                                        the new buckets (memory), every rank keeps the old layout. */
    void *stream;                    /* default NULL (the default stream): device memory only, the
                                        stream the DDP orders its work on (a cudaStream_t); local to
                                        the rank (not compared). ringlet_ddp_set_stream changes it */
    int init_only_buffers;           /* default 0: the last N of the buffers are broadcast at
                                        construction only (with init_sync), never by pre_forward or
                                        ringlet_ddp_broadcast_buffers: frozen parameters (no gradient),
                                        which PyTorch's DDP makes rank 0's at construction and
                                        leaves alone after. 0 <= N <= nbuffers */
} ringlet_ddp_options_t;

/* Fills the defaults above. Pass the result (modified) to ringlet_ddp_create.
 * Environment (tuning; the same on every rank, checked with the registrations):
 *   RINGLET_DDP_BCAST_BYTES   (16 MiB) caps one coalesced broadcast message (two are in
 *                             flight; a tensor above half of it goes from its own memory)
 *   RINGLET_DDP_DIRECT_BYTES  (1 MiB) gradients this large are all-reduced in place rather
 *                             than copied into their bucket; 0: never */
void ringlet_ddp_options_init(ringlet_ddp_options_t *options);

/* Collective over comm: every rank calls it with its lists (same counts, shapes,
 * dtypes and memory kinds, in the same order) and options (the caps, broadcast_buffers,
 * average_gradients, find_unused_parameters, compression, init_sync and rebuild_buckets
 * must agree; gradient_as_bucket_view may differ). options NULL: defaults. On any error
 * every rank fails with the same message (argument errors found on one rank included), except
 * when ddp or comm is NULL (nothing is sent). The lists are copied; data and grad
 * pointers must stay valid (or be replaced through ringlet_ddp_set_buffer /
 * ringlet_ddp_grad_ready) while the object lives. */
ringlet_result_t ringlet_ddp_create(ringlet_ddp_t *ddp, ringlet_comm_t comm, const ringlet_ddp_tensor_t *params,
                                    int nparams, const ringlet_ddp_tensor_t *buffers, int nbuffers,
                                    const ringlet_ddp_options_t *options);
/* Local (not collective): waits for buckets still in flight, frees everything. The
 * bucket memory (ringlet_ddp_grad_view) goes with it. */
ringlet_result_t ringlet_ddp_destroy(ringlet_ddp_t ddp);
/* Message of the last error on this object (never NULL; "" when none); NULL: the
 * calling thread's last error (for ringlet_ddp_create). */
const char *ringlet_ddp_last_error(ringlet_ddp_t ddp);

/* ---- one iteration ---- */

/* Before each forward; grad_sync:
 *   RINGLET_DDP_SYNC (1)     the coming backward synchronises gradients (grad_ready and
 *                            finish are expected): starts a new iteration;
 *   RINGLET_DDP_NO_SYNC (0)  it only accumulates gradients locally (no_sync): grad_ready
 *                            and finish do nothing until the next pre_forward;
 *   RINGLET_DDP_NO_GRAD (2)  a forward that builds no graph (evaluation): the iteration
 *                            in progress, if any, is left as it is (but not one that
 *                            reported gradients and was not finished: below).
 * Buffers are broadcast from rank 0 when broadcast_buffers is on and the previous
 * forward was a RINGLET_DDP_SYNC one (or this is the first forward), as PyTorch's DDP
 * does: inside a no_sync block they are broadcast at its first forward only.
 * Collective when it broadcasts. Fails with RINGLET_ERR_INVALID_USAGE when the previous
 * synchronising iteration reported gradients but was not finished. */
#define RINGLET_DDP_NO_SYNC 0
#define RINGLET_DDP_SYNC 1
#define RINGLET_DDP_NO_GRAD 2
ringlet_result_t ringlet_ddp_pre_forward(ringlet_ddp_t ddp, int grad_sync);
/* Broadcasts every buffer from rank 0 now (collective), whatever the options (except the
 * init_only_buffers). */
ringlet_result_t ringlet_ddp_broadcast_buffers(ringlet_ddp_t ddp);
/* Buffer index now lives at data (a framework that reallocated it). */
ringlet_result_t ringlet_ddp_set_buffer(ringlet_ddp_t ddp, int index, void *data);

/* Gradient of parameter index holds this iteration's (accumulated) gradient. grad: where
 * it is (also where finish writes the result; from then on the registered gradient);
 * NULL: the gradient registered before. A small gradient is copied into its bucket now;
 * a large one (see above) is all-reduced in place, so its memory must be left alone until
 * ringlet_ddp_finish returns (frameworks do not touch a finished gradient during
 * backward). When the gradient completes its bucket and every bucket before it is
 * complete, those buckets' all-reduces start. Reporting a parameter twice in one
 * iteration is RINGLET_ERR_INVALID_USAGE (naming it). After a RINGLET_DDP_NO_SYNC
 * pre_forward it only notes the use (and grad): with find_unused_parameters, a parameter
 * used in a no_sync iteration counts as used at the next synchronising one, as in
 * PyTorch's DDP (its accumulated gradient is reduced even if that iteration reports it
 * unused). */
ringlet_result_t ringlet_ddp_grad_ready(ringlet_ddp_t ddp, int index, void *grad);
/* Parameter index got no gradient in this iteration (it was not used by the forward):
 * it contributes the content of grad, or zeros when grad is NULL; the result goes to grad,
 * or with NULL to the gradient registered before (create, grad_ready), which must then
 * still be valid memory: a framework that drops its gradients (PyTorch's
 * zero_grad(set_to_none=True)) passes memory of its own (the bucket view, zeroed). With
 * find_unused_parameters the parameter counts as locally unused. */
ringlet_result_t ringlet_ddp_grad_unused(ringlet_ddp_t ddp, int index, void *grad);
/* The framework could not give parameter index's gradient in this iteration (its hook
 * failed: a sparse gradient, no memory): it contributes zeros, its gradient memory is not
 * written, and the iteration fails at finish on every rank, this one with
 * RINGLET_ERR_INVALID_USAGE naming the parameter and why (may be NULL), the others saying
 * that a rank reported a usage error, as for a parameter that got no gradient; with
 * find_unused_parameters too (a parameter never reported would otherwise be taken as
 * unused, its registered gradient read). Returns RINGLET_SUCCESS once noted. After a
 * RINGLET_DDP_NO_SYNC pre_forward nothing is reduced and nothing is noted: the gradient
 * the framework accumulates locally is its own to mend. */
ringlet_result_t ringlet_ddp_grad_failed(ringlet_ddp_t ddp, int index, const char *why);
/* End of backward: starts the buckets not started yet, waits for all, and leaves the
 * averaged gradients in every parameter's gradient memory. On device memory it does not
 * wait: the write-backs are queued on the DDP's stream behind the all-reduces, so work
 * queued on that stream afterwards sees the results; failures of the all-reduces and
 * usage errors of other ranks are then reported by the next call (pre_forward, naming
 * the previous iteration). With find_unused_parameters, and in the first iteration with
 * rebuild_buckets, it waits on device memory too (the host decides from the results). A parameter neither ready
 * nor unused is an error naming it (its gradient memory is left alone: the framework may
 * have freed it), unless find_unused_parameters is on (then it is unused). Does nothing
 * after pre_forward(ddp, 0). */
ringlet_result_t ringlet_ddp_finish(ringlet_ddp_t ddp);

/* Device memory: the stream of the next iterations (the framework's current stream;
 * NULL: the default stream). Between iterations only (not while buckets are in flight).
 * A change of stream waits on the host until the work queued on the previous one (the
 * last iteration's write-backs) is done: the new stream refills the same buckets. */
ringlet_result_t ringlet_ddp_set_stream(ringlet_ddp_t ddp, void *stream);

/* Frees the bucket memory a rebuild (rebuild_buckets) replaced, once the caller holds no
 * view of it (ringlet_ddp_grad_view and bucket_info before the rebuild): until then it
 * stays, so that such a view never points into freed memory. Local; on device memory it
 * waits for the DDP's stream first (the rebuild's copies out of it). *bytes (may be NULL):
 * how much bucket memory it freed (0: no rebuild replaced any, or it was freed before). */
ringlet_result_t ringlet_ddp_free_retired(ringlet_ddp_t ddp, size_t *bytes);

/* ---- introspection ---- */

/* The bucket memory of parameter index's gradient (count elements of its dtype). Valid
 * while the object lives; with gradient_as_bucket_view it is the parameter's gradient. */
ringlet_result_t ringlet_ddp_grad_view(ringlet_ddp_t ddp, int index, void **view);
/* After finish with find_unused_parameters: 1 when some rank used the parameter in
 * that iteration (its gradient was written), 0 when none did (untouched). Without
 * find_unused_parameters: always 1. */
ringlet_result_t ringlet_ddp_param_used(ringlet_ddp_t ddp, int index, int *used);
ringlet_result_t ringlet_ddp_num_buckets(ringlet_ddp_t ddp, int *nbuckets);
/* Bucket index and element offset of parameter index. */
ringlet_result_t ringlet_ddp_param_bucket(ringlet_ddp_t ddp, int index, int *bucket, size_t *offset);

typedef struct {
    void *memory;             /* the bucket (count elements of dtype) */
    size_t count;             /* elements: the slots ([small ones][flag][large ones]), alignment gaps */
    ringlet_datatype_t dtype; /* of the parameters */
    ringlet_datatype_t wire_dtype; /* what travels (differs with compression) */
    int nparams;
    int first_param, last_param; /* lowest and highest parameter index in it */
    /* Last synchronising iteration (CLOCK_MONOTONIC seconds, as Python's time.monotonic()): */
    double launch_time;       /* its all-reduce was issued */
    double complete_time;     /* it was first seen complete (polled at each report, or finish's wait) */
    double done_time;         /* finish wrote its gradients back */
} ringlet_ddp_bucket_info_t;
ringlet_result_t ringlet_ddp_bucket_info(ringlet_ddp_t ddp, int bucket, ringlet_ddp_bucket_info_t *info);

typedef struct {
    uint64_t iterations;          /* synchronising iterations finished */
    double finish_start_time;     /* last finish: entered (the end of backward) */
    double finish_end_time;       /*             returned */
    int buckets_before_finish;    /* last finish: buckets already launched when it was entered */
    uint64_t buffer_broadcasts;   /* pre_forward / ringlet_ddp_broadcast_buffers calls that broadcast */
    uint64_t bucket_rebuilds;     /* 1 after rebuild_buckets changed the assignment, else 0 */
} ringlet_ddp_stats_t;
ringlet_result_t ringlet_ddp_stats(ringlet_ddp_t ddp, ringlet_ddp_stats_t *stats);

#ifdef __cplusplus
}
#endif
#endif /* RINGLET_DDP_H */
