/* The NCCL layer's operations: collectives, point to point, groups and pre-multiplied
 * sums, mapped onto ringlet's calls. A stream of 0 is CUDA's default stream. On a
 * non-blocking communicator a call outside a group is issued as ringlet's non-blocking
 * form and returns ncclInProgress; ncclCommGetAsyncError follows it. */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "shim.h"

static _Thread_local int t_group_depth;

typedef enum { K_ALLREDUCE, K_BROADCAST, K_REDUCE, K_ALLGATHER, K_REDUCE_SCATTER, K_ALLTOALL, K_GATHER, K_SCATTER,
               K_SEND, K_RECV } kind_t;

typedef struct {
    kind_t kind;
    const char *fn;
    const void *send;
    void *recv;
    size_t count;
    ncclDataType_t dtype;
    ncclRedOp_t op;
    int root; /* or the peer */
} call_t;

/* reduces: the call combines values (all-reduce, reduce, reduce-scatter, a pre-multiplied
 * sum). float8 is moved as bytes by the calls that only move data (FSDP's float8
 * all-gathers); ringlet has no float8 arithmetic, so a reduction of it is refused. */
static ncclResult_t datatype(struct ncclComm *c, const char *fn, ncclDataType_t d, int reduces,
                             ringlet_datatype_t *out) {
    if (d == ncclFloat8e4m3 || d == ncclFloat8e5m2) {
        if (!reduces) return *out = RINGLET_UINT8, ncclSuccess;
        return shim_fail(c, ncclInvalidArgument,
                         "%s: datatype %d (float8 %s): ringlet moves float8 data but has no float8 arithmetic "
                         "(reductions of it are not supported)",
                         fn, (int)d, d == ncclFloat8e4m3 ? "e4m3" : "e5m2");
    }
    if ((int)d < 0 || (int)d >= (int)RINGLET_NUM_DATATYPES)
        return shim_fail(c, ncclInvalidArgument, "%s: datatype %d is not an ncclDataType_t", fn, (int)d);
    *out = (ringlet_datatype_t)d; /* the same values, ncclInt8 .. ncclBfloat16 */
    return ncclSuccess;
}

static ringlet_result_t run(const call_t *a, ringlet_datatype_t d, ringlet_comm_t rc, void *st, ringlet_request_t *q) {
    ringlet_op_t op = (ringlet_op_t)a->op; /* built-ins share values; premul ops are ringlet's */
    switch (a->kind) {
    case K_ALLREDUCE:
        return q ? ringlet_iallreduce(a->send, a->recv, a->count, d, op, rc, st, q)
                 : ringlet_allreduce(a->send, a->recv, a->count, d, op, rc, st);
    case K_BROADCAST:
        return q ? ringlet_ibroadcast(a->send, a->recv, a->count, d, a->root, rc, st, q)
                 : ringlet_broadcast(a->send, a->recv, a->count, d, a->root, rc, st);
    case K_REDUCE:
        return q ? ringlet_ireduce(a->send, a->recv, a->count, d, op, a->root, rc, st, q)
                 : ringlet_reduce(a->send, a->recv, a->count, d, op, a->root, rc, st);
    case K_ALLGATHER:
        return q ? ringlet_iallgather(a->send, a->recv, a->count, d, rc, st, q)
                 : ringlet_allgather(a->send, a->recv, a->count, d, rc, st);
    case K_REDUCE_SCATTER:
        return q ? ringlet_ireduce_scatter(a->send, a->recv, a->count, d, op, rc, st, q)
                 : ringlet_reduce_scatter(a->send, a->recv, a->count, d, op, rc, st);
    case K_ALLTOALL:
        return q ? ringlet_ialltoall(a->send, a->recv, a->count, d, rc, st, q)
                 : ringlet_alltoall(a->send, a->recv, a->count, d, rc, st);
    case K_GATHER:
        return q ? ringlet_igather(a->send, a->recv, a->count, d, a->root, rc, st, q)
                 : ringlet_gather(a->send, a->recv, a->count, d, a->root, rc, st);
    case K_SCATTER:
        return q ? ringlet_iscatter(a->send, a->recv, a->count, d, a->root, rc, st, q)
                 : ringlet_scatter(a->send, a->recv, a->count, d, a->root, rc, st);
    case K_SEND:
        return q ? ringlet_isend(a->send, a->count, d, a->root, rc, st, q)
                 : ringlet_send(a->send, a->count, d, a->root, rc, st);
    case K_RECV:
        return q ? ringlet_irecv(a->recv, a->count, d, a->root, rc, st, q)
                 : ringlet_recv(a->recv, a->count, d, a->root, rc, st);
    }
    return RINGLET_ERR_INTERNAL;
}

/* The communicators this thread's open group has calls on, entered (shim_enter) until its
 * ncclGroupEnd ran them: an abort from another thread meanwhile leaves their end to it. */
static _Thread_local struct {
    struct ncclComm **c;
    int n, cap;
} t_group_comms;

ncclResult_t shim_group_enter(struct ncclComm *c, const char *fn) {
    if (t_group_comms.n == t_group_comms.cap) {
        int cap = t_group_comms.cap ? 2 * t_group_comms.cap : 16;
        struct ncclComm **m = realloc(t_group_comms.c, sizeof *m * (size_t)cap);
        if (!m) return shim_fail(c, ncclSystemError, "%s: out of memory", fn);
        t_group_comms.c = m;
        t_group_comms.cap = cap;
    }
    ncclResult_t rc = shim_enter(c, fn);
    if (!rc) t_group_comms.c[t_group_comms.n++] = c;
    return rc;
}

static void group_leave_all(void) {
    for (int i = 0; i < t_group_comms.n; i++) shim_leave(t_group_comms.c[i]);
    free(t_group_comms.c); /* a thread's list would outlive it */
    t_group_comms.c = NULL;
    t_group_comms.n = t_group_comms.cap = 0;
}

/* A call the shim refused inside a group (its communicator, its datatype) spoils the
 * group as ringlet's own refusals do: ncclGroupEnd runs none of it (as NCCL's). */
static _Thread_local ncclResult_t t_group_refused;
static _Thread_local char t_group_why[512];

ncclResult_t shim_group_spoil(ncclResult_t rc) {
    if (rc != ncclSuccess && rc != ncclInProgress && t_group_depth > 0 && !t_group_refused) {
        t_group_refused = rc;
        snprintf(t_group_why, sizeof t_group_why, "%s", ncclGetLastError(NULL));
    }
    return rc;
}

static ncclResult_t issue(struct ncclComm *c, const call_t *a, cudaStream_t stream);
static ncclResult_t issue_one(struct ncclComm *c, const call_t *a, cudaStream_t stream) {
    return shim_group_spoil(issue(c, a, stream));
}

static ncclResult_t issue(struct ncclComm *c, const call_t *a, cudaStream_t stream) {
    /* Entered before shim_ready, which may wait for a non-blocking init: an abort meanwhile
     * leaves the handle's end to this call. A grouped call stays entered until ncclGroupEnd. */
    int grouped = t_group_depth > 0;
    ncclResult_t rc = grouped ? shim_group_enter(c, a->fn) : shim_enter(c, a->fn);
    if (rc) return rc;
    ringlet_datatype_t d = RINGLET_UINT8; /* set by datatype() when it succeeds */
    int reduces = a->kind == K_ALLREDUCE || a->kind == K_REDUCE || a->kind == K_REDUCE_SCATTER;
    if (!(rc = shim_ready(c, a->fn)) && !(rc = datatype(c, a->fn, a->dtype, reduces, &d))) {
        void *st = stream ? (void *)stream : RINGLET_STREAM_DEFAULT;
        ringlet_request_t q = NULL;
        if (grouped || c->blocking) rc = shim_check(c, run(a, d, c->rc, st, NULL));
        else if (!(rc = shim_check(c, run(a, d, c->rc, st, &q)))) rc = shim_track(c, q);
    }
    if (!grouped) shim_leave(c);
    return rc;
}

#define ISSUE(comm, stream, ...) issue_one(comm, &(call_t){__VA_ARGS__}, stream)

ncclResult_t ncclAllReduce(const void *s, void *r, size_t n, ncclDataType_t d, ncclRedOp_t op, ncclComm_t c,
                           cudaStream_t st) {
    return ISSUE(c, st, K_ALLREDUCE, "ncclAllReduce", s, r, n, d, op, 0);
}
ncclResult_t ncclBroadcast(const void *s, void *r, size_t n, ncclDataType_t d, int root, ncclComm_t c,
                           cudaStream_t st) {
    return ISSUE(c, st, K_BROADCAST, "ncclBroadcast", s, r, n, d, ncclSum, root);
}
ncclResult_t ncclBcast(void *b, size_t n, ncclDataType_t d, int root, ncclComm_t c, cudaStream_t st) {
    return ISSUE(c, st, K_BROADCAST, "ncclBcast", b, b, n, d, ncclSum, root);
}
ncclResult_t ncclReduce(const void *s, void *r, size_t n, ncclDataType_t d, ncclRedOp_t op, int root, ncclComm_t c,
                        cudaStream_t st) {
    return ISSUE(c, st, K_REDUCE, "ncclReduce", s, r, n, d, op, root);
}
ncclResult_t ncclAllGather(const void *s, void *r, size_t n, ncclDataType_t d, ncclComm_t c, cudaStream_t st) {
    return ISSUE(c, st, K_ALLGATHER, "ncclAllGather", s, r, n, d, ncclSum, 0);
}
ncclResult_t ncclReduceScatter(const void *s, void *r, size_t n, ncclDataType_t d, ncclRedOp_t op, ncclComm_t c,
                               cudaStream_t st) {
    return ISSUE(c, st, K_REDUCE_SCATTER, "ncclReduceScatter", s, r, n, d, op, 0);
}
ncclResult_t ncclAlltoAll(const void *s, void *r, size_t n, ncclDataType_t d, ncclComm_t c, cudaStream_t st) {
    return ISSUE(c, st, K_ALLTOALL, "ncclAlltoAll", s, r, n, d, ncclSum, 0);
}
ncclResult_t ncclGather(const void *s, void *r, size_t n, ncclDataType_t d, int root, ncclComm_t c, cudaStream_t st) {
    return ISSUE(c, st, K_GATHER, "ncclGather", s, r, n, d, ncclSum, root);
}
ncclResult_t ncclScatter(const void *s, void *r, size_t n, ncclDataType_t d, int root, ncclComm_t c, cudaStream_t st) {
    return ISSUE(c, st, K_SCATTER, "ncclScatter", s, r, n, d, ncclSum, root);
}
ncclResult_t ncclSend(const void *s, size_t n, ncclDataType_t d, int peer, ncclComm_t c, cudaStream_t st) {
    return ISSUE(c, st, K_SEND, "ncclSend", s, NULL, n, d, ncclSum, peer);
}
ncclResult_t ncclRecv(void *r, size_t n, ncclDataType_t d, int peer, ncclComm_t c, cudaStream_t st) {
    return ISSUE(c, st, K_RECV, "ncclRecv", NULL, r, n, d, ncclSum, peer);
}

int shim_group_depth(void) { return t_group_depth; }

ncclResult_t ncclGroupStart(void) {
    if (!t_group_depth++) t_group_refused = ncclSuccess;
    return shim_check(NULL, ringlet_group_start());
}

/* Runs the group: its communicators' inits end first; on host memory its results are in
 * place when this returns, on device memory they are queued on their streams. */
ncclResult_t ncclGroupEnd(void) {
    if (!t_group_depth) return shim_fail(NULL, ncclInvalidUsage, "ncclGroupEnd: no ncclGroupStart before it");
    ncclResult_t inits = --t_group_depth ? ncclSuccess : shim_group_inits_end();
    if (!t_group_depth && t_group_refused) { /* drop what the group recorded, run nothing */
        ncclResult_t refused = t_group_refused;
        t_group_refused = ncclSuccess;
        ringlet_group_cancel(NULL);
        group_leave_all();
        return shim_fail(NULL, refused, "ncclGroupEnd: none of the group's calls ran: one was refused (%.400s)",
                         t_group_why);
    }
    ncclResult_t rc = shim_check(NULL, ringlet_group_end());
    if (!t_group_depth) group_leave_all();
    return inits != ncclSuccess && inits != ncclInProgress ? inits : rc != ncclSuccess ? rc : inits;
}

/* NCCL's simulation ends the group (its callers, PyTorch's time estimator among them, call
 * no ncclGroupEnd after it) and runs nothing. ringlet ends it the same way, dropping its
 * operations (left open, the group would record every later call of the thread, their
 * results never written), and has no cost model: the estimate is NCCL_UNDEF_FLOAT, which
 * NCCL also gives when it has none (PyTorch then uses its own formula). */
ncclResult_t ncclGroupSimulateEnd(ncclSimInfo_t *info) {
    if (!info) return ncclGroupEnd(); /* as NCCL: no simulation asked for, a plain end */
    if (!t_group_depth)
        return shim_fail(NULL, ncclInvalidUsage, "ncclGroupSimulateEnd: no ncclGroupStart before it");
    ncclResult_t inits = --t_group_depth ? ncclSuccess : shim_group_inits_end();
    int dropped = 0;
    ncclResult_t refused = t_group_depth ? ncclSuccess : t_group_refused;
    if (!t_group_depth) t_group_refused = ncclSuccess;
    ncclResult_t rc = shim_check(NULL, ringlet_group_cancel(&dropped));
    if (!t_group_depth) group_leave_all();
    if (inits != ncclSuccess && inits != ncclInProgress) return inits;
    if (refused) /* as ncclGroupEnd, NCCL's simulation reports the group's refusal first */
        return shim_fail(NULL, refused, "ncclGroupSimulateEnd: one of the group's calls was refused (%.400s)",
                         t_group_why);
    if (rc || t_group_depth) return rc ? rc : inits; /* as NCCL: simInfo is the outermost end's */
    int short_size = info->size < offsetof(ncclSimInfo_t, magic) + sizeof info->magic;
    if (short_size || info->magic != 0x74685283u)
        return shim_fail(NULL, ncclInvalidArgument,
                         "ncclGroupSimulateEnd: simInfo not initialised with NCCL_SIM_INFO_INITIALIZER (size %zu%s); "
                         "the group was ended, its %d operation(s) dropped",
                         info->size, short_size ? "" : ", bad magic", dropped);
    if (info->size >= offsetof(ncclSimInfo_t, estimatedTime) + sizeof info->estimatedTime)
        info->estimatedTime = NCCL_UNDEF_FLOAT;
    if (dropped) shim_info("ncclGroupSimulateEnd: no estimate (ringlet has no cost model); %d operation(s) "
                           "dropped, not run, as NCCL's simulation runs none", dropped);
    return inits;
}

ncclResult_t ncclRedOpCreatePreMulSum(ncclRedOp_t *op, void *scalar, ncclDataType_t d, ncclScalarResidence_t res,
                                      ncclComm_t c) {
    ringlet_datatype_t rd = RINGLET_FLOAT32; /* set by datatype() when it succeeds */
    ncclResult_t rc = shim_enter_ready(c, "ncclRedOpCreatePreMulSum");
    if (rc) return rc;
    ringlet_op_t rop;
    if ((rc = datatype(c, "ncclRedOpCreatePreMulSum", d, 1, &rd))) {
    } else if (!op) {
        rc = shim_fail(c, ncclInvalidArgument, "ncclRedOpCreatePreMulSum: op is NULL");
    } else if (res != ncclScalarDevice && res != ncclScalarHostImmediate) {
        rc = shim_fail(c, ncclInvalidArgument, "ncclRedOpCreatePreMulSum: residence %d", (int)res);
    } else {
        rc = shim_check(c, ringlet_op_create_premul_sum(
                               &rop, scalar, rd, res == ncclScalarDevice ? RINGLET_SCALAR_DEVICE : RINGLET_SCALAR_HOST,
                               c->rc));
        if (!rc) *op = (ncclRedOp_t)rop;
    }
    shim_leave(c);
    return rc;
}

ncclResult_t ncclRedOpDestroy(ncclRedOp_t op, ncclComm_t c) {
    ncclResult_t rc = shim_enter_ready(c, "ncclRedOpDestroy");
    if (rc) return rc;
    rc = shim_check(c, ringlet_op_destroy((ringlet_op_t)op, c->rc));
    shim_leave(c);
    return rc;
}

SHIM_TWIN(AllReduce);
SHIM_TWIN(Broadcast);
SHIM_TWIN(Bcast);
SHIM_TWIN(Reduce);
SHIM_TWIN(AllGather);
SHIM_TWIN(ReduceScatter);
SHIM_TWIN(AlltoAll);
SHIM_TWIN(Gather);
SHIM_TWIN(Scatter);
SHIM_TWIN(Send);
SHIM_TWIN(Recv);
SHIM_TWIN(GroupStart);
SHIM_TWIN(GroupEnd);
SHIM_TWIN(GroupSimulateEnd);
SHIM_TWIN(RedOpCreatePreMulSum);
SHIM_TWIN(RedOpDestroy);
