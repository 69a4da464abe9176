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

ringlet_result_t rl_devcomm_enqueue(struct ringlet_comm *c, struct ringlet_request *r, char *err) {
    struct rl_devcomm *s = get_state(c, err);
    if (!s) return RINGLET_ERR_INVALID_ARGUMENT;
    const rl_device_ops *d = s->d;
    rl_dev_event_t ev = NULL;
    if (d->event_create(&ev) != RL_DEV_OK) return rl_devcomm_error("an event for the stream", err);
    if (d->event_record(ev, r->stream) != RL_DEV_OK) {
        d->event_destroy(ev);
        return rl_devcomm_error("recording an event on the stream", err);
    }
    if (d->wait_flag(s->flag, r->seq, r->stream) != RL_DEV_OK) {
        d->event_destroy(ev);
        return rl_devcomm_error("making the stream wait for the operation", err);
    }
    r->event = ev;
    return RINGLET_SUCCESS;
}

/* Streams, events and staging slots, made by the first operation on device buffers. */
static ringlet_result_t make_streams(struct ringlet_comm *c, struct rl_devcomm *s, char *err) {
    const rl_device_ops *d = s->d;
    if (d->stream_create(&s->s_send) != RL_DEV_OK || d->stream_create(&s->s_recv) != RL_DEV_OK)
        return rl_devcomm_error("creating the communicator's streams", err);
    s->nslots = c->nslots;
    for (int i = 0; i < s->nslots; i++)
        if (d->event_create(&s->ev_send[i]) != RL_DEV_OK || d->event_create(&s->ev_recv[i]) != RL_DEV_OK)
            return rl_devcomm_error("creating events", err);
    if (d->event_create(&s->ev_drain[0]) != RL_DEV_OK || d->event_create(&s->ev_drain[1]) != RL_DEV_OK)
        return rl_devcomm_error("creating events", err);
    /* A slot holds a ring chunk or a point-to-point piece. */
    s->slot_bytes = c->chunk_bytes > RL_P2P_PIECE ? c->chunk_bytes : RL_P2P_PIECE;
    void *a = NULL, *b = NULL;
    if (d->host_alloc(&a, s->slot_bytes * (size_t)s->nslots) != RL_DEV_OK ||
        d->host_alloc(&b, s->slot_bytes * (size_t)s->nslots) != RL_DEV_OK) {
        if (a) d->host_free(a);
        return rl_devcomm_error("pinned staging slots", err);
    }
    s->send_slots = a;
    s->recv_slots = b;
    const char *how = getenv("RINGLET_DEVICE_REDUCE");
    if (how && !strcmp(how, "copy") &&
        d->mem_alloc((void **)&s->dev_slots, s->slot_bytes * (size_t)s->nslots) != RL_DEV_OK)
        return rl_devcomm_error("device staging slots", err);
    else if (how && *how && strcmp(how, "copy") != 0 && strcmp(how, "direct") != 0)
        RL_WARN(c->rank, "RINGLET_DEVICE_REDUCE=%s is not direct or copy; using direct", how);
    RL_INFO(c->rank, "device %d over the %s backend: %d pinned staging slots of %zu bytes per direction; kernels "
                     "reduce %s",
            s->device, d->name, s->nslots, s->slot_bytes,
            s->dev_slots ? "from device copies of the slots" : "straight from the pinned slots");
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
    if (r->event && (s->d->stream_wait_event(s->s_send, r->event) != RL_DEV_OK ||
                     s->d->stream_wait_event(s->s_recv, r->event) != RL_DEV_OK))
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
    /* Operations finish in issue order, so the flag only grows. */
    if (r->stream && s) __atomic_store_n(s->flag, r->seq, __ATOMIC_RELEASE);
}

ringlet_result_t rl_devcomm_device_slots(struct ringlet_comm *c, char *err) {
    struct rl_devcomm *s = c->dev;
    if (s->dev_slots) return RINGLET_SUCCESS;
    if (s->d->mem_alloc((void **)&s->dev_slots, s->slot_bytes * (size_t)s->nslots) != RL_DEV_OK)
        return rl_devcomm_error("device staging slots", err);
    return RINGLET_SUCCESS;
}

static void *grow(struct ringlet_comm *c, int pinned, size_t bytes, char *err) {
    struct rl_devcomm *s = c->dev;
    void **buf = pinned ? &s->pinned : &s->scratch;
    size_t *size = pinned ? &s->pinned_size : &s->scratch_size;
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
    for (int i = 0; i < RL_DEV_MAX_SLOTS; i++) {
        if (s->ev_send[i]) d->event_destroy(s->ev_send[i]);
        if (s->ev_recv[i]) d->event_destroy(s->ev_recv[i]);
    }
    if (s->ev_drain[0]) d->event_destroy(s->ev_drain[0]);
    if (s->ev_drain[1]) d->event_destroy(s->ev_drain[1]);
    if (s->s_send) d->stream_destroy(s->s_send);
    if (s->s_recv) d->stream_destroy(s->s_recv);
    if (s->dev_slots) d->mem_free(s->dev_slots);
    if (s->send_slots) d->host_free(s->send_slots);
    if (s->recv_slots) d->host_free(s->recv_slots);
    if (s->scratch) d->mem_free(s->scratch);
    if (s->pinned) d->host_free(s->pinned);
    for (int i = 0; i < s->nretired; i++)
        s->retired_pinned[i] ? d->host_free(s->retired[i]) : d->mem_free(s->retired[i]);
    d->host_free((void *)s->flag);
    free(s);
    c->dev = NULL;
}
