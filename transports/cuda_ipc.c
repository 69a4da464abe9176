/* CUDA IPC transport: buffers between ranks of one host moved by the GPU, never through
 * host memory; several ranks may share one GPU. Everything device goes through the device
 * layer (src/device/device.h), so the same code runs on CUDA and on the simulated GPU.
 *
 * A connection (sender S -> receiver R) is a FIFO of nslots slots of slot_bytes each in
 * S's device memory, which R maps (S exports a handle, R imports it), and a control block
 * in R's shared-memory segment (/dev/shm/ringlet-<pid>-ipc-<random>, mode 0600, tagged
 * with an HMAC of the job secret; one block per possible sender, pages touched only for
 * senders that connect). The block holds the slot FIFO's control and records
 * (slot_fifo.h: per slot, the sequence number and lengths of the piece in it; R's count
 * of pieces it is done with, tail).
 *
 * A message is cut into pieces of at most one slot (0 bytes: one empty piece); each
 * carries the message length, so a receive of another length fails on both ends.
 * Sending piece p: once the FIFO has room for it, the device copies it into slot
 * p % nslots (a stream of the connection's); when that copy is done (an event, polled) S
 * publishes it and rings R's doorbell. The send is done when its last piece is published
 * (the source may then be reused). Receiving piece p: once it is published, R either lends
 * the slot (irecv_map: the algorithm's kernel reads the piece where S put it, then
 * releases it) or has the device copy it out (irecv); then R hands slots back and rings
 * S. So a chunk crosses GPU memory once between the ranks: S's copy into its slot, then
 * R's kernel.
 * Buffers may also be host memory: the device layer's copies take any memory.
 *
 * Control flows through host memory (polled by whoever waits, woken by doorbells), data
 * through device memory: no kernel ever waits on a flag, so nothing stays spinning on the
 * GPU when a peer dies or the communicator aborts.
 *
 * Whether a peer's memory can be mapped at all (another container, two GPUs without peer
 * access) is tried once per peer with a probe allocation each rank exports at init
 * (reachable); the communicator then falls back to staging through host memory.
 *
 * Allocating, freeing and mapping device memory can synchronise the device, and so must
 * not happen while a stream is held (device.h): connect allocates and reachable maps in
 * the communicator's quiet sections (before an operation is queued), ready maps the
 * sender's slots in one of its own, and memory is freed with rl_dev_free_later.
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
#include <unistd.h>

#include "device.h"
#include "log.h"
#include "posted.h"
#include "sha256.h"
#include "shmseg.h"
#include "slot_fifo.h"
#include "transport.h"
#include "util.h"

#define IPC_MAGIC 0x43504952u /* "RIPC" */
#define IPC_PAGE 4096u
#define IPC_MAX_SLOTS 64
#define IPC_NAME_MAX 64

typedef struct {
    uint32_t magic;
    int32_t rank, nranks, pid;
    uint64_t ctl_stride;
    uint8_t tag[32]; /* HMAC(secret, name) */
} seg_hdr;

/* A slot's record, on a cache line of its own. */
typedef struct {
    _Alignas(64) rl_fifo_rec r;
} rec_t;

/* One sender's control block in the receiver's segment. */
typedef struct {
    rl_fifo_ctl fifo; /* sender: OPEN once it wrote the fields below */
    uint32_t nslots;
    uint64_t slot_bytes;
    int32_t device;
    int32_t sender_pid;   /* to tell a sender that died from a mapping that failed */
    rl_dev_handle handle; /* the sender's slots */
    rec_t rec[IPC_MAX_SLOTS];
} ctl_t;

/* What a rank publishes: its segment, and a probe allocation peers try to map. */
typedef struct {
    char name[IPC_NAME_MAX];
    uint32_t has_probe;
    rl_dev_handle probe;
} blob_t;
_Static_assert(sizeof(blob_t) <= RL_BLOB_MAX, "blob too large");

/* One posted message, in the request's private bytes. */
typedef struct ipc_op {
    rl_posted p;       /* p.off: bytes whose piece was started */
    uint32_t npieces;  /* 0 until known (a receive posted before the sender connected) */
    uint32_t started;  /* pieces copied in or out (or lent) */
    uint32_t done;     /* pieces finished */
    uint64_t first;    /* position of its first piece */
} ipc_op;
_Static_assert(sizeof(ipc_op) <= RL_TREQ_PRIV, "request private area too small");

struct ipc_ctx;

typedef struct ipc_conn {
    struct ipc_ctx *ctx;
    struct ipc_conn *next;
    int peer, sending, device;
    int32_t peer_pid; /* sender: the receiver's process */
    ctl_t *ctl;
    void *ctl_map; /* sender: its block mapped from the receiver's segment */
    size_t ctl_map_len;
    char *slots;   /* sender: its own slots; receiver: the sender's, imported (NULL until then) */
    uint32_t nslots;
    uint64_t slot_bytes;
    rl_dev_stream_t stream;
    rl_dev_event_t ev[IPC_MAX_SLOTS];
    rl_posted_q q;
    /* The FIFO over ctl. Sender: its head counts the pieces whose copy was enqueued, ppos
     * those published (copy done); pmsg / plen what each slot's piece will publish.
     * Receiver: its rpos counts the pieces taken (copy enqueued or lent); owner, whose
     * copy a slot's is. */
    rl_fifo fifo;
    uint64_t ppos;
    uint64_t pmsg[IPC_MAX_SLOTS], plen[IPC_MAX_SLOTS];
    unsigned char state[IPC_MAX_SLOTS];
    ipc_op *owner[IPC_MAX_SLOTS];
} ipc_conn;

typedef struct ipc_ctx {
    rl_transport_init in;
    uint8_t secret[32];
    const rl_device_ops *d;
    char name[IPC_NAME_MAX];
    int lock_fd; /* holds the segment's lock while it lives (shmseg.h) */
    seg_hdr *seg;
    size_t seg_len, ctl_stride;
    uint32_t nslots;
    uint64_t slot_bytes;
    void *probe; /* a page of device memory peers map once, to see whether they can */
    signed char *reach; /* per peer: 0 untried, 1 yes, -1 no */
    /* Peers' probes, mapped until fini: unmapping waits for every stream of the device,
     * and a user's stream may be held by a call in flight (as cudaFree would). */
    void **probes;
    pthread_mutex_t mu;
    ipc_conn *conns;
} ipc_ctx;

static void seg_tag(const uint8_t secret[32], const char *name, uint8_t out[32]) {
    rl_hmac_sha256(secret, 32, name, strlen(name), out);
}

/* Runs on the connection's device, restoring the thread's own afterwards (progress may
 * run on a user's thread). */
static int dev_enter(ipc_conn *k) {
    int cur = -1;
    if (k->ctx->d->get_device(&cur) == RL_DEV_OK && cur != k->device) k->ctx->d->set_device(k->device);
    return cur;
}
static void dev_leave(ipc_conn *k, int cur) {
    if (cur >= 0 && cur != k->device) k->ctx->d->set_device(cur);
}

static ringlet_result_t ipc_init(const rl_transport_init *in, void **out, void *blob, size_t *bloblen, char *err) {
    const rl_device_ops *d = rl_device();
    if (!d) return snprintf(err, RL_ERR_MAX, "no device backend: %s", rl_device_unavailable()), RINGLET_ERR_SYSTEM;
    if (rl_env_int("RINGLET_CUDA_IPC_DISABLE", 0, 0, 1))
        return snprintf(err, RL_ERR_MAX, "disabled by RINGLET_CUDA_IPC_DISABLE"), RINGLET_ERR_SYSTEM;
    ipc_ctx *x = calloc(1, sizeof *x);
    if (x) x->reach = calloc((size_t)in->nranks, 1);
    if (x) x->probes = calloc((size_t)in->nranks, sizeof *x->probes);
    if (!x || !x->reach || !x->probes) {
        if (x) free(x->reach), free(x->probes);
        free(x);
        return snprintf(err, RL_ERR_MAX, "out of memory"), RINGLET_ERR_SYSTEM;
    }
    x->in = *in;
    x->d = d;
    memcpy(x->secret, in->secret, 32);
    pthread_mutex_init(&x->mu, NULL);
    x->slot_bytes = (uint64_t)rl_env_int("RINGLET_CUDA_IPC_SLOT_SIZE", 1 << 20, 4096, 1LL << 30);
    x->slot_bytes = (x->slot_bytes + 255) & ~(uint64_t)255;
    x->nslots = (uint32_t)rl_env_int("RINGLET_CUDA_IPC_NSLOTS", 8, 2, IPC_MAX_SLOTS);
    x->ctl_stride = (sizeof(ctl_t) + IPC_PAGE - 1) / IPC_PAGE * IPC_PAGE;
    x->seg_len = IPC_PAGE + (size_t)in->nranks * x->ctl_stride;

    int fd = -1, e = rl_shmseg_create("ipc", x->seg_len, x->name, &fd);
    void *base = MAP_FAILED;
    if (!e && posix_fallocate(fd, 0, IPC_PAGE) != 0) e = errno ? errno : ENOSPC;
    if (!e && (base = mmap(NULL, x->seg_len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)) == MAP_FAILED) e = errno;
    if (e) {
        snprintf(err, RL_ERR_MAX, "control segment %s: %s", fd >= 0 ? x->name : "", strerror(e));
        if (fd >= 0) shm_unlink(x->name), close(fd);
        free(x->reach);
        free(x->probes);
        free(x);
        return RINGLET_ERR_SYSTEM;
    }
    x->lock_fd = fd;
    x->seg = base;
    x->seg->magic = IPC_MAGIC;
    x->seg->rank = in->rank;
    x->seg->nranks = in->nranks;
    x->seg->pid = (int32_t)getpid();
    x->seg->ctl_stride = x->ctl_stride;
    seg_tag(x->secret, x->name, x->seg->tag);

    blob_t b;
    memset(&b, 0, sizeof b);
    memcpy(b.name, x->name, sizeof b.name);
    if (rl_dev_quiet_begin(in->timeout_s, "cuda_ipc's probe allocation") == RL_DEV_OK) {
        if (d->mem_alloc(&x->probe, IPC_PAGE) == RL_DEV_OK && d->mem_export(x->probe, &b.probe) == RL_DEV_OK)
            b.has_probe = 1;
        rl_dev_quiet_end();
    }
    if (!b.has_probe)
        RL_INFO(in->rank, "cuda_ipc: no probe allocation to export (%s): peers will not map this rank's memory",
                rl_dev_error());
    memcpy(blob, &b, sizeof b);
    *bloblen = sizeof b;
    *out = x;
    return RINGLET_SUCCESS;
}

/* Maps len bytes at off of the peer's segment, after checking it is the peer's and this
 * job's. */
static ringlet_result_t map_peer(ipc_ctx *x, const char *name, int peer, size_t off, size_t len, void **out,
                                 int32_t *pid, char *err) {
    int fd = shm_open(name, O_RDWR, 0);
    if (fd < 0) return snprintf(err, RL_ERR_MAX, "rank %d's control segment %s: %s", peer, name, strerror(errno)), RINGLET_ERR_SYSTEM;
    ringlet_result_t rc = RINGLET_SUCCESS;
    seg_hdr *h = mmap(NULL, IPC_PAGE, PROT_READ, MAP_SHARED, fd, 0);
    uint8_t tag[32];
    seg_tag(x->secret, name, tag);
    if (h == MAP_FAILED) {
        h = NULL;
        rc = RINGLET_ERR_SYSTEM;
        snprintf(err, RL_ERR_MAX, "mapping rank %d's control segment: %s", peer, strerror(errno));
    } else if (h->magic != IPC_MAGIC || h->rank != peer || memcmp(h->tag, tag, 32) != 0 || h->ctl_stride != x->ctl_stride) {
        rc = RINGLET_ERR_SYSTEM;
        snprintf(err, RL_ERR_MAX, "control segment %s is not rank %d's of this job (refused)", name, peer);
    } else {
        /* Reserve the pages now: a full /dev/shm is an error here, not a SIGBUS later. */
        int e = posix_fallocate(fd, (off_t)off, (off_t)len);
        void *m = e ? MAP_FAILED : mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, (off_t)off);
        if (m == MAP_FAILED) {
            rc = RINGLET_ERR_SYSTEM;
            snprintf(err, RL_ERR_MAX, "control block for rank %d: %s", peer, strerror(e ? e : errno));
        } else {
            *out = m;
            *pid = h->pid;
        }
    }
    if (h) munmap(h, IPC_PAGE);
    close(fd);
    return rc;
}

static void ring_peer(ipc_conn *k) {
    rl_bell *b = k->ctx->in.peer_bell ? k->ctx->in.peer_bell(k->ctx->in.bell_arg, k->peer) : NULL;
    if (b) rl_bell_ring_sleeper(b);
}

/* The FIFO over the connection's control block, as this end sees it. */
static void fifo_view(ipc_conn *k) {
    rl_fifo_init(&k->fifo, &k->ctl->fifo, k->ctl->rec, sizeof(rec_t), k->nslots, k->slot_bytes,
                 k->sending ? NULL : k->state);
}

static void link_conn(ipc_ctx *x, ipc_conn *k) {
    pthread_mutex_lock(&x->mu);
    k->next = x->conns;
    x->conns = k;
    pthread_mutex_unlock(&x->mu);
}

/* Stream and events of a connection, on the current device. */
static int conn_streams(ipc_conn *k, char *err) {
    const rl_device_ops *d = k->ctx->d;
    if (d->stream_create(&k->stream) != RL_DEV_OK) return snprintf(err, RL_ERR_MAX, "cuda_ipc stream: %s", rl_dev_error()), -1;
    for (uint32_t i = 0; i < k->nslots; i++)
        if (d->event_create(&k->ev[i]) != RL_DEV_OK) return snprintf(err, RL_ERR_MAX, "cuda_ipc events: %s", rl_dev_error()), -1;
    return 0;
}

static void conn_free(ipc_conn *k) {
    const rl_device_ops *d = k->ctx->d;
    if (k->stream) d->stream_destroy(k->stream); /* after its copies ran */
    for (uint32_t i = 0; i < IPC_MAX_SLOTS; i++)
        if (k->ev[i]) d->event_destroy(k->ev[i]);
    if (k->slots) rl_dev_free_later(k->slots, k->sending ? RL_DEV_MEM_DEVICE : RL_DEV_MEM_IMPORTED);
    if (k->ctl_map) munmap(k->ctl_map, k->ctl_map_len);
    free(k);
}

static ringlet_result_t ipc_connect(void *ctx, int peer, const void *blob, size_t bloblen, void **out, char *err) {
    ipc_ctx *x = ctx;
    if (bloblen != sizeof(blob_t)) return snprintf(err, RL_ERR_MAX, "rank %d's cuda_ipc address is malformed", peer), RINGLET_ERR_INTERNAL;
    blob_t b;
    memcpy(&b, blob, sizeof b);
    b.name[IPC_NAME_MAX - 1] = 0;
    ipc_conn *k = calloc(1, sizeof *k);
    if (!k) return snprintf(err, RL_ERR_MAX, "out of memory"), RINGLET_ERR_SYSTEM;
    k->ctx = x;
    k->peer = peer;
    k->sending = 1;
    rl_posted_q_init(&k->q, &x->in, "cuda_ipc", peer, 1);
    k->nslots = x->nslots;
    k->slot_bytes = x->slot_bytes;
    x->d->get_device(&k->device);
    size_t off = IPC_PAGE + (size_t)x->in.rank * x->ctl_stride;
    ringlet_result_t rc = map_peer(x, b.name, peer, off, x->ctl_stride, &k->ctl_map, &k->peer_pid, err);
    if (!rc) {
        k->ctl_map_len = x->ctl_stride;
        k->ctl = k->ctl_map;
        fifo_view(k);
        /* In the communicator's quiet section (device buffers), or one of its own (host
         * buffers forced over cuda_ipc, connected on first use). */
        int quiet = rl_dev_quiet_begin(x->in.timeout_s, "cuda_ipc slots") == RL_DEV_OK;
        if (!quiet || x->d->mem_alloc((void **)&k->slots, k->slot_bytes * k->nslots) != RL_DEV_OK ||
            x->d->mem_export(k->slots, &k->ctl->handle) != RL_DEV_OK) {
            rc = RINGLET_ERR_CUDA;
            snprintf(err, RL_ERR_MAX, "cuda_ipc slots for rank %d (%u x %llu bytes): %s", peer, k->nslots,
                     (unsigned long long)k->slot_bytes, rl_dev_error());
        }
        if (quiet) rl_dev_quiet_end();
        if (!rc && conn_streams(k, err) != 0) rc = RINGLET_ERR_CUDA;
    }
    if (!rc) {
        k->ctl->nslots = k->nslots;
        k->ctl->slot_bytes = k->slot_bytes;
        k->ctl->device = k->device;
        k->ctl->sender_pid = (int32_t)getpid();
        /* A block is used by one sender connection for the job's life. */
        if (rl_fifo_claim(&k->ctl->fifo) != 0) {
            rc = RINGLET_ERR_INTERNAL;
            snprintf(err, RL_ERR_MAX, "cuda_ipc control block to rank %d is already in use", peer);
        }
    }
    if (rc) {
        conn_free(k);
        return rc;
    }
    ring_peer(k); /* a receive may already wait for the handle */
    link_conn(x, k);
    *out = k;
    return RINGLET_SUCCESS;
}

static ringlet_result_t ipc_accept(void *ctx, int peer, void **out, char *err) {
    ipc_ctx *x = ctx;
    ipc_conn *k = calloc(1, sizeof *k);
    if (!k) return snprintf(err, RL_ERR_MAX, "out of memory"), RINGLET_ERR_SYSTEM;
    k->ctx = x;
    k->peer = peer;
    rl_posted_q_init(&k->q, &x->in, "cuda_ipc", peer, 0);
    k->ctl = (ctl_t *)((char *)x->seg + IPC_PAGE + (size_t)peer * x->ctl_stride);
    k->nslots = x->nslots;
    k->slot_bytes = x->slot_bytes;
    fifo_view(k);
    x->d->get_device(&k->device);
    link_conn(x, k);
    *out = k;
    return RINGLET_SUCCESS;
}

static void fail_all(ipc_conn *k, ringlet_result_t code, const char *why) { rl_posted_fail(&k->q, code, why); }

/* The first message posted, or NULL. */
static ipc_op *first_op(const ipc_conn *k) { return (ipc_op *)k->q.head; }

/* Sender: enqueues copies into free slots, publishes finished ones. Caller holds mu. */
static int progress_send(ipc_conn *k) {
    const rl_device_ops *d = k->ctx->d;
    rl_fifo *f = &k->fifo;
    int moved = 0;
    ringlet_result_t code;
    const char *refused = rl_fifo_refused(f, &code);
    if (refused) {
        fail_all(k, code, refused);
        return 1;
    }
    int cur = dev_enter(k);
    for (rl_posted *p = k->q.head; p; p = p->next) {
        ipc_op *o = (ipc_op *)p;
        while (o->started < o->npieces) {
            if (!rl_fifo_room(f)) goto publish;
            uint32_t s = rl_fifo_slot(f, f->head);
            size_t piece = rl_fifo_piece_len(f, p->len, p->off);
            if (o->started == 0) o->first = f->head;
            if ((piece && d->memcpy_async(k->slots + (size_t)s * k->slot_bytes, p->buf + p->off, piece, k->stream) != RL_DEV_OK) ||
                d->event_record(k->ev[s], k->stream) != RL_DEV_OK) {
                dev_leave(k, cur);
                char why[RL_ERR_MAX];
                snprintf(why, sizeof why, "copy into a slot: %s", rl_dev_error());
                fail_all(k, RINGLET_ERR_CUDA, why);
                return 1;
            }
            k->pmsg[s] = p->len;
            k->plen[s] = piece;
            p->off += piece;
            o->started++;
            f->head++;
            moved = 1;
        }
    }
publish:
    while (k->ppos < f->head) {
        uint32_t s = rl_fifo_slot(f, k->ppos);
        int q = d->event_query(k->ev[s]);
        if (q == RL_DEV_NOT_READY) break;
        if (q != RL_DEV_OK) {
            dev_leave(k, cur);
            char why[RL_ERR_MAX];
            snprintf(why, sizeof why, "copy into a slot: %s", rl_dev_error());
            fail_all(k, RINGLET_ERR_CUDA, why);
            return 1;
        }
        rl_fifo_publish(f, k->ppos, k->pmsg[s], k->plen[s]);
        k->ppos++;
        moved = 1;
    }
    dev_leave(k, cur);
    if (moved) ring_peer(k);
    ipc_op *h;
    while ((h = first_op(k)) && h->started == h->npieces && k->ppos >= h->first + h->npieces) rl_posted_pop(&k->q);
    return moved;
}

/* A process that exited (or was killed): gone, or a zombie not reaped yet (its memory
 * and descriptors are already released). */
static int process_gone(int32_t pid) {
    if (pid <= 0) return 0;
    if (kill(pid, 0) != 0) return errno == ESRCH;
    char path[64], buf[256];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f) return 1;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    const char *close_paren = strrchr(buf, ')'); /* the state follows the command name */
    return close_paren && close_paren[1] == ' ' && (close_paren[2] == 'Z' || close_paren[2] == 'X');
}

/* Receiver (ready): the sender's FIFO as this rank expects it, or why not. */
static int check_fifo(const ipc_conn *k, char *why, size_t n) {
    if (k->ctl->nslots == k->nslots && k->ctl->slot_bytes == k->slot_bytes) return 1;
    snprintf(why, n, "the sender's FIFO is %u x %llu bytes, this rank's %u x %llu (RINGLET_CUDA_IPC_NSLOTS / _SLOT_SIZE "
             "must be the same on every rank)", k->ctl->nslots, (unsigned long long)k->ctl->slot_bytes, k->nslots,
             (unsigned long long)k->slot_bytes);
    return 0;
}

/* Receiver, in a quiet section: maps the sender's slots (the sender has connected). 0 with
 * the reason in why on failure. locked: the caller holds the context's lock. */
static int map_sender(ipc_conn *k, int locked, char *why, size_t n) {
    if (!check_fifo(k, why, n)) return 0;
    void *p = NULL;
    int cur = dev_enter(k);
    if (k->ctx->d->mem_import(&k->ctl->handle, &p) != RL_DEV_OK) {
        snprintf(why, n, "mapping the sender's slots: %s", rl_dev_error());
        p = NULL;
    } else if (conn_streams(k, why) != 0) {
        k->ctx->d->mem_unimport(p);
        p = NULL;
    }
    dev_leave(k, cur);
    if (!p) return 0;
    if (!locked) pthread_mutex_lock(&k->ctx->mu);
    k->slots = p;
    if (!locked) pthread_mutex_unlock(&k->ctx->mu);
    return 1;
}

/* A mapping that failed: the sender fails too; whose failure it is. */
static ringlet_result_t map_failed(ipc_conn *k, int fifo_mismatch) {
    atomic_store(&k->ctl->fifo.mismatch, 1);
    ring_peer(k);
    if (fifo_mismatch) return RINGLET_ERR_INVALID_USAGE;
    /* A sender that died after it connected takes its memory with it: that is the peer's
     * failure (REMOTE: the monitor then names it), not a mapping problem. */
    return process_gone(k->ctl->sender_pid) ? RINGLET_ERR_REMOTE : RINGLET_ERR_CUDA;
}

/* Receiver, before the first operation on device buffers that uses the connection is
 * queued: waits for the sender to connect, then maps its slots in a quiet section. */
static ringlet_result_t ipc_ready(void *conn, double deadline, char *err) {
    ipc_conn *k = conn;
    if (k->sending || k->slots) return RINGLET_SUCCESS;
    ipc_ctx *x = k->ctx;
    int st;
    while ((st = atomic_load_explicit(&k->ctl->fifo.sender, memory_order_acquire)) == RL_FIFO_NONE) {
        if (atomic_load(x->in.stop))
            return snprintf(err, RL_ERR_MAX, "stopped (the communicator failed) waiting for rank %d to connect over "
                            "cuda_ipc", k->peer), RINGLET_ERR_REMOTE;
        if (rl_now() > deadline)
            return snprintf(err, RL_ERR_MAX, "rank %d did not connect over cuda_ipc within RINGLET_TIMEOUT", k->peer),
                   RINGLET_ERR_TIMEOUT;
        rl_sleep_ms(1);
    }
    if (st == RL_FIFO_CLOSED) return snprintf(err, RL_ERR_MAX, "rank %d closed the connection", k->peer), RINGLET_ERR_REMOTE;
    char why[RL_ERR_MAX] = "";
    if (rl_dev_quiet_begin(x->in.timeout_s, "mapping a cuda_ipc peer's slots") != RL_DEV_OK) {
        snprintf(err, RL_ERR_MAX, "receiving from rank %d over cuda_ipc: %s", k->peer, rl_dev_error());
        return RINGLET_ERR_CUDA;
    }
    int ok = map_sender(k, 0, why, sizeof why);
    rl_dev_quiet_end();
    if (ok) return RINGLET_SUCCESS;
    snprintf(err, RL_ERR_MAX, "receiving from rank %d over cuda_ipc: %s", k->peer, why);
    return map_failed(k, !check_fifo(k, why, sizeof why));
}

/* Receiver, from progress (the context's lock held): the sender's slots. Made ready before
 * any operation on device buffers; host buffers forced over cuda_ipc (RINGLET_TRANSPORT)
 * map them here, once the sender connected and while no stream of the process is held.
 * 0: not yet. */
static int attach(ipc_conn *k) {
    if (k->slots) return 1;
    int st = atomic_load_explicit(&k->ctl->fifo.sender, memory_order_acquire);
    if (st != RL_FIFO_OPEN) {
        if (st == RL_FIFO_CLOSED) fail_all(k, RINGLET_ERR_REMOTE, "the peer closed the connection");
        return 0;
    }
    if (!rl_dev_quiet_try()) return 0;
    char why[RL_ERR_MAX] = "";
    int ok = map_sender(k, 1, why, sizeof why);
    rl_dev_quiet_end();
    if (!ok) fail_all(k, map_failed(k, !check_fifo(k, why, sizeof why)), why);
    return ok;
}

/* Receiver: a posted receive still needs a piece it has not taken. */
static int wants_piece(const ipc_conn *k) {
    for (const rl_posted *p = k->q.head; p; p = p->next)
        if (((const ipc_op *)p)->started < ((const ipc_op *)p)->npieces) return 1;
    return 0;
}

static int progress_recv(ipc_conn *k) {
    const rl_device_ops *d = k->ctx->d;
    rl_fifo *f = &k->fifo;
    int moved = 0;
    if (!k->q.head || !attach(k)) return 0;
    int cur = dev_enter(k);
    for (rl_posted *p = k->q.head; p; p = p->next) {
        ipc_op *o = (ipc_op *)p;
        if (!o->npieces) o->npieces = rl_fifo_npieces(p->len, k->slot_bytes);
        while (o->started < o->npieces) {
            uint64_t piece;
            char why[RL_ERR_MAX];
            int got = rl_fifo_peek(f, p->len, p->off, &piece, why, sizeof why);
            if (got == 0) goto finish;
            if (got < 0) {
                ring_peer(k);
                dev_leave(k, cur);
                fail_all(k, RINGLET_ERR_INVALID_USAGE, why);
                return 1;
            }
            uint32_t s = rl_fifo_slot(f, f->rpos);
            char *src = k->slots + (size_t)s * k->slot_bytes;
            if (p->map) {
                p->req->mapped = src;
                p->lent = rl_fifo_take(f, RL_FIFO_LENT);
                o->done++;
            } else {
                if ((piece && d->memcpy_async(p->buf + p->off, src, piece, k->stream) != RL_DEV_OK) ||
                    d->event_record(k->ev[s], k->stream) != RL_DEV_OK) {
                    dev_leave(k, cur);
                    snprintf(why, sizeof why, "copy out of a slot: %s", rl_dev_error());
                    fail_all(k, RINGLET_ERR_CUDA, why);
                    return 1;
                }
                rl_fifo_take(f, RL_FIFO_COPYING);
                k->owner[s] = o;
            }
            p->off += piece;
            o->started++;
            moved = 1;
        }
    }
finish:
    /* Copies finish in order on the connection's stream. */
    for (uint64_t p = f->rtail; p < f->rpos; p++) {
        uint32_t s = rl_fifo_slot(f, p);
        if (k->state[s] != RL_FIFO_COPYING) continue;
        int q = d->event_query(k->ev[s]);
        if (q == RL_DEV_NOT_READY) break;
        if (q != RL_DEV_OK) {
            dev_leave(k, cur);
            char why[RL_ERR_MAX];
            snprintf(why, sizeof why, "copy out of a slot: %s", rl_dev_error());
            fail_all(k, RINGLET_ERR_CUDA, why);
            return 1;
        }
        k->state[s] = RL_FIFO_DONE;
        k->owner[s]->done++;
        moved = 1;
    }
    dev_leave(k, cur);
    if (rl_fifo_hand_back(f)) ring_peer(k);
    ipc_op *h;
    while ((h = first_op(k)) && h->npieces && h->done == h->npieces) rl_posted_pop(&k->q);
    /* A sender that closed cleanly published everything it sent: only a receive still
     * waiting for a piece it never published fails (pieces already taken finish, their
     * slots stay mapped here). */
    if (!moved && wants_piece(k) && rl_fifo_sender_gone(f))
        fail_all(k, RINGLET_ERR_REMOTE, "the peer closed the connection");
    return moved;
}

/* Device copies under way that only polling sees finish. */
static int busy(const ipc_conn *k) {
    const rl_fifo *f = &k->fifo;
    if (k->sending) return k->ppos < f->head;
    for (uint64_t p = f->rtail; p < f->rpos; p++)
        if (k->state[rl_fifo_slot(f, p)] == RL_FIFO_COPYING) return 1;
    return 0;
}

static int progress_locked(ipc_ctx *x) {
    int moved = 0, stop = atomic_load(x->in.stop);
    for (ipc_conn *k = x->conns; k; k = k->next) {
        if (!k->q.head) continue;
        if (stop) {
            fail_all(k, RINGLET_ERR_REMOTE, "stopped (the communicator failed)");
            moved = 1;
        } else {
            moved |= k->sending ? progress_send(k) : progress_recv(k);
            if (busy(k)) moved |= RL_PROGRESS_BUSY;
        }
    }
    return moved;
}

static int ipc_progress(void *ctx) {
    ipc_ctx *x = ctx;
    if (pthread_mutex_trylock(&x->mu) != 0) return 0;
    int moved = progress_locked(x);
    pthread_mutex_unlock(&x->mu);
    return moved;
}

static ringlet_result_t post(ipc_conn *k, void *buf, size_t len, rl_treq *req, int map) {
    ipc_op *o = (ipc_op *)rl_posted_start(req, sizeof(ipc_op), buf, len, map);
    o->npieces = k->sending || k->slots ? rl_fifo_npieces(len, k->slot_bytes) : 0;
    pthread_mutex_lock(&k->ctx->mu);
    rl_posted_push(&k->q, &o->p);
    if (atomic_load(k->ctx->in.stop)) fail_all(k, RINGLET_ERR_REMOTE, "stopped (the communicator failed)");
    else if (k->sending) progress_send(k);
    else progress_recv(k);
    pthread_mutex_unlock(&k->ctx->mu);
    return RINGLET_SUCCESS;
}

static ringlet_result_t ipc_isend(void *conn, const void *buf, size_t len, void *mr, rl_treq *req) {
    (void)mr;
    return post(conn, (void *)buf, len, req, 0);
}

static ringlet_result_t ipc_irecv(void *conn, void *buf, size_t len, void *mr, rl_treq *req) {
    (void)mr;
    return post(conn, buf, len, req, 0);
}

static ringlet_result_t ipc_irecv_map(void *conn, size_t len, rl_treq *req) {
    ipc_conn *k = conn;
    if (k->sending || len > k->slot_bytes) return RINGLET_ERR_INVALID_USAGE;
    return post(k, NULL, len, req, 1);
}

static void ipc_release(void *conn, rl_treq *req) {
    ipc_conn *k = conn;
    const rl_posted *p = (const rl_posted *)req->priv;
    pthread_mutex_lock(&k->ctx->mu);
    if (p->map && req->mapped && rl_fifo_release(&k->fifo, p->lent)) ring_peer(k);
    pthread_mutex_unlock(&k->ctx->mu);
}

/* Sender, closing cleanly: its slots are the receiver's data until the receiver is done
 * with every piece published (a peer that finished its part of a collective may close
 * while the receiver still copies out of them). Waits for that, for the receiver's own
 * close or exit, or for the deadline. */
static void linger(ipc_conn *k) {
    ipc_ctx *x = k->ctx;
    if (!k->sending || !k->slots || (x->in.failed && atomic_load(x->in.failed))) return;
    pthread_mutex_lock(&x->mu);
    uint64_t published = k->ppos;
    pthread_mutex_unlock(&x->mu);
    double until = rl_now() + x->in.timeout_s;
    while (atomic_load_explicit(&k->ctl->fifo.tail, memory_order_acquire) < published &&
           atomic_load(&k->ctl->fifo.receiver) != RL_FIFO_CLOSED && !process_gone(k->peer_pid)) {
        if (rl_now() > until) {
            RL_WARN(x->in.rank, "cuda_ipc: closing while rank %d has not taken %llu piece(s) sent to it", k->peer,
                    (unsigned long long)(published - atomic_load(&k->ctl->fifo.tail)));
            return;
        }
        rl_sleep_ms(1);
    }
}

static void ipc_close(void *conn) {
    ipc_conn *k = conn;
    ipc_ctx *x = k->ctx;
    linger(k);
    pthread_mutex_lock(&x->mu);
    fail_all(k, RINGLET_ERR_REMOTE, "the connection was closed");
    for (ipc_conn **p = &x->conns; *p; p = &(*p)->next)
        if (*p == k) {
            *p = k->next;
            break;
        }
    pthread_mutex_unlock(&x->mu);
    rl_fifo_close(&k->ctl->fifo, k->sending);
    rl_bell *b = x->in.peer_bell ? x->in.peer_bell(x->in.bell_arg, k->peer) : NULL;
    if (b) rl_bell_ring(b);
    int cur = dev_enter(k);
    conn_free(k);
    if (cur >= 0) x->d->set_device(cur);
}

static void ipc_fini(void *ctx) {
    ipc_ctx *x = ctx;
    while (x->conns) ipc_close(x->conns);
    for (int i = 0; i < x->in.nranks; i++)
        if (x->probes[i]) rl_dev_free_later(x->probes[i], RL_DEV_MEM_IMPORTED);
    if (x->probe) rl_dev_free_later(x->probe, RL_DEV_MEM_DEVICE);
    munmap(x->seg, x->seg_len);
    shm_unlink(x->name);
    close(x->lock_fd);
    pthread_mutex_destroy(&x->mu);
    free(x->reach);
    free(x->probes);
    free(x);
}

static int ipc_reachable(void *ctx, int peer, const void *blob, size_t bloblen, char *why) {
    ipc_ctx *x = ctx;
    if (peer < 0 || peer >= x->in.nranks || bloblen != sizeof(blob_t)) return 0;
    pthread_mutex_lock(&x->mu);
    if (!x->reach[peer] && !rl_dev_in_quiet()) {
        /* Mapping can synchronise the device: only in the communicator's preparation. */
        snprintf(why, RL_ERR_MAX, "internal: rank %d's memory was not probed before use", peer);
    } else if (!x->reach[peer]) {
        blob_t b;
        memcpy(&b, blob, sizeof b);
        void *p = NULL;
        if (!b.has_probe) {
            snprintf(why, RL_ERR_MAX, "rank %d exported no device memory", peer);
        } else if (x->d->mem_import(&b.probe, &p) != RL_DEV_OK) {
            snprintf(why, RL_ERR_MAX, "rank %d's device memory cannot be mapped here: %s", peer, rl_dev_error());
        } else {
            x->probes[peer] = p;
            x->reach[peer] = 1;
        }
        if (!x->reach[peer]) x->reach[peer] = -1;
    } else if (x->reach[peer] < 0) {
        snprintf(why, RL_ERR_MAX, "rank %d's device memory cannot be mapped here (tried before)", peer);
    }
    int ok = x->reach[peer] > 0;
    pthread_mutex_unlock(&x->mu);
    return ok;
}

const rl_transport_ops rl_transport_cuda_ipc = {
    .name = "cuda_ipc",
    .device_memory = 1,
    .init = ipc_init,
    .connect = ipc_connect,
    .accept = ipc_accept,
    .isend = ipc_isend,
    .irecv = ipc_irecv,
    .reg_mr = rl_transport_reg_none,
    .dereg_mr = rl_transport_dereg_none,
    .close = ipc_close,
    .fini = ipc_fini,
    .progress = ipc_progress,
    .irecv_map = ipc_irecv_map,
    .release = ipc_release,
    .reachable = ipc_reachable,
    .ready = ipc_ready,
};
