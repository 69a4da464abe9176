/* The IB transport's verbs objects (see ib.c): a connection's registered FIFO or staging
 * area, its completion queue and queue pairs (INIT, then RTR and RTS against the peer's),
 * and memory registered by reg_mr. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ib.h"
#include "ib_conn.h"

#ifdef RL_HAVE_VERBS

/* What to check when a registration fails, by its errno. */
static const char *reg_hint(int e) {
    if (e == ENOMEM || e == EPERM || e == EAGAIN)
        return " (the locked-memory limit, ulimit -l, or the NIC's memory translation tables are full)";
    if (e == EFAULT) return " (not memory the NIC can reach: device memory needs GPUDirect RDMA)";
    return "";
}

int rl_ib_post_recvs(struct ib_conn *c, int qi, int n) {
    struct ibv_recv_wr wr, *bad;
    memset(&wr, 0, sizeof wr);
    wr.wr_id = WRID(WR_RECV, qi);
    wr.num_sge = 0; /* immediates only: data lands by RDMA */
    for (int i = 0; i < n; i++) {
        int e = ibv_post_recv(c->qp[qi], &wr, &bad);
        if (e) return e;
    }
    return 0;
}

void rl_ib_conn_free_verbs(struct ib_conn *c) {
    const rl_ibv *v = c->ctx->v;
    for (int i = 0; i < IB_MAX_QPS; i++)
        if (c->qp[i]) v->destroy_qp(c->qp[i]), c->qp[i] = NULL;
    if (c->cq) v->destroy_cq(c->cq), c->cq = NULL;
    if (c->mr) v->dereg_mr(c->mr), c->mr = NULL;
    free(c->buf), free(c->slot_req), free(c->arrived);
    c->buf = NULL, c->slot_req = NULL, c->arrived = NULL;
    if (c->fd >= 0) close(c->fd), c->fd = -1;
}

struct ib_conn *rl_ib_conn_create(struct ib_ctx *x, int peer, int is_send, int nqps, int nslots, size_t slot_size,
                                   char *err) {
    const rl_ibv *v = x->v;
    struct ib_conn *c = calloc(1, sizeof *c);
    if (!c) return snprintf(err, RL_ERR_MAX, "ib: out of memory"), NULL;
    c->ctx = x;
    c->peer = peer;
    c->is_send = is_send;
    c->fd = -1;
    c->nqps = nqps;
    c->nslots = nslots;
    c->slot_size = slot_size;
    c->stride = IB_HDR + slot_size;
    pthread_mutex_init(&c->mu, NULL);
    /* whole pages: under ibv_fork_init a registration's pages are not in a forked child,
     * and no other data may share them (ib_verbs.c's fork_protect) */
    size_t page = (size_t)sysconf(_SC_PAGESIZE), bytes = c->stride * (size_t)nslots;
    if (page < 4096) page = 4096;
    bytes = (bytes + page - 1) / page * page;
    if (posix_memalign((void **)&c->buf, page, bytes) != 0) {
        c->buf = NULL;
        snprintf(err, RL_ERR_MAX, "ib: out of memory for %d slots of %zu bytes", nslots, slot_size);
        goto fail;
    }
    memset(c->buf, 0, bytes);
    c->mr = v->reg_mr(x->pd, c->buf, bytes, IBV_ACCESS_LOCAL_WRITE | (is_send ? 0 : IBV_ACCESS_REMOTE_WRITE));
    if (!c->mr) {
        snprintf(err, RL_ERR_MAX, "ib: cannot register %zu bytes for rank %d: %s%s", bytes, peer, strerror(errno),
                 reg_hint(errno));
        goto fail;
    }
    if (is_send) c->slot_req = calloc((size_t)nslots, sizeof *c->slot_req);
    else c->arrived = calloc((size_t)nslots, 1);
    if (is_send ? !c->slot_req : !c->arrived) {
        snprintf(err, RL_ERR_MAX, "ib: out of memory");
        goto fail;
    }
    int max_wr = x->port.dattr.max_qp_wr > 0 ? x->port.dattr.max_qp_wr : 1 << 14;
    int sq = nslots + IB_CTRL_MAX + 2, rq = nslots + 2 * IB_CTRL_MAX + 2;
    if (sq > max_wr) sq = max_wr;
    if (rq > max_wr) rq = max_wr;
    c->rq_depth = rq;
    int cqe = nqps * (sq + rq);
    if (x->port.dattr.max_cqe > 0 && cqe > x->port.dattr.max_cqe) cqe = x->port.dattr.max_cqe;
    c->cq = v->create_cq(x->port.ctx, cqe, c, x->ch, 0);
    if (!c->cq) {
        snprintf(err, RL_ERR_MAX, "ib: cannot create a completion queue of %d entries: %s", cqe, strerror(errno));
        goto fail;
    }
    for (int i = 0; i < nqps; i++) {
        struct ibv_qp_init_attr qa;
        memset(&qa, 0, sizeof qa);
        qa.qp_context = c;
        qa.send_cq = qa.recv_cq = c->cq;
        qa.qp_type = IBV_QPT_RC;
        qa.cap.max_send_wr = (uint32_t)sq;
        qa.cap.max_recv_wr = (uint32_t)rq;
        qa.cap.max_send_sge = 2;
        qa.cap.max_recv_sge = 1;
        c->qp[i] = v->create_qp(x->pd, &qa);
        if (!c->qp[i]) {
            snprintf(err, RL_ERR_MAX, "ib: cannot create queue pair %d for rank %d: %s", i, peer, strerror(errno));
            goto fail;
        }
        struct ibv_qp_attr a;
        memset(&a, 0, sizeof a);
        a.qp_state = IBV_QPS_INIT;
        a.pkey_index = 0;
        a.port_num = (uint8_t)x->port.port;
        a.qp_access_flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;
        int e = v->modify_qp(c->qp[i], &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
        if (!e) e = rl_ib_post_recvs(c, i, rq);
        if (e) {
            snprintf(err, RL_ERR_MAX, "ib: cannot initialise queue pair %d for rank %d: %s", i, peer, strerror(e));
            goto fail;
        }
    }
    return c;
fail:
    rl_ib_conn_free_verbs(c);
    pthread_mutex_destroy(&c->mu);
    free(c);
    return NULL;
}

int rl_ib_conn_connect_qps(struct ib_conn *c, const uint32_t *qpn, const uint8_t *gid, uint32_t lid, uint32_t mtu,
                            int peer_grh, char *err) {
    struct ib_ctx *x = c->ctx;
    int global = rl_ib_use_grh(x->port.grh, x->port.gid.raw, peer_grh, gid);
    enum ibv_mtu m = x->port.attr.active_mtu;
    if (mtu >= IBV_MTU_256 && mtu <= IBV_MTU_4096 && (enum ibv_mtu)mtu < m) m = (enum ibv_mtu)mtu;
    for (int i = 0; i < c->nqps; i++) {
        struct ibv_qp_attr a;
        memset(&a, 0, sizeof a);
        a.qp_state = IBV_QPS_RTR;
        a.path_mtu = m;
        a.dest_qp_num = qpn[i];
        a.rq_psn = 0;
        a.max_dest_rd_atomic = 1;
        a.min_rnr_timer = 12; /* 0.64 ms */
        a.ah_attr.port_num = (uint8_t)x->port.port;
        a.ah_attr.sl = (uint8_t)x->sl;
        a.ah_attr.dlid = (uint16_t)lid;
        if (global) {
            a.ah_attr.is_global = 1;
            memcpy(a.ah_attr.grh.dgid.raw, gid, 16);
            a.ah_attr.grh.sgid_index = (uint8_t)(x->port.gid_index >= 0 ? x->port.gid_index : 0);
            a.ah_attr.grh.hop_limit = 255;
            a.ah_attr.grh.traffic_class = (uint8_t)x->tc;
        }
        int e = x->v->modify_qp(c->qp[i], &a,
                                IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                                    IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);
        if (e) {
            snprintf(err, RL_ERR_MAX, "ib: queue pair %d to rank %d: INIT -> RTR failed: %s", i, c->peer, strerror(e));
            return -1;
        }
        memset(&a, 0, sizeof a);
        a.qp_state = IBV_QPS_RTS;
        a.timeout = (uint8_t)x->ib_timeout;
        a.retry_cnt = (uint8_t)x->retry_cnt;
        a.rnr_retry = 7; /* receive queues are refilled as fast as we poll: wait for them */
        a.sq_psn = 0;
        a.max_rd_atomic = 1;
        e = x->v->modify_qp(c->qp[i], &a,
                            IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
                                IBV_QP_MAX_QP_RD_ATOMIC);
        if (e) {
            snprintf(err, RL_ERR_MAX, "ib: queue pair %d to rank %d: RTR -> RTS failed: %s", i, c->peer, strerror(e));
            return -1;
        }
    }
    return 0;
}

ringlet_result_t rl_ib_reg_mr(void *ctxp, void *buf, size_t len, void **mrp, char *err) {
    struct ib_ctx *x = ctxp;
    struct ib_mr *m = calloc(1, sizeof *m);
    if (!m) return snprintf(err, RL_ERR_MAX, "ib: out of memory"), RINGLET_ERR_SYSTEM;
    /* Only ever a send's source (ib.c): read locally, so no access flags, which also lets
     * read-only memory register and gives the peers' queue pairs no way into it. */
    m->mr = x->v->reg_mr(x->pd, buf, len, 0);
    if (!m->mr) {
        snprintf(err, RL_ERR_MAX, "ib: cannot register %zu bytes at %p: %s%s", len, buf, strerror(errno),
                 reg_hint(errno));
        free(m);
        return RINGLET_ERR_SYSTEM;
    }
    m->addr = buf;
    m->len = len;
    *mrp = m;
    return RINGLET_SUCCESS;
}

void rl_ib_dereg_mr(void *ctxp, void *mrp) {
    struct ib_ctx *x = ctxp;
    struct ib_mr *m = mrp;
    if (!m) return;
    x->v->dereg_mr(m->mr);
    free(m);
}

#endif /* RL_HAVE_VERBS */
