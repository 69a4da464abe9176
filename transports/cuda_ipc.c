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
 * access) is tried once per peer with a probe allocation each rank exports (reachable),
 * made at its first use of device buffers on their device (the peers wait for it, with no
 * quiet section held: publish, peer_ready); where it cannot, the communicator falls back
 * to staging through host memory. Where only one
 * rank of the pair can map the other's memory, the one that cannot marks the pair declined in
 * both control blocks (cuda_ipc_conn.c, decline_peer), and the other's ends fail at once (or,
 * where the other connected first, the one that cannot fails: its reachable says -1).
 *
 * Allocating, freeing and mapping device memory can synchronise the device, and so must
 * not happen while a stream is held (device.h): connect allocates and reachable maps in
 * the communicator's quiet sections (before an operation is queued), ready maps the
 * sender's slots in one of its own, and memory is freed with rl_dev_free_later. A
 * sender's slots are freed only once the receiver unmapped them or never will (CUDA calls
 * freeing memory another process has open undefined): a clean end of the communicator
 * waits for that within its deadline (its peers are ending too); after an abort, or past
 * the deadline, they wait process-wide for a later init or fini of the transport
 * (cuda_ipc_conn.c, release_orphans and sweep_orphans).
 *
 * This file moves data; cuda_ipc_conn.c makes and ends connections (ipc_conn.h).
 */
#include <stdlib.h>

#include "ipc_conn.h"
#include "log.h"
#include "util.h"

/* This rank aborted the communicator. */
static int aborted(const ipc_ctx *x) { return x->in.aborted && atomic_load(x->in.aborted); }

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
        rl_ipc_fail(k, code, refused);
        return 1;
    }
    if (atomic_load(&k->ctl->declined)) {
        char why[RL_ERR_MAX];
        declined_why(k, why);
        rl_ipc_fail(k, RINGLET_ERR_REMOTE, why);
        return 1;
    }
    int saved = dev_enter(k);
    for (rl_posted *p = k->q.head; p; p = p->next) {
        ipc_op *o = (ipc_op *)p;
        while (o->started < o->npieces) {
            if (!rl_fifo_room(f)) goto publish;
            uint32_t s = rl_fifo_slot(f, f->head);
            size_t piece = rl_fifo_piece_len(f, p->len, p->off);
            if (o->started == 0) o->first = f->head;
            if ((piece && d->memcpy_async(k->slots + (size_t)s * k->slot_bytes, p->buf + p->off, piece, k->stream) != RL_DEV_OK) ||
                d->event_record(k->ev[s], k->stream) != RL_DEV_OK) {
                dev_leave(k, saved);
                char why[RL_ERR_MAX];
                snprintf(why, sizeof why, "copy into a slot: %s", rl_dev_error());
                rl_ipc_fail(k, RINGLET_ERR_CUDA, why);
                return 1;
            }
            k->pmsg[s] = p->len;
            k->plen[s] = piece;
            k->pchan[s] = p->req->chan;
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
            dev_leave(k, saved);
            char why[RL_ERR_MAX];
            snprintf(why, sizeof why, "copy into a slot: %s", rl_dev_error());
            rl_ipc_fail(k, RINGLET_ERR_CUDA, why);
            return 1;
        }
        rl_fifo_publish(f, k->ppos, k->pmsg[s], k->plen[s], k->pchan[s]);
        k->ppos++;
        moved = 1;
    }
    dev_leave(k, saved);
    if (moved) ring_peer(k);
    ipc_op *h;
    while ((h = first_op(k)) && h->started == h->npieces && k->ppos >= h->first + h->npieces) rl_posted_pop(&k->q);
    return moved;
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
    /* OPEN before the sender's state is read again (both sequentially consistent): a
     * sender that closes and then still reads NONE frees its slots at once, and this
     * rank must then see its close (conn_free). */
    atomic_store(&k->ctl->fifo.receiver, RL_FIFO_OPEN);
    if (atomic_load(&k->ctl->fifo.sender) != RL_FIFO_OPEN) return snprintf(why, n, "the sender closed the connection"), 0;
    void *p = NULL;
    int saved = dev_enter(k);
    if (k->ctx->d->mem_import(&k->ctl->handle, &p) != RL_DEV_OK) {
        snprintf(why, n, "mapping the sender's slots: %s", rl_dev_error());
        p = NULL;
    } else if (conn_streams(k, why) != 0) {
        /* At once, unless device work is noted stuck: then the close says so to the sender. */
        if (!rl_dev_free_later(p, RL_DEV_MEM_IMPORTED)) k->unmap_kept = 1;
        p = NULL;
    }
    dev_leave(k, saved);
    if (!p) return 0;
    if (!locked) pthread_mutex_lock(&k->ctx->mu);
    k->slots = p;
    if (!locked) pthread_mutex_unlock(&k->ctx->mu);
    return 1;
}

/* A mapping of the sender's slots that failed: the sender is told why (their count or
 * size, or the mapping), and fails too. 1 when it was their count or size. */
static int refuse_sender(ipc_conn *k) {
    char why[RL_ERR_MAX];
    int fifo_mismatch = !check_fifo(k, why, sizeof why);
    atomic_store(&k->ctl->fifo.mismatch, fifo_mismatch ? RL_FIFO_REFUSED_SLOTS : RL_FIFO_REFUSED_MAP);
    ring_peer(k);
    return fifo_mismatch;
}

/* Whose failure a failed mapping is: a sender that died after it connected takes its
 * memory with it, which is the peer's failure (REMOTE: the monitor then names it), not a
 * mapping problem. A process being killed loses its memory before it is gone, so the
 * callers give it a second to be (map_blame_s: less where RINGLET_TIMEOUT is short). */
static double map_blame_s(const ipc_conn *k) { return k->ctx->in.timeout_s < 2.0 ? k->ctx->in.timeout_s / 2 : 1.0; }
static ringlet_result_t map_blame(const ipc_conn *k) {
    ipc_proc sender = {k->ctl->sender_pid, k->ctl->sender_pidns};
    return process_gone(sender) ? RINGLET_ERR_REMOTE : RINGLET_ERR_CUDA;
}

/* Receiver, before the first operation on device buffers that uses the connection is
 * queued: waits for the sender to connect, then maps its slots in a quiet section. */
static ringlet_result_t ipc_ready(void *conn, double deadline, char *err) {
    ipc_conn *k = conn;
    if (k->sending || k->slots) return RINGLET_SUCCESS;
    ipc_ctx *x = k->ctx;
    int st;
    while ((st = atomic_load_explicit(&k->ctl->fifo.sender, memory_order_acquire)) == RL_FIFO_NONE) {
        if (atomic_load(&k->ctl->declined)) return declined_why(k, err), RINGLET_ERR_REMOTE;
        if (atomic_load(x->in.stop))
            return snprintf(err, RL_ERR_MAX, "stopped (the communicator failed) waiting for rank %d to connect over "
                            "cuda_ipc", k->peer), RINGLET_ERR_REMOTE;
        if (rl_now() > deadline)
            /* Most likely the peer passed host memory to this call: it then sends over a host
             * transport, since neither side knows what the other passed. */
            return snprintf(err, RL_ERR_MAX,
                            "rank %d did not connect over cuda_ipc within RINGLET_TIMEOUT (a rank passing host "
                            "memory sends over shm: ranks that share cuda_ipc must pass the same kind of memory to a "
                            "call, unless RINGLET_TRANSPORT names one)", k->peer),
                   RINGLET_ERR_TIMEOUT;
        rl_sleep_ms(1);
    }
    /* Closed before this rank mapped it: a sender closing cleanly waits until its published
     * pieces are taken (linger), so none is: nothing to map. Not a failure here: the
     * operation may need nothing from it (a count of 0, a peer it sends nothing to; the
     * sender finished and ended its communicator first); a receive that needs a piece fails
     * in attach. */
    if (st == RL_FIFO_CLOSED) return RINGLET_SUCCESS;
    char why[RL_ERR_MAX] = "";
    if (rl_dev_quiet_begin(x->in.timeout_s, "mapping a cuda_ipc peer's slots") != RL_DEV_OK) {
        snprintf(err, RL_ERR_MAX, "over cuda_ipc: %s", rl_dev_error());
        return RINGLET_ERR_CUDA;
    }
    int ok = map_sender(k, 0, why, sizeof why);
    rl_dev_quiet_end();
    if (ok) return RINGLET_SUCCESS;
    snprintf(err, RL_ERR_MAX, "over cuda_ipc: %.220s", why);
    if (refuse_sender(k)) return RINGLET_ERR_INVALID_USAGE;
    for (double until = rl_now() + map_blame_s(k); map_blame(k) != RINGLET_ERR_REMOTE && rl_now() < until;) rl_sleep_ms(10);
    return map_blame(k);
}

/* Receiver, from progress (the context's lock held): the sender's slots. Made ready before
 * any operation on device buffers; host buffers forced over cuda_ipc (RINGLET_TRANSPORT)
 * map them here, once the sender connected and while no stream of the process is held.
 * 0: not yet. */
static int attach(ipc_conn *k) {
    if (k->slots) return 1;
    if (k->blame_until) { /* a mapping failed: whose failure it is, decided without waiting under the lock */
        ringlet_result_t code = map_blame(k);
        if (code == RINGLET_ERR_CUDA && rl_now() < k->blame_until) return 0;
        k->blame_until = 0; /* a later operation tries again */
        rl_ipc_fail(k, code, k->blame_why);
        return 0;
    }
    int st = atomic_load_explicit(&k->ctl->fifo.sender, memory_order_acquire);
    if (st != RL_FIFO_OPEN) {
        if (st == RL_FIFO_CLOSED) rl_ipc_fail(k, RINGLET_ERR_REMOTE, "the peer closed the connection");
        return 0;
    }
    if (!rl_dev_quiet_try()) return 0;
    char why[RL_ERR_MAX] = "";
    int ok = map_sender(k, 1, why, sizeof why);
    rl_dev_quiet_end();
    if (ok) return 1;
    if (refuse_sender(k)) rl_ipc_fail(k, RINGLET_ERR_INVALID_USAGE, why);
    else if (map_blame(k) == RINGLET_ERR_REMOTE) rl_ipc_fail(k, RINGLET_ERR_REMOTE, why);
    else {
        k->blame_until = rl_now() + map_blame_s(k);
        snprintf(k->blame_why, sizeof k->blame_why, "%s", why);
    }
    return 0;
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
    int saved = dev_enter(k);
    for (rl_posted *p = k->q.head; p; p = p->next) {
        ipc_op *o = (ipc_op *)p;
        if (!o->npieces) o->npieces = rl_fifo_npieces(p->len, k->slot_bytes);
        while (o->started < o->npieces) {
            uint64_t piece;
            char why[RL_ERR_MAX];
            int got = rl_fifo_peek(f, p->len, p->req->chan, p->off, &piece, why, sizeof why);
            if (got == 0) goto finish;
            if (got < 0) {
                ring_peer(k);
                dev_leave(k, saved);
                rl_ipc_fail(k, RINGLET_ERR_INVALID_USAGE, why);
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
                    dev_leave(k, saved);
                    snprintf(why, sizeof why, "copy out of a slot: %s", rl_dev_error());
                    rl_ipc_fail(k, RINGLET_ERR_CUDA, why);
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
            dev_leave(k, saved);
            char why[RL_ERR_MAX];
            snprintf(why, sizeof why, "copy out of a slot: %s", rl_dev_error());
            rl_ipc_fail(k, RINGLET_ERR_CUDA, why);
            return 1;
        }
        k->state[s] = RL_FIFO_DONE;
        k->owner[s]->done++;
        moved = 1;
    }
    dev_leave(k, saved);
    if (rl_fifo_hand_back(f)) ring_peer(k);
    ipc_op *h;
    while ((h = first_op(k)) && h->npieces && h->done == h->npieces) rl_posted_pop(&k->q);
    /* A sender that closed cleanly published everything it sent: only a receive still
     * waiting for a piece it never published fails (pieces already taken finish, their
     * slots stay mapped here). */
    if (!moved && wants_piece(k) && rl_fifo_sender_gone(f))
        rl_ipc_fail(k, RINGLET_ERR_REMOTE, "the peer closed the connection");
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

/* Fails every posted request. A failed request hands its buffer back (the algorithm
 * waits for its requests before it returns: pipe.c, run_stop), and a device copy of it
 * still queued would read or write the buffer later, in memory the caller may reuse or
 * free at once (PyTorch's caching allocator gives a freed tensor's memory to the next
 * one). So while such copies are under way the requests fail only once they are done
 * (settle_failure, from progress), within RINGLET_TIMEOUT; the connection starts no more.
 * Not after this rank's abort, which waits for nothing. A device that cannot record or
 * query the event has failed (a sticky error ends its work): nothing is waited for. */
void rl_ipc_fail(ipc_conn *k, ringlet_result_t code, const char *why) {
    k->blame_until = 0; /* a failed mapping's requests fail now: a later one maps again */
    if (!k->q.head || k->failing) return; /* a failure under way keeps its reason */
    if (busy(k) && k->drain && !aborted(k->ctx)) {
        const rl_device_ops *d = k->ctx->d;
        int saved = dev_enter(k);
        int q = d->event_record(k->drain, k->stream);
        if (q == RL_DEV_OK) q = d->event_query(k->drain);
        dev_leave(k, saved);
        if (q == RL_DEV_NOT_READY) {
            k->failing = 1;
            k->fail_code = code;
            snprintf(k->fail_why, sizeof k->fail_why, "%s", why);
            k->fail_until = rl_now() + k->ctx->in.timeout_s;
            return;
        }
    }
    rl_posted_fail(&k->q, code, why);
}

/* Ends a failure under way with its copies unfinished: says so in the requests' error. */
static void fail_unfinished(ipc_conn *k, const char *cause) {
    char why[RL_ERR_MAX];
    snprintf(why, sizeof why, "%.120s (%s: its device copies may yet %s the buffer)", k->fail_why, cause,
             k->sending ? "read" : "write");
    k->failing = 0;
    rl_posted_fail(&k->q, k->fail_code, why);
}

void rl_ipc_fail_now(ipc_conn *k, ringlet_result_t code, const char *why) {
    if (k->failing) fail_unfinished(k, "closed at once");
    else rl_posted_fail(&k->q, code, why);
}

/* A failure waiting for its copies (rl_ipc_fail): fails the requests once the copies are
 * done, at once after this rank's abort, or at the deadline: copies not done by then are
 * behind device work that does not end (a kernel waiting for something), and are noted
 * stuck (frees wait for them). 1 when it failed them. */
static int settle_failure(ipc_conn *k) {
    ipc_ctx *x = k->ctx;
    int saved = dev_enter(k);
    int q = x->d->event_query(k->drain);
    dev_leave(k, saved);
    if (q != RL_DEV_NOT_READY) {
        k->failing = 0;
        rl_posted_fail(&k->q, k->fail_code, k->fail_why);
        return 1;
    }
    if (aborted(x)) {
        fail_unfinished(k, "aborted");
        return 1;
    }
    if (rl_now() <= k->fail_until) return 0;
    RL_WARN(x->in.rank, "cuda_ipc: the device copies of failed requests %s rank %d were not finished after %.0f s "
            "(RINGLET_TIMEOUT): the requests fail now, and the copies may yet %s their buffers",
            k->sending ? "sending to" : "receiving from", k->peer, x->in.timeout_s, k->sending ? "read" : "write");
    rl_dev_note_stuck(k->stream);
    fail_unfinished(k, "unfinished at RINGLET_TIMEOUT");
    return 1;
}

static int progress_locked(ipc_ctx *x) {
    int moved = 0, stop = atomic_load(x->in.stop);
    for (ipc_conn *k = x->conns; k; k = k->next) {
        if (!k->q.head) continue;
        if (k->failing) {
            moved |= settle_failure(k);
        } else if (stop) {
            rl_ipc_fail(k, RINGLET_ERR_REMOTE, "stopped (the communicator failed)");
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
    if (k->failing) { /* it fails with the others, once their copies are done */
    } else if (atomic_load(k->ctx->in.stop)) {
        rl_ipc_fail(k, RINGLET_ERR_REMOTE, "stopped (the communicator failed)");
    } else if (k->sending) {
        progress_send(k);
    } else {
        progress_recv(k);
    }
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

/* Copies into slots (sender) or out of them (receiver) enqueued on the connection's
 * stream and not finished: the requests wait on this rank's device. */
static int ipc_waits_on_device(void *conn, char *why, size_t n) {
    ipc_conn *k = conn;
    const rl_fifo *f = &k->fifo;
    unsigned queued = 0;
    pthread_mutex_lock(&k->ctx->mu);
    if (k->sending) {
        queued = (unsigned)(f->head - k->ppos);
    } else {
        for (uint64_t p = f->rtail; p < f->rpos; p++)
            if (k->state[rl_fifo_slot(f, p)] == RL_FIFO_COPYING) queued++;
    }
    pthread_mutex_unlock(&k->ctx->mu);
    if (!queued) return 0;
    snprintf(why, n,
             "%u device cop%s %s %s queued on this rank's device and not finished " RL_DEVICE_STUCK_HINT,
             queued, queued == 1 ? "y" : "ies", k->sending ? "into the CUDA IPC slots it reads" : "out of its CUDA IPC slots",
             queued == 1 ? "is" : "are");
    return 1;
}

static void ipc_release(void *conn, rl_treq *req) {
    ipc_conn *k = conn;
    const rl_posted *p = (const rl_posted *)req->priv;
    pthread_mutex_lock(&k->ctx->mu);
    if (p->map && req->mapped && rl_fifo_release(&k->fifo, p->lent)) ring_peer(k);
    pthread_mutex_unlock(&k->ctx->mu);
}

const rl_transport_ops rl_transport_cuda_ipc = {
    .name = "cuda_ipc",
    .device_memory = 1,
    .init = rl_ipc_init,
    .connect = rl_ipc_connect,
    .accept = rl_ipc_accept,
    .isend = ipc_isend,
    .irecv = ipc_irecv,
    .reg_mr = rl_transport_reg_none,
    .dereg_mr = rl_transport_dereg_none,
    .close = rl_ipc_close,
    .fini = rl_ipc_fini,
    .progress = ipc_progress,
    .irecv_map = ipc_irecv_map,
    .release = ipc_release,
    .reachable = rl_ipc_reachable,
    .publish = rl_ipc_publish,
    .peer_ready = rl_ipc_peer_ready,
    .ready = ipc_ready,
    .waits_on_device = ipc_waits_on_device,
};
