#include "collective.h"
#include "names.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "devcomm.h"
#include "failure.h"
#include "log.h"
#include "reduce.h"
#include "trace.h"
#include "util.h"

/* Host buffers with a stream: the stream's earlier work must be done before the host
 * reads them. Queried on the event's device: the runtime makes a context on the thread's
 * current device for the call, and the progress thread may never have chosen one. */
static ringlet_result_t wait_user_event(struct ringlet_comm *c, void *event, int dev, char *err) {
    const rl_device_ops *d = c->dev->d;
    int saved = -1;
    if (d->device_enter(dev, &saved) != RL_DEV_OK) return rl_devcomm_error("selecting the stream's device", err);
    double t0 = rl_now();
    ringlet_result_t rc = RINGLET_SUCCESS;
    int q;
    while ((q = d->event_query(event)) == RL_DEV_NOT_READY) {
        if (atomic_load(&c->stop)) {
            rc = RINGLET_ERR_REMOTE;
            snprintf(err, RL_MSG_MAX, "stopped: the communicator failed");
            break;
        }
        if (rl_now() - t0 > c->timeout_s) {
            rc = RINGLET_ERR_TIMEOUT;
            snprintf(err, RL_MSG_MAX, "the stream's work before the call did not finish within %.0f s", c->timeout_s);
            break;
        }
        rl_sleep_ms(rl_now() - t0 < 1e-3 ? 0 : 1);
    }
    if (!rc && q != RL_DEV_OK) rc = rl_devcomm_error("the stream", err);
    d->device_leave(saved);
    return rc;
}

/* Every stream of the request (a group has several). */
static ringlet_result_t wait_user_stream(struct ringlet_comm *c, struct ringlet_request *r, char *err) {
    ringlet_result_t rc = r->event ? wait_user_event(c, r->event, r->event_device, err) : RINGLET_SUCCESS;
    for (int i = 0; i < r->nxstream && !rc; i++) rc = wait_user_event(c, r->xevent[i], r->xevent_device[i], err);
    return rc;
}

/* A collective on one host's algorithms, by size (the same choice on every rank):
 * RINGLET_ALGO=halving forces recursive halving for all-reduce, =doubling recursive
 * doubling, =star the all-reduce through rank 0; else the star for small all-reduces over
 * TCP where a host has more ranks than cores, recursive doubling for other small
 * all-reduces over TCP on a power of two of ranks, the one-shot path for other small
 * calls, recursive halving for middle-sized all-reduces on a power of two of ranks, the
 * ring otherwise. */
enum { BY_HALVING, BY_STAR, BY_DOUBLING, BY_ONESHOT, BY_RING, BY_COUNT };
enum { OP_KINDS = RL_OP_GROUP + 1 }; /* rl_op_kind's values */
_Static_assert(BY_COUNT * OP_KINDS <= 64, "algos_noted has a bit per (algorithm, call kind)");

/* An INFO line the first time the communicator runs a kind of call by an algorithm (what
 * tests look for to know that a forced algorithm ran; once, not per call). */
static void note_algorithm(struct ringlet_comm *c, const struct ringlet_request *r, int by) {
    static const char *const names[] = {"recursive halving", "star", "recursive doubling", "one-shot", "ring"};
    if ((unsigned)r->kind >= OP_KINDS) return;
    uint64_t bit = 1ull << (by * OP_KINDS + (int)r->kind);
    if (c->algos_noted & bit) return; /* the communicator's one runner only */
    c->algos_noted |= bit;
    RL_INFO(c->rank, "%s #%llu: by the %s algorithm (its first %s on this communicator by it)", rl_op_name(r->kind),
            (unsigned long long)r->seq, names[by], rl_op_name(r->kind));
}

static ringlet_result_t run_collective(struct ringlet_comm *c, struct ringlet_request *r, rl_mem *mem, char *err) {
    int by = c->algo == RL_ALGO_HALVING && rl_halving_fits(c, r)             ? BY_HALVING
             : rl_star_fits(c, r)                                            ? BY_STAR
             : rl_doubling_fits(c, r)                                        ? BY_DOUBLING
             : (r->count > 0 || r->kind == RL_OP_BARRIER) && rl_oneshot_fits(c, r) ? BY_ONESHOT
             : rl_halving_fits(c, r)                                         ? BY_HALVING
                                                                             : BY_RING;
    note_algorithm(c, r, by);
    switch (by) {
    case BY_HALVING: return rl_run_halving(c, r, mem, err);
    case BY_STAR: return rl_run_star(c, r, mem, err);
    case BY_DOUBLING: return rl_run_doubling(c, r, mem, err);
    case BY_ONESHOT: return rl_run_oneshot(c, r, mem, err);
    default: return rl_run_ring(c, r, mem, err);
    }
}

/* A pre-multiplied sum: this rank's input times its scalar (into scratch), then a sum. */
static ringlet_result_t run_premul(struct ringlet_comm *c, struct ringlet_request *r, rl_mem *mem, char *err) {
    size_t es = ringlet_datatype_size(r->dtype);
    size_t n = r->kind == RL_OP_REDUCE_SCATTER ? r->count * (size_t)c->nranks : r->count;
    unsigned char scalar[8];
    char e[RL_MSG_MAX] = "";
    if (r->premul.on_device && n) {
        /* Read when the call runs, as NCCL's device scalars are (no elements: not read;
         * the buffers may be the host's then, api.c's check passing them). */
        const rl_device_ops *d = mem->dev ? mem->dev->d : rl_device();
        void *pin = mem->dev ? rl_devcomm_pinned(c, 64, e) : NULL;
        ringlet_result_t rc = RINGLET_SUCCESS;
        if (!d || !pin) rc = RINGLET_ERR_CUDA;
        else if (d->memcpy_async(pin, r->premul.dptr, es, mem->dev->s_recv) != RL_DEV_OK ||
                 d->event_record(mem->dev->ev_misc, mem->dev->s_recv) != RL_DEV_OK)
            rc = rl_devcomm_error("reading the scalar", e);
        else rc = rl_devcomm_wait(c, mem->dev->ev_misc, "reading the scalar", e);
        if (rc)
            return snprintf(err, RL_MSG_MAX, "%s #%llu: device scalar (a device scalar needs device buffers)%s%.300s",
                            rl_op_name(r->kind), (unsigned long long)r->seq, *e ? ": " : "", e),
                   rc;
        memcpy(scalar, pin, es);
    } else {
        memcpy(scalar, r->premul.value, es);
    }
    char *scaled = NULL;
    if (n) {
        if (mem->dev) {
            scaled = rl_devcomm_scratch2(c, n * es, e);
        } else {
            if (n * es > c->temp2_size) {
                free(c->temp2);
                c->temp2 = malloc(n * es);
                c->temp2_size = c->temp2 ? n * es : 0;
            }
            scaled = c->temp2;
        }
        if (!scaled)
            return snprintf(err, RL_MSG_MAX, "%s #%llu: out of memory for the scaled input%s%.300s", rl_op_name(r->kind),
                            (unsigned long long)r->seq, *e ? ": " : "", e),
                   RINGLET_ERR_SYSTEM;
        rl_mem_scale(mem, scaled, r->sendbuf, n, r->dtype, scalar);
        /* The exchange's staging copies read the scaled input: it must be there. */
        ringlet_result_t rc = rl_mem_fence(c, mem, e);
        if (rc) return snprintf(err, RL_MSG_MAX, "%s #%llu: %.400s", rl_op_name(r->kind), (unsigned long long)r->seq, e), rc;
    }
    struct ringlet_request s;
    rl_request_shadow(&s, r);
    s.sendbuf = scaled ? scaled : r->sendbuf;
    s.op = RINGLET_SUM;
    return run_collective(c, &s, mem, err);
}

static ringlet_result_t run_one(struct ringlet_comm *c, struct ringlet_request *r, rl_mem *mem, char *err);

/* avg of float16 as a sum of the inputs each multiplied by 1/P first, as NCCL does for
 * floating types: float16's largest value is 65504, and a sum of P inputs within range
 * would overflow to infinity before its division (P = 2: two inputs of 40000 averaged to
 * inf). The other floating types have float32's range or more, so the sum is divided
 * after, sparing them the pass that scales the input. */
int rl_avg_premul(const struct ringlet_comm *c, const struct ringlet_request *r) {
    return r->op == RINGLET_AVG && r->dtype == RINGLET_FLOAT16 && c->nranks > 1 &&
           (r->kind == RL_OP_ALLREDUCE || r->kind == RL_OP_REDUCE || r->kind == RL_OP_REDUCE_SCATTER);
}

static ringlet_result_t run_algorithm(struct ringlet_comm *c, struct ringlet_request *r, struct ringlet_request *partner,
                                      rl_mem *mem, char *err) {
    switch (r->kind) {
    case RL_OP_GROUP: return rl_run_group(c, r, mem, run_one, err);
    case RL_OP_ALLTOALL:
    case RL_OP_GATHER:
    case RL_OP_SCATTER: return rl_run_spread(c, r, mem, err);
    default: break;
    }
    if (r->premul.live) return run_premul(c, r, mem, err);
    if (rl_avg_premul(c, r)) {
        struct ringlet_request s;
        rl_request_shadow(&s, r);
        s.premul.live = 1;
        s.premul.dtype = RINGLET_FLOAT16;
        uint16_t inv = rl_float_to_half((float)(1.0 / c->nranks));
        memcpy(s.premul.value, &inv, sizeof inv);
        return run_premul(c, &s, mem, err);
    }
    if (r->kind == RL_OP_SEND || r->kind == RL_OP_RECV) {
        struct ringlet_request *send = r->kind == RL_OP_SEND ? r : partner, *recv = r->kind == RL_OP_RECV ? r : partner;
        return rl_run_p2p_pipe(c, send, recv, mem, err);
    }
    if (rl_hier_candidate(c, r)) return rl_run_allreduce_choosing(c, r, mem, err);
    return run_collective(c, r, mem, err);
}

/* A collective of a group, by algorithm, without the preparation rl_run_op does. */
static ringlet_result_t run_one(struct ringlet_comm *c, struct ringlet_request *r, rl_mem *mem, char *err) {
    return run_algorithm(c, r, NULL, mem, err);
}

/* Before the algorithm: the device state (device buffers: the internal streams wait
 * for the user's stream) or the user's stream itself (host buffers). */
static ringlet_result_t prepare(struct ringlet_comm *c, struct ringlet_request *r, rl_mem *mem, char *err) {
    char derr[RL_MSG_MAX]; /* a string: only its first byte cleared (every call comes here) */
    derr[0] = 0;
    ringlet_result_t rc = RINGLET_SUCCESS;
    if (r->device >= 0) rc = rl_devcomm_begin(c, r, &mem->dev, derr);
    else if (r->event) rc = wait_user_stream(c, r, derr);
    if (rc) snprintf(err, RL_MSG_MAX, "%s #%llu: %.400s", rl_op_name(r->kind), (unsigned long long)r->seq, derr);
    return rc;
}

/* ---- RINGLET_CHECK: every rank's call compared before a collective runs ---- */

/* What a collective call is, as its peers must see the same. */
typedef struct {
    uint64_t seq, count;
    int32_t kind, dtype, op, root;
    /* how many collectives of its group come after it (0: the last, or not in a group): a
     * rank whose group has fewer collectives would otherwise run its real ones against
     * the others' remaining comparisons */
    int32_t left, pad;
} fingerprint_t;

#define RL_FP_PREMUL (-2)

static int is_reduction(int kind) {
    return kind == RL_OP_ALLREDUCE || kind == RL_OP_REDUCE || kind == RL_OP_REDUCE_SCATTER;
}

/* "allreduce(count=1000, float32, sum)", "broadcast(count=1000, float32, root=0)". */
static void describe_call(const fingerprint_t *f, char *out, size_t n) {
    char op[32] = "";
    if (is_reduction(f->kind)) {
        if (f->op >= 0 && f->op < RINGLET_NUM_OPS) snprintf(op, sizeof op, ", %s", rl_redop_name((ringlet_op_t)f->op));
        else if (f->op == RL_FP_PREMUL) snprintf(op, sizeof op, ", pre-multiplied sum");
        else snprintf(op, sizeof op, ", op %d", (int)f->op);
    }
    char root[24] = "";
    if (rl_op_rooted(f->kind)) snprintf(root, sizeof root, ", root=%d", (int)f->root);
    char left[80] = "";
    if (f->left > 0) snprintf(left, sizeof left, " with %d more collective(s) of its group after it", (int)f->left);
    if (f->kind == RL_OP_BARRIER) snprintf(out, n, "barrier()%s", left);
    else
        snprintf(out, n, "%s(count=%llu, %s%s%s)%s", rl_op_name((rl_op_kind)f->kind), (unsigned long long)f->count,
                 rl_dtype_name((ringlet_datatype_t)f->dtype), op, root, left);
}

static int same_call(const fingerprint_t *a, const fingerprint_t *b) {
    return a->seq == b->seq && a->kind == b->kind && a->count == b->count && a->dtype == b->dtype && a->left == b->left &&
           (!is_reduction(a->kind) || a->op == b->op) && (!rl_op_rooted(a->kind) || a->root == b->root);
}

/* Gathers every rank's fingerprint of r (a small all-gather on host memory) and fails
 * r, on every rank with the same message, when they differ. Nothing else is exchanged
 * for r then, so the communicator stays usable.
 *
 * A mismatch is then followed by a barrier before any rank returns: a rank's all-gather
 * may end while a peer's has not (its own receives done, its last message still on the
 * way), and a user who aborts on the error would make that peer's all-gather fail with
 * "rank N failed" instead of the mismatch. After the barrier every rank holds the
 * verdict; a failure of the barrier itself (a rank that returned and aborted while this
 * one was still in it) does not replace it. */
static ringlet_result_t check_call(struct ringlet_comm *c, struct ringlet_request *r, int left, char *err) {
    int P = c->nranks;
    fingerprint_t mine;
    memset(&mine, 0, sizeof mine);
    /* Not r->seq: that numbers every operation, also the sends and receives that only some
     * ranks call, so a send from 0 to 1 would make the next collective mismatch. */
    mine.seq = ++c->check_seq;
    mine.count = r->count;
    mine.kind = (int32_t)r->kind;
    mine.dtype = (int32_t)r->dtype;
    /* A pre-multiplied sum by what it is: its op's number is this rank's own. */
    mine.op = r->premul.live ? RL_FP_PREMUL : (int32_t)r->op;
    mine.root = r->root;
    mine.left = left;
    fingerprint_t *all = calloc((size_t)P, sizeof *all);
    if (!all)
        return snprintf(err, RL_MSG_MAX, "%s #%llu: out of memory for the call check", rl_op_name(r->kind),
                        (unsigned long long)r->seq),
               RINGLET_ERR_SYSTEM;
    struct ringlet_request g;
    memset(&g, 0, sizeof g);
    g.comm = c;
    g.kind = RL_OP_ALLGATHER;
    g.sendbuf = &mine;
    g.recvbuf = all;
    g.count = sizeof mine;
    g.dtype = RINGLET_UINT8;
    g.seq = r->seq;
    g.device = -1;
    rl_mem host = {NULL, RINGLET_SUCCESS, "", NULL};
    char e[RL_MSG_MAX] = "";
    ringlet_result_t rc = run_algorithm(c, &g, NULL, &host, e);
    if (rc) {
        snprintf(err, RL_MSG_MAX, "%s #%llu (comparing the ranks' calls): %.400s", rl_op_name(r->kind),
                 (unsigned long long)r->seq, e);
    } else {
        for (int q = 1; q < P; q++)
            if (!same_call(&all[q], &all[0])) {
                char a[160], b[160];
                describe_call(&all[0], a, sizeof a);
                describe_call(&all[q], b, sizeof b);
                rc = RINGLET_ERR_INVALID_USAGE;
                if (all[q].seq != all[0].seq)
                    snprintf(err, RL_MSG_MAX, "mismatched collectives: rank 0 called %s as operation #%llu, rank %d "
                             "called %s as operation #%llu (a rank skipped or added an operation)", a,
                             (unsigned long long)all[0].seq, q, b, (unsigned long long)all[q].seq);
                else
                    snprintf(err, RL_MSG_MAX, "mismatched collectives: operation #%llu: rank 0 called %s, rank %d called %s",
                             (unsigned long long)all[0].seq, a, q, b);
                break;
            }
        if (rc) {
            /* The verdict is the same on every rank: every rank runs this barrier. */
            struct ringlet_request b;
            memset(&b, 0, sizeof b);
            b.comm = c;
            b.kind = RL_OP_BARRIER;
            b.dtype = RINGLET_UINT8;
            b.seq = r->seq;
            b.device = -1;
            rl_mem bm = {NULL, RINGLET_SUCCESS, "", NULL};
            char be[RL_MSG_MAX] = "";
            if (run_algorithm(c, &b, NULL, &bm, be) != RINGLET_SUCCESS)
                RL_INFO(c->rank, "%s #%llu: the barrier after the mismatch failed (%s); the mismatch is the error",
                        rl_op_name(r->kind), (unsigned long long)r->seq, be);
        }
    }
    free(all);
    return rc;
}

/* A group's collectives compared as check_call compares one, each in its order with how
 * many follow it in the group, before any of them runs (its sends and receives are not
 * compared, as plain ones are not): a rank whose group differs, in a call or in how many
 * collectives it has, fails there with the others, and nothing of the group ran. So the
 * same collectives grouped otherwise on another rank (two plain calls against a group of
 * two) are a mismatch too; a group of one is the plain call. */
static ringlet_result_t check_group(struct ringlet_comm *c, const struct ringlet_request *g, char *err) {
    ringlet_result_t rc = RINGLET_SUCCESS;
    int left = 0;
    for (int i = 0; i < g->nsub; i++) left += g->sub[i].kind != RL_OP_SEND && g->sub[i].kind != RL_OP_RECV;
    for (int i = 0; i < g->nsub && !rc; i++) {
        const rl_subop *o = &g->sub[i];
        if (o->kind == RL_OP_SEND || o->kind == RL_OP_RECV) continue;
        left--;
        struct ringlet_request one;
        rl_subop_request(&one, c, o, g->seq);
        rc = check_call(c, &one, left, err);
    }
    return rc;
}

ringlet_result_t rl_run_op(struct ringlet_comm *c, struct ringlet_request *r, struct ringlet_request *partner,
                           char *err, char *partner_err) {
    err[0] = 0;
    int timed = c->trace || rl_log_level() >= RL_LOG_TRACE; /* a clock read costs ~10% of a small call */
    double t0 = timed ? rl_now() : 0;
    rl_mem mem; /* not zeroed whole: its message buffer is written only on failure */
    mem.dev = NULL;
    mem.rc = RINGLET_SUCCESS;
    mem.pool = c->pool;
    ringlet_result_t rc = RINGLET_SUCCESS;
    if (c->check && c->nranks > 1 && !partner && r->kind == RL_OP_GROUP) rc = check_group(c, r, err);
    else if (c->check && c->nranks > 1 && !partner && r->kind != RL_OP_SEND && r->kind != RL_OP_RECV)
        rc = check_call(c, r, 0, err);
    /* The check's verdict of a mismatch is the same on every rank (they all stop there,
     * after a barrier): the communicator stays usable. Its other failures are this
     * rank's alone (memory) or the communicator's already. */
    int checked = rc == RINGLET_ERR_INVALID_USAGE;
    if (!rc) rc = prepare(c, r, &mem, err);
    if (!rc && partner) rc = prepare(c, partner, &mem, err);
    if (!rc) rc = run_algorithm(c, r, partner, &mem, err);
    if (mem.dev) {
        /* The device work this operation enqueued finishes before its memory is reused. */
        char derr[RL_MSG_MAX] = "";
        ringlet_result_t drc = rl_devcomm_drain(c, derr);
        if (drc && !rc) {
            rc = drc;
            snprintf(err, RL_MSG_MAX, "%s #%llu: %.400s", rl_op_name(r->kind), (unsigned long long)r->seq, derr);
        }
    }
    if (rc && !checked && c->nranks > 1 && !atomic_load(&c->failed)) {
        /* A failure of this rank's own (memory, a device, a usage only it got wrong) left
         * its peers in the operation, or its messages half sent: the communicator fails,
         * so that they hear of it at once, naming this rank, rather than at their
         * deadline, and this rank's next call does not meet their current one. */
        char what[RL_MSG_MAX];
        snprintf(what, sizeof what, "%s", err);
        rc = rl_comm_op_failed(c, r, rc, what, err);
    }
    if (partner && rc) {
        /* One exchange ran both, and both failed: each message names its own call. */
        char msg[RL_MSG_MAX] = "";
        if (atomic_load(&c->failed)) rl_comm_failure(c, msg, sizeof msg);
        else snprintf(msg, sizeof msg, "%.400s", err);
        snprintf(err, RL_MSG_MAX, "%s #%llu with rank %d failed: %.400s", rl_op_name(r->kind),
                 (unsigned long long)r->seq, r->peer, msg);
        snprintf(partner_err, RL_MSG_MAX, "%s #%llu with rank %d failed: %.400s", rl_op_name(partner->kind),
                 (unsigned long long)partner->seq, partner->peer, msg);
    }
    if (timed) {
        double t1 = rl_now();
        size_t bytes = r->count * ringlet_datatype_size(r->dtype);
        rl_trace_span(c->trace, RL_LANE_OP, rl_op_name(r->kind), t0, t1, rl_op_name(r->kind), r->seq, -1, bytes, -1);
        RL_TRACE(c->rank, "%s #%llu count %zu%s%s: %.1f us, %s", rl_op_name(r->kind), (unsigned long long)r->seq,
                 r->count, mem.dev ? " (device)" : "", partner ? " (with its partner)" : "", (t1 - t0) * 1e6,
                 rc ? err : "ok");
    }
    return rc;
}
