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
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ib.h"
#include "ib_conn.h"
#include "log.h"
#include "sock.h"
#include "transport.h"
#include "util.h"

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

/* ---- transport entry points ---- */

static void ctx_free(struct ib_ctx *x) {
    if (x->thread_started) {
        pthread_mutex_lock(&x->mu);
        x->quit = 1;
        pthread_mutex_unlock(&x->mu);
        rl_ib_wake(x);
        pthread_join(x->thread, NULL);
    }
    for (int i = 0; i < 2; i++)
        if (x->wake[i] >= 0) close(x->wake[i]);
    if (x->stash) {
        for (int r = 0; r < x->in.nranks; r++)
            if (x->stash[r].fd >= 0) close(x->stash[r].fd);
        free(x->stash);
    }
    rl_gate_fini(&x->gate);
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
    x->wake[0] = x->wake[1] = -1;
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
    if (pipe2(x->wake, O_NONBLOCK | O_CLOEXEC) != 0) {
        snprintf(err, RL_ERR_MAX, "ib: cannot make a pipe: %s", strerror(errno));
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
    if (rl_gate_init(&x->gate, x->lfd, sizeof(rl_ib_hello)) != 0) {
        snprintf(err, RL_ERR_MAX, "ib: out of memory");
        goto fail;
    }
    if (pthread_create(&x->thread, NULL, rl_ib_progress_main, x) != 0) {
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
    b.gid_type = (uint32_t)x->port.gid_type;
    b.grh = (uint32_t)x->port.grh;
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
    RL_INFO(in->rank, "ib: fork protection %s", rl_ib_fork_state());
    if (x->port.alike > 1)
        RL_INFO(in->rank, "ib: %d InfiniBand ports alike here; every rank takes the first, %s port %d (to spread a "
                "host's ranks over them, give each its own RINGLET_IB_HCA, from its local rank)", x->port.alike,
                x->port.dev, x->port.port);
    return RINGLET_SUCCESS;
fail:
    ctx_free(x);
    return rc;
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
    /* Fails what is still posted; a normal close breaks the connection here, so that a
     * sending end's queue pairs reach the error state before its requests fail (a write
     * still queued reads from the caller's buffer, the caller's again once failed). */
    if (c->state != ST_BROKEN)
        rl_ib_conn_break(c, RINGLET_ERR_REMOTE, "%s rank %d: the connection was closed", rl_ib_dir_str(c), c->peer);
    else
        rl_ib_conn_break(c, c->why_code, "%s", c->why);
    pthread_mutex_unlock(&c->mu);
    /* Under x->mu: the progress thread reads and acknowledges CQ events only under it,
     * so none of this CQ's is half handled. */
    rl_ib_conn_free_verbs(c);
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
        rl_ib_wake(x);
        pthread_join(x->thread, NULL);
        x->thread_started = 0;
    }
    while (x->conns) ib_close(x->conns); /* the core closes them first; this is a safety net */
    ctx_free(x);
}

const rl_transport_ops rl_transport_ib = {
    .name = "ib",
    .init = ib_init,
    .connect = rl_ib_connect,
    .accept = rl_ib_accept,
    .accept_ready = rl_ib_accept_ready,
    .isend = rl_ib_isend,
    .irecv = rl_ib_irecv,
    .reg_mr = rl_ib_reg_mr,
    .dereg_mr = rl_ib_dereg_mr,
    .close = ib_close,
    .fini = ib_fini,
};

#endif /* RL_HAVE_VERBS */
