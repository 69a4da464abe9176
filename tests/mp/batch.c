/* Many collectives queued on one stream before any synchronisation (device memory).
 *
 *   batch [--batch B] [--seed S] [--count N]
 *
 * Every rank builds the same list of cases (allreduce, broadcast, reduce, allgather,
 * reduce_scatter x int8..float64 x sum, prod, max, min, avg x counts 0, 1, P-1, P+1, N x
 * in place and out of place x roots) and runs them B at a time: it allocates every case's
 * own device buffers and pinned host buffers first (allocations must not overlap a held
 * stream), then for each case queues the copy of its input to the device, the call, and
 * the copy of the result back, all on one stream, before it moves to the next case; after
 * B cases it synchronises the stream once and checks every result.
 * So up to B calls, with their copies, are queued behind each other, as a training step
 * queues them (the GPU suite's "--batch 64" run at P = 3 failed this way once, in a
 * staging copy: int64 avg, count 1, in place).
 *
 * Inputs are small integers (a hash of seed, case, rank, element): every sum, product,
 * min and max is exact in every type, so results are checked bit for bit; integer avg is
 * the sum divided by P truncated toward zero; float avg is left out (sum / P need not be
 * exact). Prints "batch: rank R of P: N cases in M batches of B, F failed"; exit 0 iff
 * none failed.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "device.h"
#include "ringlet.h"

enum { K_ALLREDUCE, K_BROADCAST, K_REDUCE, K_ALLGATHER, K_REDUCE_SCATTER, K_COUNT };
static const char *const kind_name[K_COUNT] = {"allreduce", "broadcast", "reduce", "allgather", "reduce_scatter"};
static const ringlet_datatype_t dtypes[] = {RINGLET_INT8,  RINGLET_UINT8,  RINGLET_INT32,   RINGLET_UINT32,
                                            RINGLET_INT64, RINGLET_UINT64, RINGLET_FLOAT32, RINGLET_FLOAT64};
static const char *const op_name[RINGLET_NUM_OPS] = {"sum", "prod", "max", "min", "avg"};

typedef struct {
    int kind, dt, op, root, inplace;
    size_t n;
    /* per case, while its batch runs */
    void *dsend, *drecv;   /* device buffers (drecv NULL when in place) */
    unsigned char *input;  /* host image of the input (kept until the batch is synchronised) */
    unsigned char *result; /* host copy of what the case produced */
    size_t result_bytes;
} case_t;

static int g_rank, g_P;
static uint64_t g_seed = 20261125;
static long g_failed;
static const rl_device_ops *D;
static rl_dev_stream_t g_stream;

static uint64_t mix(uint64_t x) {
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

static int is_unsigned(int dt) { return dt == RINGLET_UINT8 || dt == RINGLET_UINT32 || dt == RINGLET_UINT64; }

/* Element i of rank r's input in case k: small enough that no result overflows. */
static int64_t input(int k, const case_t *c, int r, size_t i) {
    uint64_t h = mix(g_seed ^ mix(((uint64_t)k << 40) ^ ((uint64_t)r << 32) ^ i));
    if (c->op == RINGLET_PROD) return is_unsigned(c->dt) ? (int64_t)(h % 3) : (int64_t)(h % 5) - 2;
    return is_unsigned(c->dt) ? (int64_t)(h % 16) : (int64_t)(h % 16) - 8;
}

static void store(int dt, void *buf, size_t i, int64_t v) {
    switch (dt) {
    case RINGLET_INT8: ((int8_t *)buf)[i] = (int8_t)v; break;
    case RINGLET_UINT8: ((uint8_t *)buf)[i] = (uint8_t)v; break;
    case RINGLET_INT32: ((int32_t *)buf)[i] = (int32_t)v; break;
    case RINGLET_UINT32: ((uint32_t *)buf)[i] = (uint32_t)v; break;
    case RINGLET_INT64: ((int64_t *)buf)[i] = v; break;
    case RINGLET_UINT64: ((uint64_t *)buf)[i] = (uint64_t)v; break;
    case RINGLET_FLOAT32: ((float *)buf)[i] = (float)v; break;
    default: ((double *)buf)[i] = (double)v; break;
    }
}

static int64_t reduce_all(int k, const case_t *c, size_t i) {
    int64_t acc = input(k, c, 0, i);
    for (int r = 1; r < g_P; r++) {
        int64_t v = input(k, c, r, i);
        switch (c->op) {
        case RINGLET_PROD: acc *= v; break;
        case RINGLET_MAX: acc = v > acc ? v : acc; break;
        case RINGLET_MIN: acc = v < acc ? v : acc; break;
        default: acc += v; break;
        }
    }
    return c->op == RINGLET_AVG ? acc / g_P : acc; /* C division truncates toward zero */
}

static void dev_ok(const char *what, int rc) {
    if (rc == RL_DEV_OK) return;
    printf("FAIL rank %d: %s: %s\n", g_rank, what, rl_dev_error());
    exit(1);
}

/* Elements in the send and the receive buffer (in place: one buffer of the larger). */
static void sizes(const case_t *c, size_t *ns, size_t *nr) {
    *ns = c->kind == K_REDUCE_SCATTER ? c->n * (size_t)g_P : c->n;
    *nr = c->kind == K_ALLGATHER ? c->n * (size_t)g_P : c->n;
}

/* The host image of this rank's buffer before the call. */
static void fill(int k, const case_t *c, void *host, size_t nbuf) {
    size_t es = ringlet_datatype_size(c->dt);
    memset(host, 0xA5, nbuf * es); /* receive areas: a marker the call must overwrite */
    if (c->kind == K_ALLGATHER && c->inplace) {
        for (size_t i = 0; i < c->n; i++) store(c->dt, host, (size_t)g_rank * c->n + i, input(k, c, g_rank, i));
    } else if (c->kind == K_REDUCE_SCATTER) {
        for (size_t i = 0; i < c->n * (size_t)g_P; i++) store(c->dt, host, i, input(k, c, g_rank, i));
    } else {
        for (size_t i = 0; i < c->n; i++) store(c->dt, host, i, input(k, c, g_rank, i));
    }
}

static ringlet_result_t call(const case_t *c, ringlet_comm_t comm) {
    size_t es = ringlet_datatype_size(c->dt);
    void *s = c->dsend, *r = c->inplace ? c->dsend : c->drecv;
    switch (c->kind) {
    case K_ALLREDUCE: return ringlet_allreduce(s, r, c->n, c->dt, c->op, comm, g_stream);
    case K_BROADCAST: return ringlet_broadcast(s, r, c->n, c->dt, c->root, comm, g_stream);
    case K_REDUCE: return ringlet_reduce(s, r, c->n, c->dt, c->op, c->root, comm, g_stream);
    case K_ALLGATHER:
        if (c->inplace) s = (char *)r + (size_t)g_rank * c->n * es;
        return ringlet_allgather(s, r, c->n, c->dt, comm, g_stream);
    default:
        if (c->inplace) r = (char *)s + (size_t)g_rank * c->n * es;
        return ringlet_reduce_scatter(s, r, c->n, c->dt, c->op, comm, g_stream);
    }
}

/* Case k's buffers and input, before anything of its batch is queued: allocating device
 * or pinned memory can synchronise the device, which must not happen while a stream is
 * held (ringlet holds g_stream from a queued call until it finishes). The host sides are
 * pinned: a copy with pageable memory returns only once done. */
static void alloc_case(int k, case_t *c) {
    size_t es = ringlet_datatype_size(c->dt), ns, nr;
    sizes(c, &ns, &nr);
    size_t nbuf = c->inplace ? (ns > nr ? ns : nr) : ns, bytes = nbuf * es + 1, rbytes = nr * es + 1;
    c->result_bytes = (c->inplace ? nbuf : nr) * es;
    dev_ok("host_alloc", D->host_alloc((void **)&c->input, bytes > rbytes ? bytes : rbytes));
    dev_ok("host_alloc", D->host_alloc((void **)&c->result, c->result_bytes + 1));
    fill(k, c, c->input, nbuf);
    dev_ok("mem_alloc", D->mem_alloc(&c->dsend, bytes));
    if (!c->inplace) dev_ok("mem_alloc", D->mem_alloc(&c->drecv, rbytes));
}

/* Queues case k: its input copy, call and result copy, all on g_stream. */
static void queue_case(int k, case_t *c, ringlet_comm_t comm) {
    size_t es = ringlet_datatype_size(c->dt), ns, nr;
    sizes(c, &ns, &nr);
    size_t nbuf = c->inplace ? (ns > nr ? ns : nr) : ns;
    dev_ok("copy of the input to the device", D->memcpy_async(c->dsend, c->input, nbuf * es, g_stream));
    /* The receive buffer starts as the marker (a memset queued on the stream). */
    if (!c->inplace) dev_ok("marker in the receive buffer", D->memset_async(c->drecv, 0xA5, nr * es, g_stream));
    ringlet_result_t rc = call(c, comm);
    if (rc) {
        printf("FAIL rank %d: case %d %s: returned %s: %s\n", g_rank, k, kind_name[c->kind], ringlet_strerror(rc),
               ringlet_comm_last_error(comm));
        exit(1);
    }
    dev_ok("copy of the result to the host",
           D->memcpy_async(c->result, c->inplace ? c->dsend : c->drecv, c->result_bytes, g_stream));
}

/* Checks case k's result once the stream is synchronised. */
static void check_case(int k, case_t *c) {
    size_t es = ringlet_datatype_size(c->dt), ns, nr;
    sizes(c, &ns, &nr);
    unsigned char want[8];
    size_t lo = 0, hi = 0; /* the elements of result that the call defines */
    if (c->kind == K_REDUCE && g_rank != c->root) hi = 0;
    else if (c->kind == K_REDUCE_SCATTER && c->inplace) lo = (size_t)g_rank * c->n, hi = lo + c->n;
    else hi = c->kind == K_ALLGATHER ? nr : c->n;
    for (size_t i = lo; i < hi; i++) {
        int64_t v;
        size_t j = i - lo;
        switch (c->kind) {
        case K_BROADCAST: v = input(k, c, c->root, i); break;
        case K_ALLGATHER: v = input(k, c, (int)(i / c->n), i % c->n); break;
        case K_REDUCE_SCATTER: v = reduce_all(k, c, (size_t)g_rank * c->n + j); break;
        default: v = reduce_all(k, c, i); break;
        }
        store(c->dt, want, 0, v);
        /* Floats by value: a product with a zero may rightly be -0. */
        int bad = c->dt == RINGLET_FLOAT32   ? ((float *)c->result)[i] != (float)v
                  : c->dt == RINGLET_FLOAT64 ? ((double *)c->result)[i] != (double)v
                                             : memcmp(want, c->result + i * es, es) != 0;
        if (bad) {
            g_failed++;
            printf("FAIL rank %d: case %d: %s(count=%zu, dtype %d, %s, root %d, %s): element %zu wrong (want %lld)\n",
                   g_rank, k, kind_name[c->kind], c->n, c->dt, op_name[c->op], c->root,
                   c->inplace ? "in place" : "out of place", i, (long long)v);
            break;
        }
    }
    D->host_free(c->result);
    D->host_free(c->input);
    D->mem_free(c->dsend);
    if (c->drecv) D->mem_free(c->drecv);
    c->result = c->input = NULL, c->dsend = c->drecv = NULL;
}

/* The cases, the same on every rank. */
static size_t make_cases(case_t *out, size_t cap, size_t big) {
    size_t counts[5] = {0, 1, (size_t)g_P - 1, (size_t)g_P + 1, big}, m = 0;
    for (int kind = 0; kind < K_COUNT; kind++)
        for (size_t d = 0; d < sizeof dtypes / sizeof *dtypes; d++)
            for (int op = 0; op < RINGLET_NUM_OPS; op++) {
                int reducing = kind != K_BROADCAST && kind != K_ALLGATHER;
                if (!reducing && op > 0) continue;
                if (reducing && op == RINGLET_AVG && dtypes[d] >= RINGLET_FLOAT16) continue;
                for (int ci = 0; ci < 5; ci++)
                    for (int inplace = 0; inplace < 2 && m < cap; inplace++)
                        out[m++] = (case_t){.kind = kind, .dt = dtypes[d], .op = op, .n = counts[ci],
                                            .inplace = inplace, .root = (int)((m + (size_t)ci) % (size_t)g_P)};
            }
    return m;
}

int main(int argc, char **argv) {
    int B = 64;
    size_t big = 1009;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--batch") && i + 1 < argc) B = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--seed") && i + 1 < argc) g_seed = strtoull(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--count") && i + 1 < argc) big = strtoull(argv[++i], NULL, 10);
        else return fprintf(stderr, "usage: batch [--batch B] [--seed S] [--count N]\n"), 2;
    }
    if (B < 1) B = 1;
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (!(D = rl_device())) return printf("FAIL: no device backend: %s\n", rl_device_unavailable()), 1;
    ringlet_comm_t comm;
    if (ringlet_comm_init_env(&comm)) return printf("FAIL: %s\n", ringlet_comm_last_error(NULL)), 1;
    ringlet_comm_rank(comm, &g_rank);
    ringlet_comm_size(comm, &g_P);
    const char *lr = getenv("LOCAL_RANK");
    int ndev = 1;
    dev_ok("device count", D->count(&ndev));
    dev_ok("set_device", D->set_device((lr ? atoi(lr) : 0) % (ndev > 0 ? ndev : 1)));
    dev_ok("stream_create", D->stream_create(&g_stream));
    static case_t cases[4096];
    size_t m = make_cases(cases, sizeof cases / sizeof *cases, big), nbatch = 0;
    for (size_t b0 = 0; b0 < m; b0 += (size_t)B, nbatch++) {
        size_t b1 = b0 + (size_t)B < m ? b0 + (size_t)B : m;
        for (size_t k = b0; k < b1; k++) alloc_case((int)k, &cases[k]);
        for (size_t k = b0; k < b1; k++) queue_case((int)k, &cases[k], comm);
        dev_ok("stream_sync after a batch", D->stream_sync(g_stream));
        ringlet_result_t a = ringlet_comm_get_async_error(comm);
        if (a) return printf("FAIL rank %d: async error after batch %zu: %s\n", g_rank, nbatch, ringlet_comm_last_error(comm)), 1;
        for (size_t k = b0; k < b1; k++) check_case((int)k, &cases[k]);
    }
    printf("batch: rank %d of %d: %zu cases in %zu batches of up to %d, %ld failed\n", g_rank, g_P, m, nbatch, B,
           g_failed);
    D->stream_destroy(g_stream);
    ringlet_comm_destroy(comm);
    return g_failed ? 1 : 0;
}
