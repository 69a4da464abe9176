/* The pipelined exchange (pipe.h).
 *
 * Each direction keeps counters over its chunk sequence. Receives: posted (to the
 * transport), landed (the transport is done and the chunk was processed, or, on a
 * device, its copy or kernel enqueued), done (device work finished: the slot is free).
 * Sends: staged (device: the copy into the pinned slot enqueued), posted, done. On
 * host memory staged = posted and done = landed. Up to nslots chunks are between
 * posted (staged) and done in each direction, one per slot.
 */
#include "pipe.h"

#include <sched.h>
#include <stdlib.h>
#include <stdio.h>
#include <time.h>

#include "conn.h"
#include "failure.h"
#include "trace.h"
#include "util.h"
#include "wait.h"

rl_geom rl_geom_make(size_t count, int nseg, size_t es, size_t chunk_bytes, int equal_blocks) {
    rl_geom g;
    g.es = es;
    g.nseg = nseg;
    g.unit = equal_blocks || es > 16 || 16 % es ? 1 : 16 / es;
    size_t units = count / g.unit;
    g.tail = equal_blocks ? 0 : count % g.unit;
    g.base = equal_blocks ? count : units / (size_t)nseg;
    g.rem = equal_blocks ? 0 : units % (size_t)nseg;
    g.ce = chunk_bytes / es ? chunk_bytes / es : 1;
    size_t maxseg = (g.base + (g.rem > 0)) * g.unit;
    if (g.base * g.unit + g.tail > maxseg) maxseg = g.base * g.unit + g.tail;
    g.nc = maxseg ? (maxseg + g.ce - 1) / g.ce : 1;
    return g;
}

size_t rl_geom_seg_len(const rl_geom *g, int s) {
    size_t us = (size_t)s;
    return (g->base + (us < g->rem)) * g->unit + (s == g->nseg - 1 ? g->tail : 0);
}

size_t rl_chunk_for(const struct ringlet_comm *c, size_t step_bytes) {
    if (c->chunk_fixed) return c->chunk_bytes;
    size_t want = (step_bytes / 4 + 4095) & ~(size_t)4095, floor = c->chunk_floor ? c->chunk_floor : RL_CHUNK_FLOOR;
    if (want < floor) want = floor;
    return want < c->chunk_bytes ? want : c->chunk_bytes;
}

void rl_geom_chunk(const rl_geom *g, int s, size_t j, size_t *off, size_t *len) {
    size_t us = (size_t)s;
    size_t seg_off = (us * g->base + (us < g->rem ? us : g->rem)) * g->unit;
    size_t seg_len = rl_geom_seg_len(g, s);
    size_t lo = j * g->ce;
    *off = seg_off + lo;
    *len = lo >= seg_len ? 0 : (seg_len - lo < g->ce ? seg_len - lo : g->ce);
}

#define MAXW 64

typedef struct {
    rl_pipe *p;
    struct rl_devcomm *dev; /* NULL: host memory */
    int sdev, rdev;         /* device buffers over a transport that moves device memory itself */
    rl_devlane *lane;       /* device: the staging slots and events of this exchange */
    int W;
    size_t slot_bytes;
    rl_conn *sconn, *rconn;
    size_t posted_r, landed_r, done_r, staged_s, posted_s, done_s;
    rl_treq rreq[MAXW], sreq[MAXW];
    char lent[MAXW];          /* receive k lent a transport slot (irecv_map) */
    char noev[MAXW];          /* device: receive k needs no device work (the transport put it in place) */
    const void *ssrc[MAXW];   /* host: where send k reads */
    size_t sbytes[MAXW];
    double t_r[MAXW], t_s[MAXW], t_l[MAXW]; /* tracing: posted, staged, landed */
    ringlet_result_t fcode;
    char failure[RL_ERR_MAX + 64];
} run_t;

static void fail_with(run_t *s, ringlet_result_t code, const char *msg) {
    if (s->fcode) return;
    s->fcode = code;
    snprintf(s->failure, sizeof s->failure, "%.300s", msg);
}

static char *recv_slot(run_t *s, size_t i) {
    size_t k = i % (size_t)s->W;
    if (s->dev) return s->lane->recv_slots + k * s->slot_bytes;
    return (s->p->host_slots ? s->p->host_slots : s->p->c->slots) + k * s->p->c->chunk_bytes;
}

/* Host memory: where receive i lands when process reduces it (dst NULL) and the transport
 * lends nothing: the algorithm's own place for it (recv_into), else a staging slot. */
static char *host_stage(run_t *s, size_t i) {
    void *own = s->p->recv_into ? s->p->recv_into(s->p, i) : NULL;
    return own ? own : recv_slot(s, i);
}

/* Device work is not announced on the communicator's bell: a waiter that has some
 * outstanding polls, yielding, then sleeping briefly. */
static void wait_device(struct ringlet_comm *c, unsigned rounds) {
    rl_comm_progress(c);
    if (rounds < 200) {
        sched_yield();
    } else {
        struct timespec ts = {0, 50 * 1000};
        nanosleep(&ts, NULL);
    }
}

static int post_receives(run_t *s) {
    rl_pipe *p = s->p;
    struct ringlet_comm *c = p->c;
    int moved = 0;
    while (s->posted_r < p->nrecv && s->posted_r - s->done_r < (size_t)s->W &&
           (!p->recv_lag || s->posted_r < p->recv_lag || s->posted_r - p->recv_lag < s->done_s)) {
        size_t i = s->posted_r, k = i % (size_t)s->W;
        void *dst;
        size_t bytes;
        rl_fault_point(&c->fault, c->rank, rl_op_name(p->r_recv->kind), p->r_recv->seq, RL_FAULT_RECV);
        p->recv_at(p, i, &dst, &bytes);
        rl_treq *t = &s->rreq[k];
        t->chan = rl_op_chan(p->r_recv->kind);
        s->lent[k] = 0;
        if (s->rdev) {
            /* The transport moves device memory: into place, or lent where the peer put
             * it (the kernel reads it there), else into a device staging slot. */
            if (dst) {
                s->rconn->tp->irecv(s->rconn->h, dst, bytes, NULL, t);
            } else {
                s->lent[k] = s->rconn->tp->irecv_map && s->rconn->tp->irecv_map(s->rconn->h, bytes, t) == RINGLET_SUCCESS;
                if (!s->lent[k]) s->rconn->tp->irecv(s->rconn->h, s->lane->dev_slots + k * s->slot_bytes, bytes, NULL, t);
            }
        } else if (s->dev) {
            s->rconn->tp->irecv(s->rconn->h, recv_slot(s, i), bytes, NULL, t);
        } else {
            /* Into staging: where the transport can lend its own memory (a shared-memory
             * slot), the reduction reads straight from there and saves a copy. */
            s->lent[k] = !dst && s->rconn->tp->irecv_map && !s->rconn->tp->device_memory &&
                         s->rconn->tp->irecv_map(s->rconn->h, bytes, t) == RINGLET_SUCCESS;
            if (!s->lent[k]) s->rconn->tp->irecv(s->rconn->h, dst ? dst : host_stage(s, i), bytes, NULL, t);
        }
        if (c->trace) s->t_r[k] = rl_now();
        s->posted_r++;
        moved = 1;
    }
    return moved;
}

static int stage_sends(run_t *s) {
    rl_pipe *p = s->p;
    int moved = 0;
    while (s->staged_s < p->nsend && s->staged_s - s->done_s < (size_t)s->W &&
           (!p->send_dep || s->staged_s < p->lag || s->staged_s - p->lag < s->done_r)) {
        size_t i = s->staged_s, k = i % (size_t)s->W;
        const void *src;
        p->send_at(p, i, &src, &s->sbytes[k]);
        if (s->dev && !s->sdev) {
            const rl_device_ops *d = s->dev->d;
            char *slot = s->lane->send_slots + k * s->slot_bytes;
            if ((s->sbytes[k] && d->memcpy_async(slot, src, s->sbytes[k], s->dev->s_send) != RL_DEV_OK) ||
                d->event_record(s->lane->ev_send[k], s->dev->s_send) != RL_DEV_OK) {
                char e[RL_MSG_MAX];
                fail_with(s, rl_devcomm_error("copy of a chunk into a pinned send slot", e), e);
                return 1;
            }
            src = slot;
        }
        s->ssrc[k] = src;
        if (p->c->trace) s->t_s[k] = rl_now();
        s->staged_s++;
        moved = 1;
    }
    return moved;
}

static int post_sends(run_t *s) {
    rl_pipe *p = s->p;
    struct ringlet_comm *c = p->c;
    int moved = 0;
    while (s->posted_s < s->staged_s) {
        size_t i = s->posted_s, k = i % (size_t)s->W;
        if (s->dev && !s->sdev) {
            int q = s->dev->d->event_query(s->lane->ev_send[k]);
            if (q == RL_DEV_NOT_READY) break;
            if (q != RL_DEV_OK) {
                char e[RL_MSG_MAX];
                fail_with(s, rl_devcomm_error("copy of a chunk into a pinned send slot", e), e);
                return 1;
            }
        }
        rl_fault_point(&c->fault, c->rank, rl_op_name(p->r->kind), p->r->seq, RL_FAULT_SEND);
        s->sreq[k].chan = rl_op_chan(p->r->kind);
        s->sconn->tp->isend(s->sconn->h, s->ssrc[k], s->sbytes[k], NULL, &s->sreq[k]);
        s->posted_s++;
        moved = 1;
    }
    return moved;
}

static int land_receives(run_t *s) {
    rl_pipe *p = s->p;
    struct ringlet_comm *c = p->c;
    rl_trace *tr = c->trace;
    const char *opname = rl_op_name(p->r_recv->kind);
    int moved = 0;
    while (!s->fcode && s->landed_r < s->posted_r && rl_treq_done(&s->rreq[s->landed_r % (size_t)s->W])) {
        size_t i = s->landed_r, k = i % (size_t)s->W;
        rl_treq *t = &s->rreq[k];
        if (atomic_load(&t->status) != RINGLET_SUCCESS) {
            fail_with(s, atomic_load(&t->status), t->err);
            break;
        }
        void *dst;
        size_t bytes;
        p->recv_at(p, i, &dst, &bytes);
        double t0 = tr ? rl_now() : 0;
        if (tr) rl_trace_span(tr, RL_LANE_RECV, "recv", s->t_r[k], t0, opname, p->r_recv->seq, (long long)i, bytes, p->recv_peer);
        /* An empty piece (a send or receive of 0 elements, whose buffer may be NULL) has
         * nothing to place or reduce. */
        int empty = bytes == 0;
        if (s->rdev) {
            /* The transport put it in place, or where the kernel reads it. */
            s->noev[k] = dst != NULL || empty;
            if (!dst && !empty) p->process(p, i, s->lent[k] ? t->mapped : s->lane->dev_slots + k * s->slot_bytes);
            if (!s->noev[k] && !p->mem->rc && s->dev->d->event_record(s->lane->ev_recv[k], s->dev->s_recv) != RL_DEV_OK)
                p->mem->rc = rl_devcomm_error("device", p->mem->err);
            if (p->mem->rc) {
                fail_with(s, p->mem->rc, p->mem->err);
                break;
            }
            s->t_l[k] = t0;
        } else if (s->dev) {
            /* Into place, or reduced into place, by the device, from the pinned slot. */
            s->noev[k] = 0;
            if (empty) {
            } else if (dst) {
                rl_mem_copy(p->mem, dst, recv_slot(s, i), bytes);
            } else if (s->lane->dev_slots) {
                char *ds = s->lane->dev_slots + k * s->slot_bytes;
                rl_mem_copy(p->mem, ds, recv_slot(s, i), bytes);
                p->process(p, i, ds);
            } else {
                p->process(p, i, recv_slot(s, i));
            }
            if (!p->mem->rc && s->dev->d->event_record(s->lane->ev_recv[k], s->dev->s_recv) != RL_DEV_OK)
                p->mem->rc = rl_devcomm_error("device", p->mem->err);
            if (p->mem->rc) {
                fail_with(s, p->mem->rc, p->mem->err);
                break;
            }
            s->t_l[k] = t0;
        } else {
            if (!dst && !empty) {
                p->process(p, i, s->lent[k] ? t->mapped : host_stage(s, i));
                if (tr) rl_trace_span(tr, RL_LANE_REDUCE, "reduce", t0, rl_now(), opname, p->r_recv->seq, (long long)i, bytes, -1);
            }
            if (s->lent[k]) s->rconn->tp->release(s->rconn->h, t);
            s->done_r++;
        }
        s->landed_r++;
        moved = 1;
    }
    /* Device: a slot is free once the work that reads it finished, in order. */
    while (s->dev && !s->fcode && s->done_r < s->landed_r) {
        size_t k = s->done_r % (size_t)s->W;
        int q = s->noev[k] ? RL_DEV_OK : s->dev->d->event_query(s->lane->ev_recv[k]);
        if (q == RL_DEV_NOT_READY) break;
        if (q != RL_DEV_OK) {
            char e[RL_MSG_MAX];
            fail_with(s, rl_devcomm_error("device work on a received chunk", e), e);
            break;
        }
        if (tr) rl_trace_span(tr, RL_LANE_REDUCE, "device", s->t_l[k], rl_now(), opname, p->r_recv->seq, (long long)s->done_r, 0, -1);
        if (s->lent[k]) s->rconn->tp->release(s->rconn->h, &s->rreq[k]);
        s->done_r++;
        moved = 1;
    }
    return moved;
}

static int complete_sends(run_t *s) {
    rl_pipe *p = s->p;
    rl_trace *tr = p->c->trace;
    int moved = 0;
    while (!s->fcode && s->done_s < s->posted_s && rl_treq_done(&s->sreq[s->done_s % (size_t)s->W])) {
        size_t k = s->done_s % (size_t)s->W;
        rl_treq *t = &s->sreq[k];
        if (atomic_load(&t->status) != RINGLET_SUCCESS) {
            fail_with(s, atomic_load(&t->status), t->err);
            break;
        }
        if (tr) rl_trace_span(tr, RL_LANE_SEND, "send", s->t_s[k], rl_now(), rl_op_name(p->r->kind), p->r->seq, (long long)s->done_s, t->len, p->send_peer);
        s->done_s++;
        moved = 1;
    }
    return moved;
}

static ringlet_result_t run_setup_rest(run_t *s, rl_pipe *p, char *err);

/* Connections, lane and the user's stream for one exchange (send: 1 the send connection
 * only, 0 the rest: every exchange's send connection is made before any receive
 * connection, since an accept waits for the peer's connect and a connect never waits);
 * on failure the message in err (the communicator failed). */
static ringlet_result_t run_setup(run_t *s, rl_pipe *p, int send, char *err) {
    struct ringlet_comm *c = p->c;
    char cerr[RL_ERR_MAX]; /* a string: only its first byte cleared (a per-call path) */
    cerr[0] = 0;
    ringlet_result_t rc = RINGLET_SUCCESS;
    int device = p->mem->dev != NULL;
    if (send) {
        s->sconn = NULL;
        if (p->nsend) rc = rl_comm_send_conn(c, p->send_peer, device, &s->sconn, cerr);
        return rc ? rl_comm_op_failed(c, p->r, rc, cerr, err) : RINGLET_SUCCESS;
    }
    return run_setup_rest(s, p, err);
}

static ringlet_result_t run_setup_rest(run_t *s, rl_pipe *p, char *err) {
    struct ringlet_comm *c = p->c;
    if (!p->r_recv) p->r_recv = p->r;
    /* Only the counters zeroed: a small call must not pay for clearing 64 transport
     * requests. */
    s->p = p;
    s->posted_r = s->landed_r = s->done_r = s->staged_s = s->posted_s = s->done_s = 0;
    s->fcode = RINGLET_SUCCESS;
    s->rconn = NULL;
    s->lane = NULL;
    s->dev = p->mem->dev;
    s->W = c->nslots < MAXW ? c->nslots : MAXW;
    s->slot_bytes = s->dev ? s->dev->slot_bytes : c->chunk_bytes;
    char cerr[RL_ERR_MAX]; /* a string: only its first byte cleared (a per-call path) */
    cerr[0] = 0;
    ringlet_result_t rc = RINGLET_SUCCESS;
    int device = s->dev != NULL;
    if (device && !(s->lane = rl_devcomm_lane(c, p->lane, cerr))) rc = RINGLET_ERR_CUDA;
    if (!rc && p->nrecv) rc = rl_comm_recv_conn(c, p->recv_peer, device, &s->rconn, cerr);
    if (rc) return rl_comm_op_failed(c, p->r, rc, cerr, err);
    s->sdev = device && s->sconn && s->sconn->tp->device_memory;
    s->rdev = device && s->rconn && s->rconn->tp->device_memory;
    if (s->sdev || s->rdev) {
        /* Such a transport copies on streams of its own, which do not wait for the
         * user's: the user's earlier work on the buffers must be done first. */
        const struct ringlet_request *rs[2] = {p->r, p->r_recv};
        for (int j = 0; j < 2 && !rc; j++)
            if (rs[j]->event) rc = rl_devcomm_wait(c, rs[j]->event, "the stream's work before the call", cerr);
        if (!rc && s->rdev && rl_devcomm_device_slots(c, s->lane, cerr) != RINGLET_SUCCESS) rc = RINGLET_ERR_CUDA;
        if (rc) return rl_comm_op_failed(c, p->r, rc, cerr, err);
    }
    return RINGLET_SUCCESS;
}

static int run_done(const run_t *s) { return s->done_r >= s->p->nrecv && s->done_s >= s->p->nsend; }

/* One round of every step; non-zero if anything moved. */
static int run_step(run_t *s) {
    int moved = post_receives(s);
    moved |= stage_sends(s);
    moved |= post_sends(s);
    moved |= land_receives(s);
    moved |= complete_sends(s);
    return moved;
}

/* Device work of this exchange that only polling sees finish. */
static int run_device_pending(const run_t *s) {
    return s->dev && (s->posted_s < s->staged_s || s->done_r < s->landed_r);
}

/* After a failure: the transports' work on our buffers stops before they go back. */
static void run_stop(run_t *s) {
    struct ringlet_comm *c = s->p->c;
    for (size_t i = s->landed_r; i < s->posted_r; i++)
        rl_comm_wait_treq(c, &s->rreq[i % (size_t)s->W]);
    for (size_t i = s->done_s; i < s->posted_s; i++)
        rl_comm_wait_treq(c, &s->sreq[i % (size_t)s->W]);
}

ringlet_result_t rl_pipes_run(rl_pipe *pipes, int n, char *err) {
    if (n < 1) return RINGLET_SUCCESS;
    struct ringlet_comm *c = pipes[0].c;
    /* One exchange on the stack (the common case); several on the heap. */
    run_t one, *runs = n == 1 ? &one : malloc(sizeof(run_t) * (size_t)n);
    if (!runs) return rl_comm_op_failed(c, pipes[0].r, RINGLET_ERR_SYSTEM, "out of memory for the exchanges", err);
    ringlet_result_t rc = RINGLET_SUCCESS;
    for (int i = 0; i < n && !rc; i++) rc = run_setup(&runs[i], &pipes[i], 1, err);
    for (int i = 0; i < n && !rc; i++) rc = run_setup(&runs[i], &pipes[i], 0, err);
    if (rc) {
        /* Nothing was posted yet. */
        if (runs != &one) free(runs);
        return rc;
    }

    double last_progress = rl_now();
    unsigned idle = 0;
    run_t *failed = NULL;
    for (;;) {
        int all_done = 1, moved = 0, device = 0;
        unsigned gen = rl_comm_gen(c);
        rl_comm_progress(c);
        for (int i = 0; i < n && !failed; i++) {
            run_t *s = &runs[i];
            if (run_done(s)) continue;
            moved |= run_step(s);
            if (s->fcode) failed = s;
            all_done &= run_done(s);
            device |= run_device_pending(s);
        }
        if (failed || all_done) break;
        if (moved) {
            last_progress = rl_now();
            idle = 0;
            continue;
        }
        if (atomic_load(&c->failed)) {
            failed = &runs[0];
            failed->fcode = c->fail_code ? c->fail_code : RINGLET_ERR_REMOTE;
            break;
        }
        if (rl_now() - last_progress > c->timeout_s) {
            for (int i = 0; i < n; i++) {
                run_t *s = &runs[i];
                if (run_done(s)) continue;
                int waiting_recv = s->done_r < s->posted_r || s->done_s >= s->p->nsend;
                char what[2 * RL_ERR_MAX], stall[RL_ERR_MAX];
                if (run_device_pending(s))
                    snprintf(stall, sizeof stall, ": this rank's own device copies of its chunks are not finished "
                                                  RL_DEVICE_STUCK_HINT);
                else
                    rl_conn_stall(waiting_recv ? s->rconn : s->sconn, stall, sizeof stall);
                snprintf(what, sizeof what, "no progress for %.0f s (RINGLET_TIMEOUT) waiting to %s rank %d%s",
                         c->timeout_s, waiting_recv ? "receive from" : "send to",
                         waiting_recv ? s->p->recv_peer : s->p->send_peer, stall);
                fail_with(s, RINGLET_ERR_TIMEOUT, what);
                failed = s;
                break;
            }
            break;
        }
        if (device) wait_device(c, idle++);
        else rl_comm_wait_peer(c, gen, 100);
    }
    if (failed) {
        /* Fail the communicator (a dead peer named by the monitor wins), then stop the
         * transports' work on our buffers before handing them back. */
        rc = rl_comm_op_failed(c, failed->p->r, failed->fcode, failed->failure, err);
        for (int i = 0; i < n; i++) run_stop(&runs[i]);
    }
    if (runs != &one) free(runs);
    return rc;
}

ringlet_result_t rl_pipe_run(rl_pipe *p, char *err) { return rl_pipes_run(p, 1, err); }
