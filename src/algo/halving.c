/* All-reduce by recursive halving and doubling (Rabenseifner's): a reduce-scatter in
 * log2(P) steps, each with one partner and half the data of the step before, then an
 * all-gather that retraces them. Every rank sends and receives the ring's 2(P-1)/P of
 * the buffer, but in 2 log2(P) steps instead of 2(P-1): fewer, larger messages, which is
 * what a middle-sized all-reduce on several ranks needs. Each step is one pipelined
 * exchange (pipe.h) with the partner, chunked as the ring is, on host or device memory.
 *
 * Positions are ring positions (ranks of a host side by side). P not a power of two:
 * the first 2r positions (r = P - p2, p2 the largest power of two below P) pair up: each
 * even one sends its whole input to the odd one after it, which reduces it, takes part in
 * the steps as position q / 2, and sends the whole result back at the end.
 *
 * The reduce-scatter cuts the buffer into p2 blocks; at the step with distance d (p2/2,
 * ..., 1) a rank keeps the half of its current blocks on its side of its partner and sends
 * the other half, which the partner reduces with its own. Each element is reduced by one
 * rank at each step and the owner's result is what every rank receives, so the result is
 * the same on every rank, bit for bit. avg divides the owned block by P before the
 * all-gather.
 *
 * Recursive doubling, for small all-reduces where each message is costly (TCP): log2(p2)
 * steps, each the whole buffer exchanged with the partner at distance d = 1, 2, ...,
 * after the same pairing. Both partners reduce the same two parts in the same order
 * (the lower place's first), so every rank ends with the same bits. */
#include <stdio.h>
#include <string.h>

#include "collective.h"
#include "devcomm.h"
#include "pipe.h"

/* One step: send [soff, soff + slen) of sbase, receive [roff, roff + rlen) into rbase
 * (reduce: into a slot, then rbase = local + slot). Elements. */
typedef struct {
    const char *sbase, *local;
    char *rbase;
    size_t soff, slen, roff, rlen, ce;
    int reduce, divide; /* divide: the received range is divided by P after its reduction */
    int theirs_first;   /* reduce: rbase = received op local (the partner's part is the lower one) */
} step_t;

static size_t chunks(size_t len, size_t ce) { return len ? (len + ce - 1) / ce : 0; }

static void span(size_t off, size_t len, size_t ce, size_t i, size_t *o, size_t *l) {
    *o = off + i * ce;
    *l = len - i * ce < ce ? len - i * ce : ce;
}

static void h_recv_at(rl_pipe *p, size_t i, void **dst, size_t *bytes) {
    const step_t *st = (const step_t *)p->work;
    size_t o, l;
    span(st->roff, st->rlen, st->ce, i, &o, &l);
    *bytes = l * p->g.es;
    *dst = st->reduce ? NULL : st->rbase + o * p->g.es;
}

static void h_send_at(rl_pipe *p, size_t i, const void **src, size_t *bytes) {
    const step_t *st = (const step_t *)p->work;
    size_t o, l;
    span(st->soff, st->slen, st->ce, i, &o, &l);
    *bytes = l * p->g.es;
    *src = st->sbase + o * p->g.es;
}

static void h_process(rl_pipe *p, size_t i, const void *slot) {
    const step_t *st = (const step_t *)p->work;
    size_t o, l;
    span(st->roff, st->rlen, st->ce, i, &o, &l);
    char *dst = st->rbase + o * p->g.es;
    const char *mine = st->local + o * p->g.es;
    if (st->theirs_first) rl_mem_reduce(p->mem, dst, slot, mine, l, p->r->dtype, p->r->op);
    else rl_mem_reduce(p->mem, dst, mine, slot, l, p->r->dtype, p->r->op);
    if (st->divide) rl_mem_divide(p->mem, dst, l, p->r->dtype, p->P);
}

/* Runs one step with the rank at ring position `pos`. */
static ringlet_result_t run_step(struct ringlet_comm *c, const struct ringlet_request *r, rl_mem *mem, int pos,
                                 step_t *st, char *err) {
    rl_pipe p;
    memset(&p, 0, sizeof p);
    p.c = c;
    p.r = r;
    p.mem = mem;
    p.P = c->nranks;
    p.send_peer = p.recv_peer = c->ring[pos];
    p.g.es = ringlet_datatype_size(r->dtype);
    p.nsend = chunks(st->slen, st->ce);
    p.nrecv = chunks(st->rlen, st->ce);
    p.recv_at = h_recv_at;
    p.send_at = h_send_at;
    p.process = st->reduce ? h_process : NULL;
    p.work = (char *)st;
    return rl_pipe_run(&p, err);
}

/* Element offset of block b of count cut into n blocks. */
static size_t block_off(size_t count, int n, int b) {
    size_t base = count / (size_t)n, rem = count % (size_t)n, ub = (size_t)b;
    return ub * base + (ub < rem ? ub : rem);
}

int rl_halving_fits(const struct ringlet_comm *c, const struct ringlet_request *r) {
    if (r->kind != RL_OP_ALLREDUCE || c->nranks < 2 || r->count == 0) return 0;
    if (c->algo == RL_ALGO_HALVING) return 1;
    if (c->algo != RL_ALGO_AUTO) return 0;
    size_t bytes = r->count * ringlet_datatype_size(r->dtype);
    /* A power of two of at least 4 ranks: at 2 it is the ring; where positions pair up
     * first, the pairs' whole-buffer transfers cost more than the steps save. */
    int P = c->nranks;
    return P >= 4 && (P & (P - 1)) == 0 && bytes >= c->halving_min_bytes && bytes <= c->halving_max_bytes;
}

/* P not a power of two: positions below 2 extra pair up (see the top). An even one hands
 * its input to the odd one after it and gets the result back (*v = -1: nothing more to
 * do); an odd one reduces its partner's input into out, which is its input from then on
 * (*in = out). *v: the position's place among the p2 that run the steps. */
static ringlet_result_t pair_in(struct ringlet_comm *c, const struct ringlet_request *r, rl_mem *mem, int extra,
                                size_t ce, const char **in, char *out, int *v, char *err) {
    int q = c->ring_pos;
    size_t n = r->count;
    ringlet_result_t rc;
    *v = q - extra;
    if (q >= 2 * extra) return RINGLET_SUCCESS;
    if (q % 2 == 0) {
        *v = -1;
        step_t give = {*in, NULL, NULL, 0, n, 0, 0, ce, 0, 0, 0};
        if ((rc = run_step(c, r, mem, q + 1, &give, err))) return rc;
        step_t get = {NULL, NULL, out, 0, 0, 0, n, ce, 0, 0, 0};
        return run_step(c, r, mem, q + 1, &get, err);
    }
    step_t take = {NULL, *in, out, 0, 0, 0, n, ce, 1, 0, 0};
    if ((rc = run_step(c, r, mem, q - 1, &take, err))) return rc;
    *in = out;
    *v = q / 2;
    return RINGLET_SUCCESS;
}

/* An odd position of a pair sends the result back to its even partner. */
static ringlet_result_t pair_out(struct ringlet_comm *c, const struct ringlet_request *r, rl_mem *mem, int extra,
                                 size_t ce, char *out, char *err) {
    int q = c->ring_pos;
    if (q >= 2 * extra) return RINGLET_SUCCESS;
    step_t back = {out, NULL, NULL, 0, r->count, 0, 0, ce, 0, 0, 0};
    return run_step(c, r, mem, q - 1, &back, err);
}

/* The largest power of two not above P: the places that run the steps. */
static int pow2_below(int P) {
    int p2 = 1;
    while (p2 * 2 <= P) p2 *= 2;
    return p2;
}

/* The ring position of the rank at place pv among the p2. */
static int place_pos(int pv, int extra) { return pv < extra ? 2 * pv + 1 : pv + extra; }

ringlet_result_t rl_run_halving(struct ringlet_comm *c, struct ringlet_request *r, rl_mem *mem, char *err) {
    int P = c->nranks;
    size_t es = ringlet_datatype_size(r->dtype), n = r->count;
    int p2 = pow2_below(P);
    int extra = P - p2; /* positions 0 .. 2 extra - 1 pair up */
    size_t cb = rl_chunk_for(c, n * es / 2), ce = cb / es ? cb / es : 1; /* the largest step: half */
    char *out = r->recvbuf;
    const char *in = r->sendbuf;
    ringlet_result_t rc;
    if (P == 1) {
        rl_mem_copy(mem, out, in, n * es);
        return mem->rc ? (snprintf(err, RL_MSG_MAX, "%s", mem->err), mem->rc) : RINGLET_SUCCESS;
    }
    int v; /* this rank's place among the p2 that run the steps, or -1 */
    if ((rc = pair_in(c, r, mem, extra, ce, &in, out, &v, err)) || v < 0) return rc;
    /* Reduce-scatter: blocks [lo, lo + 2d) held, then [lo, lo + d) or [lo + d, lo + 2d). */
    int lo = 0;
    for (int d = p2 / 2; d >= 1; d /= 2) {
        int pv = v ^ d, keep = (v & d) ? lo + d : lo, give = (v & d) ? lo : lo + d;
        size_t ko = block_off(n, p2, keep), ke = block_off(n, p2, keep + d);
        size_t go = block_off(n, p2, give), ge = block_off(n, p2, give + d);
        step_t st = {in, in, out, go, ge - go, ko, ke - ko, ce, 1, d == 1 && r->op == RINGLET_AVG, 0};
        if ((rc = run_step(c, r, mem, place_pos(pv, extra), &st, err))) return rc;
        in = out; /* partial results live in recvbuf now */
        lo = keep;
    }
    /* All-gather: the blocks held double at each step. */
    for (int d = 1; d < p2; d *= 2) {
        int pv = v ^ d, mine = v & ~(d - 1), theirs = pv & ~(d - 1);
        size_t mo = block_off(n, p2, mine), me = block_off(n, p2, mine + d);
        size_t to = block_off(n, p2, theirs), te = block_off(n, p2, theirs + d);
        step_t st = {out, NULL, out, mo, me - mo, to, te - to, ce, 0, 0, 0};
        if ((rc = run_step(c, r, mem, place_pos(pv, extra), &st, err))) return rc;
    }
    return pair_out(c, r, mem, extra, ce, out, err);
}

int rl_doubling_fits(const struct ringlet_comm *c, const struct ringlet_request *r) {
    if (r->kind != RL_OP_ALLREDUCE || c->nranks < 2 || r->count == 0) return 0;
    if (c->algo == RL_ALGO_DOUBLING) return 1;
    if (c->algo != RL_ALGO_AUTO) return 0;
    /* Where some ranks talk over TCP, whose every message costs system calls on both ends
     * and in the kernel between: on a power of two of at least 4 ranks, log2(P) messages
     * per rank instead of the one-shot path's P - 1 (auto takes the star before this where
     * a host has more ranks than cores: rl_star_fits). Nothing of this rank's own decides
     * (device or host buffers: ranks of one call may differ there), else they would part. */
    int P = c->nranks;
    size_t bytes = r->count * ringlet_datatype_size(r->dtype);
    return c->tcp_peers && P >= 4 && (P & (P - 1)) == 0 && P <= c->oneshot_max_ranks &&
           bytes <= c->doubling_max_bytes;
}

ringlet_result_t rl_run_doubling(struct ringlet_comm *c, struct ringlet_request *r, rl_mem *mem, char *err) {
    int P = c->nranks;
    size_t es = ringlet_datatype_size(r->dtype), n = r->count, bytes = n * es;
    int p2 = pow2_below(P);
    int extra = P - p2;
    size_t cb = rl_chunk_for(c, bytes), ce = cb / es ? cb / es : 1;
    char *out = r->recvbuf;
    const char *in = r->sendbuf;
    ringlet_result_t rc;
    if (P == 1) {
        rl_mem_copy(mem, out, in, bytes);
        return mem->rc ? (snprintf(err, RL_MSG_MAX, "%s", mem->err), mem->rc) : RINGLET_SUCCESS;
    }
    int v;
    if ((rc = pair_in(c, r, mem, extra, ce, &in, out, &v, err)) || v < 0) return rc;
    char e[RL_MSG_MAX]; /* a string: only its first byte cleared (a per-call path) */
    e[0] = 0;
    char *tmp = mem->dev ? rl_devcomm_scratch(c, bytes, e) : rl_comm_temp(c, bytes);
    if (!tmp)
        return snprintf(err, RL_MSG_MAX, "%s: out of memory for scratch%s%.300s", rl_op_name(r->kind), *e ? ": " : "", e),
               mem->dev ? RINGLET_ERR_CUDA : RINGLET_ERR_SYSTEM;
    /* Each step sends what this rank holds and reduces it with the partner's into the other
     * of out and tmp (never into what the step sends: its sends may still read it), the
     * lower place's part first, so that both partners hold the same bits. */
    const char *cur = in;
    for (int d = 1; d < p2; d *= 2) {
        int pv = v ^ d;
        char *dst = cur == out ? tmp : out;
        step_t st = {cur, cur, dst, 0, n, 0, n, ce, 1, 0, pv < v};
        if ((rc = run_step(c, r, mem, place_pos(pv, extra), &st, err))) return rc;
        cur = dst;
    }
    if (cur != out) rl_mem_copy(mem, out, cur, bytes);
    if (r->op == RINGLET_AVG) rl_mem_divide(mem, out, n, r->dtype, P);
    /* (device: the copy and division done before the pair's send reads out) */
    if ((rc = rl_mem_fence(c, mem, err))) return rc;
    return pair_out(c, r, mem, extra, ce, out, err);
}
