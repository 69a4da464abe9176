/* Shared-memory transport for ranks on one host.
 *
 * Each rank creates one POSIX shared-memory segment at init (/dev/shm/ringlet-<pid>-<random>,
 * mode 0600): a header page, then one inbound FIFO per possible sender rank. The file is
 * sparse: only the FIFOs of peers that connect ever get pages. A sender maps its own
 * FIFO in the receiver's segment. Wake-ups go through the peer's doorbell
 * (rl_transport_init's peer_bell).
 *
 * A FIFO is a ring of nslots slots of slot_bytes each. A message is cut into pieces of
 * at most one slot (a message of 0 bytes is one empty piece); every piece carries the
 * message's length, so a receive posted with another length fails on both ends. The
 * piece at position p goes to slot p % nslots, and its header's seq becomes p + 1 after
 * the piece is written (release; the receiver polls that one cache line, acquire). The
 * receiver owns tail, the count of slots the sender may reuse; the sender reads it only
 * when its cached copy says the FIFO is full.
 *
 * There are no threads: isend/irecv copy what fits at once, and progress() (called by
 * whoever waits) copies the rest. Moving data rings the peer's doorbell.
 *
 * Segments are unlinked at fini; one left behind by a killed process is removed by the
 * next init on the host that finds its creator gone.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include "log.h"
#include "sha256.h"
#include "shm.h"
#include "shmseg.h"
#include "transport.h"
#include "util.h"

#define SHM_MAGIC RL_SHM_MAGIC
#define SHM_PAGE RL_SHM_PAGE
#define SHM_NAME_MAX 64
#define SHM_PREFIX "ringlet-"
#define FIFO_HDR RL_SHM_FIFO_HDR
#define SLOT_HDR RL_SHM_SLOT_HDR /* a small message shares its slot header's cache line */

typedef rl_shm_seg_hdr seg_hdr;

enum { SIDE_NONE = 0, SIDE_OPEN = 1, SIDE_CLOSED = 2 };

typedef struct {
    _Alignas(64) atomic_ullong tail; /* pieces consumed (receiver); the sender may reuse their slots */
    _Alignas(64) atomic_int sender;  /* SIDE_*: connect sets OPEN after writing sender_seg */
    atomic_int receiver;
    atomic_int mismatch; /* the receiver saw a length mismatch: the sender fails too */
} fifo_hdr;

typedef struct {
    atomic_ullong seq; /* position + 1 once the piece is written (release) */
    uint64_t msg_len;
    uint64_t piece;
} slot_hdr;
_Static_assert(sizeof(slot_hdr) <= SLOT_HDR, "slot header too large");

_Static_assert(sizeof(fifo_hdr) <= FIFO_HDR, "FIFO header too large");
_Static_assert(sizeof(seg_hdr) <= SHM_PAGE, "segment header too large");

/* One posted message, kept in the request's private bytes. */
typedef struct shm_op {
    struct shm_op *next;
    rl_treq *req;
    char *buf;
    size_t len, off;
    int pieces; /* pieces moved so far (a 0-byte message still moves one) */
    int map;    /* irecv_map: lend the slot instead of copying */
    uint64_t piece_idx; /* map: the slot lent */
} shm_op;
_Static_assert(sizeof(shm_op) <= RL_TREQ_PRIV, "request private area too small");

struct shm_ctx;

typedef struct shm_conn {
    struct shm_ctx *ctx;
    struct shm_conn *next; /* the context's list */
    int peer, sending;
    fifo_hdr *f;
    char *slots;
    uint32_t nslots;
    uint64_t slot_bytes;
    void *fifo_map; /* sender: its FIFO mapped from the receiver's segment */
    size_t fifo_map_len;
    shm_op *head, *tail;
    /* receiver: pieces read so far; tail (what the sender may reuse) trails it while
     * a lent slot is held. sender: pieces written so far, and the last tail seen. */
    uint64_t rpos;
    uint64_t spos, tail_seen;
    unsigned char *held; /* [nslots]: slot lent to an irecv_map and not yet released */
} shm_conn;

typedef struct shm_ctx {
    rl_transport_init in;
    uint8_t secret[32];
    char name[SHM_NAME_MAX];
    int lock_fd;  /* holds the segment's lock while it lives (shmseg.h) */
    seg_hdr *seg; /* own segment, whole */
    size_t seg_len;
    uint32_t nslots;
    uint64_t slot_bytes, fifo_stride;
    pthread_mutex_t mu; /* connections and their queues */
    shm_conn *conns;
} shm_ctx;

static size_t slot_stride(uint64_t slot_bytes) { return SLOT_HDR + (size_t)slot_bytes; }

static void seg_tag(const uint8_t secret[32], const char *name, uint8_t out[32]) {
    rl_hmac_sha256(secret, 32, name, strlen(name), out);
}

/* ---- the segment header (shm.h) ---- */

uint64_t rl_shm_fifo_stride(uint32_t nslots, uint64_t slot_bytes) {
    size_t fifo = FIFO_HDR + (size_t)nslots * slot_stride(slot_bytes);
    return (fifo + SHM_PAGE - 1) / SHM_PAGE * SHM_PAGE;
}

int rl_shm_check_owner(const rl_shm_seg_hdr *h, int peer, const uint8_t tag[32]) {
    return h->magic != SHM_MAGIC || h->rank != peer || memcmp(h->tag, tag, 32) != 0 ? -1 : 0;
}

int rl_shm_check_layout(const rl_shm_seg_hdr *h, int nranks, rl_shm_geom *g) {
    rl_shm_seg_hdr c;
    memcpy(&c, h, sizeof c); /* once: the peer may write it meanwhile */
    /* Only the geometry shm_init writes: within these bounds nothing below overflows
     * (a slot size near 2^64, or slots x size wrapping, passed a plain "stride >= slots
     * x size" test and made the sender write past the FIFO it mapped). */
    if (c.nranks != nranks || c.nslots < RL_SHM_NSLOTS_MIN || c.nslots > RL_SHM_NSLOTS_MAX ||
        c.slot_bytes < RL_SHM_SLOT_MIN || c.slot_bytes > RL_SHM_SLOT_MAX || c.slot_bytes % 64 ||
        c.fifo_stride != rl_shm_fifo_stride(c.nslots, c.slot_bytes))
        return -1;
    g->nslots = c.nslots;
    g->slot_bytes = c.slot_bytes;
    g->fifo_stride = c.fifo_stride;
    return 0;
}

int rl_shm_check_piece(uint64_t msg_len, uint64_t piece, size_t len, size_t off, uint64_t slot_bytes) {
    return msg_len != len || piece > len - off || piece > slot_bytes ? -1 : 0;
}

static ringlet_result_t shm_init(const rl_transport_init *in, void **out, void *blob, size_t *bloblen, char *err) {
    if (rl_env_int("RINGLET_SHM_DISABLE", 0, 0, 1)) return snprintf(err, RL_ERR_MAX, "disabled by RINGLET_SHM_DISABLE"), RINGLET_ERR_SYSTEM;
    shm_ctx *x = calloc(1, sizeof *x);
    if (!x) return snprintf(err, RL_ERR_MAX, "out of memory"), RINGLET_ERR_SYSTEM;
    x->in = *in;
    memcpy(x->secret, in->secret, 32);
    pthread_mutex_init(&x->mu, NULL);
    x->slot_bytes = (uint64_t)rl_env_int("RINGLET_SHM_SLOT_SIZE", 256 << 10, RL_SHM_SLOT_MIN, RL_SHM_SLOT_MAX);
    x->slot_bytes = (x->slot_bytes + 63) & ~(uint64_t)63;
    x->nslots = (uint32_t)rl_env_int("RINGLET_SHM_NSLOTS", 8, RL_SHM_NSLOTS_MIN, RL_SHM_NSLOTS_MAX);
    x->fifo_stride = rl_shm_fifo_stride(x->nslots, x->slot_bytes);
    x->seg_len = SHM_PAGE + (size_t)in->nranks * x->fifo_stride;

    rl_shmseg_remove_stale();
    int fd = -1, e = rl_shmseg_create("shm", x->seg_len, x->name, &fd);
    if (e) {
        snprintf(err, RL_ERR_MAX, "shared memory segment of %zu bytes: %s", x->seg_len, strerror(e));
        free(x);
        return RINGLET_ERR_SYSTEM;
    }
    void *base = MAP_FAILED;
    if (posix_fallocate(fd, 0, SHM_PAGE) != 0) e = errno ? errno : ENOSPC;
    else base = mmap(NULL, x->seg_len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (!e && base == MAP_FAILED) e = errno;
    if (e) {
        snprintf(err, RL_ERR_MAX, "shared memory segment %s of %zu bytes: %s", x->name, x->seg_len, strerror(e));
        shm_unlink(x->name);
        close(fd);
        free(x);
        return RINGLET_ERR_SYSTEM;
    }
    x->lock_fd = fd;
    x->seg = base;
    x->seg->magic = SHM_MAGIC;
    x->seg->rank = in->rank;
    x->seg->nranks = in->nranks;
    x->seg->pid = (int32_t)getpid();
    x->seg->nslots = x->nslots;
    x->seg->slot_bytes = x->slot_bytes;
    x->seg->fifo_stride = x->fifo_stride;
    seg_tag(x->secret, x->name, x->seg->tag);
    memcpy(blob, x->name, SHM_NAME_MAX);
    *bloblen = SHM_NAME_MAX;
    *out = x;
    return RINGLET_SUCCESS;
}

/* Maps len bytes at off of the named segment, after checking it is the peer's and this
 * job's. The whole-segment length is read from its header. */
static ringlet_result_t map_peer(shm_ctx *x, const char *name, int peer, size_t off, size_t len, int reserve,
                                 void **out, seg_hdr **hdr, char *err) {
    int fd = shm_open(name, O_RDWR, 0);
    if (fd < 0) return snprintf(err, RL_ERR_MAX, "rank %d's shared memory %s: %s", peer, name, strerror(errno)), RINGLET_ERR_SYSTEM;
    ringlet_result_t rc = RINGLET_SUCCESS;
    seg_hdr *h = mmap(NULL, SHM_PAGE, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    uint8_t tag[32];
    seg_tag(x->secret, name, tag);
    if (h == MAP_FAILED) {
        h = NULL;
        rc = RINGLET_ERR_SYSTEM;
        snprintf(err, RL_ERR_MAX, "mapping rank %d's shared memory: %s", peer, strerror(errno));
    } else if (rl_shm_check_owner(h, peer, tag) != 0) {
        rc = RINGLET_ERR_SYSTEM;
        snprintf(err, RL_ERR_MAX, "shared memory %s is not rank %d's of this job (refused)", name, peer);
    } else if (len) {
        /* Reserve the pages now: a full /dev/shm is an error here, not a SIGBUS later. */
        int e = reserve ? posix_fallocate(fd, (off_t)off, (off_t)len) : 0;
        void *m = e ? MAP_FAILED : mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, (off_t)off);
        if (m == MAP_FAILED) {
            rc = RINGLET_ERR_SYSTEM;
            snprintf(err, RL_ERR_MAX, "shared memory for rank %d (%zu bytes in /dev/shm): %s", peer, len,
                     strerror(e ? e : errno));
        } else {
            *out = m;
        }
    }
    close(fd);
    if (rc && h) munmap(h, SHM_PAGE);
    else *hdr = h;
    return rc;
}

static shm_conn *conn_new(shm_ctx *x, int peer, int sending) {
    shm_conn *k = calloc(1, sizeof *k);
    if (!k) return NULL;
    k->ctx = x;
    k->peer = peer;
    k->sending = sending;
    return k;
}

static void conn_link(shm_ctx *x, shm_conn *k) {
    pthread_mutex_lock(&x->mu);
    k->next = x->conns;
    x->conns = k;
    pthread_mutex_unlock(&x->mu);
}

static ringlet_result_t shm_connect(void *ctx, int peer, const void *blob, size_t bloblen, void **out, char *err) {
    shm_ctx *x = ctx;
    if (bloblen != SHM_NAME_MAX) return snprintf(err, RL_ERR_MAX, "rank %d's shared-memory address is malformed", peer), RINGLET_ERR_INTERNAL;
    char name[SHM_NAME_MAX];
    memcpy(name, blob, SHM_NAME_MAX);
    name[SHM_NAME_MAX - 1] = 0;
    /* Learn the receiver's FIFO geometry from its header, then map our FIFO in it. */
    void *unused;
    seg_hdr *h = NULL;
    ringlet_result_t rc = map_peer(x, name, peer, 0, 0, 0, &unused, &h, err);
    if (rc) return rc;
    rl_shm_geom g;
    int bad = rl_shm_check_layout(h, x->in.nranks, &g);
    munmap(h, SHM_PAGE);
    if (bad) return snprintf(err, RL_ERR_MAX, "rank %d's shared memory has a bad layout", peer), RINGLET_ERR_SYSTEM;
    size_t stride = g.fifo_stride, off = SHM_PAGE + (size_t)x->in.rank * stride;
    shm_conn *k = conn_new(x, peer, 1);
    void *fm = NULL;
    seg_hdr *h2 = NULL;
    rc = k ? map_peer(x, name, peer, off, stride, 1, &fm, &h2, err) : RINGLET_ERR_SYSTEM;
    if (rc) {
        if (!k) snprintf(err, RL_ERR_MAX, "out of memory");
        free(k);
        return rc;
    }
    munmap(h2, SHM_PAGE);
    k->fifo_map = fm;
    k->fifo_map_len = stride;
    k->f = fm;
    k->nslots = g.nslots;
    k->slot_bytes = g.slot_bytes;
    k->slots = (char *)fm + FIFO_HDR;
    /* A FIFO is used by one sender connection for the job's life. */
    int none = SIDE_NONE;
    if (atomic_load(&k->f->sender) != SIDE_NONE) none = -1;
    if (none < 0 || !atomic_compare_exchange_strong(&k->f->sender, &none, SIDE_OPEN)) {
        munmap(fm, stride);
        free(k);
        return snprintf(err, RL_ERR_MAX, "shared-memory FIFO to rank %d is already in use", peer), RINGLET_ERR_INTERNAL;
    }
    conn_link(x, k);
    *out = k;
    return RINGLET_SUCCESS;
}

static ringlet_result_t shm_accept(void *ctx, int peer, void **out, char *err) {
    shm_ctx *x = ctx;
    shm_conn *k = conn_new(x, peer, 0);
    if (!k) return snprintf(err, RL_ERR_MAX, "out of memory"), RINGLET_ERR_SYSTEM;
    k->f = (fifo_hdr *)((char *)x->seg + SHM_PAGE + (size_t)peer * x->fifo_stride);
    k->nslots = x->nslots;
    k->slot_bytes = x->slot_bytes;
    k->slots = (char *)k->f + FIFO_HDR;
    k->held = calloc(k->nslots, 1);
    if (!k->held) {
        free(k);
        return snprintf(err, RL_ERR_MAX, "out of memory"), RINGLET_ERR_SYSTEM;
    }
    conn_link(x, k);
    *out = k;
    return RINGLET_SUCCESS;
}

static char *slot_at(shm_conn *k, uint64_t i) { return k->slots + (size_t)(i % k->nslots) * slot_stride(k->slot_bytes); }

/* Wakes the peer if it sleeps (it polls for what was just published before it sleeps). */
static void ring_peer(shm_conn *k) {
    rl_bell *b = k->ctx->in.peer_bell ? k->ctx->in.peer_bell(k->ctx->in.bell_arg, k->peer) : NULL;
    if (b) rl_bell_ring_sleeper(b);
}

static void op_done(shm_conn *k) {
    shm_op *o = k->head;
    k->head = o->next;
    if (!k->head) k->tail = NULL;
    rl_treq_part_done(o->req);
    k->ctx->in.notify(k->ctx->in.notify_arg);
}

static void fail_all(shm_conn *k, ringlet_result_t code, const char *why) {
    while (k->head) {
        rl_treq_fail(k->head->req, code, "%s rank %d over shared memory: %s", k->sending ? "sending to" : "receiving from",
                     k->peer, why);
        op_done(k);
    }
}

/* Moves what fits; returns non-zero if anything moved. Caller holds ctx->mu. */
static int progress_send(shm_conn *k) {
    int moved = 0;
    while (k->head) {
        shm_op *o = k->head;
        if (atomic_load(&k->f->mismatch)) {
            fail_all(k, RINGLET_ERR_INVALID_USAGE, "the receiver posted a receive of another length");
            return 1;
        }
        if (atomic_load(&k->f->receiver) == SIDE_CLOSED) {
            fail_all(k, RINGLET_ERR_REMOTE, "the peer closed the connection");
            return 1;
        }
        uint64_t h = k->spos;
        if (h - k->tail_seen >= k->nslots) k->tail_seen = atomic_load_explicit(&k->f->tail, memory_order_acquire);
        int pushed = 0;
        while (h - k->tail_seen < k->nslots && (o->off < o->len || o->pieces == 0)) {
            slot_hdr *sh = (slot_hdr *)slot_at(k, h);
            size_t piece = o->len - o->off < k->slot_bytes ? o->len - o->off : (size_t)k->slot_bytes;
            sh->msg_len = o->len;
            sh->piece = piece;
            if (piece) memcpy((char *)sh + SLOT_HDR, o->buf + o->off, piece);
            o->off += piece;
            o->pieces++;
            atomic_store_explicit(&sh->seq, h + 1, memory_order_release);
            h++;
            pushed = 1;
        }
        k->spos = h;
        if (pushed) {
            moved = 1;
            ring_peer(k);
        }
        if (o->off == o->len && o->pieces > 0) op_done(k);
        else break;
    }
    return moved;
}

/* Frees for the sender every piece read and not lent; returns non-zero if tail moved. */
static int advance_tail(shm_conn *k) {
    uint64_t t0 = atomic_load_explicit(&k->f->tail, memory_order_relaxed), t = t0;
    while (t < k->rpos && !k->held[t % k->nslots]) t++;
    if (t == t0) return 0;
    atomic_store_explicit(&k->f->tail, t, memory_order_release);
    return 1;
}

static int progress_recv(shm_conn *k) {
    int moved = 0;
    while (k->head) {
        shm_op *o = k->head;
        int popped = 0;
        while (o->off < o->len || o->pieces == 0) {
            char *s = slot_at(k, k->rpos);
            slot_hdr *shp = (slot_hdr *)s;
            if (atomic_load_explicit(&shp->seq, memory_order_acquire) != k->rpos + 1) break;
            struct {
                uint64_t msg_len, piece;
            } sh = {shp->msg_len, shp->piece};
            if (rl_shm_check_piece(sh.msg_len, sh.piece, o->len, o->off, k->slot_bytes) != 0) {
                atomic_store(&k->f->mismatch, 1);
                ring_peer(k);
                char why[160];
                snprintf(why, sizeof why, "length mismatch: the peer sent %llu bytes, the receive was posted for %zu",
                         (unsigned long long)sh.msg_len, o->len);
                fail_all(k, RINGLET_ERR_INVALID_USAGE, why);
                return 1;
            }
            if (o->map) {
                /* One piece (irecv_map checked the length): lend the slot. */
                o->req->mapped = s + SLOT_HDR;
                o->piece_idx = k->rpos;
                k->held[k->rpos % k->nslots] = 1;
            } else if (sh.piece) {
                memcpy(o->buf + o->off, s + SLOT_HDR, sh.piece);
            }
            o->off += sh.piece;
            o->pieces++;
            k->rpos++;
            popped = 1;
        }
        if (popped) {
            moved = 1;
            if (advance_tail(k)) ring_peer(k);
        }
        if (o->off == o->len && o->pieces > 0) {
            op_done(k);
        } else {
            if (!popped && atomic_load(&k->f->sender) == SIDE_CLOSED &&
                atomic_load(&((slot_hdr *)slot_at(k, k->rpos))->seq) != k->rpos + 1)
                fail_all(k, RINGLET_ERR_REMOTE, "the peer closed the connection");
            break;
        }
    }
    return moved;
}

static int progress_locked(shm_ctx *x) {
    int moved = 0;
    int stop = atomic_load(x->in.stop);
    for (shm_conn *k = x->conns; k; k = k->next) {
        if (!k->head) continue;
        if (stop) {
            fail_all(k, RINGLET_ERR_REMOTE, "stopped (the communicator failed)");
            moved = 1;
        } else {
            moved |= k->sending ? progress_send(k) : progress_recv(k);
        }
    }
    return moved;
}

static int shm_progress(void *ctx) {
    shm_ctx *x = ctx;
    /* Another thread progressing already does this work. */
    if (pthread_mutex_trylock(&x->mu) != 0) return 0;
    int moved = progress_locked(x);
    pthread_mutex_unlock(&x->mu);
    return moved;
}

static ringlet_result_t post(shm_conn *k, void *buf, size_t len, rl_treq *req, int map) {
    shm_op *o = (shm_op *)req->priv;
    memset(o, 0, sizeof *o);
    o->req = req;
    o->buf = buf;
    o->len = len;
    o->map = map;
    req->mapped = NULL;
    rl_treq_start(req, len, 1);
    pthread_mutex_lock(&k->ctx->mu);
    if (k->tail) k->tail->next = o;
    else k->head = o;
    k->tail = o;
    if (k->head == o) {
        if (atomic_load(k->ctx->in.stop)) fail_all(k, RINGLET_ERR_REMOTE, "stopped (the communicator failed)");
        else if (k->sending) progress_send(k);
        else progress_recv(k);
    }
    pthread_mutex_unlock(&k->ctx->mu);
    return RINGLET_SUCCESS;
}

static ringlet_result_t shm_isend(void *conn, const void *buf, size_t len, void *mr, rl_treq *req) {
    (void)mr;
    return post(conn, (void *)buf, len, req, 0);
}

static ringlet_result_t shm_irecv(void *conn, void *buf, size_t len, void *mr, rl_treq *req) {
    (void)mr;
    return post(conn, buf, len, req, 0);
}

static ringlet_result_t shm_irecv_map(void *conn, size_t len, rl_treq *req) {
    shm_conn *k = conn;
    if (k->sending || len > k->slot_bytes) return RINGLET_ERR_INVALID_USAGE;
    return post(k, NULL, len, req, 1);
}

static void shm_release(void *conn, rl_treq *req) {
    shm_conn *k = conn;
    const shm_op *o = (const shm_op *)req->priv;
    pthread_mutex_lock(&k->ctx->mu);
    if (o->map && req->mapped) {
        k->held[o->piece_idx % k->nslots] = 0;
        if (advance_tail(k)) ring_peer(k);
    }
    pthread_mutex_unlock(&k->ctx->mu);
}

static ringlet_result_t shm_reg_mr(void *ctx, void *buf, size_t len, void **mr, char *err) {
    (void)ctx, (void)buf, (void)len, (void)err;
    *mr = NULL;
    return RINGLET_SUCCESS;
}

static void shm_dereg_mr(void *ctx, void *mr) { (void)ctx, (void)mr; }

static void shm_close(void *conn) {
    shm_conn *k = conn;
    shm_ctx *x = k->ctx;
    pthread_mutex_lock(&x->mu);
    fail_all(k, RINGLET_ERR_REMOTE, "the connection was closed");
    for (shm_conn **p = &x->conns; *p; p = &(*p)->next)
        if (*p == k) {
            *p = k->next;
            break;
        }
    pthread_mutex_unlock(&x->mu);
    if (k->sending) atomic_store(&k->f->sender, SIDE_CLOSED);
    else atomic_store(&k->f->receiver, SIDE_CLOSED);
    rl_bell *b = x->in.peer_bell ? x->in.peer_bell(x->in.bell_arg, k->peer) : NULL;
    if (b) rl_bell_ring(b);
    if (k->fifo_map) munmap(k->fifo_map, k->fifo_map_len);
    free(k->held);
    free(k);
}

static void shm_fini(void *ctx) {
    shm_ctx *x = ctx;
    while (x->conns) shm_close(x->conns);
    munmap(x->seg, x->seg_len);
    shm_unlink(x->name);
    close(x->lock_fd);
    pthread_mutex_destroy(&x->mu);
    free(x);
}

const rl_transport_ops rl_transport_shm = {
    .name = "shm",
    .init = shm_init,
    .connect = shm_connect,
    .accept = shm_accept,
    .isend = shm_isend,
    .irecv = shm_irecv,
    .reg_mr = shm_reg_mr,
    .dereg_mr = shm_dereg_mr,
    .close = shm_close,
    .fini = shm_fini,
    .progress = shm_progress,
    .irecv_map = shm_irecv_map,
    .release = shm_release,
};
