/* Shared-memory transport for ranks on one host.
 *
 * Each rank creates one POSIX shared-memory segment at init (/dev/shm/ringlet-<pid>-<random>,
 * mode 0600): a header page, then one inbound FIFO per possible sender rank. The file is
 * sparse: only the FIFOs of peers that connect ever get pages. A sender maps its own
 * FIFO in the receiver's segment. Wake-ups go through the peer's doorbell
 * (rl_transport_init's peer_bell).
 *
 * A FIFO is a ring of nslots slots of slot_bytes each, run by slot_fifo.h: a message is
 * cut into slot-sized pieces, each carrying the message's length; the sender copies a
 * piece into its slot and publishes it, the receiver copies it out (or lends the slot
 * to irecv_map) and hands the slot back. Each slot starts with its record (the piece's
 * sequence number and lengths), so the receiver polls one cache line that a small
 * message shares.
 *
 * There are no threads: isend/irecv copy what fits at once, and progress() (called by
 * whoever waits) copies the rest. Moving data rings the peer's doorbell.
 *
 * Segments are unlinked at fini; one left behind by a killed process is removed by the
 * next communicator init on the host (comm.c) that finds its creator gone.
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
#include "posted.h"
#include "sha256.h"
#include "shm.h"
#include "shmseg.h"
#include "slot_fifo.h"
#include "transport.h"
#include "util.h"

#define SHM_MAGIC RL_SHM_MAGIC
#define SHM_PAGE RL_SHM_PAGE
#define SHM_NAME_MAX 64
#define SHM_PREFIX "ringlet-"
#define FIFO_HDR RL_SHM_FIFO_HDR
#define SLOT_HDR RL_SHM_SLOT_HDR /* a small message shares its slot header's cache line */

typedef rl_shm_seg_hdr seg_hdr;

/* A FIFO starts with its control block; each slot with its record. */
_Static_assert(sizeof(rl_fifo_ctl) <= FIFO_HDR, "FIFO header too large");
_Static_assert(sizeof(rl_fifo_rec) <= SLOT_HDR, "slot header too large");
_Static_assert(sizeof(seg_hdr) <= SHM_PAGE, "segment header too large");

/* One posted message, kept in the request's private bytes. */
typedef struct shm_op {
    rl_posted p;
    int pieces; /* pieces moved so far (a 0-byte message still moves one) */
} shm_op;
_Static_assert(sizeof(shm_op) <= RL_TREQ_PRIV, "request private area too small");

struct shm_ctx;

typedef struct shm_conn {
    struct shm_ctx *ctx;
    struct shm_conn *next; /* the context's list */
    int peer, sending;
    rl_fifo fifo; /* its records are the slots' headers */
    void *fifo_map; /* sender: its FIFO mapped from the receiver's segment */
    size_t fifo_map_len;
    rl_posted_q q;
    unsigned char *state; /* receiver: [nslots] of the FIFO */
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
    atomic_int again;   /* a progress call found mu taken: its holder looks once more */
    shm_conn *conns;
} shm_ctx;

static size_t slot_stride(uint64_t slot_bytes) { return SLOT_HDR + (size_t)slot_bytes; }

/* The FIFO at fifo (in a segment) as one end sees it. */
static void fifo_view(shm_conn *k, void *fifo, uint32_t nslots, uint64_t slot_bytes) {
    rl_fifo_init(&k->fifo, fifo, (char *)fifo + FIFO_HDR, slot_stride(slot_bytes), nslots, slot_bytes, k->state);
}

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

static ringlet_result_t shm_init(const rl_transport_init *in, void **out, void *blob, size_t *bloblen, char *err) {
    if (rl_env_int("RINGLET_SHM_DISABLE", 0, 0, 1)) {
        const char *var;
        rl_env_get("RINGLET_SHM_DISABLE", &var);
        return snprintf(err, RL_ERR_MAX, "disabled by %s", var), RINGLET_ERR_SYSTEM;
    }
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

    int fd = -1, e = rl_shmseg_create("shm", x->seg_len, x->name, &fd);
    if (e) {
        snprintf(err, RL_ERR_MAX, "shared memory segment of %zu bytes: %s%s", x->seg_len, strerror(e),
                 e == EFBIG ? " (over this process's file size limit, RLIMIT_FSIZE: ulimit -f)" : "");
        free(x);
        return RINGLET_ERR_SYSTEM;
    }
    void *base = MAP_FAILED;
    if ((e = posix_fallocate(fd, 0, SHM_PAGE)) == 0) /* it returns the error (errno is not set) */
        base = mmap(NULL, x->seg_len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (!e && base == MAP_FAILED) e = errno;
    if (e) {
        snprintf(err, RL_ERR_MAX, "shared memory segment %s of %zu bytes: %s", x->name, x->seg_len, strerror(e));
        shm_unlink(x->name);
        rl_shmseg_close(fd);
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
    /* A segment shorter than what is read of it would fault (SIGBUS), not fail: any sender
     * may truncate it (it opens it read-write). */
    struct stat st = {0};
    if (fstat(fd, &st) != 0 || st.st_size < (off_t)SHM_PAGE || (uint64_t)st.st_size < (uint64_t)off + len) {
        close(fd);
        return snprintf(err, RL_ERR_MAX, "shared memory %s is not rank %d's of this job (refused: %lld bytes)", name,
                        peer, (long long)st.st_size),
               RINGLET_ERR_SYSTEM;
    }
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
    rl_posted_q_init(&k->q, &x->in, "shared memory", peer, sending);
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
    fifo_view(k, fm, g.nslots, g.slot_bytes);
    /* A FIFO is used by one sender connection for the job's life. */
    if (rl_fifo_claim(k->fifo.ctl) != 0) {
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
    /* The FIFO's pages reserved here too (the sender reserves them when it connects, which
     * may come later): a receive polls them at once, and on a full /dev/shm the first
     * touch of a sparse page is SIGBUS, not an error. */
    off_t at = (off_t)(SHM_PAGE + (size_t)peer * x->fifo_stride);
    int e = posix_fallocate(x->lock_fd, at, (off_t)x->fifo_stride);
    if (e)
        return snprintf(err, RL_ERR_MAX, "shared memory for rank %d's messages (%zu bytes in /dev/shm): %s", peer,
                        (size_t)x->fifo_stride, strerror(e)),
               RINGLET_ERR_SYSTEM;
    shm_conn *k = conn_new(x, peer, 0);
    if (!k) return snprintf(err, RL_ERR_MAX, "out of memory"), RINGLET_ERR_SYSTEM;
    k->state = calloc(x->nslots, 1);
    if (!k->state) {
        free(k);
        return snprintf(err, RL_ERR_MAX, "out of memory"), RINGLET_ERR_SYSTEM;
    }
    fifo_view(k, (char *)x->seg + SHM_PAGE + (size_t)peer * x->fifo_stride, x->nslots, x->slot_bytes);
    conn_link(x, k);
    *out = k;
    return RINGLET_SUCCESS;
}

/* Piece pos's bytes: after its record. */
static char *piece_at(shm_conn *k, uint64_t pos) { return (char *)rl_fifo_rec_at(&k->fifo, pos) + SLOT_HDR; }

/* Wakes the peer if it sleeps (it polls for what was just published before it sleeps). */
static void ring_peer(shm_conn *k) {
    rl_bell *b = k->ctx->in.peer_bell ? k->ctx->in.peer_bell(k->ctx->in.bell_arg, k->peer) : NULL;
    if (b) rl_bell_ring_sleeper(b);
}

static void fail_all(shm_conn *k, ringlet_result_t code, const char *why) { rl_posted_fail(&k->q, code, why); }

/* Moves what fits; returns non-zero if anything moved. Caller holds ctx->mu. */
static int progress_send(shm_conn *k) {
    rl_fifo *f = &k->fifo;
    int moved = 0;
    while (k->q.head) {
        shm_op *o = (shm_op *)k->q.head;
        ringlet_result_t code;
        const char *refused = rl_fifo_refused(f, &code);
        if (refused) {
            fail_all(k, code, refused);
            return 1;
        }
        int pushed = 0;
        rl_posted *p = &o->p;
        while ((p->off < p->len || o->pieces == 0) && rl_fifo_room(f)) {
            size_t piece = rl_fifo_piece_len(f, p->len, p->off);
            if (piece) memcpy(piece_at(k, f->head), p->buf + p->off, piece);
            p->off += piece;
            o->pieces++;
            rl_fifo_publish(f, f->head++, p->len, piece, p->req->chan);
            pushed = 1;
        }
        if (pushed) {
            moved = 1;
            ring_peer(k);
        }
        if (p->off == p->len && o->pieces > 0) rl_posted_pop(&k->q);
        else break;
    }
    return moved;
}

static int progress_recv(shm_conn *k) {
    rl_fifo *f = &k->fifo;
    int moved = 0;
    while (k->q.head) {
        shm_op *o = (shm_op *)k->q.head;
        rl_posted *p = &o->p;
        int popped = 0;
        while (p->off < p->len || o->pieces == 0) {
            uint64_t piece;
            char why[160];
            int got = rl_fifo_peek(f, p->len, p->req->chan, p->off, &piece, why, sizeof why);
            if (got == 0) break;
            if (got < 0) {
                ring_peer(k);
                fail_all(k, RINGLET_ERR_INVALID_USAGE, why);
                return 1;
            }
            char *src = piece_at(k, f->rpos);
            if (p->map) {
                /* One piece (irecv_map checked the length): lend the slot. */
                p->req->mapped = src;
                p->lent = rl_fifo_take(f, RL_FIFO_LENT);
            } else {
                if (piece) memcpy(p->buf + p->off, src, piece);
                rl_fifo_take(f, RL_FIFO_DONE);
            }
            p->off += piece;
            o->pieces++;
            popped = 1;
        }
        if (popped) {
            moved = 1;
            if (rl_fifo_hand_back(f)) ring_peer(k);
        }
        if (p->off == p->len && o->pieces > 0) {
            rl_posted_pop(&k->q);
        } else {
            if (!popped && rl_fifo_sender_gone(f)) fail_all(k, RINGLET_ERR_REMOTE, "the peer closed the connection");
            break;
        }
    }
    return moved;
}

static int progress_locked(shm_ctx *x) {
    int moved = 0;
    int stop = atomic_load(x->in.stop);
    for (shm_conn *k = x->conns; k; k = k->next) {
        if (!k->q.head) continue;
        if (stop) {
            fail_all(k, RINGLET_ERR_REMOTE, "stopped (the communicator failed)");
            moved = 1;
        } else {
            moved |= k->sending ? progress_send(k) : progress_recv(k);
        }
    }
    return moved;
}

/* Releases ctx->mu; while a caller of shm_progress found it taken meanwhile (again), takes
 * it back (if free) and looks for that caller: nothing a waiter needs is left unseen. */
static int unlock_settle(shm_ctx *x) {
    int moved = 0;
    for (;;) {
        pthread_mutex_unlock(&x->mu);
        if (!atomic_load(&x->again) || pthread_mutex_trylock(&x->mu) != 0) return moved;
        atomic_store(&x->again, 0);
        moved |= progress_locked(x);
    }
}

static int shm_progress(void *ctx) {
    shm_ctx *x = ctx;
    /* Another thread holding the lock may have looked before what this caller waits for
     * arrived, and leave without a second look (a ringlet_test, a post): it is asked to
     * look once more as it lets go (unlock_settle), so a waiter that then sleeps on its
     * bell is rung by what that look moves. */
    atomic_store(&x->again, 1);
    if (pthread_mutex_trylock(&x->mu) != 0) return 0;
    atomic_store(&x->again, 0);
    int moved = progress_locked(x);
    return moved | unlock_settle(x);
}

static ringlet_result_t post(shm_conn *k, void *buf, size_t len, rl_treq *req, int map) {
    rl_posted *p = rl_posted_start(req, sizeof(shm_op), buf, len, map);
    pthread_mutex_lock(&k->ctx->mu);
    rl_posted_push(&k->q, p);
    if (k->q.head == p) {
        if (atomic_load(k->ctx->in.stop)) fail_all(k, RINGLET_ERR_REMOTE, "stopped (the communicator failed)");
        else if (k->sending) progress_send(k);
        else progress_recv(k);
    }
    unlock_settle(k->ctx);
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
    if (k->sending || len > k->fifo.slot_bytes) return RINGLET_ERR_INVALID_USAGE;
    return post(k, NULL, len, req, 1);
}

static void shm_release(void *conn, rl_treq *req) {
    shm_conn *k = conn;
    const rl_posted *p = (const rl_posted *)req->priv;
    pthread_mutex_lock(&k->ctx->mu);
    if (p->map && req->mapped && rl_fifo_release(&k->fifo, p->lent)) ring_peer(k);
    unlock_settle(k->ctx);
}

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
    rl_fifo_close(k->fifo.ctl, k->sending);
    rl_bell *b = x->in.peer_bell ? x->in.peer_bell(x->in.bell_arg, k->peer) : NULL;
    if (b) rl_bell_ring(b);
    if (k->fifo_map) munmap(k->fifo_map, k->fifo_map_len);
    free(k->state);
    free(k);
}

static void shm_fini(void *ctx) {
    shm_ctx *x = ctx;
    while (x->conns) shm_close(x->conns);
    munmap(x->seg, x->seg_len);
    shm_unlink(x->name);
    rl_shmseg_close(x->lock_fd);
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
    .reg_mr = rl_transport_reg_none,
    .dereg_mr = rl_transport_dereg_none,
    .close = shm_close,
    .fini = shm_fini,
    .progress = shm_progress,
    .irecv_map = shm_irecv_map,
    .release = shm_release,
};
