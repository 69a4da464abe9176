#include "conn.h"

#include <stdio.h>

#include "log.h"

ringlet_result_t rl_conn_pick_transport(struct ringlet_comm *c, int peer, int *tp, char *err) {
    const rl_rank_info *me = &c->infos[c->rank], *them = &c->infos[peer];
    if (c->forced_tp >= 0) {
        *tp = c->forced_tp;
        if (them->bloblen[*tp]) return RINGLET_SUCCESS;
        snprintf(err, RL_ERR_MAX, "RINGLET_TRANSPORT=%s, but rank %d does not have it", rl_transports[*tp]->name, peer);
        return RINGLET_ERR_INVALID_USAGE;
    }
    int same_host = !memcmp(me->hostid, them->hostid, 16);
    if (same_host && me->bloblen[RL_TP_SHM] && them->bloblen[RL_TP_SHM]) *tp = RL_TP_SHM;
    else if (!same_host && me->bloblen[RL_TP_IB] && them->bloblen[RL_TP_IB]) *tp = RL_TP_IB;
    else *tp = RL_TP_TCP;
    return RINGLET_SUCCESS;
}

static ringlet_result_t get_conn(struct ringlet_comm *c, int peer, int send, rl_conn **conn, char *err) {
    rl_conn *slot = send ? &c->send_conns[peer] : &c->recv_conns[peer];
    if (!slot->h) {
        int tp;
        ringlet_result_t rc = rl_conn_pick_transport(c, peer, &tp, err);
        if (rc) return rc;
        const rl_transport_ops *ops = rl_transports[tp];
        rc = send ? ops->connect(c->tctx[tp], peer, c->infos[peer].blob[tp], c->infos[peer].bloblen[tp], &slot->h, err)
                  : ops->accept(c->tctx[tp], peer, &slot->h, err);
        if (rc) return rc;
        slot->tp = ops;
        if (ops->progress) atomic_store(&c->polled, 1);
        RL_INFO(c->rank, "%s rank %d over %s", send ? "sending to" : "receiving from", peer, ops->name);
    }
    *conn = slot;
    return RINGLET_SUCCESS;
}

ringlet_result_t rl_comm_send_conn(struct ringlet_comm *c, int peer, rl_conn **conn, char *err) {
    return get_conn(c, peer, 1, conn, err);
}

ringlet_result_t rl_comm_recv_conn(struct ringlet_comm *c, int peer, rl_conn **conn, char *err) {
    return get_conn(c, peer, 0, conn, err);
}

void rl_conn_close_all(struct ringlet_comm *c) {
    for (int p = 0; p < c->nranks; p++) {
        if (c->send_conns[p].h) c->send_conns[p].tp->close(c->send_conns[p].h);
        if (c->recv_conns[p].h) c->recv_conns[p].tp->close(c->recv_conns[p].h);
        c->send_conns[p].h = c->recv_conns[p].h = NULL;
    }
}
