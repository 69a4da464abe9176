#include "conn.h"

#include <stdio.h>
#include <stdlib.h>

#include "device.h"
#include "log.h"
#include "sock.h"
#include "util.h"
#include "wait.h"

int rl_conn_host_transport(const struct ringlet_comm *c, int a, int b) {
    const rl_rank_info *x = &c->infos[a], *y = &c->infos[b];
    if (c->forced_tp >= 0) return x->bloblen[c->forced_tp] && y->bloblen[c->forced_tp] ? c->forced_tp : -1;
    int same_host = !memcmp(x->hostid, y->hostid, 16);
    if (same_host && x->bloblen[RL_TP_SHM] && y->bloblen[RL_TP_SHM]) return RL_TP_SHM;
    if (!same_host && x->bloblen[RL_TP_IB] && y->bloblen[RL_TP_IB]) return RL_TP_IB;
    return RL_TP_TCP;
}

int rl_conn_ipc_candidate(const struct ringlet_comm *c, int peer) {
    const rl_rank_info *me = &c->infos[c->rank], *them = &c->infos[peer];
    return c->forced_tp < 0 && !memcmp(me->hostid, them->hostid, 16) && me->bloblen[RL_TP_CUDA_IPC] &&
           them->bloblen[RL_TP_CUDA_IPC];
}

ringlet_result_t rl_conn_pick_transport(struct ringlet_comm *c, int peer, int device, int *tp, char *err) {
    const rl_rank_info *them = &c->infos[peer];
    if (c->forced_tp >= 0) {
        *tp = c->forced_tp;
        if (them->bloblen[*tp]) return RINGLET_SUCCESS;
        snprintf(err, RL_ERR_MAX, "RINGLET_TRANSPORT=%s, but rank %d does not have it", rl_transports[*tp]->name, peer);
        return RINGLET_ERR_INVALID_USAGE;
    }
    if (device && rl_conn_ipc_candidate(c, peer)) {
        const rl_transport_ops *ipc = rl_transports[RL_TP_CUDA_IPC];
        char why[RL_ERR_MAX] = "";
        int reach = ipc->reachable ? ipc->reachable(c->tctx[RL_TP_CUDA_IPC], peer, them->blob[RL_TP_CUDA_IPC],
                                                    them->bloblen[RL_TP_CUDA_IPC], why)
                                   : 1;
        if (reach > 0) {
            *tp = RL_TP_CUDA_IPC;
            return RINGLET_SUCCESS;
        }
        if (reach < 0)
            return snprintf(err, RL_ERR_MAX, "%s", why), reach == -2 ? RINGLET_ERR_INTERNAL : RINGLET_ERR_REMOTE;
        /* Said once per peer (reachable caches its answer and says so). */
        if (!strstr(why, "tried before"))
            RL_INFO(c->rank, "device buffers with rank %d: not over cuda_ipc (%s); staged through host memory", peer, why);
    }
    *tp = rl_conn_host_transport(c, c->rank, peer);
    return RINGLET_SUCCESS;
}

/* ---- receives parked until their sender connects (conn.h) ---- */

static _Thread_local struct ringlet_comm *t_runner;

struct ringlet_comm *rl_conn_set_runner(struct ringlet_comm *c) {
    struct ringlet_comm *was = t_runner;
    t_runner = c;
    return was;
}

typedef struct rl_parked {
    void *buf;
    size_t len;
    rl_treq *req;
    int *local;
    struct rl_parked *next;
} rl_parked;

/* Detaches all of peer's parked pieces, in order. */
static rl_parked *take_parked(struct ringlet_comm *c, int peer) {
    pthread_mutex_lock(&c->park_mu);
    rl_parked *list = c->parked[peer];
    c->parked[peer] = NULL;
    int n = 0;
    for (rl_parked *p = list; p; p = p->next) n++;
    atomic_fetch_sub(&c->nparked, n);
    pthread_mutex_unlock(&c->park_mu);
    return list;
}

int rl_conn_parked_for(struct ringlet_comm *c, int peer) {
    pthread_mutex_lock(&c->park_mu);
    int has = c->parked[peer] != NULL;
    pthread_mutex_unlock(&c->park_mu);
    return has;
}

static void fail_parked(struct ringlet_comm *c, int peer, ringlet_result_t code, int local, const char *msg) {
    for (rl_parked *p = take_parked(c, peer), *next; p; p = next) {
        next = p->next;
        if (local && p->local) *p->local = 1; /* read by the waiter once the piece is done */
        rl_treq_fail(p->req, code, "%s", msg);
        rl_treq_part_done(p->req);
        free(p);
    }
    rl_comm_notify(c);
}

static void post_parked(struct ringlet_comm *c, int peer, rl_conn *conn) {
    ringlet_result_t failed = RINGLET_SUCCESS;
    char msg[RL_ERR_MAX] = "";
    for (rl_parked *p = take_parked(c, peer), *next; p; p = next) {
        next = p->next;
        ringlet_result_t rc = failed ? failed : conn->tp->irecv(conn->h, p->buf, p->len, NULL, p->req);
        if (rc) {
            /* Not posted: the ones behind would take its bytes, so none is (the waiter's
             * test fails the communicator). */
            if (!failed) {
                snprintf(msg, sizeof msg, "receive from rank %d: %.200s", peer, p->req->err);
                failed = rc;
            }
            rl_treq_start(p->req, p->len, 1); /* running only as parked */
            rl_treq_fail(p->req, rc, "%s", msg);
            rl_treq_part_done(p->req);
        }
        free(p);
    }
    /* As after any posting nobody may wait on soon (progress.c): what only polling moves
     * goes to the transport's threads; and waiters look again. */
    rl_comm_park(c);
    rl_comm_watch_posted(c);
    rl_comm_notify(c);
}

static ringlet_result_t get_conn(struct ringlet_comm *c, int peer, int send, int device, rl_conn **conn, char *err);

/* Whether an accept of peer's connection over transport tp would wait for the peer now. */
static int accept_waits(struct ringlet_comm *c, int tp, int peer) {
    const rl_transport_ops *ops = rl_transports[tp];
    return ops->accept_ready && !ops->accept_ready(c->tctx[tp], peer);
}

ringlet_result_t rl_comm_recv_conn_or_park(struct ringlet_comm *c, int peer, rl_conn **conn, char *err) {
    *conn = NULL;
    if (rl_conn_parked_for(c, peer)) return RINGLET_SUCCESS;
    if (!c->recv_conns[peer].h) {
        int tp;
        ringlet_result_t rc = rl_conn_pick_transport(c, peer, 0, &tp, err);
        if (rc) return rc;
        if (accept_waits(c, tp, peer)) return RINGLET_SUCCESS;
    }
    return get_conn(c, peer, 0, 0, conn, err);
}

ringlet_result_t rl_conn_park(struct ringlet_comm *c, int peer, void *buf, size_t len, rl_treq *req, int *local,
                              char *err) {
    rl_parked *p = malloc(sizeof *p);
    if (!p) return snprintf(err, RL_ERR_MAX, "out of memory to park a receive from rank %d", peer), RINGLET_ERR_SYSTEM;
    *p = (rl_parked){buf, len, req, local, NULL};
    rl_treq_start(req, len, 1);
    pthread_mutex_lock(&c->park_mu);
    rl_parked **at = &c->parked[peer];
    int first = !*at;
    while (*at) at = &(*at)->next;
    *at = p;
    atomic_fetch_add(&c->nparked, 1);
    pthread_mutex_unlock(&c->park_mu);
    if (first) RL_INFO(c->rank, "receiving from rank %d: it has not connected yet; the receive waits for it", peer);
    return RINGLET_SUCCESS;
}

void rl_conn_poll_parked_due(struct ringlet_comm *c) {
    if (t_runner != c || !atomic_load_explicit(&c->nparked, memory_order_relaxed)) return;
    if (rl_now() - c->park_polled_at >= RL_PARK_POLL_MS * 1e-3) rl_conn_poll_parked(c);
}

int rl_conn_poll_parked(struct ringlet_comm *c) {
    if (!atomic_load(&c->nparked)) return 0;
    c->park_polled_at = rl_now();
    for (int q = 0; q < c->nranks; q++) {
        if (!rl_conn_parked_for(c, q)) continue;
        char err[RL_ERR_MAX] = "";
        if (atomic_load(&c->stop)) {
            snprintf(err, sizeof err, "the communicator stopped before rank %d connected", q);
            fail_parked(c, q, RINGLET_ERR_REMOTE, 0, err);
            continue;
        }
        int tp;
        rl_conn *conn;
        ringlet_result_t rc = rl_conn_pick_transport(c, q, 0, &tp, err);
        if (!rc && accept_waits(c, tp, q)) continue;
        if (!rc) rc = get_conn(c, q, 0, 0, &conn, err); /* accepts, and posts the parked pieces */
        if (rc) fail_parked(c, q, rc, rc == RINGLET_ERR_SYSTEM, err);
    }
    return atomic_load(&c->nparked);
}

void rl_conn_drop_parked(struct ringlet_comm *c) {
    for (int q = 0; q < c->nranks && atomic_load(&c->nparked); q++) {
        char msg[RL_ERR_MAX];
        snprintf(msg, sizeof msg, "the communicator was closed before rank %d connected", q);
        if (rl_conn_parked_for(c, q)) fail_parked(c, q, RINGLET_ERR_REMOTE, 0, msg);
    }
}

/* The runner, about to wait in an accept while receives are parked: it waits here instead
 * and polls them meanwhile (the peer this accept waits for may itself wait for a rank whose
 * send waits for one of them). SUCCESS: the accept will not wait, or a poll made this very
 * connection; else the accept's error. */
static ringlet_result_t accept_polling(struct ringlet_comm *c, int tp, int peer, const rl_conn *slot, char *err) {
    const rl_transport_ops *ops = rl_transports[tp];
    if (t_runner != c || !ops->accept_ready || !atomic_load(&c->nparked)) return RINGLET_SUCCESS;
    double deadline = rl_now() + c->timeout_s;
    while (!slot->h && accept_waits(c, tp, peer)) {
        if (atomic_load(&c->stop)) return rl_transport_accept_failed(ops->name, peer, RL_IO_STOPPED, 0, err);
        if (rl_now() >= deadline) return rl_transport_accept_failed(ops->name, peer, RL_IO_TIMEOUT, 0, err);
        rl_conn_poll_parked(c);
        rl_sleep_ms(1);
    }
    return RINGLET_SUCCESS;
}

static ringlet_result_t get_conn(struct ringlet_comm *c, int peer, int send, int device, rl_conn **conn, char *err) {
    int tp, host_tp = -1;
    ringlet_result_t rc = rl_conn_pick_transport(c, peer, device, &tp, err);
    if (!rc && device) rc = rl_conn_pick_transport(c, peer, 0, &host_tp, err);
    if (rc) return rc;
    /* A separate connection only where device buffers take another transport. */
    int dev_table = device && tp != host_tp;
    rl_conn *slot = dev_table ? (send ? &c->send_conns_dev[peer] : &c->recv_conns_dev[peer])
                              : (send ? &c->send_conns[peer] : &c->recv_conns[peer]);
    if (!send && !slot->h && (rc = accept_polling(c, tp, peer, slot, err))) return rc;
    if (!slot->h) {
        const rl_transport_ops *ops = rl_transports[tp];
        /* On the communicator's device, whatever this thread's current one (the progress
         * thread's is device 0): the device calls use what the connection maps there. */
        const rl_device_ops *d = ops->device_memory ? rl_device() : NULL;
        int dev = d ? atomic_load(&c->conn_device) : -1, saved = -1;
        if (dev >= 0 && d->device_enter(dev, &saved) != RL_DEV_OK)
            return snprintf(err, RL_ERR_MAX, "%s: selecting device %d for the connection with rank %d: %s", ops->name,
                            dev, peer, rl_dev_error()),
                   RINGLET_ERR_CUDA;
        rc = send ? ops->connect(c->tctx[tp], peer, c->infos[peer].blob[tp], c->infos[peer].bloblen[tp], &slot->h, err)
                  : ops->accept(c->tctx[tp], peer, &slot->h, err);
        if (dev >= 0) d->device_leave(saved);
        if (rc) return rc;
        slot->tp = ops;
        if (ops->progress)
            atomic_fetch_or(&c->polled, RL_POLLED_TP(tp) | (ops->park ? RL_POLLED_ON_DEMAND : RL_POLLED_ALWAYS));
        if (!ops->progress || ops->park) atomic_store(&c->threaded, 1);
        RL_INFO(c->rank, "%s rank %d over %s%s", send ? "sending to" : "receiving from", peer, ops->name,
                dev_table ? " (device buffers)" : "");
        /* Receives parked for this connection go first: they were posted before whatever
         * made it now (a collective's receives, say). */
        if (!send && slot == &c->recv_conns[peer]) post_parked(c, peer, slot);
    }
    *conn = slot;
    return RINGLET_SUCCESS;
}

ringlet_result_t rl_comm_send_conn(struct ringlet_comm *c, int peer, int device, rl_conn **conn, char *err) {
    return get_conn(c, peer, 1, device, conn, err);
}

ringlet_result_t rl_comm_recv_conn(struct ringlet_comm *c, int peer, int device, rl_conn **conn, char *err) {
    return get_conn(c, peer, 0, device, conn, err);
}

const char *rl_conn_stall(const rl_conn *conn, char *buf, size_t n) {
    char why[RL_ERR_MAX];
    buf[0] = 0;
    if (conn && conn->h && conn->tp->waits_on_device && conn->tp->waits_on_device(conn->h, why, sizeof why))
        snprintf(buf, n, ": %s", why);
    return buf;
}

int rl_conn_wait_idle(struct ringlet_comm *c, double grace_s) {
    for (double until = rl_now() + grace_s;;) {
        pthread_mutex_lock(&c->q_mu);
        int busy = c->running || atomic_load(&c->waiters);
        pthread_mutex_unlock(&c->q_mu);
        if (!busy || rl_now() > until) return busy;
        rl_sleep_ms(1);
    }
}

void rl_conn_close_all(struct ringlet_comm *c) {
    /* Receiving ends first: a sender may keep memory for a receiver until it lets go
     * (cuda_ipc's slots). */
    rl_conn_drop_parked(c);
    rl_conn *tables[4] = {c->recv_conns, c->recv_conns_dev, c->send_conns, c->send_conns_dev};
    for (int t = 0; t < 4; t++)
        for (int p = 0; p < c->nranks && tables[t]; p++) {
            if (tables[t][p].h) tables[t][p].tp->close(tables[t][p].h);
            tables[t][p].h = NULL;
        }
}
