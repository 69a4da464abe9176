/* The IB transport's connection exchange (see ib.c): the connector sends a hello (its
 * QPs, port address, FIFO geometry, a nonce, an HMAC under the job secret) over a TCP
 * socket to the acceptor's listener; the acceptor checks it, creates its QPs and FIFO
 * and answers (its QPs, the FIFO's address and rkey, the nonce, an HMAC); the progress
 * thread reads the answer and brings the connector's QPs up. The checks of what a peer
 * sends (ib.h) need no verbs, so that tests/fuzz/ib.c runs them in every build. */
#include <errno.h>
#include <netinet/in.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "ib.h"
#include "ib_conn.h"
#include "log.h"
#include "sha256.h"
#include "sock.h"
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

int rl_ib_check_chunk(const rl_ib_chunk_hdr *h, uint64_t seq, size_t len, unsigned chan, size_t off, size_t slot_size) {
    size_t want = len - off < slot_size ? len - off : slot_size;
    if (h->magic != RL_IB_CHUNK_MAGIC || h->seq != seq) return RL_IB_BAD;
    if (h->chan != chan) return RL_IB_CHANNEL;
    if (h->total != len) return RL_IB_LENGTH;
    if (h->off != off || h->len != want) return RL_IB_PLACE;
    return RL_IB_OK;
}

#ifdef RL_HAVE_VERBS

/* ---- handshake ---- */

/* The connector's side, once the reply is in: QPs to RTS. c->mu held. */
static void finish_connect(struct ib_conn *c) {
    struct ib_ctx *x = c->ctx;
    rl_ib_reply *r = &c->reply;
    ringlet_result_t code = RINGLET_ERR_REMOTE;
    int verdict = rl_ib_check_reply(x->secret, r, c->peer, x->in.rank, c->hello.nonce, c->nqps, &code);
    if (verdict == RL_IB_BAD) {
        rl_ib_conn_break(c, RINGLET_ERR_REMOTE, "send to rank %d: the IB handshake reply did not authenticate", c->peer);
        return;
    }
    if (verdict == RL_IB_REFUSED) {
        r->msg[sizeof r->msg - 1] = 0;
        rl_ib_conn_break(c, code, "send to rank %d: rank %d refused the IB connection: %s", c->peer, c->peer, r->msg);
        return;
    }
    if (verdict == RL_IB_NQPS) {
        rl_ib_conn_break(c, RINGLET_ERR_REMOTE, "send to rank %d: IB handshake: %u queue pairs, wanted %d", c->peer,
                   r->nqps, c->nqps);
        return;
    }
    char err[RL_ERR_MAX];
    if (rl_ib_conn_connect_qps(c, r->qpn, r->gid, r->lid, r->mtu, (int)r->grh, err) != 0) {
        rl_ib_conn_break(c, RINGLET_ERR_SYSTEM, "send to rank %d: %s", c->peer, err);
        return;
    }
    c->raddr = r->fifo_addr;
    c->rkey = r->fifo_rkey;
    c->state = ST_READY;
    RL_TRACE(x->in.rank, "ib: connection to rank %d is up", c->peer);
    rl_ib_post_sends(c);
}

void rl_ib_on_socket(struct ib_conn *c) {
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
        rl_ib_conn_break(c, RINGLET_ERR_REMOTE,
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
    rl_ib_drain_cq(c);
    if (c->is_send)
        rl_ib_conn_break(c, RINGLET_ERR_REMOTE, "send to rank %d: rank %d closed the connection (it exited or aborted)",
                   c->peer, c->peer);
    else
        rl_ib_consume(c);
}

static void conn_add(struct ib_ctx *x, struct ib_conn *c) {
    pthread_mutex_lock(&x->mu);
    c->next = x->conns;
    x->conns = c;
    pthread_mutex_unlock(&x->mu);
    rl_ib_wake(x); /* its socket and completion queue watched now, not at the next 100 ms poll */
}

/* Whether this rank's GID and the peer's cannot reach each other (rl_ib_gid_mismatch):
 * refused at once, naming both, instead of queue pairs whose sends all fail seconds later. */
static int gid_refused(const struct ib_ctx *x, int peer, int peer_type, const uint8_t peer_gid[16], char *err) {
    const char *why = rl_ib_gid_mismatch(x->port.gid_type, x->port.gid.raw, peer_type, peer_gid);
    if (!why) return 0;
    union ibv_gid pg;
    memcpy(pg.raw, peer_gid, 16);
    char mine[64], theirs[64];
    rl_ib_gid_str(&x->port.gid, mine, sizeof mine);
    rl_ib_gid_str(&pg, theirs, sizeof theirs);
    snprintf(err, RL_ERR_MAX, "ib: rank %d's GID %s (%s) and this rank's %s (%s, index %d) are %s: set "
             "RINGLET_IB_GID_INDEX on every rank to GIDs of one kind", peer, theirs, rl_ib_gid_type_str(peer_type),
             mine, rl_ib_gid_type_str(x->port.gid_type), x->port.gid_index, why);
    return 1;
}

ringlet_result_t rl_ib_connect(void *ctxp, int peer, const void *peer_blob, size_t bloblen, void **connp,
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
    if (gid_refused(x, peer, (int)b.gid_type, b.gid, err)) return RINGLET_ERR_INVALID_USAGE;
    struct ib_conn *c = rl_ib_conn_create(x, peer, 1, x->nqps, x->nslots, x->slot_size, err);
    if (!c) return RINGLET_ERR_SYSTEM;
    double deadline = rl_now() + x->in.timeout_s;
    rl_io_t r = rl_sock_connect(&b.addr, rl_sockaddr_len(&b.addr), deadline, x->in.stop, &c->fd);
    int own = r == RL_IO_ERR ? -c->fd : 0; /* this rank's own failure, not the peer's */
    if (own) c->fd = -1;
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
        h->gid_type = (uint32_t)x->port.gid_type;
        h->grh = (uint32_t)x->port.grh;
        memcpy(h->gid, x->port.gid.raw, 16);
        for (int i = 0; i < c->nqps; i++) h->qpn[i] = c->qp[i]->qp_num;
        rl_random_bytes(h->nonce, sizeof h->nonce);
        rl_ib_hello_mac(x->secret, h, h->mac);
        r = rl_sock_send_all(c->fd, h, sizeof *h, deadline, x->in.stop);
    }
    if (r != RL_IO_OK) {
        if (own) snprintf(err, RL_ERR_MAX, "ib: connect to rank %d failed here: %s", peer, strerror(own));
        else snprintf(err, RL_ERR_MAX, "ib: connect to rank %d failed: %s", peer, rl_io_str(r));
        rl_ib_conn_free_verbs(c);
        pthread_mutex_destroy(&c->mu);
        free(c);
        return own ? RINGLET_ERR_SYSTEM : r == RL_IO_TIMEOUT ? RINGLET_ERR_TIMEOUT : RINGLET_ERR_REMOTE;
    }
    c->state = ST_PENDING; /* the progress thread finishes it when the reply comes */
    conn_add(x, c);
    *connp = c;
    return RINGLET_SUCCESS;
}

/* A whole hello arrived on fd (hello_gate.h): filed under the sender's rank if it is
 * genuine; strangers and garbage are closed and logged. */
static void hello_arrived(void *arg, int fd, const void *hello) {
    struct ib_ctx *x = arg;
    rl_ib_hello h;
    memcpy(&h, hello, sizeof h);
    if (rl_ib_check_hello(x->secret, &h, x->in.rank, x->in.nranks) != RL_IB_OK) {
        RL_WARN(x->in.rank, "ib: refused a handshake that did not authenticate (bad hello)");
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

int rl_ib_accept_ready(void *ctxp, int peer) {
    struct ib_ctx *x = ctxp;
    int e;
    if (x->stash[peer].fd >= 0) return 1;
    /* an error: the accept says it */
    return rl_gate_step(&x->gate, hello_arrived, x, "ib", x->in.rank, &e) != RL_IO_OK || x->stash[peer].fd >= 0;
}

ringlet_result_t rl_ib_accept(void *ctxp, int peer, void **connp, char *err) {
    struct ib_ctx *x = ctxp;
    double deadline = rl_now() + x->in.timeout_s;
    for (;;) {
        int e;
        rl_io_t r = rl_gate_step(&x->gate, hello_arrived, x, "ib", x->in.rank, &e);
        if (x->stash[peer].fd >= 0) break;
        if (r == RL_IO_OK && x->in.stop && atomic_load(x->in.stop)) r = RL_IO_STOPPED;
        if (r == RL_IO_OK && rl_now() >= deadline) r = RL_IO_TIMEOUT;
        if (r != RL_IO_OK) return rl_transport_accept_failed("ib", peer, r, e, err);
        rl_gate_wait(&x->gate, deadline);
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
    rep.grh = (uint32_t)x->port.grh;
    memcpy(rep.gid, x->port.gid.raw, 16);
    ringlet_result_t rc = RINGLET_SUCCESS;
    struct ib_conn *c = NULL;
    if ((int)h.is_eth != x->port.is_eth) {
        rc = RINGLET_ERR_INVALID_USAGE;
        snprintf(err, RL_ERR_MAX, "ib: rank %d's port is %s, this rank's %s", peer, h.is_eth ? "RoCE" : "InfiniBand",
                 x->port.is_eth ? "RoCE" : "InfiniBand");
    } else if (gid_refused(x, peer, (int)h.gid_type, h.gid, err)) {
        rc = RINGLET_ERR_INVALID_USAGE;
    } else {
        c = rl_ib_conn_create(x, peer, 0, (int)h.nqps, (int)h.nslots, h.slot_size, err);
        if (!c) rc = RINGLET_ERR_SYSTEM;
        else if (rl_ib_conn_connect_qps(c, h.qpn, h.gid, h.lid, h.mtu, (int)h.grh, err) != 0) rc = RINGLET_ERR_SYSTEM;
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
            rl_ib_conn_free_verbs(c);
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

#endif /* RL_HAVE_VERBS */
