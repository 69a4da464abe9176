/* Public entry points: argument checks, requests, test and wait. Every argument error
 * is local (no peer is contacted), leaves the communicator usable, and names the
 * argument in ringlet_comm_last_error. */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm.h"
#include "device.h"
#include "failure.h"
#include "p2p.h"
#include "progress.h"
#include "util.h"
#include "wait.h"

const char *ringlet_version(void) { return "0.1.0"; }

/* Usable communicator? Aborted and failed ones answer with their error. */
static ringlet_result_t check_comm(struct ringlet_comm *c, const char *fn) {
    if (!c) return rl_error(NULL, RINGLET_ERR_INVALID_ARGUMENT, "%s: comm is NULL", fn);
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

static ringlet_result_t check_call(struct ringlet_comm *c, const call_t *a) {
    const char *fn = rl_op_name(a->kind);
    ringlet_result_t rc = check_comm(c, fn);
    if (rc) return rc;
    if (a->kind == RL_OP_BARRIER) return RINGLET_SUCCESS;
    size_t es = ringlet_datatype_size(a->dtype);
    if (!es) return rl_error(c, RINGLET_ERR_INVALID_ARGUMENT, "%s: datatype %d is not a ringlet_datatype_t", fn, (int)a->dtype);
    int reduces = a->kind == RL_OP_ALLREDUCE || a->kind == RL_OP_REDUCE || a->kind == RL_OP_REDUCE_SCATTER;
    if (reduces && (unsigned)a->op >= RINGLET_NUM_OPS)
        return rl_error(c, RINGLET_ERR_INVALID_ARGUMENT, "%s: op %d is not a ringlet_op_t", fn, (int)a->op);
    int rooted = a->kind == RL_OP_BROADCAST || a->kind == RL_OP_REDUCE;
    if (rooted && (a->root < 0 || a->root >= c->nranks))
        return rl_error(c, RINGLET_ERR_INVALID_ARGUMENT, "%s: root %d is out of range [0, %d)", fn, a->root, c->nranks);
    if ((a->kind == RL_OP_SEND || a->kind == RL_OP_RECV) && (a->peer < 0 || a->peer >= c->nranks || a->peer == c->rank))
        return rl_error(c, RINGLET_ERR_INVALID_ARGUMENT, "%s: peer %d is out of range [0, %d) or is this rank", fn,
                        a->peer, c->nranks);
    /* All-gather and reduce-scatter touch nranks blocks of count elements. */
    size_t blocks = (a->kind == RL_OP_ALLGATHER || a->kind == RL_OP_REDUCE_SCATTER) ? (size_t)c->nranks : 1;
    if (a->count > SIZE_MAX / es / blocks || a->count * es * blocks > (size_t)PTRDIFF_MAX)
        return rl_error(c, RINGLET_ERR_INVALID_ARGUMENT, "%s: count %zu of %zu-byte elements%s overflows the address space",
                        fn, a->count, es, blocks > 1 ? " times nranks" : "");
    if (a->count == 0) return RINGLET_SUCCESS;
    int is_root = rooted && a->root == c->rank;
    int needs_send = a->kind != RL_OP_RECV && (a->kind != RL_OP_BROADCAST || is_root);
    int needs_recv = a->kind != RL_OP_SEND && (a->kind != RL_OP_REDUCE || is_root);
    if (needs_send && !a->sendbuf) return rl_error(c, RINGLET_ERR_INVALID_ARGUMENT, "%s: sendbuf is NULL", fn);
    if (needs_recv && !a->recvbuf) return rl_error(c, RINGLET_ERR_INVALID_ARGUMENT, "%s: recvbuf is NULL", fn);
    return RINGLET_SUCCESS;
}

/* The device of the call's buffers (device layer), -1 for host memory; mixing is an
 * error. */
static ringlet_result_t buffers_device(struct ringlet_comm *c, const call_t *a, int *device) {
    int ds = rl_dev_ptr_device(a->sendbuf), dr = rl_dev_ptr_device(a->recvbuf);
    *device = ds >= 0 ? ds : dr;
    if (a->sendbuf && a->recvbuf && ds != dr)
        return rl_error(c, RINGLET_ERR_INVALID_ARGUMENT,
                        "%s: sendbuf is %s memory and recvbuf is %s memory; both must be on the same device or the host",
                        rl_op_name(a->kind), ds >= 0 ? "device" : "host", dr >= 0 ? "device" : "host");
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
}

static ringlet_result_t submit(struct ringlet_comm *c, const call_t *a, ringlet_request_t *out) {
    if (out) *out = NULL;
    ringlet_result_t rc = check_call(c, a);
    if (rc) return rc;
    int device;
    if ((rc = buffers_device(c, a, &device))) return rc;
    struct ringlet_request *r = calloc(1, sizeof *r);
    if (!r) return rl_error(c, RINGLET_ERR_SYSTEM, "%s: out of memory for a request", rl_op_name(a->kind));
    request_set(r, c, a, device);
    r->detached = out == NULL;
    /* Tracked before it is queued: the progress thread never sees the links change. */
    if (out) rl_comm_track(c, r, 1);
    char err[RL_MSG_MAX];
    if ((rc = rl_comm_enqueue(c, r, err))) {
        if (out) rl_comm_track(c, r, 0);
        rl_request_free(r);
        return rl_error(c, rc, "%s: %s", rl_op_name(a->kind), err);
    }
    if (out) *out = r;
    return RINGLET_SUCCESS;
}

/* Done? Posted point-to-point requests complete from their pieces. */
static int request_done(struct ringlet_request *r) {
    if (atomic_load_explicit(&r->done, memory_order_acquire)) return 1;
    rl_comm_progress(r->comm); /* threadless transports move when someone waits */
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

ringlet_result_t ringlet_test(ringlet_request_t *req, int *done) {
    if (!req || !*req) return rl_error(NULL, RINGLET_ERR_INVALID_ARGUMENT, "test: request is NULL");
    if (!done) return rl_error((*req)->comm, RINGLET_ERR_INVALID_ARGUMENT, "test: done is NULL");
    *done = request_done(*req);
    return *done ? complete(req) : RINGLET_SUCCESS;
}

ringlet_result_t ringlet_wait(ringlet_request_t *req) {
    if (!req || !*req) return rl_error(NULL, RINGLET_ERR_INVALID_ARGUMENT, "wait: request is NULL");
    struct ringlet_request *r = *req;
    struct ringlet_comm *c = r->comm;
    for (;;) {
        unsigned gen = rl_comm_gen(c);
        if (request_done(r)) return complete(req);
        /* Collectives have their deadline inside the progress thread; a posted
         * point-to-point message has its own here. */
        if (atomic_load(&r->posted) && rl_now() - r->posted_at > c->timeout_s) {
            rl_comm_fail(c, RINGLET_ERR_TIMEOUT, "%s #%llu with rank %d: not done after %.0f s (RINGLET_TIMEOUT)",
                         rl_op_name(r->kind), (unsigned long long)r->seq, r->peer, c->timeout_s);
            rl_p2p_drain(r);
            continue;
        }
        rl_comm_wait_event(c, gen, 100);
    }
}

/* A call with a stream returns at once (ordered on the stream); one without blocks. */
static ringlet_result_t blocking(struct ringlet_comm *c, const call_t *a) {
    if (a->stream) return submit(c, a, NULL);
    if (a->kind != RL_OP_SEND && a->kind != RL_OP_RECV && c && c->inline_ok) {
        /* Host memory and nothing queued: run it here, no thread hand-off. */
        ringlet_result_t rc = check_call(c, a);
        int device;
        if (rc || (rc = buffers_device(c, a, &device))) return rc;
        if (device < 0) {
            /* A collective never touches the point-to-point piece (treq1): zero the rest. */
            struct ringlet_request r;
            memset(&r, 0, offsetof(struct ringlet_request, treq1));
            request_set(&r, c, a, -1);
            if (rl_comm_try_inline(c, &r, &rc)) return rc ? rl_error(c, rc, "%s", r.err) : RINGLET_SUCCESS;
        }
    }
    ringlet_request_t r;
    ringlet_result_t rc = submit(c, a, &r);
    return rc ? rc : ringlet_wait(&r);
}

static ringlet_result_t nonblocking(struct ringlet_comm *c, const call_t *a, ringlet_request_t *req) {
    if (!req) return rl_error(c, RINGLET_ERR_INVALID_ARGUMENT, "i%s: request (the output pointer) is NULL", rl_op_name(a->kind));
    return submit(c, a, req);
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
