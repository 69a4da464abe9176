/* The device layer's front: which backend this process uses, and error messages. */
#include "device.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "util.h"

static _Thread_local char t_error[256];
static _Thread_local int t_sticky;

const char *rl_dev_error(void) { return t_error; }

int rl_dev_error_sticky(void) { return t_sticky; }

void rl_dev_mark_sticky(void) { t_sticky = 1; }

int rl_dev_fail(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(t_error, sizeof t_error, fmt, ap);
    va_end(ap);
    t_sticky = 0;
    return RL_DEV_ERR;
}

static const rl_device_ops *g_dev;
static char g_why[320]; /* a backend name and rl_dev_error (256) */
static pthread_once_t g_once = PTHREAD_ONCE_INIT;
/* The fork generation when the backend was chosen: its device count initialises CUDA's
 * driver, and a child forked after that cannot use CUDA (gate_forked). */
static unsigned g_chosen_gen;

/* A backend whose count works and finds a device, else NULL with the reason. */
static const rl_device_ops *usable(const rl_device_ops *d) {
    int n = 0;
    if (d->count(&n) != RL_DEV_OK) {
        snprintf(g_why, sizeof g_why, "the %s backend cannot run here: %s", d->name, rl_dev_error());
        return NULL;
    }
    if (n < 1) {
        snprintf(g_why, sizeof g_why, "the %s backend sees no device", d->name);
        return NULL;
    }
    return d;
}

static void choose(void) {
    g_chosen_gen = rl_fork_generation();
    const char *want = getenv("RINGLET_DEVICE");
    if (!want || !*want) want = "auto";
    if (!strcmp(want, "sim")) {
        g_dev = usable(&rl_device_sim);
    } else if (!strcmp(want, "cuda") || !strcmp(want, "auto")) {
#ifdef RINGLET_CUDA
        g_dev = usable(&rl_device_cuda);
#else
        snprintf(g_why, sizeof g_why, "this build has no CUDA support (nvcc was not found at build time)");
#endif
        if (!g_dev && !strcmp(want, "cuda")) RL_WARN(-1, "RINGLET_DEVICE=cuda: %s; device buffers are refused", g_why);
    } else if (!strcmp(want, "none")) {
        snprintf(g_why, sizeof g_why, "RINGLET_DEVICE=none");
    } else {
        snprintf(g_why, sizeof g_why, "RINGLET_DEVICE=%s is not one of auto, cuda, sim, none", want);
        RL_WARN(-1, "%s; device buffers are refused", g_why);
    }
    if (g_dev) g_why[0] = 0;
    else RL_INFO(-1, "no device backend: %s", g_why);
}

const rl_device_ops *rl_device(void) {
    pthread_once(&g_once, choose);
    return g_dev;
}

const char *rl_device_unavailable(void) {
    pthread_once(&g_once, choose);
    return g_why;
}

int rl_dev_ptr_device(const void *p) {
    const rl_device_ops *d = rl_device();
    return d && p ? d->ptr_device(p) : -1;
}

/* ---- quiet sections, hold sections, and the holds ----
 *
 * A reader-writer gate: hold sections are readers (many at once), a quiet section is the
 * writer, waited for by new readers, and itself waiting for the readers to leave and for
 * every noted hold to be released. Progress threads release holds without passing the
 * gate, so a quiet section never waits for a thread that waits for it. */

typedef struct {
    volatile uint64_t *flag;
    uint64_t value;
    int cyclic;
} hold_t;

typedef struct deferred {
    void *p;
    int kind;
    int dev; /* pinned memory: the device current where it was given back (-1: none) */
    struct deferred *next;
} deferred_t;

static pthread_mutex_t g_gate_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_gate_cv = PTHREAD_COND_INITIALIZER;
static int g_readers, g_writer, g_writers_waiting;
static _Thread_local int t_quiet_depth;
static hold_t *g_holds;
static size_t g_nholds, g_holds_cap;
static deferred_t *g_deferred;

/* Work noted stuck (rl_dev_note_stuck): an event after it, on its stream's device. */
typedef struct stuck {
    rl_dev_event_t ev;
    int dev;
    struct stuck *next;
} stuck_t;
static stuck_t *g_stuck;  /* the notes not found done yet (gate lock) */
static size_t g_nstuck;   /* ... and those a thread is looking at now */

/* A child forked after the backend was chosen (CUDA's driver initialised) cannot use CUDA,
 * and has none of the parent's streams and progress threads: its holds would never end,
 * its stuck work never finish. There the gate refuses at once (a free is kept: a leak,
 * never a wait), without taking its lock (a thread of the parent's may have held it at
 * the fork). */
static int gate_forked(void) {
    pthread_once(&g_once, choose);
    return rl_fork_generation() != g_chosen_gen;
}
#define FORKED_MSG "this process was forked after its parent used the device layer (CUDA cannot be used in such a child)"

static int hold_released(const hold_t *h) {
    uint64_t v = __atomic_load_n(h->flag, __ATOMIC_ACQUIRE);
    return h->cyclic ? (int64_t)(v - h->value) >= 0 : v >= h->value;
}

/* Drops released holds; the number left (gate lock held). */
static size_t prune_holds(void) {
    size_t k = 0;
    for (size_t i = 0; i < g_nholds; i++)
        if (!hold_released(&g_holds[i])) g_holds[k++] = g_holds[i];
    g_nholds = k;
    return k;
}

void rl_dev_hold_note(volatile uint64_t *flag, uint64_t value, int cyclic) {
    if (gate_forked()) return;
    pthread_mutex_lock(&g_gate_mu);
    if (g_nholds == g_holds_cap) prune_holds();
    if (g_nholds == g_holds_cap) {
        size_t cap = g_holds_cap ? 2 * g_holds_cap : 64;
        hold_t *h = realloc(g_holds, cap * sizeof *h);
        if (h) g_holds = h, g_holds_cap = cap;
    }
    /* Out of memory: the hold goes unnoted, and a quiet section may then meet it (the
     * simulator reports that as a deadlock); nothing better is possible here. */
    if (g_nholds < g_holds_cap) g_holds[g_nholds++] = (hold_t){flag, value, cyclic};
    pthread_mutex_unlock(&g_gate_mu);
}

int rl_dev_holds_active(void) {
    if (gate_forked()) return 0;
    pthread_mutex_lock(&g_gate_mu);
    int n = (int)prune_holds();
    pthread_mutex_unlock(&g_gate_mu);
    return n;
}

/* A timed wait on the gate's condition, 1 ms at most (holds are released by a store to
 * host memory, which signals nobody). */
static void gate_wait(void) {
    rl_cond_wait_ms(&g_gate_cv, &g_gate_mu, 1);
}

/* Where pinned memory, of no device, is freed: the current device where its context
 * exists, else the first device whose context does, else -1 (the current device). A
 * thread that never chose a device reads as device 0, which may have none: the runtime
 * would make one for the call, GPU memory on a device the program never used. */
static int pinned_home(const rl_device_ops *d) {
    int dev = -1, active = 0, n = 0;
    if (d->get_device(&dev) == RL_DEV_OK && d->context_active(dev, &active) == RL_DEV_OK && active) return dev;
    if (d->count(&n) != RL_DEV_OK) return -1;
    for (int i = 0; i < n; i++)
        if (d->context_active(i, &active) == RL_DEV_OK && active) return i;
    return -1;
}

/* Device memory is freed on its device: the runtime makes a context on the thread's
 * current device for the call, and a thread that never chose one is on device 0. Pinned
 * memory is freed on pinned_dev (pinned_home where it was given back), not on the device
 * of whichever thread makes a kept free. An import is closed by mem_unimport in the
 * context that opened it (imports.c). */
static int free_on(const rl_device_ops *d, void *p, int kind, int pinned_dev) {
    int dev = kind == RL_DEV_MEM_DEVICE ? d->ptr_device(p) : kind == RL_DEV_MEM_PINNED ? pinned_dev : -1, saved = -1;
    int entered = dev >= 0 && d->device_enter(dev, &saved) == RL_DEV_OK;
    int rc = kind == RL_DEV_MEM_DEVICE ? d->mem_free(p) : kind == RL_DEV_MEM_PINNED ? d->host_free(p) : d->mem_unimport(p);
    if (entered) d->device_leave(saved);
    return rc;
}

/* free_on for ringlet's own frees: a failure is logged; 1 when freed. */
static int free_now(const rl_device_ops *d, void *p, int kind, int pinned_dev) {
    int rc = free_on(d, p, kind, pinned_dev);
    if (rc != RL_DEV_OK) RL_WARN(-1, "freeing device memory at %p: %s", p, rl_dev_error());
    return rc == RL_DEV_OK;
}

void rl_dev_note_stuck(rl_dev_stream_t s) {
    const rl_device_ops *d = rl_device();
    int dev = 0, saved = -1;
    if (!d || !s || gate_forked() || d->stream_device(s, &dev) != RL_DEV_OK) return;
    int entered = d->device_enter(dev, &saved) == RL_DEV_OK;
    rl_dev_event_t ev = NULL;
    int ok = d->event_create(&ev) == RL_DEV_OK && d->event_record(ev, s) == RL_DEV_OK;
    if (!ok) /* Frees stay possible: on a device that fails this, they would fail, not hang. */
        RL_WARN(-1, "noting work that did not finish: %s", rl_dev_error());
    if ((!ok || !rl_dev_note_stuck_event(ev, dev)) && ev) d->event_destroy(ev);
    if (entered) d->device_leave(saved);
}

int rl_dev_note_stuck_event(rl_dev_event_t ev, int dev) {
    const rl_device_ops *d = rl_device();
    if (!d || !ev || gate_forked()) return 0;
    stuck_t *x = malloc(sizeof *x);
    if (!x) return 0;
    x->ev = ev;
    x->dev = dev;
    pthread_mutex_lock(&g_gate_mu);
    x->next = g_stuck;
    g_stuck = x;
    g_nstuck++;
    pthread_mutex_unlock(&g_gate_mu);
    return 1;
}

/* How many notes of stuck work are not done: each is queried (never waited for) outside
 * the gate's lock, and one that is done is dropped. */
static size_t work_stuck(void) {
    pthread_mutex_lock(&g_gate_mu);
    stuck_t *list = g_stuck;
    g_stuck = NULL;
    size_t n = g_nstuck;
    pthread_mutex_unlock(&g_gate_mu);
    if (!list) return n; /* none, or another thread is looking at them (still counted) */
    const rl_device_ops *d = rl_device();
    stuck_t *left = NULL, *last = NULL;
    size_t done = 0;
    while (list) {
        stuck_t *next = list->next;
        int saved = -1, entered = d->device_enter(list->dev, &saved) == RL_DEV_OK;
        if (d->event_query(list->ev) == RL_DEV_NOT_READY) {
            list->next = left;
            if (!left) last = list;
            left = list;
        } else { /* done, or the device failed (then frees fail too: none hangs) */
            d->event_destroy(list->ev);
            free(list);
            done++;
        }
        if (entered) d->device_leave(saved);
        list = next;
    }
    pthread_mutex_lock(&g_gate_mu);
    if (left) last->next = g_stuck, g_stuck = left;
    g_nstuck -= done;
    n = g_nstuck;
    pthread_mutex_unlock(&g_gate_mu);
    return n;
}

int rl_dev_work_stuck(void) { return !gate_forked() && work_stuck() > 0; }

/* The deferred frees (the caller is the writer); none while noted work is stuck. */
static void flush_deferred(void) {
    if (work_stuck()) return;
    pthread_mutex_lock(&g_gate_mu);
    deferred_t *list = g_nstuck ? NULL : g_deferred; /* a note made meanwhile counts too */
    if (list) g_deferred = NULL;
    pthread_mutex_unlock(&g_gate_mu);
    const rl_device_ops *d = rl_device();
    while (list) {
        deferred_t *next = list->next;
        if (d) free_now(d, list->p, list->kind, list->dev);
        free(list);
        list = next;
    }
}

int rl_dev_quiet_begin(double timeout_s, const char *what) {
    if (gate_forked()) return rl_dev_fail("%s: " FORKED_MSG, what);
    if (t_quiet_depth++) return RL_DEV_OK;
    double until = rl_now() + timeout_s;
    pthread_mutex_lock(&g_gate_mu);
    g_writers_waiting++;
    while ((g_writer || g_readers || prune_holds()) && rl_now() < until) gate_wait();
    g_writers_waiting--;
    int ok = !g_writer && !g_readers && !prune_holds();
    if (ok) g_writer = 1;
    pthread_cond_broadcast(&g_gate_cv);
    size_t held = g_nholds;
    pthread_mutex_unlock(&g_gate_mu);
    if (!ok) {
        t_quiet_depth = 0;
        return rl_dev_fail("%s: streams of this process stayed held (%zu hold(s) not released) for %.0f s (the "
                           "operations holding them did not finish)",
                           what, held, timeout_s);
    }
    flush_deferred();
    return RL_DEV_OK;
}

int rl_dev_in_quiet(void) { return t_quiet_depth > 0; }

int rl_dev_quiet_try(void) {
    if (gate_forked()) return 0;
    if (t_quiet_depth) return ++t_quiet_depth, 1;
    pthread_mutex_lock(&g_gate_mu);
    int ok = !g_writer && !g_readers && !g_writers_waiting && !prune_holds();
    if (ok) g_writer = 1;
    pthread_mutex_unlock(&g_gate_mu);
    if (!ok) return 0;
    t_quiet_depth = 1;
    flush_deferred();
    return 1;
}

void rl_dev_quiet_end(void) {
    if (gate_forked() || t_quiet_depth == 0 || --t_quiet_depth) return;
    pthread_mutex_lock(&g_gate_mu);
    g_writer = 0;
    pthread_cond_broadcast(&g_gate_cv);
    pthread_mutex_unlock(&g_gate_mu);
}

int rl_dev_hold_begin(double timeout_s) {
    if (gate_forked()) return rl_dev_fail("holding a stream: " FORKED_MSG);
    double until = rl_now() + timeout_s;
    pthread_mutex_lock(&g_gate_mu);
    /* The writer itself may hold (its own quiet section is over by then, or it knows). */
    while (!t_quiet_depth && (g_writer || g_writers_waiting) && rl_now() < until) gate_wait();
    int ok = t_quiet_depth || (!g_writer && !g_writers_waiting);
    if (ok) g_readers++;
    pthread_mutex_unlock(&g_gate_mu);
    return ok ? RL_DEV_OK
              : rl_dev_fail("holding a stream: another thread's allocation or free waited %.0f s for this process's "
                            "held streams",
                            timeout_s);
}

void rl_dev_hold_end(void) {
    if (gate_forked()) return;
    pthread_mutex_lock(&g_gate_mu);
    if (g_readers > 0) g_readers--;
    pthread_cond_broadcast(&g_gate_cv);
    pthread_mutex_unlock(&g_gate_mu);
}

int rl_dev_free_user(void *p, int kind, double timeout_s, const char *what, int *kept) {
    const rl_device_ops *d = rl_device();
    *kept = 0;
    /* Looked at before the quiet section too: a free that is kept waits for nothing. */
    int stuck = !gate_forked() && work_stuck();
    if (!stuck && rl_dev_quiet_begin(timeout_s, what) != RL_DEV_OK) return RL_DEV_ERR;
    if (stuck || work_stuck()) {
        if (!stuck) rl_dev_quiet_end();
        int mine = kind == RL_DEV_MEM_DEVICE ? d->ptr_device(p) >= 0 : d->ptr_host_mapped(p);
        if (!mine)
            return rl_dev_fail("%s: %p is not %s memory", what, p, kind == RL_DEV_MEM_DEVICE ? "device" : "pinned host");
        *kept = !rl_dev_free_later(p, kind);
        return RL_DEV_OK;
    }
    /* (a thread that never chose a device, a collector's or a pool's, makes no context) */
    int rc = free_on(d, p, kind, kind == RL_DEV_MEM_PINNED ? pinned_home(d) : -1);
    rl_dev_quiet_end();
    return rc;
}

int rl_dev_free_later(void *p, int kind) {
    const rl_device_ops *d = rl_device();
    if (!p || !d || gate_forked()) return 0;
    int stuck = work_stuck() > 0;
    int dev = kind == RL_DEV_MEM_PINNED ? pinned_home(d) : -1;
    if (t_quiet_depth && !stuck) return free_now(d, p, kind, dev);
    pthread_mutex_lock(&g_gate_mu);
    int now = !g_nstuck && !t_quiet_depth && !g_writer && !g_readers && !g_writers_waiting && !prune_holds();
    if (now) g_writer = 1;
    deferred_t *x = now ? NULL : malloc(sizeof *x);
    if (x) *x = (deferred_t){p, kind, dev, g_deferred}, g_deferred = x;
    pthread_mutex_unlock(&g_gate_mu);
    if (!now) {
        /* Kept for later (out of memory for the note: the memory stays, a leak, never a
         * deadlock). */
        return 0;
    }
    t_quiet_depth = 1;
    int freed = free_now(d, p, kind, dev);
    flush_deferred();
    t_quiet_depth = 0;
    pthread_mutex_lock(&g_gate_mu);
    g_writer = 0;
    pthread_cond_broadcast(&g_gate_cv);
    pthread_mutex_unlock(&g_gate_mu);
    return freed;
}
