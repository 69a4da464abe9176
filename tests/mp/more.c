/* All-to-all, gather, scatter, groups, split and pre-multiplied sums (public API), on
 * host memory or (--memory device) device memory through the device layer's backend.
 * Random inputs (element i of rank r in case k is a hash of (seed, r, k, i)), every
 * result checked exactly: integers, and float32 values that are small integers (sums and
 * scalings by powers of two are exact).
 *
 *   more [--memory host|device] [--count N] [--seed S]
 *
 * Cases, each at counts 0, 1, 7 and N (default 100003):
 *   alltoall (out of place, in place), gather and scatter at every root (out of place and
 *   in place), blocking and non-blocking (with a stream on device memory);
 *   a group of sends and receives with every peer (an all-to-all made by hand, which
 *   deadlocks unless the group runs them at once), a group of 100 messages to the next rank
 *   and 100 from the previous one, a group of two all-reduces and a
 *   broadcast (run in order), a group that uses two streams (device); on a new
 *   communicator, a group of an all-reduce and then sends and receives with every peer;
 *   split: by rank parity, keys reversed (new ranks in reverse order), rank 0 with
 *   RINGLET_SPLIT_NOCOLOR, also inside a group; an all-gather on the new communicators
 *   checks membership; a split with a bad color, then a NULL newcomm, on the last rank
 *   fails on every rank naming it; (device) a group over two communicators, one of them
 *   mixing host and device buffers, runs none of its calls;
 *   pre-multiplied sum with a host scalar and (device) a device scalar (and device memory as a host scalar, refused): all-reduce,
 *   reduce, reduce-scatter; inside a group, each op destroyed before group_end;
 *   host memory: an isend larger than the shared-memory FIFO, then a small all-reduce
 *   before its wait, while the receiver receives first;
 *   argument errors: a group_end without group_start, a non-blocking call inside a group,
 *   an op of another datatype, a call refused inside a group (group_end then runs none of
 *   the group's calls and returns the refusal), a split whose new leader cannot make an
 *   id (every rank fails at once).
 * Prints "more: rank R of P: N checks, F failed"; exit 0 iff none failed.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "device.h"
#include "ringlet.h"

static int g_rank, g_P;
static long g_checks, g_failed;
static uint64_t g_seed = 7;
static const rl_device_ops *D;
static rl_dev_stream_t g_st;
static ringlet_comm_t g_comm;

#define FAIL(...)                                                                                                      \
    do {                                                                                                               \
        g_failed++;                                                                                                    \
        if (g_failed < 30) {                                                                                           \
            printf("FAIL rank %d: ", g_rank);                                                                          \
            printf(__VA_ARGS__);                                                                                       \
            printf("\n");                                                                                              \
        }                                                                                                              \
    } while (0)

static uint64_t mix(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
/* A small integer in [-1000, 1000]: exact as float32 through every sum here. */
static int32_t val(int rank, int k, size_t i) {
    return (int32_t)(mix(g_seed * 1000003 + (uint64_t)rank * 7919 + (uint64_t)k * 104729 + i) % 2001) - 1000;
}

/* Buffers: host memory, or device memory with host twins to fill and check. */
typedef struct {
    int32_t *h;
    void *d;
    size_t n;
} buf_t;

static void buf_new(buf_t *b, size_t n) {
    b->n = n;
    b->h = calloc(n + 1, sizeof(int32_t));
    b->d = NULL;
    if (D && D->mem_alloc(&b->d, (n + 1) * sizeof(int32_t)) != RL_DEV_OK) {
        printf("FAIL rank %d: device memory: %s\n", g_rank, rl_dev_error());
        exit(1);
    }
}
static void buf_free(buf_t *b) {
    free(b->h);
    if (b->d) D->mem_free(b->d);
}
/* What the calls get. */
static int32_t *p_of(buf_t *b) { return D ? (int32_t *)b->d : b->h; }
static void to_dev(buf_t *b) {
    if (D && (D->memcpy_async(b->d, b->h, b->n * 4 + 4, g_st) != RL_DEV_OK || D->stream_sync(g_st) != RL_DEV_OK)) exit(3);
}
static void to_host(buf_t *b) {
    if (D && (D->memcpy_async(b->h, b->d, b->n * 4 + 4, g_st) != RL_DEV_OK || D->stream_sync(g_st) != RL_DEV_OK)) exit(3);
}
static void *stream(void) { return D ? (void *)g_st : NULL; }

static void check_rc(const char *what, ringlet_result_t rc) {
    g_checks++;
    if (rc != RINGLET_SUCCESS) {
        FAIL("%s returned %d (%s): %s", what, (int)rc, ringlet_strerror(rc), ringlet_comm_last_error(g_comm));
        printf("more: rank %d of %d: stopped at the error above\n", g_rank, g_P);
        exit(1);
    }
}

static void expect(const char *what, const int32_t *got, size_t n, int32_t (*want)(size_t, void *), void *arg) {
    for (size_t i = 0; i < n; i++) {
        g_checks++;
        int32_t w = want(i, arg);
        if (got[i] != w) {
            FAIL("%s: element %zu is %d, want %d", what, i, got[i], w);
            return;
        }
    }
}

typedef struct {
    int k, root, blk;
    size_t n;
} ctx_t;

/* all-to-all: block q of the result comes from rank q, its block (this rank) */
static int32_t want_a2a(size_t i, void *a) {
    ctx_t *c = a;
    int q = (int)(i / c->n);
    return val(q, c->k, (size_t)g_rank * c->n + i % c->n);
}
static int32_t want_gather(size_t i, void *a) {
    ctx_t *c = a;
    return val((int)(i / c->n), c->k, i % c->n);
}
static int32_t want_scatter(size_t i, void *a) {
    ctx_t *c = a;
    return val(c->root, c->k, (size_t)g_rank * c->n + i);
}

static void test_spread(size_t n, int k) {
    size_t P = (size_t)g_P;
    for (int inplace = 0; inplace < 2; inplace++) {
        buf_t s, r;
        buf_new(&s, n * P);
        buf_new(&r, n * P);
        for (size_t i = 0; i < n * P; i++) s.h[i] = val(g_rank, k, i), r.h[i] = -7;
        if (inplace) memcpy(r.h, s.h, n * P * 4);
        to_dev(&s), to_dev(&r);
        ringlet_request_t q = NULL;
        const int32_t *sp = inplace ? p_of(&r) : p_of(&s);
        if (k & 1) {
            check_rc("ialltoall", ringlet_ialltoall(sp, p_of(&r), n, RINGLET_INT32, g_comm, stream(), &q));
            check_rc("wait", ringlet_wait(&q));
        } else {
            check_rc("alltoall", ringlet_alltoall(sp, p_of(&r), n, RINGLET_INT32, g_comm, stream()));
        }
        to_host(&r);
        ctx_t c = {k, 0, 0, n};
        expect(inplace ? "alltoall in place" : "alltoall", r.h, n * P, want_a2a, &c);
        for (int root = 0; root < g_P; root++) {
            /* gather: the root's sendbuf is its block of recvbuf in place */
            for (size_t i = 0; i < n * P; i++) r.h[i] = -7;
            for (size_t i = 0; i < n; i++) s.h[i] = val(g_rank, k, i);
            if (inplace && g_rank == root) memcpy(r.h + (size_t)root * n, s.h, n * 4);
            to_dev(&s), to_dev(&r);
            const int32_t *gs = inplace && g_rank == root ? p_of(&r) + (size_t)root * n : p_of(&s);
            check_rc("gather", ringlet_gather(gs, p_of(&r), n, RINGLET_INT32, root, g_comm, stream()));
            to_host(&r);
            if (g_rank == root) expect("gather", r.h, n * P, want_gather, &c);
            /* scatter: the root's recvbuf is its block of sendbuf in place */
            c.root = root;
            for (size_t i = 0; i < n * P; i++) s.h[i] = val(g_rank, k, i), r.h[i] = -7;
            to_dev(&s), to_dev(&r);
            int32_t *rs = inplace && g_rank == root ? p_of(&s) + (size_t)root * n : p_of(&r);
            check_rc("scatter", ringlet_scatter(p_of(&s), rs, n, RINGLET_INT32, root, g_comm, stream()));
            if (inplace && g_rank == root) {
                to_host(&s);
                expect("scatter in place", s.h + (size_t)root * n, n, want_scatter, &c);
            } else {
                to_host(&r);
                expect("scatter", r.h, n, want_scatter, &c);
            }
        }
        buf_free(&s), buf_free(&r);
    }
}

/* A group of sends and receives with every peer: an all-to-all by hand. */
static void test_group_p2p(size_t n, int k) {
    size_t P = (size_t)g_P;
    buf_t s, r;
    buf_new(&s, n * P);
    buf_new(&r, n * P);
    for (size_t i = 0; i < n * P; i++) s.h[i] = val(g_rank, k, i), r.h[i] = -7;
    memcpy(r.h + (size_t)g_rank * n, s.h + (size_t)g_rank * n, n * 4);
    to_dev(&s), to_dev(&r);
    check_rc("group_start", ringlet_group_start());
    for (int q = 0; q < g_P; q++) {
        if (q == g_rank) continue;
        check_rc("send in a group", ringlet_send(p_of(&s) + (size_t)q * n, n, RINGLET_INT32, q, g_comm, stream()));
        check_rc("recv in a group", ringlet_recv(p_of(&r) + (size_t)q * n, n, RINGLET_INT32, q, g_comm, stream()));
    }
    check_rc("group_end", ringlet_group_end());
    to_host(&r);
    ctx_t c = {k, 0, 0, n};
    expect("group of sends and receives", r.h, n * P, want_a2a, &c);
    buf_free(&s), buf_free(&r);
}

static int32_t want_many(size_t i, void *a) {
    ctx_t *c = a;
    return val((g_rank + g_P - 1) % g_P, c->k, i);
}

/* A group of many messages to one peer (NCCL sets no limit; batched sends and receives
 * make hundreds): 100 sends of 3 elements each to the next rank, 100 receives from the
 * previous one, in order. */
static void test_group_many(int k) {
    if (g_P < 2) return;
    enum { M = 100, E = 3 };
    buf_t s, r;
    buf_new(&s, M * E);
    buf_new(&r, M * E);
    for (size_t i = 0; i < M * E; i++) s.h[i] = val(g_rank, k, i), r.h[i] = -7;
    to_dev(&s), to_dev(&r);
    int next = (g_rank + 1) % g_P, prev = (g_rank + g_P - 1) % g_P;
    check_rc("group_start", ringlet_group_start());
    for (int m = 0; m < M; m++) {
        check_rc("one of 100 sends in a group", ringlet_send(p_of(&s) + m * E, E, RINGLET_INT32, next, g_comm, stream()));
        check_rc("one of 100 receives in a group", ringlet_recv(p_of(&r) + m * E, E, RINGLET_INT32, prev, g_comm, stream()));
    }
    check_rc("group_end (100 messages each way)", ringlet_group_end());
    to_host(&r);
    ctx_t c = {k, 0, 0, M * E};
    expect("a group of 100 messages from the previous rank", r.h, M * E, want_many, &c);
    buf_free(&s), buf_free(&r);
}

static int32_t want_sum(size_t i, void *a) {
    ctx_t *c = a;
    int32_t t = 0;
    for (int q = 0; q < g_P; q++) t += val(q, c->k, i);
    return t;
}

/* A group of an all-reduce and then sends and receives with every peer, as the first
 * calls of a new communicator (nothing prepared before it: on device memory the
 * messages need a staging lane per peer, which the all-reduce before them must not hide). */
static void test_group_mixed(size_t n, int k) {
    size_t P = (size_t)g_P;
    ringlet_comm_t nc = NULL;
    check_rc("comm_split (a new communicator)", ringlet_comm_split(g_comm, 0, g_rank, &nc));
    if (!nc) return;
    buf_t a, s, r;
    buf_new(&a, n), buf_new(&s, n * P), buf_new(&r, n * P);
    for (size_t i = 0; i < n; i++) a.h[i] = val(g_rank, k + 1, i);
    for (size_t i = 0; i < n * P; i++) s.h[i] = val(g_rank, k, i), r.h[i] = -7;
    memcpy(r.h + (size_t)g_rank * n, s.h + (size_t)g_rank * n, n * 4);
    to_dev(&a), to_dev(&s), to_dev(&r);
    check_rc("group_start", ringlet_group_start());
    check_rc("allreduce in a mixed group", ringlet_allreduce(p_of(&a), p_of(&a), n, RINGLET_INT32, RINGLET_SUM, nc, stream()));
    for (int q = 0; q < g_P; q++) {
        if (q == g_rank) continue;
        check_rc("send in a mixed group", ringlet_send(p_of(&s) + (size_t)q * n, n, RINGLET_INT32, q, nc, stream()));
        check_rc("recv in a mixed group", ringlet_recv(p_of(&r) + (size_t)q * n, n, RINGLET_INT32, q, nc, stream()));
    }
    check_rc("group_end (all-reduce, then sends and receives)", ringlet_group_end());
    to_host(&a), to_host(&r);
    ctx_t c = {k + 1, 0, 0, n};
    expect("all-reduce of a mixed group", a.h, n, want_sum, &c);
    c.k = k;
    expect("sends and receives of a mixed group", r.h, n * P, want_a2a, &c);
    buf_free(&a), buf_free(&s), buf_free(&r);
    check_rc("destroy of the new communicator", ringlet_comm_destroy(nc));
}
static int32_t want_bcast(size_t i, void *a) {
    ctx_t *c = a;
    return val(c->root, c->k, i);
}

/* A group of collectives: two all-reduces and a broadcast, in order; on device memory
 * the second all-reduce on a second stream. */
static void test_group_colls(size_t n, int k, rl_dev_stream_t st2) {
    buf_t a, b, c2;
    buf_new(&a, n), buf_new(&b, n), buf_new(&c2, n);
    for (size_t i = 0; i < n; i++) a.h[i] = val(g_rank, k, i), b.h[i] = val(g_rank, k + 1, i), c2.h[i] = val(g_rank, k + 2, i);
    to_dev(&a), to_dev(&b), to_dev(&c2);
    /* A group cancelled first (two levels): its all-reduce of a is dropped, so a is summed
     * once below, not twice, and no group is left open. */
    int dropped[2] = {-1, -1};
    check_rc("group_start", ringlet_group_start());
    check_rc("group_start", ringlet_group_start());
    check_rc("allreduce in a cancelled group",
             ringlet_allreduce(p_of(&a), p_of(&a), n, RINGLET_INT32, RINGLET_SUM, g_comm, stream()));
    check_rc("group_cancel (inner)", ringlet_group_cancel(&dropped[0]));
    check_rc("group_cancel (outer)", ringlet_group_cancel(&dropped[1]));
    g_checks += 2;
    if (dropped[0] != 0 || dropped[1] != 1) FAIL("group_cancel dropped %d then %d calls, not 0 then 1", dropped[0], dropped[1]);
    if (ringlet_group_end() != RINGLET_ERR_INVALID_USAGE) FAIL("group_end after a cancelled group: not INVALID_USAGE");
    check_rc("group_start", ringlet_group_start());
    check_rc("allreduce in a group", ringlet_allreduce(p_of(&a), p_of(&a), n, RINGLET_INT32, RINGLET_SUM, g_comm, stream()));
    check_rc("allreduce in a group",
             ringlet_allreduce(p_of(&b), p_of(&b), n, RINGLET_INT32, RINGLET_SUM, g_comm, D ? (void *)st2 : NULL));
    int root = k % g_P;
    check_rc("broadcast in a group", ringlet_broadcast(p_of(&c2), p_of(&c2), n, RINGLET_INT32, root, g_comm, stream()));
    check_rc("group_end", ringlet_group_end());
    if (D && D->stream_sync(st2) != RL_DEV_OK) exit(3);
    to_host(&a), to_host(&b), to_host(&c2);
    ctx_t c = {k, root, 0, n};
    expect("first all-reduce of a group", a.h, n, want_sum, &c);
    c.k = k + 1;
    expect("second all-reduce of a group (second stream)", b.h, n, want_sum, &c);
    c.k = k + 2;
    expect("broadcast of a group", c2.h, n, want_bcast, &c);
    buf_free(&a), buf_free(&b), buf_free(&c2);
}

static int32_t want_premul(size_t i, void *a) {
    ctx_t *c = a;
    int32_t t = 0;
    for (int q = 0; q < g_P; q++) t += val(q, c->k, i) * (q + 1) * 2; /* rank q's scalar is 2(q + 1) */
    return t;
}
static float fval(size_t i, void *a) { return (float)want_premul(i, a); }

/* Pre-multiplied sums: int32 with a host scalar; float32 with a host or device scalar. */
static void test_premul(size_t n, int k) {
    size_t P = (size_t)g_P;
    int32_t si = 2 * (g_rank + 1);
    float sf = (float)si;
    ringlet_op_t opi, opf;
    check_rc("op_create_premul_sum (int32, host)",
             ringlet_op_create_premul_sum(&opi, &si, RINGLET_INT32, RINGLET_SCALAR_HOST, g_comm));
    void *dscal = NULL;
    if (D) {
        if (D->mem_alloc(&dscal, 4) != RL_DEV_OK || D->memcpy_async(dscal, &sf, 4, g_st) != RL_DEV_OK ||
            D->stream_sync(g_st) != RL_DEV_OK)
            exit(3);
        check_rc("op_create_premul_sum (float32, device)",
                 ringlet_op_create_premul_sum(&opf, dscal, RINGLET_FLOAT32, RINGLET_SCALAR_DEVICE, g_comm));
        /* device memory said to be a host scalar: refused (read on the host, it would fault) */
        ringlet_op_t bad;
        ringlet_result_t rc = ringlet_op_create_premul_sum(&bad, dscal, RINGLET_FLOAT32, RINGLET_SCALAR_HOST, g_comm);
        g_checks++;
        if (rc != RINGLET_ERR_INVALID_ARGUMENT || !strstr(ringlet_comm_last_error(g_comm), "host scalar"))
            FAIL("a host scalar in device memory: %s: %s", ringlet_strerror(rc), ringlet_comm_last_error(g_comm));
        /* A device scalar on host buffers: refused on every rank at the call, the
         * communicator unharmed (found when the call ran, it failed the communicator). */
        float hb[4] = {1, 2, 3, 4}, hr[4];
        rc = ringlet_allreduce(hb, hr, 4, RINGLET_FLOAT32, opf, g_comm, NULL);
        g_checks++;
        if (rc != RINGLET_ERR_INVALID_ARGUMENT || !strstr(ringlet_comm_last_error(g_comm), "device scalar"))
            FAIL("a device scalar on host buffers: %s: %s", ringlet_strerror(rc), ringlet_comm_last_error(g_comm));
        check_rc("allreduce premul, device scalar, no elements on host buffers",
                 ringlet_allreduce(hb, hr, 0, RINGLET_FLOAT32, opf, g_comm, NULL));
        int32_t x = g_rank + 1, sum = 0;
        check_rc("allreduce after the refusal", ringlet_allreduce(&x, &sum, 1, RINGLET_INT32, RINGLET_SUM, g_comm, NULL));
        g_checks++;
        if (sum != g_P * (g_P + 1) / 2) FAIL("allreduce after the refusal: %d, want %d", sum, g_P * (g_P + 1) / 2);
    } else {
        check_rc("op_create_premul_sum (float32, host)",
                 ringlet_op_create_premul_sum(&opf, &sf, RINGLET_FLOAT32, RINGLET_SCALAR_HOST, g_comm));
    }
    si = 99; /* host scalars are read at creation */
    ctx_t c = {k, 0, 0, n};
    buf_t a, r;
    buf_new(&a, n * P), buf_new(&r, n * P);
    /* all-reduce, int32, in place */
    for (size_t i = 0; i < n; i++) a.h[i] = val(g_rank, k, i);
    to_dev(&a);
    check_rc("allreduce premul", ringlet_allreduce(p_of(&a), p_of(&a), n, RINGLET_INT32, opi, g_comm, stream()));
    to_host(&a);
    expect("allreduce with a pre-multiplied sum (int32)", a.h, n, want_premul, &c);
    /* all-reduce, float32 (the op's own datatype) */
    float *f = (float *)a.h;
    for (size_t i = 0; i < n; i++) f[i] = (float)val(g_rank, k, i);
    to_dev(&a);
    check_rc("allreduce premul float", ringlet_allreduce(p_of(&a), p_of(&r), n, RINGLET_FLOAT32, opf, g_comm, stream()));
    to_host(&r);
    for (size_t i = 0; i < n; i++) {
        g_checks++;
        if (((float *)r.h)[i] != fval(i, &c)) {
            FAIL("allreduce with a pre-multiplied sum (float32%s): element %zu is %g, want %g", D ? ", device scalar" : "",
                 i, (double)((float *)r.h)[i], (double)fval(i, &c));
            break;
        }
    }
    /* reduce-scatter, int32 */
    for (size_t i = 0; i < n * P; i++) a.h[i] = val(g_rank, k, i);
    to_dev(&a);
    check_rc("reduce_scatter premul", ringlet_reduce_scatter(p_of(&a), p_of(&r), n, RINGLET_INT32, opi, g_comm, stream()));
    to_host(&r);
    for (size_t i = 0; i < n; i++) {
        g_checks++;
        int32_t w = want_premul((size_t)g_rank * n + i, &c);
        if (r.h[i] != w) {
            FAIL("reduce_scatter with a pre-multiplied sum: element %zu is %d, want %d", i, r.h[i], w);
            break;
        }
    }
    /* reduce to the last rank */
    for (size_t i = 0; i < n; i++) a.h[i] = val(g_rank, k, i);
    to_dev(&a);
    check_rc("reduce premul", ringlet_reduce(p_of(&a), p_of(&r), n, RINGLET_INT32, opi, g_P - 1, g_comm, stream()));
    to_host(&r);
    if (g_rank == g_P - 1) expect("reduce with a pre-multiplied sum", r.h, n, want_premul, &c);
    /* the op is for int32 only */
    g_checks++;
    if (n && ringlet_allreduce(p_of(&a), p_of(&a), n, RINGLET_INT64, opi, g_comm, stream()) != RINGLET_ERR_INVALID_ARGUMENT)
        FAIL("a pre-multiplied sum of int32 was accepted for int64");
    check_rc("op_destroy", ringlet_op_destroy(opi, g_comm));
    check_rc("op_destroy", ringlet_op_destroy(opf, g_comm));
    g_checks++;
    if (ringlet_op_destroy(opi, g_comm) != RINGLET_ERR_INVALID_ARGUMENT) FAIL("an op destroyed twice was accepted");
    if (dscal) D->mem_free(dscal);
    buf_free(&a), buf_free(&r);
}

/* float16 averages of values near float16's top (32768 .. 49120, multiples of 32, so
 * exact): their sum over 2 or more ranks passes 65504, the largest float16, so a sum
 * divided after would be infinite. The result must be the mean within the bound of
 * collectives.c: eps * sum|x| + eps * |mean|, eps = 2^-10. */
static uint16_t big_half(int rank, int k, size_t i) {
    unsigned m = (unsigned)(mix(g_seed ^ ((uint64_t)k << 40) ^ ((uint64_t)rank << 32) ^ i) % 512);
    return (uint16_t)((30u << 10) | m); /* 2^15 * (1 + m / 1024) = 32768 + 32 m */
}
static double half_value(uint16_t h) {
    int e = (h >> 10) & 31;
    double m = h & 1023, v = e == 31 ? (m ? NAN : INFINITY) : e ? ldexp(1024 + m, e - 25) : ldexp(m, -24);
    return h >> 15 ? -v : v;
}
static void test_avg_half(size_t n, int k) {
    if (g_P < 2) return;
    size_t P = (size_t)g_P, words = (n * P + 1) / 2;
    buf_t a, r;
    buf_new(&a, words), buf_new(&r, words);
    uint16_t *ha = (uint16_t *)a.h, *hr = (uint16_t *)r.h;
    for (int form = 0; form < 3; form++) { /* all-reduce, reduce to the last rank, reduce-scatter */
        size_t in_n = form == 2 ? n * P : n;
        for (size_t i = 0; i < in_n; i++) ha[i] = big_half(g_rank, k + form, i);
        to_dev(&a);
        const char *what = form == 0 ? "allreduce" : form == 1 ? "reduce" : "reduce_scatter";
        ringlet_result_t rc = form == 0 ? ringlet_allreduce(p_of(&a), p_of(&r), n, RINGLET_FLOAT16, RINGLET_AVG, g_comm, stream())
                              : form == 1 ? ringlet_reduce(p_of(&a), p_of(&r), n, RINGLET_FLOAT16, RINGLET_AVG, g_P - 1, g_comm, stream())
                                          : ringlet_reduce_scatter(p_of(&a), p_of(&r), n, RINGLET_FLOAT16, RINGLET_AVG, g_comm, stream());
        check_rc(what, rc);
        to_host(&r);
        if (form == 1 && g_rank != g_P - 1) continue;
        size_t base = form == 2 ? (size_t)g_rank * n : 0;
        for (size_t i = 0; i < n; i++) {
            double sum = 0;
            for (int q = 0; q < g_P; q++) sum += half_value(big_half(q, k + form, base + i));
            double want = sum / g_P, got = half_value(hr[i]), eps = ldexp(1, -10);
            g_checks++;
            if (!(fabs(got - want) <= eps * sum + eps * want)) {
                FAIL("%s of float16 with avg, values near 65504 / %d: element %zu is %g, want %g", what, g_P, i, got, want);
                break;
            }
        }
    }
    buf_free(&a), buf_free(&r);
}

/* Pre-multiplied sums inside a group, made as PyTorch's NCCL process group makes them:
 * each op created for its call and destroyed as soon as the call returns, before
 * group_end runs the call. A reduce-scatter (int32, host scalar 3(r + 1)), then an
 * all-reduce (float32, scalar 2(r + 1); on the device with device memory) whose op takes
 * the number the first one freed: the group must use each op as it was at its call. */
typedef struct {
    int k, m;
} pm_t;
static int32_t want_scaled(size_t i, void *a) {
    pm_t *c = a;
    int32_t t = 0;
    for (int q = 0; q < g_P; q++) t += val(q, c->k, i) * (q + 1) * c->m;
    return t;
}

static void test_premul_group(size_t n, int k) {
    size_t P = (size_t)g_P;
    int32_t si = 3 * (g_rank + 1);
    float sf = (float)(2 * (g_rank + 1));
    void *dscal = NULL;
    if (D && (D->mem_alloc(&dscal, 4) != RL_DEV_OK || D->memcpy_async(dscal, &sf, 4, g_st) != RL_DEV_OK ||
              D->stream_sync(g_st) != RL_DEV_OK))
        exit(3);
    buf_t a, r, b;
    buf_new(&a, n * P), buf_new(&r, n), buf_new(&b, n);
    for (size_t i = 0; i < n * P; i++) a.h[i] = val(g_rank, k, i);
    float *f = (float *)b.h;
    for (size_t i = 0; i < n; i++) f[i] = (float)val(g_rank, k + 1, i);
    to_dev(&a), to_dev(&b);
    ringlet_op_t oi, of;
    check_rc("group_start", ringlet_group_start());
    check_rc("op_create_premul_sum in a group",
             ringlet_op_create_premul_sum(&oi, &si, RINGLET_INT32, RINGLET_SCALAR_HOST, g_comm));
    si = 99;
    check_rc("reduce_scatter premul in a group",
             ringlet_reduce_scatter(p_of(&a), p_of(&r), n, RINGLET_INT32, oi, g_comm, stream()));
    check_rc("op_destroy in a group", ringlet_op_destroy(oi, g_comm));
    check_rc("op_create_premul_sum in a group",
             ringlet_op_create_premul_sum(&of, D ? dscal : (void *)&sf, RINGLET_FLOAT32,
                                          D ? RINGLET_SCALAR_DEVICE : RINGLET_SCALAR_HOST, g_comm));
    check_rc("allreduce premul in a group",
             ringlet_allreduce(p_of(&b), p_of(&b), n, RINGLET_FLOAT32, of, g_comm, stream()));
    check_rc("op_destroy in a group", ringlet_op_destroy(of, g_comm));
    check_rc("group_end (pre-multiplied sums)", ringlet_group_end());
    to_host(&r), to_host(&b);
    pm_t c = {k, 3};
    for (size_t i = 0; i < n; i++) {
        g_checks++;
        int32_t w = want_scaled((size_t)g_rank * n + i, &c);
        if (r.h[i] != w) {
            FAIL("reduce_scatter with a pre-multiplied sum in a group: element %zu is %d, want %d", i, r.h[i], w);
            break;
        }
    }
    pm_t cf = {k + 1, 2};
    for (size_t i = 0; i < n; i++) {
        g_checks++;
        float w = (float)want_scaled(i, &cf);
        if (f[i] != w) {
            FAIL("allreduce with a pre-multiplied sum in a group (float32%s): element %zu is %g, want %g",
                 D ? ", device scalar" : "", i, (double)f[i], (double)w);
            break;
        }
    }
    if (dscal) D->mem_free(dscal);
    buf_free(&a), buf_free(&r), buf_free(&b);
}

/* A group whose one exchange is with a partner both ways (rank ^ 2; none where that is past
 * the last rank), as the first call of a fresh communicator (a split of everyone): with
 * more peers than device lanes the exchange goes in rounds by distance, and the send
 * (distance d) and the receive (P - d) may share a round: two lanes for one peer (one lane
 * was made per peer, and the second was missing: the call failed). */
static void test_pair_fresh(int k) {
    ringlet_comm_t sub = NULL;
    check_rc("comm_split (everyone)", ringlet_comm_split(g_comm, 0, g_rank, &sub));
    if (!sub) return;
    int q = g_rank ^ 2;
    const size_t n = 1000;
    buf_t s, r;
    buf_new(&s, n);
    buf_new(&r, n);
    for (size_t i = 0; i < n; i++) s.h[i] = val(g_rank, k, i), r.h[i] = -7;
    to_dev(&s), to_dev(&r);
    if (q < g_P) {
        check_rc("group_start", ringlet_group_start());
        check_rc("send to the partner", ringlet_send(p_of(&s), n, RINGLET_INT32, q, sub, stream()));
        check_rc("recv from the partner", ringlet_recv(p_of(&r), n, RINGLET_INT32, q, sub, stream()));
        check_rc("group_end (one partner)", ringlet_group_end());
        to_host(&r);
        size_t bad = 0;
        for (size_t i = 0; i < n; i++) bad += r.h[i] != val(q, k, i);
        g_checks++;
        if (bad) FAIL("a group with one partner both ways on a fresh communicator: %zu of %zu wrong", bad, n);
    }
    check_rc("destroy the split", ringlet_comm_destroy(sub));
    buf_free(&s), buf_free(&r);
}

/* Device runs: a host-buffer all-to-all before any on device buffers. Its connections are
 * made on the progress thread, whose current device is 0 until set: a transport that maps
 * device memory (cuda_ipc, forced) must still make them on the communicator's device, as
 * the device calls after it use them (with one simulated device per rank, the peer's
 * memory mapped on device 0 was refused to rank 1's device). */
static void test_host_first(void) {
    /* an all-to-all: every rank a peer, not only the ring's neighbours (connected at init) */
    int32_t *x = malloc(sizeof(int32_t) * 100 * (size_t)g_P), *y = malloc(sizeof(int32_t) * 100 * (size_t)g_P);
    if (!x || !y) exit(3);
    for (int i = 0; i < 100 * g_P; i++) x[i] = (int32_t)(i * 31 + g_rank * 7);
    ringlet_request_t q = NULL; /* non-blocking: the progress thread runs it */
    check_rc("host all-to-all before the device calls", ringlet_ialltoall(x, y, 100, RINGLET_INT32, g_comm, NULL, &q));
    if (q) check_rc("its wait", ringlet_wait(&q));
    int bad = 0;
    for (int r = 0; r < g_P; r++)
        for (int i = 0; i < 100; i++) bad += y[r * 100 + i] != (int32_t)((g_rank * 100 + i) * 31 + r * 7);
    g_checks++;
    if (bad) FAIL("host all-to-all before the device calls: %d wrong", bad);
    free(x);
    free(y);
}

/* Device runs: a group over two communicators where one mixes host and device buffers
 * (refused): none of the group's calls runs, not even the other communicator's (they ran,
 * and the group ran in part). */
static void test_group_refused_whole(void) {
    if (!D) return;
    ringlet_comm_t sub = NULL;
    check_rc("comm_split (a copy)", ringlet_comm_split(g_comm, 0, g_rank, &sub));
    void *dev = NULL;
    if (!sub || D->mem_alloc(&dev, 8 * sizeof(int32_t)) != RL_DEV_OK) {
        FAIL("group refused whole: setup: %s", rl_dev_error());
        if (sub) ringlet_comm_destroy(sub);
        return;
    }
    int32_t x[8], host[8];
    for (int i = 0; i < 8; i++) x[i] = host[i] = g_rank * 8 + i + 1;
    check_rc("group_start", ringlet_group_start());
    check_rc("allreduce on host memory (comm)", ringlet_allreduce(x, x, 8, RINGLET_INT32, RINGLET_SUM, g_comm, NULL));
    check_rc("allreduce on device memory (sub)", ringlet_allreduce(dev, dev, 8, RINGLET_INT32, RINGLET_SUM, sub, NULL));
    check_rc("allreduce on host memory (sub)", ringlet_allreduce(host, host, 8, RINGLET_INT32, RINGLET_SUM, sub, NULL));
    ringlet_result_t rc = ringlet_group_end();
    const char *m = ringlet_comm_last_error(NULL);
    int changed = 0;
    for (int i = 0; i < 8; i++) changed += x[i] != g_rank * 8 + i + 1;
    g_checks++;
    if (rc != RINGLET_ERR_INVALID_ARGUMENT || !strstr(m, "none of the group's 3 call(s) ran") ||
        !strstr(m, "mixes host and device") || changed)
        FAIL("a group mixing host and device memory on one of its communicators: %s: %s; %d element(s) of the other "
             "communicator's all-reduce changed", ringlet_strerror(rc), m, changed);
    D->mem_free(dev);
    check_rc("destroy of the copy", ringlet_comm_destroy(sub));
}

/* A communicator destroyed while this thread's open group holds calls of it: the group's
 * end reports it and runs none of them (it used the freed communicator: a crash under
 * the address sanitizer). */
static void test_destroy_in_group(void) {
    ringlet_comm_t sub = NULL;
    check_rc("comm_split (one rank each)", ringlet_comm_split(g_comm, g_rank, 0, &sub));
    if (!sub) return;
    int32_t x[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    check_rc("group_start", ringlet_group_start());
    check_rc("allreduce recorded", ringlet_allreduce(x, x, 8, RINGLET_INT32, RINGLET_SUM, sub, NULL));
    check_rc("destroy inside the group", ringlet_comm_destroy(sub));
    ringlet_result_t rc = ringlet_group_end();
    const char *m = ringlet_comm_last_error(NULL);
    g_checks++;
    if (rc != RINGLET_ERR_INVALID_USAGE || !strstr(m, "destroyed"))
        FAIL("group_end after its communicator's destroy: %s: %s", ringlet_strerror(rc), m);
}

static void test_split(int in_group) {
    /* by parity, keys reversed; rank 0 stays out */
    int color = g_rank == 0 ? RINGLET_SPLIT_NOCOLOR : g_rank % 2, key = -g_rank;
    ringlet_comm_t sub = NULL;
    if (in_group) check_rc("group_start", ringlet_group_start());
    check_rc("comm_split", ringlet_comm_split(g_comm, color, key, &sub));
    if (in_group) check_rc("group_end", ringlet_group_end());
    g_checks++;
    if (color == RINGLET_SPLIT_NOCOLOR) {
        if (sub) FAIL("split with RINGLET_SPLIT_NOCOLOR gave a communicator");
        return;
    }
    if (!sub) {
        FAIL("split gave no communicator");
        return;
    }
    int n = 0, pos = 0;
    for (int q = 1; q < g_P; q++)
        if (q % 2 == color) {
            n++;
            if (q > g_rank) pos++; /* keys reversed: higher old ranks first */
        }
    int nr = -1, ns = -1;
    ringlet_comm_rank(sub, &nr);
    ringlet_comm_size(sub, &ns);
    g_checks++;
    if (nr != pos || ns != n) FAIL("split: new rank %d of %d, want %d of %d", nr, ns, pos, n);
    /* every member's old rank, gathered: checks who is in it and in which order */
    int32_t *all = calloc((size_t)ns, 4), me = g_rank;
    check_rc("allgather on the split communicator", ringlet_allgather(&me, all, 1, RINGLET_INT32, sub, NULL));
    for (int i = 0, q = g_P - 1; i < ns; q--) {
        if (q < 1 || q % 2 != color) continue;
        g_checks++;
        if (all[i] != q) FAIL("split: member %d is old rank %d, want %d", i, all[i], q);
        i++;
    }
    free(all);
    check_rc("destroy of the split communicator", ringlet_comm_destroy(sub));
}

/* A split where one rank's arguments are wrong (a negative color, then a NULL newcomm):
 * that rank still takes part, and every rank's split fails at once naming it (not the
 * others waiting in its exchange till the deadline); the communicator stays usable. */
static void test_split_bad_args(void) {
    int bad = g_P - 1;
    for (int k = 0; k < 2; k++) {
        ringlet_comm_t sub = NULL;
        int color = g_rank == bad && k == 0 ? -5 : 0;
        ringlet_result_t rc = ringlet_comm_split(g_comm, color, 0, g_rank == bad && k == 1 ? NULL : &sub);
        const char *m = ringlet_comm_last_error(g_comm);
        char want[64];
        snprintf(want, sizeof want, k == 0 ? "rank %d passed color -5" : "rank %d passed a NULL newcomm", bad);
        g_checks++;
        if (rc != RINGLET_ERR_INVALID_ARGUMENT || sub || !strstr(m, want))
            FAIL("split with a bad argument on rank %d: %s%s: %s (want '%s')", bad, ringlet_strerror(rc),
                 sub ? ", and a communicator" : "", m, want);
        if (sub) ringlet_comm_destroy(sub);
    }
    int32_t x = g_rank + 1;
    check_rc("allreduce after the refused splits", ringlet_allreduce(&x, &x, 1, RINGLET_INT32, RINGLET_SUM, g_comm, NULL));
    g_checks++;
    if (x != g_P * (g_P + 1) / 2) FAIL("allreduce after the refused splits: %d, want %d", x, g_P * (g_P + 1) / 2);
}

/* Host memory: rank 0 sends 8 MiB to rank 1 (non-blocking: more than the shared-memory
 * FIFO holds), then joins a small all-reduce (the board over shared memory) before it
 * waits; rank 1 receives first, blocking. Rank 0's wait on the board must still move its
 * message, or both wait for each other until the deadline. */
static void test_isend_then_collective(void) {
    if (g_P < 2 || D) return;
    size_t n = (size_t)2 << 20; /* int32: 8 MiB */
    int32_t *buf = malloc(n * 4), x = 1;
    if (!buf) exit(3);
    ringlet_request_t q = NULL;
    if (g_rank == 0) {
        for (size_t i = 0; i < n; i++) buf[i] = val(0, 77, i);
        check_rc("isend of 8 MiB", ringlet_isend(buf, n, RINGLET_INT32, 1, g_comm, NULL, &q));
    } else if (g_rank == 1) {
        check_rc("recv of 8 MiB", ringlet_recv(buf, n, RINGLET_INT32, 0, g_comm, NULL));
        size_t bad = 0;
        for (size_t i = 0; i < n; i++) bad += buf[i] != val(0, 77, i);
        g_checks++;
        if (bad) FAIL("8 MiB sent while the sender waited in an all-reduce: %zu elements wrong", bad);
    }
    check_rc("a small all-reduce after the isend", ringlet_allreduce(&x, &x, 1, RINGLET_INT32, RINGLET_SUM, g_comm, NULL));
    if (q) check_rc("wait for the isend", ringlet_wait(&q));
    g_checks++;
    if (x != g_P) FAIL("the all-reduce after the isend: %d, want %d", x, g_P);
    free(buf);
}

/* finalize waits for a non-blocking send the caller has not waited for: rank 1 takes it
 * only after rank 0 said (over another communicator) that it is about to finalize, and
 * 32 MiB cannot all sit in the transport's buffers, so a finalize that did not wait would
 * return with the send unfinished. */
static void test_finalize_waits_isend(void) {
    if (g_P < 2 || D) return;
    ringlet_comm_t sub = NULL;
    check_rc("comm_split for finalize", ringlet_comm_split(g_comm, 0, g_rank, &sub));
    size_t n = (size_t)8 << 20; /* int32: 32 MiB */
    int32_t *buf = malloc(n * 4), go = 0;
    if (!buf || !sub) exit(3);
    if (g_rank == 0) {
        ringlet_request_t q = NULL;
        for (size_t i = 0; i < n; i++) buf[i] = val(0, 91, i);
        check_rc("isend of 32 MiB", ringlet_isend(buf, n, RINGLET_INT32, 1, sub, NULL, &q));
        go = 1;
        check_rc("send of the go-ahead", ringlet_send(&go, 1, RINGLET_INT32, 1, g_comm, NULL));
        check_rc("finalize with an isend not waited for", ringlet_comm_finalize(sub));
        int done = 0;
        check_rc("test after finalize", ringlet_test(&q, &done));
        g_checks++;
        if (!done) FAIL("finalize returned before the isend it was given had finished");
        if (!done) check_rc("wait for the isend", ringlet_wait(&q));
    } else if (g_rank == 1) {
        check_rc("recv of the go-ahead", ringlet_recv(&go, 1, RINGLET_INT32, 0, g_comm, NULL));
        check_rc("recv of 32 MiB", ringlet_recv(buf, n, RINGLET_INT32, 0, sub, NULL));
        size_t bad = 0;
        for (size_t i = 0; i < n; i++) bad += buf[i] != val(0, 91, i);
        g_checks++;
        if (bad || go != 1) FAIL("32 MiB sent while the sender finalized: %zu elements wrong (go-ahead %d)", bad, go);
    }
    check_rc("destroy of the finalized communicator", ringlet_comm_destroy(sub));
    free(buf);
}

/* A failure of one rank's own inside an operation (here a group whose send to itself has
 * no receive, on rank 0 alone) fails the communicator, so that rank 1, waiting in that
 * group for rank 0's message, is told at once why and by whom, not at its deadline. */
static void test_local_failure_told(void) {
    if (g_P < 2 || D) return;
    ringlet_comm_t sub = NULL;
    check_rc("comm_split for the local failure", ringlet_comm_split(g_comm, 0, g_rank, &sub));
    if (!sub) exit(3);
    /* Every rank's split (its init of sub) done before rank 0 fails sub: else a rank
     * still in that init fails there, rightly, instead of in the receive below. */
    check_rc("barrier after the split", ringlet_barrier(g_comm, NULL));
    int32_t x[2] = {g_rank, g_rank};
    if (g_rank == 0) {
        check_rc("group_start", ringlet_group_start());
        check_rc("send to itself (no receive)", ringlet_send(&x[0], 1, RINGLET_INT32, 0, sub, NULL));
        check_rc("send to rank 1", ringlet_send(&x[1], 1, RINGLET_INT32, 1, sub, NULL));
        ringlet_result_t rc = ringlet_group_end();
        g_checks++;
        if (rc == RINGLET_SUCCESS || !strstr(ringlet_comm_last_error(sub), "sends to this rank itself"))
            FAIL("a group with a send to itself and no receive: %s (%s)", ringlet_strerror(rc), ringlet_comm_last_error(sub));
    } else if (g_rank == 1) {
        ringlet_result_t rc = ringlet_recv(&x[0], 1, RINGLET_INT32, 0, sub, NULL);
        const char *m = ringlet_comm_last_error(sub);
        g_checks++;
        if (rc == RINGLET_SUCCESS || !strstr(m, "rank 0") || !strstr(m, "sends to this rank itself"))
            FAIL("rank 1's receive from rank 0, whose group failed there: %s (%s)", ringlet_strerror(rc), m);
    }
    ringlet_comm_destroy(sub);
}

/* A group whose send to this rank itself cannot meet its receive (8 bytes against 4),
 * on rank 0 alone, is refused before any of its calls runs: rank 0's all-reduce of the
 * group leaves its output as it was, and the others' all-reduce fails at once naming
 * rank 0 (they are told why), rather than running while rank 0's group fails after it. */
static void test_group_self_checked_first(void) {
    if (g_P < 2 || D) return;
    ringlet_comm_t sub = NULL;
    check_rc("comm_split for the group's self check", ringlet_comm_split(g_comm, 0, g_rank, &sub));
    if (!sub) exit(3);
    check_rc("barrier after the split", ringlet_barrier(g_comm, NULL));
    int32_t in[4], out[4], self_in[2] = {7, 8}, self_out[1] = {-1};
    for (int i = 0; i < 4; i++) in[i] = (int32_t)val(g_rank, 93, (size_t)i), out[i] = -5;
    check_rc("group_start", ringlet_group_start());
    /* The others may hear of rank 0's failure before they record their call: then it is
     * the recording that fails (and the group's end runs nothing), as it should. */
    ringlet_result_t rc = ringlet_allreduce(in, out, 4, RINGLET_INT32, RINGLET_SUM, sub, NULL);
    char m[512];
    snprintf(m, sizeof m, "%s", ringlet_comm_last_error(sub));
    if (g_rank == 0) {
        check_rc("all-reduce in the group", rc);
        check_rc("send of 8 bytes to itself", ringlet_send(self_in, 2, RINGLET_INT32, 0, sub, NULL));
        check_rc("receive of 4 bytes from itself", ringlet_recv(self_out, 1, RINGLET_INT32, 0, sub, NULL));
    }
    ringlet_result_t end = ringlet_group_end();
    if (!rc) rc = end, snprintf(m, sizeof m, "%s", ringlet_comm_last_error(sub));
    g_checks++;
    if (g_rank == 0) {
        int touched = self_out[0] != -1;
        for (int i = 0; i < 4; i++) touched |= out[i] != -5;
        if (rc == RINGLET_SUCCESS || !strstr(m, "meets a receive of 4 bytes") || touched)
            FAIL("a group whose send to itself meets a smaller receive: %s (%s); outputs %s", ringlet_strerror(rc), m,
                 touched ? "written (a call ran)" : "untouched");
    } else if (rc != RINGLET_ERR_REMOTE || !strstr(m, "rank 0") || !strstr(m, "meets a receive")) {
        FAIL("rank %d's group, whose all-reduce rank 0 refused: %s (%s)", g_rank, ringlet_strerror(rc), m);
    }
    ringlet_comm_destroy(sub);
}

/* Empty calls with NULL buffers (an empty tensor's pointer may be NULL): each succeeds
 * and moves nothing, in every form; the all-reduce after them checks the ranks are still
 * in step. */
static void test_zero_null(void) {
    int next = (g_rank + 1) % g_P, prev = (g_rank + g_P - 1) % g_P, root = g_P - 1;
    ringlet_comm_t c = g_comm;
    void *s = stream();
    check_rc("empty allreduce, NULL", ringlet_allreduce(NULL, NULL, 0, RINGLET_FLOAT32, RINGLET_SUM, c, s));
    check_rc("empty broadcast, NULL", ringlet_broadcast(NULL, NULL, 0, RINGLET_INT32, 0, c, s));
    check_rc("empty reduce, NULL", ringlet_reduce(NULL, NULL, 0, RINGLET_INT32, RINGLET_MAX, root, c, s));
    check_rc("empty allgather, NULL", ringlet_allgather(NULL, NULL, 0, RINGLET_INT32, c, s));
    check_rc("empty reduce_scatter, NULL", ringlet_reduce_scatter(NULL, NULL, 0, RINGLET_INT32, RINGLET_SUM, c, s));
    check_rc("empty alltoall, NULL", ringlet_alltoall(NULL, NULL, 0, RINGLET_INT32, c, s));
    check_rc("empty gather, NULL", ringlet_gather(NULL, NULL, 0, RINGLET_INT32, root, c, s));
    check_rc("empty scatter, NULL", ringlet_scatter(NULL, NULL, 0, RINGLET_INT32, root, c, s));
    if (g_P > 1) {
        check_rc("group_start", ringlet_group_start());
        check_rc("empty send in a group, NULL", ringlet_send(NULL, 0, RINGLET_INT32, next, c, s));
        check_rc("empty recv in a group, NULL", ringlet_recv(NULL, 0, RINGLET_INT32, prev, c, s));
        check_rc("group_end of empty sends", ringlet_group_end());
        /* Without a stream: on one stream the receive would hold the send back. */
        ringlet_request_t qs = NULL, qr = NULL;
        check_rc("empty irecv, NULL", ringlet_irecv(NULL, 0, RINGLET_INT32, prev, c, NULL, &qr));
        check_rc("empty isend, NULL", ringlet_isend(NULL, 0, RINGLET_INT32, next, c, NULL, &qs));
        check_rc("wait for the empty irecv", ringlet_wait(&qr));
        check_rc("wait for the empty isend", ringlet_wait(&qs));
        if (g_rank % 2 == 0) {
            check_rc("empty send, NULL", ringlet_send(NULL, 0, RINGLET_INT32, next, c, s));
            check_rc("empty recv, NULL", ringlet_recv(NULL, 0, RINGLET_INT32, prev, c, s));
        } else {
            check_rc("empty recv, NULL", ringlet_recv(NULL, 0, RINGLET_INT32, prev, c, s));
            check_rc("empty send, NULL", ringlet_send(NULL, 0, RINGLET_INT32, next, c, s));
        }
    }
    buf_t a;
    buf_new(&a, 1);
    a.h[0] = g_rank + 1;
    to_dev(&a);
    check_rc("allreduce after the empty calls", ringlet_allreduce(p_of(&a), p_of(&a), 1, RINGLET_INT32, RINGLET_SUM, c, s));
    to_host(&a);
    g_checks++;
    if (a.h[0] != g_P * (g_P + 1) / 2) FAIL("allreduce after the empty calls: %d, want %d", a.h[0], g_P * (g_P + 1) / 2);
    buf_free(&a);
}

static void test_errors(void) {
    g_checks++;
    if (ringlet_group_end() != RINGLET_ERR_INVALID_USAGE) FAIL("group_end without group_start was accepted");
    int32_t x = 1;
    ringlet_request_t q = (ringlet_request_t)&x; /* not a request: the refusal must clear it */
    check_rc("group_start", ringlet_group_start());
    g_checks++;
    if (ringlet_iallreduce(&x, &x, 1, RINGLET_INT32, RINGLET_SUM, g_comm, NULL, &q) != RINGLET_ERR_INVALID_USAGE)
        FAIL("a non-blocking call inside a group was accepted");
    g_checks++;
    if (q != NULL) FAIL("a non-blocking call refused inside a group left its request set");
    check_rc("empty group_end", ringlet_group_end());
    /* A call refused inside a group spoils it (on every rank here): group_end runs none of
     * its calls and returns the refusal, so the valid all-reduce after it is not run. */
    int32_t y[4] = {g_rank + 1, 2, 3, 4};
    check_rc("group_start", ringlet_group_start());
    g_checks++;
    if (ringlet_allreduce(y, NULL, 4, RINGLET_INT32, RINGLET_SUM, g_comm, NULL) != RINGLET_ERR_INVALID_ARGUMENT)
        FAIL("an all-reduce into NULL inside a group was accepted");
    check_rc("a valid all-reduce after it, in the group", ringlet_allreduce(y, y, 4, RINGLET_INT32, RINGLET_SUM, g_comm, NULL));
    ringlet_result_t rc = ringlet_group_end();
    g_checks++;
    if (rc != RINGLET_ERR_INVALID_ARGUMENT || !strstr(ringlet_comm_last_error(NULL), "none of the group"))
        FAIL("group_end of a group with a refused call: %s (%s)", ringlet_strerror(rc), ringlet_comm_last_error(NULL));
    g_checks++;
    if (y[0] != g_rank + 1 || y[1] != 2) FAIL("group_end ran the rest of a group with a refused call: %d %d", y[0], y[1]);
    check_rc("a group after it", ringlet_group_start());
    check_rc("... its all-reduce", ringlet_allreduce(y, y, 4, RINGLET_INT32, RINGLET_SUM, g_comm, NULL));
    check_rc("... and its group_end", ringlet_group_end());
    g_checks++;
    if (y[1] != 2 * g_P) FAIL("the group after a spoilt one: %d, want %d", y[1], 2 * g_P);
    /* A split whose new leader (rank 0) cannot make an id (its process holds the most
     * unused ids it may): every rank fails at once, and the communicator goes on. */
    ringlet_unique_id_t held[64];
    int nheld = 0;
    while (g_rank == 0 && nheld < 64 && ringlet_get_unique_id(&held[nheld]) == RINGLET_SUCCESS) nheld++;
    ringlet_comm_t sub = NULL;
    rc = ringlet_comm_split(g_comm, 0, g_rank, &sub);
    g_checks++;
    if (rc == RINGLET_SUCCESS || sub) FAIL("split with a leader that cannot make an id succeeded");
    else if (g_rank > 0 && !strstr(ringlet_comm_last_error(g_comm), "rank 0, the first of color 0"))
        FAIL("split with a leader that cannot make an id: %s", ringlet_comm_last_error(g_comm));
    if (sub) ringlet_comm_destroy(sub);
    for (int i = 0; i < nheld; i++) ringlet_unique_id_release(&held[i]);
    y[0] = 1;
    check_rc("an all-reduce after the failed split", ringlet_allreduce(y, y, 1, RINGLET_INT32, RINGLET_SUM, g_comm, NULL));
    g_checks++;
    if (y[0] != g_P) FAIL("the all-reduce after the failed split: %d, want %d", y[0], g_P);
}

int main(int argc, char **argv) {
    size_t N = 100003;
    int device = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--memory") && i + 1 < argc) device = !strcmp(argv[++i], "device");
        else if (!strcmp(argv[i], "--count") && i + 1 < argc) N = strtoull(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--seed") && i + 1 < argc) g_seed = strtoull(argv[++i], NULL, 10);
        else return fprintf(stderr, "usage: more [--memory host|device] [--count N] [--seed S]\n"), 2;
    }
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (device && !(D = rl_device())) {
        printf("FAIL: --memory device, but no device backend: %s\n", rl_device_unavailable());
        return 1;
    }
    /* The rank's device first, as with NCCL: the communicator's is the one current at init. */
    rl_dev_stream_t st2 = NULL;
    if (D) {
        int nd = 1;
        const char *lr = getenv("LOCAL_RANK");
        if (D->count(&nd) != RL_DEV_OK || D->set_device((lr ? atoi(lr) : 0) % nd) != RL_DEV_OK ||
            D->stream_create(&g_st) != RL_DEV_OK || D->stream_create(&st2) != RL_DEV_OK) {
            printf("FAIL: device setup: %s\n", rl_dev_error());
            return 1;
        }
    }
    if (ringlet_comm_init_env(&g_comm) != RINGLET_SUCCESS) {
        printf("FAIL: %s\n", ringlet_comm_last_error(NULL));
        return 1;
    }
    ringlet_comm_rank(g_comm, &g_rank);
    ringlet_comm_size(g_comm, &g_P);
    if (D) test_host_first();
    size_t counts[] = {0, 1, 7, N};
    for (int ci = 0; ci < 4; ci++) {
        size_t n = counts[ci];
        test_spread(n, 10 * ci);
        test_group_p2p(n, 10 * ci + 1);
        if (ci == 3) test_group_mixed(n, 10 * ci + 7);
        test_group_colls(n, 10 * ci + 2, st2);
        test_premul_group(n, 10 * ci + 6); /* first: its own device needs, not premul's */
        test_premul(n, 10 * ci + 5);
        test_avg_half(n, 10 * ci + 8);
    }
    test_group_many(60);
    test_pair_fresh(61);
    test_split(0);
    test_split(1); /* inside a group: runs at the call */
    test_split_bad_args();
    test_group_refused_whole();
    test_destroy_in_group();
    test_isend_then_collective();
    test_finalize_waits_isend();
    test_zero_null();
    test_local_failure_told();
    test_group_self_checked_first();
    test_errors();
    check_rc("finalize", ringlet_comm_finalize(g_comm));
    int dev = -2, cur = -2;
    check_rc("comm_device", ringlet_comm_device(g_comm, &dev));
    /* On host memory: the device current at init where the process has a device backend (a
     * GPU here: as NCCL's communicator has its CUDA device), else -1, as get_device says. */
    check_rc("get_device", ringlet_get_device(&cur));
    g_checks++;
    if (D ? dev < 0 : dev != cur) FAIL("comm_device says %d, expected %d", dev, D ? -2 : cur);
    check_rc("destroy", ringlet_comm_destroy(g_comm));
    if (D) D->stream_destroy(g_st), D->stream_destroy(st2);
    printf("more: rank %d of %d: %ld checks, %ld failed%s\n", g_rank, g_P, g_checks, g_failed, D ? " on device memory" : "");
    return g_failed ? 1 : 0;
}
