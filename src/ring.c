/* Ring algorithms over the transport interface.
 *
 * Every collective here is one pipelined exchange with the ring neighbours: this rank
 * receives a sequence of chunks from prev and sends a sequence to next. Chunk i of the
 * receive sequence and chunk i of next's receive sequence is the same as chunk i of
 * this rank's send sequence, so both ends agree on every size without talking.
 *
 * The send of chunk i may depend on receive i - lag having been processed (reduced, or
 * landed in place), which is how data flows round the ring. Up to nslots receives and
 * nslots sends are in flight at once, so the network, the peer and the reduction
 * overlap.
 *
 * all-reduce, P ranks, nc chunks per segment: 2(P-1) steps of nc chunks.
 *   reduce-scatter step k (0..P-2): send segment (q-k), receive segment (q-k-1) and
 *   reduce it with the local contribution; after P-1 steps position q holds the full
 *   reduction of segment q+1. All-gather step k: send segment (q+1-k), receive
 *   segment (q-k) in place. (q = ring position, segments mod P.) lag = nc.
 */
#include <stdio.h>
#include <string.h>

#include "comm.h"
#include "log.h"
#include "reduce.h"
#include "trace.h"
#include "util.h"

/* Segmentation of `count` elements into nseg segments cut into chunks of ce. */
typedef struct {
    size_t es;        /* element size */
    size_t base, rem; /* segment s has base + (s < rem) elements */
    size_t ce;        /* elements per chunk */
    size_t nc;        /* chunks per segment (of the largest) */
    int nseg;
} geom;

static geom geom_make(size_t count, int nseg, size_t es, size_t chunk_bytes, int equal_blocks) {
    geom g;
    g.es = es;
    g.nseg = nseg;
    g.base = equal_blocks ? count : count / (size_t)nseg;
    g.rem = equal_blocks ? 0 : count % (size_t)nseg;
    g.ce = chunk_bytes / es ? chunk_bytes / es : 1;
    size_t maxseg = g.base + (g.rem > 0);
    g.nc = maxseg ? (maxseg + g.ce - 1) / g.ce : 1;
    return g;
}

/* Element offset and length of chunk j of segment s. */
static void geom_chunk(const geom *g, int s, size_t j, size_t *off, size_t *len) {
    size_t us = (size_t)s;
    size_t seg_off = us * g->base + (us < g->rem ? us : g->rem);
    size_t seg_len = g->base + (us < g->rem);
    size_t lo = j * g->ce;
    *off = seg_off + lo;
    *len = lo >= seg_len ? 0 : (seg_len - lo < g->ce ? seg_len - lo : g->ce);
}

static int mod(long long a, int p) { return (int)(((a % p) + p) % p); }

/* One pipelined exchange. */
typedef struct pipe pipe_t;
struct pipe {
    struct ringlet_comm *c;
    const struct ringlet_request *r;
    size_t nrecv, nsend;
    size_t lag;       /* send i waits for receive i - lag (if any) */
    int send_dep;     /* sends depend on receives */
    size_t recv_lag;  /* > 0: receive i waits until send i - recv_lag completed (it reads the
                         memory receive i overwrites: in-place all-reduce) */
    /* Where chunk i goes / comes from; *dst = NULL: into a staging slot. */
    void (*recv_at)(pipe_t *p, size_t i, void **dst, size_t *bytes);
    void (*send_at)(pipe_t *p, size_t i, const void **src, size_t *bytes);
    /* After receive i landed (slot = its staging slot, or NULL). */
    void (*process)(pipe_t *p, size_t i, void *slot);
    geom g;
    int P, q;         /* ranks, this rank's ring position (or chain position) */
    char *work;       /* where partial results live */
};

/* Turns a failure into the operation's error; the communicator's own message (a dead
 * peer named by the monitor) wins over the transport's local view. */
static ringlet_result_t pipe_error(pipe_t *p, ringlet_result_t code, const char *what, char *err) {
    return rl_comm_op_failed(p->c, p->r, code, what, err);
}

static ringlet_result_t pipe_run(pipe_t *p, char *err) {
    struct ringlet_comm *c = p->c;
    const int W = c->nslots;
    rl_treq rreq[64], sreq[64];
    rl_conn *sconn = NULL, *rconn = NULL;
    char cerr[RL_ERR_MAX] = "";
    ringlet_result_t rc = RINGLET_SUCCESS;
    if (p->nsend) rc = rl_comm_send_conn(c, c->next, &sconn, cerr);
    if (!rc && p->nrecv) rc = rl_comm_recv_conn(c, c->prev, &rconn, cerr);
    if (rc) return pipe_error(p, rc, cerr, err);

    size_t posted_r = 0, done_r = 0, posted_s = 0, done_s = 0;
    double last_progress = rl_now();
    rl_trace *tr = c->trace;
    double t_r[64], t_s[64]; /* when each in-flight chunk was posted (tracing) */
    char mapped[64];         /* receive i % W lent a transport slot (irecv_map) */
    const char *opname = rl_op_name(p->r->kind);
    char failure[RL_ERR_MAX + 64] = "";
    ringlet_result_t fcode = RINGLET_SUCCESS;
    while ((done_r < p->nrecv || done_s < p->nsend) && fcode == RINGLET_SUCCESS) {
        unsigned gen = rl_comm_gen(c);
        int progressed = 0;
        rl_comm_progress(c);
        while (posted_r < p->nrecv && posted_r - done_r < (size_t)W &&
               (!p->recv_lag || posted_r < p->recv_lag || posted_r - p->recv_lag < done_s)) {
            void *dst;
            size_t bytes;
            rl_treq *t = &rreq[posted_r % (size_t)W];
            rl_fault_point(&c->fault, c->rank, opname, p->r->seq, RL_FAULT_RECV, posted_r);
            p->recv_at(p, posted_r, &dst, &bytes);
            /* Into staging: where the transport can lend its own memory (a shared-memory
             * slot), the reduction reads straight from there and saves a copy. */
            mapped[posted_r % (size_t)W] = !dst && rconn->tp->irecv_map && rconn->tp->irecv_map(rconn->h, bytes, t) == RINGLET_SUCCESS;
            if (!mapped[posted_r % (size_t)W]) {
                if (!dst) dst = c->slots + (posted_r % (size_t)W) * c->chunk_bytes;
                rconn->tp->irecv(rconn->h, dst, bytes, NULL, t);
            }
            if (tr) t_r[posted_r % (size_t)W] = rl_now();
            posted_r++;
            progressed = 1;
        }
        while (posted_s < p->nsend && posted_s - done_s < (size_t)W &&
               (!p->send_dep || posted_s < p->lag || posted_s - p->lag < done_r)) {
            const void *src;
            size_t bytes;
            rl_fault_point(&c->fault, c->rank, opname, p->r->seq, RL_FAULT_SEND, posted_s);
            p->send_at(p, posted_s, &src, &bytes);
            sconn->tp->isend(sconn->h, src, bytes, NULL, &sreq[posted_s % (size_t)W]);
            if (tr) t_s[posted_s % (size_t)W] = rl_now();
            posted_s++;
            progressed = 1;
        }
        while (done_r < posted_r && rl_treq_done(&rreq[done_r % (size_t)W])) {
            rl_treq *t = &rreq[done_r % (size_t)W];
            if (atomic_load(&t->status) != RINGLET_SUCCESS) {
                fcode = atomic_load(&t->status);
                snprintf(failure, sizeof failure, "%s", t->err);
                break;
            }
            void *dst;
            size_t bytes;
            p->recv_at(p, done_r, &dst, &bytes);
            double t0 = tr ? rl_now() : 0;
            if (tr) rl_trace_span(tr, RL_LANE_RECV, "recv", t_r[done_r % (size_t)W], t0, opname, p->r->seq, (long long)done_r, bytes, c->prev);
            int lent = mapped[done_r % (size_t)W];
            if (p->process) {
                void *slot = lent ? (void *)t->mapped : dst ? NULL : c->slots + (done_r % (size_t)W) * c->chunk_bytes;
                p->process(p, done_r, slot);
                if (tr && !dst) rl_trace_span(tr, RL_LANE_REDUCE, "reduce", t0, rl_now(), opname, p->r->seq, (long long)done_r, bytes, -1);
            }
            if (lent) rconn->tp->release(rconn->h, t);
            done_r++;
            progressed = 1;
        }
        while (fcode == RINGLET_SUCCESS && done_s < posted_s && rl_treq_done(&sreq[done_s % (size_t)W])) {
            rl_treq *t = &sreq[done_s % (size_t)W];
            if (atomic_load(&t->status) != RINGLET_SUCCESS) {
                fcode = atomic_load(&t->status);
                snprintf(failure, sizeof failure, "%s", t->err);
                break;
            }
            if (tr) rl_trace_span(tr, RL_LANE_SEND, "send", t_s[done_s % (size_t)W], rl_now(), opname, p->r->seq, (long long)done_s, t->len, c->next);
            done_s++;
            progressed = 1;
        }
        if (progressed || fcode) {
            last_progress = rl_now();
            continue;
        }
        if (atomic_load(&c->failed)) {
            fcode = c->fail_code ? c->fail_code : RINGLET_ERR_REMOTE;
            break;
        }
        if (rl_now() - last_progress > c->timeout_s) {
            fcode = RINGLET_ERR_TIMEOUT;
            int waiting_recv = done_r < posted_r;
            snprintf(failure, sizeof failure, "no progress for %.0f s (RINGLET_TIMEOUT) waiting to %s rank %d",
                     c->timeout_s, waiting_recv ? "receive from" : "send to", waiting_recv ? c->prev : c->next);
            break;
        }
        rl_comm_wait_event(c, gen, 100);
    }
    if (fcode == RINGLET_SUCCESS) return RINGLET_SUCCESS;
    /* Stop the transport's work on our buffers before handing them back. */
    ringlet_result_t code = pipe_error(p, fcode, failure, err);
    for (size_t i = done_r; i < posted_r; i++)
        while (!rl_treq_done(&rreq[i % (size_t)W])) rl_comm_wait_event(c, rl_comm_gen(c), 10);
    for (size_t i = done_s; i < posted_s; i++)
        while (!rl_treq_done(&sreq[i % (size_t)W])) rl_comm_wait_event(c, rl_comm_gen(c), 10);
    return code;
}

/* ---- all-reduce ---- */

static char *at(const void *buf, const geom *g, size_t off) { return (char *)buf + off * g->es; }

static void ar_recv_at(pipe_t *p, size_t i, void **dst, size_t *bytes) {
    size_t k = i / p->g.nc, j = i % p->g.nc, off, len;
    int P = p->P, steps = P - 1;
    int seg = k < (size_t)steps ? mod((long long)p->q - (long long)k - 1, P) : mod((long long)p->q - (long long)(k - steps), P);
    geom_chunk(&p->g, seg, j, &off, &len);
    *bytes = len * p->g.es;
    *dst = k < (size_t)steps ? NULL : at(p->r->recvbuf, &p->g, off);
}

static void ar_send_at(pipe_t *p, size_t i, const void **src, size_t *bytes) {
    size_t k = i / p->g.nc, j = i % p->g.nc, off, len;
    int P = p->P, steps = P - 1;
    int seg = k < (size_t)steps ? mod((long long)p->q - (long long)k, P)
                                : mod((long long)p->q + 1 - (long long)(k - steps), P);
    geom_chunk(&p->g, seg, j, &off, &len);
    *bytes = len * p->g.es;
    *src = at(k == 0 ? p->r->sendbuf : p->r->recvbuf, &p->g, off);
}

static void ar_process(pipe_t *p, size_t i, void *slot) {
    size_t k = i / p->g.nc, j = i % p->g.nc, off, len;
    int P = p->P;
    if (k >= (size_t)(P - 1)) return; /* all-gather: landed in place */
    int seg = mod((long long)p->q - (long long)k - 1, P);
    geom_chunk(&p->g, seg, j, &off, &len);
    char *dst = at(p->r->recvbuf, &p->g, off);
    rl_reduce_host(dst, at(p->r->sendbuf, &p->g, off), slot, len, p->r->dtype, p->r->op);
    if (k == (size_t)(P - 2) && p->r->op == RINGLET_AVG) rl_divide_host(dst, len, p->r->dtype, P);
}

/* ---- reduce-scatter: like all-reduce's first half, shifted so that position q ends
 * with block q; partial sums live in work, the last step writes recvbuf. ---- */

static int rs_block(pipe_t *p, int pos) { return p->c->ring[pos]; }

static void rs_recv_at(pipe_t *p, size_t i, void **dst, size_t *bytes) {
    size_t k = i / p->g.nc, j = i % p->g.nc, off, len;
    geom_chunk(&p->g, rs_block(p, mod((long long)p->q - (long long)k - 2, p->P)), j, &off, &len);
    *bytes = len * p->g.es;
    *dst = NULL;
}

static void rs_send_at(pipe_t *p, size_t i, const void **src, size_t *bytes) {
    size_t k = i / p->g.nc, j = i % p->g.nc, off, len;
    geom_chunk(&p->g, rs_block(p, mod((long long)p->q - (long long)k - 1, p->P)), j, &off, &len);
    *bytes = len * p->g.es;
    *src = at(k == 0 ? p->r->sendbuf : p->work, &p->g, off);
}

static void rs_process(pipe_t *p, size_t i, void *slot) {
    size_t k = i / p->g.nc, j = i % p->g.nc, off, len;
    int blk = rs_block(p, mod((long long)p->q - (long long)k - 2, p->P));
    geom_chunk(&p->g, blk, j, &off, &len);
    const char *local = at(p->r->sendbuf, &p->g, off);
    if (k == (size_t)(p->P - 2)) {
        char *dst = at(p->r->recvbuf, &p->g, off - (size_t)blk * p->g.base);
        rl_reduce_host(dst, local, slot, len, p->r->dtype, p->r->op);
        if (p->r->op == RINGLET_AVG) rl_divide_host(dst, len, p->r->dtype, p->P);
    } else {
        rl_reduce_host(at(p->work, &p->g, off), local, slot, len, p->r->dtype, p->r->op);
    }
}

/* ---- all-gather: step k sends block of position q-k, receives block of q-k-1. ---- */

static void ag_recv_at(pipe_t *p, size_t i, void **dst, size_t *bytes) {
    size_t k = i / p->g.nc, j = i % p->g.nc, off, len;
    geom_chunk(&p->g, rs_block(p, mod((long long)p->q - (long long)k - 1, p->P)), j, &off, &len);
    *bytes = len * p->g.es;
    *dst = at(p->r->recvbuf, &p->g, off);
}

static void ag_send_at(pipe_t *p, size_t i, const void **src, size_t *bytes) {
    size_t k = i / p->g.nc, j = i % p->g.nc, off, len;
    geom_chunk(&p->g, rs_block(p, mod((long long)p->q - (long long)k, p->P)), j, &off, &len);
    *bytes = len * p->g.es;
    /* Step 0 sends this rank's own block straight from sendbuf. */
    *src = k == 0 ? (const char *)p->r->sendbuf + (off - (size_t)p->c->rank * p->g.base) * p->g.es
                  : at(p->r->recvbuf, &p->g, off);
}

/* ---- broadcast and reduce: a chain along the ring. Position 0 of the chain is the
 * first sender; chunk i is received, then forwarded (lag 0). ---- */

static void chain_chunk(pipe_t *p, size_t i, size_t *off, size_t *bytes) {
    size_t len;
    geom_chunk(&p->g, 0, i, off, &len);
    *bytes = len * p->g.es;
}

static void bc_recv_at(pipe_t *p, size_t i, void **dst, size_t *bytes) {
    size_t off;
    chain_chunk(p, i, &off, bytes);
    *dst = at(p->r->recvbuf, &p->g, off);
}

static void bc_send_at(pipe_t *p, size_t i, const void **src, size_t *bytes) {
    size_t off;
    chain_chunk(p, i, &off, bytes);
    *src = at(p->q == 0 ? p->r->sendbuf : p->r->recvbuf, &p->g, off);
}

static void rd_recv_at(pipe_t *p, size_t i, void **dst, size_t *bytes) {
    size_t off;
    chain_chunk(p, i, &off, bytes);
    *dst = NULL;
}

static void rd_send_at(pipe_t *p, size_t i, const void **src, size_t *bytes) {
    size_t off;
    chain_chunk(p, i, &off, bytes);
    *src = at(p->q == 0 ? p->r->sendbuf : p->work, &p->g, off);
}

static void rd_process(pipe_t *p, size_t i, void *slot) {
    size_t off, bytes;
    chain_chunk(p, i, &off, &bytes);
    size_t len = bytes / p->g.es;
    int is_root = p->q == p->P - 1;
    char *dst = at(is_root ? p->r->recvbuf : p->work, &p->g, off);
    rl_reduce_host(dst, at(p->r->sendbuf, &p->g, off), slot, len, p->r->dtype, p->r->op);
    if (is_root && p->r->op == RINGLET_AVG) rl_divide_host(dst, len, p->r->dtype, p->P);
}

static void copy_if_needed(void *dst, const void *src, size_t bytes) {
    if (dst != src && bytes) memcpy(dst, src, bytes);
}

ringlet_result_t rl_run_collective(struct ringlet_comm *c, struct ringlet_request *r, char *err) {
    int P = c->nranks;
    size_t es = ringlet_datatype_size(r->dtype);
    pipe_t p;
    memset(&p, 0, sizeof p);
    p.c = c;
    p.r = r;
    p.P = P;
    p.q = c->ring_pos;
    size_t cb = c->chunk_bytes;
    if ((r->count > 0 || r->kind == RL_OP_BARRIER) && rl_oneshot_fits(c, r)) return rl_run_oneshot(c, r, err);
    switch (r->kind) {
    case RL_OP_ALLREDUCE:
        if (r->count == 0) return RINGLET_SUCCESS;
        if (P == 1) {
            copy_if_needed(r->recvbuf, r->sendbuf, r->count * es);
            return RINGLET_SUCCESS;
        }
        p.g = geom_make(r->count, P, es, cb, 0);
        p.nrecv = p.nsend = 2 * (size_t)(P - 1) * p.g.nc;
        p.lag = p.g.nc;
        p.send_dep = 1;
        /* All-gather step 0 receives segment q, which reduce-scatter step 0 sent. */
        p.recv_lag = (size_t)(P - 1) * p.g.nc;
        p.recv_at = ar_recv_at;
        p.send_at = ar_send_at;
        p.process = ar_process;
        break;
    case RL_OP_REDUCE_SCATTER:
        if (r->count == 0) return RINGLET_SUCCESS;
        if (P == 1) {
            copy_if_needed(r->recvbuf, r->sendbuf, r->count * es);
            return RINGLET_SUCCESS;
        }
        p.g = geom_make(r->count, P, es, cb, 1);
        p.work = rl_comm_temp(c, r->count * (size_t)P * es);
        if (!p.work) return snprintf(err, RL_MSG_MAX, "reduce_scatter: out of memory for scratch"), RINGLET_ERR_SYSTEM;
        p.nrecv = p.nsend = (size_t)(P - 1) * p.g.nc;
        p.lag = p.g.nc;
        p.send_dep = 1;
        p.recv_at = rs_recv_at;
        p.send_at = rs_send_at;
        p.process = rs_process;
        break;
    case RL_OP_ALLGATHER:
    case RL_OP_BARRIER: {
        struct ringlet_request bar;
        if (r->kind == RL_OP_BARRIER) {
            /* A barrier is an all-gather of one byte: after P-1 steps every rank has
             * heard, through the ring, from every other rank. */
            char *b = rl_comm_temp(c, (size_t)P + 1);
            if (!b) return snprintf(err, RL_MSG_MAX, "barrier: out of memory"), RINGLET_ERR_SYSTEM;
            memset(b, 0, (size_t)P + 1);
            rl_request_shadow(&bar, r);
            bar.sendbuf = b + c->rank;
            bar.recvbuf = b;
            bar.count = 1;
            bar.dtype = RINGLET_UINT8;
            r = &bar;
            p.r = r;
            es = 1;
        }
        if (r->count == 0) return RINGLET_SUCCESS;
        copy_if_needed((char *)r->recvbuf + (size_t)c->rank * r->count * es, r->sendbuf, r->count * es);
        if (P == 1) return RINGLET_SUCCESS;
        p.g = geom_make(r->count, P, es, cb, 1);
        p.nrecv = p.nsend = (size_t)(P - 1) * p.g.nc;
        p.lag = p.g.nc;
        p.send_dep = 1;
        p.recv_at = ag_recv_at;
        p.send_at = ag_send_at;
        ringlet_result_t rc = pipe_run(&p, err);
        return rc;
    }
    case RL_OP_BROADCAST: {
        if (r->count == 0) return RINGLET_SUCCESS;
        int root_pos = 0;
        for (int i = 0; i < P; i++)
            if (c->ring[i] == r->root) root_pos = i;
        p.q = mod((long long)c->ring_pos - root_pos, P);
        if (p.q == 0) copy_if_needed(r->recvbuf, r->sendbuf, r->count * es);
        if (P == 1) return RINGLET_SUCCESS;
        p.g = geom_make(r->count, 1, es, cb, 1);
        p.nrecv = p.q == 0 ? 0 : p.g.nc;
        p.nsend = p.q == P - 1 ? 0 : p.g.nc;
        p.lag = 0;
        p.send_dep = p.q != 0;
        p.recv_at = bc_recv_at;
        p.send_at = bc_send_at;
        break;
    }
    case RL_OP_REDUCE: {
        if (r->count == 0) return RINGLET_SUCCESS;
        int root_pos = 0;
        for (int i = 0; i < P; i++)
            if (c->ring[i] == r->root) root_pos = i;
        /* The chain starts after the root and ends at it. */
        p.q = mod((long long)c->ring_pos - root_pos - 1, P);
        if (P == 1) {
            copy_if_needed(r->recvbuf, r->sendbuf, r->count * es);
            return RINGLET_SUCCESS;
        }
        p.g = geom_make(r->count, 1, es, cb, 1);
        if (p.q != 0 && p.q != P - 1) {
            p.work = rl_comm_temp(c, r->count * es);
            if (!p.work) return snprintf(err, RL_MSG_MAX, "reduce: out of memory for scratch"), RINGLET_ERR_SYSTEM;
        }
        p.nrecv = p.q == 0 ? 0 : p.g.nc;
        p.nsend = p.q == P - 1 ? 0 : p.g.nc;
        p.lag = 0;
        p.send_dep = p.q != 0;
        p.recv_at = rd_recv_at;
        p.send_at = rd_send_at;
        p.process = rd_process;
        break;
    }
    default:
        return snprintf(err, RL_MSG_MAX, "internal: %s is not a collective", rl_op_name(r->kind)), RINGLET_ERR_INTERNAL;
    }
    return pipe_run(&p, err);
}
