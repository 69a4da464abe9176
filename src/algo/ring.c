/* Ring algorithms: each collective is one pipelined exchange with the ring neighbours
 * (pipe.h), on host or device memory alike (mem.h). This rank receives a sequence of
 * chunks from prev and sends a sequence to next; chunk i of this rank's send sequence
 * is chunk i of next's receive sequence, so both ends agree on every size without
 * talking.
 *
 * all-reduce, P ranks, nc chunks per segment: 2(P-1) steps of nc chunks.
 *   reduce-scatter step k (0..P-2): send segment (q-k), receive segment (q-k-1) and
 *   reduce it with the local contribution; after P-1 steps position q holds the full
 *   reduction of segment q+1. All-gather step k: send segment (q+1-k), receive
 *   segment (q-k) in place. (q = ring position, segments mod P.) lag = nc.
 * reduce-scatter: the first half, shifted so that position q ends with block q.
 * all-gather: step k sends the block of position q-k and receives that of q-k-1.
 * broadcast, reduce: a chain along the ring, chunk i received then forwarded (lag 0).
 */
#include <stdio.h>
#include <string.h>

#include "collective.h"
#include "pipe.h"

static int mod(long long a, int p) { return (int)(((a % p) + p) % p); }

static char *at(const void *buf, const rl_geom *g, size_t off) { return (char *)buf + off * g->es; }

/* ---- all-reduce: steps p->k0 + i / nc (a sub-range of the steps: hier.c) ---- */

/* Receive i: its step (returned) and its chunk's element offset and length. Reduce-scatter
 * step k receives segment q-k-1, all-gather step k segment q-(k-(P-1)). */
static size_t ar_recv_chunk(const rl_pipe *p, size_t i, size_t *off, size_t *len) {
    size_t k = (size_t)p->k0 + i / p->g.nc;
    int P = p->P, steps = P - 1;
    int seg = k < (size_t)steps ? mod((long long)p->q - (long long)k - 1, P) : mod((long long)p->q - (long long)(k - steps), P);
    rl_geom_chunk(&p->g, seg, i % p->g.nc, off, len);
    return k;
}

void rl_ring_ar_recv_at(rl_pipe *p, size_t i, void **dst, size_t *bytes) {
    size_t off, len, k = ar_recv_chunk(p, i, &off, &len);
    *bytes = len * p->g.es;
    *dst = k < (size_t)(p->P - 1) ? NULL : at(p->r->recvbuf, &p->g, off);
}

void rl_ring_ar_send_at(rl_pipe *p, size_t i, const void **src, size_t *bytes) {
    size_t k = (size_t)p->k0 + i / p->g.nc, j = i % p->g.nc, off, len;
    int P = p->P, steps = P - 1;
    int seg = k < (size_t)steps ? mod((long long)p->q - (long long)k, P)
                                : mod((long long)p->q + 1 - (long long)(k - steps), P);
    rl_geom_chunk(&p->g, seg, j, &off, &len);
    *bytes = len * p->g.es;
    *src = at(k == 0 ? p->r->sendbuf : p->r->recvbuf, &p->g, off);
}

void rl_ring_ar_process(rl_pipe *p, size_t i, const void *slot) {
    size_t off, len, k = ar_recv_chunk(p, i, &off, &len);
    int P = p->P;
    if (k >= (size_t)(P - 1)) return; /* all-gather: landed in place */
    char *dst = at(p->r->recvbuf, &p->g, off);
    rl_mem_reduce(p->mem, dst, at(p->r->sendbuf, &p->g, off), slot, len, p->r->dtype, p->r->op);
    if (k == (size_t)(P - 2) && p->r->op == RINGLET_AVG && p->avg_div)
        rl_mem_divide(p->mem, dst, len, p->r->dtype, p->avg_div);
}

/* Out of place, a reduce-scatter chunk lands where its sum goes (recvbuf, unused until
 * then) and is reduced there with sendbuf's: no staging slot, so less memory in cache. */
void *rl_ring_ar_recv_into(rl_pipe *p, size_t i) {
    size_t off, len, k = ar_recv_chunk(p, i, &off, &len);
    if (p->r->sendbuf == p->r->recvbuf || k >= (size_t)(p->P - 1)) return NULL; /* all-gather: in place anyway */
    return at(p->r->recvbuf, &p->g, off);
}

void rl_ring_allreduce_steps(rl_pipe *p, const struct ringlet_request *r, int P, int q, int k0, int nsteps,
                             int avg_div, size_t chunk_bytes) {
    p->r = r;
    p->P = P;
    p->q = q;
    p->k0 = k0;
    p->avg_div = avg_div;
    p->g = rl_geom_make(r->count, P, ringlet_datatype_size(r->dtype), chunk_bytes, 0);
    p->nrecv = p->nsend = (size_t)nsteps * p->g.nc;
    p->lag = p->g.nc;
    p->send_dep = 1;
    /* All-gather step 0 receives segment q, which reduce-scatter step 0 sent (from
     * recvbuf when in place): only when both halves run in this one exchange. */
    p->recv_lag = k0 == 0 && nsteps > P - 1 ? (size_t)(P - 1) * p->g.nc : 0;
    p->recv_at = rl_ring_ar_recv_at;
    p->send_at = rl_ring_ar_send_at;
    p->process = rl_ring_ar_process;
    p->recv_into = rl_ring_ar_recv_into;
}

/* ---- reduce-scatter: partial results live in work, the last step writes recvbuf ---- */

static int rs_block(rl_pipe *p, int pos) { return p->c->ring[pos]; }

static void rs_recv_at(rl_pipe *p, size_t i, void **dst, size_t *bytes) {
    size_t k = i / p->g.nc, j = i % p->g.nc, off, len;
    rl_geom_chunk(&p->g, rs_block(p, mod((long long)p->q - (long long)k - 2, p->P)), j, &off, &len);
    *bytes = len * p->g.es;
    *dst = NULL;
}

static void rs_send_at(rl_pipe *p, size_t i, const void **src, size_t *bytes) {
    size_t k = i / p->g.nc, j = i % p->g.nc, off, len;
    rl_geom_chunk(&p->g, rs_block(p, mod((long long)p->q - (long long)k - 1, p->P)), j, &off, &len);
    *bytes = len * p->g.es;
    *src = at(k == 0 ? p->r->sendbuf : p->work, &p->g, off);
}

static void rs_process(rl_pipe *p, size_t i, const void *slot) {
    size_t k = i / p->g.nc, j = i % p->g.nc, off, len;
    int blk = rs_block(p, mod((long long)p->q - (long long)k - 2, p->P));
    rl_geom_chunk(&p->g, blk, j, &off, &len);
    const char *local = at(p->r->sendbuf, &p->g, off);
    if (k == (size_t)(p->P - 2)) {
        char *dst = at(p->r->recvbuf, &p->g, off - (size_t)blk * p->g.base);
        rl_mem_reduce(p->mem, dst, local, slot, len, p->r->dtype, p->r->op);
        if (p->r->op == RINGLET_AVG) rl_mem_divide(p->mem, dst, len, p->r->dtype, p->P);
    } else {
        rl_mem_reduce(p->mem, at(p->work, &p->g, off), local, slot, len, p->r->dtype, p->r->op);
    }
}

/* ---- all-gather ---- */

static void ag_recv_at(rl_pipe *p, size_t i, void **dst, size_t *bytes) {
    size_t k = i / p->g.nc, j = i % p->g.nc, off, len;
    rl_geom_chunk(&p->g, rs_block(p, mod((long long)p->q - (long long)k - 1, p->P)), j, &off, &len);
    *bytes = len * p->g.es;
    *dst = at(p->r->recvbuf, &p->g, off);
}

static void ag_send_at(rl_pipe *p, size_t i, const void **src, size_t *bytes) {
    size_t k = i / p->g.nc, j = i % p->g.nc, off, len;
    rl_geom_chunk(&p->g, rs_block(p, mod((long long)p->q - (long long)k, p->P)), j, &off, &len);
    *bytes = len * p->g.es;
    /* Step 0 sends this rank's own block straight from sendbuf. */
    *src = k == 0 ? (const char *)p->r->sendbuf + (off - (size_t)p->c->rank * p->g.base) * p->g.es
                  : at(p->r->recvbuf, &p->g, off);
}

/* ---- broadcast and reduce: position 0 of the chain is the first sender ---- */

static void chain_chunk(rl_pipe *p, size_t i, size_t *off, size_t *bytes) {
    size_t len;
    rl_geom_chunk(&p->g, 0, i, off, &len);
    *bytes = len * p->g.es;
}

static void bc_recv_at(rl_pipe *p, size_t i, void **dst, size_t *bytes) {
    size_t off;
    chain_chunk(p, i, &off, bytes);
    *dst = at(p->r->recvbuf, &p->g, off);
}

static void bc_send_at(rl_pipe *p, size_t i, const void **src, size_t *bytes) {
    size_t off;
    chain_chunk(p, i, &off, bytes);
    *src = at(p->q == 0 ? p->r->sendbuf : p->r->recvbuf, &p->g, off);
}

static void rd_recv_at(rl_pipe *p, size_t i, void **dst, size_t *bytes) {
    size_t off;
    chain_chunk(p, i, &off, bytes);
    *dst = NULL;
}

static void rd_send_at(rl_pipe *p, size_t i, const void **src, size_t *bytes) {
    size_t off;
    chain_chunk(p, i, &off, bytes);
    *src = at(p->q == 0 ? p->r->sendbuf : p->work, &p->g, off);
}

static void rd_process(rl_pipe *p, size_t i, const void *slot) {
    size_t off, bytes;
    chain_chunk(p, i, &off, &bytes);
    size_t len = bytes / p->g.es;
    int is_root = p->q == p->P - 1;
    char *dst = at(is_root ? p->r->recvbuf : p->work, &p->g, off);
    rl_mem_reduce(p->mem, dst, at(p->r->sendbuf, &p->g, off), slot, len, p->r->dtype, p->r->op);
    if (is_root && p->r->op == RINGLET_AVG) rl_mem_divide(p->mem, dst, len, p->r->dtype, p->P);
}

/* Scratch for partial results: host or device memory, as the buffers. */
static char *scratch(struct ringlet_comm *c, rl_mem *mem, size_t bytes, char *err) {
    char e[RL_MSG_MAX]; /* a string: only its first byte cleared (a per-call path) */
    e[0] = 0;
    char *w = mem->dev ? rl_devcomm_scratch(c, bytes, e) : rl_comm_temp(c, bytes);
    if (!w) snprintf(err, RL_MSG_MAX, "out of memory for %zu bytes of scratch%s%.300s", bytes, *e ? ": " : "", e);
    return w;
}

static int chain_position(struct ringlet_comm *c, int root, int shift) {
    int root_pos = 0;
    for (int i = 0; i < c->nranks; i++)
        if (c->ring[i] == root) root_pos = i;
    return mod((long long)c->ring_pos - root_pos - shift, c->nranks);
}

ringlet_result_t rl_run_ring(struct ringlet_comm *c, struct ringlet_request *r, rl_mem *mem, char *err) {
    int P = c->nranks;
    size_t es = ringlet_datatype_size(r->dtype);
    rl_pipe p;
    struct ringlet_request bar; /* a barrier's 1-byte all-gather: lives until the pipe ran */
    memset(&p, 0, sizeof p);
    p.c = c;
    p.r = r;
    p.mem = mem;
    p.P = P;
    p.q = c->ring_pos;
    p.send_peer = c->next;
    p.recv_peer = c->prev;
    /* a step moves a segment (all-reduce) or a block (the rest) */
    size_t step = r->count * es / (r->kind == RL_OP_ALLREDUCE ? (size_t)P : 1);
    size_t cb = rl_chunk_for(c, r->kind == RL_OP_BARRIER ? 1 : step);
    switch (r->kind) {
    case RL_OP_ALLREDUCE:
        if (r->count == 0) return RINGLET_SUCCESS;
        if (P == 1) {
            rl_mem_copy(mem, r->recvbuf, r->sendbuf, r->count * es);
            return mem->rc ? (snprintf(err, RL_MSG_MAX, "%s", mem->err), mem->rc) : RINGLET_SUCCESS;
        }
        rl_ring_allreduce_steps(&p, r, P, c->ring_pos, 0, 2 * (P - 1), P, cb);
        break;
    case RL_OP_REDUCE_SCATTER:
        if (r->count == 0) return RINGLET_SUCCESS;
        if (P == 1) {
            rl_mem_copy(mem, r->recvbuf, r->sendbuf, r->count * es);
            return mem->rc ? (snprintf(err, RL_MSG_MAX, "%s", mem->err), mem->rc) : RINGLET_SUCCESS;
        }
        p.g = rl_geom_make(r->count, P, es, cb, 1);
        if (!(p.work = scratch(c, mem, r->count * (size_t)P * es, err))) return RINGLET_ERR_SYSTEM;
        p.nrecv = p.nsend = (size_t)(P - 1) * p.g.nc;
        p.lag = p.g.nc;
        p.send_dep = 1;
        p.recv_at = rs_recv_at;
        p.send_at = rs_send_at;
        p.process = rs_process;
        break;
    case RL_OP_ALLGATHER:
    case RL_OP_BARRIER: {
        if (r->kind == RL_OP_BARRIER) {
            /* A barrier is an all-gather of one byte (host memory): after P-1 steps every
             * rank has heard, through the ring, from every other rank. */
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
        rl_mem_copy(mem, (char *)r->recvbuf + (size_t)c->rank * r->count * es, r->sendbuf, r->count * es);
        if (mem->rc) return snprintf(err, RL_MSG_MAX, "%s", mem->err), mem->rc;
        if (P == 1) return RINGLET_SUCCESS;
        p.g = rl_geom_make(r->count, P, es, cb, 1);
        p.nrecv = p.nsend = (size_t)(P - 1) * p.g.nc;
        p.lag = p.g.nc;
        p.send_dep = 1;
        p.recv_at = ag_recv_at;
        p.send_at = ag_send_at;
        break;
    }
    case RL_OP_BROADCAST:
        if (r->count == 0) return RINGLET_SUCCESS;
        p.q = chain_position(c, r->root, 0);
        if (p.q == 0) rl_mem_copy(mem, r->recvbuf, r->sendbuf, r->count * es);
        if (mem->rc) return snprintf(err, RL_MSG_MAX, "%s", mem->err), mem->rc;
        if (P == 1) return RINGLET_SUCCESS;
        p.g = rl_geom_make(r->count, 1, es, cb, 1);
        p.nrecv = p.q == 0 ? 0 : p.g.nc;
        p.nsend = p.q == P - 1 ? 0 : p.g.nc;
        p.send_dep = p.q != 0;
        p.recv_at = bc_recv_at;
        p.send_at = bc_send_at;
        break;
    case RL_OP_REDUCE:
        if (r->count == 0) return RINGLET_SUCCESS;
        /* The chain starts after the root and ends at it. */
        p.q = chain_position(c, r->root, 1);
        if (P == 1) {
            rl_mem_copy(mem, r->recvbuf, r->sendbuf, r->count * es);
            return mem->rc ? (snprintf(err, RL_MSG_MAX, "%s", mem->err), mem->rc) : RINGLET_SUCCESS;
        }
        p.g = rl_geom_make(r->count, 1, es, cb, 1);
        if (p.q != 0 && p.q != P - 1 && !(p.work = scratch(c, mem, r->count * es, err))) return RINGLET_ERR_SYSTEM;
        p.nrecv = p.q == 0 ? 0 : p.g.nc;
        p.nsend = p.q == P - 1 ? 0 : p.g.nc;
        p.send_dep = p.q != 0;
        p.recv_at = rd_recv_at;
        p.send_at = rd_send_at;
        p.process = rd_process;
        break;
    default:
        return snprintf(err, RL_MSG_MAX, "internal: %s is not a collective", rl_op_name(r->kind)), RINGLET_ERR_INTERNAL;
    }
    return rl_pipe_run(&p, err);
}
