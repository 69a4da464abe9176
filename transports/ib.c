/* InfiniBand / RoCE verbs transport.
 *
 * Loading. libibverbs is dlopen'd at init (ib_verbs.c); without it, or without an
 * active port, init fails with a message and the core goes on with TCP.
 *
 * Connections. A connection is one direction to one peer over RINGLET_IB_QPS_PER_PEER
 * reliable-connected queue pairs that share one completion queue. Queue pairs are
 * connected with an exchange over a TCP socket of the transport's own listener (its
 * address is in the blob, with the port's GID/LID): the connecting side creates its
 * QPs, sends a hello (its QP numbers, GID, LID, MTU, FIFO geometry, a nonce and an
 * HMAC-SHA256 of all that under the job secret) and returns at once with a pending
 * connection; the accepting side reads the hello, creates its QPs and FIFO, brings its
 * QPs to RTS and answers (its QP numbers, the FIFO's address and rkey, the nonce echoed,
 * an HMAC). The progress thread reads that answer and brings the connector's QPs up;
 * sends posted meanwhile wait in the queue (bounded by RINGLET_TIMEOUT). The socket
 * stays open afterwards: its end tells that the peer process is gone.
 *
 * Data. The receiver owns a FIFO of RINGLET_IB_NSLOTS slots of RINGLET_IB_SLOT_SIZE
 * bytes (+ a 64-byte header) in memory registered once; the sender owns a staging
 * area of the same shape, also registered once. A message is cut into chunks of at
 * most one slot (a zero-length message is one empty chunk); chunk number n of the
 * connection goes to slot n % nslots, on QP n % nqps, as one RDMA WRITE WITH IMMEDIATE
 * of header + data (the immediate carries n, so the receiver learns that slot n is
 * full). The header carries the message's total length, the chunk's offset and n: a
 * receive posted with another length fails ("the peer sent X bytes, this rank
 * expected Y"), the sender is told, and the connection is closed for further use.
 * The receiver copies each chunk out of its slot into the posted buffer and returns
 * credits (the count of chunks consumed, cumulative) with SEND WITH IMMEDIATE; the
 * sender writes chunk n only when the receiver has consumed chunk n - nslots, so up to
 * nslots chunks are in flight. A send whose buffer was registered with reg_mr is
 * written straight from that buffer (no copy into the staging area); receives always
 * land in the FIFO (no receive-side zero-copy: the core posts no registered buffers).
 *
 * Progress. One thread per context polls the completion queues, finishes requests and
 * calls notify; when idle it arms the CQs and sleeps in poll() on the completion
 * channel, the async-event fd and the handshake sockets, 100 ms at most, so that it
 * sees *stop. isend/irecv post what they can at once in the caller's thread.
 *
 * Failures (each fails the requests concerned, naming the peer, and the connection):
 * a completion with an error status (retry count exceeded, remote access error, ...);
 * an async QP/CQ error event; the peer's socket closing (its process died or it
 * closed the connection); no credits from the receiver for RINGLET_TIMEOUT seconds;
 * *stop. RINGLET_IB_TIMEOUT and RINGLET_IB_RETRY_CNT set the QPs' ack timeout and
 * retry count.
 *
 * GPU memory: see rl_ib_dmabuf_available() in ib_verbs.h and transports/IB.md; reg_mr
 * here registers host memory only.
 */
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "ib.h"
#include "ib_verbs.h"
#include "log.h"
#include "sha256.h"
#include "sock.h"
#include "transport.h"
#include "util.h"

/* ---- the exchange and the chunk header (ib.h): no verbs needed ---- */

int rl_ib_parse_blob(const void *blob, size_t bloblen, rl_ib_blob *b) {
    if (bloblen != sizeof *b) return RL_IB_BAD;
    memcpy(b, blob, sizeof *b);
    if (b->magic != RL_IB_MAGIC || b->version != RL_IB_VERSION) return RL_IB_VERSION_MISMATCH;
    /* The handshake listener: an IP address, nothing else connect would take. */
    return b->addr.ss_family == AF_INET || b->addr.ss_family == AF_INET6 ? RL_IB_OK : RL_IB_BAD;
}

void rl_ib_hello_mac(const uint8_t secret[32], const rl_ib_hello *h, uint8_t out[32]) {
    rl_hmac_sha256(secret, 32, h, offsetof(rl_ib_hello, mac), out);
}

void rl_ib_reply_mac(const uint8_t secret[32], const rl_ib_reply *r, uint8_t out[32]) {
    rl_hmac_sha256(secret, 32, r, offsetof(rl_ib_reply, mac), out);
}

int rl_ib_check_hello(const uint8_t secret[32], const rl_ib_hello *h, int rank, int nranks) {
    uint8_t mac[32];
    rl_ib_hello_mac(secret, h, mac);
    if (h->magic != RL_IB_MAGIC || h->version != RL_IB_VERSION || !rl_ct_equal(mac, h->mac, 32) || h->to != rank ||
        h->from < 0 || h->from >= nranks || h->nqps < 1 || h->nqps > RL_IB_MAX_QPS || h->nslots < 2 ||
        h->nslots > 1024 || h->slot_size < 64 || h->slot_size > (64u << 20) || h->slot_size % 64)
        return RL_IB_BAD;
    return RL_IB_OK;
}

int rl_ib_check_reply(const uint8_t secret[32], const rl_ib_reply *r, int peer, int rank, const uint8_t nonce[16],
                      int nqps, ringlet_result_t *code) {
    uint8_t mac[32];
    rl_ib_reply_mac(secret, r, mac);
    if (r->magic != RL_IB_MAGIC || r->version != RL_IB_VERSION || !rl_ct_equal(mac, r->mac, 32) || r->from != peer ||
        r->to != rank || !rl_ct_equal(r->nonce, nonce, 16))
        return RL_IB_BAD;
    if (r->status != RINGLET_SUCCESS) {
        /* Its own error code, passed on; one this build does not know (a newer peer) is
         * a remote error, and never "in progress". */
        int known = r->status > 0 && r->status < RINGLET_NUM_RESULTS && r->status != RINGLET_IN_PROGRESS;
        *code = known ? (ringlet_result_t)r->status : RINGLET_ERR_REMOTE;
        return RL_IB_REFUSED;
    }
    return r->nqps != (uint32_t)nqps ? RL_IB_NQPS : RL_IB_OK;
}

int rl_ib_check_chunk(const rl_ib_chunk_hdr *h, uint64_t seq, size_t len, size_t off, size_t slot_size) {
    size_t want = len - off < slot_size ? len - off : slot_size;
    if (h->magic != RL_IB_CHUNK_MAGIC || h->seq != seq) return RL_IB_BAD;
    if (h->total != len) return RL_IB_LENGTH;
    if (h->off != off || h->len != want) return RL_IB_PLACE;
    return RL_IB_OK;
}

#ifndef RL_HAVE_VERBS

static ringlet_result_t ib_init_stub(const rl_transport_init *in, void **ctx, void *blob, size_t *bloblen, char *err) {
    (void)in, (void)blob;
    *ctx = NULL;
    *bloblen = 0;
    snprintf(err, RL_ERR_MAX, "ib: this build has no verbs support (<infiniband/verbs.h> was missing at build time)");
    return RINGLET_ERR_SYSTEM;
}

const rl_transport_ops rl_transport_ib = {.name = "ib", .init = ib_init_stub};

#else

#define IB_MAGIC RL_IB_MAGIC
#define IB_VERSION RL_IB_VERSION
#define IB_MAX_QPS RL_IB_MAX_QPS
#define IB_HDR 64u          /* header bytes at the start of every slot */
#define IB_CTRL_MAX 4       /* control messages (credits) in flight per connection */
#define IB_CHUNK_MAGIC RL_IB_CHUNK_MAGIC
#define IB_IMM_MASK 0x3fffffffu
enum { IMM_DATA = 0, IMM_CREDIT = 1, IMM_ERROR = 2 };
#define IB_IMM(type, v) (((uint32_t)(type) << 30) | ((uint32_t)(v)&IB_IMM_MASK))
enum { WR_RECV = 1, WR_DATA = 2, WR_CTRL = 3 };
#define WRID(kind, idx) (((uint64_t)(kind) << 32) | (uint32_t)(idx))

enum { ST_PENDING = 0, ST_READY = 1, ST_BROKEN = 2 };

_Static_assert(sizeof(rl_ib_chunk_hdr) <= IB_HDR, "chunk header too large");

/* One posted message, inside rl_treq.priv. */
struct ib_req {
    struct ib_req *next;
    rl_treq *t;
    char *buf;
    size_t len;
    size_t off;        /* bytes written (send) or landed (receive) so far */
    uint64_t nchunks;  /* max(1, ceil(len / slot)) */
    uint64_t posted;   /* send: chunks written; receive: chunks landed */
    uint64_t done;     /* send: chunks completed */
    struct ibv_mr *mr; /* send: the caller's registration covering buf, or NULL */
    int finished;
};

struct ib_mr {
    struct ibv_mr *mr;
    char *addr;
    size_t len;
};

struct ib_ctx;

struct ib_conn {
    struct ib_ctx *ctx;
    struct ib_conn *next; /* ctx->conns */
    int peer, is_send;
    pthread_mutex_t mu;
    int state;
    ringlet_result_t why_code;
    char why[RL_ERR_MAX];
    int fd;          /* handshake socket: the reply (pending), then end-of-file when the peer goes */
    int peer_closed; /* the socket ended */
    rl_ib_hello hello;
    rl_ib_reply reply;
    size_t reply_got;

    struct ibv_cq *cq;
    struct ibv_qp *qp[IB_MAX_QPS];
    int nqps, nslots, rq_depth;
    size_t slot_size, stride;
    char *buf; /* FIFO (receive) or staging (send): nslots * stride */
    struct ibv_mr *mr;
    uint64_t raddr; /* send: the receiver's FIFO */
    uint32_t rkey;

    /* send */
    struct ib_req *sq_head, *sq_tail; /* not yet completely written */
    struct ib_req **slot_req;         /* [nslots]: request whose chunk uses the staging slot */
    uint64_t seq;                     /* chunks written */
    uint64_t credits;                 /* chunks the receiver consumed */
    double wait_since;                /* queued work that cannot move since then (0: none) */

    /* receive */
    struct ib_req *rq_head, *rq_tail;
    uint8_t *arrived; /* [nslots] */
    uint64_t consumed, credits_sent;
    int ctrl_inflight;
};

struct ib_stash {
    int fd;
    rl_ib_hello h;
};

struct ib_ctx {
    rl_transport_init in;
    uint8_t secret[32];
    const rl_ibv *v;
    rl_ib_port port;
    struct ibv_pd *pd;
    struct ibv_comp_channel *ch;
    int lfd;
    struct sockaddr_storage addr;
    int nqps, nslots;
    size_t slot_size;
    int ib_timeout, retry_cnt, sl, tc;
    double spin_s;

    pthread_mutex_t mu; /* conns, and the life of every verbs object the thread touches */
    struct ib_conn *conns;
    struct ib_stash *stash; /* [nranks]: hellos accepted, not yet claimed */
    pthread_t thread;
    int thread_started, quit, stop_seen;
};

static const char *dir_str(const struct ib_conn *c) { return c->is_send ? "send to" : "receive from"; }

static void notify(struct ib_conn *c) {
    if (c->ctx->in.notify) c->ctx->in.notify(c->ctx->in.notify_arg);
}

static void finish_req(struct ib_conn *c, struct ib_req *r) {
    if (r->finished) return;
    r->finished = 1;
    rl_treq_part_done(r->t);
    notify(c);
}

static void fail_req(struct ib_conn *c, struct ib_req *r, ringlet_result_t code, const char *msg) {
    if (r->finished) return;
    rl_treq_fail(r->t, code, "%s", msg);
    finish_req(c, r);
}

/* Marks the connection unusable (first reason wins) and fails every request on it.
 * c->mu held. */
static void conn_break(struct ib_conn *c, ringlet_result_t code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void conn_break(struct ib_conn *c, ringlet_result_t code, const char *fmt, ...) {
    if (c->state != ST_BROKEN) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(c->why, sizeof c->why, fmt, ap);
        va_end(ap);
        c->why_code = code;
        c->state = ST_BROKEN;
        RL_INFO(c->ctx->in.rank, "ib: %s", c->why);
    }
    for (struct ib_req *r = c->sq_head; r; r = r->next) fail_req(c, r, c->why_code, c->why);
    c->sq_head = c->sq_tail = NULL;
    if (c->slot_req)
        for (int k = 0; k < c->nslots; k++)
            if (c->slot_req[k]) {
                fail_req(c, c->slot_req[k], c->why_code, c->why);
                c->slot_req[k] = NULL;
            }
    for (struct ib_req *r = c->rq_head; r; r = r->next) fail_req(c, r, c->why_code, c->why);
    c->rq_head = c->rq_tail = NULL;
    c->wait_since = 0;
}

/* ---- verbs plumbing ---- */

static int post_recvs(struct ib_conn *c, int qi, int n) {
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

static int send_ctrl(struct ib_conn *c, int type, uint32_t val) {
    if (c->ctrl_inflight >= IB_CTRL_MAX) return -1;
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

static void free_conn_verbs(struct ib_conn *c) {
    const rl_ibv *v = c->ctx->v;
    for (int i = 0; i < IB_MAX_QPS; i++)
        if (c->qp[i]) v->destroy_qp(c->qp[i]), c->qp[i] = NULL;
    if (c->cq) v->destroy_cq(c->cq), c->cq = NULL;
    if (c->mr) v->dereg_mr(c->mr), c->mr = NULL;
    free(c->buf), free(c->slot_req), free(c->arrived);
    c->buf = NULL, c->slot_req = NULL, c->arrived = NULL;
    if (c->fd >= 0) close(c->fd), c->fd = -1;
}

/* A connection with its FIFO or staging area, CQ and QPs in INIT with receives posted. */
static struct ib_conn *conn_create(struct ib_ctx *x, int peer, int is_send, int nqps, int nslots, size_t slot_size,
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
    size_t bytes = c->stride * (size_t)nslots;
    if (posix_memalign((void **)&c->buf, 4096, bytes) != 0) {
        c->buf = NULL;
        snprintf(err, RL_ERR_MAX, "ib: out of memory for %d slots of %zu bytes", nslots, slot_size);
        goto fail;
    }
    memset(c->buf, 0, bytes);
    c->mr = v->reg_mr(x->pd, c->buf, bytes, IBV_ACCESS_LOCAL_WRITE | (is_send ? 0 : IBV_ACCESS_REMOTE_WRITE));
    if (!c->mr) {
        snprintf(err, RL_ERR_MAX, "ib: cannot register %zu bytes for rank %d: %s (locked-memory limit, ulimit -l?)",
                 bytes, peer, strerror(errno));
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
        if (!e) e = post_recvs(c, i, rq);
        if (e) {
            snprintf(err, RL_ERR_MAX, "ib: cannot initialise queue pair %d for rank %d: %s", i, peer, strerror(e));
            goto fail;
        }
    }
    return c;
fail:
    free_conn_verbs(c);
    pthread_mutex_destroy(&c->mu);
    free(c);
    return NULL;
}

/* RTR then RTS against the peer's QPs. */
static int conn_connect_qps(struct ib_conn *c, const uint32_t *qpn, const uint8_t *gid, uint32_t lid, uint32_t mtu,
                            char *err) {
    struct ib_ctx *x = c->ctx;
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
        if (x->port.gid_index >= 0) {
            a.ah_attr.is_global = 1;
            memcpy(a.ah_attr.grh.dgid.raw, gid, 16);
            a.ah_attr.grh.sgid_index = (uint8_t)x->port.gid_index;
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

/* ---- data path (c->mu held) ---- */

static uint64_t nchunks_of(size_t len, size_t slot) { return len ? (len + slot - 1) / slot : 1; }

/* Writes as many queued chunks as credits and staging slots allow. */
static int post_sends(struct ib_conn *c) {
    int n = 0;
    while (c->state == ST_READY && c->sq_head) {
        struct ib_req *r = c->sq_head;
        uint64_t seq = c->seq;
        if (seq - c->credits >= (uint64_t)c->nslots) break; /* the receiver's slot is still full */
        int k = (int)(seq % (uint64_t)c->nslots);
        if (c->slot_req[k]) break; /* our staging slot is still being written */
        size_t len = r->len - r->off < c->slot_size ? r->len - r->off : c->slot_size;
        char *slot = c->buf + (size_t)k * c->stride;
        rl_ib_chunk_hdr h = {r->len, r->off, seq, (uint32_t)len, IB_CHUNK_MAGIC};
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
            conn_break(c, RINGLET_ERR_SYSTEM, "send to rank %d: ibv_post_send failed: %s", c->peer, strerror(e));
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

/* Copies landed chunks into posted receives, in order; returns credits. */
static int consume(struct ib_conn *c) {
    int n = 0;
    while (c->state == ST_READY && c->rq_head) {
        struct ib_req *r = c->rq_head;
        int k = (int)(c->consumed % (uint64_t)c->nslots);
        if (!c->arrived[k]) {
            if (c->peer_closed)
                conn_break(c, RINGLET_ERR_REMOTE,
                           "receive from rank %d: rank %d closed the connection (it exited or aborted) before sending "
                           "the message",
                           c->peer, c->peer);
            break;
        }
        const char *slot = c->buf + (size_t)k * c->stride;
        rl_ib_chunk_hdr h;
        memcpy(&h, slot, sizeof h);
        int verdict = rl_ib_check_chunk(&h, c->consumed, r->len, r->off, c->slot_size);
        if (verdict == RL_IB_BAD) {
            conn_break(c, RINGLET_ERR_REMOTE, "receive from rank %d: corrupt chunk header (chunk %llu)", c->peer,
                       (unsigned long long)c->consumed);
            break;
        }
        if (verdict == RL_IB_LENGTH) {
            rl_treq_fail(r->t, RINGLET_ERR_INVALID_USAGE,
                         "receive from rank %d: the peer sent a message of %llu bytes, this rank expected %zu", c->peer,
                         (unsigned long long)h.total, r->len);
            send_ctrl(c, IMM_ERROR, RINGLET_ERR_INVALID_USAGE);
            conn_break(c, RINGLET_ERR_INVALID_USAGE,
                       "receive from rank %d: message length mismatch (the peer sent %llu bytes, this rank expected "
                       "%zu); connection closed",
                       c->peer, (unsigned long long)h.total, r->len);
            break;
        }
        if (verdict == RL_IB_PLACE) {
            conn_break(c, RINGLET_ERR_REMOTE, "receive from rank %d: chunk out of place (offset %llu, %u bytes)",
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
            finish_req(c, r);
        }
    }
    if (c->state == ST_READY && !c->peer_closed && c->consumed != c->credits_sent &&
        send_ctrl(c, IMM_CREDIT, (uint32_t)c->consumed) == 0)
        c->credits_sent = c->consumed;
    return n;
}

static int conn_progress(struct ib_conn *c) {
    if (c->state != ST_READY) return 0;
    return c->is_send ? post_sends(c) : consume(c);
}

static void handle_wc(struct ib_conn *c, const struct ibv_wc *wc) {
    uint32_t kind = (uint32_t)(wc->wr_id >> 32), idx = (uint32_t)wc->wr_id;
    if (kind == WR_CTRL) c->ctrl_inflight--;
    if (wc->status != IBV_WC_SUCCESS) {
        if (c->state == ST_BROKEN || (c->peer_closed && kind != WR_DATA)) return; /* flushed, or the peer left */
        conn_break(c, RINGLET_ERR_REMOTE, "%s rank %d: work completion error: %s (status %d, vendor error 0x%x)",
                   dir_str(c), c->peer, c->ctx->v->wc_status_str(wc->status), (int)wc->status, wc->vendor_err);
        return;
    }
    if (kind == WR_DATA) {
        if (idx >= (uint32_t)c->nslots) return;
        struct ib_req *r = c->slot_req[idx];
        c->slot_req[idx] = NULL;
        if (r && !r->finished && ++r->done == r->nchunks) finish_req(c, r);
        return;
    }
    if (kind != WR_RECV) return;
    if (idx < (uint32_t)c->nqps && c->state != ST_BROKEN) post_recvs(c, (int)idx, 1);
    if (c->state == ST_BROKEN) return;
    uint32_t imm = ntohl(wc->imm_data), type = imm >> 30, val = imm & IB_IMM_MASK;
    if (!c->is_send && wc->opcode == IBV_WC_RECV_RDMA_WITH_IMM && type == IMM_DATA) {
        uint64_t seq = c->consumed + ((val - (uint32_t)c->consumed) & IB_IMM_MASK);
        if (seq - c->consumed >= (uint64_t)c->nslots || c->arrived[seq % (uint64_t)c->nslots]) {
            conn_break(c, RINGLET_ERR_REMOTE, "receive from rank %d: protocol error (chunk %llu beyond the credits)",
                       c->peer, (unsigned long long)seq);
            return;
        }
        c->arrived[seq % (uint64_t)c->nslots] = 1;
    } else if (c->is_send && wc->opcode == IBV_WC_RECV && (wc->wc_flags & IBV_WC_WITH_IMM) && type == IMM_CREDIT) {
        uint64_t cr = c->credits + ((val - (uint32_t)c->credits) & IB_IMM_MASK);
        if (cr > c->seq) {
            conn_break(c, RINGLET_ERR_REMOTE, "send to rank %d: protocol error (credit for chunks never sent)",
                       c->peer);
            return;
        }
        c->credits = cr;
    } else if (c->is_send && wc->opcode == IBV_WC_RECV && type == IMM_ERROR) {
        conn_break(c, val == RINGLET_ERR_INVALID_USAGE ? RINGLET_ERR_INVALID_USAGE : RINGLET_ERR_REMOTE,
                   "send to rank %d: rank %d refused a message: its receive was posted with a different length",
                   c->peer, c->peer);
    } else {
        conn_break(c, RINGLET_ERR_REMOTE, "%s rank %d: protocol error (unexpected completion, opcode %d)", dir_str(c),
                   c->peer, (int)wc->opcode);
    }
}

/* Polls the CQ dry and moves the connection on. c->mu held. */
static int drain_cq(struct ib_conn *c) {
    struct ibv_wc wc[16];
    int total = 0, n;
    if (!c->cq) return 0;
    while ((n = ibv_poll_cq(c->cq, 16, wc)) > 0) {
        for (int i = 0; i < n; i++) handle_wc(c, &wc[i]);
        total += n;
        conn_progress(c);
    }
    if (n < 0 && c->state != ST_BROKEN)
        conn_break(c, RINGLET_ERR_REMOTE, "%s rank %d: polling the completion queue failed", dir_str(c), c->peer);
    return total + conn_progress(c);
}

/* ---- handshake ---- */

/* The connector's side, once the reply is in: QPs to RTS. c->mu held. */
static void finish_connect(struct ib_conn *c) {
    struct ib_ctx *x = c->ctx;
    rl_ib_reply *r = &c->reply;
    ringlet_result_t code = RINGLET_ERR_REMOTE;
    int verdict = rl_ib_check_reply(x->secret, r, c->peer, x->in.rank, c->hello.nonce, c->nqps, &code);
    if (verdict == RL_IB_BAD) {
        conn_break(c, RINGLET_ERR_REMOTE, "send to rank %d: the IB handshake reply did not authenticate", c->peer);
        return;
    }
    if (verdict == RL_IB_REFUSED) {
        r->msg[sizeof r->msg - 1] = 0;
        conn_break(c, code, "send to rank %d: rank %d refused the IB connection: %s", c->peer, c->peer, r->msg);
        return;
    }
    if (verdict == RL_IB_NQPS) {
        conn_break(c, RINGLET_ERR_REMOTE, "send to rank %d: IB handshake: %u queue pairs, wanted %d", c->peer,
                   r->nqps, c->nqps);
        return;
    }
    char err[RL_ERR_MAX];
    if (conn_connect_qps(c, r->qpn, r->gid, r->lid, r->mtu, err) != 0) {
        conn_break(c, RINGLET_ERR_SYSTEM, "send to rank %d: %s", c->peer, err);
        return;
    }
    c->raddr = r->fifo_addr;
    c->rkey = r->fifo_rkey;
    c->state = ST_READY;
    RL_TRACE(x->in.rank, "ib: connection to rank %d is up", c->peer);
    post_sends(c);
}

/* The handshake socket is readable. c->mu held. */
static void on_socket(struct ib_conn *c) {
    if (c->fd < 0) return;
    if (c->state == ST_PENDING) {
        ssize_t n = recv(c->fd, (char *)&c->reply + c->reply_got, sizeof c->reply - c->reply_got, 0);
        if (n > 0) {
            c->reply_got += (size_t)n;
            if (c->reply_got == sizeof c->reply) finish_connect(c);
            return;
        }
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return;
        close(c->fd);
        c->fd = -1;
        conn_break(c, RINGLET_ERR_REMOTE,
                   "send to rank %d: rank %d closed the IB handshake before answering (it exited, or refused the "
                   "connection: job secret?)",
                   c->peer, c->peer);
        return;
    }
    char b[64];
    ssize_t n = recv(c->fd, b, sizeof b, 0);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return;
    /* End of file (or garbage, which no genuine peer sends): the peer is gone. What it
     * wrote before leaving is already in our CQ; take it first. */
    close(c->fd);
    c->fd = -1;
    c->peer_closed = 1;
    drain_cq(c);
    if (c->is_send)
        conn_break(c, RINGLET_ERR_REMOTE, "send to rank %d: rank %d closed the connection (it exited or aborted)",
                   c->peer, c->peer);
    else
        consume(c);
}

/* ---- progress thread ---- */

static int conn_listed(struct ib_ctx *x, struct ib_conn *c) {
    for (struct ib_conn *p = x->conns; p; p = p->next)
        if (p == c) return 1;
    return 0;
}

/* x->mu held. */
static int sweep(struct ib_ctx *x) {
    int work = 0;
    double now = rl_now();
    int stop = atomic_load(x->in.stop);
    for (struct ib_conn *c = x->conns; c; c = c->next) {
        pthread_mutex_lock(&c->mu);
        work += drain_cq(c);
        if (stop && c->state != ST_BROKEN)
            conn_break(c, RINGLET_ERR_REMOTE, "%s rank %d: stopped (communicator failed or aborted)", dir_str(c),
                       c->peer);
        if (c->state != ST_BROKEN && c->wait_since > 0 && now - c->wait_since > x->in.timeout_s) {
            if (c->state == ST_PENDING)
                conn_break(c, RINGLET_ERR_TIMEOUT,
                           "send to rank %d: rank %d has not accepted the IB connection within %.0f s (RINGLET_TIMEOUT)",
                           c->peer, c->peer, x->in.timeout_s);
            else
                conn_break(c, RINGLET_ERR_TIMEOUT,
                           "send to rank %d: rank %d returned no credits for %.0f s: it stopped receiving "
                           "(RINGLET_TIMEOUT)",
                           c->peer, c->peer, x->in.timeout_s);
        }
        pthread_mutex_unlock(&c->mu);
    }
    return work;
}

static void async_events(struct ib_ctx *x) {
    struct ibv_async_event ev;
    while (x->v->get_async_event(x->port.ctx, &ev) == 0) {
        struct ib_conn *c = NULL;
        switch (ev.event_type) {
        case IBV_EVENT_QP_FATAL:
        case IBV_EVENT_QP_REQ_ERR:
        case IBV_EVENT_QP_ACCESS_ERR:
        case IBV_EVENT_PATH_MIG_ERR: c = ev.element.qp ? ev.element.qp->qp_context : NULL; break;
        case IBV_EVENT_CQ_ERR: c = ev.element.cq ? ev.element.cq->cq_context : NULL; break;
        case IBV_EVENT_PORT_ERR:
        case IBV_EVENT_DEVICE_FATAL:
            RL_WARN(x->in.rank, "ib: %s on %s port %d", x->v->event_type_str(ev.event_type), x->port.dev, x->port.port);
            if (ev.event_type == IBV_EVENT_DEVICE_FATAL)
                for (struct ib_conn *p = x->conns; p; p = p->next) {
                    pthread_mutex_lock(&p->mu);
                    conn_break(p, RINGLET_ERR_SYSTEM, "%s rank %d: %s: device fatal error", dir_str(p), p->peer,
                               x->port.dev);
                    pthread_mutex_unlock(&p->mu);
                }
            break;
        default: break;
        }
        if (c && conn_listed(x, c)) {
            pthread_mutex_lock(&c->mu);
            if (!(c->peer_closed && !c->is_send))
                conn_break(c, RINGLET_ERR_REMOTE, "%s rank %d: queue pair error: %s", dir_str(c), c->peer,
                           x->v->event_type_str(ev.event_type));
            pthread_mutex_unlock(&c->mu);
        }
        x->v->ack_async_event(&ev);
    }
}

static void *progress_main(void *arg) {
    struct ib_ctx *x = arg;
    struct pollfd *pfd = NULL;
    struct ib_conn **pconn = NULL;
    size_t cap = 0;
    pthread_mutex_lock(&x->mu);
    while (!x->quit) {
        int work = sweep(x);
        if (!work && x->spin_s > 0) {
            double until = rl_now() + x->spin_s;
            while (!work && !x->quit && rl_now() < until) {
                pthread_mutex_unlock(&x->mu);
                pthread_mutex_lock(&x->mu);
                work = sweep(x);
            }
        }
        if (!work) {
            /* Arm, then look once more: a completion between the sweep and the arming
             * would otherwise sleep until the next one. */
            for (struct ib_conn *c = x->conns; c; c = c->next)
                if (c->cq) ibv_req_notify_cq(c->cq, 0);
            work = sweep(x);
        }
        if (work) {
            pthread_mutex_unlock(&x->mu); /* let connect/accept/close in */
            pthread_mutex_lock(&x->mu);
            continue;
        }
        size_t n = 2;
        for (struct ib_conn *c = x->conns; c; c = c->next) n += c->fd >= 0;
        if (n > cap) {
            struct pollfd *np = realloc(pfd, n * sizeof *pfd);
            if (np) pfd = np;
            struct ib_conn **nc = realloc(pconn, n * sizeof *pconn);
            if (nc) pconn = nc;
            if (np && nc) cap = n;
            else n = cap; /* out of memory: watch fewer sockets this round */
        }
        size_t i = 0;
        if (cap >= 2) {
            pfd[i++] = (struct pollfd){x->ch->fd, POLLIN, 0};
            pfd[i++] = (struct pollfd){x->port.ctx->async_fd, POLLIN, 0};
            for (struct ib_conn *c = x->conns; c && i < n; c = c->next)
                if (c->fd >= 0) {
                    pconn[i] = c;
                    pfd[i++] = (struct pollfd){c->fd, POLLIN, 0};
                }
        }
        pthread_mutex_unlock(&x->mu);
        if (i) poll(pfd, (nfds_t)i, 100);
        else rl_sleep_ms(10);
        pthread_mutex_lock(&x->mu);
        if (x->quit) break;
        struct ibv_cq *cq;
        void *cqctx;
        while (x->v->get_cq_event(x->ch, &cq, &cqctx) == 0) x->v->ack_cq_events(cq, 1);
        if (i >= 2 && pfd[1].revents) async_events(x);
        for (size_t j = 2; j < i; j++) {
            if (!pfd[j].revents) continue;
            struct ib_conn *c = pconn[j];
            if (!conn_listed(x, c)) continue;
            pthread_mutex_lock(&c->mu);
            if (c->fd == pfd[j].fd) on_socket(c);
            pthread_mutex_unlock(&c->mu);
        }
    }
    pthread_mutex_unlock(&x->mu);
    free(pfd);
    free(pconn);
    return NULL;
}

/* ---- transport entry points ---- */

static void ctx_free(struct ib_ctx *x) {
    if (x->thread_started) {
        pthread_mutex_lock(&x->mu);
        x->quit = 1;
        pthread_mutex_unlock(&x->mu);
        pthread_join(x->thread, NULL);
    }
    if (x->stash) {
        for (int r = 0; r < x->in.nranks; r++)
            if (x->stash[r].fd >= 0) close(x->stash[r].fd);
        free(x->stash);
    }
    if (x->lfd >= 0) close(x->lfd);
    if (x->ch) x->v->destroy_comp_channel(x->ch);
    if (x->pd) x->v->dealloc_pd(x->pd);
    if (x->port.ctx) x->v->close_device(x->port.ctx);
    pthread_mutex_destroy(&x->mu);
    free(x);
}

static const char *mtu_str(int m) {
    static const char *s[] = {"?", "256", "512", "1024", "2048", "4096"};
    return m >= 1 && m <= 5 ? s[m] : "?";
}

static ringlet_result_t ib_init(const rl_transport_init *in, void **ctxp, void *blob, size_t *bloblen, char *err) {
    char e[400];
    *ctxp = NULL;
    *bloblen = 0;
    const rl_ibv *v = rl_ibv_load(e, sizeof e);
    if (!v) return snprintf(err, RL_ERR_MAX, "ib: %.240s", e), RINGLET_ERR_SYSTEM;
    _Static_assert(sizeof(rl_ib_blob) <= RL_BLOB_MAX, "blob too large");
    _Static_assert(sizeof(struct ib_req) <= RL_TREQ_PRIV, "request too small");
    struct ib_ctx *x = calloc(1, sizeof *x);
    if (!x) return snprintf(err, RL_ERR_MAX, "ib: out of memory"), RINGLET_ERR_SYSTEM;
    pthread_mutex_init(&x->mu, NULL);
    x->in = *in;
    x->v = v;
    x->lfd = -1;
    memcpy(x->secret, in->secret, 32);
    x->nqps = (int)rl_env_int("RINGLET_IB_QPS_PER_PEER", 1, 1, IB_MAX_QPS);
    x->nslots = (int)rl_env_int("RINGLET_IB_NSLOTS", 8, 2, 1024);
    x->slot_size = (size_t)rl_env_int("RINGLET_IB_SLOT_SIZE", 512 << 10, 4096, 64LL << 20);
    x->slot_size = (x->slot_size + 63) & ~(size_t)63;
    x->ib_timeout = (int)rl_env_int("RINGLET_IB_TIMEOUT", 18, 1, 31);
    x->retry_cnt = (int)rl_env_int("RINGLET_IB_RETRY_CNT", 7, 0, 7);
    x->sl = (int)rl_env_int("RINGLET_IB_SL", 0, 0, 15);
    x->tc = (int)rl_env_int("RINGLET_IB_TC", 0, 0, 255);
    x->spin_s = (double)rl_env_int("RINGLET_IB_SPIN_US", 0, 0, 1000000) * 1e-6;
    ringlet_result_t rc = RINGLET_ERR_SYSTEM;
    if (rl_ib_open_port(v, (const struct sockaddr_storage *)in->local_addr, &x->port, e, sizeof e) != 0) {
        snprintf(err, RL_ERR_MAX, "ib: %.240s", e);
        goto fail;
    }
    x->pd = v->alloc_pd(x->port.ctx);
    x->ch = x->pd ? v->create_comp_channel(x->port.ctx) : NULL;
    if (!x->pd || !x->ch) {
        snprintf(err, RL_ERR_MAX, "ib: %s: cannot allocate a %s: %s", x->port.dev,
                 x->pd ? "completion channel" : "protection domain", strerror(errno));
        goto fail;
    }
    if (rl_sock_set_nonblock(x->ch->fd) != 0 || rl_sock_set_nonblock(x->port.ctx->async_fd) != 0) {
        snprintf(err, RL_ERR_MAX, "ib: cannot make the event channels non-blocking");
        goto fail;
    }
    x->stash = malloc(sizeof *x->stash * (size_t)in->nranks);
    if (!x->stash) {
        snprintf(err, RL_ERR_MAX, "ib: out of memory");
        goto fail;
    }
    for (int r = 0; r < in->nranks; r++) x->stash[r].fd = -1;
    x->addr = *(const struct sockaddr_storage *)in->local_addr;
    rl_sockaddr_set_port(&x->addr, 0);
    socklen_t alen;
    int lrc = rl_sock_listen(&x->addr, &alen, &x->lfd);
    if (lrc < 0) {
        snprintf(err, RL_ERR_MAX, "ib: cannot listen for handshakes: %s", strerror(-lrc));
        goto fail;
    }
    if (pthread_create(&x->thread, NULL, progress_main, x) != 0) {
        snprintf(err, RL_ERR_MAX, "ib: cannot start the progress thread");
        goto fail;
    }
    x->thread_started = 1;

    rl_ib_blob b;
    memset(&b, 0, sizeof b);
    b.magic = IB_MAGIC;
    b.version = IB_VERSION;
    b.addr = x->addr;
    memcpy(b.gid, x->port.gid.raw, 16);
    b.lid = x->port.attr.lid;
    b.mtu = (uint32_t)x->port.attr.active_mtu;
    b.is_eth = (uint32_t)x->port.is_eth;
    b.gid_index = (uint32_t)x->port.gid_index;
    memcpy(blob, &b, sizeof b);
    *bloblen = sizeof b;
    *ctxp = x;

    char g[64];
    rl_ib_gid_str(&x->port.gid, g, sizeof g);
    if (x->port.gid_index >= 0)
        RL_INFO(in->rank, "ib: %s port %d (%s, MTU %s), GID %d %s (%s%s%s); %d QP(s) per peer, %d slots of %zu bytes",
                x->port.dev, x->port.port, x->port.is_eth ? "RoCE" : "InfiniBand", mtu_str(x->port.attr.active_mtu),
                x->port.gid_index, g, rl_ib_gid_type_str(x->port.gid_type), x->port.gid_ndev[0] ? ", " : "",
                x->port.gid_ndev, x->nqps, x->nslots, x->slot_size);
    else
        RL_INFO(in->rank, "ib: %s port %d (InfiniBand, MTU %s), LID %u; %d QP(s) per peer, %d slots of %zu bytes",
                x->port.dev, x->port.port, mtu_str(x->port.attr.active_mtu), x->port.attr.lid, x->nqps, x->nslots,
                x->slot_size);
    RL_INFO(in->rank, "ib: GPUDirect RDMA: dma-buf registration %s, nvidia-peermem %s (host memory only in this build)",
            rl_ib_dmabuf_available() ? "available" : "not available", rl_ib_peermem_loaded() ? "loaded" : "not loaded");
    return RINGLET_SUCCESS;
fail:
    ctx_free(x);
    return rc;
}

static void conn_add(struct ib_ctx *x, struct ib_conn *c) {
    pthread_mutex_lock(&x->mu);
    c->next = x->conns;
    x->conns = c;
    pthread_mutex_unlock(&x->mu);
}

static ringlet_result_t ib_connect(void *ctxp, int peer, const void *peer_blob, size_t bloblen, void **connp,
                                   char *err) {
    struct ib_ctx *x = ctxp;
    rl_ib_blob b;
    int verdict = rl_ib_parse_blob(peer_blob, bloblen, &b);
    if (verdict == RL_IB_BAD) return snprintf(err, RL_ERR_MAX, "ib: bad blob from rank %d", peer), RINGLET_ERR_INTERNAL;
    if (verdict != RL_IB_OK)
        return snprintf(err, RL_ERR_MAX, "ib: rank %d runs another IB transport version", peer), RINGLET_ERR_INVALID_USAGE;
    if ((int)b.is_eth != x->port.is_eth)
        return snprintf(err, RL_ERR_MAX, "ib: rank %d's port is %s, this rank's %s", peer,
                        b.is_eth ? "RoCE" : "InfiniBand", x->port.is_eth ? "RoCE" : "InfiniBand"),
               RINGLET_ERR_INVALID_USAGE;
    struct ib_conn *c = conn_create(x, peer, 1, x->nqps, x->nslots, x->slot_size, err);
    if (!c) return RINGLET_ERR_SYSTEM;
    double deadline = rl_now() + x->in.timeout_s;
    rl_io_t r = rl_sock_connect(&b.addr, rl_sockaddr_len(&b.addr), deadline, x->in.stop, &c->fd);
    if (r == RL_IO_OK) {
        rl_sock_tune(c->fd, 0);
        rl_ib_hello *h = &c->hello;
        memset(h, 0, sizeof *h);
        h->magic = IB_MAGIC;
        h->version = IB_VERSION;
        h->from = x->in.rank;
        h->to = peer;
        h->nqps = (uint32_t)c->nqps;
        h->nslots = (uint32_t)c->nslots;
        h->slot_size = (uint32_t)c->slot_size;
        h->mtu = (uint32_t)x->port.attr.active_mtu;
        h->lid = x->port.attr.lid;
        h->is_eth = (uint32_t)x->port.is_eth;
        memcpy(h->gid, x->port.gid.raw, 16);
        for (int i = 0; i < c->nqps; i++) h->qpn[i] = c->qp[i]->qp_num;
        rl_random_bytes(h->nonce, sizeof h->nonce);
        rl_ib_hello_mac(x->secret, h, h->mac);
        r = rl_sock_send_all(c->fd, h, sizeof *h, deadline, x->in.stop);
    }
    if (r != RL_IO_OK) {
        snprintf(err, RL_ERR_MAX, "ib: connect to rank %d failed: %s", peer, rl_io_str(r));
        free_conn_verbs(c);
        pthread_mutex_destroy(&c->mu);
        free(c);
        return r == RL_IO_TIMEOUT ? RINGLET_ERR_TIMEOUT : RINGLET_ERR_REMOTE;
    }
    c->state = ST_PENDING; /* the progress thread finishes it when the reply comes */
    conn_add(x, c);
    *connp = c;
    return RINGLET_SUCCESS;
}

/* Takes one connection off the listener and files its hello under the sender's rank
 * if it is genuine; strangers and garbage are closed and logged. */
static void accept_one(struct ib_ctx *x, int fd) {
    rl_ib_hello h;
    rl_io_t r = rl_sock_recv_all(fd, &h, sizeof h, rl_now() + 5.0, x->in.stop);
    if (r != RL_IO_OK || rl_ib_check_hello(x->secret, &h, x->in.rank, x->in.nranks) != RL_IB_OK) {
        RL_WARN(x->in.rank, "ib: refused a handshake that did not authenticate (%s)",
                r == RL_IO_OK ? "bad hello" : rl_io_str(r));
        close(fd);
        return;
    }
    if (x->stash[h.from].fd >= 0) {
        RL_WARN(x->in.rank, "ib: duplicate connection from rank %d refused", h.from);
        close(fd);
        return;
    }
    rl_sock_tune(fd, 0);
    x->stash[h.from].fd = fd;
    x->stash[h.from].h = h;
}

static ringlet_result_t ib_accept(void *ctxp, int peer, void **connp, char *err) {
    struct ib_ctx *x = ctxp;
    double deadline = rl_now() + x->in.timeout_s;
    while (x->stash[peer].fd < 0) {
        int fd;
        rl_io_t r = rl_sock_accept(x->lfd, deadline, x->in.stop, &fd);
        if (r != RL_IO_OK) {
            snprintf(err, RL_ERR_MAX, "ib: waiting for rank %d to connect: %s", peer, rl_io_str(r));
            return r == RL_IO_TIMEOUT ? RINGLET_ERR_TIMEOUT : RINGLET_ERR_REMOTE;
        }
        accept_one(x, fd);
    }
    int fd = x->stash[peer].fd;
    rl_ib_hello h = x->stash[peer].h;
    x->stash[peer].fd = -1;

    rl_ib_reply rep;
    memset(&rep, 0, sizeof rep);
    rep.magic = IB_MAGIC;
    rep.version = IB_VERSION;
    rep.from = x->in.rank;
    rep.to = peer;
    memcpy(rep.nonce, h.nonce, 16);
    rep.nqps = h.nqps;
    rep.mtu = (uint32_t)x->port.attr.active_mtu;
    rep.lid = x->port.attr.lid;
    memcpy(rep.gid, x->port.gid.raw, 16);
    ringlet_result_t rc = RINGLET_SUCCESS;
    struct ib_conn *c = NULL;
    if ((int)h.is_eth != x->port.is_eth) {
        rc = RINGLET_ERR_INVALID_USAGE;
        snprintf(err, RL_ERR_MAX, "ib: rank %d's port is %s, this rank's %s", peer, h.is_eth ? "RoCE" : "InfiniBand",
                 x->port.is_eth ? "RoCE" : "InfiniBand");
    } else {
        c = conn_create(x, peer, 0, (int)h.nqps, (int)h.nslots, h.slot_size, err);
        if (!c) rc = RINGLET_ERR_SYSTEM;
        else if (conn_connect_qps(c, h.qpn, h.gid, h.lid, h.mtu, err) != 0) rc = RINGLET_ERR_SYSTEM;
    }
    if (rc == RINGLET_SUCCESS) {
        for (int i = 0; i < c->nqps; i++) rep.qpn[i] = c->qp[i]->qp_num;
        rep.fifo_addr = (uintptr_t)c->buf;
        rep.fifo_rkey = c->mr->rkey;
    } else {
        rep.status = rc;
        snprintf(rep.msg, sizeof rep.msg, "%s", err);
    }
    rl_ib_reply_mac(x->secret, &rep, rep.mac);
    rl_io_t r = rl_sock_send_all(fd, &rep, sizeof rep, deadline, x->in.stop);
    if (rc == RINGLET_SUCCESS && r != RL_IO_OK) {
        rc = r == RL_IO_TIMEOUT ? RINGLET_ERR_TIMEOUT : RINGLET_ERR_REMOTE;
        snprintf(err, RL_ERR_MAX, "ib: answering rank %d's handshake failed: %s", peer, rl_io_str(r));
    }
    if (rc != RINGLET_SUCCESS) {
        close(fd);
        if (c) {
            free_conn_verbs(c);
            pthread_mutex_destroy(&c->mu);
            free(c);
        }
        return rc;
    }
    c->fd = fd;
    c->state = ST_READY;
    conn_add(x, c);
    *connp = c;
    return RINGLET_SUCCESS;
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
        finish_req(c, r);
    } else if (c->state == ST_BROKEN) {
        fail_req(c, r, c->why_code, c->why);
    } else if (atomic_load(c->ctx->in.stop)) {
        conn_break(c, RINGLET_ERR_REMOTE, "%s rank %d: stopped (communicator failed or aborted)", dir_str(c), c->peer);
        fail_req(c, r, c->why_code, c->why);
    } else if (is_send) {
        if (c->sq_tail) c->sq_tail->next = r;
        else c->sq_head = r;
        c->sq_tail = r;
        post_sends(c);
    } else {
        if (c->rq_tail) c->rq_tail->next = r;
        else c->rq_head = r;
        c->rq_tail = r;
        consume(c);
    }
    pthread_mutex_unlock(&c->mu);
    return RINGLET_SUCCESS;
}

static ringlet_result_t ib_isend(void *conn, const void *buf, size_t len, void *mr, rl_treq *req) {
    return ib_post(conn, (void *)buf, len, mr, req, 1);
}

static ringlet_result_t ib_irecv(void *conn, void *buf, size_t len, void *mr, rl_treq *req) {
    return ib_post(conn, buf, len, mr, req, 0);
}

static ringlet_result_t ib_reg_mr(void *ctxp, void *buf, size_t len, void **mrp, char *err) {
    struct ib_ctx *x = ctxp;
    struct ib_mr *m = calloc(1, sizeof *m);
    if (!m) return snprintf(err, RL_ERR_MAX, "ib: out of memory"), RINGLET_ERR_SYSTEM;
    m->mr = x->v->reg_mr(x->pd, buf, len,
                         IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ);
    if (!m->mr) {
        snprintf(err, RL_ERR_MAX, "ib: cannot register %zu bytes at %p: %s (locked-memory limit, ulimit -l?)", len, buf,
                 strerror(errno));
        free(m);
        return RINGLET_ERR_SYSTEM;
    }
    m->addr = buf;
    m->len = len;
    *mrp = m;
    return RINGLET_SUCCESS;
}

static void ib_dereg_mr(void *ctxp, void *mrp) {
    struct ib_ctx *x = ctxp;
    struct ib_mr *m = mrp;
    if (!m) return;
    x->v->dereg_mr(m->mr);
    free(m);
}

static void ib_close(void *connp) {
    struct ib_conn *c = connp;
    if (!c) return;
    struct ib_ctx *x = c->ctx;
    pthread_mutex_lock(&x->mu);
    for (struct ib_conn **pp = &x->conns; *pp; pp = &(*pp)->next)
        if (*pp == c) {
            *pp = c->next;
            break;
        }
    pthread_mutex_lock(&c->mu);
    if (c->state != ST_BROKEN) { /* a normal close: nothing to log */
        snprintf(c->why, sizeof c->why, "%s rank %d: the connection was closed", dir_str(c), c->peer);
        c->why_code = RINGLET_ERR_REMOTE;
        c->state = ST_BROKEN;
    }
    conn_break(c, c->why_code, "%s", c->why); /* fails what is still posted */
    pthread_mutex_unlock(&c->mu);
    /* Under x->mu: the progress thread reads and acknowledges CQ events only under it,
     * so none of this CQ's is half handled. */
    free_conn_verbs(c);
    pthread_mutex_unlock(&x->mu);
    pthread_mutex_destroy(&c->mu);
    free(c);
}

static void ib_fini(void *ctxp) {
    struct ib_ctx *x = ctxp;
    if (!x) return;
    if (x->thread_started) {
        pthread_mutex_lock(&x->mu);
        x->quit = 1;
        pthread_mutex_unlock(&x->mu);
        pthread_join(x->thread, NULL);
        x->thread_started = 0;
    }
    while (x->conns) ib_close(x->conns); /* the core closes them first; this is a safety net */
    ctx_free(x);
}

const rl_transport_ops rl_transport_ib = {
    .name = "ib",
    .init = ib_init,
    .connect = ib_connect,
    .accept = ib_accept,
    .isend = ib_isend,
    .irecv = ib_irecv,
    .reg_mr = ib_reg_mr,
    .dereg_mr = ib_dereg_mr,
    .close = ib_close,
    .fini = ib_fini,
};

#endif /* RL_HAVE_VERBS */
