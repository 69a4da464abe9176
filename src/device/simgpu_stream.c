/* The simulated GPU's streams, events, kernels and flags (simgpu.h), and its ops table.
 *
 * A stream is a thread and a FIFO of operations. Arguments are checked and translated
 * to the engine's addresses when an operation is enqueued: a copy that runs past an
 * allocation fails at once (as cudaMemcpyAsync does); a kernel or flag operation on
 * memory the device cannot reach becomes a fault that sets the sticky error when it
 * runs (as an illegal address does on a GPU). */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "convert.h"
#include "reduce.h"
#include "simgpu.h"
#include "util.h"

/* ---- the sticky error ---- */

static atomic_int g_sticky;
static char g_sticky_msg[256];
static pthread_mutex_t g_sticky_mu = PTHREAD_MUTEX_INITIALIZER;

void sim_set_sticky(const char *fmt, ...) {
    pthread_mutex_lock(&g_sticky_mu);
    if (!atomic_load(&g_sticky)) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(g_sticky_msg, sizeof g_sticky_msg, fmt, ap);
        va_end(ap);
        atomic_store(&g_sticky, 1);
    }
    pthread_mutex_unlock(&g_sticky_mu);
}

int sim_sticky(void) { return atomic_load(&g_sticky); }

int sim_sticky_check(void) {
    if (!atomic_load(&g_sticky)) return RL_DEV_OK;
    pthread_mutex_lock(&g_sticky_mu);
    rl_dev_fail("%s (a sticky error: the simulated device is unusable)", g_sticky_msg);
    pthread_mutex_unlock(&g_sticky_mu);
    return RL_DEV_ERR;
}

/* ---- events ---- */

struct rl_dev_event_s {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    uint64_t recorded, done; /* records made, and the last one reached */
    atomic_int refs;         /* the handle + operations that still name it */
};

static void event_unref(rl_dev_event_t e) {
    if (atomic_fetch_sub(&e->refs, 1) != 1) return;
    pthread_mutex_destroy(&e->mu);
    pthread_cond_destroy(&e->cv);
    free(e);
}

/* ---- operations and streams ---- */

enum { OP_COPY, OP_MEMSET, OP_REDUCE, OP_REDUCE_MANY, OP_SCALE, OP_CONVERT, OP_DIVIDE, OP_RECORD, OP_WAIT_EVENT, OP_WAIT_FLAG, OP_WRITE_FLAG,
       OP_FAULT };

#define SIM_MAX_SOURCES 64

typedef struct op {
    int kind;
    void *dst;
    const void *a, *b;
    void *owned; /* a copy from pageable memory: the bytes as they were at the call */
    const void *srcs[SIM_MAX_SOURCES]; /* reduce_many: engine addresses */
    unsigned char scalar[8];           /* scale: the scalar, taken at the call */
    int nsrc;
    size_t n; /* bytes (copy, memset) or elements (kernels) */
    int value, divisor;
    ringlet_datatype_t dt, st; /* st: convert's source type */
    double fscale;             /* convert */
    ringlet_op_t rop;
    rl_dev_event_t ev;
    uint64_t gen;  /* record / wait: the event's generation; flags: the value */
    char msg[200]; /* fault */
    struct op *next;
} op_t;

struct rl_dev_stream_s {
    pthread_mutex_t mu;
    pthread_cond_t cv;      /* work arrived, or quit */
    pthread_cond_t idle_cv; /* the queue emptied */
    op_t *head, *tail;
    int busy, quit;
    pthread_t thread;
    uint64_t rng;
    int users; /* sim_sync_all calls waiting on it (g_streams_mu) */
    struct rl_dev_stream_s *next_all;
};

static pthread_mutex_t g_streams_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_streams_cv = PTHREAD_COND_INITIALIZER; /* a stream's users dropped */
static rl_dev_stream_t g_streams;
static long g_jitter_us = -1;

static unsigned long long rng_next(uint64_t *s) {
    *s ^= *s << 13, *s ^= *s >> 7, *s ^= *s << 17;
    return *s;
}

static void sleep_us(long us) {
    struct timespec ts = {us / 1000000, (us % 1000000) * 1000};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

/* Waits until the 8-byte word at p (engine address) reaches value; gives up on the
 * sticky error. A host thread or another process sets it: poll, backing off. */
static void wait_flag(const uint64_t *p, uint64_t value) {
    long us = 1;
    for (unsigned n = 0; __atomic_load_n(p, __ATOMIC_ACQUIRE) < value; n++) {
        if (sim_sticky()) return;
        if (n < 64) {
            sched_yield();
            continue;
        }
        sleep_us(us);
        if (us < 200) us *= 2;
    }
}

static void run_op(op_t *o) {
    switch (o->kind) {
    case OP_COPY: memmove(o->dst, o->a, o->n); break;
    case OP_MEMSET: memset(o->dst, o->value, o->n); break;
    case OP_REDUCE: rl_reduce_host(o->dst, o->a, o->b, o->n, o->dt, o->rop); break;
    case OP_REDUCE_MANY: rl_reduce_host_many(o->dst, o->srcs, o->nsrc, o->n, o->dt, o->rop); break;
    case OP_SCALE: rl_scale_host(o->dst, o->a, o->n, o->dt, o->scalar); break;
    case OP_CONVERT: rl_convert_host(o->dst, o->dt, o->a, o->st, o->n, o->fscale); break;
    case OP_DIVIDE: rl_divide_host(o->dst, o->n, o->dt, o->divisor); break;
    case OP_WAIT_FLAG: wait_flag(o->a, o->gen); break;
    case OP_WRITE_FLAG: __atomic_store_n((uint64_t *)o->dst, o->gen, __ATOMIC_RELEASE); break;
    case OP_FAULT: sim_set_sticky("%s", o->msg); break;
    case OP_WAIT_EVENT:
        pthread_mutex_lock(&o->ev->mu);
        while (o->ev->done < o->gen && !sim_sticky()) {
            /* a timed wait, so that a sticky error set elsewhere ends it */
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            ts.tv_nsec += 10 * 1000 * 1000;
            if (ts.tv_nsec >= 1000000000L) ts.tv_sec++, ts.tv_nsec -= 1000000000L;
            pthread_cond_timedwait(&o->ev->cv, &o->ev->mu, &ts);
        }
        pthread_mutex_unlock(&o->ev->mu);
        break;
    default: break;
    }
}

/* A record always completes, even after a sticky error: a host waiting on the event
 * must see it (and then the error), never hang. */
static void complete_record(op_t *o) {
    pthread_mutex_lock(&o->ev->mu);
    if (o->gen > o->ev->done) o->ev->done = o->gen;
    pthread_cond_broadcast(&o->ev->cv);
    pthread_mutex_unlock(&o->ev->mu);
}

static void *stream_main(void *arg) {
    rl_dev_stream_t s = arg;
    for (;;) {
        pthread_mutex_lock(&s->mu);
        while (!s->head && !s->quit) pthread_cond_wait(&s->cv, &s->mu);
        op_t *o = s->head;
        if (!o) {
            pthread_mutex_unlock(&s->mu);
            break;
        }
        s->head = o->next;
        if (!s->head) s->tail = NULL;
        s->busy = 1;
        long jitter = g_jitter_us;
        uint64_t r = jitter > 0 ? rng_next(&s->rng) : 0;
        pthread_mutex_unlock(&s->mu);

        if (jitter > 0) sleep_us((long)(r % (uint64_t)(jitter + 1)));
        if (o->kind == OP_RECORD) complete_record(o);
        else if (!sim_sticky()) run_op(o); /* after a sticky error, queued work is dropped */
        if (o->ev) event_unref(o->ev);
        free(o->owned);
        free(o);

        pthread_mutex_lock(&s->mu);
        s->busy = 0;
        if (!s->head) pthread_cond_broadcast(&s->idle_cv);
        pthread_mutex_unlock(&s->mu);
    }
    return NULL;
}

static void read_jitter(void) {
    if (g_jitter_us < 0) g_jitter_us = (long)rl_env_int("RINGLET_SIM_JITTER", 0, 0, 1000000);
}

static int stream_create(rl_dev_stream_t *out) {
    *out = NULL;
    if (sim_sticky_check()) return RL_DEV_ERR;
    rl_dev_stream_t s = calloc(1, sizeof *s);
    if (!s) return rl_dev_fail("stream_create: out of memory");
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    pthread_cond_init(&s->idle_cv, NULL);
    s->rng = (uint64_t)(uintptr_t)s ^ (uint64_t)(rl_now() * 1e9) ^ 0x9E3779B97F4A7C15ull;
    if (!s->rng) s->rng = 1;
    pthread_mutex_lock(&g_streams_mu);
    read_jitter();
    pthread_mutex_unlock(&g_streams_mu);
    if (pthread_create(&s->thread, NULL, stream_main, s) != 0) {
        free(s);
        return rl_dev_fail("stream_create: cannot start a thread");
    }
    pthread_mutex_lock(&g_streams_mu);
    s->next_all = g_streams;
    g_streams = s;
    pthread_mutex_unlock(&g_streams_mu);
    *out = s;
    return RL_DEV_OK;
}

/* NULL: the process's default stream, made on first use. */
static rl_dev_stream_t g_default;
static pthread_once_t g_default_once = PTHREAD_ONCE_INIT;
static void make_default(void) {
    if (stream_create(&g_default) != RL_DEV_OK) g_default = NULL;
}
static rl_dev_stream_t resolve(rl_dev_stream_t s) {
    /* (rl_dev_stream_t)1 is RINGLET_STREAM_DEFAULT: the default stream, as CUDA's legacy one. */
    if (s && s != (rl_dev_stream_t)1) return s;
    pthread_once(&g_default_once, make_default);
    return g_default;
}

static void wait_idle(rl_dev_stream_t s) {
    pthread_mutex_lock(&s->mu);
    while (s->head || s->busy) pthread_cond_wait(&s->idle_cv, &s->mu);
    pthread_mutex_unlock(&s->mu);
}

void sim_sync_all(void) {
    /* The streams as they are now, each kept alive (users) while this waits on it without
     * the list's lock: a stream may wait for a flag that a thread needing that lock sets. */
    pthread_mutex_lock(&g_streams_mu);
    size_t n = 0;
    for (rl_dev_stream_t s = g_streams; s; s = s->next_all) n++;
    rl_dev_stream_t *list = malloc((n ? n : 1) * sizeof *list);
    n = 0;
    for (rl_dev_stream_t s = g_streams; s && list; s = s->next_all) {
        s->users++;
        list[n++] = s;
    }
    pthread_mutex_unlock(&g_streams_mu);
    for (size_t i = 0; i < n; i++) wait_idle(list[i]);
    pthread_mutex_lock(&g_streams_mu);
    for (size_t i = 0; i < n; i++) list[i]->users--;
    pthread_cond_broadcast(&g_streams_cv);
    pthread_mutex_unlock(&g_streams_mu);
    free(list);
}

static int stream_sync(rl_dev_stream_t s) {
    s = resolve(s);
    if (!s) return rl_dev_fail("stream_sync: no default stream");
    wait_idle(s);
    return sim_sticky_check();
}

static int stream_destroy(rl_dev_stream_t s) {
    if (!s) return RL_DEV_OK;
    wait_idle(s);
    pthread_mutex_lock(&g_streams_mu);
    for (rl_dev_stream_t *p = &g_streams; *p; p = &(*p)->next_all)
        if (*p == s) {
            *p = s->next_all;
            break;
        }
    while (s->users) pthread_cond_wait(&g_streams_cv, &g_streams_mu);
    pthread_mutex_unlock(&g_streams_mu);
    pthread_mutex_lock(&s->mu);
    s->quit = 1;
    pthread_cond_signal(&s->cv);
    pthread_mutex_unlock(&s->mu);
    pthread_join(s->thread, NULL);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cv);
    pthread_cond_destroy(&s->idle_cv);
    free(s);
    return RL_DEV_OK;
}

static op_t *new_op(int kind) {
    op_t *o = calloc(1, sizeof *o);
    if (o) o->kind = kind;
    return o;
}

static int enqueue(rl_dev_stream_t s, op_t *o, const char *what) {
    if (!o) return rl_dev_fail("%s: out of memory", what);
    s = resolve(s);
    if (!s) {
        if (o->ev) event_unref(o->ev);
        free(o);
        return rl_dev_fail("%s: no default stream", what);
    }
    pthread_mutex_lock(&s->mu);
    if (s->tail) s->tail->next = o;
    else s->head = o;
    s->tail = o;
    pthread_cond_signal(&s->cv);
    pthread_mutex_unlock(&s->mu);
    return RL_DEV_OK;
}

/* ---- copies ---- */

static int event_create(rl_dev_event_t *out);
static int event_destroy(rl_dev_event_t e);
static int event_record(rl_dev_event_t e, rl_dev_stream_t s);

/* Blocks until the stream has run everything enqueued so far (a private event). */
static int wait_reached(rl_dev_stream_t s, const char *what) {
    rl_dev_event_t e;
    if (event_create(&e) != RL_DEV_OK || event_record(e, s) != RL_DEV_OK) return rl_dev_fail("%s: out of memory", what);
    pthread_mutex_lock(&e->mu);
    while (e->done < e->recorded) pthread_cond_wait(&e->cv, &e->mu);
    pthread_mutex_unlock(&e->mu);
    event_destroy(e);
    return sim_sticky_check();
}

/* Pageable host memory behaves as CUDA's does: a copy from it takes the bytes at the
 * call (staged), and a copy into it returns only once it is done, so the call blocks
 * until the stream gets there. Pinned and device memory are asynchronous both ways. */
static int memcpy_async(void *dst, const void *src, size_t bytes, rl_dev_stream_t s) {
    if (sim_sticky_check()) return RL_DEV_ERR;
    if (!bytes) return RL_DEV_OK;
    if (!dst || !src) return rl_dev_fail("memcpy_async: invalid argument: a NULL pointer with %zu bytes", bytes);
    char why[160];
    void *d, *a;
    int kd = sim_translate(dst, bytes, &d, why, sizeof why);
    if (kd == SIM_MEM_BAD) return rl_dev_fail("memcpy_async: invalid argument: destination: %s", why);
    int ks = sim_translate(src, bytes, &a, why, sizeof why);
    if (ks == SIM_MEM_BAD) return rl_dev_fail("memcpy_async: invalid argument: source: %s", why);
    op_t *o = new_op(OP_COPY);
    if (o && ks == SIM_MEM_PAGEABLE) {
        o->owned = malloc(bytes);
        if (!o->owned) {
            free(o);
            return rl_dev_fail("memcpy_async: out of memory staging %zu pageable bytes", bytes);
        }
        memcpy(o->owned, src, bytes);
        a = o->owned;
    }
    if (o) o->dst = d, o->a = a, o->n = bytes;
    int rc = enqueue(s, o, "memcpy_async");
    if (rc == RL_DEV_OK && kd == SIM_MEM_PAGEABLE) rc = wait_reached(resolve(s), "memcpy_async");
    return rc;
}

static int memset_async(void *dst, int value, size_t bytes, rl_dev_stream_t s) {
    if (sim_sticky_check()) return RL_DEV_ERR;
    if (!bytes) return RL_DEV_OK;
    char why[160];
    void *d;
    if (!dst) return rl_dev_fail("memset_async: invalid argument: NULL with %zu bytes", bytes);
    if (sim_translate(dst, bytes, &d, why, sizeof why) == SIM_MEM_BAD)
        return rl_dev_fail("memset_async: invalid argument: %s", why);
    op_t *o = new_op(OP_MEMSET);
    if (o) o->dst = d, o->value = value, o->n = bytes;
    return enqueue(s, o, "memset_async");
}

/* ---- kernels and flags: operands the device cannot reach fault when they run ---- */

/* The engine address of a kernel operand, or 0 with the fault's text in msg. */
static int operand(const char *kernel, const char *name, const void *p, size_t bytes, size_t align, void **eng,
                   char *msg, size_t len) {
    char why[160];
    int k = sim_translate(p, bytes, eng, why, sizeof why);
    if (k == SIM_MEM_PAGEABLE || !p) {
        snprintf(msg, len, "an illegal memory access was encountered: %s operand %s at %p is host memory not allocated "
                           "with host_alloc", kernel, name, p);
        return 0;
    }
    if (k == SIM_MEM_BAD) {
        snprintf(msg, len, "an illegal memory access was encountered: %s operand %s: %.120s", kernel, name, why);
        return 0;
    }
    if ((uintptr_t)p % align) {
        snprintf(msg, len, "misaligned address: %s operand %s at %p is not aligned to %zu bytes", kernel, name, p, align);
        return 0;
    }
    return 1;
}

static int reduce(void *dst, const void *a, const void *b, size_t n, ringlet_datatype_t dt, ringlet_op_t op,
                  rl_dev_stream_t s) {
    if (sim_sticky_check()) return RL_DEV_ERR;
    size_t es = ringlet_datatype_size(dt);
    if (!es || (unsigned)op >= RINGLET_NUM_OPS) return rl_dev_fail("reduce: invalid argument: dtype %d, op %d", dt, op);
    if (!n) return RL_DEV_OK;
    op_t *o = new_op(OP_REDUCE);
    if (!o) return rl_dev_fail("reduce: out of memory");
    void *d, *x, *y;
    if (operand("reduce", "dst", dst, n * es, es, &d, o->msg, sizeof o->msg) &&
        operand("reduce", "a", a, n * es, es, &x, o->msg, sizeof o->msg) &&
        operand("reduce", "b", b, n * es, es, &y, o->msg, sizeof o->msg)) {
        o->dst = d, o->a = x, o->b = y, o->n = n, o->dt = dt, o->rop = op;
    } else {
        o->kind = OP_FAULT;
    }
    return enqueue(s, o, "reduce");
}

static int reduce_many(void *dst, const void *const *srcs, int nsrc, size_t n, ringlet_datatype_t dt, ringlet_op_t op,
                       rl_dev_stream_t s) {
    if (sim_sticky_check()) return RL_DEV_ERR;
    size_t es = ringlet_datatype_size(dt);
    if (!es || (unsigned)op >= RINGLET_NUM_OPS || nsrc < 1 || nsrc > SIM_MAX_SOURCES)
        return rl_dev_fail("reduce_many: invalid argument: dtype %d, op %d, %d sources", dt, op, nsrc);
    if (!n) return RL_DEV_OK;
    op_t *o = new_op(OP_REDUCE_MANY);
    if (!o) return rl_dev_fail("reduce_many: out of memory");
    void *d;
    int ok = operand("reduce_many", "dst", dst, n * es, es, &d, o->msg, sizeof o->msg);
    for (int k = 0; k < nsrc && ok; k++) {
        void *e;
        ok = operand("reduce_many", "source", srcs[k], n * es, es, &e, o->msg, sizeof o->msg);
        o->srcs[k] = e;
    }
    if (ok) o->dst = d, o->nsrc = nsrc, o->n = n, o->dt = dt, o->rop = op;
    else o->kind = OP_FAULT;
    return enqueue(s, o, "reduce_many");
}

static int scale(void *dst, const void *src, size_t n, ringlet_datatype_t dt, const void *scalar, rl_dev_stream_t s) {
    if (sim_sticky_check()) return RL_DEV_ERR;
    size_t es = ringlet_datatype_size(dt);
    if (!es || !scalar) return rl_dev_fail("scale: invalid argument: dtype %d", dt);
    if (!n) return RL_DEV_OK;
    op_t *o = new_op(OP_SCALE);
    if (!o) return rl_dev_fail("scale: out of memory");
    void *d, *x;
    if (operand("scale", "dst", dst, n * es, es, &d, o->msg, sizeof o->msg) &&
        operand("scale", "src", src, n * es, es, &x, o->msg, sizeof o->msg)) {
        o->dst = d, o->a = x, o->n = n, o->dt = dt;
        memcpy(o->scalar, scalar, es);
    } else {
        o->kind = OP_FAULT;
    }
    return enqueue(s, o, "scale");
}

static int convert(void *dst, ringlet_datatype_t dt, const void *src, ringlet_datatype_t st, size_t n, double scale,
                   rl_dev_stream_t s) {
    if (sim_sticky_check()) return RL_DEV_ERR;
    if (!rl_convert_supported(dt) || !rl_convert_supported(st))
        return rl_dev_fail("convert: invalid argument: dtypes %d and %d (floating types only)", dt, st);
    if (!n) return RL_DEV_OK;
    size_t ed = ringlet_datatype_size(dt), es = ringlet_datatype_size(st);
    op_t *o = new_op(OP_CONVERT);
    if (!o) return rl_dev_fail("convert: out of memory");
    void *d, *x;
    if (operand("convert", "dst", dst, n * ed, ed, &d, o->msg, sizeof o->msg) &&
        operand("convert", "src", src, n * es, es, &x, o->msg, sizeof o->msg))
        o->dst = d, o->a = x, o->n = n, o->dt = dt, o->st = st, o->fscale = scale;
    else
        o->kind = OP_FAULT;
    return enqueue(s, o, "convert");
}

static int divide(void *buf, size_t n, ringlet_datatype_t dt, int divisor, rl_dev_stream_t s) {
    if (sim_sticky_check()) return RL_DEV_ERR;
    size_t es = ringlet_datatype_size(dt);
    if (!es) return rl_dev_fail("divide: invalid argument: dtype %d", dt);
    if (!n || divisor < 2) return RL_DEV_OK;
    op_t *o = new_op(OP_DIVIDE);
    if (!o) return rl_dev_fail("divide: out of memory");
    void *d;
    if (operand("divide", "buf", buf, n * es, es, &d, o->msg, sizeof o->msg))
        o->dst = d, o->n = n, o->dt = dt, o->divisor = divisor;
    else
        o->kind = OP_FAULT;
    return enqueue(s, o, "divide");
}

static int flag_op(int kind, volatile uint64_t *flag, uint64_t value, rl_dev_stream_t s) {
    if (sim_sticky_check()) return RL_DEV_ERR;
    const char *name = kind == OP_WAIT_FLAG ? "wait_flag" : "write_flag";
    op_t *o = new_op(kind);
    if (!o) return rl_dev_fail("%s: out of memory", name);
    void *f;
    if (operand(name, "flag", (const void *)flag, 8, 8, &f, o->msg, sizeof o->msg)) {
        o->a = o->dst = f;
        o->gen = value;
    } else {
        o->kind = OP_FAULT;
    }
    return enqueue(s, o, name);
}

static int wait_flag_op(volatile uint64_t *flag, uint64_t value, rl_dev_stream_t s) {
    return flag_op(OP_WAIT_FLAG, flag, value, s);
}
static int write_flag_op(volatile uint64_t *flag, uint64_t value, rl_dev_stream_t s) {
    return flag_op(OP_WRITE_FLAG, flag, value, s);
}

/* ---- events ---- */

static int event_create(rl_dev_event_t *out) {
    *out = NULL;
    if (sim_sticky_check()) return RL_DEV_ERR;
    rl_dev_event_t e = calloc(1, sizeof *e);
    if (!e) return rl_dev_fail("event_create: out of memory");
    pthread_mutex_init(&e->mu, NULL);
    pthread_cond_init(&e->cv, NULL);
    atomic_init(&e->refs, 1);
    *out = e;
    return RL_DEV_OK;
}

static int event_destroy(rl_dev_event_t e) {
    if (e) event_unref(e); /* operations that still name it keep it until they ran */
    return RL_DEV_OK;
}

/* An operation that names e, with a reference, at generation gen. */
static op_t *event_op(int kind, rl_dev_event_t e, uint64_t gen) {
    op_t *o = new_op(kind);
    if (!o) return NULL;
    atomic_fetch_add(&e->refs, 1);
    o->ev = e;
    o->gen = gen;
    return o;
}

static int event_record(rl_dev_event_t e, rl_dev_stream_t s) {
    if (sim_sticky_check()) return RL_DEV_ERR;
    if (!e) return rl_dev_fail("event_record: invalid event");
    pthread_mutex_lock(&e->mu);
    uint64_t gen = ++e->recorded;
    pthread_mutex_unlock(&e->mu);
    return enqueue(s, event_op(OP_RECORD, e, gen), "event_record");
}

static int event_query(rl_dev_event_t e) {
    if (sim_sticky_check()) return RL_DEV_ERR;
    if (!e) return rl_dev_fail("event_query: invalid event");
    pthread_mutex_lock(&e->mu);
    int done = e->done >= e->recorded;
    pthread_mutex_unlock(&e->mu);
    if (done && sim_sticky_check()) return RL_DEV_ERR; /* the work it marks may have faulted */
    return done ? RL_DEV_OK : RL_DEV_NOT_READY;
}

static int stream_wait_event(rl_dev_stream_t s, rl_dev_event_t e) {
    if (sim_sticky_check()) return RL_DEV_ERR;
    if (!e) return rl_dev_fail("stream_wait_event: invalid event");
    pthread_mutex_lock(&e->mu);
    uint64_t gen = e->recorded;
    pthread_mutex_unlock(&e->mu);
    if (gen == 0) return RL_DEV_OK; /* never recorded: nothing to wait for */
    return enqueue(s, event_op(OP_WAIT_EVENT, e, gen), "stream_wait_event");
}

const rl_device_ops rl_device_sim = {
    .name = "sim",
    .count = sim_count,
    .set_device = sim_set_device,
    .get_device = sim_get_device,
    .ptr_device = sim_ptr_device,
    .mem_alloc = sim_mem_alloc,
    .mem_free = sim_mem_free,
    .host_alloc = sim_host_alloc,
    .host_free = sim_host_free,
    .mem_export = sim_mem_export,
    .mem_import = sim_mem_import,
    .mem_unimport = sim_mem_unimport,
    .stream_create = stream_create,
    .stream_destroy = stream_destroy,
    .stream_sync = stream_sync,
    .event_create = event_create,
    .event_destroy = event_destroy,
    .event_record = event_record,
    .event_query = event_query,
    .stream_wait_event = stream_wait_event,
    .memcpy_async = memcpy_async,
    .memset_async = memset_async,
    .reduce = reduce,
    .divide = divide,
    .scale = scale,
    .convert = convert,
    .reduce_many = reduce_many,
    .wait_flag = wait_flag_op,
    .write_flag = write_flag_op,
};
