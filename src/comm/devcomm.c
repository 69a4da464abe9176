#include "devcomm.h"

#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "conn.h"
#include "failure.h"
#include "log.h"
#include "util.h"
#include "wait.h"

ringlet_result_t rl_devcomm_error(const char *what, char *err) {
    snprintf(err, RL_MSG_MAX, "%s: %s", what, rl_dev_error());
    return RINGLET_ERR_CUDA;
}

static pthread_mutex_t g_create_mu = PTHREAD_MUTEX_INITIALIZER;

/* The communicator's device state, made (without any device call) on first use. */
static struct rl_devcomm *get_state(struct ringlet_comm *c, char *err) {
    struct rl_devcomm *s = c->dev;
    if (s) return s;
    const rl_device_ops *d = rl_device();
    if (!d) {
        snprintf(err, RL_MSG_MAX, "a stream or device buffers, but no device backend is usable here: %s",
                 rl_device_unavailable());
        return NULL;
    }
    pthread_mutex_lock(&g_create_mu);
    if (!(s = c->dev)) {
        s = calloc(1, sizeof *s);
        if (s) {
            s->d = d;
            s->device = -1;
            pthread_mutex_init(&s->mu, NULL);
            pthread_mutex_init(&s->prep_mu, NULL);
            s->send_ready = calloc((size_t)c->nranks, 1);
            s->recv_ready = calloc((size_t)c->nranks, 1);
            if (!s->send_ready || !s->recv_ready) {
                free(s->send_ready), free(s->recv_ready), free(s);
                s = NULL;
            }
        }
        if (s) c->dev = s;
    }
    pthread_mutex_unlock(&g_create_mu);
    if (!s) snprintf(err, RL_MSG_MAX, "out of memory");
    return s;
}

/* ---- preparation (calling thread) ---- */

/* Sets a flag satisfied() reads (under s->mu, as it reads). */
static void mark(struct rl_devcomm *s, unsigned char *flag) {
    pthread_mutex_lock(&s->mu);
    *flag = 1;
    pthread_mutex_unlock(&s->mu);
}

static int lane_complete(const struct rl_devcomm *s, const rl_devlane *l, int dev_slots) {
    return l && (!(dev_slots || s->reduce_from_copy) || l->dev_slots);
}

/* Whatever need asks for is there (under s->mu). */
static int satisfied(const struct rl_devcomm *s, const rl_dev_needs *need, int nranks) {
    if (!s->flag) return 0;
    if (need->device < 0) /* host buffers with a stream: the flag, and the stream's device */
        return need->stream_device >= 0 && need->stream_device < RL_DEV_MAX_READY && s->ready_devices[need->stream_device];
    if (s->device != need->device || !s->s_send) return 0;
    for (int i = 0; i < need->lanes; i++)
        if (!lane_complete(s, s->lanes[i], need->dev_slots || s->device_receiving)) return 0;
    if (need->scratch > s->scratch_size || need->scratch2 > s->scratch2_size || need->pinned > s->pinned_size)
        return 0;
    for (int q = 0; q < nranks; q++)
        if ((need->send_to && need->send_to[q] && !s->send_ready[q]) ||
            (need->recv_from && need->recv_from[q] && !s->recv_ready[q]))
            return 0;
    return 1;
}

/* Device memory (kind RL_DEV_MEM_DEVICE) or pinned memory of at least bytes in *buf;
 * the old buffer retired (an operation running may still use it). In a quiet section. */
static ringlet_result_t grow(struct rl_devcomm *s, int kind, void **buf, size_t *size, size_t bytes, char *err) {
    if (bytes <= *size && *buf) return RINGLET_SUCCESS;
    if (*buf && s->nretired == (int)(sizeof s->retired / sizeof s->retired[0]))
        return snprintf(err, RL_MSG_MAX, "%s scratch memory grew too often", kind ? "pinned" : "device"),
               RINGLET_ERR_CUDA;
    /* At least double, so that a sweep of sizes reallocates only a few times. */
    size_t want = bytes > 2 * *size ? bytes : 2 * *size;
    if (want < 4096) want = 4096;
    void *p = NULL;
    if ((kind == RL_DEV_MEM_PINNED ? s->d->host_alloc(&p, want) : s->d->mem_alloc(&p, want)) != RL_DEV_OK)
        return rl_devcomm_error(kind == RL_DEV_MEM_PINNED ? "pinned scratch memory" : "device scratch memory", err);
    pthread_mutex_lock(&s->mu);
    if (*buf) {
        s->retired[s->nretired] = *buf;
        s->retired_kind[s->nretired++] = kind;
    }
    *buf = p;
    *size = want;
    pthread_mutex_unlock(&s->mu);
    return RINGLET_SUCCESS;
}

static ringlet_result_t make_lane(struct ringlet_comm *c, struct rl_devcomm *s, int i, int dev_slots, char *err) {
    const rl_device_ops *d = s->d;
    rl_devlane *l = s->lanes[i], *fresh = NULL;
    if (!l) {
        l = fresh = calloc(1, sizeof *l);
        if (!l) return snprintf(err, RL_MSG_MAX, "out of memory"), RINGLET_ERR_SYSTEM;
        ringlet_result_t rc = RINGLET_SUCCESS;
        for (int k = 0; k < s->nslots && !rc; k++)
            if (d->event_create(&l->ev_send[k]) != RL_DEV_OK || d->event_create(&l->ev_recv[k]) != RL_DEV_OK)
                rc = rl_devcomm_error("creating events", err);
        size_t bytes = s->slot_bytes * (size_t)s->nslots;
        if (!rc && (d->host_alloc((void **)&l->send_slots, bytes) != RL_DEV_OK ||
                    d->host_alloc((void **)&l->recv_slots, bytes) != RL_DEV_OK))
            rc = rl_devcomm_error("pinned staging slots", err);
        if (rc) {
            for (int k = 0; k < RL_DEV_MAX_SLOTS; k++) {
                if (l->ev_send[k]) d->event_destroy(l->ev_send[k]);
                if (l->ev_recv[k]) d->event_destroy(l->ev_recv[k]);
            }
            if (l->send_slots) d->host_free(l->send_slots);
            if (l->recv_slots) d->host_free(l->recv_slots);
            free(l);
            return rc;
        }
    }
    if ((dev_slots || s->reduce_from_copy) && !l->dev_slots) {
        char *p = NULL;
        if (d->mem_alloc((void **)&p, s->slot_bytes * (size_t)s->nslots) != RL_DEV_OK) {
            ringlet_result_t rc = rl_devcomm_error("device staging slots", err);
            if (fresh) {
                s->lanes[i] = fresh; /* complete but for its device slots: fini frees it */
            }
            return rc;
        }
        pthread_mutex_lock(&s->mu);
        l->dev_slots = p;
        pthread_mutex_unlock(&s->mu);
    }
    if (fresh) {
        pthread_mutex_lock(&s->mu);
        s->lanes[i] = fresh;
        pthread_mutex_unlock(&s->mu);
        RL_INFO(c->rank, "device staging lane %d made (%zu bytes of pinned slots)", i,
                2 * s->slot_bytes * (size_t)s->nslots);
    }
    return RINGLET_SUCCESS;
}

/* Streams and events of the buffers' device, made by the first operation on device
 * buffers (current device: dev). */
static ringlet_result_t make_streams(struct ringlet_comm *c, struct rl_devcomm *s, int dev, char *err) {
    const rl_device_ops *d = s->d;
    rl_dev_stream_t a = NULL, b = NULL;
    if (d->stream_create(&a) != RL_DEV_OK || d->stream_create(&b) != RL_DEV_OK) {
        if (a) d->stream_destroy(a);
        return rl_devcomm_error("creating the communicator's streams", err);
    }
    rl_dev_event_t e[3] = {NULL, NULL, NULL};
    for (int i = 0; i < 3; i++)
        if (d->event_create(&e[i]) != RL_DEV_OK) {
            ringlet_result_t rc = rl_devcomm_error("creating events", err);
            for (int k = 0; k < i; k++) d->event_destroy(e[k]);
            d->stream_destroy(a), d->stream_destroy(b);
            return rc;
        }
    const char *how = getenv("RINGLET_DEVICE_REDUCE");
    if (how && *how && strcmp(how, "copy") != 0 && strcmp(how, "direct") != 0)
        RL_WARN(c->rank, "RINGLET_DEVICE_REDUCE=%s is not direct or copy; using direct", how);
    pthread_mutex_lock(&s->mu);
    s->s_send = a, s->s_recv = b;
    s->ev_drain[0] = e[0], s->ev_drain[1] = e[1], s->ev_misc = e[2];
    s->nslots = c->nslots < RL_DEV_MAX_SLOTS ? c->nslots : RL_DEV_MAX_SLOTS;
    /* A slot holds a ring chunk or a point-to-point piece. */
    s->slot_bytes = c->chunk_bytes > RL_P2P_PIECE ? c->chunk_bytes : RL_P2P_PIECE;
    s->reduce_from_copy = how && !strcmp(how, "copy");
    s->device = dev;
    pthread_mutex_unlock(&s->mu);
    atomic_store(&c->conn_device, dev);
    RL_INFO(c->rank, "device %d over the %s backend: %d pinned staging slots of %zu bytes per direction; kernels "
                     "reduce %s; streams held by %s",
            dev, d->name, s->nslots, s->slot_bytes,
            s->reduce_from_copy ? "from device copies of the slots" : "straight from the pinned slots",
            !strcmp(d->hold_kind(dev), "sync") ? "sync (none: a stream call waits for its operation)" : d->hold_kind(dev));
    return RINGLET_SUCCESS;
}

/* Device connections need asks for: the transport picked (for a device transport, which
 * can map a peer's memory: in a quiet section), the sending ends made (their memory
 * allocated) and the receiving ends accepted. Host transports are left to connect on
 * first use, as always. */
static ringlet_result_t make_connections(struct ringlet_comm *c, struct rl_devcomm *s, const rl_dev_needs *need,
                                         char *err) {
    /* Sending ends first, also towards a peer this rank only receives from: the peer's
     * preparation may wait for them (ready) before it makes its own, as this one waits
     * for the peer's, so every rank makes all of its sending ends before it waits. */
    for (int dir = 0; dir < 2; dir++) {
        unsigned char *have = dir ? s->recv_ready : s->send_ready;
        for (int q = 0; q < c->nranks; q++) {
            int want = (need->send_to && need->send_to[q]) || (need->recv_from && need->recv_from[q]);
            if (dir) want = need->recv_from && need->recv_from[q];
            if (!want || have[q] || q == c->rank) continue;
            rl_conn *conn = NULL;
            char cerr[RL_ERR_MAX] = "";
            int tp = -1;
            ringlet_result_t rc = rl_conn_pick_transport(c, q, 1, &tp, cerr);
            if (!rc && !rl_transports[tp]->device_memory) {
                mark(s, &have[q]); /* a host transport: connected on first use, by the progress thread */
                continue;
            }
            if (!rc) rc = dir ? rl_comm_recv_conn(c, q, 1, &conn, cerr) : rl_comm_send_conn(c, q, 1, &conn, cerr);
            if (rc) return snprintf(err, RL_MSG_MAX, "%s rank %d: %s", dir ? "receiving from" : "sending to", q, cerr), rc;
            /* Ready now unless a receiving end must still map its sender's memory. */
            if (!(dir && conn->tp->ready)) mark(s, &have[q]);
        }
    }
    return RINGLET_SUCCESS;
}

/* The stream flag, once (in a quiet section): a call whose preparation fails on a peer is
 * queued all the same where its stream can be held (rl_comm_enqueue), and fails there. */
static ringlet_result_t make_flag(struct rl_devcomm *s, char *err) {
    if (s->flag) return RINGLET_SUCCESS;
    void *flag = NULL;
    if (s->d->host_alloc(&flag, 64) != RL_DEV_OK) return rl_devcomm_error("pinned memory for the stream flag", err);
    *(volatile uint64_t *)flag = 0;
    pthread_mutex_lock(&s->mu);
    s->flag = flag;
    pthread_mutex_unlock(&s->mu);
    return RINGLET_SUCCESS;
}

/* cuda_ipc's probe of this rank, made at its first use of device buffers (in a quiet
 * section), on the current device: the buffers'. */
static ringlet_result_t publish_probe(struct ringlet_comm *c, struct rl_devcomm *s, char *err) {
    const rl_transport_ops *ipc = rl_transports[RL_TP_CUDA_IPC];
    void *ctx = c->tctx[RL_TP_CUDA_IPC];
    if (s->published || !ipc || !ipc->publish || !ctx) return RINGLET_SUCCESS; /* once: a quiet section waits for holds */
    if (rl_dev_quiet_begin(c->timeout_s, "cuda_ipc's probe allocation") != RL_DEV_OK)
        return rl_devcomm_error("device memory for the operation", err);
    char why[RL_ERR_MAX] = "";
    ringlet_result_t rc = make_flag(s, err);
    if (!rc) rc = ipc->publish(ctx, why);
    rl_dev_quiet_end();
    if (!rc) s->published = 1;
    if (rc && why[0]) snprintf(err, RL_MSG_MAX, "%s", why);
    return rc;
}

ringlet_result_t rl_devcomm_publish(struct ringlet_comm *c, int dev, char *err) {
    struct rl_devcomm *s = get_state(c, err);
    if (!s) return RINGLET_ERR_INVALID_USAGE;
    int saved = -1;
    if (s->d->device_enter(dev, &saved) != RL_DEV_OK) return rl_devcomm_error("selecting the device", err);
    pthread_mutex_lock(&s->prep_mu);
    ringlet_result_t rc = publish_probe(c, s, err);
    pthread_mutex_unlock(&s->prep_mu);
    s->d->device_leave(saved);
    return rc;
}

/* Before the quiet section that first picks a transport for device buffers with a peer of
 * this host: what CUDA IPC's reachable needs from each (its probe, made at first use) made here
 * (in a quiet section of its own) and awaited from the peers with none held, for the
 * reason given at ready_connections. */
static ringlet_result_t await_probes(struct ringlet_comm *c, struct rl_devcomm *s, const rl_dev_needs *need,
                                     char *err) {
    const rl_transport_ops *ipc = rl_transports[RL_TP_CUDA_IPC];
    void *ctx = c->tctx[RL_TP_CUDA_IPC];
    if (!ipc || !ipc->publish || !ipc->peer_ready || !ctx) return RINGLET_SUCCESS;
    int any = 0;
    for (int q = 0; q < c->nranks && !any; q++) {
        int want = (need->send_to && need->send_to[q]) || (need->recv_from && need->recv_from[q]);
        any = want && q != c->rank && !(s->send_ready[q] && s->recv_ready[q]) && rl_conn_ipc_candidate(c, q);
    }
    if (!any) return RINGLET_SUCCESS;
    char why[RL_ERR_MAX] = "";
    ringlet_result_t rc = publish_probe(c, s, err);
    double deadline = rl_now() + c->timeout_s;
    for (int q = 0; q < c->nranks && !rc; q++) {
        int want = (need->send_to && need->send_to[q]) || (need->recv_from && need->recv_from[q]);
        if (!want || q == c->rank || !rl_conn_ipc_candidate(c, q)) continue;
        rc = ipc->peer_ready(ctx, q, c->infos[q].blob[RL_TP_CUDA_IPC], c->infos[q].bloblen[RL_TP_CUDA_IPC], deadline, why);
        if (rc) snprintf(err, RL_MSG_MAX, "rank %d: %s", q, why);
    }
    return rc;
}

/* Receiving ends that map their sender's memory: each waits for its sender to connect
 * (no quiet section held meanwhile), then maps. */
static ringlet_result_t ready_connections(struct ringlet_comm *c, struct rl_devcomm *s, const rl_dev_needs *need,
                                          char *err) {
    for (int q = 0; need->recv_from && q < c->nranks; q++) {
        if (!need->recv_from[q] || s->recv_ready[q] || q == c->rank) continue;
        rl_conn *conn = NULL;
        char cerr[RL_ERR_MAX] = "";
        ringlet_result_t rc = rl_comm_recv_conn(c, q, 1, &conn, cerr);
        if (!rc && conn->tp->ready) rc = conn->tp->ready(conn->h, rl_now() + c->timeout_s, cerr);
        if (rc) return snprintf(err, RL_MSG_MAX, "receiving from rank %d: %s", q, cerr), rc;
        mark(s, &s->recv_ready[q]);
    }
    return RINGLET_SUCCESS;
}

/* Whether a receiving end need marks goes over a transport that moves device memory
 * (its pieces may not fit a lane's pinned slot: device staging slots then). */
static int device_receiving(const struct ringlet_comm *c, const rl_dev_needs *need) {
    for (int q = 0; need->recv_from && q < c->nranks; q++) {
        if (!need->recv_from[q]) continue;
        /* the device buffers' connection: its own table only where it is another
         * transport than host buffers take (with RINGLET_TRANSPORT=cuda_ipc, both) */
        const rl_conn *k = c->recv_conns_dev[q].h ? &c->recv_conns_dev[q] : &c->recv_conns[q];
        if (k->h && k->tp->device_memory) return 1;
    }
    return 0;
}

/* In a quiet section, on the device: everything but the receiving ends' mappings. */
static ringlet_result_t prepare_quiet(struct ringlet_comm *c, struct rl_devcomm *s, const rl_dev_needs *need, int dev,
                                      char *err) {
    const rl_device_ops *d = s->d;
    ringlet_result_t frc = make_flag(s, err);
    if (frc) return frc;
    if (d->device_ready(dev) != RL_DEV_OK) return rl_devcomm_error("making the device ready", err);
    if (dev < RL_DEV_MAX_READY) mark(s, &s->ready_devices[dev]);
    if (need->device < 0) return RINGLET_SUCCESS;
    ringlet_result_t rc = RINGLET_SUCCESS;
    if (!s->s_send) rc = make_streams(c, s, dev, err);
    if (!rc) rc = make_connections(c, s, need, err);
    if (device_receiving(c, need)) {
        pthread_mutex_lock(&s->mu);
        s->device_receiving = 1;
        pthread_mutex_unlock(&s->mu);
    }
    int dev_slots = need->dev_slots || device_receiving(c, need) || s->device_receiving;
    for (int i = 0; i < need->lanes && !rc; i++) rc = make_lane(c, s, i, dev_slots, err);
    if (!rc) rc = grow(s, RL_DEV_MEM_DEVICE, &s->scratch, &s->scratch_size, need->scratch, err);
    if (!rc && need->scratch2) rc = grow(s, RL_DEV_MEM_DEVICE, &s->scratch2, &s->scratch2_size, need->scratch2, err);
    if (!rc && need->pinned) rc = grow(s, RL_DEV_MEM_PINNED, &s->pinned, &s->pinned_size, need->pinned, err);
    return rc;
}

ringlet_result_t rl_devcomm_prepare(struct ringlet_comm *c, const rl_dev_needs *need, char *err) {
    if (need->lanes > RL_DEV_MAX_LANES)
        return snprintf(err, RL_MSG_MAX, "more than %d peers at once", RL_DEV_MAX_LANES), RINGLET_ERR_INVALID_USAGE;
    struct rl_devcomm *s = get_state(c, err);
    if (!s) return RINGLET_ERR_INVALID_USAGE;
    pthread_mutex_lock(&s->mu);
    int mismatch = need->device >= 0 && s->device >= 0 && need->device != s->device;
    int done = !mismatch && satisfied(s, need, c->nranks);
    int used = s->device;
    pthread_mutex_unlock(&s->mu);
    if (mismatch)
        return snprintf(err, RL_MSG_MAX, "buffers on device %d, but this communicator uses device %d", need->device,
                        used),
               RINGLET_ERR_INVALID_USAGE;
    if (done) return RINGLET_SUCCESS;

    pthread_mutex_lock(&s->prep_mu);
    const rl_device_ops *d = s->d;
    int saved = -1, dev = need->device >= 0 ? need->device : need->stream_device;
    ringlet_result_t rc = RINGLET_SUCCESS;
    if (d->device_enter(dev, &saved) != RL_DEV_OK) rc = rl_devcomm_error("selecting the device", err);
    if (!rc) rc = await_probes(c, s, need, err);
    if (!rc) {
        if (rl_dev_quiet_begin(c->timeout_s, "preparing device memory") != RL_DEV_OK) {
            rc = rl_devcomm_error("device memory for the operation", err);
        } else {
            rc = prepare_quiet(c, s, need, dev, err);
            rl_dev_quiet_end();
        }
    }
    if (!rc && !need->no_wait) rc = ready_connections(c, s, need, err);
    d->device_leave(saved);
    pthread_mutex_unlock(&s->prep_mu);
    return rc;
}

/* ---- stream order (calling thread) ---- */

int rl_devcomm_can_hold(struct ringlet_comm *c) {
    struct rl_devcomm *s = c->dev;
    if (!s) return 0;
    pthread_mutex_lock(&s->mu);
    int ok = s->flag != NULL;
    pthread_mutex_unlock(&s->mu);
    return ok;
}

/* Whether streams of the stream's device are not held on the GPU (device.h: "sync"): the
 * calling thread waits for the operation instead (rl_devcomm_sync). */
static int not_held(const rl_device_ops *d, void *stream) {
    int dev = -1;
    return d->stream_device(stream, &dev) == RL_DEV_OK && !strcmp(d->hold_kind(dev), "sync");
}

/* After a wait on the flag queued on a user stream (on its device, made current): an event
 * recorded behind the wait, kept per stream (s->held), so that teardown frees the flag only
 * once the stream has passed it. Made and recorded outside s->mu: on a GPU a record on a
 * full stream blocks until the stream moves, which may need the progress thread, and that
 * takes s->mu. A later record on the same stream replaces the earlier (passed after it). */
static void note_held(struct rl_devcomm *s, void *stream, int dev) {
    const rl_device_ops *d = s->d;
    /* NULL, the legacy and the per-thread handles name a stream of the calling thread's
     * current device (cudaStreamPerThread: of the thread too): told apart by both. */
    int special = rl_dev_stream_is_current(stream);
    pthread_t self = pthread_self();
    rl_dev_event_t ev = NULL;
    if (d->event_create(&ev) != RL_DEV_OK) ev = NULL;
    else if (d->event_record(ev, stream) != RL_DEV_OK) d->event_destroy(ev), ev = NULL;
    rl_dev_event_t drop = ev;
    pthread_mutex_lock(&s->mu);
    if (!ev || s->held_closed) {
        /* not followed (no event; or after settle, a late group end): the flag is kept */
        s->held_overflow = 1;
    } else {
        int i = 0;
        while (i < s->nheld && !(s->held[i].stream == stream && s->held[i].dev == dev &&
                                 (!special || pthread_equal(s->held[i].thread, self))))
            i++;
        if (i == s->nheld) /* a new one: in place of one whose stream passed its wait, if full */
            for (int k = 0; k < s->nheld && i == s->nheld && s->nheld == RL_DEV_MAX_HELD; k++)
                if (s->held[k].dev == dev && d->event_query(s->held[k].passed) == RL_DEV_OK) i = k;
        if (i == s->nheld && i < RL_DEV_MAX_HELD) s->nheld++, s->held[i].passed = NULL;
        if (i < s->nheld) {
            drop = s->held[i].passed;
            s->held[i].stream = stream, s->held[i].dev = dev, s->held[i].thread = self, s->held[i].passed = ev;
        } else {
            s->held_overflow = 1; /* the table full: not followed, the flag is kept */
        }
    }
    pthread_mutex_unlock(&s->mu);
    /* the event replaced, or the one not kept; on its device (the stream's: current here) */
    if (drop) d->event_destroy(drop);
}

/* The event of the stream's work so far, then (unless later, or not held) the stream held
 * until the flag reaches seq. Both on the stream's device: an event records only on a stream of
 * the device it was made on, and a kernel launches only on the current device. */
static ringlet_result_t hold_stream(struct rl_devcomm *s, void *stream, uint64_t seq, int later, void **event,
                                    int *event_device, char *err) {
    const rl_device_ops *d = s->d;
    int saved = -1, dev = -1;
    if (d->stream_device(stream, &dev) != RL_DEV_OK) return rl_devcomm_error("the stream's device", err);
    if (d->device_enter(dev, &saved) != RL_DEV_OK) return rl_devcomm_error("selecting the stream's device", err);
    ringlet_result_t rc = RINGLET_SUCCESS;
    rl_dev_event_t ev = NULL;
    if (d->event_create(&ev) != RL_DEV_OK) {
        rc = rl_devcomm_error("an event for the stream", err);
    } else if (d->event_record(ev, stream) != RL_DEV_OK) {
        rc = rl_devcomm_error("recording an event on the stream", err);
    } else if (!later && !not_held(d, stream)) {
        if (d->wait_flag(s->flag, seq, stream) != RL_DEV_OK) rc = rl_devcomm_error("making the stream wait for the operation", err);
        else note_held(s, stream, dev);
    }
    if (rc && ev) d->event_destroy(ev);
    if (!rc) *event = ev, *event_device = dev;
    d->device_leave(saved);
    return rc;
}

/* Destroys a request's event on its device (the runtime makes a context on the thread's
 * current device for the call: a progress thread that never chose one is on device 0). */
static void event_drop(const rl_device_ops *d, void **event, int dev) {
    if (!*event) return;
    int saved = -1;
    int entered = d->device_enter(dev, &saved) == RL_DEV_OK;
    /* The user's work before the call not done when the request ends (it failed waiting
     * for it, say): noted, so that no free waits behind it (rl_dev_note_stuck_event owns
     * the event then); most often it is done, and the event goes. */
    if (d->event_query(*event) != RL_DEV_NOT_READY || !rl_dev_note_stuck_event(*event, dev)) d->event_destroy(*event);
    if (entered) d->device_leave(saved);
    *event = NULL;
}

void rl_devcomm_drop_events(struct ringlet_comm *c, struct ringlet_request *r) {
    struct rl_devcomm *s = c->dev;
    if (!s) return;
    event_drop(s->d, &r->event, r->event_device);
    for (int i = 0; i < r->nxstream; i++) event_drop(s->d, &r->xevent[i], r->xevent_device[i]);
}

ringlet_result_t rl_devcomm_enqueue(struct ringlet_comm *c, struct ringlet_request *r, char *err) {
    struct rl_devcomm *s = c->dev;
    if (!s || !s->flag)
        return snprintf(err, RL_MSG_MAX, "internal: a stream call that was not prepared"), RINGLET_ERR_INTERNAL;
    ringlet_result_t rc = hold_stream(s, r->stream, r->seq, r->hold_later, &r->event, &r->event_device, err);
    /* A group's other streams. The flag is not set to the number of a call that failed
     * here: that would release the streams of the operations still running before it (their
     * numbers are lower), and the flag would go back when they finish. Only a group has
     * other streams, and its streams are held later (rl_devcomm_hold, hold_later): none
     * waits for this number. */
    for (int i = 0; i < r->nxstream && !rc; i++)
        rc = hold_stream(s, r->xstream[i], r->seq, r->hold_later, &r->xevent[i], &r->xevent_device[i], err);
    if (rc) rl_devcomm_drop_events(c, r);
    return rc;
}

ringlet_result_t rl_devcomm_hold(struct ringlet_comm *c, void *const *streams, int n, uint64_t seq, char *err) {
    struct rl_devcomm *s = c->dev;
    const rl_device_ops *d = s->d;
    for (int i = 0; i < n; i++) {
        int saved = -1, dev = -1;
        if (d->stream_device(streams[i], &dev) != RL_DEV_OK || d->device_enter(dev, &saved) != RL_DEV_OK)
            return rl_devcomm_error("selecting the stream's device", err);
        int held = !not_held(d, streams[i]);
        int rc = held ? d->wait_flag(s->flag, seq, streams[i]) : RL_DEV_OK;
        if (held && rc == RL_DEV_OK) note_held(s, streams[i], dev);
        d->device_leave(saved);
        if (rc != RL_DEV_OK) return rl_devcomm_error("making the stream wait for the group", err);
    }
    return RINGLET_SUCCESS;
}

ringlet_result_t rl_devcomm_sync(struct ringlet_comm *c, void *const *streams, int n, uint64_t seq, char *err) {
    struct rl_devcomm *s = c->dev;
    int wait = 0;
    for (int i = 0; s && s->flag && i < n && !wait; i++) wait = not_held(s->d, streams[i]);
    if (!wait) return RINGLET_SUCCESS;
    /* The progress thread sets the flag once the operation's device work is done, failed
     * or not, and rings the communicator's bell; a communicator that failed still gets the
     * time of one deadline to get there. An abort (from another thread) ends the wait at
     * once: it tears the communicator down, its bell and flag included, once its waiters
     * (counted, as ringlet_wait's) left (rl_conn_wait_idle). */
    double failed_at = 0;
    atomic_fetch_add(&c->waiters, 1);
    for (;;) {
        unsigned gen = rl_comm_gen(c);
        if ((int64_t)(__atomic_load_n(s->flag, __ATOMIC_ACQUIRE) - seq) >= 0) break;
        if (atomic_load(&c->aborted)) {
            /* Said here: the abort marks the communicator failed only after this flag. */
            atomic_fetch_sub(&c->waiters, 1);
            return snprintf(err, RL_MSG_MAX, "the communicator was aborted"), RINGLET_ERR_INVALID_USAGE;
        }
        if (!failed_at && atomic_load(&c->failed)) failed_at = rl_now();
        if (failed_at && rl_now() - failed_at > c->timeout_s) {
            atomic_fetch_sub(&c->waiters, 1);
            return snprintf(err, RL_MSG_MAX, "the communicator failed and the call's operation did not end within "
                            "%.0f s", c->timeout_s), RINGLET_ERR_TIMEOUT;
        }
        rl_comm_wait_event(c, gen, 10);
    }
    atomic_fetch_sub(&c->waiters, 1);
    if (!atomic_load(&c->failed)) return RINGLET_SUCCESS;
    char why[RL_MSG_MAX];
    ringlet_result_t code = rl_comm_failure(c, why, sizeof why);
    snprintf(err, RL_MSG_MAX, "the communicator failed: %.400s", why);
    return code ? code : RINGLET_ERR_REMOTE;
}

/* ---- the progress thread ---- */

ringlet_result_t rl_devcomm_begin(struct ringlet_comm *c, struct ringlet_request *r, struct rl_devcomm **out,
                                  char *err) {
    struct rl_devcomm *s = c->dev;
    int dev = -1, streams = 0;
    if (s) {
        pthread_mutex_lock(&s->mu);
        dev = s->device, streams = s->s_send != NULL;
        pthread_mutex_unlock(&s->mu);
    }
    if (!streams) return snprintf(err, RL_MSG_MAX, "internal: device buffers that were not prepared"), RINGLET_ERR_INTERNAL;
    if (r->device != dev) {
        snprintf(err, RL_MSG_MAX, "buffers on device %d, but this communicator uses device %d", r->device, dev);
        return RINGLET_ERR_INVALID_USAGE;
    }
    if (s->d->set_device(r->device) != RL_DEV_OK) return rl_devcomm_error("selecting the buffers' device", err);
    void *evs[1 + RL_GROUP_MAX_STREAMS] = {r->event};
    for (int i = 0; i < r->nxstream; i++) evs[1 + i] = r->xevent[i];
    for (int i = 0; i <= r->nxstream; i++)
        if (evs[i] && (s->d->stream_wait_event(s->s_send, evs[i]) != RL_DEV_OK ||
                       s->d->stream_wait_event(s->s_recv, evs[i]) != RL_DEV_OK))
            return rl_devcomm_error("waiting for the stream's earlier work", err);
    *out = s;
    return RINGLET_SUCCESS;
}

/* Device work of ours did not finish by its deadline: something ahead of it on the device
 * does not end. Frees in the whole process are kept for later from now on (not only from
 * this communicator's teardown): a free waits for the whole device and would hang behind
 * it (another communicator's teardown or init, ringlet_mem_free). The user's work before
 * a call is noted when its request lets go of the event (event_drop). */
static void note_stuck(struct rl_devcomm *s) {
    pthread_mutex_lock(&s->mu);
    rl_dev_stream_t send = s->s_send, recv = s->s_recv;
    pthread_mutex_unlock(&s->mu);
    rl_dev_note_stuck(send);
    rl_dev_note_stuck(recv);
}

ringlet_result_t rl_devcomm_wait(struct ringlet_comm *c, rl_dev_event_t ev, const char *what, char *err) {
    const rl_device_ops *d = c->dev->d;
    double t0 = rl_now(), aborted_at = 0;
    int q;
    while ((q = d->event_query(ev)) == RL_DEV_NOT_READY) {
        double now = rl_now(), waited = now - t0;
        /* An abort does not wait for stuck work (ringlet_comm_abort returns): a second for
         * work that is merely finishing, whose memory is then freed at once, as after
         * rl_conn_wait_idle's second for the calls under way. */
        if (atomic_load(&c->aborted)) {
            if (!aborted_at) aborted_at = now;
            if (now - aborted_at > RL_ABORT_GRACE_S) {
                note_stuck(c->dev);
                snprintf(err, RL_MSG_MAX, "%s did not finish within %.0f s of the abort", what, RL_ABORT_GRACE_S);
                return RINGLET_ERR_INVALID_USAGE;
            }
        }
        if (waited > c->timeout_s) {
            note_stuck(c->dev);
            snprintf(err, RL_MSG_MAX, "%s did not finish within %.0f s", what, c->timeout_s);
            return RINGLET_ERR_TIMEOUT;
        }
        /* Yield while the wait is short (small calls), then sleep (long kernels). */
        if (waited < 1e-3) sched_yield();
        else rl_sleep_ms(1);
    }
    return q == RL_DEV_OK ? RINGLET_SUCCESS : rl_devcomm_error(what, err);
}

ringlet_result_t rl_devcomm_drain(struct ringlet_comm *c, char *err) {
    struct rl_devcomm *s = c->dev;
    if (!s || !s->s_send) return RINGLET_SUCCESS;
    const rl_device_ops *d = s->d;
    if (d->event_record(s->ev_drain[0], s->s_send) != RL_DEV_OK ||
        d->event_record(s->ev_drain[1], s->s_recv) != RL_DEV_OK)
        return rl_devcomm_error("device", err);
    ringlet_result_t rc = rl_devcomm_wait(c, s->ev_drain[0], "the device's copies for this operation", err);
    if (!rc) rc = rl_devcomm_wait(c, s->ev_drain[1], "the device's copies and kernels for this operation", err);
    return rc;
}

void rl_devcomm_release(struct ringlet_comm *c, struct ringlet_request *r) {
    struct rl_devcomm *s = c->dev;
    if (!s) return;
    rl_devcomm_drop_events(c, r);
    /* Operations finish in issue order, so the flag only grows. */
    if (r->stream && s->flag) __atomic_store_n(s->flag, r->seq, __ATOMIC_RELEASE);
}

rl_devlane *rl_devcomm_lane(struct ringlet_comm *c, int i, char *err) {
    struct rl_devcomm *s = c->dev;
    if (i < 0 || i >= RL_DEV_MAX_LANES) return snprintf(err, RL_MSG_MAX, "more than %d peers at once", RL_DEV_MAX_LANES), NULL;
    pthread_mutex_lock(&s->mu);
    rl_devlane *l = s->lanes[i];
    pthread_mutex_unlock(&s->mu);
    if (!l) snprintf(err, RL_MSG_MAX, "internal: staging lane %d was not prepared", i);
    return l;
}

ringlet_result_t rl_devcomm_device_slots(struct ringlet_comm *c, rl_devlane *l, char *err) {
    struct rl_devcomm *s = c->dev;
    pthread_mutex_lock(&s->mu);
    int ok = l->dev_slots != NULL;
    pthread_mutex_unlock(&s->mu);
    if (!ok) return snprintf(err, RL_MSG_MAX, "internal: device staging slots were not prepared"), RINGLET_ERR_INTERNAL;
    return RINGLET_SUCCESS;
}

/* which: 0 device scratch, 1 pinned, 2 the second device scratch */
static void *lookup(struct ringlet_comm *c, int which, size_t bytes, char *err) {
    struct rl_devcomm *s = c->dev;
    pthread_mutex_lock(&s->mu);
    void *buf = which == 1 ? s->pinned : which == 2 ? s->scratch2 : s->scratch;
    size_t size = which == 1 ? s->pinned_size : which == 2 ? s->scratch2_size : s->scratch_size;
    pthread_mutex_unlock(&s->mu);
    if (buf && size >= bytes) return buf;
    snprintf(err, RL_MSG_MAX, "internal: %zu bytes of %s were not prepared (%zu are)", bytes,
             which == 1 ? "pinned scratch" : "device scratch", size);
    return NULL;
}

void *rl_devcomm_scratch(struct ringlet_comm *c, size_t bytes, char *err) { return lookup(c, 0, bytes, err); }
void *rl_devcomm_pinned(struct ringlet_comm *c, size_t bytes, char *err) { return lookup(c, 1, bytes, err); }
void *rl_devcomm_scratch2(struct ringlet_comm *c, size_t bytes, char *err) { return lookup(c, 2, bytes, err); }

int rl_devcomm_device(struct ringlet_comm *c) {
    struct rl_devcomm *s = c->dev;
    if (!s) return -1;
    pthread_mutex_lock(&s->mu);
    int dev = s->device;
    pthread_mutex_unlock(&s->mu);
    return dev;
}

/* ---- teardown ---- */

void rl_devcomm_release_all(struct ringlet_comm *c) {
    /* Under the locks: an abort comes from another thread, maybe while a call makes the
     * state or the flag. */
    pthread_mutex_lock(&g_create_mu);
    struct rl_devcomm *s = c->dev;
    pthread_mutex_unlock(&g_create_mu);
    if (!s) return;
    pthread_mutex_lock(&s->mu);
    volatile uint64_t *flag = s->flag;
    pthread_mutex_unlock(&s->mu);
    if (flag) __atomic_store_n(flag, RL_DEVCOMM_RELEASE_ALL, __ATOMIC_RELEASE);
}

/* Enters the communicator's device (that of its streams and memory; with host buffers
 * only, the first stream's): the destroying thread may never have chosen one, and the
 * runtime makes a context on the thread's current device for each call. */
static int teardown_enter(const struct rl_devcomm *s, int *saved) {
    int dev = s->device;
    for (int i = 0; dev < 0 && i < RL_DEV_MAX_READY; i++)
        if (s->ready_devices[i]) dev = i;
    return dev >= 0 && s->d->device_enter(dev, saved) == RL_DEV_OK;
}

void rl_devcomm_settle(struct ringlet_comm *c) {
    struct rl_devcomm *s = c->dev;
    if (!s || s->settled) return;
    s->settled = 1;
    int saved = -1, entered = teardown_enter(s, &saved);
    /* Every queued operation released its stream already; this lets go of any stream
     * still waiting (an aborted communicator) before the flag's memory goes. */
    rl_devcomm_release_all(c);
    char err[RL_MSG_MAX];
    if (rl_devcomm_drain(c, err) != RINGLET_SUCCESS) {
        /* Its copies may still run, behind work that does not end: every free waits. */
        RL_WARN(c->rank, "device teardown: %s; its memory is freed once they are done", err);
        rl_dev_note_stuck(s->s_send);
        rl_dev_note_stuck(s->s_recv);
    }
    if (entered) s->d->device_leave(saved);
    /* A user stream that has not reached its wait on the flag yet (its own earlier work
     * still runs) reads the flag later: frees wait for it, as for stuck work. A stream just
     * released gets a moment (the GPU has yet to run its wait), not the deadline. */
    pthread_mutex_lock(&s->mu);
    s->held_closed = 1;
    double until = rl_now() + 0.1;
    for (int i = 0; i < s->nheld; i++) {
        int hsaved = -1, hin = s->d->device_enter(s->held[i].dev, &hsaved) == RL_DEV_OK;
        int q;
        while ((q = s->d->event_query(s->held[i].passed)) == RL_DEV_NOT_READY && rl_now() < until) rl_sleep_ms(1);
        if (q != RL_DEV_NOT_READY) {
            s->d->event_destroy(s->held[i].passed);
        } else if (rl_dev_note_stuck_event(s->held[i].passed, s->held[i].dev)) {
            RL_INFO(c->rank, "device teardown: a stream of the program's has not reached its wait for this "
                             "communicator yet; device memory is freed once it has");
        } else {
            s->held_overflow = 1; /* not noted: the flag is kept */
            s->d->event_destroy(s->held[i].passed);
        }
        if (hin) s->d->device_leave(hsaved);
        s->held[i].passed = NULL;
    }
    s->nheld = 0;
    pthread_mutex_unlock(&s->mu);
}

void rl_devcomm_fini(struct ringlet_comm *c) {
    struct rl_devcomm *s = c->dev;
    if (!s) return;
    const rl_device_ops *d = s->d;
    rl_devcomm_settle(c);
    int saved = -1, entered = teardown_enter(s, &saved);
    /* Memory goes when no stream of the process is held (another communicator may hold
     * one now): rl_dev_free_later. */
    for (int i = 0; i < RL_DEV_MAX_LANES; i++) {
        rl_devlane *l = s->lanes[i];
        if (!l) continue;
        for (int k = 0; k < RL_DEV_MAX_SLOTS; k++) {
            if (l->ev_send[k]) d->event_destroy(l->ev_send[k]);
            if (l->ev_recv[k]) d->event_destroy(l->ev_recv[k]);
        }
        rl_dev_free_later(l->dev_slots, RL_DEV_MEM_DEVICE);
        rl_dev_free_later(l->send_slots, RL_DEV_MEM_PINNED);
        rl_dev_free_later(l->recv_slots, RL_DEV_MEM_PINNED);
        free(l);
    }
    if (s->ev_drain[0]) d->event_destroy(s->ev_drain[0]);
    if (s->ev_drain[1]) d->event_destroy(s->ev_drain[1]);
    if (s->ev_misc) d->event_destroy(s->ev_misc);
    if (s->s_send) d->stream_destroy(s->s_send);
    if (s->s_recv) d->stream_destroy(s->s_recv);
    rl_dev_free_later(s->scratch, RL_DEV_MEM_DEVICE);
    rl_dev_free_later(s->scratch2, RL_DEV_MEM_DEVICE);
    rl_dev_free_later(s->pinned, RL_DEV_MEM_PINNED);
    for (int i = 0; i < s->nretired; i++) rl_dev_free_later(s->retired[i], s->retired_kind[i]);
    /* Kept where a user stream's wait on it went unfollowed (held_overflow: the table full,
     * an event failed, a note not made, a wait after settle): it may not be passed yet. */
    if (!s->held_overflow) rl_dev_free_later((void *)s->flag, RL_DEV_MEM_PINNED);
    pthread_mutex_destroy(&s->mu);
    pthread_mutex_destroy(&s->prep_mu);
    free(s->send_ready);
    free(s->recv_ready);
    free(s);
    c->dev = NULL;
    if (entered) d->device_leave(saved);
}
