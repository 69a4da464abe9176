/* ringlet-perf: issuing the calls of one size and timing them. Each form (out of place,
 * then in place) runs -w warm-up calls, then -n timed calls after a barrier, then one
 * checked call; the times are reduced across ranks as -a asks. */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "perf.h"

void die_ringlet(ctx_t *c, const char *what, ringlet_result_t r) {
    fprintf(stderr, "ringlet-perf: rank %d: %s failed: %s: %s\n", c ? c->rank : -1, what, ringlet_strerror(r),
            ringlet_comm_last_error(c ? c->comm : NULL));
    fflush(stderr);
    if (c && c->comm) ringlet_comm_abort(c->comm);
    exit(1);
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

ringlet_result_t issue(ctx_t *c, const void *s, void *r, size_t pc, ringlet_request_t *req) {
    const opts_t *o = &c->o;
    void *st = c->stream; /* NULL for host memory */
    switch (o->coll) {
    case C_ALLREDUCE:
        return req ? ringlet_iallreduce(s, r, pc, c->dt, c->op, c->comm, st, req)
                   : ringlet_allreduce(s, r, pc, c->dt, c->op, c->comm, st);
    case C_BROADCAST:
        return req ? ringlet_ibroadcast(s, r, pc, c->dt, o->root, c->comm, st, req)
                   : ringlet_broadcast(s, r, pc, c->dt, o->root, c->comm, st);
    case C_REDUCE:
        return req ? ringlet_ireduce(s, r, pc, c->dt, c->op, o->root, c->comm, st, req)
                   : ringlet_reduce(s, r, pc, c->dt, c->op, o->root, c->comm, st);
    case C_ALLGATHER:
        return req ? ringlet_iallgather(s, r, pc, c->dt, c->comm, st, req)
                   : ringlet_allgather(s, r, pc, c->dt, c->comm, st);
    case C_REDUCESCATTER:
        return req ? ringlet_ireduce_scatter(s, r, pc, c->dt, c->op, c->comm, st, req)
                   : ringlet_reduce_scatter(s, r, pc, c->dt, c->op, c->comm, st);
    default:
        return RINGLET_ERR_INVALID_ARGUMENT;
    }
}

const char *coll_call_name(coll_t coll, int blocking) {
    static const char *b[C_COUNT] = {"ringlet_allreduce", "ringlet_broadcast", "ringlet_reduce", "ringlet_allgather",
                                     "ringlet_reduce_scatter"};
    static const char *nb[C_COUNT] = {"ringlet_iallreduce", "ringlet_ibroadcast", "ringlet_ireduce",
                                      "ringlet_iallgather", "ringlet_ireduce_scatter"};
    return blocking ? b[coll] : nb[coll];
}

/* The counts and offsets of one size, reqbytes of the whole buffer. */
static layout_t make_layout(const ctx_t *c, size_t reqbytes) {
    layout_t L = {0};
    size_t n = (size_t)c->nranks, count = reqbytes / c->ts;
    /* all-gather and reduce-scatter: a whole number of 16 bytes per rank, as nccl-tests
     * rounds its per-rank count down (so the rows diff at any rank count) */
    size_t per_rank = (count / n) & ~(16 / c->ts - 1);
    switch (c->o.coll) {
    case C_ALLGATHER:
        L.pc = per_rank;
        L.in_elems = L.pc;
        L.out_elems = L.pc * n;
        L.in_off_ip = (size_t)c->rank * L.pc;
        L.bytes = L.pc * n * c->ts;
        break;
    case C_REDUCESCATTER:
        L.pc = per_rank;
        L.in_elems = L.pc * n;
        L.out_elems = L.pc;
        L.out_off_ip = (size_t)c->rank * L.pc;
        L.bytes = L.pc * n * c->ts;
        break;
    default:
        L.pc = count;
        L.in_elems = count;
        L.out_elems = (c->o.coll == C_REDUCE && c->rank != c->o.root) ? 0 : count;
        L.bytes = count * c->ts;
        break;
    }
    L.count_col = L.pc;
    return L;
}

void pointers(const ctx_t *c, const layout_t *L, int inplace, const void **s, void **r) {
    char *sb = c->dev ? c->dsbuf : c->sbuf, *rb = c->dev ? c->drbuf : c->rbuf;
    if (!inplace) {
        *s = sb;
        *r = rb;
        return;
    }
    *s = rb + L->in_off_ip * c->ts;
    *r = rb + L->out_off_ip * c->ts;
}

void die_dev(ctx_t *c, const char *what) {
    fprintf(stderr, "ringlet-perf: rank %d: %s: %s\n", c->rank, what, rl_dev_error());
    if (c->comm) ringlet_comm_abort(c->comm);
    exit(1);
}

void copy_across(ctx_t *c, int to_device, size_t bytes) {
    if (!c->dev || !bytes) return;
    for (int i = 0; i < 2; i++) {
        char *h = i ? c->rbuf : c->sbuf, *d = i ? c->drbuf : c->dsbuf;
        if (c->dev->memcpy_async(to_device ? d : h, to_device ? h : d, bytes, c->stream) != RL_DEV_OK)
            die_dev(c, "copy between host and device");
    }
    if (c->dev->stream_sync(c->stream) != RL_DEV_OK) die_dev(c, "stream sync");
}

/* Runs `iters` calls; the average seconds per call on this rank. With iter_s, also
 * each call's seconds: blocking, from the end of the previous call (or the start) to
 * its return; non-blocking, from the previous wait's return (the first: from before
 * the first issue) to its wait's return. The pieces add up to the total. No barrier
 * between calls, so on host memory the loop is timed exactly as without -I (on a
 * stream each call is synced, to time it alone: the calls no longer queue). */
static double run_loop(ctx_t *c, const layout_t *L, int inplace, int iters, int timed, double *iter_s) {
    const void *s;
    void *r;
    pointers(c, L, inplace, &s, &r);
    const char *name = coll_call_name(c->o.coll, c->o.blocking);
    if (timed) CHECK_RL(c, "ringlet_barrier", ringlet_barrier(c->comm, NULL));
    double t0 = now_s(), prev = t0;
    if (c->o.blocking) {
        for (int k = 0; k < iters; k++) {
            CHECK_RL(c, name, issue(c, s, r, L->pc, NULL));
            /* -I on a stream: each call's own time needs its own sync */
            if (iter_s && c->dev && c->dev->stream_sync(c->stream) != RL_DEV_OK) die_dev(c, "stream sync");
            if (iter_s) {
                double t = now_s();
                iter_s[k] = t - prev;
                prev = t;
            }
        }
        /* Stream calls returned at once: the work is done when the stream is. */
        if (c->dev && c->dev->stream_sync(c->stream) != RL_DEV_OK) die_dev(c, "stream sync");
    } else {
        for (int k = 0; k < iters; k++) CHECK_RL(c, name, issue(c, s, r, L->pc, &c->reqs[k]));
        for (int k = 0; k < iters; k++) {
            CHECK_RL(c, "ringlet_wait", ringlet_wait(&c->reqs[k]));
            if (iter_s) {
                double t = now_s();
                iter_s[k] = t - prev;
                prev = t;
            }
        }
    }
    double t1 = now_s();
    return iters > 0 ? (t1 - t0) / iters : 0.0;
}

/* Times across ranks as -a asks: 0 rank 0's own (no communication: only rank 0
 * prints), 1 the mean, 2 the smallest, 3 the largest. out[i] from in[i]. */
static void reduce_times(ctx_t *c, const double *in, double *out, size_t n) {
    if (c->o.average == 0) {
        memcpy(out, in, n * sizeof *in);
        return;
    }
    ringlet_op_t op = c->o.average == 1 ? RINGLET_SUM : c->o.average == 2 ? RINGLET_MIN : RINGLET_MAX;
    CHECK_RL(c, "ringlet_allreduce (time)", ringlet_allreduce(in, out, n, RINGLET_FLOAT64, op, c->comm, NULL));
    if (c->o.average == 1)
        for (size_t i = 0; i < n; i++) out[i] /= c->nranks;
}

/* -T: as many calls as take target_s at the slowest rank's time of 10 (the same number on
 * every rank: the all-reduce's result is), at least -n, at most 10 million. */
static int timed_iters(ctx_t *c, const layout_t *L, int inplace) {
    double est = run_loop(c, L, inplace, 10, 1, NULL), worst = 0;
    CHECK_RL(c, "ringlet_allreduce (-T estimate)", ringlet_allreduce(&est, &worst, 1, RINGLET_FLOAT64, RINGLET_MAX, c->comm, NULL));
    double want = c->o.target_s / (worst > 1e-9 ? worst : 1e-9);
    if (want > 1e7) want = 1e7;
    return want > c->o.iters ? (int)want : c->o.iters;
}

/* One size: out-of-place then in-place, timed then checked. */
void run_size(ctx_t *c, size_t reqbytes, totals_t *tot) {
    layout_t L = make_layout(c, reqbytes);
    double t[2] = {0, 0}, tred[2] = {0, 0};
    int64_t w[2] = {0, 0}, wsum[2] = {0, 0};
    const pattern_t pat = make_pattern(c->dt, kColl[c->o.coll].has_op, c->op);
    for (int ip = 0; ip < 2; ip++) {
        /* timed data: the check pattern (small integers: no denormals, no NaN; in
         * place, sums grow but prod, min, max and avg stay put) */
        fill(ip ? c->rbuf + L.in_off_ip * c->ts : c->sbuf, c->dt, &pat, c->rank, 0, L.in_elems);
        copy_across(c, 1, (L.in_elems + L.in_off_ip) * c->ts);
        if (c->o.warmup > 0) run_loop(c, &L, ip, c->o.warmup, 0, NULL);
        c->row_iters[ip] = c->o.target_s > 0 ? timed_iters(c, &L, ip) : c->o.iters;
        t[ip] = run_loop(c, &L, ip, c->row_iters[ip], 1, c->iter_s ? c->iter_s + (size_t)ip * c->o.iters : NULL);
        if (c->o.check) w[ip] = check_once(c, &L, ip);
    }
    reduce_times(c, t, tred, 2);
    if (c->iter_s) reduce_times(c, c->iter_s, c->iter_red, 2 * (size_t)c->o.iters);
    if (c->o.check)
        CHECK_RL(c, "ringlet_allreduce (#wrong)", ringlet_allreduce(w, wsum, 2, RINGLET_INT64, RINGLET_SUM, c->comm, NULL));
    tot->wrong_total += wsum[0] + wsum[1]; /* the same on every rank */
    if (c->rank != 0) return;
    print_row(c, &L, tred, wsum, tot);
}
