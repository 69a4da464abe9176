/* Hierarchical all-reduce, for several hosts with several ranks each (H hosts x L
 * ranks, the same L on every host):
 *   A. reduce-scatter inside each host (shared memory): local position l ends with
 *      segment l+1 of L reduced over its host;
 *   B. all-reduce of that segment across hosts, among the H ranks of local position l
 *      (one ring per local position, L rings side by side, TCP or IB);
 *   C. all-gather inside each host.
 * Each host's link carries 2(H-1)/H of the message each way, where the flat ring puts
 * 2(P-1)/P through it (P = H x L): 1.0 against 1.5 at 2 x 2. The price is two passes
 * over shared memory, (L-1)/L of the message each, and more steps for small messages.
 *
 * The message is cut into slices, and the phases of consecutive slices overlap: while
 * the hosts exchange slice s (B), the host's ranks gather slice s-1 (C) and reduce
 * slice s+1 (A) over shared memory. Each round runs two exchanges at once (pipe.h):
 * B(s) with the ranks of the other hosts, and C(s-1) then A(s+1) as one sequence with
 * the ranks of this host (their messages share one connection, so they cannot run as
 * two exchanges).
 *
 * Choice (RINGLET_ALGO=auto): all-reduce of at least RINGLET_HIER_MIN_BYTES, on a job
 * of that shape. Per size class (powers of two), the first two calls run the ring and
 * the hierarchy untimed (each algorithm's first call makes its connections, which would
 * count against it), the next two run them again, timed; the ranks then agree on the
 * larger time of each (a small all-reduce, max) and every later call of that class takes
 * the faster one.
 * So the choice follows the links as measured, and is the same on every rank.
 * RINGLET_ALGO=hier forces it (the ring where the job has not that shape). */
#include <stdio.h>
#include <string.h>

#include "collective.h"
#include "log.h"
#include "pipe.h"
#include "util.h"

typedef struct {
    int H, L;   /* hosts, ranks per host */
    int h, l;   /* this rank's host and local position (ring order) */
    int intra_next, intra_prev, inter_next, inter_prev;
} shape_t;

/* Whether the job has the shape (every host the same number of ranks, at least 2
 * hosts of at least 2 ranks), and this rank's place in it. The ring lists the ranks
 * of a host side by side (comm.c), so host h holds ring positions h*L .. h*L+L-1.
 * Every rank must answer alike, though L is its own host's count: so each run of L is
 * one host and the next run another (2 ranks on one host and 4 on another pass the
 * first test alone where L = 2, and fail it where L = 4). */
static int get_shape(const struct ringlet_comm *c, shape_t *s) {
    int P = c->nranks, L = c->local_size;
    if (L < 2 || P % L || P / L < 2) return 0;
    for (int h = 0; h < P / L; h++) {
        const unsigned char *id = c->infos[c->ring[h * L]].hostid;
        for (int i = 1; i < L; i++)
            if (memcmp(c->infos[c->ring[h * L + i]].hostid, id, 16)) return 0;
        if (h > 0 && !memcmp(c->infos[c->ring[(h - 1) * L]].hostid, id, 16)) return 0;
    }
    s->H = P / L;
    s->L = L;
    s->h = c->ring_pos / L;
    s->l = c->ring_pos % L;
    int base = s->h * L;
    s->intra_next = c->ring[base + (s->l + 1) % L];
    s->intra_prev = c->ring[base + (s->l + L - 1) % L];
    s->inter_next = c->ring[((s->h + 1) % s->H) * L + s->l];
    s->inter_prev = c->ring[((s->h + s->H - 1) % s->H) * L + s->l];
    return 1;
}

/* ---- the intra-host exchange of a round: up to two phases in one sequence ---- */

typedef struct {
    rl_pipe part[2];
    size_t first[2]; /* index of the part's first chunk in the sequence */
    int n;
} seq_t;

static rl_pipe *part_of(rl_pipe *p, size_t *i) {
    seq_t *q = (seq_t *)p->work;
    int k = q->n > 1 && *i >= q->first[1];
    *i -= q->first[k];
    return &q->part[k];
}
static void seq_recv_at(rl_pipe *p, size_t i, void **dst, size_t *bytes) {
    rl_pipe *x = part_of(p, &i);
    x->recv_at(x, i, dst, bytes);
}
static void seq_send_at(rl_pipe *p, size_t i, const void **src, size_t *bytes) {
    rl_pipe *x = part_of(p, &i);
    x->send_at(x, i, src, bytes);
}
static void seq_process(rl_pipe *p, size_t i, const void *slot) {
    rl_pipe *x = part_of(p, &i);
    x->process(x, i, slot);
}

/* Slice s: elements [off, off + len) of the message. */
static void slice_of(size_t count, int ns, int s, size_t *off, size_t *len) {
    size_t base = count / (size_t)ns, rem = count % (size_t)ns, us = (size_t)s;
    *off = us * base + (us < rem ? us : rem);
    *len = base + (us < rem);
}

typedef struct {
    struct ringlet_comm *c;
    const struct ringlet_request *r;
    rl_mem *mem;
    shape_t sh;
    int ns;
    size_t es;
} plan_t;

/* The request of slice s's intra-host phases, and of its segment's inter-host one. */
static void slice_request(const plan_t *pl, int s, struct ringlet_request *out) {
    size_t off, len;
    slice_of(pl->r->count, pl->ns, s, &off, &len);
    rl_request_shadow(out, pl->r);
    out->event = pl->r->event;
    out->event_device = pl->r->event_device;
    out->sendbuf = (const char *)pl->r->sendbuf + off * pl->es;
    out->recvbuf = (char *)pl->r->recvbuf + off * pl->es;
    out->count = len;
}
static void segment_request(const plan_t *pl, const struct ringlet_request *slice, struct ringlet_request *out) {
    rl_geom g = rl_geom_make(slice->count, pl->sh.L, pl->es, pl->c->chunk_bytes, 0);
    size_t off, len;
    int seg = (pl->sh.l + 1) % pl->sh.L; /* what the reduce-scatter left here */
    rl_geom_chunk(&g, seg, 0, &off, &len);
    rl_request_shadow(out, pl->r);
    out->event = pl->r->event;
    out->event_device = pl->r->event_device;
    out->sendbuf = (char *)slice->recvbuf + off * pl->es;
    out->recvbuf = (char *)slice->recvbuf + off * pl->es;
    out->count = rl_geom_seg_len(&g, seg);
}

static void pipe_base(const plan_t *pl, rl_pipe *p, int send_peer, int recv_peer, int lane) {
    memset(p, 0, sizeof *p);
    p->c = pl->c;
    p->mem = pl->mem;
    p->lane = lane;
    p->send_peer = send_peer;
    p->recv_peer = recv_peer;
}

ringlet_result_t rl_run_hier(struct ringlet_comm *c, struct ringlet_request *r, rl_mem *mem, char *err) {
    plan_t pl;
    memset(&pl, 0, sizeof pl);
    pl.c = c;
    pl.r = r;
    pl.mem = mem;
    pl.es = ringlet_datatype_size(r->dtype);
    if (!get_shape(c, &pl.sh) || r->count == 0) return rl_run_ring(c, r, mem, err);
    size_t bytes = r->count * pl.es;
    size_t ns = c->hier_slice_bytes ? bytes / c->hier_slice_bytes : 1;
    if (ns < 1) ns = 1;
    if (ns > 64) ns = 64;
    if (ns > r->count) ns = r->count;
    pl.ns = (int)ns;
    int L = pl.sh.L, H = pl.sh.H;
    /* The inter-host exchange runs beside the intra-host one: its own staging slots. */
    char *slots2 = NULL;
    if (!mem->dev && !(slots2 = rl_comm_temp(c, (size_t)c->nslots * c->chunk_bytes)))
        return snprintf(err, RL_MSG_MAX, "allreduce #%llu: out of memory for staging", (unsigned long long)r->seq),
               RINGLET_ERR_SYSTEM;
    struct ringlet_request sl[3], seg; /* slices s-1, s, s+1 (by s mod 3) and s's segment */
    /* Round t (0..ns+1): B(t-1) beside [C(t-2), A(t)]. */
    for (int t = 0; t <= pl.ns + 1; t++) {
        rl_pipe pipes[2];
        seq_t seq;
        int n = 0;
        memset(&seq, 0, sizeof seq);
        pipe_base(&pl, &pipes[0], pl.sh.intra_next, pl.sh.intra_prev, 0);
        size_t total = 0, lag = 0;
        if (t >= 2) { /* C(t-2): the all-gather half */
            struct ringlet_request *q = &sl[(t - 2) % 3];
            rl_pipe *x = &seq.part[seq.n];
            *x = pipes[0];
            rl_ring_allreduce_steps(x, q, L, pl.sh.l, L - 1, L - 1, 0, c->chunk_bytes);
            seq.first[seq.n++] = total;
            total += x->nrecv;
            lag = x->lag;
        }
        if (t < pl.ns) { /* A(t): the reduce-scatter half */
            struct ringlet_request *q = &sl[t % 3];
            slice_request(&pl, t, q);
            rl_pipe *x = &seq.part[seq.n];
            *x = pipes[0];
            rl_ring_allreduce_steps(x, q, L, pl.sh.l, 0, L - 1, 0, c->chunk_bytes);
            seq.first[seq.n++] = total;
            total += x->nrecv;
            lag = lag && lag < x->lag ? lag : x->lag; /* the smaller: never an earlier receive than a part needs */
        }
        if (seq.n) {
            rl_pipe *p = &pipes[n++];
            p->r = seq.part[0].r;
            p->work = (char *)&seq;
            p->nrecv = p->nsend = total;
            p->lag = lag;
            p->send_dep = 1;
            p->recv_at = seq_recv_at;
            p->send_at = seq_send_at;
            p->process = seq_process;
        }
        if (t >= 1 && t - 1 < pl.ns) { /* B(t-1): the segment's all-reduce across hosts */
            segment_request(&pl, &sl[(t - 1) % 3], &seg);
            if (seg.count > 0) {
                rl_pipe *p = &pipes[n];
                pipe_base(&pl, p, pl.sh.inter_next, pl.sh.inter_prev, 1);
                p->host_slots = slots2;
                rl_ring_allreduce_steps(p, &seg, H, pl.sh.h, 0, 2 * (H - 1), c->nranks, c->chunk_bytes);
                n++;
            }
        }
        ringlet_result_t rc = rl_pipes_run(pipes, n, err);
        if (rc) return rc;
    }
    return RINGLET_SUCCESS;
}

/* ---- the choice ---- */

int rl_hier_candidate(const struct ringlet_comm *c, const struct ringlet_request *r) {
    if (r->kind != RL_OP_ALLREDUCE || r->count == 0 || c->algo == RL_ALGO_RING || c->algo == RL_ALGO_ONESHOT ||
        c->algo == RL_ALGO_HALVING || c->algo == RL_ALGO_DOUBLING || c->algo == RL_ALGO_STAR)
        return 0;
    /* The size first: the shape's test divides, and small calls come here too. */
    if (c->algo != RL_ALGO_HIER && r->count * ringlet_datatype_size(r->dtype) < c->hier_min_bytes) return 0;
    shape_t sh;
    return get_shape(c, &sh);
}

static int size_class(size_t bytes) {
    int b = 0;
    while (bytes > 1 && b < RL_HIER_CLASSES - 1) bytes >>= 1, b++;
    return b;
}

ringlet_result_t rl_run_allreduce_choosing(struct ringlet_comm *c, struct ringlet_request *r, rl_mem *mem, char *err) {
    if (c->algo == RL_ALGO_HIER) return rl_run_hier(c, r, mem, err);
    size_t bytes = r->count * ringlet_datatype_size(r->dtype);
    int b = size_class(bytes);
    signed char pick = c->hier_pick[b];
    if (pick) return pick == 2 ? rl_run_hier(c, r, mem, err) : rl_run_ring(c, r, mem, err);
    /* Still measuring this class: ring, hierarchy (warming up), ring, hierarchy (timed). */
    int call = c->hier_calls[b]++, trying_hier = call % 2, timed = call >= 2;
    double t0 = rl_now();
    ringlet_result_t rc = trying_hier ? rl_run_hier(c, r, mem, err) : rl_run_ring(c, r, mem, err);
    if (rc) return rc;
    if (mem->dev) { /* the time includes the device's work */
        rc = rl_mem_fence(c, mem, err);
        if (rc) return rc;
    }
    if (!timed) return RINGLET_SUCCESS;
    double dt = rl_now() - t0;
    c->hier_time[b][trying_hier] = dt > 1e-9 ? dt : 1e-9;
    if (!trying_hier) return RINGLET_SUCCESS;
    /* Agree: the slowest rank's time of each, from every rank. */
    double mine[2] = {c->hier_time[b][0], c->hier_time[b][1]}, all[2];
    struct ringlet_request g;
    memset(&g, 0, sizeof g);
    g.comm = c;
    g.kind = RL_OP_ALLREDUCE;
    g.sendbuf = mine;
    g.recvbuf = all;
    g.count = 2;
    g.dtype = RINGLET_FLOAT64;
    g.op = RINGLET_MAX;
    g.seq = r->seq;
    g.device = -1;
    rl_mem host = {.dev = NULL, .rc = RINGLET_SUCCESS};
    rc = rl_oneshot_fits(c, &g) ? rl_run_oneshot(c, &g, &host, err) : rl_run_ring(c, &g, &host, err);
    if (rc) return rc;
    c->hier_pick[b] = all[1] < all[0] ? 2 : 1;
    RL_INFO(c->rank, "allreduce of %zu bytes: ring %.3f ms, hierarchical %.3f ms (slowest rank): %s from now on for %zu to %zu bytes",
            bytes, all[0] * 1e3, all[1] * 1e3, c->hier_pick[b] == 2 ? "hierarchical" : "ring", (size_t)1 << b,
            ((size_t)2 << b) - 1);
    return RINGLET_SUCCESS;
}
