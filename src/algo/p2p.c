#include "p2p.h"

#include <stdio.h>
#include <stdlib.h>

#include "collective.h"
#include "conn.h"
#include "failure.h"
#include "pipe.h"
#include "trace.h"
#include "util.h"
#include "wait.h"

/* Waits until every posted piece finished (they fail fast once the communicator has). */
static void wait_posted(struct ringlet_comm *c, struct ringlet_request *r) {
    for (size_t i = 0; i < r->ntreq; i++)
        rl_comm_wait_treq(c, &r->treqs[i]);
}

static _Thread_local unsigned long t_posts;

unsigned long rl_p2p_posts(void) { return t_posts; }

ringlet_result_t rl_p2p_post(struct ringlet_comm *c, struct ringlet_request *r) {
    char err[RL_ERR_MAX]; /* a string: only its first byte cleared (a per-call path) */
    err[0] = 0;
    size_t bytes = r->count * ringlet_datatype_size(r->dtype), n = rl_p2p_pieces(bytes);
    int send = r->kind == RL_OP_SEND;
    rl_conn *conn = NULL;
    /* A receive whose sender has not connected yet parks its pieces (conn.h): waiting in
     * the accept here would hold up this rank's later calls, its sends among them. */
    ringlet_result_t rc = send ? rl_comm_send_conn(c, r->peer, 0, &conn, err) : rl_comm_recv_conn_or_park(c, r->peer, &conn, err);
    r->park_local = 0;
    r->ntreq = r->ndone = 0;
    r->treqs = n == 1 ? &r->treq1 : calloc(n, sizeof(rl_treq));
    if (!rc && !r->treqs) rc = RINGLET_ERR_SYSTEM, snprintf(err, sizeof err, "out of memory for %zu pieces", n);
    for (size_t i = 0; i < n && !rc; i++) {
        rl_fault_point(&c->fault, c->rank, rl_op_name(r->kind), r->seq, send ? RL_FAULT_SEND : RL_FAULT_RECV);
        size_t off = i * RL_P2P_PIECE, len = rl_p2p_piece_bytes(bytes, i);
        r->treqs[i].chan = rl_op_chan(r->kind);
        if (!conn) {
            rc = rl_conn_park(c, r->peer, (char *)r->recvbuf + off, len, &r->treqs[i], &r->park_local, err);
            if (!rc) r->ntreq++;
            continue;
        }
        rc = send ? conn->tp->isend(conn->h, (const char *)r->sendbuf + off, len, NULL, &r->treqs[i])
                  : conn->tp->irecv(conn->h, (char *)r->recvbuf + off, len, NULL, &r->treqs[i]);
        if (!rc) r->ntreq++;
        else snprintf(err, sizeof err, "%s", r->treqs[i].err);
    }
    if (rc) {
        /* Pieces already posted must stop before the request goes back to the user. */
        if (r->ntreq) {
            rl_comm_fail(c, rc, "%s #%llu with rank %d: %s", rl_op_name(r->kind), (unsigned long long)r->seq, r->peer, err);
            rl_conn_poll_parked(c); /* the communicator stopped: fails the pieces parked (by this thread) */
            wait_posted(c, r);
        }
        if (atomic_load(&c->failed)) rl_comm_failure(c, err, sizeof err);
        snprintf(r->err, sizeof r->err, "%s #%llu to/from rank %d: %.400s", rl_op_name(r->kind),
                 (unsigned long long)r->seq, r->peer, err);
        return rc;
    }
    /* The waiter completes it from the pieces. */
    t_posts++;
    r->posted_at = r->traced_from = rl_now();
    atomic_store_explicit(&r->posted, 1, memory_order_release);
    rl_comm_notify(c);
    return RINGLET_SUCCESS;
}

int rl_p2p_test(struct ringlet_request *r) {
    if (!atomic_load_explicit(&r->posted, memory_order_acquire)) return 0;
    struct ringlet_comm *c = r->comm;
    size_t was = r->ndone;
    while (r->ndone < r->ntreq && rl_treq_done(&r->treqs[r->ndone])) r->ndone++;
    /* A piece done is progress: the deadline (RINGLET_TIMEOUT without progress) restarts. */
    if (r->ndone != was) r->posted_at = rl_now();
    if (r->ndone < r->ntreq) return 0;
    ringlet_result_t st = RINGLET_SUCCESS;
    const char *why = "";
    for (size_t i = 0; i < r->ntreq && !st; i++)
        if ((st = atomic_load(&r->treqs[i].status)) != RINGLET_SUCCESS) why = r->treqs[i].err;
    if (st != RINGLET_SUCCESS && r->park_local) {
        /* Its sender's connection could not be accepted, for this rank's own reason (out of
         * descriptors): nothing of it moved, and the communicator stays sound, as when the
         * accept fails while the receive is posted. */
        snprintf(r->err, sizeof r->err, "%s #%llu to/from rank %d: %.400s", rl_op_name(r->kind),
                 (unsigned long long)r->seq, r->peer, why);
    } else if (st == RINGLET_ERR_INVALID_USAGE) {
        /* A length mismatch (the transports' only such verdict on a message): this rank's
         * own view of this message, which no dead peer would explain better. It is the
         * request's error whatever fails meanwhile (the peer, told of it, fails its own
         * end and may exit at once: waiting for the monitor to name a cause, as below,
         * made that exit this request's error now and then), and the communicator's
         * cause unless it failed already. */
        rl_comm_fail(c, st, "%s #%llu with rank %d: %s", rl_op_name(r->kind), (unsigned long long)r->seq, r->peer, why);
        snprintf(r->err, sizeof r->err, "%s #%llu failed: %.400s", rl_op_name(r->kind), (unsigned long long)r->seq, why);
    } else if (st != RINGLET_SUCCESS) {
        /* The communicator's cause (a dead peer named by the monitor) wins over the
         * transport's local view; either way the communicator is failed afterwards. */
        if (!atomic_load(&c->failed)) rl_comm_fail_link(c, st, why);
        char msg[RL_MSG_MAX];
        st = rl_comm_failure(c, msg, sizeof msg);
        snprintf(r->err, sizeof r->err, "%s #%llu failed: %.400s", rl_op_name(r->kind), (unsigned long long)r->seq, msg);
    }
    r->result = st;
    /* Its span on the operation lane: from the post to the waiter seeing it done. */
    if (c->trace)
        rl_trace_span(c->trace, RL_LANE_OP, rl_op_name(r->kind), r->traced_from, rl_now(), rl_op_name(r->kind), r->seq,
                      -1, r->count * ringlet_datatype_size(r->dtype), r->peer);
    atomic_store(&r->done, 1);
    return 1;
}

void rl_p2p_drain(struct ringlet_request *r) {
    if (atomic_load_explicit(&r->posted, memory_order_acquire)) wait_posted(r->comm, r);
}

const char *rl_p2p_stall(struct ringlet_request *r, char *buf, size_t n) {
    struct ringlet_comm *c = r->comm;
    rl_conn *tab = r->kind == RL_OP_SEND ? c->send_conns : c->recv_conns;
    if (r->kind == RL_OP_RECV && r->peer >= 0 && r->peer < c->nranks && rl_conn_parked_for(c, r->peer))
        return snprintf(buf, n, ": rank %d never connected to this rank (it sent nothing to it yet)", r->peer), buf;
    return rl_conn_stall(tab && r->peer >= 0 && r->peer < c->nranks ? &tab[r->peer] : NULL, buf, n);
}

void rl_p2p_free(struct ringlet_request *r) {
    if (r->treqs && r->treqs != &r->treq1) free(r->treqs);
    r->treqs = NULL;
}

/* ---- the pipelined form ---- */

static void p2p_recv_at(rl_pipe *p, size_t i, void **dst, size_t *bytes) {
    const struct ringlet_request *r = p->r_recv;
    *dst = (char *)r->recvbuf + i * RL_P2P_PIECE;
    *bytes = rl_p2p_piece_bytes(r->count * ringlet_datatype_size(r->dtype), i);
}

static void p2p_send_at(rl_pipe *p, size_t i, const void **src, size_t *bytes) {
    const struct ringlet_request *r = p->r;
    *src = (const char *)r->sendbuf + i * RL_P2P_PIECE;
    *bytes = rl_p2p_piece_bytes(r->count * ringlet_datatype_size(r->dtype), i);
}

ringlet_result_t rl_run_p2p_pipe(struct ringlet_comm *c, struct ringlet_request *send, struct ringlet_request *recv,
                                 rl_mem *mem, char *err) {
    rl_pipe p;
    memset(&p, 0, sizeof p);
    p.c = c;
    p.r = send ? send : recv;
    p.r_recv = recv ? recv : send;
    p.mem = mem;
    if (send) {
        p.send_peer = send->peer;
        p.nsend = rl_p2p_pieces(send->count * ringlet_datatype_size(send->dtype));
    }
    if (recv) {
        p.recv_peer = recv->peer;
        p.nrecv = rl_p2p_pieces(recv->count * ringlet_datatype_size(recv->dtype));
    }
    p.recv_at = p2p_recv_at;
    p.send_at = p2p_send_at;
    return rl_pipe_run(&p, err);
}
