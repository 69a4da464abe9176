/* Public entry points: argument checks, requests, test and wait. Every argument error
 * is local (no peer is contacted), leaves the communicator usable, and names the
 * argument in ringlet_comm_last_error. */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm.h"
#include "devcomm.h"
#include "device.h"
#include "failure.h"
#include "group_aside.h"
#include "log.h"
#include "names.h"
#include "p2p.h"
#include "progress.h"
#include "util.h"
#include "wait.h"

const char *ringlet_version(void) { return "0.1.0"; }

/* Usable communicator? Aborted and failed ones answer with their error. */
static ringlet_result_t check_comm(struct ringlet_comm *c, const char *fn) {
    if (!c) return rl_error(NULL, RINGLET_ERR_INVALID_ARGUMENT, "%s: comm is NULL", fn);
    ringlet_result_t rc = rl_comm_forked(c, fn);
    if (rc) return rc;
    if (atomic_load(&c->aborted))
        return rl_error(c, RINGLET_ERR_INVALID_USAGE, "%s: the communicator was aborted (destroy it)", fn);
    if (atomic_load(&c->failed)) {
        char msg[RL_MSG_MAX];
        ringlet_result_t code = rl_comm_failure(c, msg, sizeof msg);
        return rl_error(c, code, "%s: the communicator failed earlier: %.400s", fn, msg);
    }
    return RINGLET_SUCCESS;
}

#define QUERY(name, field)                                                                                             \
    ringlet_result_t ringlet_comm_##name(ringlet_comm_t c, int *out) {                                                 \
        if (!c) return rl_error(NULL, RINGLET_ERR_INVALID_ARGUMENT, "comm_" #name ": comm is NULL");                   \
        if (!out) return rl_error(c, RINGLET_ERR_INVALID_ARGUMENT, "comm_" #name ": output pointer is NULL");          \
        *out = c->field;                                                                                               \
        return RINGLET_SUCCESS;                                                                                        \
    }
QUERY(rank, rank)
QUERY(size, nranks)
QUERY(local_rank, local_rank)
QUERY(local_size, local_size)

/* What a call hands to the queue, checked. */
typedef struct {
    rl_op_kind kind;
    const void *sendbuf;
    void *recvbuf;
    size_t count;
    ringlet_datatype_t dtype;
    ringlet_op_t op;
    int root, peer;
    void *stream;
} call_t;

static int reduces(rl_op_kind k) { return k == RL_OP_ALLREDUCE || k == RL_OP_REDUCE || k == RL_OP_REDUCE_SCATTER; }

/* The user op (premul sum) behind op, or NULL for a built-in op; *bad when op is neither
 * (or a user op of another datatype). */
static int user_op(struct ringlet_comm *c, ringlet_op_t op, ringlet_datatype_t dt, rl_userop *out) {
    if ((unsigned)op < RINGLET_NUM_OPS) return 0;
    unsigned id = (unsigned)op - RINGLET_NUM_OPS;
    int ok = 0;
    pthread_mutex_lock(&c->ops_mu);
    if (id < RL_MAX_USER_OPS && c->userops[id].live && c->userops[id].dtype == dt) {
        ok = 1;
        if (out) *out = c->userops[id];
    }
    pthread_mutex_unlock(&c->ops_mu);
    return ok ? 1 : -1;
}

/* The calls of this thread between group_start and group_end (groups below). */
typedef struct {
    struct ringlet_comm *c;
    rl_subop op;
} grouped_t;

static _Thread_local struct {
    int depth;
    grouped_t *ops;
    int n, cap;
    ringlet_result_t refused; /* a call of the group was refused: group_end runs none of it */
    char why[RL_MSG_MAX];
} t_group;

static int stream_home(struct ringlet_comm *c, const void *stream, int device);

/* A stream being captured into a CUDA graph (stream capture) would capture what the call
 * does on it, and the host side of the call (sockets, the peers) cannot be in a graph:
 * refused before anything touches the stream, so that the capture stays valid. */
static ringlet_result_t check_capture(struct ringlet_comm *c, const char *fn, const call_t *a) {
    void *stream = a->stream;
    const rl_device_ops *d = stream ? rl_device() : NULL;
    int capturing = 0, dev = -1, saved = -1;
    if (!d) return RINGLET_SUCCESS;
    /* Asked on the stream's device: the runtime makes a context on the thread's current
     * device for the call, and a thread that never chose one is on device 0. A default
     * stream handle is the call's device's (stream_home). */
    int bufdev = rl_dev_ptr_device(a->sendbuf);
    if (bufdev < 0) bufdev = rl_dev_ptr_device(a->recvbuf);
    int home = stream_home(c, stream, bufdev);
    int rc = (home >= 0 ? (dev = home, RL_DEV_OK) : d->stream_device((rl_dev_stream_t)stream, &dev)) == RL_DEV_OK &&
                     d->device_enter(dev, &saved) == RL_DEV_OK
                 ? d->stream_capturing((rl_dev_stream_t)stream, &capturing)
                 : RL_DEV_ERR;
    if (dev >= 0) d->device_leave(saved);
    if (rc != RL_DEV_OK) return rl_error(c, RINGLET_ERR_CUDA, "%s: %s", fn, rl_dev_error());
    if (capturing)
        return rl_error(c, RINGLET_ERR_INVALID_USAGE,
                        "%s: the stream is capturing a CUDA graph (stream capture); ringlet's calls cannot be "
                        "captured: make the call outside the capture",
                        fn);
    return RINGLET_SUCCESS;
}

/* sendbuf and recvbuf may overlap only in the call's in-place form (ringlet.h): otherwise
 * the algorithms read blocks of sendbuf that they already wrote through recvbuf, and a
 * device copy between overlapping ranges is undefined in CUDA (cudaMemcpyAsync), so the
 * result would be wrong data, not an error. one: a block's bytes; all: nranks blocks for
 * the calls that take them, else one. */
static ringlet_result_t check_overlap(struct ringlet_comm *c, const call_t *a, size_t one, size_t all, int is_root) {
    uintptr_t s = (uintptr_t)a->sendbuf, r = (uintptr_t)a->recvbuf;
    size_t slen = one, rlen = one;
    int me = is_root ? a->root : c->rank; /* the block that is this rank's own */
    int in_place = s == r;
    const char *form = "sendbuf == recvbuf";
    switch (a->kind) {
    case RL_OP_ALLGATHER:
    case RL_OP_GATHER:
        rlen = all;
        in_place = s == r + (uintptr_t)me * one;
        form = a->kind == RL_OP_GATHER ? "the root's sendbuf == recvbuf + root * count elements"
                                       : "sendbuf == recvbuf + rank * sendcount elements";
        break;
    case RL_OP_REDUCE_SCATTER:
    case RL_OP_SCATTER:
        slen = all;
        in_place = r == s + (uintptr_t)me * one;
        form = a->kind == RL_OP_SCATTER ? "the root's recvbuf == sendbuf + root * count elements"
                                        : "recvbuf == sendbuf + rank * recvcount elements";
        break;
    case RL_OP_ALLTOALL:
        slen = rlen = all;
        break;
    default:
        break;
    }
    if (in_place || !rl_ranges_overlap(a->sendbuf, slen, a->recvbuf, rlen)) return RINGLET_SUCCESS;
    return rl_error(c, RINGLET_ERR_INVALID_ARGUMENT,
                    "%s: sendbuf (%p, %zu bytes) and recvbuf (%p, %zu bytes) overlap, and not in the in-place form "
                    "(%s)",
                    rl_op_name(a->kind), a->sendbuf, slen, a->recvbuf, rlen, form);
}

static ringlet_result_t check_call(struct ringlet_comm *c, call_t *a) {
    const char *fn = rl_op_name(a->kind);
    ringlet_result_t rc = check_comm(c, fn);
    if (rc || (rc = check_capture(c, fn, a))) return rc;
    if (a->kind == RL_OP_BARRIER) return RINGLET_SUCCESS;
    size_t es = ringlet_datatype_size(a->dtype);
    if (!es) return rl_error(c, RINGLET_ERR_INVALID_ARGUMENT, "%s: datatype %d is not a ringlet_datatype_t", fn, (int)a->dtype);
    if (reduces(a->kind) && user_op(c, a->op, a->dtype, NULL) < 0)
        return rl_error(c, RINGLET_ERR_INVALID_ARGUMENT,
                        "%s: op %d is not a ringlet_op_t nor a pre-multiplied sum of this communicator for %s", fn,
                        (int)a->op, rl_dtype_name(a->dtype));
    int rooted = a->kind == RL_OP_BROADCAST || a->kind == RL_OP_REDUCE || a->kind == RL_OP_GATHER ||
                 a->kind == RL_OP_SCATTER;
    if (rooted && (a->root < 0 || a->root >= c->nranks))
        return rl_error(c, RINGLET_ERR_INVALID_ARGUMENT, "%s: root %d is out of range [0, %d)", fn, a->root, c->nranks);
    int is_root = rooted && a->root == c->rank;
    int needs_send = a->kind != RL_OP_RECV && ((a->kind != RL_OP_BROADCAST && a->kind != RL_OP_SCATTER) || is_root);
    int needs_recv = a->kind != RL_OP_SEND && ((a->kind != RL_OP_REDUCE && a->kind != RL_OP_GATHER) || is_root);
    /* A buffer this rank does not use (a broadcast's or scatter's sendbuf, a reduce's or
     * gather's recvbuf, off the root) is as if NULL, as NCCL documents: one process's ranks
     * of several devices often pass the root's there, of another device. */
    if (rooted && !needs_send) a->sendbuf = NULL;
    if (rooted && !needs_recv) a->recvbuf = NULL;
    /* This rank itself is a peer inside a group only (its send and receive meet there). */
    if ((a->kind == RL_OP_SEND || a->kind == RL_OP_RECV) &&
        (a->peer < 0 || a->peer >= c->nranks || (a->peer == c->rank && !t_group.depth)))
        return rl_error(c, RINGLET_ERR_INVALID_ARGUMENT, "%s: peer %d is out of range [0, %d)%s", fn, a->peer,
                        c->nranks, a->peer == c->rank ? " or is this rank (allowed inside a group only)" : "");
    /* These touch nranks blocks of count elements on one side or both. */
    size_t blocks = (a->kind == RL_OP_ALLGATHER || a->kind == RL_OP_REDUCE_SCATTER || a->kind == RL_OP_ALLTOALL ||
                     a->kind == RL_OP_GATHER || a->kind == RL_OP_SCATTER)
                        ? (size_t)c->nranks
                        : 1;
    size_t span; /* no divisions here (tens of cycles each, in every call) */
    if (__builtin_mul_overflow(a->count, es * blocks, &span) || span > (size_t)PTRDIFF_MAX)
        return rl_error(c, RINGLET_ERR_INVALID_ARGUMENT, "%s: count %zu of %zu-byte elements%s overflows the address space",
                        fn, a->count, es, blocks > 1 ? " times nranks" : "");
    if (a->count == 0) return RINGLET_SUCCESS;
    if (needs_send && !a->sendbuf) return rl_error(c, RINGLET_ERR_INVALID_ARGUMENT, "%s: sendbuf is NULL", fn);
    if (needs_recv && !a->recvbuf) return rl_error(c, RINGLET_ERR_INVALID_ARGUMENT, "%s: recvbuf is NULL", fn);
    /* The reduction kernels load whole elements (reduce.h): on a GPU a misaligned operand is
     * a "misaligned address" fault that leaves the device unusable, on the CPU undefined. */
    if (reduces(a->kind)) {
        const char *bad = needs_send && (uintptr_t)a->sendbuf & (es - 1) ? "sendbuf" /* es: a power of two */
                          : needs_recv && (uintptr_t)a->recvbuf & (es - 1) ? "recvbuf"
                                                                      : NULL;
        if (bad)
            return rl_error(c, RINGLET_ERR_INVALID_ARGUMENT,
                            "%s: %s at %p is not aligned to its %zu-byte %s elements (a reduction needs "
                            "element-aligned buffers)",
                            fn, bad, bad[0] == 's' ? a->sendbuf : (const void *)a->recvbuf, es,
                            rl_dtype_name(a->dtype));
    }
    if (needs_send && needs_recv) return check_overlap(c, a, a->count * es, span, is_root);
    return RINGLET_SUCCESS;
}

/* The device of the call's buffers (device layer), -1 for host memory; mixing is an
 * error. */
static ringlet_result_t buffers_device(struct ringlet_comm *c, const call_t *a, int *device) {
    /* With no backend, device memory all the same (a CUDA of the program's own, device.h):
     * the host path would fault on it. */
    int unserved = rl_dev_unserved_pair(a->sendbuf, a->recvbuf);
    if (unserved)
        return rl_error(c, RINGLET_ERR_CUDA, "%s: %s is device memory, but ringlet has no device backend: %s",
                        rl_op_name(a->kind), unserved == 1 ? "sendbuf" : "recvbuf", rl_device_unavailable());
    int ds = rl_dev_ptr_device(a->sendbuf), dr = rl_dev_ptr_device(a->recvbuf);
    *device = ds >= 0 ? ds : dr;
    if (a->sendbuf && a->recvbuf && ds != dr)
        return rl_error(c, RINGLET_ERR_INVALID_ARGUMENT,
                        "%s: sendbuf is %s memory and recvbuf is %s memory; both must be on the same device or the host",
                        rl_op_name(a->kind), ds >= 0 ? "device" : "host", dr >= 0 ? "device" : "host");
    /* Device buffers and a stream of another device: refused, as CUDA refuses NCCL's kernel
     * there (the stream's device was never made ready, its hold undecided). A default
     * stream handle is taken on the buffers' device (stream_home). */
    int sd = -1;
    const rl_device_ops *d = *device >= 0 && a->stream && !rl_dev_stream_is_current(a->stream) ? rl_device() : NULL;
    if (d && d->stream_device((rl_dev_stream_t)a->stream, &sd) == RL_DEV_OK && sd != *device)
        return rl_error(c, RINGLET_ERR_INVALID_ARGUMENT,
                        "%s: the buffers are on device %d and the stream is of device %d; use a stream of the "
                        "buffers' device",
                        rl_op_name(a->kind), *device, sd);
    /* A device scalar is read on the buffers' device, by the device path: refused here
     * rather than found when the call runs (a failure there fails the communicator). */
    rl_userop u;
    if (reduces(a->kind) && a->op >= RINGLET_NUM_OPS && a->count && *device < 0 &&
        user_op(c, a->op, a->dtype, &u) == 1 && u.on_device)
        return rl_error(c, RINGLET_ERR_INVALID_ARGUMENT,
                        "%s: op %d is a pre-multiplied sum with a device scalar (RINGLET_SCALAR_DEVICE), which needs "
                        "device buffers; these are host memory",
                        rl_op_name(a->kind), (int)a->op);
    return RINGLET_SUCCESS;
}

/* A request's operation from a checked call (links and completion state left alone). */
static void request_set(struct ringlet_request *r, struct ringlet_comm *c, const call_t *a, int device) {
    r->comm = c;
    r->kind = a->kind;
    r->sendbuf = a->sendbuf;
    r->recvbuf = a->recvbuf;
    r->count = a->count;
    r->dtype = a->dtype;
    r->op = a->op;
    r->root = a->root;
    r->peer = a->peer;
    r->device = device;
    r->stream = a->stream;
    if (user_op(c, a->op, a->dtype, &r->premul) != 1) r->premul.live = 0;
}

/* A send or receive on host memory, no stream: posted from the caller's thread when the
 * queue is idle (rl_comm_try_post); waits_now: the caller waits for it at once, else the
 * transports' threads take over what only polling would move (as after the progress
 * thread posts one), since the caller may block elsewhere first. */
static int post_here(struct ringlet_comm *c, struct ringlet_request *r, int waits_now) {
    if ((r->kind != RL_OP_SEND && r->kind != RL_OP_RECV) || r->stream || r->device >= 0 || !c->inline_ok ||
        !rl_comm_try_post(c, r))
        return 0;
    r->posted_here = 1;
    if (!waits_now) {
        rl_comm_park(c);
        rl_comm_watch_posted(c);
    }
    return 1;
}

static ringlet_result_t submit_counted(struct ringlet_comm *c, call_t *a, ringlet_request_t *out, int waits_now);

/* A call under way counts as a waiter (rl_conn_wait_idle): an abort from another thread
 * lets it leave before it tears the communicator down. */
static ringlet_result_t submit(struct ringlet_comm *c, call_t *a, ringlet_request_t *out, int waits_now) {
    if (!c) return submit_counted(c, a, out, waits_now); /* refused there */
    atomic_fetch_add(&c->waiters, 1);
    ringlet_result_t rc = submit_counted(c, a, out, waits_now);
    atomic_fetch_sub(&c->waiters, 1);
    return rc;
}

/* A stream handle that names a stream of the current device (device.h: the default and
 * per-thread streams) is taken on the call's own device, as NCCL takes stream 0 on its
 * communicator's: the buffers' device, or the communicator's for host buffers, made current
 * while the call is queued (every use of the stream is on the calling thread, then).
 * Returns the device to enter, or -1 (any other stream, or no device). */
static int stream_home(struct ringlet_comm *c, const void *stream, int device) {
    if (!stream || !rl_dev_stream_is_current(stream) || !rl_device()) return -1;
    if (device >= 0) return device;
    int dev = -1;
    return ringlet_comm_device(c, &dev) == RINGLET_SUCCESS ? dev : -1;
}

static ringlet_result_t submit_counted(struct ringlet_comm *c, call_t *a, ringlet_request_t *out, int waits_now) {
    if (out) *out = NULL;
    ringlet_result_t rc = check_call(c, a);
    if (rc) return rc;
    int device;
    if ((rc = buffers_device(c, a, &device))) return rc;
    struct ringlet_request *r = calloc(1, sizeof *r);
    if (!r) return rl_error(c, RINGLET_ERR_SYSTEM, "%s: out of memory for a request", rl_op_name(a->kind));
    request_set(r, c, a, device);
    if (reduces(a->kind) && a->op >= RINGLET_NUM_OPS && !r->premul.live) { /* destroyed since check_call */
        free(r);
        return rl_error(c, RINGLET_ERR_INVALID_ARGUMENT, "%s: op %d was destroyed during the call", rl_op_name(a->kind),
                        (int)a->op);
    }
    r->detached = out == NULL;
    /* Tracked before it is queued: the progress thread never sees the links change. */
    if (out) rl_comm_track(c, r, 1);
    char err[RL_MSG_MAX];
    /* Read before the progress thread may free a detached request. */
    void *stream = r->stream;
    uint64_t seq = 0;
    r->seq_out = &seq;
    if (out && post_here(c, r, waits_now)) {
        *out = r;
        return RINGLET_SUCCESS;
    }
    int home = stream_home(c, stream, device), saved = -1;
    if (home >= 0 && rl_device()->device_enter(home, &saved) != RL_DEV_OK) {
        if (out) rl_comm_track(c, r, 0);
        rl_request_free(r);
        return rl_error(c, RINGLET_ERR_CUDA, "%s: selecting device %d for its default stream: %s", rl_op_name(a->kind),
                        home, rl_dev_error());
    }
    if ((rc = rl_comm_enqueue(c, r, err))) {
        if (home >= 0) rl_device()->device_leave(saved);
        if (out) rl_comm_track(c, r, 0);
        rl_request_free(r);
        return rl_error(c, rc, "%s: %s", rl_op_name(a->kind), err);
    }
    if (out) *out = r;
    /* A stream that is not held (RINGLET_STREAM_HOLD=sync): the call returns once its
     * operation is done. A request reports its failure itself, when waited for. */
    if (stream) rc = rl_devcomm_sync(c, &stream, 1, seq, err);
    if (home >= 0) rl_device()->device_leave(saved);
    if (rc && !out) return rl_error(c, rc, "%s: %s", rl_op_name(a->kind), err);
    return RINGLET_SUCCESS;
}

/* Done? Posted point-to-point requests complete from their pieces. */
static int request_done(struct ringlet_request *r) {
    if (atomic_load_explicit(&r->done, memory_order_acquire)) return 1;
    /* threadless transports move when someone waits; not once an abort began: the caller
     * counted itself a waiter first, so either the abort's teardown waits for it or it
     * sees the abort here and leaves the transports alone (they may be going) */
    if (!atomic_load(&r->comm->aborted)) rl_comm_progress(r->comm);
    return rl_p2p_test(r);
}

static ringlet_result_t complete(struct ringlet_request **req) {
    struct ringlet_request *r = *req;
    ringlet_result_t rc = r->result;
    if (rc != RINGLET_SUCCESS) rl_error(r->comm, rc, "%s", r->err);
    rl_comm_track(r->comm, r, 0);
    rl_request_free(r);
    *req = NULL;
    return rc;
}

/* A posted point-to-point request past RINGLET_TIMEOUT (collectives have their deadline in
 * the progress thread): the communicator fails, naming the call, and the request ends
 * with that error. Non-zero if it did. */
static int posted_overdue(struct ringlet_comm *c, struct ringlet_request *r) {
    if (!atomic_load(&r->posted) || rl_now() - r->posted_at <= c->timeout_s) return 0;
    char stall[RL_ERR_MAX];
    rl_comm_fail(c, RINGLET_ERR_TIMEOUT, "%s #%llu with rank %d: not done after %.0f s (RINGLET_TIMEOUT)%s",
                 rl_op_name(r->kind), (unsigned long long)r->seq, r->peer, c->timeout_s,
                 rl_p2p_stall(r, stall, sizeof stall));
    rl_p2p_drain(r);
    return 1;
}

/* The group's calls on c no longer count as waiters on it (ringlet_group_end). */
static void group_release(grouped_t *ops, int n, struct ringlet_comm *c) {
    for (int j = 0; j < n; j++)
        if (ops[j].c == c) atomic_fetch_sub(&c->waiters, 1);
}

/* complete, then no longer a waiter: while counted, a destroy from another thread (after
 * an abort) frees neither the request nor c under it (lifecycle.c waits for the waiters). */
static ringlet_result_t complete_leave(struct ringlet_comm *c, struct ringlet_request **req) {
    ringlet_result_t rc = complete(req);
    atomic_fetch_sub(&c->waiters, 1);
    return rc;
}

ringlet_result_t ringlet_test(ringlet_request_t *req, int *done) {
    if (!req || !*req) return rl_error(NULL, RINGLET_ERR_INVALID_ARGUMENT, "test: request is NULL");
    if (!done) return rl_error((*req)->comm, RINGLET_ERR_INVALID_ARGUMENT, "test: done is NULL");
    struct ringlet_comm *c = (*req)->comm;
    ringlet_result_t rc = rl_comm_forked(c, "test");
    if (rc) return *done = 0, rc; /* final: the request never completes here */
    atomic_fetch_add(&c->waiters, 1);
    *done = request_done(*req);
    /* A caller that only polls (torch's is_completed) meets the deadline here. */
    if (!*done && posted_overdue(c, *req)) *done = request_done(*req);
    if (*done) return complete_leave(c, req);
    atomic_fetch_sub(&c->waiters, 1);
    return RINGLET_SUCCESS;
}

ringlet_result_t ringlet_wait(ringlet_request_t *req) {
    if (!req || !*req) return rl_error(NULL, RINGLET_ERR_INVALID_ARGUMENT, "wait: request is NULL");
    struct ringlet_request *r = *req;
    struct ringlet_comm *c = r->comm;
    ringlet_result_t forked = rl_comm_forked(c, "wait");
    if (forked) return forked;
    atomic_fetch_add(&c->waiters, 1);
    for (;;) {
        if (atomic_load(&c->aborted)) {
            /* the teardown fails what is still posted; its doorbell may be gone already */
            if (request_done(r)) return complete_leave(c, req);
            rl_sleep_ms(1);
            continue;
        }
        unsigned gen = rl_comm_gen(c);
        if (request_done(r)) return complete_leave(c, req);
        if (posted_overdue(c, r)) continue;
        /* Posted by this thread and the progress thread idle: nothing but this wait moves
         * it, as in a collective run on the caller's thread (wait.c: no yields, and a TCP
         * waiter bound alone polls longer). Else the progress thread may need the core. */
        if (r->posted_here && rl_comm_idle(c)) {
            rl_comm_set_inline(1);
            rl_comm_wait_peer(c, gen, 100);
            rl_comm_set_inline(0);
        } else {
            rl_comm_wait_event(c, gen, 100);
        }
    }
}

/* ---- groups: the calls of this thread between group_start and group_end ---- */

static ringlet_result_t group_record(struct ringlet_comm *c, call_t *a);

/* A call inside a group is recorded; one refused spoils the group (as NCCL's group fails
 * whole): running the rest would pair this rank's calls with the wrong ones elsewhere. */
static ringlet_result_t group_add(struct ringlet_comm *c, call_t *a) {
    ringlet_result_t rc = group_record(c, a);
    if (rc && !t_group.refused) {
        t_group.refused = rc;
        snprintf(t_group.why, sizeof t_group.why, "%s", ringlet_comm_last_error(NULL));
    }
    return rc;
}

static ringlet_result_t group_record(struct ringlet_comm *c, call_t *a) {
    ringlet_result_t rc = check_call(c, a);
    int device;
    if (rc || (rc = buffers_device(c, a, &device))) return rc;
    if (t_group.n == t_group.cap) {
        int cap = t_group.cap ? 2 * t_group.cap : 16;
        grouped_t *ops = realloc(t_group.ops, sizeof *ops * (size_t)cap);
        if (!ops) return rl_error(c, RINGLET_ERR_SYSTEM, "%s: out of memory recording a group", rl_op_name(a->kind));
        t_group.ops = ops;
        t_group.cap = cap;
    }
    grouped_t *g = &t_group.ops[t_group.n++];
    *g = (grouped_t){c, {a->kind, a->sendbuf, a->recvbuf, a->count, a->dtype, a->op, a->root, a->peer, device, a->stream,
                         {0}}};
    /* A pre-multiplied sum is taken as it is now: the op may be destroyed before group_end
     * (NCCL's users destroy it as soon as the call returns); one destroyed by another
     * thread since check_call is refused, not run as an unknown op. */
    if (user_op(c, a->op, a->dtype, &g->op.premul) != 1) g->op.premul.live = 0;
    if (reduces(a->kind) && a->op >= RINGLET_NUM_OPS && !g->op.premul.live) {
        t_group.n--;
        return rl_error(c, RINGLET_ERR_INVALID_ARGUMENT, "%s: op %d was destroyed during the call", rl_op_name(a->kind),
                        (int)a->op);
    }
    return RINGLET_SUCCESS;
}

int rl_group_set_aside(void) {
    int depth = t_group.depth;
    t_group.depth = 0;
    return depth;
}

void rl_group_restore(int depth) { t_group.depth = depth; }

int rl_group_forget(struct ringlet_comm *c) {
    int k = 0;
    for (int i = 0; i < t_group.n; i++)
        if (t_group.ops[i].c != c) t_group.ops[k++] = t_group.ops[i];
    int dropped = t_group.n - k;
    t_group.n = k;
    if (dropped && !t_group.refused) {
        t_group.refused = RINGLET_ERR_INVALID_USAGE;
        snprintf(t_group.why, sizeof t_group.why,
                 "its communicator was destroyed with %d call(s) of the group recorded, before the group's end", dropped);
    }
    return dropped;
}

ringlet_result_t ringlet_group_start(void) {
    if (!t_group.depth++) t_group.refused = RINGLET_SUCCESS;
    return RINGLET_SUCCESS;
}

/* What group_end holds once every communicator's group is queued. */
typedef struct {
    struct ringlet_comm *c;
    uint64_t seq;
    int n;
    int home; /* the device entered for its default streams (stream_home), or -1 */
    void *streams[1 + RL_GROUP_MAX_STREAMS];
} held_t;

/* The group's calls on one communicator as one request; waited for (*wait) unless they
 * are on device memory and every call has a stream. group_precheck has refused calls on
 * two kinds of memory and too many streams. */
static ringlet_result_t group_submit(struct ringlet_comm *c, const grouped_t *ops, int n, ringlet_request_t *wait,
                                     held_t *held) {
    *wait = NULL;
    held->n = 0;
    ringlet_result_t rc = check_comm(c, "group_end");
    if (rc) return rc;
    struct ringlet_request *r = calloc(1, sizeof *r);
    rl_subop *sub = calloc((size_t)n, sizeof *sub);
    if (!r || !sub) {
        free(r), free(sub);
        return rl_error(c, RINGLET_ERR_SYSTEM, "group_end: out of memory");
    }
    int any_null = 0;
    r->comm = c;
    r->kind = RL_OP_GROUP;
    r->device = ops[0].op.device;
    for (int i = 0; i < n; i++) {
        sub[i] = ops[i].op;
        void *st = sub[i].stream;
        if (!st) {
            any_null = 1;
            continue;
        }
        int known = st == r->stream;
        for (int k = 0; k < r->nxstream && !known; k++) known = r->xstream[k] == st;
        if (known) continue;
        if (!r->stream)
            r->stream = st;
        else if (r->nxstream < RL_GROUP_MAX_STREAMS) /* always (group_precheck): guards the array */
            r->xstream[r->nxstream++] = st;
    }
    r->sub = sub;
    r->nsub = n;
    r->count = (size_t)n;
    /* On host memory the group's results are in place when group_end returns. */
    /* A detached request may be freed by the progress thread once queued: decided here. */
    int detached = r->detached = !any_null && r->device >= 0;
    if (!detached) rl_comm_track(c, r, 1);
    r->hold_later = r->stream != NULL;
    held->c = c;
    held->n = 0;
    if (r->stream) held->streams[held->n++] = r->stream;
    for (int k = 0; k < r->nxstream; k++) held->streams[held->n++] = r->xstream[k];
    r->seq_out = &held->seq;
    char err[RL_MSG_MAX];
    if ((rc = rl_comm_enqueue(c, r, err))) {
        held->n = 0;
        if (!detached) rl_comm_track(c, r, 0);
        rl_request_free(r);
        return rl_error(c, rc, "group_end: %s", err);
    }
    if (!detached) *wait = r;
    return RINGLET_SUCCESS;
}

/* The calls of the group on ops[i]'s communicator, in order, into out (device < -1: all
 * of them; else those on that device); -1 when an earlier call had that communicator
 * (its calls were gathered there). */
static int calls_of_comm(const grouped_t *ops, int n, int i, int device, grouped_t *out) {
    for (int j = 0; j < i; j++)
        if (ops[j].c == ops[i].c) return -1;
    int m = 0;
    for (int j = i; j < n; j++)
        if (ops[j].c == ops[i].c && (device < -1 || ops[j].op.device == device)) out[m++] = ops[j];
    return m;
}

/* Ranks of one process in one group (several communicators) on device memory: each
 * communicator's connections made before any submission waits for a peer's. A receiving
 * end over a transport that maps its sender's memory waits for the sender to connect, and
 * that sender may be a rank of another process whose thread is itself waiting, in its
 * first communicator, for the rank this thread would submit second. Failures are left
 * to the submission, which meets them again and reports them. */
static void connect_early(const grouped_t *ops, int n) {
    int ncomms = 0;
    for (int i = 0; i < n && ncomms < 2; i++) ncomms += i == 0 || ops[i].c != ops[0].c;
    if (ncomms < 2) return;
    /* Every communicator's probe first (rl_devcomm_publish): each preparation below may
     * wait for the peers' probes of its communicator. */
    for (int i = 0; i < n; i++) {
        char err[RL_MSG_MAX];
        if (ops[i].op.device >= 0 && !check_comm(ops[i].c, "group_end"))
            (void)rl_devcomm_publish(ops[i].c, ops[i].op.device, err);
    }
    grouped_t *mine = calloc((size_t)n, sizeof *mine);
    rl_subop *sub = calloc((size_t)n, sizeof *sub);
    for (int i = 0; i < n && mine && sub; i++) {
        struct ringlet_comm *c = ops[i].c;
        if (ops[i].op.device < 0) continue;
        int m = calls_of_comm(ops, n, i, ops[i].op.device, mine);
        if (m < 0 || check_comm(c, "group_end")) continue;
        for (int j = 0; j < m; j++) sub[j] = mine[j].op;
        struct ringlet_request r;
        memset(&r, 0, sizeof r);
        r.comm = c;
        r.kind = RL_OP_GROUP;
        r.device = ops[i].op.device;
        r.sub = sub;
        r.nsub = m;
        char err[RL_MSG_MAX];
        if (rl_comm_prepare_early(c, &r, err) != RINGLET_SUCCESS)
            RL_INFO(c->rank, "group_end: an early preparation failed, left to the submission: %s", err);
    }
    free(mine);
    free(sub);
}

/* The device of a call's stream (-1: none, or no device backend); a default stream
 * handle is the communicator's device's (stream_home). */
static int stream_device(struct ringlet_comm *c, void *stream) {
    int dev = stream_home(c, stream, -1);
    const rl_device_ops *d = dev < 0 && stream && !rl_dev_stream_is_current(stream) ? rl_device() : NULL;
    if (d && d->stream_device((rl_dev_stream_t)stream, &dev) != RL_DEV_OK) dev = -1;
    return dev;
}

/* Calls without buffers (a count of 0 with NULL buffers, as torch passes an empty CUDA
 * tensor; a barrier) move no data: they take the memory of their communicator's first
 * call with a buffer, or, in a group with none, that of their stream (device memory on
 * its device; host memory without one), as a peer's group with buffers decides for a
 * zero-byte send or receive to match it. Refused as a mix of host and device memory
 * (group_precheck), on this rank alone, they left the peers waiting until the deadline.
 * (A barrier runs on host memory whatever the group's: group.c.) */
static void bufferless_take_group_memory(grouped_t *ops, int n) {
    for (int i = 0; i < n; i++) {
        if (ops[i].op.sendbuf || ops[i].op.recvbuf) continue;
        int j = 0;
        while (j < n && (ops[j].c != ops[i].c || (!ops[j].op.sendbuf && !ops[j].op.recvbuf))) j++;
        ops[i].op.device = j < n ? ops[j].op.device : stream_device(ops[i].c, ops[i].op.stream);
    }
}

/* One communicator's calls that cannot make one request (host and device buffers mixed,
 * too many streams), looked for in every communicator of the group before any runs: a
 * refused call spoils the whole group, not only its communicator's part. */
static ringlet_result_t group_precheck(const grouped_t *ops, int n, struct ringlet_comm **bad, char *why,
                                       size_t len) {
    for (int i = 0; i < n; i++) {
        int seen = 0, nstreams = 0;
        void *streams[2 + RL_GROUP_MAX_STREAMS];
        for (int j = 0; j < i && !seen; j++) seen = ops[j].c == ops[i].c;
        for (int j = i; j < n && !seen; j++) {
            if (ops[j].c != ops[i].c) continue;
            *bad = ops[i].c;
            if (ops[j].op.device != ops[i].op.device)
                return snprintf(why, len, "the group mixes host and device buffers (or two devices) on one "
                                "communicator"), RINGLET_ERR_INVALID_ARGUMENT;
            void *st = ops[j].op.stream;
            int known = !st;
            for (int k = 0; k < nstreams && !known; k++) known = streams[k] == st;
            if (known) continue;
            if (nstreams == 1 + RL_GROUP_MAX_STREAMS)
                return snprintf(why, len, "more than %d streams on one communicator", RL_GROUP_MAX_STREAMS + 1),
                       RINGLET_ERR_INVALID_USAGE;
            streams[nstreams++] = st;
        }
    }
    return RINGLET_SUCCESS;
}

ringlet_result_t ringlet_group_end(void) {
    if (!t_group.depth) return rl_error(NULL, RINGLET_ERR_INVALID_USAGE, "group_end: no group_start before it");
    if (--t_group.depth) return RINGLET_SUCCESS;
    grouped_t *ops = t_group.ops;
    int n = t_group.n;
    t_group.ops = NULL;
    t_group.n = t_group.cap = 0;
    if (t_group.refused) { /* recorded only: nothing was counted or posted for them */
        ringlet_result_t rc = t_group.refused;
        t_group.refused = RINGLET_SUCCESS;
        free(ops);
        return rl_error(NULL, rc, "group_end: none of the group's %d call(s) ran: one was refused (%.400s)", n,
                        t_group.why);
    }
    bufferless_take_group_memory(ops, n);
    struct ringlet_comm *bad = NULL;
    char why[RL_MSG_MAX];
    ringlet_result_t pre = group_precheck(ops, n, &bad, why, sizeof why);
    if (pre) {
        free(ops);
        return rl_error(bad, pre, "group_end: none of the group's %d call(s) ran: %.400s", n, why);
    }
    /* Each call counts as a waiter on its communicator until the end (submit). */
    for (int i = 0; i < n; i++) atomic_fetch_add(&ops[i].c->waiters, 1);
    /* Per communicator, in the order of their first call; every submission before any
     * wait, so that ranks of one process (several communicators) progress together. */
    connect_early(ops, n);
    ringlet_result_t first = RINGLET_SUCCESS;
    ringlet_request_t *waits = calloc((size_t)(n ? n : 1), sizeof *waits);
    struct ringlet_comm **wcomm = calloc((size_t)(n ? n : 1), sizeof *wcomm); /* waits[k]'s communicator */
    grouped_t *mine = calloc((size_t)(n ? n : 1), sizeof *mine);
    held_t *held = calloc((size_t)(n ? n : 1), sizeof *held);
    int nw = 0, nh = 0;
    if (!waits || !wcomm || !mine || !held) first = rl_error(NULL, RINGLET_ERR_SYSTEM, "group_end: out of memory");
    for (int i = 0; i < n && waits && wcomm && mine && held; i++) {
        int m = calls_of_comm(ops, n, i, -2, mine);
        if (m < 0) continue;
        /* Default streams on the group's device (stream_home; group_precheck refused a group
         * of one communicator on two devices). */
        int home = -1, saved = -1;
        for (int j = 0; j < m && home < 0; j++) home = stream_home(ops[i].c, mine[j].op.stream, mine[0].op.device);
        if (home >= 0 && rl_device()->device_enter(home, &saved) != RL_DEV_OK) {
            if (!first)
                first = rl_error(ops[i].c, RINGLET_ERR_CUDA, "group_end: selecting device %d for its default stream: %s",
                                 home, rl_dev_error());
            continue;
        }
        ringlet_result_t rc = group_submit(ops[i].c, mine, m, &waits[nw], &held[nh]);
        if (home >= 0) rl_device()->device_leave(saved);
        held[nh].home = home;
        if (rc && !first) first = rc;
        if (waits[nw]) wcomm[nw++] = ops[i].c;
        if (held[nh].n) nh++;
    }
    /* Every communicator's events are recorded: now the streams wait for the results. */
    for (int i = 0; i < nh; i++) {
        char err[RL_MSG_MAX];
        ringlet_result_t rc = RINGLET_ERR_TIMEOUT;
        int saved = -1, home = held[i].home, entered = home >= 0;
        if (entered && rl_device()->device_enter(home, &saved) != RL_DEV_OK) {
            entered = 0;
            rc = RINGLET_ERR_CUDA;
            snprintf(err, sizeof err, "selecting device %d for its default stream: %s", home, rl_dev_error());
        } else if (rl_dev_hold_begin(held[i].c->timeout_s) != RL_DEV_OK) {
            snprintf(err, sizeof err, "%s", rl_dev_error());
        } else {
            /* in order with the holds of other threads' calls (rl_comm_enqueue); none once
             * aborted: the teardown may free what the hold uses */
            rc = rl_comm_hold_order_lock(held[i].c, err);
            if (!rc) {
                if (atomic_load(&held[i].c->aborted)) {
                    rc = RINGLET_ERR_INVALID_USAGE;
                    snprintf(err, sizeof err, "the communicator was aborted");
                } else {
                    rc = rl_devcomm_hold(held[i].c, held[i].streams, held[i].n, held[i].seq, err);
                }
                pthread_mutex_unlock(&held[i].c->hold_order_mu);
            }
            rl_dev_hold_end();
        }
        if (!rc) rc = rl_devcomm_sync(held[i].c, held[i].streams, held[i].n, held[i].seq, err);
        if (entered) rl_device()->device_leave(saved);
        if (rc && !first) first = rl_error(held[i].c, rc, "group_end: %s", err);
    }
    /* A communicator's calls stop counting once this group is done with it (its hold, its
     * wait): an abort and destroy of one need not wait for another's wait. */
    for (int i = 0; i < n; i++) {
        int waited = 0, seen = 0;
        for (int k = 0; k < nw && !waited; k++) waited = wcomm[k] == ops[i].c;
        for (int j = 0; j < i && !seen; j++) seen = ops[j].c == ops[i].c;
        if (!waited && !seen) group_release(ops, n, ops[i].c);
    }
    for (int i = 0; i < nw; i++) {
        ringlet_result_t rc = ringlet_wait(&waits[i]);
        if (rc && !first) first = rc;
        group_release(ops, n, wcomm[i]);
    }
    free(wcomm);
    free(waits);
    free(mine);
    free(held);
    free(ops);
    return first;
}

ringlet_result_t ringlet_group_cancel(int *ndropped) {
    if (ndropped) *ndropped = 0;
    if (!t_group.depth) return rl_error(NULL, RINGLET_ERR_INVALID_USAGE, "group_cancel: no group_start before it");
    if (--t_group.depth) return RINGLET_SUCCESS;
    if (ndropped) *ndropped = t_group.n;
    t_group.refused = RINGLET_SUCCESS;
    free(t_group.ops); /* recorded only: nothing was counted or posted for them */
    t_group.ops = NULL;
    t_group.n = t_group.cap = 0;
    return RINGLET_SUCCESS;
}

/* blocking() clears a request's fields around its message: the field after it is device. */
_Static_assert(offsetof(struct ringlet_request, device) == offsetof(struct ringlet_request, err) + RL_MSG_MAX,
               "struct ringlet_request: device must follow err");
/* ... and between device and treq1 it leaves out a group's streams only (their events and
 * the events' devices: set where the events are). */
_Static_assert(offsetof(struct ringlet_request, premul) - offsetof(struct ringlet_request, xstream) ==
                   sizeof(((struct ringlet_request *)0)->xstream) + sizeof(((struct ringlet_request *)0)->xevent) +
                       sizeof(((struct ringlet_request *)0)->xevent_device),
               "struct ringlet_request: xevent must follow xstream, xevent_device xevent, and premul xevent_device");

/* RINGLET_STREAM_DEFAULT without a device backend means no stream. */
static void *stream_of(void *st) { return st == RINGLET_STREAM_DEFAULT && !rl_device() ? NULL : st; }

/* Zeroes the bytes of *r from offset `from` up to `to`. */
static void zero_between(struct ringlet_request *r, size_t from, size_t to) {
    memset((char *)r + from, 0, to - from);
}

/* A call on device memory with a stream is ordered on the stream (submit: it returns once
 * done where streams are not held, sync, else at once); any
 * other returns when its result is in place (on host memory with a stream: it still
 * starts after the stream's earlier work). Inside a group: recorded. */
static ringlet_result_t blocking_counted(struct ringlet_comm *c, const call_t *call);

/* The whole call counts as a waiter (rl_conn_wait_idle), from its first step: an abort
 * and destroy from another thread wait for it to leave. Counted only from the submission
 * on, the inline path's checks before it claims the queue were a gap where the destroy
 * found nothing inside and freed c under the call. */
static ringlet_result_t blocking(struct ringlet_comm *c, const call_t *call) {
    if (!c) return blocking_counted(c, call); /* refused there */
    atomic_fetch_add(&c->waiters, 1);
    ringlet_result_t rc = blocking_counted(c, call);
    atomic_fetch_sub(&c->waiters, 1);
    return rc;
}

static ringlet_result_t blocking_counted(struct ringlet_comm *c, const call_t *call) {
    call_t copy = *call, *a = &copy;
    a->stream = stream_of(a->stream);
    if (t_group.depth) return group_add(c, a);
    if (a->stream && (!(a->sendbuf || a->recvbuf) || rl_dev_ptr_device(a->sendbuf) >= 0 ||
                      rl_dev_ptr_device(a->recvbuf) >= 0))
        return submit(c, a, NULL, 0);
    if (a->kind != RL_OP_SEND && a->kind != RL_OP_RECV && !a->stream && c && c->inline_ok) {
        /* Host memory and nothing queued: run it here, no thread hand-off. */
        ringlet_result_t rc = check_call(c, a);
        int device;
        if (rc || (rc = buffers_device(c, a, &device))) return rc;
        if (device < 0) {
            /* Zeroed in part: an 8-byte call takes a few hundred ns, and zeroing 500 of
             * the request's bytes took near a tenth of them. Left as they are: the message
             * but its first byte (a string), a group's streams (read only up to nxstream,
             * here 0) and the point-to-point piece (treq1), which a collective never touches. */
            struct ringlet_request r;
            memset(&r, 0, offsetof(struct ringlet_request, err));
            r.err[0] = 0;
            zero_between(&r, offsetof(struct ringlet_request, device), offsetof(struct ringlet_request, xstream));
            zero_between(&r, offsetof(struct ringlet_request, premul), offsetof(struct ringlet_request, treq1));
            request_set(&r, c, a, -1);
            if (reduces(a->kind) && a->op >= RINGLET_NUM_OPS && !r.premul.live) /* destroyed since check_call */
                return rl_error(c, RINGLET_ERR_INVALID_ARGUMENT, "%s: op %d was destroyed during the call",
                                rl_op_name(a->kind), (int)a->op);
            if (rl_comm_try_inline(c, &r, &rc)) return rc; /* its error recorded there */
        }
    }
    ringlet_request_t r;
    ringlet_result_t rc = submit(c, a, &r, 1);
    if (!rc) rc = ringlet_wait(&r);
    return rc;
}

static ringlet_result_t nonblocking(struct ringlet_comm *c, const call_t *call, ringlet_request_t *req) {
    if (!req) return rl_error(c, RINGLET_ERR_INVALID_ARGUMENT, "i%s: request (the output pointer) is NULL", rl_op_name(call->kind));
    *req = NULL; /* as every refused call leaves it: a cleanup that waits on it finds nothing */
    if (t_group.depth)
        return rl_error(c, RINGLET_ERR_INVALID_USAGE, "i%s: non-blocking forms are refused inside a group", rl_op_name(call->kind));
    call_t copy = *call;
    copy.stream = stream_of(copy.stream);
    return submit(c, &copy, req, 0);
}

#define CALL(...) (&(call_t){__VA_ARGS__})

ringlet_result_t ringlet_allreduce(const void *s, void *r, size_t n, ringlet_datatype_t d, ringlet_op_t op,
                                   ringlet_comm_t c, void *st) {
    return blocking(c, CALL(RL_OP_ALLREDUCE, s, r, n, d, op, 0, 0, st));
}
ringlet_result_t ringlet_broadcast(const void *s, void *r, size_t n, ringlet_datatype_t d, int root, ringlet_comm_t c,
                                   void *st) {
    return blocking(c, CALL(RL_OP_BROADCAST, s, r, n, d, 0, root, 0, st));
}
ringlet_result_t ringlet_reduce(const void *s, void *r, size_t n, ringlet_datatype_t d, ringlet_op_t op, int root,
                                ringlet_comm_t c, void *st) {
    return blocking(c, CALL(RL_OP_REDUCE, s, r, n, d, op, root, 0, st));
}
ringlet_result_t ringlet_allgather(const void *s, void *r, size_t n, ringlet_datatype_t d, ringlet_comm_t c, void *st) {
    return blocking(c, CALL(RL_OP_ALLGATHER, s, r, n, d, 0, 0, 0, st));
}
ringlet_result_t ringlet_reduce_scatter(const void *s, void *r, size_t n, ringlet_datatype_t d, ringlet_op_t op,
                                        ringlet_comm_t c, void *st) {
    return blocking(c, CALL(RL_OP_REDUCE_SCATTER, s, r, n, d, op, 0, 0, st));
}
ringlet_result_t ringlet_barrier(ringlet_comm_t c, void *st) {
    return blocking(c, CALL(RL_OP_BARRIER, NULL, NULL, 0, RINGLET_UINT8, 0, 0, 0, st));
}
ringlet_result_t ringlet_send(const void *s, size_t n, ringlet_datatype_t d, int peer, ringlet_comm_t c, void *st) {
    return blocking(c, CALL(RL_OP_SEND, s, NULL, n, d, 0, 0, peer, st));
}
ringlet_result_t ringlet_recv(void *r, size_t n, ringlet_datatype_t d, int peer, ringlet_comm_t c, void *st) {
    return blocking(c, CALL(RL_OP_RECV, NULL, r, n, d, 0, 0, peer, st));
}

ringlet_result_t ringlet_iallreduce(const void *s, void *r, size_t n, ringlet_datatype_t d, ringlet_op_t op,
                                    ringlet_comm_t c, void *st, ringlet_request_t *q) {
    return nonblocking(c, CALL(RL_OP_ALLREDUCE, s, r, n, d, op, 0, 0, st), q);
}
ringlet_result_t ringlet_ibroadcast(const void *s, void *r, size_t n, ringlet_datatype_t d, int root, ringlet_comm_t c,
                                    void *st, ringlet_request_t *q) {
    return nonblocking(c, CALL(RL_OP_BROADCAST, s, r, n, d, 0, root, 0, st), q);
}
ringlet_result_t ringlet_ireduce(const void *s, void *r, size_t n, ringlet_datatype_t d, ringlet_op_t op, int root,
                                 ringlet_comm_t c, void *st, ringlet_request_t *q) {
    return nonblocking(c, CALL(RL_OP_REDUCE, s, r, n, d, op, root, 0, st), q);
}
ringlet_result_t ringlet_iallgather(const void *s, void *r, size_t n, ringlet_datatype_t d, ringlet_comm_t c, void *st,
                                    ringlet_request_t *q) {
    return nonblocking(c, CALL(RL_OP_ALLGATHER, s, r, n, d, 0, 0, 0, st), q);
}
ringlet_result_t ringlet_ireduce_scatter(const void *s, void *r, size_t n, ringlet_datatype_t d, ringlet_op_t op,
                                         ringlet_comm_t c, void *st, ringlet_request_t *q) {
    return nonblocking(c, CALL(RL_OP_REDUCE_SCATTER, s, r, n, d, op, 0, 0, st), q);
}
ringlet_result_t ringlet_ibarrier(ringlet_comm_t c, void *st, ringlet_request_t *q) {
    return nonblocking(c, CALL(RL_OP_BARRIER, NULL, NULL, 0, RINGLET_UINT8, 0, 0, 0, st), q);
}
ringlet_result_t ringlet_isend(const void *s, size_t n, ringlet_datatype_t d, int peer, ringlet_comm_t c, void *st,
                               ringlet_request_t *q) {
    return nonblocking(c, CALL(RL_OP_SEND, s, NULL, n, d, 0, 0, peer, st), q);
}
ringlet_result_t ringlet_irecv(void *r, size_t n, ringlet_datatype_t d, int peer, ringlet_comm_t c, void *st,
                               ringlet_request_t *q) {
    return nonblocking(c, CALL(RL_OP_RECV, NULL, r, n, d, 0, 0, peer, st), q);
}
ringlet_result_t ringlet_alltoall(const void *s, void *r, size_t n, ringlet_datatype_t d, ringlet_comm_t c, void *st) {
    return blocking(c, CALL(RL_OP_ALLTOALL, s, r, n, d, 0, 0, 0, st));
}
ringlet_result_t ringlet_gather(const void *s, void *r, size_t n, ringlet_datatype_t d, int root, ringlet_comm_t c,
                                void *st) {
    return blocking(c, CALL(RL_OP_GATHER, s, r, n, d, 0, root, 0, st));
}
ringlet_result_t ringlet_scatter(const void *s, void *r, size_t n, ringlet_datatype_t d, int root, ringlet_comm_t c,
                                 void *st) {
    return blocking(c, CALL(RL_OP_SCATTER, s, r, n, d, 0, root, 0, st));
}
ringlet_result_t ringlet_ialltoall(const void *s, void *r, size_t n, ringlet_datatype_t d, ringlet_comm_t c, void *st,
                                   ringlet_request_t *q) {
    return nonblocking(c, CALL(RL_OP_ALLTOALL, s, r, n, d, 0, 0, 0, st), q);
}
ringlet_result_t ringlet_igather(const void *s, void *r, size_t n, ringlet_datatype_t d, int root, ringlet_comm_t c,
                                 void *st, ringlet_request_t *q) {
    return nonblocking(c, CALL(RL_OP_GATHER, s, r, n, d, 0, root, 0, st), q);
}
ringlet_result_t ringlet_iscatter(const void *s, void *r, size_t n, ringlet_datatype_t d, int root, ringlet_comm_t c,
                                  void *st, ringlet_request_t *q) {
    return nonblocking(c, CALL(RL_OP_SCATTER, s, r, n, d, 0, root, 0, st), q);
}

/* ---- pre-multiplied sums ---- */

ringlet_result_t ringlet_op_create_premul_sum(ringlet_op_t *op, const void *scalar, ringlet_datatype_t dt,
                                              ringlet_scalar_residence_t residence, ringlet_comm_t c) {
    ringlet_result_t rc = check_comm(c, "op_create_premul_sum");
    if (rc) return rc;
    size_t es = ringlet_datatype_size(dt);
    if (!op || !scalar) return rl_error(c, RINGLET_ERR_INVALID_ARGUMENT, "op_create_premul_sum: op or scalar is NULL");
    if (!es) return rl_error(c, RINGLET_ERR_INVALID_ARGUMENT, "op_create_premul_sum: datatype %d is not a ringlet_datatype_t", (int)dt);
    if (residence != RINGLET_SCALAR_HOST && residence != RINGLET_SCALAR_DEVICE)
        return rl_error(c, RINGLET_ERR_INVALID_ARGUMENT, "op_create_premul_sum: residence %d is neither host nor device", (int)residence);
    if (residence == RINGLET_SCALAR_DEVICE && rl_dev_ptr_device(scalar) < 0)
        return rl_error(c, RINGLET_ERR_INVALID_ARGUMENT, "op_create_premul_sum: a device scalar at %p, which is not device memory", scalar);
    /* A host scalar is read here, at once: device memory would fault. Managed memory, which
     * the device layer does not tell apart, is refused too (RINGLET_SCALAR_DEVICE reads it). */
    if (residence == RINGLET_SCALAR_HOST && rl_dev_ptr_device(scalar) >= 0)
        return rl_error(c, RINGLET_ERR_INVALID_ARGUMENT,
                        "op_create_premul_sum: a host scalar at %p, which is memory of device %d (pass "
                        "RINGLET_SCALAR_DEVICE)", scalar, rl_dev_ptr_device(scalar));
    if (residence == RINGLET_SCALAR_HOST && rl_dev_unserved_pair(scalar, NULL))
        return rl_error(c, RINGLET_ERR_CUDA, "op_create_premul_sum: the host scalar at %p is device memory, but "
                        "ringlet has no device backend: %s", scalar, rl_device_unavailable());
    pthread_mutex_lock(&c->ops_mu);
    int id = -1;
    for (int i = 0; i < RL_MAX_USER_OPS && id < 0; i++)
        if (!c->userops[i].live) id = i;
    if (id >= 0) {
        rl_userop *u = &c->userops[id];
        memset(u, 0, sizeof *u);
        u->live = 1;
        u->dtype = dt;
        u->on_device = residence == RINGLET_SCALAR_DEVICE;
        if (u->on_device) u->dptr = scalar;
        else memcpy(u->value, scalar, es);
    }
    pthread_mutex_unlock(&c->ops_mu);
    if (id < 0) return rl_error(c, RINGLET_ERR_INVALID_USAGE, "op_create_premul_sum: %d ops exist already", RL_MAX_USER_OPS);
    *op = (ringlet_op_t)(RINGLET_NUM_OPS + id);
    return RINGLET_SUCCESS;
}

ringlet_result_t ringlet_op_destroy(ringlet_op_t op, ringlet_comm_t c) {
    if (!c) return rl_error(NULL, RINGLET_ERR_INVALID_ARGUMENT, "op_destroy: comm is NULL");
    ringlet_result_t forked = rl_comm_forked(c, "op_destroy");
    if (forked) return forked;
    unsigned id = (unsigned)op - RINGLET_NUM_OPS;
    pthread_mutex_lock(&c->ops_mu);
    int ok = (unsigned)op >= RINGLET_NUM_OPS && id < RL_MAX_USER_OPS && c->userops[id].live;
    if (ok) c->userops[id].live = 0;
    pthread_mutex_unlock(&c->ops_mu);
    return ok ? RINGLET_SUCCESS
              : rl_error(c, RINGLET_ERR_INVALID_ARGUMENT, "op_destroy: op %d is not a live op made by this communicator", (int)op);
}

/* ---- device and memory ---- */

ringlet_result_t ringlet_comm_device(ringlet_comm_t c, int *device) {
    if (!c || !device) return rl_error(c, RINGLET_ERR_INVALID_ARGUMENT, "comm_device: comm or device is NULL");
    ringlet_result_t forked = rl_comm_forked(c, "comm_device");
    if (forked) return forked;
    int dev = rl_devcomm_device(c);
    *device = dev >= 0 ? dev : c->init_device;
    return RINGLET_SUCCESS;
}

ringlet_result_t ringlet_mem_alloc(void **ptr, size_t bytes) {
    const rl_device_ops *d = rl_device();
    if (!ptr) return rl_error(NULL, RINGLET_ERR_INVALID_ARGUMENT, "mem_alloc: ptr is NULL");
    *ptr = NULL;
    if (!d) return rl_error(NULL, RINGLET_ERR_INVALID_USAGE, "mem_alloc: no device backend: %s", rl_device_unavailable());
    /* Not while a stream is held (device.h): it waits for ringlet's holds to end. */
    if (rl_dev_quiet_begin(rl_timeout_s(), "mem_alloc") != RL_DEV_OK)
        return rl_error(NULL, RINGLET_ERR_CUDA, "mem_alloc: %s", rl_dev_error());
    int rc = d->mem_alloc(ptr, bytes);
    rl_dev_quiet_end();
    if (rc != RL_DEV_OK) return rl_error(NULL, RINGLET_ERR_CUDA, "mem_alloc: %s", rl_dev_error());
    return RINGLET_SUCCESS;
}

ringlet_result_t ringlet_mem_device(const void *ptr, int *device) {
    if (!device) return rl_error(NULL, RINGLET_ERR_INVALID_ARGUMENT, "mem_device: device is NULL");
    *device = rl_dev_ptr_device(ptr);
    return RINGLET_SUCCESS;
}

ringlet_result_t ringlet_stream_device(void *stream, int *device) {
    if (!device) return rl_error(NULL, RINGLET_ERR_INVALID_ARGUMENT, "stream_device: device is NULL");
    *device = -1;
    const rl_device_ops *d = rl_device();
    if (!d) return RINGLET_SUCCESS;
    int rc = rl_dev_stream_is_current(stream) ? d->get_device(device) : d->stream_device(stream, device);
    if (rc != RL_DEV_OK) return rl_error(NULL, RINGLET_ERR_CUDA, "stream_device: %s", rl_dev_error());
    return RINGLET_SUCCESS;
}

ringlet_result_t ringlet_mem_free(void *ptr) {
    const rl_device_ops *d = rl_device();
    if (!ptr) return RINGLET_SUCCESS;
    if (!d) return rl_error(NULL, RINGLET_ERR_INVALID_USAGE, "mem_free: no device backend");
    int kept = 0;
    if (rl_dev_free_user(ptr, RL_DEV_MEM_DEVICE, rl_timeout_s(), "mem_free", &kept) != RL_DEV_OK)
        return rl_error(NULL, RINGLET_ERR_CUDA, "mem_free: %s", rl_dev_error());
    if (kept) RL_INFO(-1, "mem_free: %p is freed once device work that did not finish is done", ptr);
    return RINGLET_SUCCESS;
}

ringlet_result_t ringlet_device_count(int *count) {
    const rl_device_ops *d = rl_device();
    if (!count) return rl_error(NULL, RINGLET_ERR_INVALID_ARGUMENT, "device_count: count is NULL");
    *count = 0;
    if (d && d->count(count) != RL_DEV_OK) return rl_error(NULL, RINGLET_ERR_CUDA, "device_count: %s", rl_dev_error());
    return RINGLET_SUCCESS;
}

ringlet_result_t ringlet_set_device(int device) {
    const rl_device_ops *d = rl_device();
    if (!d) return rl_error(NULL, RINGLET_ERR_INVALID_USAGE, "set_device: no device backend: %s", rl_device_unavailable());
    int n = 0;
    if (d->count(&n) != RL_DEV_OK) return rl_error(NULL, RINGLET_ERR_CUDA, "set_device: %s", rl_dev_error());
    if (device < 0 || device >= n)
        return rl_error(NULL, RINGLET_ERR_INVALID_ARGUMENT, "set_device: device %d out of range (%d devices)", device, n);
    if (d->set_device(device) != RL_DEV_OK) return rl_error(NULL, RINGLET_ERR_CUDA, "set_device %d: %s", device, rl_dev_error());
    return RINGLET_SUCCESS;
}

ringlet_result_t ringlet_device_enter(int device, int *saved) {
    const rl_device_ops *d = rl_device();
    if (!saved) return rl_error(NULL, RINGLET_ERR_INVALID_ARGUMENT, "device_enter: saved is NULL");
    *saved = -1;
    if (!d) return rl_error(NULL, RINGLET_ERR_INVALID_USAGE, "device_enter: no device backend: %s", rl_device_unavailable());
    int n = 0;
    if (d->count(&n) != RL_DEV_OK) return rl_error(NULL, RINGLET_ERR_CUDA, "device_enter: %s", rl_dev_error());
    if (device < 0 || device >= n)
        return rl_error(NULL, RINGLET_ERR_INVALID_ARGUMENT, "device_enter: device %d out of range (%d devices)", device, n);
    if (d->device_enter(device, saved) != RL_DEV_OK)
        return rl_error(NULL, RINGLET_ERR_CUDA, "device_enter %d: %s", device, rl_dev_error());
    return RINGLET_SUCCESS;
}

void ringlet_device_leave(int saved) {
    const rl_device_ops *d = rl_device();
    if (d && saved >= 0) d->device_leave(saved);
}

ringlet_result_t ringlet_get_device(int *device) {
    const rl_device_ops *d = rl_device();
    if (!device) return rl_error(NULL, RINGLET_ERR_INVALID_ARGUMENT, "get_device: device is NULL");
    *device = -1;
    if (d && d->get_device(device) != RL_DEV_OK) return rl_error(NULL, RINGLET_ERR_CUDA, "get_device: %s", rl_dev_error());
    return RINGLET_SUCCESS;
}
