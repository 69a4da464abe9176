/* The reduction threads (reduce_pool.h).
 *
 * Each worker has a bell of its own: the caller writes the worker's range and the job,
 * then rings it (a sequentially consistent bump, so the worker that sees the new count
 * sees the job). A worker that finishes counts `left` down; the last one rings `done`.
 * The caller holds mu from posting to the last part done, and stop takes mu before it
 * sets quit: so a worker never finds quit set with a range still to run, and a caller
 * never posts to a worker that has left. */
#include "reduce_pool.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "comm.h"
#include "log.h"
#include "reduce.h"
#include "transport.h"
#include "util.h"

#define LINE 64
#define MAX_THREADS 64
#define AUTO_MAX 8

typedef struct {
    int divide; /* 0: dst = a op b, 1: dst /= divisor */
    char *dst;
    const char *a, *b;
    size_t es;
    ringlet_datatype_t dt;
    ringlet_op_t op;
    int divisor;
} job_t;

typedef struct worker {
    _Alignas(LINE) rl_bell bell; /* rung for each range posted to it, and at stop */
    size_t lo, hi;               /* its range of the job, elements */
    unsigned seen;               /* the bell's count when it last looked (its own) */
    pthread_t th;
    struct rl_reduce_pool *p;
} worker;

struct rl_reduce_pool {
    _Alignas(LINE) atomic_int left; /* workers' parts of the job not yet done */
    rl_bell done;
    pthread_mutex_t mu; /* held by the job's caller, and by stop */
    atomic_int quit;
    int rank, nthreads, nworkers, started;
    size_t min_bytes;
    double spin_s;
    job_t job;
    worker *w;
};

int rl_reduce_pool_env(int *threads, size_t *min_bytes, char *err) {
    long long v;
    const char *s = getenv("RINGLET_REDUCE_THREADS");
    *threads = 0;
    if (s && *s && strcmp(s, "auto") != 0) {
        if (rl_parse_int(s, 1, MAX_THREADS, &v) != 0)
            return snprintf(err, RL_MSG_MAX, "RINGLET_REDUCE_THREADS=%.64s is not auto or an integer in [1, %d]", s,
                            MAX_THREADS),
                   -1;
        *threads = (int)v;
    }
    *min_bytes = 64 << 10;
    s = getenv("RINGLET_REDUCE_MIN_BYTES");
    if (s && *s) {
        if (rl_parse_int(s, LINE, 1LL << 30, &v) != 0)
            return snprintf(err, RL_MSG_MAX, "RINGLET_REDUCE_MIN_BYTES=%.64s is not an integer in [%d, 1G]", s, LINE),
                   -1;
        *min_bytes = (size_t)v;
    }
    return 0;
}

size_t rl_reduce_pool_part_start(const void *dst, size_t es, size_t n, int k, int parts) {
    if (k <= 0 || parts < 1) return 0;
    if (k >= parts) return n;
    size_t b = n / (size_t)parts * (size_t)k + n % (size_t)parts * (size_t)k / (size_t)parts; /* k * n / parts */
    uintptr_t addr = (uintptr_t)dst;
    if (!es || LINE % es || addr % es) return b; /* no whole line of elements: as is */
    /* To the nearest line boundary of dst's memory (skew: dst's elements before dst in
     * its first line), so that no two threads write one cache line. */
    size_t line = LINE / es, skew = (size_t)(addr % LINE) / es;
    size_t x = (b + skew + line / 2) / line * line;
    x = x > skew ? x - skew : 0;
    return x > n ? n : x;
}

static void run_part(const job_t *j, size_t lo, size_t hi) {
    if (hi <= lo) return;
    size_t off = lo * j->es;
    if (j->divide) rl_divide_host(j->dst + off, hi - lo, j->dt, j->divisor);
    else rl_reduce_host(j->dst + off, j->a + off, j->b + off, hi - lo, j->dt, j->op);
}

/* Returns once ready(arg) holds: polls for spin_s, then sleeps on b, whose ringer makes
 * ready hold first (a second at a time: no ring is lost, the limit only bounds a sleep
 * should one be). */
static void wait_until(rl_bell *b, double spin_s, int (*ready)(void *), void *arg) {
    double until = 0;
    for (unsigned n = 0;; n++) {
        unsigned g = atomic_load(&b->gen);
        if (ready(arg)) return;
        if (spin_s > 0) {
            if (n % 64 == 0) {
                double now = rl_now();
                if (until == 0) until = now + spin_s;
                else if (now > until) spin_s = 0;
            }
            rl_cpu_relax();
            continue;
        }
        rl_bell_wait(b, g, 1000, NULL, NULL);
    }
}

static int worker_ready(void *arg) {
    worker *w = arg;
    return atomic_load(&w->bell.gen) != w->seen || atomic_load(&w->p->quit);
}

static int parts_done(void *arg) { return atomic_load(&((struct rl_reduce_pool *)arg)->left) == 0; }

static void *worker_main(void *arg) {
    worker *w = arg;
    struct rl_reduce_pool *p = w->p;
    pthread_setname_np(pthread_self(), "ringlet-reduce"); /* tests count them by name */
    for (;;) {
        wait_until(&w->bell, p->spin_s, worker_ready, w);
        /* quit is set only when no range is posted (see the top): a ring seen with it is
         * stop's. */
        if (atomic_load(&p->quit)) break;
        w->seen = atomic_load(&w->bell.gen);
        run_part(&p->job, w->lo, w->hi);
        if (atomic_fetch_sub(&p->left, 1) == 1) rl_bell_ring(&p->done);
    }
    return NULL;
}

long rl_reduce_cores_for_rank(long online, long allowed, int local_size) {
    long local = local_size > 0 ? local_size : 1, share = (online > 0 ? online : 1) / local;
    long mine = allowed > 0 && allowed < share ? allowed : share;
    return mine < 1 ? 1 : mine;
}

/* The CPUs this thread may run on (its affinity), 0 if unknown. */
static long cpus_allowed(void) {
    cpu_set_t set;
    return sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : 0;
}

struct rl_reduce_pool *rl_reduce_pool_new(int rank, int threads, int local_size, size_t min_bytes, double spin_s) {
    long online = sysconf(_SC_NPROCESSORS_ONLN), allowed = cpus_allowed();
    long cores = rl_reduce_cores_for_rank(online, allowed, local_size);
    int local = local_size > 0 ? local_size : 1;
    int n = threads;
    if (n <= 0) {
        /* The cores this rank may take, less the pipe's own thread and the transports'. */
        long t = cores - 2;
        n = t < 1 ? 1 : t > AUTO_MAX ? AUTO_MAX : (int)t;
    }
    RL_INFO(rank, "reduction threads: %d%s (%ld cores for this rank: %ld online, %ld allowed, %d ranks on this host), "
            "split from %zu bytes per thread", n, threads > 0 ? " (RINGLET_REDUCE_THREADS)" : " (auto)", cores, online,
            allowed, local, min_bytes);
    if (n <= 1) return NULL;
    struct rl_reduce_pool *p = NULL;
    if (posix_memalign((void **)&p, LINE, sizeof *p) != 0) return NULL;
    memset(p, 0, sizeof *p);
    if (posix_memalign((void **)&p->w, LINE, sizeof(worker) * (size_t)(n - 1)) != 0) {
        free(p);
        return NULL;
    }
    memset(p->w, 0, sizeof(worker) * (size_t)(n - 1));
    pthread_mutex_init(&p->mu, NULL);
    p->rank = rank;
    p->nthreads = n;
    p->min_bytes = min_bytes;
    /* Polling only when every thread of this rank has a core of its own (of the rank's
     * cores above: ranks that share one CPU set wider than a rank's share of the host
     * each count the whole set, which they cannot tell from a set of their own). */
    p->spin_s = (long)n + 2 <= cores ? spin_s : 0;
    return p;
}

/* mu held: the workers, at the first job (none again after a stop or a failure). */
static void start_workers(struct rl_reduce_pool *p) {
    p->started = 1;
    for (int i = 0; i < p->nthreads - 1; i++) {
        p->w[i].p = p;
        p->w[i].seen = atomic_load(&p->w[i].bell.gen);
        if (pthread_create(&p->w[i].th, NULL, worker_main, &p->w[i]) != 0) {
            RL_WARN(p->rank, "reduction threads: only %d of %d started; the rest of the work stays on the caller", i,
                    p->nthreads - 1);
            break;
        }
        /* Named here as well as by the thread itself: the name is then there once this
         * returns, not whenever the new thread first runs (tests count them by name). */
        pthread_setname_np(p->w[i].th, "ringlet-reduce");
        p->nworkers = i + 1;
    }
    RL_INFO(p->rank, "reduction threads: %d workers started (with the caller's thread, %d reduce)", p->nworkers,
            p->nworkers + 1);
}

void rl_reduce_pool_stop(struct rl_reduce_pool *p) {
    if (!p) return;
    pthread_mutex_lock(&p->mu); /* after the job under way */
    atomic_store(&p->quit, 1);
    for (int i = 0; i < p->nworkers; i++) rl_bell_ring(&p->w[i].bell);
    for (int i = 0; i < p->nworkers; i++) pthread_join(p->w[i].th, NULL);
    p->nworkers = 0;
    pthread_mutex_unlock(&p->mu);
}

void rl_reduce_pool_free(struct rl_reduce_pool *p) {
    if (!p) return;
    rl_reduce_pool_stop(p);
    pthread_mutex_destroy(&p->mu);
    free(p->w);
    free(p);
}

int rl_reduce_pool_running(struct rl_reduce_pool *p) {
    if (!p) return 0;
    pthread_mutex_lock(&p->mu);
    int n = p->nworkers;
    pthread_mutex_unlock(&p->mu);
    return n;
}

/* Runs j over n elements on the pool: 1, or 0 when the caller must run it alone (too
 * small, busy, stopped, no threads). */
static int run_job(struct rl_reduce_pool *p, const job_t *j, size_t n) {
    if (!p || j->es == 0 || n * j->es / p->min_bytes < 2) return 0;
    if (pthread_mutex_trylock(&p->mu) != 0) return 0;
    if (!p->started && !atomic_load(&p->quit)) start_workers(p);
    int parts = p->nworkers + 1;
    size_t most = n * j->es / p->min_bytes;
    if (most < (size_t)parts) parts = (int)most;
    if (atomic_load(&p->quit) || parts < 2) {
        pthread_mutex_unlock(&p->mu);
        return 0;
    }
    p->job = *j;
    atomic_store(&p->left, parts - 1);
    for (int k = 0; k < parts - 1; k++) {
        worker *w = &p->w[k];
        w->lo = rl_reduce_pool_part_start(j->dst, j->es, n, k, parts);
        w->hi = rl_reduce_pool_part_start(j->dst, j->es, n, k + 1, parts);
        rl_bell_ring(&w->bell);
    }
    run_part(j, rl_reduce_pool_part_start(j->dst, j->es, n, parts - 1, parts), n);
    /* Bounded by the workers' ranges: memory work that cannot block. */
    wait_until(&p->done, p->spin_s, parts_done, p);
    pthread_mutex_unlock(&p->mu);
    return 1;
}

void rl_pool_reduce(struct rl_reduce_pool *p, void *dst, const void *a, const void *b, size_t n,
                    ringlet_datatype_t dt, ringlet_op_t op) {
    job_t j = {0, dst, a, b, ringlet_datatype_size(dt), dt, op, 0};
    if (!run_job(p, &j, n)) rl_reduce_host(dst, a, b, n, dt, op);
}

void rl_pool_divide(struct rl_reduce_pool *p, void *buf, size_t n, ringlet_datatype_t dt, int divisor) {
    job_t j = {1, buf, NULL, NULL, ringlet_datatype_size(dt), dt, RINGLET_SUM, divisor};
    if (divisor < 2 || !run_job(p, &j, n)) rl_divide_host(buf, n, dt, divisor);
}
