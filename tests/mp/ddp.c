/* Multi-process test of the C DDP layer (include/ringlet_ddp.h), public API only.
 *
 * Every rank runs the same sequence on a synthetic model: 12 parameters of float32,
 * float64, float16 and bfloat16 (one empty, one scalar), 4 buffers (float32, int64,
 * uint8), tiny bucket caps so that there are many buckets (--big adds an 8 MiB
 * parameter, which the coalesced broadcast sends from its own memory).
 *
 *   init      every rank starts from its own values; after create every rank holds
 *             rank 0's parameters and buffers
 *   buckets   at least 4 buckets; every parameter in exactly one; reverse registration
 *             order; each closed once it reached its cap (first bucket: the first cap)
 *   sync      iterations whose gradients are known functions of (rank, iteration,
 *             parameter, element): after finish every gradient is the average over the
 *             ranks; gradients reported in reverse order launch every bucket before
 *             finish (launch times before the finish time); a rank-dependent random
 *             order works too; buffers changed on every rank are rank 0's after
 *             pre_forward
 *   view      gradient_as_bucket_view: gradients written straight into the bucket views
 *   nosync    two pre_forward(0) iterations accumulate locally, the third reduces the sum;
 *             buffers broadcast at the first forward of the no_sync block only
 *   init-only init_only_buffers: the last buffers are rank 0's after create, then left to each
 *             rank (not broadcast before forwards nor by ringlet_ddp_broadcast_buffers)
 *   sum       average_gradients = 0
 *   compress  float16 and bfloat16 wire compression (within their rounding)
 *   rebuild   rebuild_buckets: after the first iteration (reported in a different random order
 *             on every rank) the buckets follow rank 0's order; gradients stay right, views
 *             move with their content, and the old layout's memory is freed (free_retired);
 *             with device memory full on the last rank at the
 *             rebuild, every rank keeps the old layout and later iterations stay right
 *   unused    find_unused_parameters: a parameter unused everywhere keeps its gradient, one
 *             unused on rank 0 only gets the others' average
 *   nowait    (device memory, streams held: RINGLET_STREAM_HOLD=memop|kernel) finish returns
 *             while the last bucket's all-reduce cannot start yet (the stream is held until
 *             finish has returned)
 *   misuse    different shapes / counts / options / an argument error on one rank / device
 *             memory at create (without a backend, mixed with host memory, on two devices,
 *             on a device that is not current): the same error on every rank, naming the first difference;
 *             a gradient reported twice (every rank, and one rank only); a parameter that got
 *             no gradient (every rank, and one rank only): the erring rank names it, the others
 *             say that another rank erred; calls out of order; a clean iteration afterwards
 *   other     (device memory, two devices) a model on device 0 driven with device 1 current:
 *             right gradients, rebuilt buckets on device 0, device 1 current after each call;
 *             the last rank's gradients in memory of device 1, every parameter all-reduced in
 *             place elsewhere: right gradients; in a child forked after init, a call refused
 *             for the device names itself in the object's message
 *
 * Values are small multiples of 1/4, exact in every dtype, so sums are exact and only
 * the division by the number of ranks (and compression) rounds.
 * Output: "ddp: rank R of P: N checks, F failed"; exit 0 iff none failed.
 * Options: --big (add the 8 MiB parameter), --iters N (sync iterations, default 4).
 */
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/wait.h>
#include <unistd.h>

#include "device.h" /* the device layer: only to hold a stream (test_nowait, test_stream_switch) */
#include "ringlet.h"
#include "ringlet_ddp.h"

static int g_rank, g_size, g_checks, g_failed;
static ringlet_comm_t g_comm;
static int g_dev; /* --memory device: every tensor in device memory (the device backend's) */

#define CHECK(cond, ...)                                                                                               \
    do {                                                                                                               \
        g_checks++;                                                                                                    \
        if (!(cond)) {                                                                                                 \
            g_failed++;                                                                                                \
            if (g_failed <= 40) {                                                                                      \
                printf("FAIL rank %d line %d: ", g_rank, __LINE__);                                                    \
                printf(__VA_ARGS__);                                                                                   \
                printf("\n");                                                                                          \
                fflush(stdout);                                                                                        \
            }                                                                                                          \
        }                                                                                                              \
    } while (0)

/* ---- element access ---- */

static uint16_t f32_to_f16(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    uint32_t sign = x & 0x80000000u;
    x ^= sign;
    uint16_t o;
    if (x >= (uint32_t)(127 + 16) << 23) {
        o = x > 0x7f800000u ? 0x7e00 : 0x7c00;
    } else if (x < (uint32_t)113 << 23) {
        const uint32_t mu = (uint32_t)((127 - 15) + (23 - 10) + 1) << 23;
        float fx, m;
        memcpy(&fx, &x, 4);
        memcpy(&m, &mu, 4);
        fx += m;
        uint32_t r;
        memcpy(&r, &fx, 4);
        o = (uint16_t)(r - mu);
    } else {
        uint32_t odd = (x >> 13) & 1;
        x += ((uint32_t)(15 - 127) << 23) + 0xfffu + odd;
        o = (uint16_t)(x >> 13);
    }
    return (uint16_t)(o | (sign >> 16));
}
static float f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu, r;
    if (e == 0) {
        float f = (float)m * 5.9604644775390625e-8f;
        memcpy(&r, &f, 4);
        r |= sign;
    } else if (e == 31) {
        r = sign | 0x7f800000u | (m << 13);
    } else {
        r = sign | ((e + 112) << 23) | (m << 13);
    }
    float f;
    memcpy(&f, &r, 4);
    return f;
}
static uint16_t f32_to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    u += 0x7fffu + ((u >> 16) & 1);
    return (uint16_t)(u >> 16);
}
static float bf16_to_f32(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static void put(void *base, ringlet_datatype_t t, size_t j, double v) {
    char *p = (char *)base + j * ringlet_datatype_size(t);
    switch (t) {
    case RINGLET_FLOAT32: { float x = (float)v; memcpy(p, &x, 4); break; }
    case RINGLET_FLOAT64: memcpy(p, &v, 8); break;
    case RINGLET_FLOAT16: { uint16_t x = f32_to_f16((float)v); memcpy(p, &x, 2); break; }
    case RINGLET_BFLOAT16: { uint16_t x = f32_to_bf16((float)v); memcpy(p, &x, 2); break; }
    case RINGLET_INT64: { int64_t x = (int64_t)v; memcpy(p, &x, 8); break; }
    case RINGLET_UINT8: { uint8_t x = (uint8_t)v; memcpy(p, &x, 1); break; }
    default: abort();
    }
}
static double get(const void *base, ringlet_datatype_t t, size_t j) {
    const char *p = (const char *)base + j * ringlet_datatype_size(t);
    switch (t) {
    case RINGLET_FLOAT32: { float x; memcpy(&x, p, 4); return x; }
    case RINGLET_FLOAT64: { double x; memcpy(&x, p, 8); return x; }
    case RINGLET_FLOAT16: { uint16_t x; memcpy(&x, p, 2); return f16_to_f32(x); }
    case RINGLET_BFLOAT16: { uint16_t x; memcpy(&x, p, 2); return bf16_to_f32(x); }
    case RINGLET_INT64: { int64_t x; memcpy(&x, p, 8); return (double)x; }
    case RINGLET_UINT8: { uint8_t x; memcpy(&x, p, 1); return x; }
    default: abort();
    }
}

static double get(const void *base, ringlet_datatype_t t, size_t j);
static void put(void *base, ringlet_datatype_t t, size_t j, double v);
/* v as stored in dtype t */
static double roundtrip(ringlet_datatype_t t, double v) {
    unsigned char tmp[8];
    put(tmp, t, 0, v);
    return get(tmp, t, 0);
}

/* ---- tensor memory: host memory, or device memory reached only through copies on the
 * default stream (the DDP's stream here), each followed by a synchronisation ---- */
static void sync_all(void) {
    if (g_dev && ringlet_stream_synchronize(NULL) != RINGLET_SUCCESS) {
        printf("FAIL rank %d: stream sync: %s\n", g_rank, ringlet_comm_last_error(NULL));
        exit(1);
    }
}
static void *talloc(size_t bytes) {
    void *p = NULL;
    if (!g_dev) return calloc(bytes ? bytes : 1, 1);
    if (ringlet_mem_alloc(&p, bytes ? bytes : 1) != RINGLET_SUCCESS ||
        ringlet_memset_async(p, 0, bytes, NULL) != RINGLET_SUCCESS) {
        printf("FAIL rank %d: device memory: %s\n", g_rank, ringlet_comm_last_error(NULL));
        exit(1);
    }
    sync_all();
    return p;
}
static void tfree(void *p) {
    if (g_dev) ringlet_mem_free(p);
    else free(p);
}
/* A host copy of bytes of tensor memory (free it). */
static void *hcopy(const void *p, size_t bytes) {
    void *h = malloc(bytes ? bytes : 1);
    sync_all();
    if (bytes && ringlet_memcpy_async(h, p, bytes, NULL) != RINGLET_SUCCESS) abort();
    sync_all();
    return h;
}
/* Host bytes into tensor memory. */
static void hstore(void *p, const void *h, size_t bytes) {
    sync_all();
    if (bytes && ringlet_memcpy_async(p, h, bytes, NULL) != RINGLET_SUCCESS) abort();
    sync_all();
}
static void tzero(void *p, size_t bytes) {
    if (bytes && ringlet_memset_async(p, 0, bytes, NULL) != RINGLET_SUCCESS) abort();
    sync_all();
}

/* Small multiples of 1/4 in [-2, 2]: exact in every floating dtype, sums exact. */
static double val(int r, int it, int i, size_t j) {
    uint64_t h = (uint64_t)(r + 1) * 0x9e3779b97f4a7c15ull ^ (uint64_t)(it + 7) * 0xbf58476d1ce4e5b9ull ^
                 (uint64_t)(i + 3) * 0x94d049bb133111ebull ^ (uint64_t)j * 0x2545f4914f6cdd1dull;
    h ^= h >> 31;
    h *= 0xd6e9f0c2bbd1b4d5ull;
    h ^= h >> 29;
    return (double)((int)(h % 17) - 8) / 4.0;
}

/* ---- the model ---- */

typedef struct {
    const char *name;
    ringlet_datatype_t dtype;
    int ndim;
    int64_t shape[3];
} spec_t;

static const spec_t P_SPEC[] = {
    {"embed.weight", RINGLET_FLOAT32, 2, {64, 16}}, {"embed.bias", RINGLET_FLOAT32, 1, {16}},
    {"half.weight", RINGLET_FLOAT16, 1, {33}},      {"fc1.weight", RINGLET_FLOAT32, 2, {40, 64}},
    {"fc1.bias", RINGLET_FLOAT32, 1, {40}},         {"bf.weight", RINGLET_BFLOAT16, 2, {7, 9}},
    {"fc2.weight", RINGLET_FLOAT32, 3, {10, 10, 30}}, {"fc2.bias", RINGLET_FLOAT32, 1, {3}},
    {"dbl.weight", RINGLET_FLOAT64, 1, {100}},      {"empty", RINGLET_FLOAT32, 2, {0, 5}},
    {"fc3.weight", RINGLET_FLOAT32, 2, {17, 31}},   {"fc3.bias", RINGLET_FLOAT32, 0, {0}},
    {"big.weight", RINGLET_FLOAT32, 1, {2100000}},
};
static const spec_t B_SPEC[] = {
    {"bn.running_mean", RINGLET_FLOAT32, 1, {40}},
    {"bn.running_var", RINGLET_FLOAT32, 1, {40}},
    {"bn.num_batches_tracked", RINGLET_INT64, 0, {0}},
    {"table", RINGLET_UINT8, 1, {5}},
};
#define NB ((int)(sizeof B_SPEC / sizeof B_SPEC[0]))
static int g_np = 12; /* 13 with --big */

typedef struct {
    int np, nb;
    ringlet_ddp_tensor_t p[16], b[8];
    void *grad_mem[16];
} model_t;

static size_t spec_count(const spec_t *s) {
    size_t c = 1;
    for (int k = 0; k < s->ndim; k++) c *= (size_t)s->shape[k];
    return c;
}

static void model_init(model_t *m, int with_grads) {
    memset(m, 0, sizeof *m);
    m->np = g_np;
    m->nb = NB;
    for (int kind = 0; kind < 2; kind++) {
        const spec_t *sp = kind ? B_SPEC : P_SPEC;
        int n = kind ? NB : g_np;
        for (int i = 0; i < n; i++) {
            ringlet_ddp_tensor_t *t = kind ? &m->b[i] : &m->p[i];
            t->name = sp[i].name;
            t->dtype = sp[i].dtype;
            t->count = spec_count(&sp[i]);
            t->ndim = sp[i].ndim;
            t->shape = sp[i].shape;
            t->memory = g_dev ? RINGLET_DDP_DEVICE : RINGLET_DDP_HOST;
            size_t bytes = t->count * ringlet_datatype_size(t->dtype);
            t->data = talloc(bytes);
            void *h = malloc(bytes ? bytes : 1);
            for (size_t j = 0; j < t->count; j++) put(h, t->dtype, j, val(g_rank, -1 - kind, i, j));
            hstore(t->data, h, bytes);
            free(h);
            if (!kind && with_grads) {
                m->grad_mem[i] = talloc(bytes);
                t->grad = m->grad_mem[i];
            }
        }
    }
}

static void model_free(model_t *m) {
    for (int i = 0; i < m->np; i++) {
        tfree(m->p[i].data);
        tfree(m->grad_mem[i]);
    }
    for (int i = 0; i < m->nb; i++) tfree(m->b[i].data);
}

static ringlet_ddp_options_t small_opts(void) {
    ringlet_ddp_options_t o;
    ringlet_ddp_options_init(&o);
    o.bucket_cap_bytes = 8192;
    o.first_bucket_cap_bytes = 2048;
    return o;
}

static double tol_of(ringlet_datatype_t t, ringlet_ddp_compression_t comp) {
    if (t == RINGLET_FLOAT16 || comp == RINGLET_DDP_COMPRESS_FLOAT16) return 4e-3;
    if (t == RINGLET_BFLOAT16 || comp == RINGLET_DDP_COMPRESS_BFLOAT16) return 3e-2;
    if (t == RINGLET_FLOAT64) return 1e-13;
    return 1e-6;
}

/* Gradient of parameter i in iteration it on rank r (accumulated over acc iterations). */
static double grad_val(int r, int it, int i, size_t j, int acc) {
    double s = 0;
    for (int a = 0; a < acc; a++) s += val(r, 100 * it + a, i, j);
    return s;
}

static void fill_grad(void *g, const ringlet_ddp_tensor_t *t, int it, int i, int acc) {
    size_t bytes = t->count * ringlet_datatype_size(t->dtype);
    void *h = malloc(bytes ? bytes : 1);
    for (size_t j = 0; j < t->count; j++) put(h, t->dtype, j, grad_val(g_rank, it, i, j, acc));
    hstore(g, h, bytes);
    free(h);
}

/* Checks gradient memory g of parameter i against the average (or sum) over ranks,
 * skipping ranks for which skip(r) says so (they contributed zero). */
static int check_grad(const void *gm, const ringlet_ddp_tensor_t *t, int it, int i, int acc, int average,
                      ringlet_ddp_compression_t comp, int skip_rank, const char *what) {
    double tol = tol_of(t->dtype, comp);
    int bad = 0;
    void *g = hcopy(gm, t->count * ringlet_datatype_size(t->dtype));
    for (size_t j = 0; j < t->count; j++) {
        double s = 0, a = 0;
        for (int r = 0; r < g_size; r++) {
            if (r == skip_rank) continue;
            double v = grad_val(r, it, i, j, acc);
            s += v;
            a += fabs(v);
        }
        double exp = average ? s / g_size : s;
        double scale = average ? a / g_size : a;
        double got = get(g, t->dtype, j);
        if (fabs(got - exp) > tol * (scale + fabs(exp)) + 1e-30) {
            if (!bad)
                CHECK(0, "%s: iteration %d parameter %d (%s) element %zu: got %.9g, expected %.9g", what, it, i,
                      t->name, j, got, exp);
            bad++;
        }
    }
    if (!bad) CHECK(1, "ok");
    free(g);
    return bad == 0;
}

static uint64_t str_hash(const char *s) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 0x100000001b3ull;
    return h;
}

/* Every rank got the same message? */
static int same_everywhere(const char *msg) {
    uint64_t h = str_hash(msg), *all = calloc((size_t)g_size, sizeof *all);
    ringlet_result_t rc = ringlet_allgather(&h, all, 1, RINGLET_UINT64, g_comm, NULL);
    int same = rc == RINGLET_SUCCESS;
    for (int r = 0; r < g_size; r++) same = same && all[r] == h;
    free(all);
    return same;
}

#define RC_OK(expr)                                                                                                    \
    do {                                                                                                               \
        ringlet_result_t rc_ = (expr);                                                                                 \
        CHECK(rc_ == RINGLET_SUCCESS, "%s: %s: %s", #expr, ringlet_strerror(rc_), ringlet_ddp_last_error(NULL));       \
    } while (0)

static ringlet_ddp_t create(model_t *m, const ringlet_ddp_options_t *o) {
    ringlet_ddp_t d = NULL;
    ringlet_result_t rc = ringlet_ddp_create(&d, g_comm, m->p, m->np, m->b, m->nb, o);
    CHECK(rc == RINGLET_SUCCESS && d, "ringlet_ddp_create: %s: %s", ringlet_strerror(rc), ringlet_ddp_last_error(NULL));
    return d;
}

#define DRC(d, expr)                                                                                                   \
    do {                                                                                                               \
        ringlet_result_t rc_ = (expr);                                                                                 \
        CHECK(rc_ == RINGLET_SUCCESS, "%s: %s: %s", #expr, ringlet_strerror(rc_), ringlet_ddp_last_error(d));          \
    } while (0)

/* ---- tests ---- */

static void test_init_and_buckets(void) {
    model_t m;
    model_init(&m, 1);
    ringlet_ddp_options_t o = small_opts();
    ringlet_ddp_t d = create(&m, &o);
    if (!d) {
        model_free(&m);
        return;
    }
    /* rank 0's values everywhere */
    int bad = 0;
    for (int kind = 0; kind < 2; kind++)
        for (int i = 0; i < (kind ? m.nb : m.np); i++) {
            ringlet_ddp_tensor_t *t = kind ? &m.b[i] : &m.p[i];
            void *h = hcopy(t->data, t->count * ringlet_datatype_size(t->dtype));
            for (size_t j = 0; j < t->count; j++)
                if (get(h, t->dtype, j) != roundtrip(t->dtype, val(0, -1 - kind, i, j))) bad++;
            free(h);
        }
    CHECK(bad == 0, "init: %d elements differ from rank 0's values", bad);

    int nb = 0;
    DRC(d, ringlet_ddp_num_buckets(d, &nb));
    CHECK(nb >= 4, "only %d buckets", nb);
    int seen[16] = {0}, prev_max = 1 << 30;
    for (int b = 0; b < nb; b++) {
        ringlet_ddp_bucket_info_t info;
        DRC(d, ringlet_ddp_bucket_info(d, b, &info));
        size_t es = ringlet_datatype_size(info.dtype);
        /* reverse registration order: a later bucket holds earlier parameters */
        CHECK(info.last_param < prev_max, "bucket %d holds parameter %d after a bucket with %d", b, info.last_param,
              prev_max);
        prev_max = info.last_param;
        int first_of_dtype = 1;
        for (int c = 0; c < b; c++) {
            ringlet_ddp_bucket_info_t ci;
            ringlet_ddp_bucket_info(d, c, &ci);
            if (ci.dtype == info.dtype) first_of_dtype = 0;
        }
        size_t cap = first_of_dtype ? o.first_bucket_cap_bytes : o.bucket_cap_bytes;
        /* closed once it reaches its cap: without its last slot it is below the cap, and a
         * bucket below its cap (other than the last of its dtype) does not exist */
        size_t last_off = 0;
        for (int i = 0; i < m.np; i++) {
            int bi;
            size_t off;
            ringlet_ddp_param_bucket(d, i, &bi, &off);
            if (bi == b && off > last_off) last_off = off;
        }
        CHECK(last_off * es < cap, "bucket %d: %zu bytes before its last slot, cap %zu", b, last_off * es, cap);
        int later_same = 0;
        for (int c = b + 1; c < nb; c++) {
            ringlet_ddp_bucket_info_t ci;
            ringlet_ddp_bucket_info(d, c, &ci);
            if (ci.dtype == info.dtype) later_same = 1;
        }
        CHECK(!later_same || info.count * es >= cap, "bucket %d: %zu bytes, below its cap %zu, yet closed", b,
              info.count * es, cap);
        for (int i = 0; i < m.np; i++) {
            int bi;
            size_t off;
            DRC(d, ringlet_ddp_param_bucket(d, i, &bi, &off));
            if (bi == b) {
                seen[i]++;
                CHECK(m.p[i].dtype == info.dtype, "parameter %d in a bucket of another dtype", i);
                CHECK(off + m.p[i].count <= info.count, "parameter %d outside its bucket", i);
                void *v;
                DRC(d, ringlet_ddp_grad_view(d, i, &v));
                CHECK(v == (char *)info.memory + off * es, "grad_view of parameter %d", i);
            }
        }
    }
    for (int i = 0; i < m.np; i++) CHECK(seen[i] == 1, "parameter %d in %d buckets", i, seen[i]);
    ringlet_ddp_destroy(d);
    model_free(&m);
}

/* A permutation of 0..n-1: reversed, or shuffled by (seed). */
static void order(int *ord, int n, int shuffle, uint64_t seed) {
    for (int i = 0; i < n; i++) ord[i] = n - 1 - i;
    if (!shuffle) return;
    for (int i = n - 1; i > 0; i--) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        int j = (int)((seed >> 33) % (uint64_t)(i + 1));
        int t = ord[i];
        ord[i] = ord[j];
        ord[j] = t;
    }
}

/* init_only_buffers = 2: the last two buffers (frozen parameters, for a framework) are
 * rank 0's after create, like the others; before forwards only the first two are
 * broadcast, so a rank's own later values of the last two stay (broadcast_buffers too). */
static void test_init_only(void) {
    const char *what = "init_only_buffers";
    model_t m;
    model_init(&m, 1);
    ringlet_ddp_options_t o = small_opts();
    o.init_only_buffers = 2;
    ringlet_ddp_t d = create(&m, &o);
    for (int round = 0; round < 3 && d; round++) {
        int bad_init = 0, bad_sync = 0, bad_own = 0;
        for (int i = 0; i < m.nb; i++) { /* round 0: right after create, all rank 0's */
            size_t bytes = m.b[i].count * ringlet_datatype_size(m.b[i].dtype);
            void *h = hcopy(m.b[i].data, bytes);
            for (size_t j = 0; j < m.b[i].count; j++) {
                double v = get(h, m.b[i].dtype, j);
                if (round == 0) bad_init += v != roundtrip(m.b[i].dtype, val(0, -2, i, j));
                else if (i < m.nb - 2) bad_sync += v != roundtrip(m.b[i].dtype, val(0, 60 + round, i, j));
                else bad_own += v != roundtrip(m.b[i].dtype, val(g_rank, 60 + round, i, j));
            }
            for (size_t j = 0; j < m.b[i].count; j++) put(h, m.b[i].dtype, j, val(g_rank, 61 + round, i, j));
            hstore(m.b[i].data, h, bytes); /* each rank's own values for the next round */
            free(h);
        }
        CHECK(bad_init == 0, "%s: %d elements are not rank 0's after create", what, bad_init);
        CHECK(bad_sync == 0, "%s: round %d: %d elements of broadcast buffers are not rank 0's", what, round, bad_sync);
        CHECK(bad_own == 0, "%s: round %d: %d elements of init-only buffers are not this rank's own", what, round,
              bad_own);
        if (round == 2) break;
        if (round == 0) {
            DRC(d, ringlet_ddp_pre_forward(d, RINGLET_DDP_SYNC));
            for (int i = 0; i < m.np; i++) {
                fill_grad(m.p[i].grad, &m.p[i], 0, i, 1);
                DRC(d, ringlet_ddp_grad_ready(d, i, m.p[i].grad));
            }
            DRC(d, ringlet_ddp_finish(d));
        } else {
            DRC(d, ringlet_ddp_broadcast_buffers(d));
        }
    }
    if (d) ringlet_ddp_destroy(d);
    model_free(&m);
}

/* Synchronising iterations, with or without views / averaging / compression. */
/* After a rebuild: the buckets follow rank 0's order of the first iteration: in that
 * order restricted to one dtype, every bucket holds a run of consecutive parameters, and
 * buckets are numbered by where their run starts. */
static void check_rebuilt(ringlet_ddp_t d, const model_t *m, const int *ord0, const char *what) {
    int np = m->np;
    ringlet_ddp_stats_t st;
    ringlet_ddp_stats(d, &st);
    CHECK(st.bucket_rebuilds == 1, "%s: %" PRIu64 " rebuilds", what, st.bucket_rebuilds);
    int nb = 0, start[16];
    ringlet_ddp_num_buckets(d, &nb);
    for (int b = 0; b < nb; b++) start[b] = -1;
    for (int b = 0; b < nb; b++) {
        ringlet_ddp_bucket_info_t info;
        ringlet_ddp_bucket_info(d, b, &info);
        int first = -1, lastk = -1, runs = 0;
        for (int k = 0, kd = 0; k < np; k++) {
            int i = ord0[k], bi;
            if (m->p[i].dtype != info.dtype) continue;
            ringlet_ddp_param_bucket(d, i, &bi, NULL);
            if (bi == b) {
                if (first < 0) first = k;
                if (runs == 0 || lastk != kd - 1) runs++;
                lastk = kd;
            }
            kd++;
        }
        CHECK(runs == 1, "%s: bucket %d holds %d separate runs of rank 0's order", what, b, runs);
        start[b] = first;
        CHECK(b == 0 || first > start[b - 1], "%s: bucket %d starts at place %d of rank 0's order, bucket %d at %d",
              what, b, first, b - 1, b ? start[b - 1] : -1);
    }
}

static void test_sync_opts(int iters, int view, int average, ringlet_ddp_compression_t comp, int rebuild,
                           const char *what) {
    model_t m;
    model_init(&m, !view);
    ringlet_ddp_options_t o = small_opts();
    o.gradient_as_bucket_view = view;
    o.average_gradients = average;
    o.compression = comp;
    o.rebuild_buckets = rebuild;
    ringlet_ddp_t d = create(&m, &o);
    if (!d) {
        model_free(&m);
        return;
    }
    int nb = 0;
    ringlet_ddp_num_buckets(d, &nb);
    for (int it = 0; it < iters; it++) {
        /* buffers differ per rank; pre_forward makes them rank 0's, except after a
         * forward without gradients (iteration 1 has one): then they stay */
        for (int i = 0; i < m.nb; i++) {
            size_t bytes = m.b[i].count * ringlet_datatype_size(m.b[i].dtype);
            void *h = malloc(bytes ? bytes : 1);
            for (size_t j = 0; j < m.b[i].count; j++) put(h, m.b[i].dtype, j, val(g_rank, 50 + it, i, j) + 8);
            hstore(m.b[i].data, h, bytes);
            free(h);
        }
        DRC(d, ringlet_ddp_pre_forward(d, RINGLET_DDP_SYNC));
        int src = it == 2 ? g_rank : 0, bad = 0;
        for (int i = 0; i < m.nb; i++) {
            void *h = hcopy(m.b[i].data, m.b[i].count * ringlet_datatype_size(m.b[i].dtype));
            for (size_t j = 0; j < m.b[i].count; j++)
                if (get(h, m.b[i].dtype, j) != roundtrip(m.b[i].dtype, val(src, 50 + it, i, j) + 8)) bad++;
            free(h);
        }
        CHECK(bad == 0, "%s: iteration %d: %d buffer elements are not rank %d's", what, it, bad, src);
        if (it == 1) { /* an evaluation forward between forward and backward: buffers broadcast
                        * (the previous forward synchronised), the iteration goes on */
            ringlet_ddp_stats_t s0, s1;
            ringlet_ddp_stats(d, &s0);
            DRC(d, ringlet_ddp_pre_forward(d, RINGLET_DDP_NO_GRAD));
            ringlet_ddp_stats(d, &s1);
            CHECK(s1.buffer_broadcasts == s0.buffer_broadcasts + 1, "%s: no buffer broadcast at a no-grad forward",
                  what);
        }

        int ord[16];
        order(ord, m.np, it % 2 == 1 || (rebuild && it == 0), (uint64_t)(it * 1000 + g_rank));
        for (int k = 0; k < m.np; k++) {
            int i = ord[k];
            void *g = m.p[i].grad;
            if (view) ringlet_ddp_grad_view(d, i, &g);
            fill_grad(g, &m.p[i], it, i, 1);
            DRC(d, ringlet_ddp_grad_ready(d, i, view ? NULL : g));
        }
        ringlet_ddp_stats_t st;
        ringlet_ddp_num_buckets(d, &nb);
        DRC(d, ringlet_ddp_finish(d));
        DRC(d, ringlet_ddp_stats(d, &st));
        CHECK(st.buckets_before_finish == nb, "%s: %d of %d buckets launched before finish", what,
              st.buckets_before_finish, nb);
        ringlet_ddp_num_buckets(d, &nb);
        for (int b = 0; b < nb && !(rebuild && it == 0); b++) { /* a rebuild's new buckets have no times yet */
            ringlet_ddp_bucket_info_t info;
            ringlet_ddp_bucket_info(d, b, &info);
            CHECK(info.launch_time > 0 && info.launch_time <= st.finish_start_time &&
                      info.done_time >= info.launch_time && info.done_time <= st.finish_end_time,
                  "%s: bucket %d times: launch %.6f done %.6f finish %.6f..%.6f", what, b, info.launch_time,
                  info.done_time, st.finish_start_time, st.finish_end_time);
        }
        for (int i = 0; i < m.np; i++) {
            void *g = m.p[i].grad;
            if (view) ringlet_ddp_grad_view(d, i, &g);
            check_grad(g, &m.p[i], it, i, 1, average, comp, -1, what);
        }
        if (rebuild && it == 0) {
            int ord0[16];
            order(ord0, m.np, 1, 0); /* rank 0's order in iteration 0 */
            check_rebuilt(d, &m, ord0, what);
            /* the old layout's memory: freed now (the later iterations must not touch it:
             * the address sanitizer's build would say so), once */
            size_t freed = 0, again = 1;
            DRC(d, ringlet_ddp_free_retired(d, &freed));
            DRC(d, ringlet_ddp_free_retired(d, &again));
            CHECK(freed > 0 && again == 0, "%s: free_retired freed %zu bytes, then %zu", what, freed, again);
        }
    }
    ringlet_ddp_destroy(d);
    model_free(&m);
}

static void test_sync(int iters, int view, int average, ringlet_ddp_compression_t comp, const char *what) {
    test_sync_opts(iters, view, average, comp, 0, what);
}

static void test_nosync(int view) {
    const char *what = view ? "nosync+view" : "nosync";
    model_t m;
    model_init(&m, !view);
    ringlet_ddp_options_t o = small_opts();
    o.gradient_as_bucket_view = view;
    ringlet_ddp_t d = create(&m, &o);
    if (!d) {
        model_free(&m);
        return;
    }
    for (int it = 0; it < 2; it++) {
        ringlet_ddp_stats_t s0, s1;
        ringlet_ddp_stats(d, &s0);
        /* zero the gradients, then 2 accumulating iterations and 1 that reduces */
        for (int i = 0; i < m.np; i++) {
            void *g = m.p[i].grad;
            if (view) ringlet_ddp_grad_view(d, i, &g);
            tzero(g, m.p[i].count * ringlet_datatype_size(m.p[i].dtype));
        }
        for (int a = 0; a < 3; a++) {
            DRC(d, ringlet_ddp_pre_forward(d, a == 2));
            for (int i = m.np - 1; i >= 0; i--) {
                void *g = m.p[i].grad;
                if (view) ringlet_ddp_grad_view(d, i, &g);
                size_t bytes = m.p[i].count * ringlet_datatype_size(m.p[i].dtype);
                void *h = hcopy(g, bytes);
                for (size_t j = 0; j < m.p[i].count; j++)
                    put(h, m.p[i].dtype, j, get(h, m.p[i].dtype, j) + val(g_rank, 100 * it + a, i, j));
                hstore(g, h, bytes);
                free(h);
                DRC(d, ringlet_ddp_grad_ready(d, i, NULL));
            }
            DRC(d, ringlet_ddp_finish(d));
        }
        ringlet_ddp_stats(d, &s1);
        /* the forwards: after a synchronising one (or the first) -> broadcast; the second
         * no_sync forward and the synchronising one after it -> none */
        CHECK(s1.buffer_broadcasts - s0.buffer_broadcasts == 1, "%s: %" PRIu64 " buffer broadcasts in a no_sync block",
              what, s1.buffer_broadcasts - s0.buffer_broadcasts);
        CHECK(s1.iterations - s0.iterations == 1, "%s: %" PRIu64 " synchronising iterations", what,
              s1.iterations - s0.iterations);
        for (int i = 0; i < m.np; i++) {
            void *g = m.p[i].grad;
            if (view) ringlet_ddp_grad_view(d, i, &g);
            check_grad(g, &m.p[i], it, i, 3, 1, RINGLET_DDP_COMPRESS_NONE, -1, what);
        }
    }
    ringlet_ddp_destroy(d);
    model_free(&m);
}

static void test_unused(void) {
    model_t m;
    model_init(&m, 1);
    ringlet_ddp_options_t o = small_opts();
    o.find_unused_parameters = 1;
    ringlet_ddp_t d = create(&m, &o);
    if (!d) {
        model_free(&m);
        return;
    }
    const int nowhere = 3, rank0_only = 6, told = 7; /* fc1.weight, fc2.weight, fc2.bias */
    for (int it = 0; it < 2; it++) {
        DRC(d, ringlet_ddp_pre_forward(d, 1));
        size_t nwb = m.p[nowhere].count * ringlet_datatype_size(m.p[nowhere].dtype);
        void *nwh = malloc(nwb);
        for (size_t j = 0; j < m.p[nowhere].count; j++) put(nwh, m.p[nowhere].dtype, j, 1234.5);
        hstore(m.p[nowhere].grad, nwh, nwb);
        free(nwh);
        if (it == 0) DRC(d, ringlet_ddp_grad_unused(d, told, NULL)); /* early, with no gradient: zeros */
        for (int i = m.np - 1; i >= 0; i--) {
            if (i == nowhere || (i == rank0_only && g_rank == 0) || (i == told && it == 0)) continue;
            fill_grad(m.p[i].grad, &m.p[i], it, i, 1);
            DRC(d, ringlet_ddp_grad_ready(d, i, NULL));
        }
        if (g_rank == 0 && it == 1) DRC(d, ringlet_ddp_grad_unused(d, rank0_only, NULL));
        DRC(d, ringlet_ddp_finish(d));
        int used = -1;
        DRC(d, ringlet_ddp_param_used(d, nowhere, &used));
        CHECK(used == 0, "unused: parameter %d used = %d", nowhere, used);
        int bad = 0;
        nwh = hcopy(m.p[nowhere].grad, nwb);
        for (size_t j = 0; j < m.p[nowhere].count; j++) bad += get(nwh, m.p[nowhere].dtype, j) != 1234.5;
        free(nwh);
        CHECK(bad == 0, "unused: gradient of a parameter unused everywhere was changed (%d elements)", bad);
        DRC(d, ringlet_ddp_param_used(d, rank0_only, &used));
        CHECK(used == (g_size > 1), "unused: parameter %d (unused on rank 0 only) used = %d", rank0_only, used);
        if (g_size > 1) check_grad(m.p[rank0_only].grad, &m.p[rank0_only], it, rank0_only, 1, 1, 0, 0, "unused-rank0");
        DRC(d, ringlet_ddp_param_used(d, told, &used));
        CHECK(used == (it == 1), "unused: parameter %d used = %d in iteration %d", told, used, it);
        for (int i = 0; i < m.np; i++)
            if (i != nowhere && i != rank0_only && !(i == told && it == 0))
                check_grad(m.p[i].grad, &m.p[i], it, i, 1, 1, 0, -1, "unused-others");
    }
    ringlet_ddp_destroy(d);
    model_free(&m);
}

/* find_unused_parameters with no_sync: a parameter used only in the no_sync iterations
 * counts as used (PyTorch's reducer marks a use whenever the hook fires), so its
 * accumulated gradient, reported unused at the synchronising iteration, is averaged. */
static void test_nosync_unused(void) {
    model_t m;
    model_init(&m, 1);
    ringlet_ddp_options_t o = small_opts();
    o.find_unused_parameters = 1;
    ringlet_ddp_t d = create(&m, &o);
    if (!d) {
        model_free(&m);
        return;
    }
    const int k = 4; /* fc1.bias: used in the no_sync iteration only */
    for (int it = 0; it < 2; it++) {
        DRC(d, ringlet_ddp_pre_forward(d, RINGLET_DDP_NO_SYNC));
        fill_grad(m.p[k].grad, &m.p[k], 20 + it, k, 1);
        DRC(d, ringlet_ddp_grad_ready(d, k, NULL));
        DRC(d, ringlet_ddp_finish(d));
        DRC(d, ringlet_ddp_pre_forward(d, RINGLET_DDP_SYNC));
        for (int i = m.np - 1; i >= 0; i--) {
            if (i == k) {
                DRC(d, ringlet_ddp_grad_unused(d, k, m.p[k].grad)); /* not used now: its accumulated gradient */
                continue;
            }
            fill_grad(m.p[i].grad, &m.p[i], 20 + it, i, 1);
            DRC(d, ringlet_ddp_grad_ready(d, i, NULL));
        }
        DRC(d, ringlet_ddp_finish(d));
        int used = -1;
        DRC(d, ringlet_ddp_param_used(d, k, &used));
        CHECK(used == 1, "nosync+unused: parameter %d, used in the no_sync iteration only: used = %d", k, used);
        for (int i = 0; i < m.np; i++) check_grad(m.p[i].grad, &m.p[i], 20 + it, i, 1, 1, 0, -1, "nosync+unused");
    }
    /* the use is forgotten after the synchronising iteration: unused everywhere now, the
     * gradient is left alone */
    DRC(d, ringlet_ddp_pre_forward(d, RINGLET_DDP_SYNC));
    for (int i = m.np - 1; i >= 0; i--) {
        if (i == k) continue;
        fill_grad(m.p[i].grad, &m.p[i], 30, i, 1);
        DRC(d, ringlet_ddp_grad_ready(d, i, NULL));
    }
    fill_grad(m.p[k].grad, &m.p[k], 31, k, 1);
    DRC(d, ringlet_ddp_finish(d));
    int used = -1;
    DRC(d, ringlet_ddp_param_used(d, k, &used));
    CHECK(used == 0, "nosync+unused: parameter %d, unused since the last sync: used = %d", k, used);
    if (g_size > 1) { /* its own values still: not averaged with the other ranks' */
        size_t bytes = m.p[k].count * ringlet_datatype_size(m.p[k].dtype);
        void *h = hcopy(m.p[k].grad, bytes);
        int bad = 0;
        for (size_t j = 0; j < m.p[k].count; j++) bad += get(h, m.p[k].dtype, j) != grad_val(g_rank, 31, k, j, 1);
        free(h);
        CHECK(bad == 0, "nosync+unused: the gradient of a parameter unused everywhere changed (%d elements)", bad);
    }
    ringlet_ddp_destroy(d);
    model_free(&m);
}

/* A gradient at a misaligned address (2 bytes off) on the last rank. Uncompressed it is
 * reduced all the same: a direct parameter's in-place all-reduce would refuse it while
 * the other ranks make theirs, so it goes through its bucket slot (the direct case runs
 * with RINGLET_DDP_DIRECT_BYTES=64), and the result lands at that address. With float16
 * compression the conversion refuses it: every rank fails that iteration, the last
 * naming the address, the others naming another rank's failure (on device memory at
 * the next call, as finish does not wait). */
static void test_misaligned(void) {
    int last = g_size - 1;
    const int k = 3; /* fc1.weight: float32 [40, 64] */
    for (int comp = 0; comp < 2; comp++) {
        const char *what = comp ? "misaligned+float16" : "misaligned";
        model_t m;
        model_init(&m, 1);
        ringlet_ddp_options_t o = small_opts();
        if (comp) o.compression = RINGLET_DDP_COMPRESS_FLOAT16;
        o.rebuild_buckets = comp; /* the failed first iteration still rebuilds on every rank alike */
        ringlet_ddp_t d = create(&m, &o);
        if (!d) {
            model_free(&m);
            return;
        }
        size_t bytes = m.p[k].count * ringlet_datatype_size(m.p[k].dtype);
        char *raw = talloc(bytes + 8);
        void *mis = raw + 2;
        for (int i = 0; i < m.np; i++) fill_grad(m.p[i].grad, &m.p[i], 40, i, 1);
        if (g_rank == last) fill_grad(mis, &m.p[k], 40, k, 1);
        DRC(d, ringlet_ddp_pre_forward(d, RINGLET_DDP_SYNC));
        for (int i = m.np - 1; i >= 0; i--) DRC(d, ringlet_ddp_grad_ready(d, i, i == k && g_rank == last ? mis : NULL));
        ringlet_result_t rc = ringlet_ddp_finish(d);
        char msg[1024];
        snprintf(msg, sizeof msg, "%s", ringlet_ddp_last_error(d));
        ringlet_result_t rc2 = ringlet_ddp_pre_forward(d, RINGLET_DDP_NO_GRAD); /* collects it (device) */
        if (!rc && rc2) snprintf(msg, sizeof msg, "%s", ringlet_ddp_last_error(d));
        if (!comp) {
            CHECK(rc == RINGLET_SUCCESS && rc2 == RINGLET_SUCCESS, "%s: %s / %s: %s", what, ringlet_strerror(rc),
                  ringlet_strerror(rc2), msg);
            for (int i = 0; i < m.np; i++)
                check_grad(i == k && g_rank == last ? mis : m.p[i].grad, &m.p[i], 40, i, 1, 1, 0, -1, what);
        } else {
            CHECK(rc != RINGLET_SUCCESS || rc2 != RINGLET_SUCCESS, "%s: rank %d saw no failure", what, g_rank);
            const char *want = g_rank == last ? "aligned" : "other rank";
            CHECK(strstr(msg, want) != NULL, "%s: rank %d's message lacks \"%s\": %s", what, g_rank, want, msg);
            if (g_rank == 0) printf("ddp: %s -> %s\n", what, msg);
            /* the next iteration, aligned everywhere, is sound */
            for (int i = 0; i < m.np; i++) fill_grad(m.p[i].grad, &m.p[i], 41, i, 1);
            DRC(d, ringlet_ddp_pre_forward(d, RINGLET_DDP_SYNC));
            for (int i = m.np - 1; i >= 0; i--) DRC(d, ringlet_ddp_grad_ready(d, i, m.p[i].grad));
            DRC(d, ringlet_ddp_finish(d));
            for (int i = 0; i < m.np; i++)
                check_grad(m.p[i].grad, &m.p[i], 41, i, 1, 1, RINGLET_DDP_COMPRESS_FLOAT16, -1, what);
            DRC(d, ringlet_ddp_pre_forward(d, RINGLET_DDP_NO_GRAD));
        }
        ringlet_ddp_destroy(d);
        tfree(raw);
        model_free(&m);
    }
}

/* create must fail on every rank with the same message containing every needle. */
static void expect_create_error(model_t *m, const ringlet_ddp_options_t *o, ringlet_result_t want, const char *what,
                                const char *n1, const char *n2, const char *n3) {
    ringlet_ddp_t d = NULL;
    ringlet_result_t rc = ringlet_ddp_create(&d, g_comm, m->p, m->np, m->b, m->nb, o);
    const char *msg = ringlet_ddp_last_error(NULL);
    CHECK(rc == want && d == NULL, "%s: create returned %s (%s), expected %s", what, ringlet_strerror(rc), msg,
          ringlet_strerror(want));
    CHECK(strstr(msg, n1) && (!n2 || strstr(msg, n2)) && (!n3 || strstr(msg, n3)),
          "%s: message \"%s\" lacks \"%s\" / \"%s\" / \"%s\"", what, msg, n1, n2 ? n2 : "", n3 ? n3 : "");
    char copy[1024];
    snprintf(copy, sizeof copy, "%s", msg);
    CHECK(same_everywhere(copy), "%s: the ranks' messages differ (this rank: %s)", what, copy);
    if (g_rank == 0) printf("ddp: %s -> %s\n", what, copy);
    if (d) ringlet_ddp_destroy(d);
}

static void test_misuse_create(void) {
    ringlet_ddp_options_t o = small_opts();
    model_t m;
    int last = g_size - 1;
    char rk[32];
    snprintf(rk, sizeof rk, "rank %d", last);

    /* a different shape on the last rank */
    if (g_size > 1) {
        model_init(&m, 1);
        int64_t other[2] = {40, 65};
        if (g_rank == last) {
            m.p[3].shape = other;
            m.p[3].count = 40 * 65;
            tfree(m.p[3].data);
            m.p[3].data = talloc(40 * 65 * 4);
        }
        expect_create_error(&m, &o, RINGLET_ERR_INVALID_USAGE, "shape mismatch", "parameter 3 ('fc1.weight')",
                            "[40, 64] on rank 0", "[40, 65] on rank");
        if (g_rank == last) {
            tfree(m.p[3].data);
            m.p[3].data = NULL;
        }
        model_free(&m);

        /* same count, other shape and dtype on rank 1 */
        model_init(&m, 1);
        int64_t flat[1] = {16};
        if (g_rank == 1) {
            m.p[1].shape = flat;
            m.p[1].ndim = 1;
            m.p[1].dtype = RINGLET_FLOAT64;
            tfree(m.p[1].data);
            m.p[1].data = talloc(16 * 8);
        }
        expect_create_error(&m, &o, RINGLET_ERR_INVALID_USAGE, "dtype mismatch", "parameter 1 ('embed.bias')",
                            "float32 [16] on rank 0", "float64 [16] on rank 1");
        model_free(&m);

        /* one parameter fewer on the last rank */
        model_init(&m, 1);
        if (g_rank == last) m.np--;
        expect_create_error(&m, &o, RINGLET_ERR_INVALID_USAGE, "count mismatch", "parameters", rk, NULL);
        if (g_rank == last) m.np++;
        model_free(&m);

        /* a buffer with another shape */
        model_init(&m, 1);
        int64_t bshape[1] = {4};
        if (g_rank == last) {
            m.b[3].shape = bshape;
            m.b[3].count = 4;
        }
        expect_create_error(&m, &o, RINGLET_ERR_INVALID_USAGE, "buffer mismatch", "buffer 3 ('table')", "uint8 [5]",
                            "uint8 [4]");
        model_free(&m);

        /* an option that must agree */
        model_init(&m, 1);
        ringlet_ddp_options_t o2 = o;
        if (g_rank == last) o2.bucket_cap_bytes = 4096;
        expect_create_error(&m, &o2, RINGLET_ERR_INVALID_USAGE, "option mismatch", "bucket_cap_bytes", "8192",
                            "4096");
        /* rebuild_buckets too: the rebuild is a broadcast every rank must make */
        o2 = o;
        if (g_rank == last) o2.rebuild_buckets = 1;
        expect_create_error(&m, &o2, RINGLET_ERR_INVALID_USAGE, "rebuild option mismatch", "rebuild_buckets",
                            "0 on rank 0", "1 on rank");
        /* init_only_buffers: which buffers are broadcast before forwards; and in range */
        o2 = o;
        if (g_rank == last) o2.init_only_buffers = 1;
        expect_create_error(&m, &o2, RINGLET_ERR_INVALID_USAGE, "init_only_buffers mismatch", "init_only_buffers",
                            "0 on rank 0", "1 on rank");
        o2 = o;
        o2.init_only_buffers = NB + 1;
        expect_create_error(&m, &o2, RINGLET_ERR_INVALID_ARGUMENT, "init_only_buffers out of range",
                            "init_only_buffers is 5", "[0, 4]", NULL);
        model_free(&m);

        /* an argument error on rank 1 only: every rank fails, naming it */
        model_init(&m, 1);
        if (g_rank == 1) m.p[5].dtype = RINGLET_INT32;
        expect_create_error(&m, &o, RINGLET_ERR_INVALID_ARGUMENT, "argument error on rank 1", "rank 1",
                            "parameter 5 ('bf.weight')", "int32");
        if (g_rank == 1) m.p[5].dtype = RINGLET_BFLOAT16;
        model_free(&m);

        /* parameters each under the limit, together over it (the buckets' sizes would
         * wrap), on rank 1: refused before any tensor is touched */
        model_init(&m, 1);
        size_t counts[3];
        const int64_t *shapes[3];
        for (int k = 0; k < 3 && g_rank == 1; k++) {
            counts[k] = m.p[k].count, shapes[k] = m.p[k].shape;
            m.p[k].shape = NULL;
            m.p[k].count = SIZE_MAX / 4 / ringlet_datatype_size(m.p[k].dtype) / 2;
        }
        expect_create_error(&m, &o, RINGLET_ERR_INVALID_ARGUMENT, "parameters too large together on rank 1",
                            "rank 1", "the parameters total more than", NULL);
        for (int k = 0; k < 3 && g_rank == 1; k++) m.p[k].count = counts[k], m.p[k].shape = shapes[k];
        model_free(&m);
    }
    /* memory kinds: a device tensor without a device backend; host and device mixed */
    int ndev = 0;
    ringlet_device_count(&ndev);
    model_init(&m, 1);
    m.p[4].memory = g_dev ? RINGLET_DDP_HOST : RINGLET_DDP_DEVICE;
    if (ndev == 0)
        expect_create_error(&m, &o, RINGLET_ERR_INVALID_USAGE, "device memory without a device backend",
                            "parameter 4 ('fc1.bias')", "device memory", "no device backend");
    else
        expect_create_error(&m, &o, RINGLET_ERR_INVALID_ARGUMENT, "host and device memory mixed",
                            "parameter 4 ('fc1.bias')", g_dev ? "in host memory" : "in device memory", "one kind");
    m.p[4].memory = g_dev ? RINGLET_DDP_DEVICE : RINGLET_DDP_HOST;
    model_free(&m);

    /* devices (device memory, two devices), on the last rank: a tensor on device 1, the
     * others on device 0; then every tensor on device 0 with device 1 current (the buckets
     * would be made on device 1) */
    if (g_dev && ndev >= 2) {
        model_init(&m, 1);
        void *own = m.p[4].data, *other = NULL;
        if (g_rank == last) {
            ringlet_set_device(1);
            other = talloc(m.p[4].count * ringlet_datatype_size(m.p[4].dtype));
            ringlet_set_device(0);
            m.p[4].data = other;
        }
        expect_create_error(&m, &o, RINGLET_ERR_INVALID_ARGUMENT, "tensors on two devices", rk,
                            "parameter 4 ('fc1.bias') is on device 1 but the tensors before it on device 0",
                            "one device");
        if (other) tfree(other);
        m.p[4].data = own;
        if (g_rank == last) ringlet_set_device(1);
        expect_create_error(&m, &o, RINGLET_ERR_INVALID_USAGE, "another device current", rk,
                            "the tensors are on device 0 but the current device is 1", "torch.cuda.set_device");
        ringlet_set_device(0);
        /* a stream of device 1 for tensors on device 0, on the last rank: every rank fails
         * at create (its copies and all-reduces would be refused on that rank alone) */
        const rl_device_ops *D = rl_device();
        rl_dev_stream_t s1 = NULL;
        int saved = -1;
        if (g_rank == last && (!D || ringlet_device_enter(1, &saved) || D->stream_create(&s1) != RL_DEV_OK))
            CHECK(0, "a stream on device 1: %s", rl_dev_error());
        if (g_rank == last) ringlet_device_leave(saved);
        ringlet_ddp_options_t o3 = o;
        if (g_rank == last) o3.stream = s1;
        expect_create_error(&m, &o3, RINGLET_ERR_INVALID_ARGUMENT, "a stream of another device", rk,
                            "options.stream is a stream of device 1", "on device 0");
        /* and set_stream refuses it, keeping its stream (a local call: this rank alone) */
        ringlet_ddp_t dd = NULL;
        CHECK(ringlet_ddp_create(&dd, g_comm, m.p, m.np, m.b, m.nb, &o) == RINGLET_SUCCESS, "create: %s",
              ringlet_ddp_last_error(NULL));
        if (dd && s1) {
            ringlet_result_t rc = ringlet_ddp_set_stream(dd, s1);
            CHECK(rc == RINGLET_ERR_INVALID_ARGUMENT && strstr(ringlet_ddp_last_error(dd), "a stream of device 1"),
                  "set_stream to a stream of device 1: %s: %s", ringlet_strerror(rc), ringlet_ddp_last_error(dd));
        }
        if (dd) ringlet_ddp_destroy(dd);
        if (s1) {
            ringlet_device_enter(1, &saved);
            D->stream_destroy(s1);
            ringlet_device_leave(saved);
        }
        model_free(&m);
    }

    /* local argument checks that need no peers */
    ringlet_ddp_t d = NULL;
    CHECK(ringlet_ddp_create(NULL, g_comm, NULL, 0, NULL, 0, NULL) == RINGLET_ERR_INVALID_ARGUMENT, "NULL ddp");
    CHECK(ringlet_ddp_create(&d, NULL, NULL, 0, NULL, 0, NULL) == RINGLET_ERR_INVALID_ARGUMENT, "NULL comm");
    CHECK(ringlet_ddp_grad_ready(NULL, 0, NULL) == RINGLET_ERR_INVALID_ARGUMENT, "grad_ready(NULL)");
    CHECK(strlen(ringlet_ddp_last_error(NULL)) > 0, "no message for grad_ready(NULL)");
}

/* Device memory on two devices: a model on device 0 (the communicator's), current at
 * create, then driven with device 1 current (as from a thread that chose another). Each
 * call makes device 0 current for itself and gives device 1 back: the gradients are right
 * (the copies are on device 0's default stream, which the checks synchronise), and the
 * rebuilt buckets are made on device 0. */
/* Device memory full on the last rank only (the simulated GPU given no room for more:
 * RINGLET_SIM_MEMORY): its buckets cannot be made after the ranks agreed on the model,
 * and every rank's create fails at once with its message (the others would otherwise
 * wait for it in the initial broadcast). */
static void test_device_full(void) {
    const char *dev = getenv("RINGLET_DEVICE");
    if (!g_dev || g_size < 2 || !dev || strcmp(dev, "sim") != 0) return;
    model_t m;
    model_init(&m, 1);
    ringlet_ddp_options_t o = small_opts();
    char rk[32];
    snprintf(rk, sizeof rk, "rank %d", g_size - 1);
    if (g_rank == g_size - 1) setenv("RINGLET_SIM_MEMORY", "1", 1);
    ringlet_ddp_t d = NULL;
    ringlet_result_t rc = ringlet_ddp_create(&d, g_comm, m.p, m.np, m.b, m.nb, &o);
    unsetenv("RINGLET_SIM_MEMORY");
    const char *msg = ringlet_ddp_last_error(NULL);
    CHECK(rc != RINGLET_SUCCESS && d == NULL, "device full on %s: create returned %s", rk, ringlet_strerror(rc));
    CHECK(strstr(msg, rk) && strstr(msg, "out of memory"), "device full on %s: message \"%s\"", rk, msg);
    char copy[1024];
    snprintf(copy, sizeof copy, "%s", msg);
    CHECK(same_everywhere(copy), "device full: the ranks' messages differ (this rank: %s)", copy);
    if (g_rank == 0) printf("ddp: device memory full on %s -> %s\n", rk, copy);
    if (d) ringlet_ddp_destroy(d);
    model_free(&m);
}

/* rebuild_buckets with device memory full on the last rank at the rebuild (the
 * simulated GPU given no room for more while it finishes the first iteration): that rank
 * cannot make the new buckets, so every rank keeps the old layout (agreed), the
 * iteration's gradients stand, and later iterations reduce right. Had the others moved
 * to the new layout alone, their all-reduces would no longer match the last rank's. */
static void test_rebuild_device_full(void) {
    const char *dev = getenv("RINGLET_DEVICE");
    if (!g_dev || g_size < 2 || !dev || strcmp(dev, "sim") != 0) return;
    const char *what = "rebuild, device full on the last rank";
    model_t m;
    model_init(&m, 1);
    ringlet_ddp_options_t o = small_opts();
    o.rebuild_buckets = 1;
    ringlet_ddp_t d = create(&m, &o);
    int nb0 = 0, b0[16];
    size_t off0[16];
    if (d) ringlet_ddp_num_buckets(d, &nb0);
    for (int i = 0; d && i < m.np; i++) ringlet_ddp_param_bucket(d, i, &b0[i], &off0[i]);
    for (int it = 0; it < 3 && d; it++) {
        DRC(d, ringlet_ddp_pre_forward(d, RINGLET_DDP_SYNC));
        int ord[16];
        order(ord, m.np, 1, (uint64_t)(it * 31 + 5)); /* the same shuffled order everywhere: a new layout */
        for (int k = 0; k < m.np; k++) {
            fill_grad(m.p[ord[k]].grad, &m.p[ord[k]], it, ord[k], 1);
            DRC(d, ringlet_ddp_grad_ready(d, ord[k], m.p[ord[k]].grad));
        }
        if (it == 0 && g_rank == g_size - 1) setenv("RINGLET_SIM_MEMORY", "1", 1);
        ringlet_result_t rc = ringlet_ddp_finish(d);
        unsetenv("RINGLET_SIM_MEMORY");
        CHECK(rc == RINGLET_SUCCESS, "%s: iteration %d: finish: %s: %s", what, it, ringlet_strerror(rc),
              ringlet_ddp_last_error(d));
        for (int i = 0; i < m.np; i++) check_grad(m.p[i].grad, &m.p[i], it, i, 1, 1, 0, -1, what);
    }
    if (d) {
        ringlet_ddp_stats_t st;
        ringlet_ddp_stats(d, &st);
        CHECK(st.bucket_rebuilds == 0, "%s: %" PRIu64 " rebuilds", what, st.bucket_rebuilds);
        int nb = 0, moved = 0;
        ringlet_ddp_num_buckets(d, &nb);
        for (int i = 0; i < m.np; i++) {
            int b;
            size_t off;
            ringlet_ddp_param_bucket(d, i, &b, &off);
            moved += b != b0[i] || off != off0[i];
        }
        CHECK(nb == nb0 && moved == 0, "%s: %d buckets (%d before), %d parameters moved", what, nb, nb0, moved);
        ringlet_ddp_destroy(d);
    }
    model_free(&m);
}

static void test_other_device(void) {
    int ndev = 0;
    ringlet_device_count(&ndev);
    if (!g_dev || ndev < 2) return;
    const char *what = "driven from device 1";
    model_t m;
    model_init(&m, 1);
    ringlet_ddp_options_t o = small_opts();
    o.rebuild_buckets = 1;
    ringlet_ddp_t d = create(&m, &o);
    for (int it = 0; it < 2 && d; it++) {
        ringlet_set_device(1);
        DRC(d, ringlet_ddp_pre_forward(d, RINGLET_DDP_SYNC));
        int ord[16];
        order(ord, m.np, 1, (uint64_t)(it * 77 + g_rank));
        for (int k = 0; k < m.np; k++) {
            int i = ord[k];
            ringlet_set_device(0);
            fill_grad(m.p[i].grad, &m.p[i], it, i, 1);
            ringlet_set_device(1);
            DRC(d, ringlet_ddp_grad_ready(d, i, m.p[i].grad));
        }
        DRC(d, ringlet_ddp_finish(d));
        int cur = -1;
        ringlet_get_device(&cur);
        CHECK(cur == 1, "%s: device %d is current after finish, not the caller's 1", what, cur);
        ringlet_set_device(0);
        for (int i = 0; i < m.np; i++) check_grad(m.p[i].grad, &m.p[i], it, i, 1, 1, RINGLET_DDP_COMPRESS_NONE, -1, what);
        int nb = 0;
        ringlet_ddp_num_buckets(d, &nb);
        for (int b = 0; b < nb; b++) {
            ringlet_ddp_bucket_info_t info;
            int dev = -1;
            ringlet_ddp_bucket_info(d, b, &info);
            if (info.count) ringlet_mem_device(info.memory, &dev);
            CHECK(!info.count || dev == 0, "%s: iteration %d: bucket %d is on device %d, the tensors on 0", what, it,
                  b, dev);
        }
    }
    ringlet_set_device(1);
    if (d) DRC(d, ringlet_ddp_destroy(d));
    /* the public pair the DDP layer uses */
    int saved = -2, cur = -1;
    CHECK(ringlet_device_enter(0, &saved) == RINGLET_SUCCESS && saved == 1, "device_enter(0) from 1: saved %d", saved);
    ringlet_get_device(&cur);
    CHECK(cur == 0, "device_enter(0): device %d current", cur);
    ringlet_device_leave(saved);
    ringlet_get_device(&cur);
    CHECK(cur == 1, "device_leave(1): device %d current", cur);
    CHECK(ringlet_device_enter(ndev, &saved) == RINGLET_ERR_INVALID_ARGUMENT && saved == -1,
          "device_enter(%d) of %d devices was not refused", ndev, ndev);
    ringlet_set_device(0);
    model_free(&m);
}

/* (device memory, two devices) the last rank's gradients in memory of device 1 while the
 * model is on device 0, every parameter all-reduced in place (RINGLET_DDP_DIRECT_BYTES=64
 * on every rank): such a gradient goes through its slot, the average lands in it (an
 * in-place all-reduce on it was refused on that rank alone, and the others waited in it
 * until the deadline); then, in a child forked after init (which cannot use the device),
 * a refused call's message is the object's too (ringlet_ddp_last_error(d)). */
static void test_grad_elsewhere(void) {
    int ndev = 0;
    ringlet_device_count(&ndev);
    if (!g_dev || ndev < 2) return;
    const char *what = "gradients on device 1 on the last rank";
    const char *was = getenv("RINGLET_DDP_DIRECT_BYTES");
    char saved[64] = "";
    if (was) snprintf(saved, sizeof saved, "%s", was);
    setenv("RINGLET_DDP_DIRECT_BYTES", "64", 1);
    model_t m;
    model_init(&m, 1);
    ringlet_ddp_options_t o = small_opts();
    ringlet_ddp_t d = create(&m, &o);
    if (was) setenv("RINGLET_DDP_DIRECT_BYTES", saved, 1);
    else unsetenv("RINGLET_DDP_DIRECT_BYTES");
    void *elsewhere[16] = {0};
    int last = g_rank == g_size - 1;
    for (int i = 0; i < m.np && last; i++) {
        ringlet_set_device(1);
        elsewhere[i] = talloc(m.p[i].count * ringlet_datatype_size(m.p[i].dtype));
        ringlet_set_device(0);
    }
    for (int it = 0; it < 2 && d; it++) {
        DRC(d, ringlet_ddp_pre_forward(d, RINGLET_DDP_SYNC));
        for (int i = m.np - 1; i >= 0; i--) {
            void *g = last ? elsewhere[i] : m.p[i].grad;
            fill_grad(g, &m.p[i], it, i, 1);
            DRC(d, ringlet_ddp_grad_ready(d, i, g));
        }
        DRC(d, ringlet_ddp_finish(d));
        RC_OK(ringlet_stream_synchronize(NULL));
        for (int i = 0; i < m.np; i++)
            check_grad(last ? elsewhere[i] : m.p[i].grad, &m.p[i], it, i, 1, 1, RINGLET_DDP_COMPRESS_NONE, -1, what);
    }
    if (d) {
        fflush(stdout);
        pid_t pid = fork();
        if (pid == 0) {
            ringlet_result_t rc = ringlet_ddp_pre_forward(d, RINGLET_DDP_SYNC);
            const char *msg = ringlet_ddp_last_error(d);
            int ok = rc != RINGLET_SUCCESS && strstr(msg, "ringlet_ddp_pre_forward") && strstr(msg, "forked");
            if (!ok) printf("FAIL rank %d: forked child: pre_forward %s, object's message \"%s\"\n", g_rank,
                            ringlet_strerror(rc), msg);
            fflush(stdout);
            _exit(ok ? 0 : 1);
        }
        int st = -1;
        if (pid > 0) waitpid(pid, &st, 0);
        CHECK(pid > 0 && WIFEXITED(st) && WEXITSTATUS(st) == 0,
              "a child forked after init: the DDP object's message did not name the refused call (status %d)", st);
    }
    if (d) DRC(d, ringlet_ddp_destroy(d));
    for (int i = 0; i < m.np; i++) tfree(elsewhere[i]);
    model_free(&m);
}

static void test_misuse_iterations(void) {
    model_t m;
    model_init(&m, 1);
    ringlet_ddp_options_t o = small_opts();
    ringlet_ddp_t d = create(&m, &o);
    if (!d) {
        model_free(&m);
        return;
    }
    ringlet_result_t rc;
    /* out of order */
    rc = ringlet_ddp_grad_ready(d, 0, NULL);
    CHECK(rc == RINGLET_ERR_INVALID_USAGE && strstr(ringlet_ddp_last_error(d), "pre_forward"),
          "grad_ready before pre_forward: %s: %s", ringlet_strerror(rc), ringlet_ddp_last_error(d));
    rc = ringlet_ddp_finish(d);
    CHECK(rc == RINGLET_ERR_INVALID_USAGE, "finish before pre_forward: %s", ringlet_strerror(rc));
    rc = ringlet_ddp_grad_ready(d, m.np, NULL);
    CHECK(rc == RINGLET_ERR_INVALID_ARGUMENT, "grad_ready out of range: %s", ringlet_strerror(rc));

    int last = g_size - 1;
    for (int scenario = 0; scenario < 4; scenario++) {
        /* 0: every rank reports parameter 10 twice; 1: only the last rank does;
         * 2: no rank reports parameter 2; 3: only the last rank misses it */
        int erring = scenario == 0 || scenario == 2 || g_rank == last;
        int twice = scenario < 2;
        /* The gradient memory of the parameter a rank misses: a framework may have freed
         * it since it last gave it (zero_grad(set_to_none=True)), so finish must not write
         * there (it wrote the average before); here it holds a pattern that must stay. */
        size_t b2 = m.p[2].count * ringlet_datatype_size(m.p[2].dtype);
        void *kept = NULL;
        if (!twice && erring) {
            fill_grad(m.p[2].grad, &m.p[2], 99, 2, 1);
            kept = hcopy(m.p[2].grad, b2);
        }
        DRC(d, ringlet_ddp_pre_forward(d, 1));
        for (int i = m.np - 1; i >= 0; i--) {
            if (!twice && i == 2 && erring) continue;
            fill_grad(m.p[i].grad, &m.p[i], scenario, i, 1);
            DRC(d, ringlet_ddp_grad_ready(d, i, NULL));
            if (twice && i == 10 && erring) {
                rc = ringlet_ddp_grad_ready(d, i, NULL);
                CHECK(rc == RINGLET_ERR_INVALID_USAGE && strstr(ringlet_ddp_last_error(d), "'fc3.weight'") &&
                          strstr(ringlet_ddp_last_error(d), "twice"),
                      "scenario %d: second grad_ready: %s: %s", scenario, ringlet_strerror(rc),
                      ringlet_ddp_last_error(d));
            }
        }
        rc = ringlet_ddp_finish(d);
        const char *msg = ringlet_ddp_last_error(d);
        const char *need = !erring ? "other rank" : twice ? "twice" : "parameter 2 ('half.weight') got no gradient";
        int started = 0;
        if (g_dev && !erring) {
            /* device memory: finish does not wait; the next call reports the others' error
             * (and starts its iteration all the same) */
            CHECK(rc == RINGLET_SUCCESS, "scenario %d: finish on device memory waited: %s: %s", scenario,
                  ringlet_strerror(rc), msg);
            rc = ringlet_ddp_pre_forward(d, 1);
            msg = ringlet_ddp_last_error(d);
            started = 1;
        }
        CHECK(rc == RINGLET_ERR_INVALID_USAGE && strstr(msg, need), "scenario %d: %s: %s: \"%s\" (wanted \"%s\")",
              scenario, started ? "pre_forward after it" : "finish", ringlet_strerror(rc), msg, need);
        if (g_rank == last || g_rank == 0) printf("ddp: misuse scenario %d, rank %d: %s\n", scenario, g_rank, msg);
        if (kept) {
            void *now = hcopy(m.p[2].grad, b2);
            CHECK(!memcmp(now, kept, b2), "scenario %d: finish wrote into the gradient of the parameter never reported",
                  scenario);
            free(now);
            free(kept);
        }
        /* after finish, reporting again is "twice" as well (a second backward) */
        if (scenario == 0) {
            rc = ringlet_ddp_grad_ready(d, 0, NULL);
            CHECK(rc == RINGLET_ERR_INVALID_USAGE && strstr(ringlet_ddp_last_error(d), "second backward"),
                  "ready after finish: %s: %s", ringlet_strerror(rc), ringlet_ddp_last_error(d));
            rc = ringlet_ddp_finish(d);
            CHECK(rc == RINGLET_ERR_INVALID_USAGE, "finish twice: %s", ringlet_strerror(rc));
        }
        /* the next iteration is clean */
        if (!started) DRC(d, ringlet_ddp_pre_forward(d, 1));
        for (int i = m.np - 1; i >= 0; i--) {
            fill_grad(m.p[i].grad, &m.p[i], 10 + scenario, i, 1);
            DRC(d, ringlet_ddp_grad_ready(d, i, NULL));
        }
        DRC(d, ringlet_ddp_finish(d));
        for (int i = 0; i < m.np; i++) check_grad(m.p[i].grad, &m.p[i], 10 + scenario, i, 1, 1, 0, -1, "after misuse");
    }
    /* an unfinished iteration blocks the next pre_forward */
    DRC(d, ringlet_ddp_pre_forward(d, 1));
    DRC(d, ringlet_ddp_grad_ready(d, 0, NULL));
    rc = ringlet_ddp_pre_forward(d, 1);
    CHECK(rc == RINGLET_ERR_INVALID_USAGE && strstr(ringlet_ddp_last_error(d), "not finished"),
          "pre_forward after an unfinished iteration: %s: %s", ringlet_strerror(rc), ringlet_ddp_last_error(d));
    for (int i = m.np - 1; i >= 1; i--) DRC(d, ringlet_ddp_grad_ready(d, i, NULL));
    DRC(d, ringlet_ddp_finish(d));
    ringlet_ddp_destroy(d);
    model_free(&m);
}

/* Device memory: finish does not wait for the all-reduces. Built so that a finish that
 * waited could not return: the last gradient is reported while the DDP's stream is held
 * (a flag wait queued on it), so the last bucket's all-reduce cannot start until this
 * rank releases the stream, which it does only after finish has returned. */
static void test_nowait(void) {
    const rl_device_ops *D = rl_device();
    model_t m;
    model_init(&m, 1);
    ringlet_ddp_options_t o = small_opts();
    ringlet_ddp_t d = create(&m, &o);
    uint64_t *hold = NULL;
    if (!d || !D || D->host_alloc((void **)&hold, 64) != RL_DEV_OK) {
        CHECK(0, "nowait: setup failed");
        if (d) ringlet_ddp_destroy(d);
        model_free(&m);
        return;
    }
    *hold = 0;
    for (int i = 0; i < m.np; i++) fill_grad(m.p[i].grad, &m.p[i], 7, i, 1);
    DRC(d, ringlet_ddp_pre_forward(d, RINGLET_DDP_SYNC));
    for (int i = m.np - 1; i >= 1; i--) DRC(d, ringlet_ddp_grad_ready(d, i, NULL));
    /* Where ringlet holds no stream (sync, the default) a stream call returns once done, so
     * a hold of the test's own would keep the last bucket's call from ever returning: the
     * round then runs unheld (ddp.sh runs one device run with RINGLET_STREAM_HOLD=memop). */
    int dev = 0;
    int held = D->get_device(&dev) == RL_DEV_OK && strcmp(D->hold_kind(dev), "sync") != 0;
    if (held)
        CHECK(D->wait_flag(hold, 1, (rl_dev_stream_t)(void *)1) == RL_DEV_OK, "nowait: holding the stream: %s",
              rl_dev_error());
    DRC(d, ringlet_ddp_grad_ready(d, 0, NULL)); /* completes the last bucket, behind the hold */
    ringlet_result_t rc = ringlet_ddp_finish(d);
    CHECK(rc == RINGLET_SUCCESS, "nowait: finish with the stream %s: %s: %s", held ? "held" : "free",
          ringlet_strerror(rc), ringlet_ddp_last_error(d));
    __atomic_store_n(hold, 1, __ATOMIC_RELEASE); /* finish returned: release the stream */
    for (int i = 0; i < m.np; i++) check_grad(m.p[i].grad, &m.p[i], 7, i, 1, 1, 0, -1, "nowait");
    DRC(d, ringlet_ddp_pre_forward(d, RINGLET_DDP_NO_GRAD)); /* collects the iteration */
    ringlet_ddp_destroy(d);
    D->host_free(hold);
    model_free(&m);
}

/* Device memory, a change of stream between iterations (PyTorch's DDP takes the current
 * stream at each forward): the first iteration's write-backs are queued on stream s1,
 * held there by a flag wait of the test's; the second iteration runs on s2 and refills
 * the buckets. The hold is released once the second iteration is finished, or by a
 * helper thread after 300 ms when the switch waits (as it must) for s1: either way s1's
 * write-backs run; they must have read the first iteration's results, not the second's. */
typedef struct {
    uint64_t *hold;
    int go;
} release_t;
static void *release_hold(void *arg) {
    release_t *r = arg;
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (;;) {
        clock_gettime(CLOCK_MONOTONIC, &t);
        double el = (double)(t.tv_sec - t0.tv_sec) + 1e-9 * (double)(t.tv_nsec - t0.tv_nsec);
        if (__atomic_load_n(&r->go, __ATOMIC_ACQUIRE) || el > 0.3) break;
        struct timespec ms = {0, 1000000};
        nanosleep(&ms, NULL);
    }
    __atomic_store_n(r->hold, 1, __ATOMIC_RELEASE);
    return NULL;
}
static void test_stream_switch(void) {
    const rl_device_ops *D = rl_device();
    model_t m;
    model_init(&m, 1);
    ringlet_ddp_options_t o = small_opts();
    ringlet_ddp_t d = create(&m, &o);
    uint64_t *hold = NULL;
    rl_dev_stream_t s1 = NULL, s2 = NULL;
    void *g2[16] = {0};
    if (!d || !D || D->host_alloc((void **)&hold, 64) != RL_DEV_OK || D->stream_create(&s1) != RL_DEV_OK ||
        D->stream_create(&s2) != RL_DEV_OK) {
        CHECK(0, "stream switch: setup failed: %s", rl_dev_error());
        goto out;
    }
    *hold = 0;
    for (int i = 0; i < m.np; i++) {
        fill_grad(m.p[i].grad, &m.p[i], 11, i, 1);
        g2[i] = talloc(m.p[i].count * ringlet_datatype_size(m.p[i].dtype));
        fill_grad(g2[i], &m.p[i], 12, i, 1);
    }
    DRC(d, ringlet_ddp_set_stream(d, s1));
    DRC(d, ringlet_ddp_pre_forward(d, RINGLET_DDP_SYNC));
    for (int i = m.np - 1; i >= 0; i--) DRC(d, ringlet_ddp_grad_ready(d, i, NULL));
    CHECK(D->wait_flag(hold, 1, s1) == RL_DEV_OK, "stream switch: holding s1: %s", rl_dev_error());
    DRC(d, ringlet_ddp_finish(d)); /* the write-backs wait on s1, behind the hold */
    release_t rel = {hold, 0};
    pthread_t th;
    int started = pthread_create(&th, NULL, release_hold, &rel) == 0;
    if (!started) *hold = 1;
    DRC(d, ringlet_ddp_set_stream(d, s2));
    DRC(d, ringlet_ddp_pre_forward(d, RINGLET_DDP_SYNC));
    for (int i = m.np - 1; i >= 0; i--) DRC(d, ringlet_ddp_grad_ready(d, i, g2[i]));
    DRC(d, ringlet_ddp_finish(d));
    __atomic_store_n(&rel.go, 1, __ATOMIC_RELEASE);
    if (started) pthread_join(th, NULL);
    CHECK(D->stream_sync(s1) == RL_DEV_OK && D->stream_sync(s2) == RL_DEV_OK, "stream switch: sync: %s",
          rl_dev_error());
    for (int i = 0; i < m.np; i++) {
        check_grad(m.p[i].grad, &m.p[i], 11, i, 1, 1, 0, -1, "stream switch (the first iteration's, on s1)");
        check_grad(g2[i], &m.p[i], 12, i, 1, 1, 0, -1, "stream switch (the second iteration's, on s2)");
    }
    DRC(d, ringlet_ddp_pre_forward(d, RINGLET_DDP_NO_GRAD)); /* collects the iteration */
out:
    if (d) ringlet_ddp_destroy(d);
    for (int i = 0; i < 16; i++)
        if (g2[i]) tfree(g2[i]);
    if (s1) D->stream_destroy(s1);
    if (s2) D->stream_destroy(s2);
    if (hold) D->host_free(hold);
    model_free(&m);
}

int main(int argc, char **argv) {
    int iters = 4;
    for (int k = 1; k < argc; k++) {
        if (!strcmp(argv[k], "--big")) g_np = 13;
        else if (!strcmp(argv[k], "--memory") && k + 1 < argc) g_dev = !strcmp(argv[++k], "device");
        else if (!strcmp(argv[k], "--iters") && k + 1 < argc) iters = atoi(argv[++k]);
        else {
            fprintf(stderr, "usage: ddp [--big] [--iters N] [--memory host|device]\n");
            return 2;
        }
    }
    if (ringlet_comm_init_env(&g_comm) != RINGLET_SUCCESS) {
        fprintf(stderr, "%s\n", ringlet_comm_last_error(NULL));
        return 1;
    }
    ringlet_comm_rank(g_comm, &g_rank);
    ringlet_comm_size(g_comm, &g_size);

    test_init_and_buckets();
    test_sync(iters, 0, 1, RINGLET_DDP_COMPRESS_NONE, "sync");
    test_sync(iters, 1, 1, RINGLET_DDP_COMPRESS_NONE, "view");
    test_sync(3, 0, 0, RINGLET_DDP_COMPRESS_NONE, "sum");
    test_sync(3, 0, 1, RINGLET_DDP_COMPRESS_FLOAT16, "float16 compression");
    test_sync(3, 1, 1, RINGLET_DDP_COMPRESS_BFLOAT16, "bfloat16 compression+view");
    test_sync_opts(3, 0, 1, RINGLET_DDP_COMPRESS_NONE, 1, "rebuild");
    test_sync_opts(3, 1, 1, RINGLET_DDP_COMPRESS_FLOAT16, 1, "rebuild+view+float16");
    test_init_only();
    test_nosync(0);
    test_nosync(1);
    test_unused();
    test_nosync_unused();
    test_misaligned();
    test_misuse_create();
    test_other_device();
    test_grad_elsewhere();
    test_device_full();
    test_rebuild_device_full();
    test_misuse_iterations();
    if (g_dev) test_nowait();
    if (g_dev) test_stream_switch();

    printf("ddp: rank %d of %d: %d checks, %d failed%s\n", g_rank, g_size, g_checks, g_failed,
           g_dev ? " on device memory" : "");
    fflush(stdout);
    ringlet_comm_destroy(g_comm);
    return g_failed ? 1 : 0;
}
