/* The CUDA IPC transport's connections (cuda_ipc.c says how the transport works): each
 * rank's control segment in /dev/shm with one block per possible sender, the probe
 * allocation peers map once (reachable), connect (the sender's slots in its GPU memory,
 * exported through its block in the receiver's segment), accept, and close and fini.
 * Allocating, exporting and mapping happen in quiet sections (device.h); memory is freed
 * with rl_dev_free_later. */
#include <fcntl.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include "ipc_conn.h"
#include "log.h"
#include "sha256.h"
#include "shmseg.h"
#include "util.h"

static void sweep_orphans(const rl_device_ops *d);

/* The teardown closes the connections one after another, then fini waits for the orphans:
 * one deadline for all of it (RINGLET_TIMEOUT from the first close), not one each. Outside
 * the teardown (a connect that failed) a deadline of its own. */
static double close_deadline(ipc_ctx *x) {
    pthread_mutex_lock(&x->mu);
    if (x->closing && x->close_until == 0) x->close_until = rl_now() + x->in.timeout_s;
    double until = x->closing ? x->close_until : rl_now() + x->in.timeout_s;
    pthread_mutex_unlock(&x->mu);
    return until;
}
static void closing_begins(ipc_ctx *x) {
    pthread_mutex_lock(&x->mu);
    x->closing = 1;
    pthread_mutex_unlock(&x->mu);
}
static double seconds_left(double until) {
    double s = until - rl_now();
    return s > 0 ? s : 0;
}

static void seg_tag(const uint8_t secret[32], const char *name, uint8_t out[32]) {
    rl_hmac_sha256(secret, 32, name, strlen(name), out);
}

/* Allocates and exports the probe on the current device (in a quiet section): 0, or -1
 * with *why. Sets x->has_probe. */
static int make_probe(ipc_ctx *x, rl_dev_handle *h, char *why) {
    x->has_probe = IPC_PROBE_NONE;
    if (x->d->mem_alloc(&x->probe, IPC_SHARE_UNIT) != RL_DEV_OK) {
        x->probe = NULL;
        return snprintf(why, RL_ERR_MAX, "%s", rl_dev_error()), -1;
    }
    if (x->d->mem_export(x->probe, h) != RL_DEV_OK) return snprintf(why, RL_ERR_MAX, "%s", rl_dev_error()), -1;
    x->has_probe = IPC_PROBE_MADE;
    return 0;
}

ringlet_result_t rl_ipc_init(const rl_transport_init *in, void **out, void *blob, size_t *bloblen, char *err) {
    const rl_device_ops *d = rl_device();
    if (!d) return snprintf(err, RL_ERR_MAX, "no device backend: %s", rl_device_unavailable()), RINGLET_ERR_SYSTEM;
    if (rl_env_int("RINGLET_CUDA_IPC_DISABLE", 0, 0, 1)) {
        const char *var;
        rl_env_get("RINGLET_CUDA_IPC_DISABLE", &var);
        return snprintf(err, RL_ERR_MAX, "disabled by %s", var), RINGLET_ERR_SYSTEM;
    }
    ipc_ctx *x = calloc(1, sizeof *x);
    if (x) x->reach = calloc((size_t)in->nranks, 1);
    if (!x || !x->reach) {
        if (x) free(x->reach);
        free(x);
        return snprintf(err, RL_ERR_MAX, "out of memory"), RINGLET_ERR_SYSTEM;
    }
    x->in = *in;
    x->d = d;
    sweep_orphans(d);
    memcpy(x->secret, in->secret, 32);
    pthread_mutex_init(&x->mu, NULL);
    x->slot_bytes = (uint64_t)rl_env_int("RINGLET_CUDA_IPC_SLOT_SIZE", 1 << 20, 4096, 1LL << 30);
    x->slot_bytes = (x->slot_bytes + 255) & ~(uint64_t)255;
    x->nslots = (uint32_t)rl_env_int("RINGLET_CUDA_IPC_NSLOTS", 8, 2, IPC_MAX_SLOTS);
    x->ctl_stride = (sizeof(ctl_t) + IPC_PAGE - 1) / IPC_PAGE * IPC_PAGE;
    x->seg_len = IPC_PAGE + (size_t)in->nranks * x->ctl_stride;

    int fd = -1, e = rl_shmseg_create("ipc", x->seg_len, x->name, &fd);
    void *base = MAP_FAILED;
    if (!e) e = posix_fallocate(fd, 0, IPC_PAGE); /* returns the error (errno is not set) */
    if (!e && (base = mmap(NULL, x->seg_len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)) == MAP_FAILED) e = errno;
    if (e) {
        snprintf(err, RL_ERR_MAX, "control segment %s: %s", fd >= 0 ? x->name : "", strerror(e));
        if (fd >= 0) shm_unlink(x->name), rl_shmseg_close(fd);
        free(x->reach);
        free(x);
        return RINGLET_ERR_SYSTEM;
    }
    x->lock_fd = fd;
    x->seg = base;
    x->seg->magic = IPC_MAGIC;
    x->seg->rank = in->rank;
    x->seg->nranks = in->nranks;
    x->seg->pid = (int32_t)getpid();
    x->seg->pidns = rl_pid_ns();
    x->seg->ctl_stride = x->ctl_stride;
    seg_tag(x->secret, x->name, x->seg->tag);

    blob_t b;
    memset(&b, 0, sizeof b);
    memcpy(b.name, x->name, sizeof b.name);
    /* The probe is made at the communicator's first use of device buffers, on their device
     * (publish_probe), the device whose memory peers will map: the initialising thread's
     * current device may be another (a program that allocated on one GPU, then passes
     * buffers of another: its peers would judge the wrong pair of devices), and an
     * allocation at init would make a context, hundreds of MB of GPU memory, in every
     * process of a job on host buffers that never uses a GPU. Peers wait for it then
     * (rl_ipc_peer_ready), as they wait for this rank's connections. */
    x->has_probe = IPC_PROBE_LATER;
    memcpy(blob, &b, sizeof b);
    *bloblen = sizeof b;
    *out = x;
    return RINGLET_SUCCESS;
}

/* Maps len bytes at off of the peer's segment, after checking it is the peer's and this
 * job's. */
static ringlet_result_t map_peer(ipc_ctx *x, const char *name, int peer, size_t off, size_t len, void **out,
                                 ipc_proc *proc, char *err) {
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
            *proc = (ipc_proc){h->pid, h->pidns};
        }
    }
    if (h) munmap(h, IPC_PAGE);
    close(fd);
    return rc;
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

/* A closed sender's slots that its receiver may still have mapped: kept, with the
 * sender's view of the receiver's control block, until the receiver says it unmapped them
 * or exits. A clean end of the communicator waits for that (within the deadline: its
 * peers are ending too); an abort does not. Those left are process-wide: every init and
 * fini of the transport frees those that are done (a process that ends frees the rest). */
typedef struct ipc_orphan {
    struct ipc_orphan *next;
    const ipc_ctx *owner; /* the context whose fini may still wait for it, or NULL */
    char *slots;
    ctl_t *ctl;
    void *ctl_map;
    size_t ctl_map_len;
    int device;
    ipc_proc peer_proc;
} ipc_orphan;

static pthread_mutex_t g_orphans_mu = PTHREAD_MUTEX_INITIALIZER;
static ipc_orphan *g_orphans;

static int orphan_done(const ipc_orphan *o) {
    return atomic_load(&o->ctl->unmapped) == IPC_UNMAPPED || process_gone(o->peer_proc);
}

/* fini: the context's orphans leave it, once done if wait (a communicator that did not
 * fail: its deadline at most). */
static void release_orphans(ipc_ctx *x, int wait) {
    double until = close_deadline(x);
    for (int pending = wait; pending;) {
        pending = 0;
        pthread_mutex_lock(&g_orphans_mu);
        for (ipc_orphan *o = g_orphans; o && !pending; o = o->next)
            pending = o->owner == x && !orphan_done(o) && atomic_load(&o->ctl->unmapped) != IPC_UNMAP_LATER;
        pthread_mutex_unlock(&g_orphans_mu);
        if (pending && rl_now() > until) {
            RL_WARN(x->in.rank, "cuda_ipc: a peer did not unmap this rank's slots by the deadline: they are freed "
                    "later, once it did");
            break;
        }
        if (pending) rl_sleep_ms(1);
    }
    pthread_mutex_lock(&g_orphans_mu);
    for (ipc_orphan *o = g_orphans; o; o = o->next)
        if (o->owner == x) o->owner = NULL;
    pthread_mutex_unlock(&g_orphans_mu);
}

static void free_slots(const rl_device_ops *d, char *slots, int device) {
    int saved = -1;
    d->device_enter(device, &saved);
    rl_dev_free_later(slots, RL_DEV_MEM_DEVICE);
    d->device_leave(saved);
}

/* Frees the orphans whose receivers let go of them. */
static void sweep_orphans(const rl_device_ops *d) {
    pthread_mutex_lock(&g_orphans_mu);
    ipc_orphan *done = NULL;
    for (ipc_orphan **p = &g_orphans; *p;) {
        ipc_orphan *o = *p;
        if (orphan_done(o)) {
            *p = o->next;
            o->next = done, done = o;
        } else {
            p = &o->next;
        }
    }
    pthread_mutex_unlock(&g_orphans_mu);
    while (done) {
        ipc_orphan *o = done;
        done = o->next;
        free_slots(d, o->slots, o->device);
        munmap(o->ctl_map, o->ctl_map_len);
        free(o);
    }
}

/* Whether the connection's copies are done, waiting up to the communicator's deadline, or
 * not at all where it failed (each of its connections would wait in turn) (each slot's
 * event follows its last copy; one never recorded is done). A failure whose copies did
 * not finish by its deadline, or a close (an abort) during one, completes the requests
 * while copies may still run (rl_ipc_fail), and CUDA's stream destroy returns at once with
 * the work going on: the slots they read must stay mapped until then. */
static int copies_done(ipc_conn *k) {
    const rl_device_ops *d = k->ctx->d;
    int failed = k->ctx->in.failed && atomic_load(k->ctx->in.failed);
    double until = failed ? rl_now() : close_deadline(k->ctx);
    for (uint32_t i = 0; i < IPC_MAX_SLOTS; i++) {
        int q = RL_DEV_OK; /* set whenever ev[i] exists (the compiler cannot tell) */
        while (k->ev[i] && (q = d->event_query(k->ev[i])) == RL_DEV_NOT_READY) {
            if (rl_now() > until) return 0;
            rl_sleep_ms(1);
        }
        if (k->ev[i] && q != RL_DEV_OK) return 0;
    }
    return 1;
}

static void conn_free(ipc_conn *k) {
    ipc_ctx *x = k->ctx;
    const rl_device_ops *d = x->d;
    int copied = copies_done(k);
    if (!copied) {
        RL_WARN(x->in.rank, "cuda_ipc: the copies of rank %d's connection failed or were not finished: the slots "
                "they use are left as they are (mapped, not freed)", k->peer);
        if (k->stream) rl_dev_note_stuck(k->stream); /* and other frees wait for them too */
        /* A receiver keeps the sender's slots mapped: its sender need not wait, nor free. */
        if (!k->sending && k->ctl) atomic_store(&k->ctl->unmapped, IPC_UNMAP_LATER);
    }
    if (k->stream) d->stream_destroy(k->stream);
    for (uint32_t i = 0; i < IPC_MAX_SLOTS; i++)
        if (k->ev[i]) d->event_destroy(k->ev[i]);
    if (k->drain) d->event_destroy(k->drain);
    /* Copies that may still run read or write the slots: then they stay, a leak, never
     * memory unmapped or freed under them (the sender keeps its slots while this end has
     * them mapped). */
    if (copied && !k->sending) {
        /* Unmap now (a quiet section frees at once, unless device work of this process is
         * noted stuck), then tell the sender it may free. An abort does not wait for other
         * communicators' held streams. An unmap kept for later leaves the sender's slots
         * to the end of this process: only one made now tells it. */
        int failed = x->in.failed && atomic_load(x->in.failed);
        int quiet = !k->slots || (failed ? rl_dev_quiet_try()
                                         : rl_dev_quiet_begin(seconds_left(close_deadline(x)),
                                                              "unmapping a cuda_ipc sender's slots") == RL_DEV_OK);
        char why[RL_ERR_MAX]; /* the quiet section's error, before other calls set theirs */
        snprintf(why, sizeof why, "%s",
                 quiet    ? "device work of this process did not finish, or the unmap failed"
                 : failed ? "streams of this process are held, and a failed communicator does not wait"
                          : rl_dev_error());
        int unmapped = !k->unmap_kept && (!k->slots || rl_dev_free_later(k->slots, RL_DEV_MEM_IMPORTED));
        if (k->slots && quiet) rl_dev_quiet_end();
        if (unmapped) {
            atomic_store(&k->ctl->unmapped, IPC_UNMAPPED);
        } else {
            atomic_store(&k->ctl->unmapped, IPC_UNMAP_LATER); /* the sender need not wait, nor free */
            RL_WARN(x->in.rank, "cuda_ipc: rank %d's slots stay mapped here for now (%s)", k->peer, why);
        }
    } else if (copied && k->slots) {
        /* This end is closed (rl_ipc_close): a receiver that has not begun to map the
         * slots never will (map_sender); one that has must unmap them first. */
        if (atomic_load(&k->ctl->fifo.receiver) == RL_FIFO_NONE || atomic_load(&k->ctl->unmapped) == IPC_UNMAPPED) {
            free_slots(d, k->slots, k->device);
        } else {
            ipc_orphan *o = malloc(sizeof *o);
            if (o) {
                *o = (ipc_orphan){NULL, x, k->slots, k->ctl, k->ctl_map, k->ctl_map_len, k->device, k->peer_proc};
                pthread_mutex_lock(&g_orphans_mu);
                o->next = g_orphans, g_orphans = o;
                pthread_mutex_unlock(&g_orphans_mu);
                free(k);
                return;
            }
            /* out of memory for the note: the slots stay (a leak, never memory freed under
             * the receiver) */
        }
    }
    if (k->ctl_map) munmap(k->ctl_map, k->ctl_map_len);
    free(k);
}

ringlet_result_t rl_ipc_connect(void *ctx, int peer, const void *blob, size_t bloblen, void **out, char *err) {
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
    ringlet_result_t rc = map_peer(x, b.name, peer, off, x->ctl_stride, &k->ctl_map, &k->peer_proc, err);
    if (!rc) {
        k->ctl_map_len = x->ctl_stride;
        k->ctl = k->ctl_map;
        fifo_view(k);
        /* In the communicator's quiet section (device buffers), or one of its own (host
         * buffers forced over cuda_ipc, connected on first use). */
        int quiet = rl_dev_quiet_begin(x->in.timeout_s, "cuda_ipc slots") == RL_DEV_OK;
        size_t bytes = (k->slot_bytes * k->nslots + IPC_SHARE_UNIT - 1) / IPC_SHARE_UNIT * IPC_SHARE_UNIT;
        if (!quiet || x->d->mem_alloc((void **)&k->slots, bytes) != RL_DEV_OK ||
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
        k->ctl->sender_pidns = rl_pid_ns();
        /* A block is used by one sender connection for the job's life. */
        if (rl_fifo_claim(&k->ctl->fifo) != 0) {
            rc = RINGLET_ERR_INTERNAL;
            snprintf(err, RL_ERR_MAX, "cuda_ipc control block to rank %d is already in use", peer);
        } else if (atomic_load(&k->ctl->declined)) {
            /* Read after the claim, as decline_peer reads the claim after its mark: one of the
             * two sees the other (both sequentially consistent). The peer never maps these. */
            rc = RINGLET_ERR_REMOTE;
            declined_why(k, err);
        }
    }
    if (rc) {
        /* Never published: no receiver maps the slots. */
        if (k->slots) rl_dev_free_later(k->slots, RL_DEV_MEM_DEVICE), k->slots = NULL;
        conn_free(k);
        return rc;
    }
    ring_peer(k); /* a receive may already wait for the handle */
    link_conn(x, k);
    *out = k;
    return RINGLET_SUCCESS;
}

ringlet_result_t rl_ipc_accept(void *ctx, int peer, void **out, char *err) {
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
    double until = close_deadline(x);
    while (atomic_load_explicit(&k->ctl->fifo.tail, memory_order_acquire) < published &&
           atomic_load(&k->ctl->fifo.receiver) != RL_FIFO_CLOSED && !process_gone(k->peer_proc)) {
        if (rl_now() > until) {
            RL_WARN(x->in.rank, "cuda_ipc: closing while rank %d has not taken %llu piece(s) sent to it", k->peer,
                    (unsigned long long)(published - atomic_load(&k->ctl->fifo.tail)));
            return;
        }
        rl_sleep_ms(1);
    }
}

void rl_ipc_close(void *conn) {
    ipc_conn *k = conn;
    ipc_ctx *x = k->ctx;
    closing_begins(x); /* connections close only in the communicator's teardown */
    linger(k);
    pthread_mutex_lock(&x->mu);
    rl_ipc_fail_now(k, RINGLET_ERR_REMOTE, "the connection was closed");
    for (ipc_conn **p = &x->conns; *p; p = &(*p)->next)
        if (*p == k) {
            *p = k->next;
            break;
        }
    pthread_mutex_unlock(&x->mu);
    rl_fifo_close(&k->ctl->fifo, k->sending);
    rl_bell *b = x->in.peer_bell ? x->in.peer_bell(x->in.bell_arg, k->peer) : NULL;
    if (b) rl_bell_ring(b);
    int saved = dev_enter(k);
    conn_free(k);
    x->d->device_leave(saved);
}

void rl_ipc_fini(void *ctx) {
    ipc_ctx *x = ctx;
    closing_begins(x);
    while (x->conns) rl_ipc_close(x->conns); /* rl_conn_close_all closed them already, receivers first */
    release_orphans(x, !(x->in.failed && atomic_load(x->in.failed)));
    sweep_orphans(x->d);
    if (x->probe) rl_dev_free_later(x->probe, RL_DEV_MEM_DEVICE);
    /* A peer waiting for a probe never made stops waiting (the segment's name goes below,
     * but a peer that mapped its header already sees this). */
    int pending = IPC_PROBE_PENDING;
    atomic_compare_exchange_strong(&x->seg->probe_state, &pending, IPC_PROBE_FAILED);
    munmap(x->seg, x->seg_len);
    shm_unlink(x->name);
    rl_shmseg_close(x->lock_fd);
    pthread_mutex_destroy(&x->mu);
    free(x->reach);
    free(x);
}

/* This rank will not use cuda_ipc with peer: says so in the pair's two control blocks
 * (ctl_t.declined), its own for the peer as sender and the peer's for this rank as sender,
 * so that the peer, if it can map this rank's memory, fails at once instead of waiting.
 * 0, or -1 when the peer already connected to this rank over cuda_ipc (it could map: the
 * pair cannot work, and a send of the peer's may already be done on its side). */
static int decline_peer(ipc_ctx *x, int peer, const blob_t *b) {
    size_t own = IPC_PAGE + (size_t)peer * x->ctl_stride;
    int committed = 0, e = posix_fallocate(x->lock_fd, (off_t)own, (off_t)x->ctl_stride); /* returns, not errno */
    if (e == 0) {
        ctl_t *mine = (ctl_t *)((char *)x->seg + own);
        atomic_store(&mine->declined, 1);
        committed = atomic_load(&mine->fifo.sender) != RL_FIFO_NONE; /* after the mark: see rl_ipc_connect */
    } else {
        RL_WARN(x->in.rank, "cuda_ipc: cannot mark rank %d's control block declined: %s", peer, strerror(e));
    }
    void *m = NULL;
    ipc_proc proc;
    char err[RL_ERR_MAX];
    if (map_peer(x, b->name, peer, IPC_PAGE + (size_t)x->in.rank * x->ctl_stride, x->ctl_stride, &m, &proc, err) ==
        RINGLET_SUCCESS) {
        atomic_store(&((ctl_t *)m)->declined, 1);
        munmap(m, x->ctl_stride);
    } else {
        RL_WARN(x->in.rank, "cuda_ipc: cannot mark the pair with rank %d declined: %s", peer, err);
    }
    ring_rank(x, peer);
    return committed ? -1 : 0;
}

/* The first use of device buffers: makes the probe on the current device (the buffers')
 * and publishes it in the segment's header (x->mu held, in a quiet section). */
static void publish_probe(ipc_ctx *x) {
    if (x->has_probe != IPC_PROBE_LATER) return;
    char why[RL_ERR_MAX] = "";
    if (make_probe(x, &x->seg->probe, why) == 0) {
        atomic_store_explicit(&x->seg->probe_state, IPC_PROBE_READY, memory_order_release);
    } else {
        atomic_store_explicit(&x->seg->probe_state, IPC_PROBE_FAILED, memory_order_release);
        RL_INFO(x->in.rank, "cuda_ipc: no probe allocation to export (%s): peers will not map this rank's memory", why);
    }
}

ringlet_result_t rl_ipc_publish(void *ctx, char *why) {
    ipc_ctx *x = ctx;
    (void)why;
    pthread_mutex_lock(&x->mu);
    publish_probe(x);
    pthread_mutex_unlock(&x->mu);
    return RINGLET_SUCCESS;
}

/* The state of a peer's probe, made at its first use of device buffers (IPC_PROBE_*: PENDING, READY with *h,
 * FAILED), read from its segment's header; -1 with why where that cannot be mapped. */
static int peer_probe_state(ipc_ctx *x, int peer, const blob_t *b, rl_dev_handle *h, ipc_proc *proc, char *why) {
    void *m = NULL;
    char err[RL_ERR_MAX];
    if (map_peer(x, b->name, peer, 0, IPC_PAGE, &m, proc, err) != RINGLET_SUCCESS)
        return snprintf(why, RL_ERR_MAX, "%s", err), -1;
    seg_hdr *hd = m;
    int st = atomic_load_explicit(&hd->probe_state, memory_order_acquire);
    if (st == IPC_PROBE_READY && h) memcpy(h, &hd->probe, sizeof *h);
    munmap(m, IPC_PAGE);
    return st;
}

/* Waits, with no quiet section held (a rank waiting in one would hold up every stream
 * call of its process, and two processes preparing two communicators in opposite orders
 * would wait for each other), until the peer has published its probe: at its own first
 * use of device buffers, before it waits for anyone's
 * (rl_ipc_publish). Nothing to wait for where this rank has no probe (the pair stages). */
ringlet_result_t rl_ipc_peer_ready(void *ctx, int peer, const void *blob, size_t bloblen, double deadline, char *why) {
    ipc_ctx *x = ctx;
    if (peer < 0 || peer >= x->in.nranks || bloblen != sizeof(blob_t)) return RINGLET_SUCCESS;
    blob_t b;
    memcpy(&b, blob, sizeof b);
    b.name[IPC_NAME_MAX - 1] = 0;
    pthread_mutex_lock(&x->mu);
    int skip = x->reach[peer] || x->has_probe != IPC_PROBE_MADE;
    pthread_mutex_unlock(&x->mu);
    if (skip) return RINGLET_SUCCESS;
    for (;;) {
        ipc_proc proc = {0, 0};
        int st = peer_probe_state(x, peer, &b, NULL, &proc, why);
        if (st < 0) return RINGLET_ERR_REMOTE;
        if (st != IPC_PROBE_PENDING) return RINGLET_SUCCESS;
        if (x->in.stop && atomic_load(x->in.stop))
            return snprintf(why, RL_ERR_MAX, "stopped while waiting for rank %d's device memory probe", peer),
                   RINGLET_ERR_REMOTE;
        if (process_gone(proc))
            return snprintf(why, RL_ERR_MAX, "rank %d (pid %d) ended before it made its device memory probe", peer,
                            (int)proc.pid),
                   RINGLET_ERR_REMOTE;
        if (rl_now() > deadline)
            return snprintf(why, RL_ERR_MAX, "rank %d made no device memory probe within RINGLET_TIMEOUT: does it call "
                                             "with device buffers too?", peer),
                   RINGLET_ERR_TIMEOUT;
        struct timespec ts = {0, 200 * 1000};
        nanosleep(&ts, NULL);
    }
}

int rl_ipc_reachable(void *ctx, int peer, const void *blob, size_t bloblen, char *why) {
    ipc_ctx *x = ctx;
    int broken = 0;
    if (peer < 0 || peer >= x->in.nranks || bloblen != sizeof(blob_t)) return 0;
    blob_t b;
    memcpy(&b, blob, sizeof b);
    b.name[IPC_NAME_MAX - 1] = 0;
    pthread_mutex_lock(&x->mu);
    int quiet = rl_dev_in_quiet();
    if (!x->reach[peer] && quiet) publish_probe(x); /* rl_ipc_publish made it already, as a rule */
    int later = !x->reach[peer] && quiet && x->has_probe == IPC_PROBE_MADE;
    int st = IPC_PROBE_FAILED;
    rl_dev_handle probe;
    if (later) {
        ipc_proc proc;
        st = peer_probe_state(x, peer, &b, &probe, &proc, why);
    }
    if (later && (st < 0 || st == IPC_PROBE_PENDING)) {
        /* Not awaited first (rl_ipc_peer_ready): the pair is not decided, a later call tries again. */
        if (st == IPC_PROBE_PENDING)
            snprintf(why, RL_ERR_MAX, "internal: rank %d's device memory probe was not awaited before use", peer);
        broken = st == IPC_PROBE_PENDING ? 2 : 1;
    } else if (!x->reach[peer] && !rl_dev_in_quiet()) {
        /* Mapping can synchronise the device: only in the communicator's preparation. */
        snprintf(why, RL_ERR_MAX, "internal: rank %d's memory was not probed before use", peer);
    } else if (!x->reach[peer]) {
        void *p = NULL;
        if (x->has_probe != IPC_PROBE_MADE) {
            /* Peers cannot map this rank's memory: the pair stages, on both ends. */
            snprintf(why, RL_ERR_MAX, "this rank exported no device memory of its own (its probe allocation failed)");
        } else if (st != IPC_PROBE_READY) {
            snprintf(why, RL_ERR_MAX, "rank %d exported no device memory", peer);
        } else if (rl_dev_work_stuck()) {
            /* The probe could not be unmapped at once, and the peer frees it at its fini
             * (undefined in CUDA while mapped here): not tried, taken as mappable. Where it
             * is not, the first use of the pair fails at its mapping, naming why. */
            RL_INFO(x->in.rank, "cuda_ipc: rank %d's memory taken as mappable without its probe (device work of this "
                                "process did not finish)", peer);
            x->reach[peer] = 1;
        } else if (x->d->mem_import(&probe, &p) != RL_DEV_OK) {
            snprintf(why, RL_ERR_MAX, "rank %d's device memory cannot be mapped here: %s", peer, rl_dev_error());
        } else {
            /* Unmapped at once (a quiet section, nothing stuck): the peer frees it at its fini. */
            if (!rl_dev_free_later(p, RL_DEV_MEM_IMPORTED))
                RL_WARN(x->in.rank, "cuda_ipc: rank %d's probe allocation stays mapped here for now", peer);
            x->reach[peer] = 1;
        }
        if (!x->reach[peer]) {
            x->reach[peer] = -1;
            if (decline_peer(x, peer, &b) < 0) {
                broken = 1;
                snprintf(why, RL_ERR_MAX,
                         "rank %d sends to this rank over cuda_ipc, but this rank cannot map its device memory: CUDA "
                         "IPC works one way only between these two processes (RINGLET_CUDA_IPC_DISABLE=1 stages all)",
                         peer);
            }
        }
    } else if (x->reach[peer] < 0) {
        snprintf(why, RL_ERR_MAX, "rank %d's device memory cannot be mapped here (tried before)", peer);
    }
    int ok = broken ? -broken : x->reach[peer] > 0;
    pthread_mutex_unlock(&x->mu);
    return ok;
}
