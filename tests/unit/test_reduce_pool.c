/* Unit test for src/comm/reduce_pool.c (RINGLET_REDUCE_THREADS):
 *   - the split: every part starts on a cache line of dst (when dst is aligned to its
 *     element), parts are in order, cover [0, n) and are near n / parts each;
 *   - reductions and divisions on pools of 2, 3, 5 and 8 threads, every dtype x op, odd
 *     sizes, misaligned dst, in place (dst = a), a = b: the same bytes as the
 *     single-threaded kernels (floats include -0, subnormals and infinities; NaNs only
 *     compared as NaN, their payload being unspecified);
 *   - threads: none before the first split, named "ringlet-reduce", joined by stop,
 *     after which reductions still run (on the caller); two callers at once (one falls
 *     back); a stop while another thread reduces; a NULL pool;
 *   - RINGLET_REDUCE_THREADS / RINGLET_REDUCE_MIN_BYTES parsing, bad values refused.
 * Exit status 0 on success, 1 on a failure (each printed).
 */
#include "reduce_pool.h"

#include <dirent.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "comm.h"
#include "reduce.h"

static int failures;
static long checks;
static uint64_t rng;

#define CHECK(cond, ...)                                                                                               \
    do {                                                                                                               \
        checks++;                                                                                                      \
        if (!(cond) && failures++ < 30) printf("FAIL " __VA_ARGS__), printf("\n");                                     \
    } while (0)

static uint64_t next(void) {
    uint64_t z = (rng += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static const ringlet_datatype_t kTypes[] = {RINGLET_INT8,  RINGLET_UINT8,   RINGLET_INT32,    RINGLET_UINT32,
                                            RINGLET_INT64, RINGLET_UINT64,  RINGLET_FLOAT16, RINGLET_BFLOAT16,
                                            RINGLET_FLOAT32, RINGLET_FLOAT64};
#define NTYPES (sizeof kTypes / sizeof kTypes[0])

/* Element i of a random buffer: any bits for integers; for floats values in about
 * [-4, 4) with some -0, subnormals and infinities (no NaN inputs). */
static void fill(void *buf, size_t n, ringlet_datatype_t dt) {
    for (size_t i = 0; i < n; i++) {
        uint64_t r = next();
        double v = ((double)(r >> 11) / 9007199254740992.0 - 0.5) * 8;
        int special = (int)(r & 63);
        if (special == 0) v = -0.0;
        else if (special == 1) v = (r & 64) ? INFINITY : -INFINITY;
        else if (special == 2) v = ldexp(v, dt == RINGLET_FLOAT64 ? -1030 : -130);
        switch (dt) {
        case RINGLET_FLOAT16: ((uint16_t *)buf)[i] = rl_float_to_half(special == 2 ? ldexpf((float)v, 12) : (float)v); break;
        case RINGLET_BFLOAT16: ((uint16_t *)buf)[i] = rl_float_to_bf16((float)v); break;
        case RINGLET_FLOAT32: ((float *)buf)[i] = (float)v; break;
        case RINGLET_FLOAT64: ((double *)buf)[i] = v; break;
        default: memcpy((char *)buf + i * ringlet_datatype_size(dt), &r, ringlet_datatype_size(dt)); break;
        }
    }
}

static int is_nan(const void *p, ringlet_datatype_t dt) {
    switch (dt) {
    case RINGLET_FLOAT16: return isnan(rl_half_to_float(*(const uint16_t *)p));
    case RINGLET_BFLOAT16: return isnan(rl_bf16_to_float(*(const uint16_t *)p));
    case RINGLET_FLOAT32: return isnan(*(const float *)p);
    case RINGLET_FLOAT64: return isnan(*(const double *)p);
    default: return 0;
    }
}

/* Index of the first element that differs (both NaN counts as equal), or n. */
static size_t first_diff(const char *x, const char *y, size_t n, ringlet_datatype_t dt) {
    size_t es = ringlet_datatype_size(dt);
    for (size_t i = 0; i < n; i++)
        if (memcmp(x + i * es, y + i * es, es) && !(is_nan(x + i * es, dt) && is_nan(y + i * es, dt))) return i;
    return n;
}

static long threads_named(const char *name) {
    DIR *d = opendir("/proc/self/task");
    struct dirent *e;
    long n = 0;
    while (d && (e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        char path[300], comm[64] = "";
        snprintf(path, sizeof path, "/proc/self/task/%s/comm", e->d_name);
        FILE *f = fopen(path, "r");
        if (f && fgets(comm, sizeof comm, f)) n += !strncmp(comm, name, strlen(name));
        if (f) fclose(f);
    }
    if (d) closedir(d);
    return n;
}

/* threads_named once it equals want, or after 5 s: a joined thread may still be listed a
 * moment (pthread_join returns when the kernel clears its id, before the task leaves
 * /proc/self/task); a thread that was not stopped never goes. */
static long threads_named_settled(const char *name, long want) {
    long n = threads_named(name);
    for (int i = 0; i < 5000 && n != want; i++) {
        struct timespec ts = {0, 1000 * 1000};
        nanosleep(&ts, NULL);
        n = threads_named(name);
    }
    return n;
}

static void test_split(void) {
    static const size_t sizes[] = {1, 2, 63, 64, 65, 1000, 4099, 65536, 131075, 1000003};
    for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++)
        for (size_t es = 1; es <= 8; es *= 2)
            for (int parts = 1; parts <= 9; parts++)
                for (uintptr_t mis = 0; mis < 64; mis += es == 1 ? 7 : es) {
                    size_t n = sizes[si];
                    const char *dst = (const char *)(uintptr_t)(0x100000 + mis);
                    size_t prev = 0;
                    CHECK(rl_reduce_pool_part_start(dst, es, n, 0, parts) == 0, "split: part 0 does not start at 0");
                    CHECK(rl_reduce_pool_part_start(dst, es, n, parts, parts) == n, "split: the parts end before n");
                    for (int k = 1; k < parts; k++) {
                        size_t s = rl_reduce_pool_part_start(dst, es, n, k, parts);
                        size_t ideal = (size_t)((double)n * k / parts);
                        size_t line = 64 / es;
                        CHECK(s >= prev && s <= n, "split n=%zu es=%zu parts=%d: part %d starts at %zu after %zu", n,
                              es, parts, k, s, prev);
                        CHECK((s > ideal ? s - ideal : ideal - s) <= line / 2 + 1,
                              "split n=%zu es=%zu parts=%d: part %d starts at %zu, far from %zu", n, es, parts, k, s, ideal);
                        CHECK(s == n || s == 0 || ((uintptr_t)dst + s * es) % 64 == 0,
                              "split n=%zu es=%zu parts=%d mis=%zu: part %d at %zu is not on a line", n, es, parts,
                              (size_t)mis, k, s);
                        prev = s;
                    }
                }
    /* dst not aligned to its element: plain k * n / parts. */
    CHECK(rl_reduce_pool_part_start((const void *)(uintptr_t)0x100001, 4, 1000, 1, 2) == 500, "split: misaligned dst");
}

/* Every dtype x op, sizes around the thresholds, misaligned, in place, a = b. */
static void test_same_bytes(struct rl_reduce_pool *p, const char *label) {
    static const size_t sizes[] = {0, 1, 100, 1023, 1024, 4097, 33333, 131072, 300001};
    static const ringlet_op_t ops[] = {RINGLET_SUM, RINGLET_PROD, RINGLET_MIN, RINGLET_MAX, RINGLET_AVG};
    size_t maxb = 300001 * 8 + 256;
    char *a = malloc(maxb), *b = malloc(maxb), *ref = malloc(maxb), *got = malloc(maxb);
    for (size_t t = 0; t < NTYPES; t++)
        for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++)
            for (size_t oi = 0; oi < sizeof ops / sizeof ops[0]; oi++) {
                ringlet_datatype_t dt = kTypes[t];
                size_t n = sizes[si], es = ringlet_datatype_size(dt), mis = (next() % 16) * es;
                int mode = (int)(next() % 3); /* 0 out of place, 1 in place (dst = a), 2 a = b */
                char *pa = a + mis, *pb = mode == 2 ? pa : b + (next() % 16) * es;
                fill(pa, n, dt);
                if (mode != 2) fill(pb, n, dt);
                /* dst: a copy of a (in place) or garbage, the same in both */
                char *rdst = ref + mis, *gdst = got + mis;
                if (mode == 1) memcpy(rdst, pa, n * es);
                else fill(rdst, n, dt);
                memcpy(gdst, rdst, n * es);
                rl_reduce_host(rdst, mode == 1 ? rdst : pa, pb, n, dt, ops[oi]);
                rl_pool_reduce(p, gdst, mode == 1 ? gdst : pa, pb, n, dt, ops[oi]);
                size_t d = first_diff(gdst, rdst, n, dt);
                CHECK(d == n, "%s: reduce dtype %d op %d n=%zu mode %d: element %zu differs", label, (int)dt,
                      (int)ops[oi], n, mode, d);
                if (ops[oi] == RINGLET_AVG) {
                    int div = 2 + (int)(next() % 6);
                    rl_divide_host(rdst, n, dt, div);
                    rl_pool_divide(p, gdst, n, dt, div);
                    d = first_diff(gdst, rdst, n, dt);
                    CHECK(d == n, "%s: divide dtype %d by %d n=%zu: element %zu differs", label, (int)dt, div, n, d);
                }
            }
    free(a), free(b), free(ref), free(got);
}

typedef struct {
    struct rl_reduce_pool *p;
    int rounds, bad;
    atomic_int done; /* rounds finished, for the thread that waits for the first */
} hammer_t;

/* Reduces int32 vectors over and over, checking each result. */
static void *hammer(void *arg) {
    hammer_t *h = arg;
    size_t n = 100003;
    int32_t *x = malloc(n * 4), *y = malloc(n * 4), *z = malloc(n * 4);
    for (int r = 0; r < h->rounds; r++) {
        for (size_t i = 0; i < n; i++) x[i] = (int32_t)(i * 7 + (size_t)r), y[i] = (int32_t)i - r, z[i] = -1;
        rl_pool_reduce(h->p, z, x, y, n, RINGLET_INT32, RINGLET_SUM);
        for (size_t i = 0; i < n; i++) h->bad += z[i] != (int32_t)(i * 8);
        atomic_fetch_add(&h->done, 1);
    }
    free(x), free(y), free(z);
    return NULL;
}

static void test_threads(void) {
    long base = threads_named("ringlet-reduce");
    struct rl_reduce_pool *p = rl_reduce_pool_new(0, 4, 1, 4096, 50e-6);
    CHECK(p && rl_reduce_pool_running(p) == 0 && threads_named("ringlet-reduce") == base,
          "threads: a new pool has threads already");
    /* too small to split: still no threads */
    int32_t small[16] = {0};
    rl_pool_reduce(p, small, small, small, 16, RINGLET_INT32, RINGLET_SUM);
    CHECK(rl_reduce_pool_running(p) == 0, "threads: started for a reduction too small to split");
    hammer_t h1 = {.p = p, .rounds = 20}, h2 = {.p = p, .rounds = 20};
    pthread_t t1, t2;
    pthread_create(&t1, NULL, hammer, &h1);
    pthread_create(&t2, NULL, hammer, &h2);
    pthread_join(t1, NULL);
    pthread_join(t2, NULL);
    CHECK(h1.bad + h2.bad == 0, "threads: two callers at once: %d wrong elements", h1.bad + h2.bad);
    CHECK(rl_reduce_pool_running(p) == 3 && threads_named("ringlet-reduce") == base + 3,
          "threads: %d running, %ld named ringlet-reduce, wanted 3", rl_reduce_pool_running(p),
          threads_named("ringlet-reduce") - base);
    /* a stop while a caller reduces: it finishes (on its own thread from then on). The
     * stop comes once its first round is done (60 s at most), most likely while it runs
     * one of the 199 others (or after them: then the stop is checked all the same). */
    hammer_t h3 = {.p = p, .rounds = 200};
    pthread_create(&t1, NULL, hammer, &h3);
    struct timespec ts = {0, 100 * 1000};
    for (int i = 0; i < 600000 && atomic_load(&h3.done) == 0; i++) nanosleep(&ts, NULL);
    CHECK(atomic_load(&h3.done) > 0, "threads: the first round was not done after 60 s");
    rl_reduce_pool_stop(p);
    CHECK(rl_reduce_pool_running(p) == 0 && threads_named_settled("ringlet-reduce", base) == base,
          "threads: still running after stop");
    pthread_join(t1, NULL);
    CHECK(h3.bad == 0, "threads: stop during reductions: %d wrong elements", h3.bad);
    rl_reduce_pool_stop(p); /* twice: nothing */
    hammer_t h4 = {.p = p, .rounds = 2};
    hammer(&h4);
    CHECK(h4.bad == 0 && rl_reduce_pool_running(p) == 0, "threads: after stop: restarted or wrong");
    rl_reduce_pool_free(p);
    hammer_t h5 = {.p = NULL, .rounds = 1};
    hammer(&h5);
    CHECK(h5.bad == 0, "threads: NULL pool");
    rl_reduce_pool_free(NULL);
    rl_reduce_pool_stop(NULL);
    /* auto on a single rank with plenty of cores and 1 thread means off */
    CHECK(rl_reduce_pool_new(0, 1, 1, 4096, 0) == NULL, "threads: 1 thread should be no pool");
    /* the cores a rank may take: its affinity's, at most its share of those online */
    CHECK(rl_reduce_cores_for_rank(16, 1, 1) == 1, "cores: bound to 1 of 16: %ld", rl_reduce_cores_for_rank(16, 1, 1));
    CHECK(rl_reduce_cores_for_rank(16, 4, 4) == 4, "cores: 4 of 16, 4 ranks: %ld", rl_reduce_cores_for_rank(16, 4, 4));
    CHECK(rl_reduce_cores_for_rank(16, 16, 4) == 4, "cores: all 16, 4 ranks: %ld", rl_reduce_cores_for_rank(16, 16, 4));
    CHECK(rl_reduce_cores_for_rank(16, 0, 2) == 8, "cores: affinity unknown, 2 ranks: %ld", rl_reduce_cores_for_rank(16, 0, 2));
    CHECK(rl_reduce_cores_for_rank(2, 2, 4) == 1, "cores: more ranks than cores: %ld", rl_reduce_cores_for_rank(2, 2, 4));
    CHECK(rl_reduce_pool_new(0, 0, 1 << 20, 4096, 0) == NULL, "threads: auto with more ranks than cores should be off");
}

static void env_case(const char *threads, const char *minb, int want_rc, int want_t, size_t want_min) {
    if (threads) setenv("RINGLET_REDUCE_THREADS", threads, 1);
    else unsetenv("RINGLET_REDUCE_THREADS");
    if (minb) setenv("RINGLET_REDUCE_MIN_BYTES", minb, 1);
    else unsetenv("RINGLET_REDUCE_MIN_BYTES");
    int t = -7;
    size_t m = 0;
    char err[RL_MSG_MAX] = "";
    int rc = rl_reduce_pool_env(&t, &m, err);
    CHECK(rc == want_rc && (rc || (t == want_t && m == want_min)) && (!rc || strstr(err, "RINGLET_REDUCE_")),
          "env %s / %s: rc %d threads %d min %zu (%s)", threads ? threads : "(unset)", minb ? minb : "(unset)", rc, t, m,
          err);
}

static void test_env(void) {
    env_case(NULL, NULL, 0, 0, 65536);
    env_case("", "", 0, 0, 65536);
    env_case("auto", NULL, 0, 0, 65536);
    env_case("1", NULL, 0, 1, 65536);
    env_case("3", "4K", 0, 3, 4096);
    env_case("64", "64", 0, 64, 64);
    env_case("0", NULL, -1, 0, 0);
    env_case("-2", NULL, -1, 0, 0);
    env_case("65", NULL, -1, 0, 0);
    env_case("two", NULL, -1, 0, 0);
    env_case("3", "63", -1, 0, 0);
    env_case("3", "lots", -1, 0, 0);
    unsetenv("RINGLET_REDUCE_THREADS");
    unsetenv("RINGLET_REDUCE_MIN_BYTES");
}

int main(void) {
    const char *s = getenv("RINGLET_TEST_SEED");
    uint64_t seed = s ? strtoull(s, NULL, 0) : (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 32);
    rng = seed;
    setvbuf(stdout, NULL, _IOLBF, 0);
    printf("test_reduce_pool: seed %" PRIu64 " (RINGLET_TEST_SEED repeats it)\n", seed);
    test_split();
    test_env();
    test_threads();
    static const int nthreads[] = {2, 3, 5, 8};
    static const size_t minb[] = {64, 4096, 65536};
    for (size_t i = 0; i < sizeof nthreads / sizeof nthreads[0]; i++) {
        struct rl_reduce_pool *p = rl_reduce_pool_new(0, nthreads[i], 1, minb[i % 3], i % 2 ? 50e-6 : 0);
        char label[64];
        snprintf(label, sizeof label, "%d threads, %zu bytes per thread", nthreads[i], minb[i % 3]);
        test_same_bytes(p, label);
        rl_reduce_pool_free(p);
    }
    printf("test_reduce_pool: %ld checks, %d failures\n", checks, failures);
    return failures ? 1 : 0;
}
