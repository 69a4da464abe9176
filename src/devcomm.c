#include "devcomm.h"

#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "util.h"

ringlet_result_t rl_devcomm_error(const char *what, char *err) {
    snprintf(err, RL_MSG_MAX, "%s: %s", what, rl_dev_error());
    return RINGLET_ERR_CUDA;
}

/* The communicator's device state with its flag (either thread, under the queue lock
 * or on the progress thread before any stream call exists). */
static struct rl_devcomm *get_state(struct ringlet_comm *c, char *err) {
    if (c->dev) return c->dev;
    const rl_device_ops *d = rl_device();
    if (!d) {
        snprintf(err, RL_MSG_MAX, "a stream or device buffers, but no device backend is usable here: %s",
                 rl_device_unavailable());
        return NULL;
    }
    struct rl_devcomm *s = calloc(1, sizeof *s);
    if (!s) return snprintf(err, RL_MSG_MAX, "out of memory"), NULL;
    s->d = d;
    s->device = -1;
    void *flag = NULL;
    if (d->host_alloc(&flag, 64) != RL_DEV_OK) {
        rl_devcomm_error("pinned memory for the stream flag", err);
        free(s);
        return NULL;
    }
    s->flag = flag;
    *s->flag = 0;
    c->dev = s;
    return s;
}

/* The event of the stream's work so far, then (unless later) the stream held until the
 * flag reaches seq. */
static ringlet_result_t hold_stream(struct rl_devcomm *s, void *stream, uint64_t seq, int later, void **event,
                                    char *err) {
    const rl_device_ops *d = s->d;
    rl_dev_event_t ev = NULL;
    if (d->event_create(&ev) != RL_DEV_OK) return rl_devcomm_error("an event for the stream", err);
    if (d->event_record(ev, stream) != RL_DEV_OK) {
        d->event_destroy(ev);
        return rl_devcomm_error("recording an event on the stream", err);
    }
    if (!later && d->wait_flag(s->flag, seq, stream) != RL_DEV_OK) {
        d->event_destroy(ev);
        return rl_devcomm_error("making the stream wait for the operation", err);
    }
    *event = ev;
    return RINGLET_SUCCESS;
}

ringlet_result_t rl_devcomm_enqueue(struct ringlet_comm *c, struct ringlet_request *r, char *err) {
    struct rl_devcomm *s = get_state(c, err);
    if (!s) return RINGLET_ERR_INVALID_ARGUMENT;
    ringlet_result_t rc = hold_stream(s, r->stream, r->seq, r->hold_later, &r->event, err);
    /* A group's other streams. A failure here leaves the streams already held waiting
     * for a flag that the operation, never queued, does not set: release them now. */
    for (int i = 0; i < r->nxstream && !rc; i++) rc = hold_stream(s, r->xstream[i], r->seq, r->hold_later, &r->xevent[i], err);
    if (rc) {
        if (r->event || r->xevent[0]) __atomic_store_n(s->flag, r->seq, __ATOMIC_RELEASE);
        if (r->event) s->d->event_destroy(r->event), r->event = NULL;
        for (int i = 0; i < r->nxstream; i++)
            if (r->xevent[i]) s->d->event_destroy(r->xevent[i]), r->xevent[i] = NULL;
    }
    return rc;
}

ringlet_result_t rl_devcomm_hold(struct ringlet_comm *c, void *const *streams, int n, uint64_t seq, char *err) {
    struct rl_devcomm *s = c->dev;
    for (int i = 0; i < n; i++)
        if (s->d->wait_flag(s->flag, seq, streams[i]) != RL_DEV_OK)
            return rl_devcomm_error("making the stream wait for the group", err);
    return RINGLET_SUCCESS;
}

/* Streams and events, made by the first operation on device buffers. */
static ringlet_result_t make_streams(struct ringlet_comm *c, struct rl_devcomm *s, char *err) {
    const rl_device_ops *d = s->d;
    if (d->stream_create(&s->s_send) != RL_DEV_OK || d->stream_create(&s->s_recv) != RL_DEV_OK)
        return rl_devcomm_error("creating the communicator's streams", err);
    if (d->event_create(&s->ev_drain[0]) != RL_DEV_OK || d->event_create(&s->ev_drain[1]) != RL_DEV_OK ||
        d->event_create(&s->ev_misc) != RL_DEV_OK)
        return rl_devcomm_error("creating events", err);
    s->nslots = c->nslots < RL_DEV_MAX_SLOTS ? c->nslots : RL_DEV_MAX_SLOTS;
    /* A slot holds a ring chunk or a point-to-point piece. */
    s->slot_bytes = c->chunk_bytes > RL_P2P_PIECE ? c->chunk_bytes : RL_P2P_PIECE;
    const char *how = getenv("RINGLET_DEVICE_REDUCE");
    s->reduce_from_copy = how && !strcmp(how, "copy");
    if (how && *how && strcmp(how, "copy") != 0 && strcmp(how, "direct") != 0)
        RL_WARN(c->rank, "RINGLET_DEVICE_REDUCE=%s is not direct or copy; using direct", how);
    if (!rl_devcomm_lane(c, 0, err)) return RINGLET_ERR_CUDA;
    RL_INFO(c->rank, "device %d over the %s backend: %d pinned staging slots of %zu bytes per direction; kernels "
                     "reduce %s",
            s->device, d->name, s->nslots, s->slot_bytes,
            s->reduce_from_copy ? "from device copies of the slots" : "straight from the pinned slots");
    return RINGLET_SUCCESS;
}

rl_devlane *rl_devcomm_lane(struct ringlet_comm *c, int i, char *err) {
    struct rl_devcomm *s = c->dev;
    if (i < 0 || i >= RL_DEV_MAX_LANES) return snprintf(err, RL_MSG_MAX, "more than %d peers at once", RL_DEV_MAX_LANES), NULL;
    if (s->lanes[i]) return s->lanes[i];
    const rl_device_ops *d = s->d;
    rl_devlane *l = calloc(1, sizeof *l);
    if (!l) return snprintf(err, RL_MSG_MAX, "out of memory"), NULL;
    s->lanes[i] = l; /* freed at fini, whatever follows */
    for (int k = 0; k < s->nslots; k++)
        if (d->event_create(&l->ev_send[k]) != RL_DEV_OK || d->event_create(&l->ev_recv[k]) != RL_DEV_OK)
            return rl_devcomm_error("creating events", err), NULL;
    size_t bytes = s->slot_bytes * (size_t)s->nslots;
    if (d->host_alloc((void **)&l->send_slots, bytes) != RL_DEV_OK || d->host_alloc((void **)&l->recv_slots, bytes) != RL_DEV_OK)
        return rl_devcomm_error("pinned staging slots", err), NULL;
    if (s->reduce_from_copy && rl_devcomm_device_slots(c, l, err) != RINGLET_SUCCESS) return NULL;
    return l;
}

ringlet_result_t rl_devcomm_device_slots(struct ringlet_comm *c, rl_devlane *l, char *err) {
    struct rl_devcomm *s = c->dev;
    if (l->dev_slots) return RINGLET_SUCCESS;
    if (s->d->mem_alloc((void **)&l->dev_slots, s->slot_bytes * (size_t)s->nslots) != RL_DEV_OK)
        return rl_devcomm_error("device staging slots", err);
    return RINGLET_SUCCESS;
}

ringlet_result_t rl_devcomm_begin(struct ringlet_comm *c, struct ringlet_request *r, struct rl_devcomm **out,
                                  char *err) {
    struct rl_devcomm *s = get_state(c, err);
    if (!s) return RINGLET_ERR_INVALID_USAGE;
    if (s->device >= 0 && r->device != s->device) {
        snprintf(err, RL_MSG_MAX, "buffers on device %d, but this communicator uses device %d", r->device, s->device);
        return RINGLET_ERR_INVALID_USAGE;
    }
    if (s->d->set_device(r->device) != RL_DEV_OK) return rl_devcomm_error("selecting the buffers' device", err);
    if (s->device < 0) {
        s->device = r->device;
        ringlet_result_t rc = make_streams(c, s, err);
        if (rc) return rc;
    }
    void *evs[1 + RL_GROUP_MAX_STREAMS] = {r->event};
    for (int i = 0; i < r->nxstream; i++) evs[1 + i] = r->xevent[i];
    for (int i = 0; i <= r->nxstream; i++)
        if (evs[i] && (s->d->stream_wait_event(s->s_send, evs[i]) != RL_DEV_OK ||
                       s->d->stream_wait_event(s->s_recv, evs[i]) != RL_DEV_OK))
            return rl_devcomm_error("waiting for the stream's earlier work", err);
    *out = s;
    return RINGLET_SUCCESS;
}

ringlet_result_t rl_devcomm_wait(struct ringlet_comm *c, rl_dev_event_t ev, const char *what, char *err) {
    const rl_device_ops *d = c->dev->d;
    double t0 = rl_now();
    int q;
    while ((q = d->event_query(ev)) == RL_DEV_NOT_READY) {
        double waited = rl_now() - t0;
        if (waited > c->timeout_s) {
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
    if (r->event) {
        s->d->event_destroy(r->event);
        r->event = NULL;
    }
    for (int i = 0; i < r->nxstream; i++)
        if (r->xevent[i]) s->d->event_destroy(r->xevent[i]), r->xevent[i] = NULL;
    /* Operations finish in issue order, so the flag only grows. */
    if (r->stream && s) __atomic_store_n(s->flag, r->seq, __ATOMIC_RELEASE);
}

/* which: 0 device scratch, 1 pinned, 2 the second device scratch */
static void *grow(struct ringlet_comm *c, int which, size_t bytes, char *err) {
    struct rl_devcomm *s = c->dev;
    int pinned = which == 1;
    void **buf = which == 1 ? &s->pinned : which == 2 ? &s->scratch2 : &s->scratch;
    size_t *size = which == 1 ? &s->pinned_size : which == 2 ? &s->scratch2_size : &s->scratch_size;
    if (bytes <= *size && *buf) return *buf;
    if (*buf && s->nretired == (int)(sizeof s->retired / sizeof s->retired[0])) {
        snprintf(err, RL_MSG_MAX, "%s scratch memory grew too often", pinned ? "pinned" : "device");
        return NULL;
    }
    /* At least double, so that a sweep of sizes reallocates only a few times. */
    size_t want = bytes > 2 * *size ? bytes : 2 * *size;
    if (want < 4096) want = 4096;
    void *p = NULL;
    if ((pinned ? s->d->host_alloc(&p, want) : s->d->mem_alloc(&p, want)) != RL_DEV_OK) {
        rl_devcomm_error(pinned ? "pinned scratch memory" : "device scratch memory", err);
        return NULL;
    }
    if (*buf) {
        s->retired[s->nretired] = *buf;
        s->retired_pinned[s->nretired++] = pinned;
    }
    *buf = p;
    *size = want;
    return p;
}

void *rl_devcomm_scratch(struct ringlet_comm *c, size_t bytes, char *err) { return grow(c, 0, bytes, err); }
void *rl_devcomm_pinned(struct ringlet_comm *c, size_t bytes, char *err) { return grow(c, 1, bytes, err); }
void *rl_devcomm_scratch2(struct ringlet_comm *c, size_t bytes, char *err) { return grow(c, 2, bytes, err); }

void rl_devcomm_release_all(struct ringlet_comm *c) {
    if (c->dev) __atomic_store_n(c->dev->flag, UINT64_MAX, __ATOMIC_RELEASE);
}

void rl_devcomm_fini(struct ringlet_comm *c) {
    struct rl_devcomm *s = c->dev;
    if (!s) return;
    const rl_device_ops *d = s->d;
    /* Every queued operation released its stream already; this lets go of any stream
     * still waiting (an aborted communicator) before the flag's memory goes. */
    rl_devcomm_release_all(c);
    char err[RL_MSG_MAX];
    if (rl_devcomm_drain(c, err) != RINGLET_SUCCESS) RL_WARN(c->rank, "device teardown: %s", err);
    for (int i = 0; i < RL_DEV_MAX_LANES; i++) {
        rl_devlane *l = s->lanes[i];
        if (!l) continue;
        for (int k = 0; k < RL_DEV_MAX_SLOTS; k++) {
            if (l->ev_send[k]) d->event_destroy(l->ev_send[k]);
            if (l->ev_recv[k]) d->event_destroy(l->ev_recv[k]);
        }
        if (l->dev_slots) d->mem_free(l->dev_slots);
        if (l->send_slots) d->host_free(l->send_slots);
        if (l->recv_slots) d->host_free(l->recv_slots);
        free(l);
    }
    if (s->ev_drain[0]) d->event_destroy(s->ev_drain[0]);
    if (s->ev_drain[1]) d->event_destroy(s->ev_drain[1]);
    if (s->ev_misc) d->event_destroy(s->ev_misc);
    if (s->s_send) d->stream_destroy(s->s_send);
    if (s->s_recv) d->stream_destroy(s->s_recv);
    if (s->scratch) d->mem_free(s->scratch);
    if (s->scratch2) d->mem_free(s->scratch2);
    if (s->pinned) d->host_free(s->pinned);
    for (int i = 0; i < s->nretired; i++)
        s->retired_pinned[i] ? d->host_free(s->retired[i]) : d->mem_free(s->retired[i]);
    d->host_free((void *)s->flag);
    free(s);
    c->dev = NULL;
}
