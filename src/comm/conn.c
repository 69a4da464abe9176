#include "conn.h"

#include <stdio.h>

#include "log.h"
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

static ringlet_result_t get_conn(struct ringlet_comm *c, int peer, int send, int device, rl_conn **conn, char *err) {
    int tp, host_tp = -1;
    ringlet_result_t rc = rl_conn_pick_transport(c, peer, device, &tp, err);
    if (!rc && device) rc = rl_conn_pick_transport(c, peer, 0, &host_tp, err);
    if (rc) return rc;
    /* A separate connection only where device buffers take another transport. */
    int dev_table = device && tp != host_tp;
    rl_conn *slot = dev_table ? (send ? &c->send_conns_dev[peer] : &c->recv_conns_dev[peer])
                              : (send ? &c->send_conns[peer] : &c->recv_conns[peer]);
    if (!slot->h) {
        const rl_transport_ops *ops = rl_transports[tp];
        rc = send ? ops->connect(c->tctx[tp], peer, c->infos[peer].blob[tp], c->infos[peer].bloblen[tp], &slot->h, err)
                  : ops->accept(c->tctx[tp], peer, &slot->h, err);
        if (rc) return rc;
        slot->tp = ops;
        if (ops->progress)
            atomic_fetch_or(&c->polled, RL_POLLED_TP(tp) | (ops->park ? RL_POLLED_ON_DEMAND : RL_POLLED_ALWAYS));
        if (!ops->progress || ops->park) atomic_store(&c->threaded, 1);
        RL_INFO(c->rank, "%s rank %d over %s%s", send ? "sending to" : "receiving from", peer, ops->name,
                dev_table ? " (device buffers)" : "");
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

void rl_conn_wait_idle(struct ringlet_comm *c) {
    for (double until = rl_now() + RL_ABORT_GRACE_S;;) {
        pthread_mutex_lock(&c->q_mu);
        int busy = c->running || atomic_load(&c->waiters);
        pthread_mutex_unlock(&c->q_mu);
        if (!busy || rl_now() > until) break;
        rl_sleep_ms(1);
    }
}

void rl_conn_close_all(struct ringlet_comm *c) {
    /* Receiving ends first: a sender may keep memory for a receiver until it lets go
     * (cuda_ipc's slots). */
    rl_conn *tables[4] = {c->recv_conns, c->recv_conns_dev, c->send_conns, c->send_conns_dev};
    for (int t = 0; t < 4; t++)
        for (int p = 0; p < c->nranks && tables[t]; p++) {
            if (tables[t][p].h) tables[t][p].tp->close(tables[t][p].h);
            tables[t][p].h = NULL;
        }
}
