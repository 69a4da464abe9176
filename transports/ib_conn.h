/* The IB transport's context, connections and requests, shared by its files (verbs
 * builds only):
 *   ib.c           init (the device and port, the listener, the progress thread), close, fini
 *   ib_exchange.c  the connection exchange (hello and reply over TCP), and its checks (ib.h)
 *   ib_qp.c        registered memory, completion queues and queue pairs
 *   ib_data.c      the data path: chunks written with RDMA, credits, completions
 *   ib_progress.c  the progress thread: completions, events, handshake sockets, deadlines
 * ib.c's comment says how it works. */
#ifndef RINGLET_IB_CONN_H
#define RINGLET_IB_CONN_H

#include "ib_verbs.h"

#ifdef RL_HAVE_VERBS
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include "hello_gate.h"
#include "ib.h"
#include "transport.h"

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
    int doomed;              /* on the list of a break (rl_ib_conn_break) */
    struct ib_req *doom_next;
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
    rl_gate gate; /* connections on lfd whose hello is still coming */
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
    int wake[2]; /* a pipe: rl_ib_wake ends the progress thread's sleep */
    /* The completion channel's and the async events' fds once poll reported them dead
     * (POLLERR: the device was reset or removed, and they would wake poll at once
     * forever): the progress thread stops watching them. */
    int ch_dead, async_dead;
};

/* Ends the progress thread's sleep (up to 100 ms in poll): a new connection (its socket
 * and completion queue are not watched until the thread looks again), or quit. */
void rl_ib_wake(struct ib_ctx *x);

static inline const char *rl_ib_dir_str(const struct ib_conn *c) { return c->is_send ? "send to" : "receive from"; }

/* ---- the data path (ib_data.c); c->mu held ---- */

void rl_ib_finish_req(struct ib_conn *c, struct ib_req *r);
void rl_ib_fail_req(struct ib_conn *c, struct ib_req *r, ringlet_result_t code, const char *msg);
/* Marks the connection unusable (first reason wins) and fails every request on it. */
void rl_ib_conn_break(struct ib_conn *c, ringlet_result_t code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Writes as many queued chunks as credits and staging slots allow. */
int rl_ib_post_sends(struct ib_conn *c);
/* Copies landed chunks into posted receives, in order; returns credits. */
int rl_ib_consume(struct ib_conn *c);
/* Polls the CQ dry and moves the connection on. */
int rl_ib_drain_cq(struct ib_conn *c);
ringlet_result_t rl_ib_isend(void *conn, const void *buf, size_t len, void *mr, rl_treq *req);
ringlet_result_t rl_ib_irecv(void *conn, void *buf, size_t len, void *mr, rl_treq *req);

/* ---- queue pairs and memory (ib_qp.c) ---- */

int rl_ib_post_recvs(struct ib_conn *c, int qi, int n);
/* A connection with its FIFO or staging area, CQ and QPs in INIT with receives posted. */
struct ib_conn *rl_ib_conn_create(struct ib_ctx *x, int peer, int is_send, int nqps, int nslots, size_t slot_size,
                                  char *err);
void rl_ib_conn_free_verbs(struct ib_conn *c);
/* RTR then RTS against the peer's QPs (addressed with a GRH where rl_ib_use_grh says). */
int rl_ib_conn_connect_qps(struct ib_conn *c, const uint32_t *qpn, const uint8_t *gid, uint32_t lid, uint32_t mtu,
                           int peer_grh, char *err);
ringlet_result_t rl_ib_reg_mr(void *ctxp, void *buf, size_t len, void **mrp, char *err);
void rl_ib_dereg_mr(void *ctxp, void *mrp);

/* ---- the exchange (ib_exchange.c) ---- */

ringlet_result_t rl_ib_connect(void *ctxp, int peer, const void *peer_blob, size_t bloblen, void **connp, char *err);
ringlet_result_t rl_ib_accept(void *ctxp, int peer, void **connp, char *err);
int rl_ib_accept_ready(void *ctxp, int peer);
/* The handshake socket is readable. c->mu held. */
void rl_ib_on_socket(struct ib_conn *c);

/* ---- the progress thread (ib_progress.c) ---- */

void *rl_ib_progress_main(void *arg);

#endif /* RL_HAVE_VERBS */
#endif
