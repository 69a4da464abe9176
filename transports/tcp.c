/* TCP transport.
 *
 * A connection is one direction to one peer over RINGLET_NSOCKS_PERPEER sockets, each
 * driven by its own thread, so that several streams move at once and the thread that
 * reduces is never the one blocked in send/recv. A message of at least 2 * 64 KiB is
 * cut into parts (up to one per socket); a smaller one travels whole. Message seq's first
 * part goes on socket (seq % nsocks), the others on the sockets after it, where seq counts
 * the connection's messages on both sides. Each part starts with a header carrying the
 * message's total length, so a receive posted with another length fails (the sender
 * hears of it from the monitor, or at its next call) instead of corrupting data.
 *
 * Messages of one part of at most RINGLET_TCP_INLINE_BYTES skip the thread while it has
 * nothing of the socket's: the posting thread moves what the socket takes at once
 * (non-blocking sendmsg/recvmsg; a receive of at most 64 KiB waits for the first poll), and
 * whoever waits on the communicator moves the rest (progress(), polled as shared memory
 * is), so a reply costs no thread switch. A socket's queue of parts has one owner at a
 * time, decided under its mutex: nobody (empty), the pollers, or its thread. A message for
 * the thread (larger, or striped), or a waiter about to sleep (park()), hands the whole
 * queue to the thread, which goes on where the pollers stopped and rings the bell when
 * done. The limit's default: 64 KiB where each socket thread has a core of its own, no
 * limit where the host has fewer cores than that (there a thread's wake-ups cost more than
 * they move in parallel).
 *
 * Connection set-up: the connecting side sends a hello per socket (its rank, the target
 * rank, the socket index, the target listener's id from its blob, a nonce naming the
 * attempt and an HMAC-SHA256 of all that under the job secret); the listening side drops
 * anything else, also a genuine hello meant for another listener (one that closed, whose
 * port this one took: communicators made from the environment share the secret). Connect
 * never waits for the peer's accept, so ranks may connect and accept in any order.
 */
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "hello_gate.h"
#include "log.h"
#include "sha256.h"
#include "sock.h"
#include "tcp.h"
#include "transport.h"
#include "util.h"

#define TCP_MAX_SOCKS RL_TCP_MAX_SOCKS
#define TCP_MIN_PART (64 * 1024)
#define TCP_MAGIC RL_TCP_MAGIC
#define TCP_INLINE_MAX (64 * 1024) /* RINGLET_TCP_INLINE_BYTES where socket threads have cores */
#define TCP_READ_AT_POST (64 * 1024) /* a pollers' receive larger than this is read from its post on */

struct tcp_part {
    struct tcp_part *next;
    rl_treq *req;
    char *ptr;
    size_t len;
    size_t done;    /* bytes of header and payload moved so far */
    rl_tcp_hdr hdr; /* the header sent, or as received; before a receive's first byte, its
                     * pad[0] says that delay_acks has yet to run for it (the request's
                     * private area has no room for another field at 16 sockets) */
};

struct tcp_conn;

/* Who moves a socket's queue: nobody (empty, thread idle), the waiters' polls, its thread
 * (until it finds the queue empty). */
enum { SOCK_IDLE, SOCK_POLLERS, SOCK_THREAD };

struct tcp_sock {
    int fd;
    struct tcp_conn *conn;
    pthread_t thread;
    int started;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    /* Under mu: the parts posted and not yet moved, in order (the thread takes the one it
     * moves off the queue first), and who moves them (SOCK_*; read without mu to skip
     * sockets the pollers do not own). */
    struct tcp_part *head, *tail;
    atomic_int owner;
    atomic_int quit; /* written under mu, read without it by conn_stopped */
    /* A receive socket's ACK mode (delay_acks): asked for delayed ACKs, and when. */
    int acks_delayed;
    double acks_delayed_at;
};

struct tcp_ctx {
    rl_transport_init in;
    uint8_t secret[32];
    uint8_t listener[16]; /* this listener's random id (tcp.h: rl_tcp_blob) */
    int lfd;
    struct sockaddr_storage addr;
    int nsocks;
    int bufsize;
    size_t inline_max; /* largest message the posting or waiting thread moves itself */
    rl_gate gate;     /* connections on lfd whose hello is still coming */
    int *pending_fds; /* [peer * nsocks + index]: accepted, not yet claimed */
    int *peer_nsocks; /* [peer]: sockets the peer's connection uses (from its hellos), 0 = none yet */
    uint8_t *pending_attempt; /* [peer * 16]: the nonce of the attempt whose sockets are pending */
    atomic_ullong attempts;   /* this rank's connects so far: each one's hellos carry its number */
    pthread_mutex_t mu;      /* guards conns; taken before a socket's mu */
    struct tcp_conn *conns;  /* where pollers look */
    atomic_int npolled;      /* sockets the pollers own */
    atomic_int nthreaded;    /* sockets their threads own */
};

struct tcp_conn {
    struct tcp_ctx *ctx;
    int peer, is_send, nsocks;
    uint64_t nmsgs; /* posted messages; only the posting thread touches it */
    atomic_int broken;
    struct tcp_conn *next; /* in ctx->conns */
    struct tcp_sock socks[TCP_MAX_SOCKS];
};

/* ---- the wire (tcp.h) ---- */

int rl_tcp_check_hdr(const rl_tcp_hdr *got, uint64_t total, uint64_t part, unsigned chan) {
    if (got->magic != TCP_MAGIC) return RL_TCP_HDR_CORRUPT;
    if (got->chan != chan) return RL_TCP_HDR_CHANNEL;
    return got->total != total || got->part != part ? RL_TCP_HDR_LENGTH : RL_TCP_HDR_OK;
}

void rl_tcp_hello_mac(const uint8_t secret[32], const rl_tcp_hello *h, uint8_t out[32]) {
    rl_hmac_sha256(secret, 32, h, offsetof(rl_tcp_hello, mac), out);
}

int rl_tcp_check_hello(const uint8_t secret[32], const uint8_t listener[16], const rl_tcp_hello *h, int rank,
                       int nranks, int nsocks, const int *peer_nsocks) {
    uint8_t mac[32];
    rl_tcp_hello_mac(secret, h, mac);
    if (h->magic != TCP_MAGIC || !rl_ct_equal(mac, h->mac, 32) || memcmp(h->listener, listener, 16) != 0 ||
        h->to != rank || h->from < 0 || h->from >= nranks ||
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

static void notify(struct tcp_conn *c) {
    if (c->ctx->in.notify) c->ctx->in.notify(c->ctx->in.notify_arg);
}

/* The part's last use: its request may be reused at once. */
static void part_finish(struct tcp_conn *c, struct tcp_part *p) {
    if (rl_treq_part_done(p->req)) notify(c);
}

/* Fails p's request (r: why) and breaks the connection: the stream is out of step. */
static void part_fail(struct tcp_conn *c, struct tcp_part *p, rl_io_t r, int err) {
    const char *dir = c->is_send ? "send to" : "receive from";
    if (r == RL_IO_STOPPED)
        rl_treq_fail(p->req, RINGLET_ERR_REMOTE, "%s rank %d: stopped (communicator failed or aborted)", dir, c->peer);
    else
        rl_treq_fail(p->req, RINGLET_ERR_REMOTE, "%s rank %d: %s%s%s", dir, c->peer, rl_io_str(r),
                     r == RL_IO_ERR ? ": " : "", r == RL_IO_ERR ? strerror(err) : "");
    atomic_store(&c->broken, 1);
    notify(c);
}

/* A received header against the receive posted; 0 (failed, connection broken) or 1. */
static int hdr_ok(struct tcp_conn *c, struct tcp_part *p) {
    int verdict = rl_tcp_check_hdr(&p->hdr, p->req->len, p->len, p->req->chan);
    if (verdict == RL_TCP_HDR_OK) return 1;
    if (verdict == RL_TCP_HDR_CORRUPT)
        rl_treq_fail(p->req, RINGLET_ERR_REMOTE, "receive from rank %d: corrupt stream (bad part header)", c->peer);
    else if (verdict == RL_TCP_HDR_CHANNEL)
        rl_treq_fail(p->req, RINGLET_ERR_INVALID_USAGE, "receive from rank %d: " RL_CHAN_MISMATCH_FMT, c->peer,
                     rl_chan_name(p->hdr.chan), rl_chan_name(p->req->chan));
    else
        rl_treq_fail(p->req, RINGLET_ERR_INVALID_USAGE,
                     "receive from rank %d: the peer sent a message of %llu bytes, this rank expected %llu", c->peer,
                     (unsigned long long)p->hdr.total, (unsigned long long)p->req->len);
    atomic_store(&c->broken, 1);
    notify(c);
    return 0;
}

enum { STEP_DONE, STEP_AGAIN, STEP_FAILED };

/* Delayed ACKs for small messages on a receive socket. A socket that only receives is
 * never in Linux's interactive ("pingpong") mode, which only data sent back puts it in:
 * it answers each small message with an ACK segment of its own, a second pass through
 * the network stack for both ends (in the receiver's read, and in the sender's softirq).
 * TCP_QUICKACK = 0 puts the socket in that mode, where such an ACK waits and rides with
 * the next one due (every second small message, or second full segment). Over loopback
 * on the 2-core machine that took 14% off an 8-byte all-reduce of 2 ranks and 12-16% off
 * 4 KiB at 2 and 4 ranks, but made 32 KiB messages 10-20% slower; at 16 KiB it was even
 * (perf/results/2core-amd-2026-12-04-tcp-delayed-ack.txt). So a part of at most
 * TCP_DELACK_MAX payload bytes asks for the mode, a larger one leaves it (TCP_QUICKACK =
 * 1, which also sends an ACK owed), each at its first step. The kernel leaves the mode by
 * itself when a delayed ACK's timer fires (the socket idle for 40 ms or more), so a small
 * part asks again when the last ask is over 1 ms old. Called once per part, at its first
 * step, by its mover, which owns the socket's queue. */
#define TCP_DELACK_MAX (16 * 1024)
static void delay_acks(struct tcp_sock *s, size_t len) {
    int want = len <= TCP_DELACK_MAX;
    if (!want && !s->acks_delayed) return;
    double now = rl_now();
    if (want && s->acks_delayed && now - s->acks_delayed_at < 1e-3) return;
    int quick = !want;
    setsockopt(s->fd, IPPROTO_TCP, TCP_QUICKACK, &quick, sizeof quick);
    s->acks_delayed = want;
    s->acks_delayed_at = now;
}

/* Moves as much of part p (header, then payload) as the socket takes or has now, never
 * blocking: one system call for both while both fit. A receive may read payload before
 * it checks the header; on a mismatch the request fails and the connection is broken,
 * so those bytes are never taken for data. */
static int part_step(struct tcp_conn *c, struct tcp_sock *s, struct tcp_part *p) {
    /* The header's wire bytes after the header itself: zeroes sent, and read into a sink. */
    _Static_assert(RL_TCP_HDR_WIRE >= sizeof(rl_tcp_hdr) && RL_TCP_HDR_WIRE % 64 == 0, "header on the wire");
    enum { PAD = RL_TCP_HDR_WIRE - sizeof(rl_tcp_hdr) };
    static const char zeroes[PAD];
    static _Thread_local char sink[PAD];
    const size_t H = sizeof p->hdr, W = RL_TCP_HDR_WIRE;
    if (!c->is_send && p->done == 0 && p->hdr.pad[0]) {
        p->hdr.pad[0] = 0;
        delay_acks(s, p->len);
    }
    while (p->done < W + p->len) {
        struct iovec iov[3];
        size_t n = 0, off = p->done < W ? 0 : p->done - W;
        if (p->done < H) iov[n++] = (struct iovec){(char *)&p->hdr + p->done, H - p->done};
        if (p->done < W) {
            size_t at = p->done > H ? p->done - H : 0;
            iov[n++] = (struct iovec){c->is_send ? (char *)zeroes + at : sink + at, PAD - at};
        }
        if (off < p->len) iov[n++] = (struct iovec){p->ptr + off, p->len - off};
        struct msghdr m = {.msg_iov = iov, .msg_iovlen = n};
        ssize_t got = c->is_send ? sendmsg(s->fd, &m, MSG_NOSIGNAL) : recvmsg(s->fd, &m, 0);
        if (got < 0 && errno == EINTR) continue;
        if (got < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return STEP_AGAIN;
        if (got <= 0) {
            int e = got < 0 ? errno : 0;
            part_fail(c, p, got == 0 || e == ECONNRESET || e == EPIPE ? RL_IO_EOF : RL_IO_ERR, e);
            return STEP_FAILED;
        }
        size_t before = p->done;
        p->done += (size_t)got;
        if (!c->is_send && before < H && p->done >= H && !hdr_ok(c, p)) return STEP_FAILED;
    }
    return STEP_DONE;
}

/* A part that must not move (the communicator stopped, or the stream broke): failed, 1. */
static int part_refused(struct tcp_conn *c, struct tcp_sock *s, struct tcp_part *p) {
    if (atomic_load(c->ctx->in.stop)) {
        part_fail(c, p, RL_IO_STOPPED, 0);
        return 1;
    }
    if (!conn_stopped(c, s)) return 0;
    rl_treq_fail(p->req, RINGLET_ERR_REMOTE, "%s rank %d: connection no longer usable",
                 c->is_send ? "send to" : "receive from", c->peer);
    return 1;
}

/* The thread's way: steps, sleeping in poll while the socket is not ready. Waits are
 * bounded by the communicator: it sets *stop on timeout or failure. A connection broken
 * meanwhile (another socket's part of the same message found a length mismatch) ends
 * the part too: its bytes would never come, and the request keeps the first failure. */
static void part_run(struct tcp_conn *c, struct tcp_sock *s, struct tcp_part *p) {
    while (part_step(c, s, p) == STEP_AGAIN) {
        if (part_refused(c, s, p)) return;
        struct pollfd pf = {s->fd, c->is_send ? POLLOUT : POLLIN, 0};
        poll(&pf, 1, 100);
    }
}

/* Gives the socket's queue to its thread (caller holds s->mu). */
static void to_thread(struct tcp_sock *s) {
    int owner = atomic_load_explicit(&s->owner, memory_order_relaxed);
    if (owner == SOCK_POLLERS) atomic_fetch_sub(&s->conn->ctx->npolled, 1);
    if (owner != SOCK_THREAD) atomic_fetch_add(&s->conn->ctx->nthreaded, 1);
    atomic_store(&s->owner, SOCK_THREAD);
    pthread_cond_signal(&s->cv);
}

/* The pollers' turn (caller holds s->mu, the pollers own the queue): moves parts in order
 * until the socket would block. Returns the parts that ended (linked by next), to be
 * finished without the mutex; an empty queue is nobody's. */
static struct tcp_part *pollers_step(struct tcp_conn *c, struct tcp_sock *s) {
    struct tcp_part *ended = NULL, **last = &ended;
    while (s->head) {
        struct tcp_part *p = s->head;
        if (!part_refused(c, s, p) && part_step(c, s, p) == STEP_AGAIN) return ended;
        s->head = p->next;
        if (!s->head) s->tail = NULL;
        p->next = NULL;
        *last = p;
        last = &p->next;
    }
    atomic_store(&s->owner, SOCK_IDLE);
    atomic_fetch_sub(&c->ctx->npolled, 1);
    return ended;
}

/* Finishes the parts pollers_step returned; 1 if there were any. */
static int finish_ended(struct tcp_conn *c, struct tcp_part *p) {
    int any = p != NULL;
    while (p) {
        struct tcp_part *next = p->next; /* p may be reused once finished */
        part_finish(c, p);
        p = next;
    }
    return any;
}

/* The thread is done with socket s's queue if it is empty (caller holds s->mu): nobody's. */
static void thread_done_if_empty(struct tcp_conn *c, struct tcp_sock *s) {
    if (atomic_load_explicit(&s->owner, memory_order_relaxed) != SOCK_THREAD || s->head) return;
    atomic_store(&s->owner, SOCK_IDLE);
    atomic_fetch_sub(&c->ctx->nthreaded, 1);
}

static void *sock_thread(void *arg) {
    struct tcp_sock *s = arg;
    struct tcp_conn *c = s->conn;
    for (;;) {
        pthread_mutex_lock(&s->mu);
        thread_done_if_empty(c, s);
        int mine = 0;
        while (!(mine = atomic_load_explicit(&s->owner, memory_order_relaxed) == SOCK_THREAD && s->head) &&
               !atomic_load(&s->quit))
            pthread_cond_wait(&s->cv, &s->mu);
        struct tcp_part *p = mine ? s->head : NULL;
        if (p) {
            s->head = p->next;
            if (!s->head) s->tail = NULL;
        }
        pthread_mutex_unlock(&s->mu);
        if (!p) break; /* quit, nothing left */
        if (!part_refused(c, s, p)) part_run(c, s, p);
        /* Give the socket up before the part's end wakes its waiter: the next message it
         * posts is then the pollers' (the waiter, on this core too, runs first and would
         * find the thread still owning the socket: the next wait would sleep at once, and
         * so on, one thread hop a message). */
        pthread_mutex_lock(&s->mu);
        thread_done_if_empty(c, s);
        pthread_mutex_unlock(&s->mu);
        part_finish(c, p);
    }
    return NULL;
}

/* Cores per pair of socket threads (a sending and a receiving one) of every rank on this
 * host (LOCAL_WORLD_SIZE as torchrun and ringlet-run set it, or Open MPI's); 0: fewer
 * cores than that. */
static long cores_per_socket_threads(void) {
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    long local = rl_env_int("LOCAL_WORLD_SIZE", 0, 0, 1 << 20);
    if (!local) local = rl_env_int("OMPI_COMM_WORLD_LOCAL_SIZE", 1, 1, 1 << 20);
    return cores / (2 * (local > 0 ? local : 1));
}

/* Sockets per peer when RINGLET_NSOCKS_PERPEER is unset: enough streams to use the
 * cores (n: cores_per_socket_threads), 1 to 8. */
static int default_nsocks(long n) { return n < 1 ? 1 : n > 8 ? 8 : (int)n; }

static ringlet_result_t tcp_init(const rl_transport_init *in, void **ctxp, void *blob, size_t *bloblen, char *err) {
    struct tcp_ctx *ctx = calloc(1, sizeof *ctx);
    if (!ctx) return snprintf(err, RL_ERR_MAX, "tcp: out of memory"), RINGLET_ERR_SYSTEM;
    ctx->in = *in;
    memcpy(ctx->secret, in->secret, 32);
    long per = cores_per_socket_threads();
    ctx->nsocks = (int)rl_env_int("RINGLET_NSOCKS_PERPEER", default_nsocks(per), 1, TCP_MAX_SOCKS);
    ctx->bufsize = (int)rl_env_int("RINGLET_SOCKET_BUFSIZE", 0, 0, 1 << 30);
    ctx->inline_max = (size_t)rl_env_int("RINGLET_TCP_INLINE_BYTES",
                                         per >= 1 ? TCP_INLINE_MAX : RL_TCP_INLINE_NOLIMIT, 0,
                                         RL_TCP_INLINE_NOLIMIT);
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
    ctx->pending_attempt = calloc((size_t)in->nranks, 16);
    if (!ctx->pending_fds || !ctx->peer_nsocks || !ctx->pending_attempt ||
        rl_gate_init(&ctx->gate, ctx->lfd, sizeof(rl_tcp_hello)) != 0) {
        free(ctx->pending_fds);
        free(ctx->peer_nsocks);
        free(ctx->pending_attempt);
        rl_gate_fini(&ctx->gate);
        close(ctx->lfd);
        free(ctx);
        return snprintf(err, RL_ERR_MAX, "tcp: out of memory"), RINGLET_ERR_SYSTEM;
    }
    for (size_t i = 0; i < (size_t)in->nranks * (size_t)ctx->nsocks; i++) ctx->pending_fds[i] = -1;
    pthread_mutex_init(&ctx->mu, NULL);
    rl_tcp_blob b;
    memset(&b, 0, sizeof b);
    b.addr = ctx->addr;
    b.nsocks = ctx->nsocks;
    if (rl_random_bytes(ctx->listener, sizeof ctx->listener) != 0) {
        free(ctx->pending_fds);
        free(ctx->peer_nsocks);
        free(ctx->pending_attempt);
        rl_gate_fini(&ctx->gate);
        close(ctx->lfd);
        pthread_mutex_destroy(&ctx->mu);
        free(ctx);
        return snprintf(err, RL_ERR_MAX, "tcp: no random bytes for the listener's id"), RINGLET_ERR_SYSTEM;
    }
    memcpy(b.listener, ctx->listener, sizeof b.listener);
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
    pthread_mutex_lock(&c->ctx->mu);
    c->next = c->ctx->conns;
    c->ctx->conns = c;
    pthread_mutex_unlock(&c->ctx->mu);
    return RINGLET_SUCCESS;
}

static void tcp_close(void *connp) {
    struct tcp_conn *c = connp;
    if (!c) return;
    /* Out of the pollers' sight first (they walk the list under ctx->mu). */
    pthread_mutex_lock(&c->ctx->mu);
    for (struct tcp_conn **q = &c->ctx->conns; *q; q = &(*q)->next)
        if (*q == c) {
            *q = c->next;
            break;
        }
    pthread_mutex_unlock(&c->ctx->mu);
    for (int i = 0; i < c->nsocks; i++) {
        struct tcp_sock *s = &c->socks[i];
        if (s->started) {
            pthread_mutex_lock(&s->mu);
            atomic_store(&s->quit, 1);
            to_thread(s); /* which fails everything still queued */
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
    /* One nonce for the attempt's hellos: its number, then random bytes. A connect that
     * failed part-way here left sockets in the peer's backlog; the peer drops them when
     * hellos of a later attempt come (hello_arrived). */
    uint8_t attempt[16];
    uint64_t number = atomic_fetch_add(&ctx->attempts, 1) + 1;
    memcpy(attempt, &number, 8);
    rl_random_bytes(attempt + 8, 8);
    for (int i = 0; i < c->nsocks; i++) {
        rl_io_t r = rl_sock_connect(&b.addr, rl_sockaddr_len(&b.addr), deadline, ctx->in.stop, &c->socks[i].fd);
        if (r == RL_IO_ERR) { /* this rank's own failure, not the peer's */
            int e = -c->socks[i].fd;
            c->socks[i].fd = -1;
            snprintf(err, RL_ERR_MAX, "tcp: connect to rank %d failed here: %s", peer, strerror(e));
            tcp_close(c);
            return RINGLET_ERR_SYSTEM;
        }
        if (r == RL_IO_OK) {
            rl_sock_tune(c->socks[i].fd, ctx->bufsize);
            rl_tcp_hello h;
            memset(&h, 0, sizeof h);
            h.magic = TCP_MAGIC;
            h.from = ctx->in.rank;
            h.to = peer;
            h.index = i;
            h.nsocks = c->nsocks;
            memcpy(h.listener, b.listener, sizeof h.listener);
            memcpy(h.nonce, attempt, sizeof h.nonce);
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

/* A whole hello arrived on fd (hello_gate.h): the connection is filed under (rank,
 * index) if it is genuine; strangers and garbage are closed and logged. */
static void hello_arrived(void *arg, int fd, const void *hello) {
    struct tcp_ctx *ctx = arg;
    rl_tcp_hello h;
    memcpy(&h, hello, sizeof h);
    if (rl_tcp_check_hello(ctx->secret, ctx->listener, &h, ctx->in.rank, ctx->in.nranks, ctx->nsocks,
                           ctx->peer_nsocks) != 0) {
        RL_WARN(ctx->in.rank, "tcp: refused a connection that did not authenticate (bad hello)");
        close(fd);
        return;
    }
    int *slots = &ctx->pending_fds[(size_t)h.from * (size_t)ctx->nsocks];
    uint8_t *pending = &ctx->pending_attempt[(size_t)h.from * 16];
    if (ctx->peer_nsocks[h.from] && memcmp(pending, h.nonce, 16) != 0) {
        uint64_t now, was;
        memcpy(&now, h.nonce, 8);
        memcpy(&was, pending, 8);
        if (now <= was) { /* of an earlier attempt (or a forged number): the pending one stays */
            RL_INFO(ctx->in.rank, "tcp: a connection of an earlier attempt of rank %d's refused", h.from);
            close(fd);
            return;
        }
        /* A later attempt: the earlier one failed on the peer's side part-way, and the
         * sockets it had made are dead (they would be read as the connection's). */
        int n = 0;
        for (int i = 0; i < ctx->nsocks; i++)
            if (slots[i] >= 0) close(slots[i]), slots[i] = -1, n++;
        ctx->peer_nsocks[h.from] = 0;
        RL_INFO(ctx->in.rank, "tcp: rank %d connects again; the %d socket(s) of its failed attempt are dropped",
                h.from, n);
    }
    int *slot = &slots[h.index];
    if (*slot >= 0) {
        RL_WARN(ctx->in.rank, "tcp: duplicate connection from rank %d socket %d refused", h.from, h.index);
        close(fd);
        return;
    }
    rl_sock_tune(fd, ctx->bufsize);
    *slot = fd;
    ctx->peer_nsocks[h.from] = h.nsocks;
    memcpy(pending, h.nonce, 16);
}

/* Whether every socket of peer's connection was accepted (each hello tells how many). */
static int have_all(const struct tcp_ctx *ctx, int peer) {
    const int *slots = &ctx->pending_fds[(size_t)peer * (size_t)ctx->nsocks];
    int have = 0, want = ctx->peer_nsocks[peer];
    for (int i = 0; i < ctx->nsocks; i++) have += slots[i] >= 0;
    return want && have == want;
}

static int tcp_accept_ready(void *ctxp, int peer) {
    struct tcp_ctx *ctx = ctxp;
    int e;
    if (have_all(ctx, peer)) return 1;
    /* an error: the accept says it */
    return rl_gate_step(&ctx->gate, hello_arrived, ctx, "tcp", ctx->in.rank, &e) != RL_IO_OK || have_all(ctx, peer);
}

static ringlet_result_t tcp_accept(void *ctxp, int peer, void **connp, char *err) {
    struct tcp_ctx *ctx = ctxp;
    int *slots = &ctx->pending_fds[(size_t)peer * (size_t)ctx->nsocks];
    double deadline = rl_now() + ctx->in.timeout_s;
    for (;;) {
        int e;
        rl_io_t r = rl_gate_step(&ctx->gate, hello_arrived, ctx, "tcp", ctx->in.rank, &e);
        if (have_all(ctx, peer)) break;
        if (r == RL_IO_OK && ctx->in.stop && atomic_load(ctx->in.stop)) r = RL_IO_STOPPED;
        if (r == RL_IO_OK && rl_now() >= deadline) r = RL_IO_TIMEOUT;
        if (r != RL_IO_OK) return rl_transport_accept_failed("tcp", peer, r, e, err);
        rl_gate_wait(&ctx->gate, deadline);
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

/* Queues part p on socket s. inl: the message is this one part, small enough for the
 * callers to move it: unless the thread has the socket, the pollers take it (this
 * thread moves what the socket takes now); otherwise the thread gets the queue. */
static void post_part(struct tcp_conn *c, struct tcp_sock *s, struct tcp_part *p, int inl) {
    p->next = NULL;
    struct tcp_part *ended = NULL;
    pthread_mutex_lock(&s->mu);
    if (s->tail) s->tail->next = p;
    else s->head = p;
    s->tail = p;
    int owner = atomic_load_explicit(&s->owner, memory_order_relaxed);
    if (inl && owner != SOCK_THREAD && !conn_stopped(c, s)) {
        if (owner == SOCK_IDLE) {
            atomic_store(&s->owner, SOCK_POLLERS);
            atomic_fetch_add(&c->ctx->npolled, 1);
        }
        /* A small receive is most often posted before its peer's send (a collective posts
         * its receives first): reading now would find nothing, and the system call costs
         * 3-4% of an 8-byte call; the waiter's first poll reads it. A large one is read
         * from now on, so that the sender's stream never stalls on a full socket. */
        if (c->is_send || p->len > TCP_READ_AT_POST) ended = pollers_step(c, s);
    } else {
        to_thread(s);
    }
    pthread_mutex_unlock(&s->mu);
    finish_ended(c, ended);
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
    /* Message k starts on socket k % nsocks, striped or not, on both ends: the receive of
     * message k reads the first header of the sender's message k, whatever their lengths
     * (a striped one started on socket 0 read another message's parts where the two ends'
     * lengths differed: taken for its own, or waited on a socket with nothing coming). */
    int first = (int)(c->nmsgs % (uint64_t)c->nsocks);
    c->nmsgs++;
    rl_treq_start(req, len, nparts);
    /* Parts are 4 KiB multiples, the last takes the rest. */
    size_t per = ((len / (size_t)nparts) + 4095) & ~(size_t)4095, off = 0;
    for (int i = 0; i < nparts; i++) {
        size_t n = i == nparts - 1 ? len - off : (per < len - off ? per : len - off);
        parts[i].req = req;
        parts[i].ptr = (char *)buf + off;
        parts[i].len = n;
        parts[i].done = 0;
        parts[i].hdr = (rl_tcp_hdr){len, n, TCP_MAGIC, req->chan, {!c->is_send}};
        off += n;
    }
    int inl = nparts == 1 && len <= c->ctx->inline_max;
    for (int i = 0; i < nparts; i++) post_part(c, &c->socks[(first + i) % c->nsocks], &parts[i], inl);
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

/* A poller's turn at socket s, if the pollers own it and nobody else holds it now:
 * RL_PROGRESS_MOVED when a part ended (done or failed). */
static int sock_poll(struct tcp_conn *c, struct tcp_sock *s) {
    if (atomic_load_explicit(&s->owner, memory_order_relaxed) != SOCK_POLLERS || pthread_mutex_trylock(&s->mu) != 0)
        return 0;
    struct tcp_part *ended = NULL;
    if (atomic_load_explicit(&s->owner, memory_order_relaxed) == SOCK_POLLERS) ended = pollers_step(c, s);
    pthread_mutex_unlock(&s->mu);
    return finish_ended(c, ended) ? RL_PROGRESS_MOVED : 0;
}

/* Moves the parts the pollers own; RL_PROGRESS_POLL while some are left, |
 * RL_PROGRESS_THREADED while a socket's thread has parts too. */
static int tcp_progress(void *ctxp) {
    struct tcp_ctx *ctx = ctxp;
    if (!atomic_load_explicit(&ctx->npolled, memory_order_relaxed)) return 0;
    int moved = 0;
    if (pthread_mutex_trylock(&ctx->mu) == 0) { /* else another thread polls them now */
        for (struct tcp_conn *c = ctx->conns; c; c = c->next)
            for (int i = 0; i < c->nsocks; i++) moved |= sock_poll(c, &c->socks[i]);
        pthread_mutex_unlock(&ctx->mu);
    }
    return moved | (atomic_load_explicit(&ctx->npolled, memory_order_relaxed) ? RL_PROGRESS_POLL : 0) |
           (atomic_load_explicit(&ctx->nthreaded, memory_order_relaxed) ? RL_PROGRESS_THREADED : 0);
}

/* A waiter is going to sleep: the threads take the pollers' parts over, and ring the bell. */
static void tcp_park(void *ctxp) {
    struct tcp_ctx *ctx = ctxp;
    if (!atomic_load_explicit(&ctx->npolled, memory_order_relaxed)) return;
    pthread_mutex_lock(&ctx->mu);
    for (struct tcp_conn *c = ctx->conns; c; c = c->next)
        for (int i = 0; i < c->nsocks; i++) {
            struct tcp_sock *s = &c->socks[i];
            if (atomic_load_explicit(&s->owner, memory_order_relaxed) != SOCK_POLLERS) continue;
            pthread_mutex_lock(&s->mu);
            if (atomic_load_explicit(&s->owner, memory_order_relaxed) == SOCK_POLLERS) to_thread(s);
            pthread_mutex_unlock(&s->mu);
        }
    pthread_mutex_unlock(&ctx->mu);
}

static void tcp_fini(void *ctxp) {
    struct tcp_ctx *ctx = ctxp;
    if (!ctx) return;
    for (size_t i = 0; i < (size_t)ctx->in.nranks * (size_t)ctx->nsocks; i++)
        if (ctx->pending_fds[i] >= 0) close(ctx->pending_fds[i]);
    free(ctx->pending_fds);
    free(ctx->peer_nsocks);
    free(ctx->pending_attempt);
    rl_gate_fini(&ctx->gate);
    close(ctx->lfd);
    pthread_mutex_destroy(&ctx->mu);
    free(ctx);
}

const rl_transport_ops rl_transport_tcp = {
    .name = "tcp",
    .init = tcp_init,
    .connect = tcp_connect,
    .accept = tcp_accept,
    .accept_ready = tcp_accept_ready,
    .isend = tcp_isend,
    .irecv = tcp_irecv,
    .reg_mr = rl_transport_reg_none,
    .dereg_mr = rl_transport_dereg_none,
    .close = tcp_close,
    .fini = tcp_fini,
    .progress = tcp_progress,
    .park = tcp_park,
};
