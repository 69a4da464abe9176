/* The IB transport's data path (see ib.c): a message is cut into chunks of at most one
 * slot, each written into the receiver's FIFO with RDMA WRITE WITH IMMEDIATE once the
 * receiver's credits allow; the receiver copies chunks out in order and returns credits.
 * Every function here runs with the connection's lock held. */
#include <errno.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ib.h"
#include "ib_conn.h"
#include "log.h"
#include "util.h"

#ifdef RL_HAVE_VERBS

static void notify(struct ib_conn *c) {
    if (c->ctx->in.notify) c->ctx->in.notify(c->ctx->in.notify_arg);
}

void rl_ib_finish_req(struct ib_conn *c, struct ib_req *r) {
    if (r->finished) return;
    r->finished = 1;
    rl_treq_part_done(r->t);
    notify(c);
}

void rl_ib_fail_req(struct ib_conn *c, struct ib_req *r, ringlet_result_t code, const char *msg) {
    if (r->finished) return;
    rl_treq_fail(r->t, code, "%s", msg);
    rl_ib_finish_req(c, r);
}

static void doom(struct ib_req *r, struct ib_req **list) {
    if (r->finished || r->doomed) return;
    r->doomed = 1;
    r->doom_next = *list;
    *list = r;
}

void rl_ib_conn_break(struct ib_conn *c, ringlet_result_t code, const char *fmt, ...) {
    if (c->state != ST_BROKEN) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(c->why, sizeof c->why, fmt, ap);
        va_end(ap);
        c->why_code = code;
        c->state = ST_BROKEN;
        RL_INFO(c->ctx->in.rank, "ib: %s", c->why);
        /* A sending end's queue pairs go to the error state before its requests fail: a
         * zero-copy write still queued reads the caller's buffer, which the caller owns
         * again once its request failed (and a retry must not land later). The receiving
         * end keeps its own: its error notice to the sender is still on its way. */
        for (int i = 0; c->is_send && i < c->nqps; i++)
            if (c->qp[i]) {
                struct ibv_qp_attr a;
                memset(&a, 0, sizeof a);
                a.qp_state = IBV_QPS_ERR;
                /* Allowed from every state: a failure means the device itself failed
                 * (and its queued work with it); it is said. */
                int e = c->ctx->v->modify_qp(c->qp[i], &a, IBV_QP_STATE);
                if (e) RL_WARN(c->ctx->in.rank, "ib: moving queue pair %d to the error state failed: %s", i, strerror(e));
            }
    }
    /* Every request is listed first, each once (a send may be both queued and in a
     * slot), and only then failed: a failed request is finished, and its owner may free
     * it at once (it lives in its rl_treq), so nothing is read from it after. */
    struct ib_req *doomed = NULL;
    for (struct ib_req *r = c->sq_head; r; r = r->next) doom(r, &doomed);
    c->sq_head = c->sq_tail = NULL;
    if (c->slot_req)
        for (int k = 0; k < c->nslots; k++)
            if (c->slot_req[k]) {
                doom(c->slot_req[k], &doomed);
                c->slot_req[k] = NULL;
            }
    for (struct ib_req *r = c->rq_head; r; r = r->next) doom(r, &doomed);
    c->rq_head = c->rq_tail = NULL;
    c->wait_since = 0;
    while (doomed) {
        struct ib_req *r = doomed;
        doomed = r->doom_next;
        rl_ib_fail_req(c, r, c->why_code, c->why);
    }
}

static int send_ctrl(struct ib_conn *c, int type, uint32_t val) {
    /* Credits wait for a free control slot (a later one carries the count); the one error
     * notice a connection ever sends must not be dropped: it takes one of the send
     * queue's two spare entries (ib_qp.c), and the peer has receives posted for it. */
    if (c->ctrl_inflight >= IB_CTRL_MAX && (type != IMM_ERROR || c->ctrl_inflight >= IB_CTRL_MAX + 2)) return -1;
    struct ibv_send_wr wr, *bad;
    memset(&wr, 0, sizeof wr);
    wr.wr_id = WRID(WR_CTRL, 0);
    wr.opcode = IBV_WR_SEND_WITH_IMM;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.imm_data = htonl(IB_IMM(type, val));
    int e = ibv_post_send(c->qp[0], &wr, &bad);
    if (e) return e;
    c->ctrl_inflight++;
    return 0;
}

static uint64_t nchunks_of(size_t len, size_t slot) { return len ? (len + slot - 1) / slot : 1; }

int rl_ib_post_sends(struct ib_conn *c) {
    int n = 0;
    while (c->state == ST_READY && c->sq_head) {
        struct ib_req *r = c->sq_head;
        uint64_t seq = c->seq;
        if (seq - c->credits >= (uint64_t)c->nslots) break; /* the receiver's slot is still full */
        int k = (int)(seq % (uint64_t)c->nslots);
        if (c->slot_req[k]) break; /* our staging slot is still being written */
        size_t len = r->len - r->off < c->slot_size ? r->len - r->off : c->slot_size;
        char *slot = c->buf + (size_t)k * c->stride;
        rl_ib_chunk_hdr h = {r->len, r->off, seq, (uint32_t)len, IB_CHUNK_MAGIC, r->t->chan, 0};
        memcpy(slot, &h, sizeof h);
        struct ibv_sge sge[2];
        int nsge = 1;
        sge[0].addr = (uintptr_t)slot;
        sge[0].lkey = c->mr->lkey;
        if (r->mr && len) {
            sge[0].length = IB_HDR;
            sge[1].addr = (uintptr_t)(r->buf + r->off);
            sge[1].length = (uint32_t)len;
            sge[1].lkey = r->mr->lkey;
            nsge = 2;
        } else {
            if (len) memcpy(slot + IB_HDR, r->buf + r->off, len);
            sge[0].length = (uint32_t)(IB_HDR + len);
        }
        struct ibv_send_wr wr, *bad;
        memset(&wr, 0, sizeof wr);
        wr.wr_id = WRID(WR_DATA, k);
        wr.sg_list = sge;
        wr.num_sge = nsge;
        wr.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
        wr.send_flags = IBV_SEND_SIGNALED;
        wr.imm_data = htonl(IB_IMM(IMM_DATA, seq));
        wr.wr.rdma.remote_addr = c->raddr + (uint64_t)k * c->stride;
        wr.wr.rdma.rkey = c->rkey;
        int e = ibv_post_send(c->qp[seq % (uint64_t)c->nqps], &wr, &bad);
        if (e) {
            rl_ib_conn_break(c, RINGLET_ERR_SYSTEM, "send to rank %d: ibv_post_send failed: %s", c->peer, strerror(e));
            return n;
        }
        c->slot_req[k] = r;
        r->posted++;
        r->off += len;
        c->seq++;
        n++;
        if (r->posted == r->nchunks) {
            c->sq_head = r->next;
            if (!c->sq_head) c->sq_tail = NULL;
        }
    }
    if (!c->sq_head || c->state == ST_BROKEN) c->wait_since = 0;
    else if (n || !c->wait_since) c->wait_since = rl_now();
    return n;
}

int rl_ib_consume(struct ib_conn *c) {
    int n = 0;
    while (c->state == ST_READY && c->rq_head) {
        struct ib_req *r = c->rq_head;
        int k = (int)(c->consumed % (uint64_t)c->nslots);
        if (!c->arrived[k]) {
            if (c->peer_closed)
                rl_ib_conn_break(c, RINGLET_ERR_REMOTE,
                           "receive from rank %d: rank %d closed the connection (it exited or aborted) before sending "
                           "the message",
                           c->peer, c->peer);
            break;
        }
        const char *slot = c->buf + (size_t)k * c->stride;
        rl_ib_chunk_hdr h;
        memcpy(&h, slot, sizeof h);
        int verdict = rl_ib_check_chunk(&h, c->consumed, r->len, r->t->chan, r->off, c->slot_size);
        if (verdict == RL_IB_BAD) {
            rl_ib_conn_break(c, RINGLET_ERR_REMOTE, "receive from rank %d: corrupt chunk header (chunk %llu)", c->peer,
                       (unsigned long long)c->consumed);
            break;
        }
        if (verdict == RL_IB_CHANNEL || verdict == RL_IB_LENGTH) {
            /* another call's message, or another length: the receive fails, the sender is
             * told, the connection closes */
            char why[RL_ERR_MAX];
            if (verdict == RL_IB_CHANNEL)
                snprintf(why, sizeof why, RL_CHAN_MISMATCH_FMT, rl_chan_name(h.chan), rl_chan_name(r->t->chan));
            else
                snprintf(why, sizeof why, "the peer sent a message of %llu bytes, this rank expected %zu",
                         (unsigned long long)h.total, r->len);
            rl_treq_fail(r->t, RINGLET_ERR_INVALID_USAGE, "receive from rank %d: %s", c->peer, why);
            send_ctrl(c, IMM_ERROR, RINGLET_ERR_INVALID_USAGE);
            rl_ib_conn_break(c, RINGLET_ERR_INVALID_USAGE, "receive from rank %d: %s; connection closed", c->peer, why);
            break;
        }
        if (verdict == RL_IB_PLACE) {
            rl_ib_conn_break(c, RINGLET_ERR_REMOTE, "receive from rank %d: chunk out of place (offset %llu, %u bytes)",
                       c->peer, (unsigned long long)h.off, h.len);
            break;
        }
        if (h.len) memcpy(r->buf + r->off, slot + IB_HDR, h.len);
        c->arrived[k] = 0;
        c->consumed++;
        r->off += h.len;
        r->posted++;
        n++;
        if (r->posted == r->nchunks) {
            c->rq_head = r->next;
            if (!c->rq_head) c->rq_tail = NULL;
            rl_ib_finish_req(c, r);
        }
    }
    if (c->state == ST_READY && !c->peer_closed && c->consumed != c->credits_sent &&
        send_ctrl(c, IMM_CREDIT, (uint32_t)c->consumed) == 0)
        c->credits_sent = c->consumed;
    return n;
}

static int conn_progress(struct ib_conn *c) {
    if (c->state != ST_READY) return 0;
    return c->is_send ? rl_ib_post_sends(c) : rl_ib_consume(c);
}

static void handle_wc(struct ib_conn *c, const struct ibv_wc *wc) {
    uint32_t kind = (uint32_t)(wc->wr_id >> 32), idx = (uint32_t)wc->wr_id;
    if (kind == WR_CTRL) c->ctrl_inflight--;
    if (wc->status != IBV_WC_SUCCESS) {
        if (c->state == ST_BROKEN || (c->peer_closed && kind != WR_DATA)) return; /* flushed, or the peer left */
        rl_ib_conn_break(c, RINGLET_ERR_REMOTE, "%s rank %d: work completion error: %s (status %d, vendor error 0x%x)",
                   rl_ib_dir_str(c), c->peer, c->ctx->v->wc_status_str(wc->status), (int)wc->status, wc->vendor_err);
        return;
    }
    if (kind == WR_DATA) {
        if (idx >= (uint32_t)c->nslots) return;
        struct ib_req *r = c->slot_req[idx];
        c->slot_req[idx] = NULL;
        if (r && !r->finished && ++r->done == r->nchunks) rl_ib_finish_req(c, r);
        return;
    }
    if (kind != WR_RECV) return;
    int e = idx < (uint32_t)c->nqps && c->state != ST_BROKEN ? rl_ib_post_recvs(c, (int)idx, 1) : 0;
    if (e) { /* one receive fewer on the queue pair each time: the peer's sends would end waiting */
        rl_ib_conn_break(c, RINGLET_ERR_SYSTEM, "%s rank %d: ibv_post_recv failed: %s", rl_ib_dir_str(c), c->peer,
                         strerror(e));
        return;
    }
    if (c->state == ST_BROKEN) return;
    uint32_t imm = ntohl(wc->imm_data), type = imm >> 30, val = imm & IB_IMM_MASK;
    if (!c->is_send && wc->opcode == IBV_WC_RECV_RDMA_WITH_IMM && type == IMM_DATA) {
        uint64_t seq = c->consumed + ((val - (uint32_t)c->consumed) & IB_IMM_MASK);
        if (seq - c->consumed >= (uint64_t)c->nslots || c->arrived[seq % (uint64_t)c->nslots]) {
            rl_ib_conn_break(c, RINGLET_ERR_REMOTE, "receive from rank %d: protocol error (chunk %llu beyond the credits)",
                       c->peer, (unsigned long long)seq);
            return;
        }
        c->arrived[seq % (uint64_t)c->nslots] = 1;
    } else if (c->is_send && wc->opcode == IBV_WC_RECV && (wc->wc_flags & IBV_WC_WITH_IMM) && type == IMM_CREDIT) {
        uint64_t cr = c->credits + ((val - (uint32_t)c->credits) & IB_IMM_MASK);
        if (cr > c->seq) {
            rl_ib_conn_break(c, RINGLET_ERR_REMOTE, "send to rank %d: protocol error (credit for chunks never sent)",
                       c->peer);
            return;
        }
        c->credits = cr;
    } else if (c->is_send && wc->opcode == IBV_WC_RECV && type == IMM_ERROR) {
        rl_ib_conn_break(c, val == RINGLET_ERR_INVALID_USAGE ? RINGLET_ERR_INVALID_USAGE : RINGLET_ERR_REMOTE,
                   "send to rank %d: rank %d refused a message: its receive was posted with a different length or for "
                   "another call",
                   c->peer, c->peer);
    } else {
        rl_ib_conn_break(c, RINGLET_ERR_REMOTE, "%s rank %d: protocol error (unexpected completion, opcode %d)", rl_ib_dir_str(c),
                   c->peer, (int)wc->opcode);
    }
}

int rl_ib_drain_cq(struct ib_conn *c) {
    struct ibv_wc wc[16];
    int total = 0, n;
    if (!c->cq) return 0;
    while ((n = ibv_poll_cq(c->cq, 16, wc)) > 0) {
        for (int i = 0; i < n; i++) handle_wc(c, &wc[i]);
        total += n;
        conn_progress(c);
    }
    if (n < 0 && c->state != ST_BROKEN)
        rl_ib_conn_break(c, RINGLET_ERR_REMOTE, "%s rank %d: polling the completion queue failed", rl_ib_dir_str(c), c->peer);
    return total + conn_progress(c);
}

static ringlet_result_t ib_post(struct ib_conn *c, void *buf, size_t len, struct ib_mr *m, rl_treq *t, int is_send) {
    struct ib_req *r = (struct ib_req *)t->priv;
    memset(r, 0, sizeof *r);
    r->t = t;
    r->buf = buf;
    r->len = len;
    r->nchunks = nchunks_of(len, c->slot_size);
    if (m && is_send && (char *)buf >= m->addr && (char *)buf + len <= m->addr + m->len) r->mr = m->mr;
    rl_treq_start(t, len, 1);
    pthread_mutex_lock(&c->mu);
    if (is_send != c->is_send) {
        rl_treq_fail(t, RINGLET_ERR_INTERNAL, "ib: %s posted on a %s connection (rank %d)", is_send ? "send" : "receive",
                     c->is_send ? "send" : "receive", c->peer);
        rl_ib_finish_req(c, r);
    } else if (c->state == ST_BROKEN) {
        rl_ib_fail_req(c, r, c->why_code, c->why);
    } else if (atomic_load(c->ctx->in.stop)) {
        rl_ib_conn_break(c, RINGLET_ERR_REMOTE, "%s rank %d: stopped (communicator failed or aborted)", rl_ib_dir_str(c), c->peer);
        rl_ib_fail_req(c, r, c->why_code, c->why);
    } else if (is_send) {
        if (c->sq_tail) c->sq_tail->next = r;
        else c->sq_head = r;
        c->sq_tail = r;
        rl_ib_post_sends(c);
    } else {
        if (c->rq_tail) c->rq_tail->next = r;
        else c->rq_head = r;
        c->rq_tail = r;
        rl_ib_consume(c);
    }
    pthread_mutex_unlock(&c->mu);
    return RINGLET_SUCCESS;
}

ringlet_result_t rl_ib_isend(void *conn, const void *buf, size_t len, void *mr, rl_treq *req) {
    return ib_post(conn, (void *)buf, len, mr, req, 1);
}

ringlet_result_t rl_ib_irecv(void *conn, void *buf, size_t len, void *mr, rl_treq *req) {
    return ib_post(conn, buf, len, mr, req, 0);
}

#endif /* RL_HAVE_VERBS */
