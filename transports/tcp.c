/* TCP transport.
 *
 * A connection is one direction to one peer over RINGLET_NSOCKS_PERPEER sockets, each
 * driven by its own thread, so that several streams move at once and the thread that
 * reduces is never the one blocked in send/recv. A message of at least 2 * 64 KiB is
 * cut into one part per socket; a smaller one travels whole on socket (seq % nsocks),
 * where seq counts the connection's messages on both sides. Each part starts with a
 * header carrying the message's total length, so a receive posted with another length
 * fails on both sides instead of corrupting data.
 *
 * Connection set-up: the connecting side sends a hello per socket (its rank, the
 * target rank, the socket index, a nonce and an HMAC-SHA256 of all that under the job
 * secret); the listening side drops anything else. Connect never waits for the peer's
 * accept, so ranks may connect and accept in any order.
 */
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "log.h"
#include "sha256.h"
#include "sock.h"
#include "tcp.h"
#include "transport.h"
#include "util.h"

#define TCP_MAX_SOCKS RL_TCP_MAX_SOCKS
#define TCP_MIN_PART (64 * 1024)
#define TCP_MAGIC RL_TCP_MAGIC

struct tcp_part {
    struct tcp_part *next;
    rl_treq *req;
    char *ptr;
    size_t len;
};

struct tcp_conn;

struct tcp_sock {
    int fd;
    struct tcp_conn *conn;
    pthread_t thread;
    int started;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    struct tcp_part *head, *tail;
    atomic_int quit; /* written under mu, read without it by conn_stopped */
};

struct tcp_ctx {
    rl_transport_init in;
    uint8_t secret[32];
    int lfd;
    struct sockaddr_storage addr;
    int nsocks;
    int bufsize;
    int *pending_fds; /* [peer * nsocks + index]: accepted, not yet claimed */
    int *peer_nsocks; /* [peer]: sockets the peer's connection uses (from its hellos), 0 = none yet */
};

struct tcp_conn {
    struct tcp_ctx *ctx;
    int peer, is_send, nsocks;
    uint64_t nmsgs; /* posted messages; only the posting thread touches it */
    atomic_int broken;
    struct tcp_sock socks[TCP_MAX_SOCKS];
};

/* ---- the wire (tcp.h) ---- */

int rl_tcp_check_hdr(const rl_tcp_hdr *got, uint64_t total, uint64_t part) {
    if (got->magic != TCP_MAGIC) return RL_TCP_HDR_CORRUPT;
    return got->total != total || got->part != part ? RL_TCP_HDR_LENGTH : RL_TCP_HDR_OK;
}

void rl_tcp_hello_mac(const uint8_t secret[32], const rl_tcp_hello *h, uint8_t out[32]) {
    rl_hmac_sha256(secret, 32, h, offsetof(rl_tcp_hello, mac), out);
}

int rl_tcp_check_hello(const uint8_t secret[32], const rl_tcp_hello *h, int rank, int nranks, int nsocks,
                       const int *peer_nsocks) {
    uint8_t mac[32];
    rl_tcp_hello_mac(secret, h, mac);
    if (h->magic != TCP_MAGIC || !rl_ct_equal(mac, h->mac, 32) || h->to != rank || h->from < 0 || h->from >= nranks ||
        h->nsocks < 1 || h->nsocks > nsocks || h->index < 0 || h->index >= h->nsocks ||
        (peer_nsocks[h->from] && peer_nsocks[h->from] != h->nsocks))
        return -1;
    return 0;
}

int rl_tcp_parse_blob(const void *blob, size_t bloblen, rl_tcp_blob *b) {
    if (bloblen != sizeof *b) return -1;
    memcpy(b, blob, sizeof *b);
    /* Only an IP address: connect would take any family (a Unix socket path, ...). */
    int ip = b->addr.ss_family == AF_INET || b->addr.ss_family == AF_INET6;
    return !ip || b->nsocks < 1 || b->nsocks > TCP_MAX_SOCKS ? -1 : 0;
}

static int conn_stopped(struct tcp_conn *c, struct tcp_sock *s) {
    return atomic_load(c->ctx->in.stop) || atomic_load(&c->broken) || atomic_load(&s->quit);
}

static void part_finish(struct tcp_conn *c, struct tcp_part *p) {
    if (rl_treq_part_done(p->req) && c->ctx->in.notify) c->ctx->in.notify(c->ctx->in.notify_arg);
}

/* Moves one part through the socket; returns 0 or fails the request and breaks the
 * connection. */
static int part_io(struct tcp_conn *c, struct tcp_sock *s, struct tcp_part *p) {
    const char *dir = c->is_send ? "send to" : "receive from";
    rl_tcp_hdr h = {p->req->len, p->len, TCP_MAGIC, 0};
    /* Waits here are bounded by the communicator: it sets *stop on timeout or failure. */
    const double forever = 1e300;
    rl_io_t r;
    const atomic_int *stop = c->ctx->in.stop;
    if (c->is_send) {
        r = rl_sock_send_all(s->fd, &h, sizeof h, forever, stop);
        if (r == RL_IO_OK) r = rl_sock_send_all(s->fd, p->ptr, p->len, forever, stop);
    } else {
        rl_tcp_hdr got;
        r = rl_sock_recv_all(s->fd, &got, sizeof got, forever, stop);
        int verdict = r == RL_IO_OK ? rl_tcp_check_hdr(&got, h.total, h.part) : RL_TCP_HDR_OK;
        if (verdict != RL_TCP_HDR_OK) {
            if (verdict == RL_TCP_HDR_CORRUPT)
                rl_treq_fail(p->req, RINGLET_ERR_REMOTE, "%s rank %d: corrupt stream (bad part header)", dir, c->peer);
            else
                rl_treq_fail(p->req, RINGLET_ERR_INVALID_USAGE,
                             "receive from rank %d: the peer sent a message of %llu bytes, this rank expected %llu",
                             c->peer, (unsigned long long)got.total, (unsigned long long)h.total);
            atomic_store(&c->broken, 1);
            return -1;
        }
        if (r == RL_IO_OK) r = rl_sock_recv_all(s->fd, p->ptr, p->len, forever, stop);
    }
    if (r == RL_IO_OK) return 0;
    if (r == RL_IO_STOPPED)
        rl_treq_fail(p->req, RINGLET_ERR_REMOTE, "%s rank %d: stopped (communicator failed or aborted)", dir, c->peer);
    else
        rl_treq_fail(p->req, RINGLET_ERR_REMOTE, "%s rank %d: %s%s%s", dir, c->peer, rl_io_str(r),
                     r == RL_IO_ERR ? ": " : "", r == RL_IO_ERR ? strerror(errno) : "");
    atomic_store(&c->broken, 1);
    if (c->ctx->in.notify) c->ctx->in.notify(c->ctx->in.notify_arg);
    return -1;
}

static void *sock_thread(void *arg) {
    struct tcp_sock *s = arg;
    struct tcp_conn *c = s->conn;
    for (;;) {
        pthread_mutex_lock(&s->mu);
        while (!s->head && !atomic_load(&s->quit)) pthread_cond_wait(&s->cv, &s->mu);
        struct tcp_part *p = s->head;
        if (p) {
            s->head = p->next;
            if (!s->head) s->tail = NULL;
        }
        int quit = atomic_load(&s->quit);
        pthread_mutex_unlock(&s->mu);
        if (!p) {
            if (quit) break;
            continue;
        }
        if (conn_stopped(c, s))
            rl_treq_fail(p->req, RINGLET_ERR_REMOTE, "%s rank %d: connection no longer usable",
                         c->is_send ? "send to" : "receive from", c->peer);
        else
            part_io(c, s, p);
        part_finish(c, p);
    }
    return NULL;
}

/* Sockets per peer when RINGLET_NSOCKS_PERPEER is unset: enough streams to use the
 * cores, counting a sending and a receiving thread per socket for every rank on this
 * host (LOCAL_WORLD_SIZE as torchrun and ringlet-run set it, or Open MPI's), 1 to 8. */
static int default_nsocks(void) {
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    long local = rl_env_int("LOCAL_WORLD_SIZE", 0, 0, 1 << 20);
    if (!local) local = rl_env_int("OMPI_COMM_WORLD_LOCAL_SIZE", 1, 1, 1 << 20);
    long n = cores / (2 * (local > 0 ? local : 1));
    return n < 1 ? 1 : n > 8 ? 8 : (int)n;
}

static ringlet_result_t tcp_init(const rl_transport_init *in, void **ctxp, void *blob, size_t *bloblen, char *err) {
    struct tcp_ctx *ctx = calloc(1, sizeof *ctx);
    if (!ctx) return snprintf(err, RL_ERR_MAX, "tcp: out of memory"), RINGLET_ERR_SYSTEM;
    ctx->in = *in;
    memcpy(ctx->secret, in->secret, 32);
    ctx->nsocks = (int)rl_env_int("RINGLET_NSOCKS_PERPEER", default_nsocks(), 1, TCP_MAX_SOCKS);
    ctx->bufsize = (int)rl_env_int("RINGLET_SOCKET_BUFSIZE", 0, 0, 1 << 30);
    ctx->addr = *(const struct sockaddr_storage *)in->local_addr;
    rl_sockaddr_set_port(&ctx->addr, 0);
    socklen_t len;
    int rc = rl_sock_listen(&ctx->addr, &len, &ctx->lfd);
    if (rc < 0) {
        snprintf(err, RL_ERR_MAX, "tcp: cannot listen: %s", strerror(-rc));
        free(ctx);
        return RINGLET_ERR_SYSTEM;
    }
    ctx->pending_fds = malloc(sizeof(int) * (size_t)in->nranks * (size_t)ctx->nsocks);
    ctx->peer_nsocks = calloc((size_t)in->nranks, sizeof(int));
    if (!ctx->pending_fds || !ctx->peer_nsocks) {
        free(ctx->pending_fds);
        free(ctx->peer_nsocks);
        close(ctx->lfd);
        free(ctx);
        return snprintf(err, RL_ERR_MAX, "tcp: out of memory"), RINGLET_ERR_SYSTEM;
    }
    for (size_t i = 0; i < (size_t)in->nranks * (size_t)ctx->nsocks; i++) ctx->pending_fds[i] = -1;
    rl_tcp_blob b;
    memset(&b, 0, sizeof b);
    b.addr = ctx->addr;
    b.nsocks = ctx->nsocks;
    memcpy(blob, &b, sizeof b);
    *bloblen = sizeof b;
    *ctxp = ctx;
    return RINGLET_SUCCESS;
}

static struct tcp_conn *conn_new(struct tcp_ctx *ctx, int peer, int is_send) {
    struct tcp_conn *c = calloc(1, sizeof *c);
    if (!c) return NULL;
    c->ctx = ctx;
    c->peer = peer;
    c->is_send = is_send;
    c->nsocks = ctx->nsocks;
    for (int i = 0; i < TCP_MAX_SOCKS; i++) c->socks[i].fd = -1;
    return c;
}

static ringlet_result_t conn_start(struct tcp_conn *c, char *err) {
    for (int i = 0; i < c->nsocks; i++) {
        struct tcp_sock *s = &c->socks[i];
        s->conn = c;
        pthread_mutex_init(&s->mu, NULL);
        pthread_cond_init(&s->cv, NULL);
        if (pthread_create(&s->thread, NULL, sock_thread, s) != 0) {
            snprintf(err, RL_ERR_MAX, "tcp: cannot start a socket thread for rank %d", c->peer);
            return RINGLET_ERR_SYSTEM;
        }
        s->started = 1;
    }
    return RINGLET_SUCCESS;
}

static void tcp_close(void *connp) {
    struct tcp_conn *c = connp;
    if (!c) return;
    for (int i = 0; i < c->nsocks; i++) {
        struct tcp_sock *s = &c->socks[i];
        if (s->started) {
            pthread_mutex_lock(&s->mu);
            atomic_store(&s->quit, 1);
            pthread_cond_signal(&s->cv);
            pthread_mutex_unlock(&s->mu);
            pthread_join(s->thread, NULL);
            pthread_mutex_destroy(&s->mu);
            pthread_cond_destroy(&s->cv);
        }
        if (s->fd >= 0) close(s->fd);
    }
    free(c);
}

static ringlet_result_t tcp_connect(void *ctxp, int peer, const void *peer_blob, size_t bloblen, void **connp,
                                    char *err) {
    struct tcp_ctx *ctx = ctxp;
    rl_tcp_blob b;
    if (rl_tcp_parse_blob(peer_blob, bloblen, &b) != 0)
        return snprintf(err, RL_ERR_MAX, "tcp: bad address blob for rank %d", peer), RINGLET_ERR_INTERNAL;
    struct tcp_conn *c = conn_new(ctx, peer, 1);
    if (!c) return snprintf(err, RL_ERR_MAX, "tcp: out of memory"), RINGLET_ERR_SYSTEM;
    /* The pair uses the smaller of the two ranks' socket counts; the hellos tell the
     * accepting side how many to expect. */
    if (b.nsocks < c->nsocks) c->nsocks = b.nsocks;
    double deadline = rl_now() + ctx->in.timeout_s;
    for (int i = 0; i < c->nsocks; i++) {
        rl_io_t r = rl_sock_connect(&b.addr, rl_sockaddr_len(&b.addr), deadline, ctx->in.stop, &c->socks[i].fd);
        if (r == RL_IO_OK) {
            rl_sock_tune(c->socks[i].fd, ctx->bufsize);
            rl_tcp_hello h;
            memset(&h, 0, sizeof h);
            h.magic = TCP_MAGIC;
            h.from = ctx->in.rank;
            h.to = peer;
            h.index = i;
            h.nsocks = c->nsocks;
            rl_random_bytes(h.nonce, sizeof h.nonce);
            rl_tcp_hello_mac(ctx->secret, &h, h.mac);
            r = rl_sock_send_all(c->socks[i].fd, &h, sizeof h, deadline, ctx->in.stop);
        }
        if (r != RL_IO_OK) {
            snprintf(err, RL_ERR_MAX, "tcp: connect to rank %d failed: %s", peer, rl_io_str(r));
            tcp_close(c);
            return r == RL_IO_TIMEOUT ? RINGLET_ERR_TIMEOUT : RINGLET_ERR_REMOTE;
        }
    }
    ringlet_result_t rc = conn_start(c, err);
    if (rc != RINGLET_SUCCESS) {
        tcp_close(c);
        return rc;
    }
    *connp = c;
    return RINGLET_SUCCESS;
}

/* Takes one connection off the listener and files it under (rank, index) if its
 * hello is genuine. Strangers and garbage are closed and logged. */
static void accept_one(struct tcp_ctx *ctx, int fd) {
    rl_tcp_hello h;
    /* A genuine peer sends its hello right after connecting. */
    rl_io_t r = rl_sock_recv_all(fd, &h, sizeof h, rl_now() + 5.0, ctx->in.stop);
    if (r != RL_IO_OK ||
        rl_tcp_check_hello(ctx->secret, &h, ctx->in.rank, ctx->in.nranks, ctx->nsocks, ctx->peer_nsocks) != 0) {
        RL_WARN(ctx->in.rank, "tcp: refused a connection that did not authenticate (%s)",
                r == RL_IO_OK ? "bad hello" : rl_io_str(r));
        close(fd);
        return;
    }
    int *slot = &ctx->pending_fds[(size_t)h.from * (size_t)ctx->nsocks + (size_t)h.index];
    if (*slot >= 0) {
        RL_WARN(ctx->in.rank, "tcp: duplicate connection from rank %d socket %d refused", h.from, h.index);
        close(fd);
        return;
    }
    rl_sock_tune(fd, ctx->bufsize);
    *slot = fd;
    ctx->peer_nsocks[h.from] = h.nsocks;
}

static ringlet_result_t tcp_accept(void *ctxp, int peer, void **connp, char *err) {
    struct tcp_ctx *ctx = ctxp;
    int *slots = &ctx->pending_fds[(size_t)peer * (size_t)ctx->nsocks];
    double deadline = rl_now() + ctx->in.timeout_s;
    for (;;) {
        int have = 0, want = ctx->peer_nsocks[peer];
        for (int i = 0; i < ctx->nsocks; i++) have += slots[i] >= 0;
        if (want && have == want) break;
        int fd;
        rl_io_t r = rl_sock_accept(ctx->lfd, deadline, ctx->in.stop, &fd);
        if (r != RL_IO_OK) {
            snprintf(err, RL_ERR_MAX, "tcp: waiting for rank %d to connect: %s", peer, rl_io_str(r));
            return r == RL_IO_TIMEOUT ? RINGLET_ERR_TIMEOUT : RINGLET_ERR_REMOTE;
        }
        accept_one(ctx, fd);
    }
    struct tcp_conn *c = conn_new(ctx, peer, 0);
    if (!c) return snprintf(err, RL_ERR_MAX, "tcp: out of memory"), RINGLET_ERR_SYSTEM;
    c->nsocks = ctx->peer_nsocks[peer];
    ctx->peer_nsocks[peer] = 0;
    for (int i = 0; i < c->nsocks; i++) {
        c->socks[i].fd = slots[i];
        slots[i] = -1;
    }
    ringlet_result_t rc = conn_start(c, err);
    if (rc != RINGLET_SUCCESS) {
        tcp_close(c);
        return rc;
    }
    *connp = c;
    return RINGLET_SUCCESS;
}

static void enqueue(struct tcp_sock *s, struct tcp_part *p) {
    p->next = NULL;
    pthread_mutex_lock(&s->mu);
    if (s->tail) s->tail->next = p;
    else s->head = p;
    s->tail = p;
    pthread_cond_signal(&s->cv);
    pthread_mutex_unlock(&s->mu);
}

static ringlet_result_t tcp_post(void *connp, void *buf, size_t len, rl_treq *req) {
    struct tcp_conn *c = connp;
    _Static_assert(sizeof(struct tcp_part) * TCP_MAX_SOCKS <= RL_TREQ_PRIV, "request too small");
    struct tcp_part *parts = (struct tcp_part *)req->priv;
    int nparts = 1;
    if (c->nsocks > 1 && len >= 2 * (size_t)TCP_MIN_PART) {
        size_t n = len / TCP_MIN_PART;
        nparts = n < (size_t)c->nsocks ? (int)n : c->nsocks;
    }
    int first = nparts == 1 ? (int)(c->nmsgs % (uint64_t)c->nsocks) : 0;
    c->nmsgs++;
    rl_treq_start(req, len, nparts);
    /* Parts are 4 KiB multiples, the last takes the rest. */
    size_t per = ((len / (size_t)nparts) + 4095) & ~(size_t)4095, off = 0;
    for (int i = 0; i < nparts; i++) {
        size_t n = i == nparts - 1 ? len - off : (per < len - off ? per : len - off);
        parts[i].req = req;
        parts[i].ptr = (char *)buf + off;
        parts[i].len = n;
        off += n;
    }
    for (int i = 0; i < nparts; i++) enqueue(&c->socks[(first + i) % c->nsocks], &parts[i]);
    return RINGLET_SUCCESS;
}

static ringlet_result_t tcp_isend(void *conn, const void *buf, size_t len, void *mr, rl_treq *req) {
    (void)mr;
    return tcp_post(conn, (void *)buf, len, req);
}

static ringlet_result_t tcp_irecv(void *conn, void *buf, size_t len, void *mr, rl_treq *req) {
    (void)mr;
    return tcp_post(conn, buf, len, req);
}

static ringlet_result_t tcp_reg_mr(void *ctx, void *buf, size_t len, void **mr, char *err) {
    (void)ctx, (void)buf, (void)len, (void)err;
    *mr = NULL;
    return RINGLET_SUCCESS;
}

static void tcp_dereg_mr(void *ctx, void *mr) { (void)ctx, (void)mr; }

static void tcp_fini(void *ctxp) {
    struct tcp_ctx *ctx = ctxp;
    if (!ctx) return;
    for (size_t i = 0; i < (size_t)ctx->in.nranks * (size_t)ctx->nsocks; i++)
        if (ctx->pending_fds[i] >= 0) close(ctx->pending_fds[i]);
    free(ctx->pending_fds);
    free(ctx->peer_nsocks);
    close(ctx->lfd);
    free(ctx);
}

const rl_transport_ops rl_transport_tcp = {
    .name = "tcp",
    .init = tcp_init,
    .connect = tcp_connect,
    .accept = tcp_accept,
    .isend = tcp_isend,
    .irecv = tcp_irecv,
    .reg_mr = tcp_reg_mr,
    .dereg_mr = tcp_dereg_mr,
    .close = tcp_close,
    .fini = tcp_fini,
};
