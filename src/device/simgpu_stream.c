/* The simulated GPU's streams, events and copies (simgpu.h).
 *
 * A stream is a thread and a FIFO of operations, on the device that was current when it
 * was made. Arguments are checked and translated to the engine's addresses when an
 * operation is enqueued: a copy that runs past an allocation fails at once (as
 * cudaMemcpyAsync does); a kernel or flag operation on memory the device cannot reach
 * becomes a fault that sets the sticky error when it runs (as an illegal address does on
 * a GPU). A stream is held while a flag wait on it is not met: a call that can
 * synchronise the device then fails (sim_device_sync) instead of hanging.
 *
 * Hardware work queues: a device's streams share CUDA_DEVICE_MAX_CONNECTIONS queues (8
 * when unset, CUDA's default; round robin, in the order they were made, as the driver
 * assigns them), and an operation does not start while a wait queued before it on the
 * same queue (a flag wait, or a wait for an event) is not met, as a waiting stream blocks
 * the hardware queue it heads on a GPU. A process with more than 8 streams on a device
 * (ringlet makes one per cuda_ipc connection) thus shares queues, as on a GPU.
 *
 * Stream capture (global mode; rt.h): work enqueued on a capturing stream is dropped at
 * once, as if it went into a graph that is never launched; an event recorded there keeps
 * the capture it belongs to, and a stream that waits for it joins that capture. */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include "convert.h"
#include "reduce.h"
#include "simgpu.h"
#include "util.h"

/* ---- events ---- */

struct rl_dev_event_s {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    uint64_t recorded, done; /* records made, and the last one reached */
    atomic_int refs;         /* the handle + operations that still name it */
    int device;
    uint64_t capture_id; /* its last record was a node of this capture (0: none; g_capture_mu) */
};

static void event_unref(rl_dev_event_t e) {
    if (atomic_fetch_sub(&e->refs, 1) != 1) return;
    pthread_mutex_destroy(&e->mu);
    pthread_cond_destroy(&e->cv);
    free(e);
}

/* An operation that ran, or was not queued: its event reference and staged bytes go. */
static void op_free(sim_op *o) {
    if (o->ev) event_unref(o->ev);
    free(o->owned);
    free(o);
}

/* ---- streams ---- */

struct rl_dev_stream_s {
    pthread_mutex_t mu;
    pthread_cond_t cv;      /* work arrived, or quit */
    pthread_cond_t idle_cv; /* the queue emptied */
    pthread_cond_t room_cv; /* an operation ended: room in a full queue */
    sim_op *head, *tail;
    int queued;      /* operations queued and not ended (the running one too) */
    unsigned long long ended; /* operations ended so far */
    sim_op *running; /* the operation the thread runs now (held detection) */
    int busy, quit;  /* quit: destroyed; the thread runs what is queued, then ends */
    int reap_self;   /* destroyed with work queued: the thread ends the stream when it ran it */
    int device, blocking, legacy;
    int queue; /* its hardware work queue (of CUDA_DEVICE_MAX_CONNECTIONS, 8 unset) */
    pthread_t thread;
    uint64_t rng;
    int users; /* snapshots looking at it (g_streams_mu): stream_end waits until none */
    /* Stream capture (g_capture_mu): the stream that began the capture this one is in
     * (itself for that one), NULL when none; that capture's number; whether it was
     * invalidated (the origin's). A destroyed origin clears the streams that joined it. */
    struct rl_dev_stream_s *capture;
    uint64_t capture_id;
    int capture_invalid;
    unsigned long capture_thread; /* the origin's: the thread that began it (thread_id) */
    struct rl_dev_stream_s *next_all;
};

static pthread_mutex_t g_streams_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_streams_cv = PTHREAD_COND_INITIALIZER; /* a stream's users dropped */
static rl_dev_stream_t g_streams;
static rl_dev_stream_t g_legacy[64]; /* per device, made on first use */
static long g_jitter_us = -1;
static int g_nqueues = -1;       /* CUDA_DEVICE_MAX_CONNECTIONS, 8 when unset */
static int g_depth = -1;         /* a stream's queue: RINGLET_SIM_QUEUE_DEPTH, 1024 when unset */
static int g_queue_next[64];     /* per device: the queue of the next stream made */
static atomic_ullong g_queue_seq; /* the order in which operations were queued */
/* Capture state (streams' capture and capture_invalid, events' capture). Taken after
 * g_streams_mu where both are held, never before. */
static pthread_mutex_t g_capture_mu = PTHREAD_MUTEX_INITIALIZER;
static uint64_t g_capture_seq; /* captures begun (g_capture_mu) */
static atomic_int g_captures;   /* captures active: a query looks further only when some are */
/* The calling thread's capture mode (cudaThreadExchangeStreamCaptureMode; global until it
 * changes it), and the thread's number (thread_id). */
static _Thread_local int t_capture_mode = RL_RT_CAPTURE_GLOBAL;
static atomic_ulong g_thread_ids;
static _Thread_local unsigned long t_thread_id;

/* This thread's number, from 1: never another's, also after the thread ended. */
static unsigned long thread_id(void) {
    if (!t_thread_id) t_thread_id = atomic_fetch_add(&g_thread_ids, 1) + 1;
    return t_thread_id;
}

static unsigned long long rng_next(uint64_t *s) {
    *s ^= *s << 13, *s ^= *s >> 7, *s ^= *s << 17;
    return *s;
}

static void sleep_us(long us) {
    struct timespec ts = {us / 1000000, (us % 1000000) * 1000};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

/* Whether a flag wait is met: a kernel compares unsigned, a stream memory operation
 * as CUDA's GEQ does, (int64_t)(*flag - value) >= 0. */
static int flag_met(const sim_op *o) {
    uint64_t v = __atomic_load_n((const uint64_t *)o->a, __ATOMIC_ACQUIRE);
    return o->kind == OP_WAIT_VALUE ? (int64_t)(v - o->gen) >= 0 : v >= o->gen;
}

/* Waits until the flag wait o is met; gives up on the sticky error. A host thread or
 * another process sets the flag: poll, backing off. */
static void wait_flag(const sim_op *o) {
    long us = 1;
    for (unsigned n = 0; !flag_met(o); n++) {
        if (sim_sticky()) return;
        if (n < 64) {
            sched_yield();
            continue;
        }
        sleep_us(us);
        if (us < 200) us *= 2;
    }
}

static void run_op(sim_op *o) {
    switch (o->kind) {
    case OP_COPY: memmove(o->dst, o->a, o->n); break;
    case OP_MEMSET: memset(o->dst, o->value, o->n); break;
    case OP_REDUCE: rl_reduce_host(o->dst, o->a, o->b, o->n, o->dt, o->rop); break;
    case OP_REDUCE_MANY: rl_reduce_host_many(o->dst, o->srcs, o->nsrc, o->n, o->dt, o->rop); break;
    case OP_SCALE: rl_scale_host(o->dst, o->a, o->n, o->dt, o->scalar); break;
    case OP_CONVERT: rl_convert_host(o->dst, o->dt, o->a, o->st, o->n, o->fscale); break;
    case OP_DIVIDE: rl_divide_host(o->dst, o->n, o->dt, o->divisor); break;
    case OP_WAIT_FLAG:
    case OP_WAIT_VALUE: wait_flag(o); break;
    case OP_WRITE_FLAG:
    case OP_WRITE_VALUE: __atomic_store_n((uint64_t *)o->dst, o->gen, __ATOMIC_RELEASE); break;
    case OP_FAULT: sim_set_sticky(o->fault, "%s", o->msg); break;
    case OP_WAIT_EVENT:
        pthread_mutex_lock(&o->ev->mu);
        while (o->ev->done < o->gen && !sim_sticky()) {
            /* a timed wait, so that a sticky error set elsewhere ends it */
            rl_cond_wait_ms(&o->ev->cv, &o->ev->mu, 10);
        }
        pthread_mutex_unlock(&o->ev->mu);
        break;
    default: break;
    }
}

/* A record always completes, even after a sticky error: a host waiting on the event
 * must see it (and then the error), never hang. */
static void complete_record(sim_op *o) {
    pthread_mutex_lock(&o->ev->mu);
    if (o->gen > o->ev->done) o->ev->done = o->gen;
    pthread_cond_broadcast(&o->ev->cv);
    pthread_mutex_unlock(&o->ev->mu);
}

/* A wait (for a flag, or for an event) that is not met yet. */
static int unmet_wait(const sim_op *w) {
    if (w->kind == OP_WAIT_FLAG || w->kind == OP_WAIT_VALUE) return !flag_met(w);
    if (w->kind != OP_WAIT_EVENT) return 0;
    pthread_mutex_lock(&w->ev->mu);
    int unmet = w->ev->done < w->gen;
    pthread_mutex_unlock(&w->ev->mu);
    return unmet;
}

/* Whether o, about to run on s, is behind an unmet wait that another stream of the same
 * hardware queue queued before it (running, or not started yet). */
static int queue_blocked(rl_dev_stream_t s, const sim_op *o) {
    int blocked = 0;
    pthread_mutex_lock(&g_streams_mu);
    for (rl_dev_stream_t t = g_streams; t && !blocked; t = t->next_all) {
        if (t == s || t->queue != s->queue || t->device != s->device) continue;
        pthread_mutex_lock(&t->mu);
        if (t->running && t->running->qseq < o->qseq) blocked = unmet_wait(t->running);
        for (const sim_op *w = t->head; w && !blocked && w->qseq < o->qseq; w = w->next) blocked = unmet_wait(w);
        pthread_mutex_unlock(&t->mu);
    }
    pthread_mutex_unlock(&g_streams_mu);
    return blocked;
}

static void stream_end(rl_dev_stream_t s);

static void *stream_main(void *arg) {
    rl_dev_stream_t s = arg;
    for (;;) {
        pthread_mutex_lock(&s->mu);
        while (!s->head && !s->quit) pthread_cond_wait(&s->cv, &s->mu);
        sim_op *o = s->head;
        if (!o) {
            pthread_mutex_unlock(&s->mu);
            break;
        }
        s->head = o->next;
        if (!s->head) s->tail = NULL;
        s->busy = 1;
        s->running = o;
        long jitter = g_jitter_us;
        uint64_t r = jitter > 0 ? rng_next(&s->rng) : 0;
        pthread_mutex_unlock(&s->mu);

        for (long us = 1; !sim_sticky() && queue_blocked(s, o);) {
            sleep_us(us);
            if (us < 200) us *= 2;
        }
        if (jitter > 0) sleep_us((long)(r % (uint64_t)(jitter + 1)));
        if (o->kind == OP_RECORD) complete_record(o);
        else if (!sim_sticky()) run_op(o); /* after a sticky error, queued work is dropped */

        pthread_mutex_lock(&s->mu);
        s->running = NULL;
        s->busy = 0;
        s->queued--;
        s->ended++;
        pthread_cond_broadcast(&s->room_cv);
        if (!s->head) pthread_cond_broadcast(&s->idle_cv);
        pthread_mutex_unlock(&s->mu);
        op_free(o);
    }
    pthread_mutex_lock(&s->mu);
    int reap = s->reap_self;
    pthread_mutex_unlock(&s->mu);
    if (!reap) return NULL; /* destroyed idle: sim_stream_destroy ends it */
    /* Destroyed with work queued, now run (sim_stream_destroy returned at once): the stream
     * goes, once nobody looks at it (snapshot). Until then a device synchronisation waits
     * for its work, as cudaDeviceSynchronize waits for the work of a destroyed stream. */
    stream_end(s);
    pthread_detach(pthread_self());
    return NULL;
}

/* Takes s off the list of streams, once nobody looks at it, and frees it. */
static void stream_end(rl_dev_stream_t s) {
    pthread_mutex_lock(&g_streams_mu);
    for (rl_dev_stream_t *p = &g_streams; *p; p = &(*p)->next_all)
        if (*p == s) {
            *p = s->next_all;
            break;
        }
    while (s->users) pthread_cond_wait(&g_streams_cv, &g_streams_mu);
    pthread_mutex_unlock(&g_streams_mu);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cv);
    pthread_cond_destroy(&s->idle_cv);
    pthread_cond_destroy(&s->room_cv);
    free(s);
}

static int stream_new(rl_dev_stream_t *out, int device, int blocking, int legacy) {
    *out = NULL;
    rl_dev_stream_t s = calloc(1, sizeof *s);
    if (!s) return sim_fail(RL_RT_ERR_MEMORY_ALLOCATION, "stream_create: out of memory");
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    pthread_cond_init(&s->idle_cv, NULL);
    pthread_cond_init(&s->room_cv, NULL);
    s->device = device;
    s->blocking = blocking;
    s->legacy = legacy;
    s->rng = (uint64_t)(uintptr_t)s ^ (uint64_t)(rl_now() * 1e9) ^ 0x9E3779B97F4A7C15ull;
    if (!s->rng) s->rng = 1;
    pthread_mutex_lock(&g_streams_mu);
    if (g_jitter_us < 0) g_jitter_us = (long)rl_env_int("RINGLET_SIM_JITTER", 0, 0, 1000000);
    if (g_nqueues < 0) g_nqueues = (int)rl_env_int("CUDA_DEVICE_MAX_CONNECTIONS", 8, 1, 32);
    if (g_depth < 0) g_depth = (int)rl_env_int("RINGLET_SIM_QUEUE_DEPTH", 1024, 2, 1 << 20);
    s->queue = g_queue_next[device]++ % g_nqueues;
    pthread_mutex_unlock(&g_streams_mu);
    if (pthread_create(&s->thread, NULL, stream_main, s) != 0) {
        free(s);
        return sim_fail(RL_RT_ERR_MEMORY_ALLOCATION, "stream_create: cannot start a thread");
    }
    pthread_mutex_lock(&g_streams_mu);
    s->next_all = g_streams;
    g_streams = s;
    pthread_mutex_unlock(&g_streams_mu);
    *out = s;
    return RL_RT_SUCCESS;
}

int sim_stream_create(rl_dev_stream_t *out, int blocking) {
    *out = NULL;
    int rc = sim_sticky_check();
    return rc ? rc : stream_new(out, sim_current_device(), blocking, 0);
}

static _Thread_local rl_dev_stream_t t_per_thread[64]; /* RL_RT_STREAM_PER_THREAD, per device */

/* Whether s is a stream of this process that was not destroyed. CUDA: the handle is
 * invalid once destroyed, though the work queued on it still runs. The handle is looked
 * up, not read: a stream that was destroyed may be freed already. */
static int stream_valid(rl_dev_stream_t s, const char *what) {
    pthread_mutex_lock(&g_streams_mu);
    rl_dev_stream_t t = g_streams;
    while (t && t != s) t = t->next_all;
    int quit = 0;
    if (t) {
        pthread_mutex_lock(&t->mu);
        quit = t->quit;
        pthread_mutex_unlock(&t->mu);
    }
    pthread_mutex_unlock(&g_streams_mu);
    if (!t)
        return sim_fail(RL_RT_ERR_INVALID_HANDLE, "%s: %p is not a stream of this process (destroyed, or never made)",
                        what, (void *)s);
    if (quit)
        return sim_fail(RL_RT_ERR_INVALID_HANDLE, "%s: stream %p was destroyed (its work queued before still runs; "
                                                  "nothing new may name it)",
                        what, (void *)s);
    return RL_RT_SUCCESS;
}

/* RL_RT_STREAM_PER_THREAD: the calling thread's own stream on its current device; NULL and
 * RL_RT_STREAM_LEGACY: the current device's legacy default stream. */
static int resolve(rl_dev_stream_t *s) {
    if (*s == RL_RT_STREAM_PER_THREAD) {
        int dev = sim_current_device();
        if (!t_per_thread[dev]) {
            int rc = stream_new(&t_per_thread[dev], dev, 1, 0); /* lives as long as the process */
            if (rc) return rc;
        }
        *s = t_per_thread[dev];
        return RL_RT_SUCCESS;
    }
    if (*s && *s != RL_RT_STREAM_LEGACY) return stream_valid(*s, "a call naming a stream");
    int dev = sim_current_device();
    pthread_mutex_lock(&g_streams_mu);
    rl_dev_stream_t l = g_legacy[dev];
    pthread_mutex_unlock(&g_streams_mu);
    if (!l) {
        int rc = stream_new(&l, dev, 1, 1);
        if (rc) return rc;
        pthread_mutex_lock(&g_streams_mu);
        if (g_legacy[dev]) {
            rl_dev_stream_t mine = l;
            l = g_legacy[dev];
            pthread_mutex_unlock(&g_streams_mu);
            sim_stream_destroy(mine); /* another thread made it first */
        } else {
            g_legacy[dev] = l;
            pthread_mutex_unlock(&g_streams_mu);
        }
    }
    *s = l;
    return RL_RT_SUCCESS;
}

int sim_stream_device(rl_dev_stream_t s, int *dev) {
    int rc = sim_forked_check(); /* no context made: rt.h */
    if (rc || (rc = resolve(&s))) return rc;
    *dev = s->device;
    return RL_RT_SUCCESS;
}

static int pending(rl_dev_stream_t s) { return s->head || s->busy; }

static void wait_idle(rl_dev_stream_t s) {
    pthread_mutex_lock(&s->mu);
    while (pending(s)) pthread_cond_wait(&s->idle_cv, &s->mu);
    pthread_mutex_unlock(&s->mu);
}

/* An unmet flag wait: its word and the value it waits for (copied: the op goes once met). */
typedef struct {
    const void *word;
    uint64_t value;
} held_t;

/* Whether an unmet flag wait holds s; *h: that wait. */
static int held_by(rl_dev_stream_t s, held_t *h) {
    const sim_op *found = NULL;
    pthread_mutex_lock(&s->mu);
    if (s->running && (s->running->kind == OP_WAIT_FLAG || s->running->kind == OP_WAIT_VALUE) && !flag_met(s->running))
        found = s->running;
    for (const sim_op *o = s->head; o && !found; o = o->next)
        if ((o->kind == OP_WAIT_FLAG || o->kind == OP_WAIT_VALUE) && !flag_met(o)) found = o;
    if (found) *h = (held_t){found->a, found->gen};
    pthread_mutex_unlock(&s->mu);
    return found != NULL;
}

/* The streams as they are now, each kept alive (users) while the caller looks at it
 * without the list's lock: a stream may wait for a flag that a thread needing that lock
 * sets. */
static rl_dev_stream_t *snapshot(size_t *n) {
    pthread_mutex_lock(&g_streams_mu);
    size_t k = 0;
    for (rl_dev_stream_t s = g_streams; s; s = s->next_all) k++;
    rl_dev_stream_t *list = malloc((k ? k : 1) * sizeof *list);
    k = 0;
    for (rl_dev_stream_t s = g_streams; s && list; s = s->next_all) {
        s->users++;
        list[k++] = s;
    }
    pthread_mutex_unlock(&g_streams_mu);
    *n = k;
    return list;
}

static void snapshot_drop(rl_dev_stream_t *list, size_t n) {
    pthread_mutex_lock(&g_streams_mu);
    for (size_t i = 0; i < n; i++) list[i]->users--;
    pthread_cond_broadcast(&g_streams_cv);
    pthread_mutex_unlock(&g_streams_mu);
    free(list);
}

/* Whether an unmet flag wait holds one of the streams: *h that wait, *which its stream. */
static int any_held(rl_dev_stream_t *list, size_t n, rl_dev_stream_t *which, held_t *h) {
    for (size_t i = 0; i < n; i++)
        if (held_by(list[i], h)) return *which = list[i], 1;
    return 0;
}

/* ---- stream capture ---- */

static rl_dev_stream_t capture_of(rl_dev_stream_t s) {
    pthread_mutex_lock(&g_capture_mu);
    rl_dev_stream_t c = s->capture;
    pthread_mutex_unlock(&g_capture_mu);
    return c;
}

/* What CUDA does on an operation a capture does not allow: the capture is invalidated
 * (its end fails), and the call fails with code. origin: the capture's stream. */
static int capture_refuse(rl_dev_stream_t origin, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int capture_refuse(rl_dev_stream_t origin, int code, const char *fmt, ...) {
    char msg[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    pthread_mutex_lock(&g_capture_mu);
    if (origin->capture == origin) origin->capture_invalid = 1;
    pthread_mutex_unlock(&g_capture_mu);
    return sim_fail(code, "%s", msg);
}

int sim_thread_exchange_capture_mode(int *mode) {
    if (*mode != RL_RT_CAPTURE_GLOBAL && *mode != RL_RT_CAPTURE_THREAD_LOCAL && *mode != RL_RT_CAPTURE_RELAXED)
        return sim_fail(RL_RT_ERR_INVALID_VALUE, "thread_exchange_stream_capture_mode: mode %d", *mode);
    int old = t_capture_mode;
    t_capture_mode = *mode;
    *mode = old;
    return RL_RT_SUCCESS;
}

/* The origin of an active capture that forbids this thread the calls CUDA calls
 * potentially unsafe (a query, a synchronisation, an allocation), by the thread's capture
 * mode: global, any capture (the simulator's are all begun in global mode), also another
 * thread's; thread-local, one this thread began; relaxed, none. NULL when none does. */
static rl_dev_stream_t capture_forbidding(int *other_thread) {
    if (t_capture_mode == RL_RT_CAPTURE_RELAXED || !atomic_load(&g_captures)) return NULL;
    rl_dev_stream_t found = NULL;
    pthread_mutex_lock(&g_streams_mu);
    pthread_mutex_lock(&g_capture_mu);
    for (rl_dev_stream_t t = g_streams; t && !found; t = t->next_all)
        if (t->capture == t && (t_capture_mode == RL_RT_CAPTURE_GLOBAL || t->capture_thread == thread_id()))
            found = t, *other_thread = t->capture_thread != thread_id();
    pthread_mutex_unlock(&g_capture_mu);
    pthread_mutex_unlock(&g_streams_mu);
    return found;
}

/* what (a call) fails if a capture forbids it to this thread (capture_forbidding), and
 * invalidates that capture, as CUDA does; else RL_RT_SUCCESS. */
static int refuse_if_forbidden(const char *what) {
    int other = 0;
    rl_dev_stream_t origin = capture_forbidding(&other);
    if (!origin) return RL_RT_SUCCESS;
    return capture_refuse(origin, RL_RT_ERR_CAPTURE_UNSUPPORTED, "%s: not allowed while %s", what,
                          other ? "another thread's stream capture (global mode) is active, and this thread's capture "
                                  "mode is global"
                                : "this thread's stream capture is active");
}

/* The origin of a capture that a stream takes part in: any stream (dev < 0), or one of
 * device dev (a blocking one only, when blocking); NULL when none captures. */
static rl_dev_stream_t capture_somewhere(int dev, int blocking) {
    rl_dev_stream_t found = NULL;
    pthread_mutex_lock(&g_streams_mu);
    pthread_mutex_lock(&g_capture_mu);
    for (rl_dev_stream_t t = g_streams; t && !found; t = t->next_all)
        if (t->capture && (dev < 0 || (t->device == dev && (!blocking || t->blocking)))) found = t->capture;
    pthread_mutex_unlock(&g_capture_mu);
    pthread_mutex_unlock(&g_streams_mu);
    return found;
}

/* g_streams_mu and g_capture_mu held: the streams that joined origin's capture leave it;
 * how many there were. */
static int joined_leave_locked(rl_dev_stream_t origin) {
    int n = 0;
    for (rl_dev_stream_t t = g_streams; t; t = t->next_all)
        if (t != origin && t->capture == origin) t->capture = NULL, t->capture_id = 0, n++;
    return n;
}

static int resolve(rl_dev_stream_t *s);

static uint64_t event_capture_id(rl_dev_event_t e) {
    pthread_mutex_lock(&g_capture_mu);
    uint64_t id = e->capture_id;
    pthread_mutex_unlock(&g_capture_mu);
    return id;
}

/* g_streams_mu and g_capture_mu held: the stream whose capture number id is active. */
static rl_dev_stream_t capture_origin_locked(uint64_t id) {
    for (rl_dev_stream_t t = g_streams; t && id; t = t->next_all)
        if (t->capture == t && t->capture_id == id) return t;
    return NULL;
}

int sim_stream_begin_capture(rl_dev_stream_t s) {
    int rc = sim_call_begin();
    if (rc || (rc = resolve(&s))) return rc;
    if (s->legacy) return sim_fail(RL_RT_ERR_CAPTURE_UNSUPPORTED, "stream_begin_capture: the legacy stream cannot be captured");
    pthread_mutex_lock(&g_capture_mu);
    int busy = s->capture != NULL;
    if (!busy) {
        s->capture = s, s->capture_id = ++g_capture_seq, s->capture_invalid = 0;
        s->capture_thread = thread_id();
        atomic_fetch_add(&g_captures, 1);
    }
    pthread_mutex_unlock(&g_capture_mu);
    return busy ? sim_fail(RL_RT_ERR_ILLEGAL_STATE, "stream_begin_capture: the stream is capturing already") : RL_RT_SUCCESS;
}

int sim_stream_end_capture(rl_dev_stream_t s) {
    int rc = sim_make_context();
    if (!rc) rc = resolve(&s);
    if (rc) return rc;
    int joined = 0, invalid = 0, other_thread = 0;
    pthread_mutex_lock(&g_streams_mu);
    pthread_mutex_lock(&g_capture_mu);
    rl_dev_stream_t origin = s->capture;
    /* Only the thread that began it ends it (CUDA: but for a capture begun in relaxed
     * mode, which this runtime does not begin); it stays active meanwhile. */
    if (origin == s && s->capture_thread != thread_id()) other_thread = 1, origin = NULL;
    if (origin == s) {
        joined = joined_leave_locked(s);
        invalid = s->capture_invalid;
        s->capture = NULL;
        s->capture_id = 0;
        atomic_fetch_sub(&g_captures, 1);
    }
    pthread_mutex_unlock(&g_capture_mu);
    pthread_mutex_unlock(&g_streams_mu);
    if (other_thread)
        return sim_fail(RL_RT_ERR_CAPTURE_WRONG_THREAD,
                        "stream_end_capture: the capture was begun by another thread, which must end it");
    if (!origin) return sim_fail(RL_RT_ERR_ILLEGAL_STATE, "stream_end_capture: the stream is not capturing");
    if (origin != s)
        return sim_fail(RL_RT_ERR_CAPTURE_UNMATCHED, "stream_end_capture: the capture was begun on another stream");
    if (invalid)
        return sim_fail(RL_RT_ERR_CAPTURE_INVALIDATED,
                        "stream_end_capture: an operation the capture does not allow invalidated it");
    if (joined)
        return sim_fail(RL_RT_ERR_CAPTURE_UNJOINED,
                        "stream_end_capture: %d other stream(s) joined the capture (the simulator has no rejoin)", joined);
    return RL_RT_SUCCESS;
}

int sim_stream_is_capturing(rl_dev_stream_t s, int *yes) {
    *yes = 0;
    int rc = sim_make_context();
    if (!rc) rc = resolve(&s);
    if (rc) return rc;
    if (s->legacy && capture_somewhere(s->device, 1))
        return sim_fail(RL_RT_ERR_CAPTURE_IMPLICIT,
                        "stream_is_capturing: the legacy stream, while a blocking stream of device %d captures", s->device);
    *yes = capture_of(s) != NULL;
    return RL_RT_SUCCESS;
}

static int device_sync(const char *what, int check_capture);

int sim_device_sync(const char *what) { return device_sync(what, 1); }

int sim_device_sync_loading(const char *what) { return device_sync(what, 0); }

/* A call that waits for every stream, while s is held by the flag wait h: it would hang.
 * Refused with RL_RT_ERR_SIM_DEADLOCK; with RINGLET_SIM_ON_DEADLOCK=exit the process ends
 * (status 70, the message on stderr) instead, as strict as the hang: a caller that takes
 * the error as a warning, which a GPU would not let it, cannot pass a test (the suite's
 * default, tests/run.sh). */
static int deadlock_fail(const char *msg);
static int held_fail(const char *what, rl_dev_stream_t s, const held_t *h) {
    char msg[256];
    snprintf(msg, sizeof msg,
             "%s waits for every stream, and a%s stream of device %d is held by a flag wait (word %p holds %llu, "
             "awaited %llu)",
             what, s->legacy ? " legacy default" : "", s->device, h->word,
             (unsigned long long)__atomic_load_n((const uint64_t *)h->word, __ATOMIC_ACQUIRE),
             (unsigned long long)h->value);
    return deadlock_fail(msg);
}

/* A call that may wait for its own stream s, held by the flag wait h. */
static int stream_held_fail(const char *what, rl_dev_stream_t s, const held_t *h) {
    char msg[256];
    snprintf(msg, sizeof msg, "%s may wait for its stream (of device %d), which is held by a flag wait (word %p holds "
             "%llu, awaited %llu)",
             what, s->device, h->word, (unsigned long long)__atomic_load_n((const uint64_t *)h->word, __ATOMIC_ACQUIRE),
             (unsigned long long)h->value);
    return deadlock_fail(msg);
}

static int deadlock_fail(const char *msg) {
    const char *on = getenv("RINGLET_SIM_ON_DEADLOCK");
    if (on && !strcasecmp(on, "exit")) {
        fprintf(stderr, "ringlet simulated GPU (pid %d): deadlock on a GPU: %s; the process ends here "
                        "(RINGLET_SIM_ON_DEADLOCK=exit)\n",
                (int)getpid(), msg);
        fflush(stderr);
        _exit(70);
    }
    return sim_fail(RL_RT_ERR_SIM_DEADLOCK, "%s", msg);
}

int sim_device_may_sync(const char *what) {
    int rc = refuse_if_forbidden(what);
    if (rc) return rc;
    size_t n;
    rl_dev_stream_t *list = snapshot(&n);
    if (!list) return sim_fail(RL_RT_ERR_MEMORY_ALLOCATION, "%s: out of memory", what);
    rl_dev_stream_t s = NULL;
    held_t h;
    if (any_held(list, n, &s, &h)) rc = held_fail(what, s, &h);
    snapshot_drop(list, n);
    return rc;
}

/* Whether o names an address in [lo, hi): each of its addresses starts a range that lies
 * inside one allocation (checked when it was queued), so its first byte tells. */
static int op_names(const sim_op *o, uintptr_t lo, uintptr_t hi) {
    const void *p[3 + SIM_MAX_SOURCES] = {o->dst, o->a, o->b};
    int k = 3;
    for (int i = 0; i < o->nsrc && i < SIM_MAX_SOURCES; i++) p[k++] = o->srcs[i];
    for (int i = 0; i < k; i++)
        if ((uintptr_t)p[i] >= lo && (uintptr_t)p[i] < hi) return 1;
    return 0;
}

int sim_work_uses(const void *eng, size_t bytes, int *device) {
    uintptr_t lo = (uintptr_t)eng, hi = lo + bytes;
    int found = 0;
    pthread_mutex_lock(&g_streams_mu);
    for (rl_dev_stream_t t = g_streams; t && !found; t = t->next_all) {
        pthread_mutex_lock(&t->mu);
        found = t->running && op_names(t->running, lo, hi);
        for (const sim_op *o = t->head; o && !found; o = o->next) found = op_names(o, lo, hi);
        if (found) *device = t->device;
        pthread_mutex_unlock(&t->mu);
    }
    pthread_mutex_unlock(&g_streams_mu);
    return found;
}

static int device_sync(const char *what, int check_capture) {
    int rc = check_capture ? refuse_if_forbidden(what) : RL_RT_SUCCESS;
    if (rc) return rc;
    size_t n;
    rl_dev_stream_t *list = snapshot(&n);
    if (!list) return sim_fail(RL_RT_ERR_MEMORY_ALLOCATION, "%s: out of memory", what);
    for (;;) {
        /* Looked at again on every round: a flag wait enqueued after the call began holds
         * a stream as surely, and a stream may wait for an event behind a held one. */
        rl_dev_stream_t s = NULL;
        held_t h;
        if (any_held(list, n, &s, &h)) {
            rc = held_fail(what, s, &h);
            break;
        }
        rl_dev_stream_t busy = NULL;
        for (size_t i = 0; i < n && !busy; i++) {
            pthread_mutex_lock(&list[i]->mu);
            if (pending(list[i])) busy = list[i];
            pthread_mutex_unlock(&list[i]->mu);
        }
        if (!busy) break;
        pthread_mutex_lock(&busy->mu);
        if (pending(busy)) rl_cond_wait_ms(&busy->idle_cv, &busy->mu, 2);
        pthread_mutex_unlock(&busy->mu);
    }
    snapshot_drop(list, n);
    return rc;
}

int sim_stream_synchronize(rl_dev_stream_t s) {
    int rc = sim_call_begin();
    if (rc || (rc = resolve(&s))) return rc;
    rl_dev_stream_t cap = capture_of(s);
    if (cap) return capture_refuse(cap, RL_RT_ERR_CAPTURE_UNSUPPORTED, "stream_synchronize: the stream is capturing");
    if ((rc = refuse_if_forbidden("stream_synchronize"))) return rc;
    wait_idle(s);
    return sim_sticky_check();
}

/* cudaStreamDestroy: returns at once; the work queued on the stream still runs, and the
 * stream goes when it has (stream_main). Memory that work uses must stay until then. A
 * stream with nothing queued goes at once (its thread joined: no thread outlives it). */
int sim_stream_destroy(rl_dev_stream_t s) {
    int rc = sim_make_context();
    if (rc) return rc;
    if (!s || s == RL_RT_STREAM_LEGACY || s == RL_RT_STREAM_PER_THREAD)
        return sim_fail(RL_RT_ERR_INVALID_HANDLE, "stream_destroy: a default stream (legacy or per-thread)");
    if ((rc = stream_valid(s, "stream_destroy"))) return rc;
    pthread_mutex_lock(&g_streams_mu);
    pthread_mutex_lock(&g_capture_mu);
    joined_leave_locked(s);
    if (s->capture == s) atomic_fetch_sub(&g_captures, 1);
    s->capture = NULL, s->capture_id = 0;
    pthread_mutex_unlock(&g_capture_mu);
    pthread_mutex_unlock(&g_streams_mu);
    pthread_mutex_lock(&s->mu);
    s->quit = 1;
    s->reap_self = pending(s);
    int idle = !s->reap_self;
    pthread_cond_signal(&s->cv);
    pthread_mutex_unlock(&s->mu);
    if (idle) {
        pthread_join(s->thread, NULL);
        stream_end(s);
    }
    return RL_RT_SUCCESS;
}

sim_op *sim_new_op(int kind) {
    sim_op *o = calloc(1, sizeof *o);
    if (o) o->kind = kind;
    return o;
}

static void append_locked(rl_dev_stream_t s, sim_op *o) {
    o->qseq = atomic_fetch_add(&g_queue_seq, 1);
    s->queued++;
    if (s->tail) s->tail->next = o;
    else s->head = o;
    s->tail = o;
    pthread_cond_signal(&s->cv);
}

static void append(rl_dev_stream_t s, sim_op *o) {
    pthread_mutex_lock(&s->mu);
    append_locked(s, o);
    pthread_mutex_unlock(&s->mu);
}

/* A stream's queue holds a bounded number of operations on a GPU (its depth is not
 * documented): a call that queues on a full one blocks until an operation ahead of it
 * ends, for ever if none does (a flag wait that only the blocked thread, or a lock it
 * holds, would release). The simulator blocks the same; where the stream's queue has not
 * moved for SIM_QUEUE_STALL_S the GPU's hang is a deadlock, reported as one. */
#define SIM_QUEUE_STALL_S 30.0
static int append_bounded(rl_dev_stream_t s, sim_op *o, const char *what) {
    pthread_mutex_lock(&s->mu);
    double since = rl_now();
    unsigned long long seen = s->ended;
    while (s->queued >= g_depth && !sim_sticky()) {
        if (s->ended != seen) seen = s->ended, since = rl_now();
        if (rl_now() - since > SIM_QUEUE_STALL_S) {
            int queued = s->queued;
            pthread_mutex_unlock(&s->mu);
            op_free(o);
            char msg[256];
            snprintf(msg, sizeof msg,
                     "%s: the stream's queue (of device %d) is full, %d operations (RINGLET_SIM_QUEUE_DEPTH), and "
                     "none of them ended for %.0f s: the call blocks until one does",
                     what, s->device, queued, SIM_QUEUE_STALL_S);
            return deadlock_fail(msg);
        }
        rl_cond_wait_ms(&s->room_cv, &s->mu, 100);
    }
    append_locked(s, o);
    pthread_mutex_unlock(&s->mu);
    return RL_RT_SUCCESS;
}

static int event_new(rl_dev_event_t *out, int device);

/* Queues on to a wait for everything queued on from so far (a private event). */
static int order_after(rl_dev_stream_t to, rl_dev_stream_t from) {
    pthread_mutex_lock(&from->mu);
    int busy = pending(from);
    pthread_mutex_unlock(&from->mu);
    if (!busy) return RL_RT_SUCCESS;
    rl_dev_event_t e;
    int rc = event_new(&e, from->device);
    if (rc) return rc;
    sim_op *rec = sim_new_op(OP_RECORD), *wait = sim_new_op(OP_WAIT_EVENT);
    if (!rec || !wait) {
        free(rec), free(wait), event_unref(e);
        return sim_fail(RL_RT_ERR_MEMORY_ALLOCATION, "out of memory");
    }
    atomic_fetch_add(&e->refs, 2);
    rec->ev = wait->ev = e;
    rec->gen = wait->gen = e->recorded = 1;
    /* Looked at again with the record queued in the same hold of the lock: a destroyed
     * stream's thread ends once its queue is empty, and would never run a record queued
     * after that. */
    pthread_mutex_lock(&from->mu);
    busy = pending(from);
    if (busy) append_locked(from, rec);
    pthread_mutex_unlock(&from->mu);
    if (busy) {
        append(to, wait);
    } else {
        event_unref(e), event_unref(e);
        free(rec), free(wait);
    }
    event_unref(e);
    return RL_RT_SUCCESS;
}

/* The legacy default stream waits for the device's blocking streams, and they for it
 * (non-blocking streams take no part). */
static int legacy_order(rl_dev_stream_t s) {
    if (s->legacy) {
        size_t n;
        rl_dev_stream_t origin = capture_somewhere(s->device, 1);
        if (origin)
            return capture_refuse(origin, RL_RT_ERR_CAPTURE_IMPLICIT,
                                  "work on the legacy stream while a blocking stream of device %d captures", s->device);
        rl_dev_stream_t *list = snapshot(&n);
        if (!list) return sim_fail(RL_RT_ERR_MEMORY_ALLOCATION, "out of memory");
        int rc = RL_RT_SUCCESS;
        for (size_t i = 0; i < n && !rc; i++)
            if (list[i] != s && list[i]->blocking && !list[i]->legacy && list[i]->device == s->device)
                rc = order_after(s, list[i]);
        snapshot_drop(list, n);
        return rc;
    }
    if (!s->blocking) return RL_RT_SUCCESS;
    pthread_mutex_lock(&g_streams_mu);
    rl_dev_stream_t l = g_legacy[s->device];
    pthread_mutex_unlock(&g_streams_mu);
    return l ? order_after(s, l) : RL_RT_SUCCESS;
}

int sim_enqueue(rl_dev_stream_t s, sim_op *o, const char *what) {
    if (!o) return sim_fail(RL_RT_ERR_MEMORY_ALLOCATION, "%s: out of memory", what);
    int rc = resolve(&s);
    if (!rc && capture_of(s)) {
        /* Captured: into the graph, not run. */
        op_free(o);
        return RL_RT_SUCCESS;
    }
    if (!rc) rc = legacy_order(s);
    if (rc) {
        op_free(o);
        return rc;
    }
    return append_bounded(s, o, what);
}

/* ---- events ---- */

static int event_new(rl_dev_event_t *out, int device) {
    *out = NULL;
    rl_dev_event_t e = calloc(1, sizeof *e);
    if (!e) return sim_fail(RL_RT_ERR_MEMORY_ALLOCATION, "event_create: out of memory");
    pthread_mutex_init(&e->mu, NULL);
    pthread_cond_init(&e->cv, NULL);
    atomic_init(&e->refs, 1);
    e->device = device;
    *out = e;
    return RL_RT_SUCCESS;
}

int sim_event_create(rl_dev_event_t *out) {
    *out = NULL;
    int rc = sim_sticky_check();
    return rc ? rc : event_new(out, sim_current_device());
}

int sim_event_destroy(rl_dev_event_t e) {
    int rc = sim_make_context();
    if (rc) return rc;
    if (!e) return sim_fail(RL_RT_ERR_INVALID_HANDLE, "event_destroy: NULL");
    event_unref(e); /* operations that still name it keep it until they ran */
    return RL_RT_SUCCESS;
}

/* An operation that names e, with a reference, at generation gen. */
static sim_op *event_op(int kind, rl_dev_event_t e, uint64_t gen) {
    sim_op *o = sim_new_op(kind);
    if (!o) return NULL;
    atomic_fetch_add(&e->refs, 1);
    o->ev = e;
    o->gen = gen;
    return o;
}

int sim_event_record(rl_dev_event_t e, rl_dev_stream_t s) {
    int rc = sim_call_begin();
    if (rc) return rc;
    if (!e) return sim_fail(RL_RT_ERR_INVALID_HANDLE, "event_record: invalid event");
    if ((rc = resolve(&s))) return rc;
    if (e->device != s->device)
        return sim_fail(RL_RT_ERR_INVALID_HANDLE,
                        "event_record: the event belongs to device %d, the stream to device %d (an event is made on the "
                        "device current when it is created)",
                        e->device, s->device);
    pthread_mutex_lock(&g_capture_mu);
    int captured = s->capture != NULL;
    e->capture_id = s->capture_id; /* a node of the capture, or (0) a record that runs */
    pthread_mutex_unlock(&g_capture_mu);
    if (captured) return RL_RT_SUCCESS;
    pthread_mutex_lock(&e->mu);
    uint64_t gen = ++e->recorded;
    pthread_mutex_unlock(&e->mu);
    rc = sim_enqueue(s, event_op(OP_RECORD, e, gen), "event_record");
    if (rc) { /* not queued: the event is as it was (unless recorded again meanwhile) */
        pthread_mutex_lock(&e->mu);
        if (e->recorded == gen) e->recorded = gen - 1;
        pthread_mutex_unlock(&e->mu);
    }
    return rc;
}

int sim_event_query(rl_dev_event_t e) {
    int rc = sim_call_begin();
    if (rc) return rc;
    if (!e) return sim_fail(RL_RT_ERR_INVALID_HANDLE, "event_query: invalid event");
    rl_dev_stream_t origin = NULL;
    if (event_capture_id(e)) { /* the list's lock only then: queries poll */
        pthread_mutex_lock(&g_streams_mu);
        pthread_mutex_lock(&g_capture_mu);
        if ((origin = capture_origin_locked(e->capture_id))) origin->capture_invalid = 1;
        pthread_mutex_unlock(&g_capture_mu);
        pthread_mutex_unlock(&g_streams_mu);
    }
    if (origin)
        return sim_fail(RL_RT_ERR_CAPTURED_EVENT, "event_query: the event was recorded in an active stream capture");
    if ((rc = refuse_if_forbidden("event_query"))) return rc;
    pthread_mutex_lock(&e->mu);
    int done = e->done >= e->recorded;
    pthread_mutex_unlock(&e->mu);
    if (done) return sim_sticky_check(); /* the work it marks may have faulted */
    return sim_fail(RL_RT_ERR_NOT_READY, "event_query: the event's work is not done");
}

int sim_stream_wait_event(rl_dev_stream_t s, rl_dev_event_t e) {
    int rc = sim_call_begin();
    if (rc) return rc;
    if (!e) return sim_fail(RL_RT_ERR_INVALID_HANDLE, "stream_wait_event: invalid event");
    if ((rc = resolve(&s))) return rc;
    int joins = 0;
    if (event_capture_id(e)) {
        pthread_mutex_lock(&g_streams_mu);
        pthread_mutex_lock(&g_capture_mu);
        rl_dev_stream_t origin = capture_origin_locked(e->capture_id);
        joins = origin && !s->capture;
        if (joins) s->capture = origin, s->capture_id = origin->capture_id; /* waits for a node of it: joins it */
        pthread_mutex_unlock(&g_capture_mu);
        pthread_mutex_unlock(&g_streams_mu);
    }
    if (joins) return RL_RT_SUCCESS;
    pthread_mutex_lock(&e->mu);
    uint64_t gen = e->recorded;
    pthread_mutex_unlock(&e->mu);
    if (gen == 0) return RL_RT_SUCCESS; /* never recorded: nothing to wait for */
    return sim_enqueue(s, event_op(OP_WAIT_EVENT, e, gen), "stream_wait_event");
}

/* A copy with pageable host memory on a capturing stream: refused, the capture
 * invalidated (a graph cannot replay a copy whose bytes the call staged). */
static int refuse_pageable_capture(rl_dev_stream_t s, const char *what) {
    rl_dev_stream_t cap = capture_of(s);
    return cap ? capture_refuse(cap, RL_RT_ERR_CAPTURE_UNSUPPORTED, "%s: pageable host memory on a capturing stream", what)
               : RL_RT_SUCCESS;
}

int sim_stream_reached(rl_dev_stream_t s, const char *what) {
    int rc = resolve(&s);
    if (rc || (rc = refuse_pageable_capture(s, what))) return rc;
    rl_dev_event_t e;
    if ((rc = event_new(&e, s->device))) return rc;
    pthread_mutex_lock(&e->mu);
    uint64_t gen = ++e->recorded;
    pthread_mutex_unlock(&e->mu);
    if ((rc = sim_enqueue(s, event_op(OP_RECORD, e, gen), what))) {
        event_unref(e);
        return rc;
    }
    pthread_mutex_lock(&e->mu);
    while (e->done < e->recorded) pthread_cond_wait(&e->cv, &e->mu);
    pthread_mutex_unlock(&e->mu);
    event_unref(e);
    return sim_sticky_check();
}

/* ---- copies ---- */

/* Pageable host memory behaves as CUDA's does (its "API synchronization behavior"): a
 * copy from it takes the bytes at the call (staged); to device memory it then returns at
 * once, without waiting for the stream's earlier work, and the copy runs in stream order
 * (it may not have happened at the return); to host memory, or a copy into pageable
 * memory, returns only once done (the stream's earlier work first). So does a copy
 * between host buffers of any kind, pinned ones too ("fully synchronous with respect to
 * the host"). Between device and pinned memory, and device to device, it is asynchronous. */
int sim_memcpy_async(void *dst, const void *src, size_t bytes, rl_dev_stream_t s) {
    int rc = sim_call_begin();
    if (rc) return rc;
    if (!bytes) return RL_RT_SUCCESS;
    if (!dst || !src)
        return sim_fail(RL_RT_ERR_INVALID_VALUE, "memcpy_async: a NULL pointer with %zu bytes", bytes);
    char why[160];
    void *d, *a;
    int kd = sim_translate(dst, bytes, &d, why, sizeof why);
    if (kd == SIM_MEM_BAD) return sim_fail(RL_RT_ERR_INVALID_VALUE, "memcpy_async: destination: %s", why);
    int ks = sim_translate(src, bytes, &a, why, sizeof why);
    if (ks == SIM_MEM_BAD) return sim_fail(RL_RT_ERR_INVALID_VALUE, "memcpy_async: source: %s", why);
    if (d != a && (char *)d < (char *)a + bytes && (char *)a < (char *)d + bytes) {
        /* "The memory areas may not overlap": undefined on a GPU (a copy engine does not
         * move as memmove does); stopped here, as a sanitizer would. */
        fprintf(stderr, "simulated GPU: memcpy_async(%p, %p, %zu) in pid %d: the source and destination overlap "
                        "(undefined in CUDA)\n",
                dst, src, bytes, (int)getpid());
        abort();
    }
    sim_op *o = sim_new_op(OP_COPY);
    if (o && ks == SIM_MEM_PAGEABLE) {
        o->owned = malloc(bytes);
        if (!o->owned) {
            free(o);
            return sim_fail(RL_RT_ERR_MEMORY_ALLOCATION, "memcpy_async: out of memory staging %zu pageable bytes",
                            bytes);
        }
        memcpy(o->owned, src, bytes);
        a = o->owned;
    }
    if (o) o->dst = d, o->a = a, o->n = bytes;
    /* Pageable memory either way may synchronise with the stream ("the driver may
     * synchronize with the stream and stage the copy into pinned memory"; into pageable
     * memory the call returns once done), and a copy between host buffers returns once
     * done: behind a held stream that would hang. */
    int host_to_host = ks != SIM_MEM_DEVICE && kd != SIM_MEM_DEVICE;
    if (ks == SIM_MEM_PAGEABLE || kd == SIM_MEM_PAGEABLE || host_to_host) {
        rl_dev_stream_t r = s;
        held_t h;
        if (!resolve(&r) && held_by(r, &h)) {
            free(o ? o->owned : NULL);
            free(o);
            return stream_held_fail(ks == SIM_MEM_PINNED && kd == SIM_MEM_PINNED
                                        ? "memcpy_async between pinned host buffers"
                                        : "memcpy_async with pageable host memory",
                                    r, &h);
        }
    }
    rc = sim_enqueue(s, o, "memcpy_async");
    if (rc) return rc;
    if (kd == SIM_MEM_PAGEABLE || host_to_host) return sim_stream_reached(s, "memcpy_async");
    if (ks == SIM_MEM_PAGEABLE && !(rc = resolve(&s))) rc = refuse_pageable_capture(s, "memcpy_async");
    return rc;
}

int sim_memset_async(void *dst, int value, size_t bytes, rl_dev_stream_t s) {
    int rc = sim_call_begin();
    if (rc) return rc;
    if (!bytes) return RL_RT_SUCCESS;
    char why[160];
    void *d;
    if (!dst) return sim_fail(RL_RT_ERR_INVALID_VALUE, "memset_async: NULL with %zu bytes", bytes);
    int kind = sim_translate(dst, bytes, &d, why, sizeof why);
    if (kind == SIM_MEM_BAD) return sim_fail(RL_RT_ERR_INVALID_VALUE, "memset_async: %s", why);
    /* cudaMemsetAsync takes memory the device reaches (device, or pinned host memory):
     * pageable host memory is cudaErrorInvalidValue. */
    if (kind == SIM_MEM_PAGEABLE)
        return sim_fail(RL_RT_ERR_INVALID_VALUE, "memset_async: %p is pageable host memory, which the device cannot "
                                                 "reach", dst);
    sim_op *o = sim_new_op(OP_MEMSET);
    if (o) o->dst = d, o->value = value, o->n = bytes;
    return sim_enqueue(s, o, "memset_async");
}
