/* The DDP layer (include/ringlet_ddp.h): parameter/buffer registration with a
 * cross-rank check, coalesced broadcasts, gradient buckets reduced with non-blocking
 * all-reduces while backward runs. Uses only the public include/ringlet.h.
 *
 * Life of an iteration (state in struct ringlet_ddp):
 *   pre_forward(1)  resets the per-iteration marks (ready[], pending per bucket).
 *   grad_ready(i)   copies a small gradient i into its bucket slot (or, compressing,
 *                   into the wire buffer as float16/bfloat16, times 1/nranks); a large
 *                   one stays where it is and will be all-reduced in place; decrements
 *                   the bucket's pending count; then launches every bucket from
 *                   next_launch on whose pending count is 0 (in index order, so every
 *                   rank issues the same all-reduces in the same order; averaging is the
 *                   all-reduce's RINGLET_AVG).
 *   finish()        marks the parameters nobody reported (unused, or an error), which
 *                   launches the rest; waits for the buckets in order and copies each
 *                   one's small gradients back as soon as it is in (so the copy of
 *                   bucket k overlaps the all-reduce of bucket k+1).
 *   rebuild_buckets: at the end of the first synchronising iteration, rank 0's report
 *                   order is broadcast and the buckets reassigned in it.
 *
 * Error flag: the last bucket carries one extra element (after its packed slots). Each
 * rank writes 1 there when it has found a usage error in this iteration before launching
 * that bucket, else 0; after the all-reduce, a nonzero value from the others makes every
 * rank's finish fail, so an error found on one rank is reported on all of them, and no
 * rank waits for a collective that another skipped (the erring rank still runs every
 * bucket).
 *
 * find_unused_parameters: after the last bucket, a uint8 MAX all-reduce of the
 * "used here" marks tells which parameters no rank used; their gradients are left as
 * they were (as PyTorch's DDP does).
 */
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ringlet.h"
#include "ringlet_ddp.h"
#include "ddp_internal.h"

#define MSG_MAX 640
#define ALIGN_BYTES 64                 /* parameter slots in a bucket start on this boundary */
#define BCAST_SLOT_BYTES ((size_t)16 << 20) /* one coalesced broadcast message (two in flight); RINGLET_DDP_BCAST_BYTES */
#define DIRECT_MIN_BYTES ((size_t)1 << 20) /* RINGLET_DDP_DIRECT_BYTES */
#define SUMMARY_WORDS 8
#define SUMMARY_MAGIC 0x72646470u      /* "rddp" */
#define MAX_NDIM 64

typedef struct {
    char *name;
    void *data;
    void *grad;
    size_t count, bytes;
    ringlet_datatype_t dtype;
    ringlet_ddp_memory_t memory;
    int ndim;
    int64_t *shape;
    int bucket;
    size_t offset; /* elements from the bucket's start */
    int direct;    /* large, uncompressed: all-reduced on its own, in place where its gradient is */
    void *launch_on; /* this iteration: where a direct parameter's all-reduce runs (gradient or slot) */
} tensor_t;

/* A bucket's memory: [packed slots][flag (last bucket only)][direct slots], each slot
 * aligned. The packed part (with the flag) travels as one all-reduce, from the bucket
 * (gradients are copied in); every direct parameter as one all-reduce of its own, run in
 * place on its gradient memory (no copy in or out) or on its slot (a gradient view, or
 * a parameter without gradient). Compressed buckets have no direct parameters. */
typedef struct {
    ringlet_datatype_t dtype, wire;
    ringlet_op_t op;    /* RINGLET_AVG (averaging, uncompressed) or RINGLET_SUM */
    size_t count;       /* elements of the whole bucket (slots, gaps, flag) */
    size_t packed_count; /* elements of the packed part, flag included */
    size_t flag_index;  /* the flag element (last bucket) */
    int has_flag;
    void *mem;          /* count elements of dtype; the gradient views */
    void *wire_mem;     /* count elements of wire (compression); == mem otherwise */
    int *params;        /* in assignment order */
    int nparams;
    int pending;        /* parameters not reported yet in this iteration */
    int launched;
    ringlet_request_t *reqs; /* packed part, then one per direct parameter */
    int nreqs, maxreqs;
    double t_launch, t_done;
    double t_complete;  /* first seen complete (polled at each report, waited in finish) */
    ringlet_result_t rc; /* its result once the request is gone */
    int first_pos;      /* place of its first parameter in the assignment order */
} bucket_t;

typedef enum { IT_NONE, IT_SYNC, IT_NOSYNC, IT_FINISHED } iter_state_t;

struct ringlet_ddp {
    ringlet_comm_t comm;
    int rank, nranks;
    int on_device;  /* the tensors are device memory: buckets and staging too, work on stream */
    void *stream;   /* device: the stream every copy, kernel and collective is ordered on */
    ringlet_result_t mem_rc; /* the first memory operation that failed (device) */
    char mem_msg[MSG_MAX];
    ringlet_ddp_options_t opt;
    tensor_t *params, *buffers;
    int nparams, nbuffers;
    bucket_t *buckets;
    int nbuckets;
    double scale;

    /* iteration */
    iter_state_t state;
    int prev_forward_synced;
    uint8_t *ready, *used_local, *used_global;
    ringlet_request_t used_req;
    int used_launched;
    int nready, next_launch;
    ringlet_result_t iter_rc; /* first error of this iteration */
    char iter_msg[MSG_MAX];
    double own_flag;

    /* buffer broadcasts */
    unsigned char *staging;
    size_t staging_slot;
    size_t bcast_cap; /* largest coalesced broadcast message */
    size_t direct_min; /* gradients of this many bytes or more are all-reduced in place (0: never) */

    /* rebuild_buckets */
    int *order;          /* this iteration's report order */
    int norder;
    int rebuilt;
    bucket_t **retired;  /* assignments replaced by a rebuild (their memory may still be viewed) */
    int *retired_n;
    int nretired;

    ringlet_ddp_stats_t stats;
    pthread_mutex_t mu;
    char last_error[MSG_MAX];
};

static _Thread_local char t_last_error[MSG_MAX];

/* ------------------------------------------------------------------------------ */

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

#if defined(__GNUC__) || defined(__clang__)
#define RL_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define RL_PRINTF(a, b)
#endif

/* snprintf into a message buffer; truncation is fine (and not warned about). */
RL_PRINTF(3, 4) static int msgf(char *buf, size_t n, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(buf, n, fmt, ap);
    va_end(ap);
    return k;
}

/* Records the message on the object (if any) and the thread; returns rc. */
RL_PRINTF(3, 4) static ringlet_result_t set_error(struct ringlet_ddp *d, ringlet_result_t rc, const char *fmt, ...) {
    char buf[MSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    memcpy(t_last_error, buf, sizeof buf);
    if (d) memcpy(d->last_error, buf, sizeof buf);
    return rc;
}

static const char *dtype_name(ringlet_datatype_t t) {
    static const char *names[] = {"int8",    "uint8",   "int32",   "uint32",  "int64",
                                  "uint64",  "float16", "float32", "float64", "bfloat16"};
    return (unsigned)t < RINGLET_NUM_DATATYPES ? names[t] : "unknown-dtype";
}

static int is_floating(ringlet_datatype_t t) {
    return t == RINGLET_FLOAT16 || t == RINGLET_FLOAT32 || t == RINGLET_FLOAT64 || t == RINGLET_BFLOAT16;
}

static size_t align_up(size_t x, size_t a) { return (x + a - 1) / a * a; }

static void *alloc_zero(size_t bytes) {
    size_t n = align_up(bytes ? bytes : 1, ALIGN_BYTES);
    void *p = aligned_alloc(ALIGN_BYTES, n);
    if (p) memset(p, 0, n);
    return p;
}

/* "parameter 3 ('fc.weight')" */
/* ---- memory: host memory at once, device memory on the DDP's stream ---------------- */

/* The stream of collectives and memory operations: none on host memory (calls complete
 * before they return), the DDP's stream (or the default one) on device memory. */
static void *dstream(const struct ringlet_ddp *d) {
    return d->on_device ? (d->stream ? d->stream : RINGLET_STREAM_DEFAULT) : NULL;
}
static void mem_note(struct ringlet_ddp *d, ringlet_result_t rc) {
    if (rc && !d->mem_rc) {
        d->mem_rc = rc;
        msgf(d->mem_msg, sizeof d->mem_msg, "%s", ringlet_comm_last_error(NULL));
    }
}
/* Zeroed memory of the tensors' kind (device memory from the device backend). */
static void *mem_alloc(struct ringlet_ddp *d, size_t bytes) {
    if (!d->on_device) return alloc_zero(bytes);
    void *p = NULL;
    if (ringlet_mem_alloc(&p, bytes ? bytes : 1)) return NULL;
    mem_note(d, ringlet_memset_async(p, 0, bytes, dstream(d)));
    return p;
}
static void mem_free(int on_device, void *p) {
    if (on_device) ringlet_mem_free(p);
    else free(p);
}
static void mem_copy(struct ringlet_ddp *d, void *dst, const void *src, size_t bytes) {
    mem_note(d, ringlet_memcpy_async(dst, src, bytes, dstream(d)));
}
static void mem_zero(struct ringlet_ddp *d, void *dst, size_t bytes) {
    mem_note(d, ringlet_memset_async(dst, 0, bytes, dstream(d)));
}
/* dst (dt) = src (st) * scale: compression to float16/bfloat16 and back. */
static void mem_convert(struct ringlet_ddp *d, void *dst, ringlet_datatype_t dt, const void *src, ringlet_datatype_t st,
                        size_t n, double scale) {
    mem_note(d, ringlet_convert_async(dst, dt, src, st, n, scale, dstream(d)));
}
/* One element of memory of the tensors' kind, written from or read into a double. */
static void mem_store_value(struct ringlet_ddp *d, void *dst, ringlet_datatype_t t, double v) {
    unsigned char e[8];
    rl_ddp_store_value(e, t, v);
    mem_copy(d, dst, e, ringlet_datatype_size(t));
}
static double mem_load_value(struct ringlet_ddp *d, const void *src, ringlet_datatype_t t) {
    unsigned char e[8] = {0};
    mem_copy(d, e, src, ringlet_datatype_size(t));
    if (d->on_device) mem_note(d, ringlet_stream_synchronize(dstream(d)));
    return rl_ddp_load_value(e, t);
}

static const char *tname(const tensor_t *t, const char *kind, int i, char *buf, size_t n) {
    if (t && t->name && t->name[0])
        msgf(buf, n, "%s %d ('%s')", kind, i, t->name);
    else
        msgf(buf, n, "%s %d", kind, i);
    return buf;
}

static void format_shape(char *buf, size_t n, ringlet_datatype_t dtype, int memory, int ndim, const int64_t *shape) {
    size_t k = (size_t)msgf(buf, n, "%s%s [", memory == RINGLET_DDP_DEVICE ? "device " : "", dtype_name(dtype));
    for (int j = 0; j < ndim && k < n; j++) k += (size_t)msgf(buf + k, n - k, "%s%" PRId64, j ? ", " : "", shape[j]);
    if (k < n) msgf(buf + k, n - k, "]");
}

/* ---- descriptors: what the ranks compare ---------------------------------------
 * A byte string: the options that must agree, then per tensor kind, dtype, memory,
 * ndim, count, shape and name. The hash (FNV-1a, 64 bits) covers everything but the
 * names. */

typedef struct {
    unsigned char *p;
    size_t len, cap;
    uint64_t hash;
    int ok;
} wbuf_t;

static void wb_put(wbuf_t *w, const void *src, size_t n, int hashed) {
    const unsigned char *s = src;
    if (hashed)
        for (size_t i = 0; i < n; i++) w->hash = (w->hash ^ s[i]) * 0x100000001b3ull;
    if (!w->ok) return;
    if (w->len + n > w->cap) {
        size_t cap = w->cap ? w->cap * 2 : 1024;
        while (cap < w->len + n) cap *= 2;
        unsigned char *q = realloc(w->p, cap);
        if (!q) {
            w->ok = 0;
            return;
        }
        w->p = q;
        w->cap = cap;
    }
    memcpy(w->p + w->len, s, n);
    w->len += n;
}
static void wb_u64(wbuf_t *w, uint64_t v) { wb_put(w, &v, 8, 1); }

enum { OPT_BUCKET_CAP, OPT_FIRST_CAP, OPT_BCAST_BUFFERS, OPT_AVERAGE, OPT_FIND_UNUSED, OPT_COMPRESSION, OPT_INIT_SYNC,
       OPT_BCAST_BYTES, OPT_DIRECT_BYTES, OPT_COUNT };
static const char *opt_names[OPT_COUNT] = {"bucket_cap_bytes",       "first_bucket_cap_bytes", "broadcast_buffers",
                                           "average_gradients",      "find_unused_parameters", "compression",
                                           "init_sync",              "RINGLET_DDP_BCAST_BYTES",
                                           "RINGLET_DDP_DIRECT_BYTES"};

static void opt_values(const ringlet_ddp_options_t *o, size_t bcast_cap, size_t direct_min, uint64_t v[OPT_COUNT]) {
    v[OPT_BUCKET_CAP] = o->bucket_cap_bytes;
    v[OPT_FIRST_CAP] = o->first_bucket_cap_bytes;
    v[OPT_BCAST_BUFFERS] = o->broadcast_buffers != 0;
    v[OPT_AVERAGE] = o->average_gradients != 0;
    v[OPT_FIND_UNUSED] = o->find_unused_parameters != 0;
    v[OPT_COMPRESSION] = (uint64_t)o->compression;
    v[OPT_INIT_SYNC] = o->init_sync != 0;
    v[OPT_BCAST_BYTES] = bcast_cap;
    v[OPT_DIRECT_BYTES] = direct_min;
}

static void describe(wbuf_t *w, const ringlet_ddp_options_t *o, size_t bcast_cap, size_t direct_min,
                     const tensor_t *ps, int np, const tensor_t *bs, int nb) {
    uint64_t v[OPT_COUNT];
    opt_values(o, bcast_cap, direct_min, v);
    for (int k = 0; k < OPT_COUNT; k++) wb_u64(w, v[k]);
    wb_u64(w, (uint64_t)np);
    wb_u64(w, (uint64_t)nb);
    for (int kind = 0; kind < 2; kind++) {
        const tensor_t *ts = kind ? bs : ps;
        int n = kind ? nb : np;
        for (int i = 0; i < n; i++) {
            const tensor_t *t = &ts[i];
            wb_u64(w, ((uint64_t)kind << 48) | ((uint64_t)t->dtype << 32) | ((uint64_t)t->memory << 16));
            wb_u64(w, (uint64_t)t->ndim);
            wb_u64(w, (uint64_t)t->count);
            for (int j = 0; j < t->ndim; j++) wb_u64(w, (uint64_t)t->shape[j]);
            uint64_t nl = strlen(t->name);
            wb_put(w, &nl, 8, 0);
            wb_put(w, t->name, nl, 0);
        }
    }
}

/* A parsed descriptor (pointers into the byte string). */
typedef struct {
    int kind, memory, ndim;
    ringlet_datatype_t dtype;
    uint64_t count;
    int64_t shape[MAX_NDIM];
    char name[128];
} dtensor_t;

typedef struct {
    const unsigned char *p;
    size_t len, pos;
    int ok;
} rbuf_t;

static uint64_t rb_u64(rbuf_t *r) {
    uint64_t v = 0;
    if (r->pos + 8 > r->len) {
        r->ok = 0;
        return 0;
    }
    memcpy(&v, r->p + r->pos, 8);
    r->pos += 8;
    return v;
}

static int rb_tensor(rbuf_t *r, dtensor_t *t) {
    uint64_t k = rb_u64(r);
    t->kind = (int)(k >> 48);
    t->dtype = (ringlet_datatype_t)((k >> 32) & 0xffff);
    t->memory = (int)((k >> 16) & 0xffff);
    t->ndim = (int)rb_u64(r);
    t->count = rb_u64(r);
    if (t->ndim < 0 || t->ndim > MAX_NDIM) r->ok = 0;
    for (int j = 0; r->ok && j < t->ndim; j++) t->shape[j] = (int64_t)rb_u64(r);
    uint64_t nl = rb_u64(r);
    t->name[0] = 0;
    if (!r->ok || nl > r->len - r->pos) {
        r->ok = 0;
        return 0;
    }
    size_t c = nl < sizeof t->name - 1 ? (size_t)nl : sizeof t->name - 1;
    memcpy(t->name, r->p + r->pos, c);
    t->name[c] = 0;
    r->pos += (size_t)nl;
    return r->ok;
}

static int same_tensor(const dtensor_t *a, const dtensor_t *b) {
    if (a->dtype != b->dtype || a->memory != b->memory || a->ndim != b->ndim || a->count != b->count) return 0;
    for (int j = 0; j < a->ndim; j++)
        if (a->shape[j] != b->shape[j]) return 0;
    return 1;
}

/* Names the first difference between rank 0's descriptor (a) and rank r's (b). */
static void first_difference(const unsigned char *a, size_t alen, const unsigned char *b, size_t blen, int r,
                             char *msg, size_t n) {
    rbuf_t ra = {a, alen, 0, 1}, rb = {b, blen, 0, 1};
    for (int k = 0; k < OPT_COUNT; k++) {
        uint64_t va = rb_u64(&ra), vb = rb_u64(&rb);
        if (ra.ok && rb.ok && va != vb) {
            msgf(msg, n, "option %s is %" PRIu64 " on rank 0 but %" PRIu64 " on rank %d", opt_names[k], va, vb, r);
            return;
        }
    }
    uint64_t counts_a[2], counts_b[2];
    counts_a[0] = rb_u64(&ra);
    counts_a[1] = rb_u64(&ra);
    counts_b[0] = rb_u64(&rb);
    counts_b[1] = rb_u64(&rb);
    for (int kind = 0; kind < 2 && ra.ok && rb.ok; kind++) {
        const char *what = kind ? "buffer" : "parameter";
        uint64_t common = counts_a[kind] < counts_b[kind] ? counts_a[kind] : counts_b[kind];
        for (uint64_t i = 0; i < common; i++) {
            dtensor_t ta, tb;
            if (!rb_tensor(&ra, &ta) || !rb_tensor(&rb, &tb)) break;
            if (!same_tensor(&ta, &tb)) {
                char sa[256], sb[256];
                format_shape(sa, sizeof sa, ta.dtype, ta.memory, ta.ndim, ta.shape);
                format_shape(sb, sizeof sb, tb.dtype, tb.memory, tb.ndim, tb.shape);
                char nm[200] = "";
                if (ta.name[0]) msgf(nm, sizeof nm, " ('%s')", ta.name);
                msgf(msg, n, "%s %" PRIu64 "%s is %s on rank 0 but %s on rank %d", what, i, nm, sa, sb, r);
                return;
            }
        }
        if (counts_a[kind] != counts_b[kind]) {
            msgf(msg, n, "rank 0 registers %" PRIu64 " %ss but rank %d registers %" PRIu64
                     " (the first %" PRIu64 " agree)", counts_a[kind], what, r, counts_b[kind], common);
            return;
        }
        /* the parameters of a list with equal counts agree: skip the rest of b's */
    }
    msgf(msg, n, "the registrations of rank 0 and rank %d differ", r);
}

/* ---- tensors -------------------------------------------------------------------- */

static void free_tensors(tensor_t *ts, int n) {
    if (!ts) return;
    for (int i = 0; i < n; i++) {
        free(ts[i].name);
        free(ts[i].shape);
    }
    free(ts);
}

/* Copies and checks one list; on error writes msg and returns the code. */
static ringlet_result_t copy_tensors(const ringlet_ddp_tensor_t *in, int n, int is_param, tensor_t **out, char *msg,
                                     size_t msgn) {
    const char *kind = is_param ? "parameter" : "buffer";
    *out = NULL;
    if (n < 0) {
        msgf(msg, msgn, "n%ss is %d (negative)", kind, n);
        return RINGLET_ERR_INVALID_ARGUMENT;
    }
    if (n > 0 && !in) {
        msgf(msg, msgn, "%ss is NULL but n%ss is %d", kind, kind, n);
        return RINGLET_ERR_INVALID_ARGUMENT;
    }
    tensor_t *ts = calloc(n ? (size_t)n : 1, sizeof *ts);
    if (!ts) {
        msgf(msg, msgn, "out of memory");
        return RINGLET_ERR_SYSTEM;
    }
    *out = ts;
    char nb[200];
    for (int i = 0; i < n; i++) {
        const ringlet_ddp_tensor_t *s = &in[i];
        tensor_t *t = &ts[i];
        t->name = strdup(s->name ? s->name : "");
        int nd = s->shape ? s->ndim : 1;
        t->shape = malloc(sizeof(int64_t) * (size_t)(nd > 0 ? nd : 1));
        if (!t->name || !t->shape) {
            msgf(msg, msgn, "out of memory");
            return RINGLET_ERR_SYSTEM;
        }
        t->data = s->data;
        t->grad = is_param ? s->grad : NULL;
        t->count = s->count;
        t->dtype = s->dtype;
        t->memory = s->memory;
        t->ndim = nd;
        t->bucket = -1;
        tname(t, kind, i, nb, sizeof nb);
        size_t es = ringlet_datatype_size(s->dtype);
        if (!es) {
            msgf(msg, msgn, "%s: dtype %d is not a ringlet_datatype_t", nb, (int)s->dtype);
            return RINGLET_ERR_INVALID_ARGUMENT;
        }
        if (is_param && !is_floating(s->dtype)) {
            msgf(msg, msgn, "%s: dtype %s; parameters must be float16, bfloat16, float32 or float64", nb,
                     dtype_name(s->dtype));
            return RINGLET_ERR_INVALID_ARGUMENT;
        }
        if (s->memory != RINGLET_DDP_HOST && s->memory != RINGLET_DDP_DEVICE) {
            msgf(msg, msgn, "%s: memory %d is neither RINGLET_DDP_HOST nor RINGLET_DDP_DEVICE", nb, (int)s->memory);
            return RINGLET_ERR_INVALID_ARGUMENT;
        }
        if (s->count > (SIZE_MAX / 4) / es) {
            msgf(msg, msgn, "%s: count %zu is too large", nb, s->count);
            return RINGLET_ERR_INVALID_ARGUMENT;
        }
        t->bytes = s->count * es;
        if (s->shape) {
            if (s->ndim < 0 || s->ndim > MAX_NDIM) {
                msgf(msg, msgn, "%s: ndim %d is out of range [0, %d]", nb, s->ndim, MAX_NDIM);
                return RINGLET_ERR_INVALID_ARGUMENT;
            }
            uint64_t prod = 1;
            int over = 0;
            for (int j = 0; j < s->ndim; j++) {
                if (s->shape[j] < 0) {
                    msgf(msg, msgn, "%s: shape[%d] is %" PRId64 " (negative)", nb, j, s->shape[j]);
                    return RINGLET_ERR_INVALID_ARGUMENT;
                }
                t->shape[j] = s->shape[j];
                if (s->shape[j] && prod > UINT64_MAX / (uint64_t)s->shape[j]) over = 1;
                prod *= (uint64_t)s->shape[j];
            }
            if (over || prod != s->count) {
                char sh[256];
                format_shape(sh, sizeof sh, s->dtype, s->memory, s->ndim, t->shape);
                msgf(msg, msgn, "%s: shape %s holds %s%" PRIu64 " elements but count is %zu", nb, sh,
                         over ? "more than " : "", prod, s->count);
                return RINGLET_ERR_INVALID_ARGUMENT;
            }
        } else {
            t->shape[0] = (int64_t)s->count;
        }
        if (s->memory == RINGLET_DDP_DEVICE) {
            int ndev = 0;
            ringlet_device_count(&ndev);
            if (ndev == 0) {
                msgf(msg, msgn, "%s is in device memory, but ringlet has no device backend here (no usable GPU; "
                                "RINGLET_DEVICE=sim simulates one)", nb);
                return RINGLET_ERR_INVALID_USAGE;
            }
        }
        if (s->count && !s->data) {
            msgf(msg, msgn, "%s: data is NULL", nb);
            return RINGLET_ERR_INVALID_ARGUMENT;
        }
    }
    return RINGLET_SUCCESS;
}

/* ---- coalesced broadcast from rank 0 ----------------------------------------------
 * Small tensors are packed into a staging slot (two slots, so packing the next message
 * overlaps the broadcast of the previous one); a tensor larger than half a slot goes
 * straight from/into its own memory. Every rank computes the same sequence. */

typedef struct {
    ringlet_request_t req;
    int lo, hi; /* tensors [lo, hi) (those that fit) are packed in it */
} slot_t;

static int goes_direct(const tensor_t *t, size_t slot) { return t->bytes > slot / 2; }

static void unpack_slot(struct ringlet_ddp *d, const tensor_t *ts, const slot_t *s, const unsigned char *mem,
                        size_t slot) {
    size_t off = 0;
    for (int i = s->lo; i < s->hi; i++) {
        if (!ts[i].bytes || goes_direct(&ts[i], slot)) continue;
        mem_copy(d, ts[i].data, mem + off, ts[i].bytes);
        off += ts[i].bytes;
    }
}

static ringlet_result_t bcast_wait(struct ringlet_ddp *d, ringlet_request_t *req, ringlet_result_t rc) {
    if (!*req) return rc;
    ringlet_result_t w = ringlet_wait(req);
    if (w && !rc) rc = set_error(d, w, "broadcast from rank 0: %s", ringlet_comm_last_error(d->comm));
    return rc;
}

/* Broadcasts the tensors' data from rank 0. staging: 2 * slot bytes. */
static ringlet_result_t bcast_tensors(struct ringlet_ddp *d, const tensor_t *ts, int n, unsigned char *staging,
                                      size_t slot) {
    ringlet_result_t rc = RINGLET_SUCCESS;
    ringlet_request_t *direct = calloc(n ? (size_t)n : 1, sizeof *direct);
    if (!direct) return set_error(d, RINGLET_ERR_SYSTEM, "broadcast: out of memory");
    int ndirect = 0;
    slot_t slots[2] = {{NULL, 0, 0}, {NULL, 0, 0}};
    int cur = 0;
    size_t fill = 0;
    int root = d->rank == 0;
    slots[0].lo = 0;
    for (int i = 0; i <= n && !rc; i++) {
        int flush = i == n || (!goes_direct(&ts[i], slot) && ts[i].bytes && fill + ts[i].bytes > slot);
        if (flush && fill) {
            slot_t *s = &slots[cur];
            s->hi = i;
            ringlet_result_t r = ringlet_ibroadcast(staging + cur * slot, staging + cur * slot, fill, RINGLET_UINT8, 0,
                                                    d->comm, dstream(d), &s->req);
            if (r) {
                rc = set_error(d, r, "broadcast from rank 0: %s", ringlet_comm_last_error(d->comm));
                break;
            }
            cur ^= 1;
            fill = 0;
            /* the other slot is about to be refilled: finish its message first */
            s = &slots[cur];
            if (s->req) {
                rc = bcast_wait(d, &s->req, rc);
                if (!rc && !root) unpack_slot(d, ts, s, staging + cur * slot, slot);
            }
            s->lo = i;
        } else if (flush) {
            slots[cur].lo = i;
        }
        if (i == n) break;
        const tensor_t *t = &ts[i];
        if (!t->bytes) continue;
        if (goes_direct(t, slot)) {
            ringlet_result_t r = ringlet_ibroadcast(t->data, t->data, t->bytes, RINGLET_UINT8, 0, d->comm, dstream(d),
                                                    &direct[ndirect]);
            if (r) {
                rc = set_error(d, r, "broadcast from rank 0: %s", ringlet_comm_last_error(d->comm));
                break;
            }
            ndirect++;
        } else {
            if (root) mem_copy(d, staging + cur * slot + fill, t->data, t->bytes);
            fill += t->bytes;
        }
    }
    for (int k = 0; k < 2; k++) {
        int c = cur ^ 1 ^ k; /* the older message first (they complete in order anyway) */
        if (slots[c].req) {
            ringlet_result_t before = rc;
            rc = bcast_wait(d, &slots[c].req, rc);
            if (!rc && !before && !root) unpack_slot(d, ts, &slots[c], staging + c * slot, slot);
        }
    }
    for (int k = 0; k < ndirect; k++) rc = bcast_wait(d, &direct[k], rc);
    free(direct);
    return rc;
}

static size_t small_bytes(const tensor_t *ts, int n, size_t slot) {
    size_t s = 0;
    for (int i = 0; i < n; i++)
        if (!goes_direct(&ts[i], slot)) s += ts[i].bytes;
    return s;
}

/* ---- buckets ---------------------------------------------------------------------- */

static void free_buckets(int on_device, bucket_t *bs, int n) {
    if (!bs) return;
    for (int b = 0; b < n; b++) {
        if (bs[b].wire_mem != bs[b].mem) mem_free(on_device, bs[b].wire_mem);
        mem_free(on_device, bs[b].mem);
        free(bs[b].params);
        free(bs[b].reqs);
    }
    free(bs);
}

static int cmp_bucket(const void *x, const void *y) {
    const bucket_t *a = x, *b = y;
    /* the bucket whose first parameter comes first in the order goes first */
    return (a->first_pos > b->first_pos) - (a->first_pos < b->first_pos);
}

/* Assigns the parameters, taken in `order` (a permutation of 0..nparams-1: reverse
 * registration order at construction, rank 0's gradient-ready order at a rebuild), to
 * buckets: one open bucket per dtype, closed as soon as it holds cap bytes or more (the
 * first bucket of each dtype: first_bucket_cap_bytes), as PyTorch's DDP does: the
 * parameter that crosses the cap stays in the bucket. (A hard cap would put a layer's
 * bias, which is ready with the layer's weight, into the bucket before the weight's and
 * so hold that bucket back until the weight is ready.) Buckets are numbered by their
 * first parameter's place in the order. Allocates the bucket memory (zeroed). On success
 * the new buckets and every parameter's bucket, offset and direct mark are in *out,
 * *nout, pb[], po[], pd[]. Within a bucket the slots go [packed][flag][direct]. */
static ringlet_result_t assign_buckets(struct ringlet_ddp *d, const int *order, bucket_t **out, int *nout, int *pb,
                                       size_t *po, int *pd) {
    int np = d->nparams;
    bucket_t *bs = calloc(np ? (size_t)np : 1, sizeof *bs); /* at most one bucket per parameter */
    int open[RINGLET_NUM_DATATYPES], closed_count[RINGLET_NUM_DATATYPES] = {0};
    size_t fill[RINGLET_NUM_DATATYPES] = {0};
    int nb = 0;
    if (!bs) goto oom;
    for (int k = 0; k < RINGLET_NUM_DATATYPES; k++) open[k] = -1;
    for (int k = 0; k < np; k++) {
        int i = order[k];
        tensor_t *p = &d->params[i];
        int key = (int)p->dtype;
        size_t es = ringlet_datatype_size(p->dtype), al = ALIGN_BYTES / es;
        if (open[key] < 0) {
            open[key] = nb++;
            fill[key] = 0;
            bs[open[key]].dtype = p->dtype;
            bs[open[key]].first_pos = k;
            bs[open[key]].params = malloc(sizeof(int) * (size_t)np);
            if (!bs[open[key]].params) goto oom;
        }
        bucket_t *b = &bs[open[key]];
        fill[key] = align_up(fill[key], al) + p->count;
        b->params[b->nparams++] = i;
        size_t cap = closed_count[key] == 0 ? d->opt.first_bucket_cap_bytes : d->opt.bucket_cap_bytes;
        if (fill[key] * es >= cap) { /* full: the next parameter of this dtype opens a new one */
            open[key] = -1;
            closed_count[key]++;
        }
    }
    qsort(bs, (size_t)nb, sizeof *bs, cmp_bucket);
    ringlet_datatype_t wire_of_comp = d->opt.compression == RINGLET_DDP_COMPRESS_FLOAT16    ? RINGLET_FLOAT16
                                      : d->opt.compression == RINGLET_DDP_COMPRESS_BFLOAT16 ? RINGLET_BFLOAT16
                                                                                              : RINGLET_NUM_DATATYPES;
    for (int k = 0; k < nb; k++) {
        bucket_t *b = &bs[k];
        int compress = wire_of_comp != RINGLET_NUM_DATATYPES &&
                       (b->dtype == RINGLET_FLOAT32 || b->dtype == RINGLET_FLOAT64);
        b->wire = compress ? wire_of_comp : b->dtype;
        b->op = d->opt.average_gradients && !compress ? RINGLET_AVG : RINGLET_SUM;
        size_t es = ringlet_datatype_size(b->dtype), al = ALIGN_BYTES / es, off = 0;
        int ndirect = 0;
        for (int pass = 0; pass < 2; pass++) { /* packed slots, flag, then direct slots */
            for (int j = 0; j < b->nparams; j++) {
                int i = b->params[j];
                int direct = !compress && d->direct_min && d->params[i].bytes >= d->direct_min;
                if (direct != pass) continue;
                pb[i] = k;
                pd[i] = direct;
                off = align_up(off, al);
                po[i] = off;
                off += d->params[i].count;
                ndirect += direct;
            }
            if (pass == 0) {
                b->has_flag = k == nb - 1;
                b->flag_index = off;
                off += b->has_flag ? 1 : 0;
                b->packed_count = off;
            }
        }
        b->count = off;
        b->maxreqs = 1 + ndirect;
        b->reqs = calloc((size_t)b->maxreqs, sizeof *b->reqs);
        b->mem = mem_alloc(d, b->count * es);
        b->wire_mem = compress ? mem_alloc(d, b->count * ringlet_datatype_size(b->wire)) : b->mem;
        if (!b->mem || !b->wire_mem || !b->reqs) {
            free_buckets(d->on_device, bs, nb);
            return set_error(d, RINGLET_ERR_SYSTEM, "out of memory for bucket %d (%zu elements)", k, b->count);
        }
    }
    *out = bs;
    *nout = nb;
    return RINGLET_SUCCESS;
oom:
    free_buckets(d->on_device, bs, nb);
    return set_error(d, RINGLET_ERR_SYSTEM, "out of memory");
}

/* The construction's assignment: reverse registration order. */
static ringlet_result_t build_buckets(struct ringlet_ddp *d) {
    int np = d->nparams;
    int *order = malloc(sizeof(int) * (size_t)(np ? np : 1)), *pb = malloc(sizeof(int) * (size_t)(np ? np : 1));
    int *pd = malloc(sizeof(int) * (size_t)(np ? np : 1));
    size_t *po = malloc(sizeof(size_t) * (size_t)(np ? np : 1));
    ringlet_result_t rc = RINGLET_SUCCESS;
    if (!order || !pb || !po || !pd) {
        rc = set_error(d, RINGLET_ERR_SYSTEM, "ringlet_ddp_create: out of memory");
    } else {
        for (int k = 0; k < np; k++) order[k] = np - 1 - k;
        rc = assign_buckets(d, order, &d->buckets, &d->nbuckets, pb, po, pd);
        if (!rc)
            for (int i = 0; i < np; i++) {
                d->params[i].bucket = pb[i];
                d->params[i].offset = po[i];
                d->params[i].direct = pd[i];
            }
        else
            set_error(d, rc, "ringlet_ddp_create: %s", d->last_error);
    }
    free(order);
    free(pb);
    free(po);
    free(pd);
    return rc;
}

static void *slot_ptr(const struct ringlet_ddp *d, const tensor_t *p) {
    const bucket_t *b = &d->buckets[p->bucket];
    return (char *)b->mem + p->offset * ringlet_datatype_size(b->dtype);
}

/* ---- create / destroy ----------------------------------------------------------------- */

void ringlet_ddp_options_init(ringlet_ddp_options_t *o) {
    if (!o) return;
    memset(o, 0, sizeof *o);
    o->struct_size = sizeof *o;
    o->bucket_cap_bytes = (size_t)25 << 20;
    o->first_bucket_cap_bytes = (size_t)1 << 20;
    o->broadcast_buffers = 1;
    o->average_gradients = 1;
    o->find_unused_parameters = 0;
    o->gradient_as_bucket_view = 0;
    o->compression = RINGLET_DDP_COMPRESS_NONE;
    o->init_sync = 1;
    o->rebuild_buckets = 0;
}

static void ddp_free(struct ringlet_ddp *d) {
    if (!d) return;
    free_tensors(d->params, d->nparams);
    free_tensors(d->buffers, d->nbuffers);
    free_buckets(d->on_device, d->buckets, d->nbuckets);
    free(d->ready);
    free(d->used_local);
    free(d->used_global);
    mem_free(d->on_device, d->staging);
    free(d->order);
    for (int k = 0; k < d->nretired; k++) free_buckets(d->on_device, d->retired[k], d->retired_n[k]);
    free(d->retired);
    free(d->retired_n);
    pthread_mutex_destroy(&d->mu);
    free(d);
}

/* Local checks of the arguments (no communication). */
static ringlet_result_t check_local(struct ringlet_ddp *d, const ringlet_ddp_tensor_t *params, int nparams,
                                    const ringlet_ddp_tensor_t *buffers, int nbuffers,
                                    const ringlet_ddp_options_t *options, char *msg, size_t n) {
    ringlet_ddp_options_init(&d->opt);
    if (options) {
        if (options->struct_size < offsetof(ringlet_ddp_options_t, init_sync) ||
            options->struct_size > sizeof *options) {
            msgf(msg, n, "options->struct_size is %zu (expected %zu): initialise options with "
                     "ringlet_ddp_options_init", options->struct_size, sizeof *options);
            return RINGLET_ERR_INVALID_ARGUMENT;
        }
        memcpy(&d->opt, options, options->struct_size);
        d->opt.struct_size = sizeof d->opt;
    }
    ringlet_ddp_options_t *o = &d->opt;
    if (o->bucket_cap_bytes == 0 || o->first_bucket_cap_bytes == 0) {
        msgf(msg, n, "options: bucket_cap_bytes (%zu) and first_bucket_cap_bytes (%zu) must be positive",
                 o->bucket_cap_bytes, o->first_bucket_cap_bytes);
        return RINGLET_ERR_INVALID_ARGUMENT;
    }
    if ((unsigned)o->compression > RINGLET_DDP_COMPRESS_BFLOAT16) {
        msgf(msg, n, "options: compression %d is not a ringlet_ddp_compression_t", (int)o->compression);
        return RINGLET_ERR_INVALID_ARGUMENT;
    }
    ringlet_result_t rc = copy_tensors(params, nparams, 1, &d->params, msg, n);
    d->nparams = d->params ? (nparams > 0 ? nparams : 0) : 0;
    if (rc) return rc;
    rc = copy_tensors(buffers, nbuffers, 0, &d->buffers, msg, n);
    d->nbuffers = d->buffers ? (nbuffers > 0 ? nbuffers : 0) : 0;
    if (rc) return rc;
    /* One kind of memory for everything: the buckets and the staging follow it. */
    int nt = d->nparams + d->nbuffers;
    for (int k = 0; k < nt; k++) {
        const tensor_t *t = k < d->nparams ? &d->params[k] : &d->buffers[k - d->nparams];
        if (k == 0) d->on_device = t->memory == RINGLET_DDP_DEVICE;
        if ((t->memory == RINGLET_DDP_DEVICE) != d->on_device) {
            char nb[200];
            msgf(msg, n, "%s is in %s memory but the first tensor is in %s memory: one DDP object takes one kind",
                 tname(t, k < d->nparams ? "parameter" : "buffer", k < d->nparams ? k : k - d->nparams, nb, sizeof nb),
                 d->on_device ? "host" : "device", d->on_device ? "device" : "host");
            return RINGLET_ERR_INVALID_ARGUMENT;
        }
    }
    d->stream = d->opt.stream;
    return RINGLET_SUCCESS;
}

ringlet_result_t ringlet_ddp_create(ringlet_ddp_t *out, ringlet_comm_t comm, const ringlet_ddp_tensor_t *params,
                                    int nparams, const ringlet_ddp_tensor_t *buffers, int nbuffers,
                                    const ringlet_ddp_options_t *options) {
    if (!out) return set_error(NULL, RINGLET_ERR_INVALID_ARGUMENT, "ringlet_ddp_create: ddp (the output) is NULL");
    *out = NULL;
    if (!comm) return set_error(NULL, RINGLET_ERR_INVALID_ARGUMENT, "ringlet_ddp_create: comm is NULL");
    struct ringlet_ddp *d = calloc(1, sizeof *d);
    if (!d) return set_error(NULL, RINGLET_ERR_SYSTEM, "ringlet_ddp_create: out of memory");
    pthread_mutex_init(&d->mu, NULL);
    d->comm = comm;
    /* a tuning knob (and a test hook); part of what the ranks compare */
    d->bcast_cap = BCAST_SLOT_BYTES;
    const char *env = getenv("RINGLET_DDP_BCAST_BYTES");
    if (env && *env) {
        char *end;
        unsigned long long v = strtoull(env, &end, 10);
        if (*end == 0 && v >= ALIGN_BYTES && v <= ((size_t)1 << 30)) d->bcast_cap = (size_t)v;
    }
    d->direct_min = DIRECT_MIN_BYTES;
    env = getenv("RINGLET_DDP_DIRECT_BYTES");
    if (env && *env) {
        char *end;
        unsigned long long v = strtoull(env, &end, 10);
        if (*end == 0) d->direct_min = (size_t)v;
    }
    ringlet_result_t rc;
    if ((rc = ringlet_comm_rank(comm, &d->rank)) || (rc = ringlet_comm_size(comm, &d->nranks))) {
        set_error(NULL, rc, "ringlet_ddp_create: %s", ringlet_comm_last_error(comm));
        ddp_free(d);
        return rc;
    }

    /* 1. local checks; their outcome is shared, so that every rank fails together */
    char lmsg[MSG_MAX] = "";
    ringlet_result_t lrc = check_local(d, params, nparams, buffers, nbuffers, options, lmsg, sizeof lmsg);
    wbuf_t desc = {NULL, 0, 0, 0xcbf29ce484222325ull, 1};
    uint64_t hash_opts = 0;
    if (!lrc) {
        describe(&desc, &d->opt, d->bcast_cap, d->direct_min, d->params, d->nparams, d->buffers, d->nbuffers);
        hash_opts = desc.hash;
        if (!desc.ok) {
            lrc = RINGLET_ERR_SYSTEM;
            msgf(lmsg, sizeof lmsg, "out of memory");
        }
    }
    uint64_t mine[SUMMARY_WORDS] = {SUMMARY_MAGIC,           (uint64_t)lrc,  (uint64_t)(lrc ? 0 : d->nparams),
                                    (uint64_t)(lrc ? 0 : d->nbuffers), hash_opts, (uint64_t)desc.len,
                                    0, 0};
    uint64_t *all = malloc(sizeof(uint64_t) * SUMMARY_WORDS * (size_t)d->nranks);
    if (!all) {
        /* cannot even take part: the others will see this rank fail */
        free(desc.p);
        set_error(NULL, RINGLET_ERR_SYSTEM, "ringlet_ddp_create: out of memory");
        ddp_free(d);
        return RINGLET_ERR_SYSTEM;
    }
    rc = ringlet_allgather(mine, all, SUMMARY_WORDS, RINGLET_UINT64, comm, NULL);
    if (rc) {
        set_error(NULL, rc, "ringlet_ddp_create: exchanging the registrations: %s", ringlet_comm_last_error(comm));
        goto fail;
    }

    /* 2. an argument error on some rank: everybody reports the first one's message */
    int bad = -1;
    for (int r = 0; r < d->nranks; r++)
        if (all[r * SUMMARY_WORDS + 1] != 0 || all[r * SUMMARY_WORDS] != SUMMARY_MAGIC) {
            bad = r;
            break;
        }
    if (bad >= 0) {
        char rmsg[MSG_MAX];
        memcpy(rmsg, lmsg, sizeof rmsg);
        rc = ringlet_broadcast(rmsg, rmsg, sizeof rmsg, RINGLET_UINT8, bad, comm, NULL);
        if (rc) {
            set_error(NULL, rc, "ringlet_ddp_create: %s", ringlet_comm_last_error(comm));
            goto fail;
        }
        rmsg[sizeof rmsg - 1] = 0;
        rc = (ringlet_result_t)all[bad * SUMMARY_WORDS + 1];
        if (rc == RINGLET_SUCCESS || rc >= RINGLET_NUM_RESULTS) rc = RINGLET_ERR_INVALID_USAGE;
        if (lrc && bad != d->rank && strcmp(rmsg, lmsg) != 0)
            set_error(NULL, rc, "ringlet_ddp_create: rank %d: %s (and on this rank, %d: %s)", bad, rmsg, d->rank,
                      lmsg);
        else
            set_error(NULL, rc, "ringlet_ddp_create: rank %d: %s", bad, rmsg);
        goto fail;
    }

    /* 3. registrations that differ: rank 0 and the first rank that differs from it send
     * their descriptors, and every rank names the same first difference */
    int diff = -1;
    for (int r = 1; r < d->nranks; r++)
        if (memcmp(&all[r * SUMMARY_WORDS + 2], &all[2], 3 * sizeof(uint64_t)) != 0) { /* not the length: names may differ */
            diff = r;
            break;
        }
    if (diff >= 0) {
        size_t la = (size_t)all[5], lb = (size_t)all[diff * SUMMARY_WORDS + 5];
        unsigned char *a = malloc(la ? la : 1), *b = malloc(lb ? lb : 1);
        if (!a || !b) {
            free(a);
            free(b);
            rc = set_error(NULL, RINGLET_ERR_SYSTEM, "ringlet_ddp_create: out of memory");
            goto fail;
        }
        if (d->rank == 0) memcpy(a, desc.p, la);
        if (d->rank == diff) memcpy(b, desc.p, lb);
        rc = ringlet_broadcast(a, a, la, RINGLET_UINT8, 0, comm, NULL);
        if (!rc) rc = ringlet_broadcast(b, b, lb, RINGLET_UINT8, diff, comm, NULL);
        if (rc) {
            set_error(NULL, rc, "ringlet_ddp_create: %s", ringlet_comm_last_error(comm));
        } else {
            char m[MSG_MAX - 64];
            first_difference(a, la, b, lb, diff, m, sizeof m);
            rc = set_error(NULL, RINGLET_ERR_INVALID_USAGE,
                           "ringlet_ddp_create: the ranks registered different models: %s", m);
        }
        free(a);
        free(b);
        goto fail;
    }
    free(all);
    all = NULL;
    free(desc.p);
    desc.p = NULL;

    /* 4. buckets and per-iteration state */
    d->scale = d->opt.average_gradients ? 1.0 / d->nranks : 1.0;
    if ((rc = build_buckets(d))) {
        memcpy(t_last_error, d->last_error, sizeof t_last_error);
        goto fail;
    }
    size_t np = d->nparams ? (size_t)d->nparams : 1;
    d->ready = calloc(np, 1);
    d->used_local = calloc(np, 1);
    d->used_global = calloc(np, 1);
    d->order = malloc(sizeof(int) * np);
    size_t bsmall = small_bytes(d->buffers, d->nbuffers, d->bcast_cap);
    d->staging_slot = bsmall < d->bcast_cap ? (bsmall ? bsmall : 1) : d->bcast_cap;
    if (d->staging_slot < ALIGN_BYTES) d->staging_slot = ALIGN_BYTES;
    d->staging = mem_alloc(d, 2 * d->staging_slot);
    if (!d->ready || !d->used_local || !d->used_global || !d->staging || !d->order) {
        rc = set_error(NULL, RINGLET_ERR_SYSTEM, "ringlet_ddp_create: out of memory");
        goto fail;
    }
    memset(d->used_global, 1, np);
    d->state = IT_NONE;
    d->prev_forward_synced = 1;

    /* 5. rank 0's values everywhere */
    if (d->opt.init_sync) {
        int nt = d->nparams + d->nbuffers;
        tensor_t *all_t = calloc(nt ? (size_t)nt : 1, sizeof *all_t);
        if (!all_t) {
            rc = set_error(NULL, RINGLET_ERR_SYSTEM, "ringlet_ddp_create: out of memory");
            goto fail;
        }
        memcpy(all_t, d->params, sizeof *all_t * (size_t)d->nparams);
        memcpy(all_t + d->nparams, d->buffers, sizeof *all_t * (size_t)d->nbuffers);
        size_t s = small_bytes(all_t, nt, d->bcast_cap);
        size_t slot = s < d->bcast_cap ? (s ? s : 1) : d->bcast_cap;
        if (slot < ALIGN_BYTES) slot = ALIGN_BYTES;
        unsigned char *stg = mem_alloc(d, 2 * slot);
        if (!stg) {
            free(all_t);
            rc = set_error(NULL, RINGLET_ERR_SYSTEM, "ringlet_ddp_create: out of memory");
            goto fail;
        }
        rc = bcast_tensors(d, all_t, nt, stg, slot);
        if (!rc && d->mem_rc)
            rc = set_error(d, d->mem_rc, "copying to and from the broadcast staging: %s", ringlet_comm_last_error(NULL));
        mem_free(d->on_device, stg);
        free(all_t);
        if (rc) {
            set_error(NULL, rc, "ringlet_ddp_create: %s", d->last_error);
            goto fail;
        }
    }

    /* 6. gradients as views of their buckets */
    if (d->opt.gradient_as_bucket_view) {
        for (int i = 0; i < d->nparams; i++) {
            tensor_t *p = &d->params[i];
            void *v = slot_ptr(d, p);
            if (p->grad && p->grad != v) mem_copy(d, v, p->grad, p->bytes);
            p->grad = v;
        }
    }
    *out = d;
    t_last_error[0] = 0;
    return RINGLET_SUCCESS;

fail:
    free(all);
    free(desc.p);
    ddp_free(d);
    return rc;
}

static void wait_in_flight(struct ringlet_ddp *d) {
    for (int b = 0; b < d->nbuckets; b++)
        for (int r = 0; r < d->buckets[b].nreqs; r++)
            if (d->buckets[b].reqs[r]) ringlet_wait(&d->buckets[b].reqs[r]);
    if (d->used_req) ringlet_wait(&d->used_req);
}

ringlet_result_t ringlet_ddp_destroy(ringlet_ddp_t d) {
    if (!d) return set_error(NULL, RINGLET_ERR_INVALID_ARGUMENT, "ringlet_ddp_destroy: ddp is NULL");
    pthread_mutex_lock(&d->mu);
    wait_in_flight(d);
    pthread_mutex_unlock(&d->mu);
    ddp_free(d);
    return RINGLET_SUCCESS;
}

const char *ringlet_ddp_last_error(ringlet_ddp_t d) { return d ? d->last_error : t_last_error; }

/* ---- iterations ------------------------------------------------------------------------ */

#define CHECK_DDP(d, fn)                                                                                               \
    do {                                                                                                               \
        if (!(d)) return set_error(NULL, RINGLET_ERR_INVALID_ARGUMENT, "%s: ddp is NULL", fn);                          \
    } while (0)

/* First error of the iteration (kept for finish). */
static void iter_fail(struct ringlet_ddp *d, ringlet_result_t rc, const char *msg) {
    if (d->iter_rc) return;
    d->iter_rc = rc;
    msgf(d->iter_msg, sizeof d->iter_msg, "%s", msg);
}

static void launch_one(struct ringlet_ddp *d, bucket_t *b, int k, void *buf, size_t count, ringlet_datatype_t t) {
    ringlet_result_t rc = ringlet_iallreduce(buf, buf, count, t, b->op, d->comm, dstream(d), &b->reqs[b->nreqs]);
    if (rc) {
        char m[MSG_MAX];
        msgf(m, sizeof m, "all-reduce of bucket %d: %s", k, ringlet_comm_last_error(d->comm));
        iter_fail(d, rc, m);
        b->reqs[b->nreqs] = NULL;
        if (!b->rc) b->rc = rc;
    }
    b->nreqs++;
}

/* Issues the all-reduces of every complete bucket from next_launch on, in order: the
 * packed part (with the flag), then the direct parameters in slot order. The same
 * sequence on every rank. */
static void launch_ready(struct ringlet_ddp *d) {
    while (d->next_launch < d->nbuckets && d->buckets[d->next_launch].pending == 0) {
        int k = d->next_launch;
        bucket_t *b = &d->buckets[k];
        int last = k == d->nbuckets - 1;
        size_t ws = ringlet_datatype_size(b->wire);
        if (b->has_flag) {
            d->own_flag = d->iter_rc ? 1.0 : 0.0;
            mem_store_value(d, (char *)b->wire_mem + b->flag_index * ws, b->wire, d->own_flag);
        }
        b->t_launch = now_s();
        b->t_complete = 0;
        b->rc = RINGLET_SUCCESS;
        b->nreqs = 0;
        if (b->packed_count) launch_one(d, b, k, b->wire_mem, b->packed_count, b->wire);
        for (int j = 0; j < b->nparams; j++) {
            tensor_t *p = &d->params[b->params[j]];
            if (p->direct) launch_one(d, b, k, p->launch_on, p->count, b->wire);
        }
        b->launched = 1;
        d->next_launch++;
        if (last && d->opt.find_unused_parameters && d->nparams) {
            ringlet_result_t rc = ringlet_iallreduce(d->used_local, d->used_global, (size_t)d->nparams, RINGLET_UINT8, RINGLET_MAX,
                                    d->comm, NULL, &d->used_req);
            if (rc) {
                char m[MSG_MAX];
                msgf(m, sizeof m, "all-reduce of the used-parameter map: %s", ringlet_comm_last_error(d->comm));
                iter_fail(d, rc, m);
                d->used_req = NULL;
            }
            d->used_launched = 1;
        }
    }
}

/* Notes which launched buckets have completed (for the trace; cheap: a flag test per
 * bucket in flight, oldest first, stopping at the first one still running). */
static void poll_done(struct ringlet_ddp *d) {
    for (int b = 0; b < d->next_launch; b++) {
        bucket_t *bk = &d->buckets[b];
        if (bk->t_complete > 0) continue;
        for (int r = 0; r < bk->nreqs; r++) {
            if (!bk->reqs[r]) continue;
            int done = 0;
            ringlet_result_t rc = ringlet_test(&bk->reqs[r], &done);
            if (!done) return;
            if (rc && !bk->rc) bk->rc = rc;
        }
        bk->t_complete = now_s();
    }
}

/* How parameter i's gradient enters its bucket. */
enum { SRC_GRAD, SRC_ZERO };

static void mark(struct ringlet_ddp *d, int i, int used, int src) {
    tensor_t *p = &d->params[i];
    bucket_t *b = &d->buckets[p->bucket];
    void *g = src == SRC_GRAD ? p->grad : NULL;
    void *v = slot_ptr(d, p);
    if (b->wire != b->dtype) { /* compressed (and scaled: the sum of 16-bit values stays in range) */
        void *w = (char *)b->wire_mem + p->offset * ringlet_datatype_size(b->wire);
        if (g)
            mem_convert(d, w, b->wire, g, p->dtype, p->count, d->scale);
        else
            mem_zero(d, w, p->count * ringlet_datatype_size(b->wire));
    } else if (p->direct && used && g) { /* in place on the gradient: no copy */
        p->launch_on = g;
    } else { /* averaging is the all-reduce's (RINGLET_AVG): a plain copy */
        if (g && g != v)
            mem_copy(d, v, g, p->bytes);
        else if (!g)
            mem_zero(d, v, p->bytes);
        p->launch_on = v;
    }
    d->ready[i] = 1;
    d->used_local[i] = (uint8_t)(used != 0);
    d->nready++;
    d->order[d->norder++] = i;
    b->pending--;
    poll_done(d);
    launch_ready(d);
}

static ringlet_result_t check_param(struct ringlet_ddp *d, int i, const char *fn) {
    if (i < 0 || i >= d->nparams)
        return set_error(d, RINGLET_ERR_INVALID_ARGUMENT, "%s: parameter index %d is out of range [0, %d)", fn, i,
                         d->nparams);
    return RINGLET_SUCCESS;
}

static void reset_iteration(struct ringlet_ddp *d, int grad_sync) {
    size_t np = d->nparams ? (size_t)d->nparams : 1;
    memset(d->ready, 0, np);
    memset(d->used_local, 0, np);
    memset(d->used_global, 1, np);
    for (int b = 0; b < d->nbuckets; b++) {
        d->buckets[b].pending = d->buckets[b].nparams;
        d->buckets[b].launched = 0;
    }
    d->nready = 0;
    d->norder = 0;
    d->next_launch = 0;
    d->used_launched = 0;
    d->iter_rc = RINGLET_SUCCESS;
    d->iter_msg[0] = 0;
    d->own_flag = 0;
    d->mem_rc = RINGLET_SUCCESS;
    d->state = grad_sync ? IT_SYNC : IT_NOSYNC;
}

static ringlet_result_t sync_buffers(struct ringlet_ddp *d) {
    if (!d->nbuffers) return RINGLET_SUCCESS;
    d->stats.buffer_broadcasts++;
    ringlet_result_t rc = bcast_tensors(d, d->buffers, d->nbuffers, d->staging, d->staging_slot);
    if (rc) set_error(d, rc, "buffer broadcast: %s", ringlet_comm_last_error(d->comm));
    else if (d->mem_rc) rc = set_error(d, d->mem_rc, "buffer broadcast: %s", d->mem_msg);
    return rc;
}

ringlet_result_t ringlet_ddp_pre_forward(ringlet_ddp_t d, int grad_sync) {
    CHECK_DDP(d, "ringlet_ddp_pre_forward");
    pthread_mutex_lock(&d->mu);
    ringlet_result_t rc = RINGLET_SUCCESS;
    if (d->state == IT_SYNC && d->nready > 0) {
        rc = set_error(d, RINGLET_ERR_INVALID_USAGE,
                       "ringlet_ddp_pre_forward: the previous iteration reported %d of %d gradients but was not "
                       "finished (call ringlet_ddp_finish at the end of every backward); buckets may be in flight, "
                       "so this DDP object cannot go on",
                       d->nready, d->nparams);
        pthread_mutex_unlock(&d->mu);
        return rc;
    }
    if (grad_sync != RINGLET_DDP_NO_SYNC && grad_sync != RINGLET_DDP_SYNC && grad_sync != RINGLET_DDP_NO_GRAD) {
        rc = set_error(d, RINGLET_ERR_INVALID_ARGUMENT,
                       "ringlet_ddp_pre_forward: grad_sync %d is not RINGLET_DDP_NO_SYNC, _SYNC or _NO_GRAD", grad_sync);
        pthread_mutex_unlock(&d->mu);
        return rc;
    }
    int bcast = d->opt.broadcast_buffers && d->nbuffers > 0 && d->prev_forward_synced;
    d->prev_forward_synced = grad_sync == RINGLET_DDP_SYNC;
    if (grad_sync != RINGLET_DDP_NO_GRAD) reset_iteration(d, grad_sync == RINGLET_DDP_SYNC);
    if (bcast) rc = sync_buffers(d);
    pthread_mutex_unlock(&d->mu);
    return rc;
}

ringlet_result_t ringlet_ddp_broadcast_buffers(ringlet_ddp_t d) {
    CHECK_DDP(d, "ringlet_ddp_broadcast_buffers");
    pthread_mutex_lock(&d->mu);
    ringlet_result_t rc;
    if (d->state == IT_SYNC && d->nready > 0)
        rc = set_error(d, RINGLET_ERR_INVALID_USAGE,
                       "ringlet_ddp_broadcast_buffers: gradients of an unfinished iteration are being reduced "
                       "(call it before the forward or after ringlet_ddp_finish)");
    else
        rc = sync_buffers(d);
    pthread_mutex_unlock(&d->mu);
    return rc;
}

ringlet_result_t ringlet_ddp_set_buffer(ringlet_ddp_t d, int index, void *data) {
    CHECK_DDP(d, "ringlet_ddp_set_buffer");
    pthread_mutex_lock(&d->mu);
    ringlet_result_t rc = RINGLET_SUCCESS;
    if (index < 0 || index >= d->nbuffers)
        rc = set_error(d, RINGLET_ERR_INVALID_ARGUMENT, "ringlet_ddp_set_buffer: buffer index %d is out of range [0, %d)",
                       index, d->nbuffers);
    else if (!data && d->buffers[index].count)
        rc = set_error(d, RINGLET_ERR_INVALID_ARGUMENT, "ringlet_ddp_set_buffer: data is NULL");
    else
        d->buffers[index].data = data;
    pthread_mutex_unlock(&d->mu);
    return rc;
}

static ringlet_result_t report(struct ringlet_ddp *d, int i, void *grad, int used, const char *fn) {
    pthread_mutex_lock(&d->mu);
    ringlet_result_t rc = check_param(d, i, fn);
    if (rc) goto out;
    tensor_t *p = &d->params[i];
    char nb[200];
    if (d->state == IT_NOSYNC) { /* no_sync: the gradient only accumulates locally */
        if (grad) p->grad = grad;
        goto out;
    }
    if (d->state == IT_NONE) {
        rc = set_error(d, RINGLET_ERR_INVALID_USAGE,
                       "%s(%s): no iteration started: call ringlet_ddp_pre_forward before each forward", fn,
                       tname(p, "parameter", i, nb, sizeof nb));
        goto out;
    }
    if (d->ready[i]) {
        rc = set_error(d, RINGLET_ERR_INVALID_USAGE,
                       "%s: %s was reported ready twice in one iteration%s", fn,
                       tname(p, "parameter", i, nb, sizeof nb),
                       d->state == IT_FINISHED
                           ? " (after this iteration's finish: a second backward without a forward in between? "
                             "accumulating over several backward passes needs no_sync)"
                           : " (is it used twice, or is backward run more than once per forward?)");
        iter_fail(d, rc, d->last_error);
        goto out;
    }
    if (grad) p->grad = grad;
    if (used && !p->grad && p->count) {
        rc = set_error(d, RINGLET_ERR_INVALID_ARGUMENT, "%s: %s has no gradient memory (grad is NULL)", fn,
                       tname(p, "parameter", i, nb, sizeof nb));
        iter_fail(d, rc, d->last_error);
        mark(d, i, 0, SRC_ZERO); /* keep the collectives in step with the other ranks */
        goto out;
    }
    /* grad_unused with grad == NULL: no gradient at all, zeros (not the registered one) */
    mark(d, i, used, (used || grad) ? SRC_GRAD : SRC_ZERO);
out:
    pthread_mutex_unlock(&d->mu);
    return rc;
}

ringlet_result_t ringlet_ddp_grad_ready(ringlet_ddp_t d, int index, void *grad) {
    CHECK_DDP(d, "ringlet_ddp_grad_ready");
    return report(d, index, grad, 1, "ringlet_ddp_grad_ready");
}

ringlet_result_t ringlet_ddp_grad_unused(ringlet_ddp_t d, int index, void *grad) {
    CHECK_DDP(d, "ringlet_ddp_grad_unused");
    return report(d, index, grad, 0, "ringlet_ddp_grad_unused");
}

/* Result of bucket b into the gradients of its parameters. */
static void write_back(struct ringlet_ddp *d, int b) {
    bucket_t *bk = &d->buckets[b];
    for (int j = 0; j < bk->nparams; j++) {
        int i = bk->params[j];
        tensor_t *p = &d->params[i];
        if (!d->used_global[i]) continue; /* unused on every rank: untouched */
        void *v = slot_ptr(d, p);
        void *dst = p->grad ? p->grad : v;
        if (bk->wire != bk->dtype)
            mem_convert(d, dst, p->dtype, (char *)bk->wire_mem + p->offset * ringlet_datatype_size(bk->wire), bk->wire,
                        p->count, 1.0);
        else if (p->direct && p->launch_on == dst)
            ; /* reduced in place */
        else if (dst != v)
            mem_copy(d, dst, v, p->bytes);
    }
}

/* rebuild_buckets: at the end of the first synchronising iteration, every rank takes
 * rank 0's report order (a broadcast) and reassigns the buckets in it. */
static void rebuild(struct ringlet_ddp *d) {
    int np = d->nparams;
    if (np < 2 || d->norder != np) return;
    int32_t *ord = malloc(sizeof(int32_t) * (size_t)np);
    int *o = malloc(sizeof(int) * (size_t)np), *pb = malloc(sizeof(int) * (size_t)np);
    int *pd = malloc(sizeof(int) * (size_t)np);
    size_t *po = malloc(sizeof(size_t) * (size_t)np);
    unsigned char *seen = calloc((size_t)np, 1);
    bucket_t *nb = NULL;
    int nnb = 0;
    char m[MSG_MAX];
    if (!ord || !o || !pb || !po || !pd || !seen) {
        iter_fail(d, RINGLET_ERR_SYSTEM, "bucket rebuild: out of memory");
        goto out;
    }
    for (int k = 0; k < np; k++) ord[k] = d->order[k];
    ringlet_result_t rc = ringlet_broadcast(ord, ord, (size_t)np, RINGLET_INT32, 0, d->comm, NULL);
    if (rc) {
        msgf(m, sizeof m, "bucket rebuild: broadcast of rank 0's gradient order: %s", ringlet_comm_last_error(d->comm));
        iter_fail(d, rc, m);
        goto out;
    }
    for (int k = 0; k < np; k++) {
        if (ord[k] < 0 || ord[k] >= np || seen[ord[k]]) {
            iter_fail(d, RINGLET_ERR_INTERNAL, "bucket rebuild: rank 0's gradient order is not a permutation");
            goto out;
        }
        seen[ord[k]] = 1;
        o[k] = ord[k];
    }
    if ((rc = assign_buckets(d, o, &nb, &nnb, pb, po, pd))) {
        msgf(m, sizeof m, "bucket rebuild: %s", d->last_error);
        iter_fail(d, rc, m);
        goto out;
    }
    int same = nnb == d->nbuckets;
    for (int i = 0; same && i < np; i++)
        same = pb[i] == d->params[i].bucket && po[i] == d->params[i].offset && pd[i] == d->params[i].direct;
    if (same) {
        free_buckets(d->on_device, nb, nnb);
        goto out;
    }
    bucket_t **r = realloc(d->retired, sizeof *r * (size_t)(d->nretired + 1));
    if (r) d->retired = r;
    int *rn = r ? realloc(d->retired_n, sizeof *rn * (size_t)(d->nretired + 1)) : NULL;
    if (rn) d->retired_n = rn;
    if (!r || !rn) {
        free_buckets(d->on_device, nb, nnb);
        iter_fail(d, RINGLET_ERR_SYSTEM, "bucket rebuild: out of memory");
        goto out;
    }
    for (int i = 0; i < np; i++) { /* results that live in their bucket move with it */
        tensor_t *p = &d->params[i];
        void *old = slot_ptr(d, p);
        void *nv = (char *)nb[pb[i]].mem + po[i] * ringlet_datatype_size(p->dtype);
        if (p->grad == old || !p->grad) mem_copy(d, nv, old, p->bytes);
        if (p->grad == old) p->grad = nv;
    }
    d->retired[d->nretired] = d->buckets;
    d->retired_n[d->nretired] = d->nbuckets;
    d->nretired++;
    d->buckets = nb;
    d->nbuckets = nnb;
    for (int i = 0; i < np; i++) {
        d->params[i].bucket = pb[i];
        d->params[i].offset = po[i];
        d->params[i].direct = pd[i];
    }
    d->stats.bucket_rebuilds++;
out:
    free(ord);
    free(o);
    free(pb);
    free(pd);
    free(po);
    free(seen);
}

ringlet_result_t ringlet_ddp_finish(ringlet_ddp_t d) {
    CHECK_DDP(d, "ringlet_ddp_finish");
    pthread_mutex_lock(&d->mu);
    ringlet_result_t rc = RINGLET_SUCCESS;
    if (d->state == IT_NOSYNC) goto out;
    if (d->state == IT_NONE) {
        rc = set_error(d, RINGLET_ERR_INVALID_USAGE,
                       "ringlet_ddp_finish: no iteration started: call ringlet_ddp_pre_forward before each forward");
        goto out;
    }
    if (d->state == IT_FINISHED) {
        rc = set_error(d, RINGLET_ERR_INVALID_USAGE,
                       "ringlet_ddp_finish: called twice in one iteration (%s)",
                       d->iter_rc ? d->iter_msg : "no error in it");
        goto out;
    }
    d->stats.finish_start_time = now_s();
    d->stats.buckets_before_finish = d->next_launch;

    /* parameters nobody reported */
    int missing = 0, first_missing = -1;
    for (int i = 0; i < d->nparams; i++)
        if (!d->ready[i]) {
            if (first_missing < 0) first_missing = i;
            missing++;
        }
    if (missing && !d->opt.find_unused_parameters) {
        char m[MSG_MAX], nb[200];
        int k = msgf(m, sizeof m,
                         "ringlet_ddp_finish: %s got no gradient in this iteration (not reported ready)",
                         tname(&d->params[first_missing], "parameter", first_missing, nb, sizeof nb));
        if (missing > 1 && k > 0 && (size_t)k < sizeof m) {
            k += msgf(m + k, sizeof m - (size_t)k, "; %d more:", missing - 1);
            int shown = 0;
            for (int i = first_missing + 1; i < d->nparams && shown < 4 && k > 0 && (size_t)k < sizeof m; i++)
                if (!d->ready[i]) {
                    k += msgf(m + k, sizeof m - (size_t)k, "%s %s", shown ? "," : "",
                                  tname(&d->params[i], "parameter", i, nb, sizeof nb));
                    shown++;
                }
            if (missing - 1 > shown && k > 0 && (size_t)k < sizeof m)
                k += msgf(m + k, sizeof m - (size_t)k, ", ...");
        }
        if (k > 0 && (size_t)k < sizeof m)
            msgf(m + k, sizeof m - (size_t)k,
                     ". If the forward does not use every parameter in every iteration, enable "
                     "find_unused_parameters");
        iter_fail(d, RINGLET_ERR_INVALID_USAGE, m);
    }
    for (int i = 0; i < d->nparams; i++)
        if (!d->ready[i]) mark(d, i, 0, d->opt.find_unused_parameters ? SRC_GRAD : SRC_ZERO);
    launch_ready(d); /* buckets with no parameter left to wait for (none, normally) */

    int defer = d->opt.find_unused_parameters; /* the used map decides what is written back */
    ringlet_result_t crc = RINGLET_SUCCESS;
    char cmsg[MSG_MAX] = "";
    for (int b = 0; b < d->nbuckets; b++) {
        bucket_t *bk = &d->buckets[b];
        for (int r = 0; r < bk->nreqs; r++)
            if (bk->reqs[r]) {
                ringlet_result_t w = ringlet_wait(&bk->reqs[r]);
                if (w && !bk->rc) bk->rc = w;
            }
        if (bk->t_complete <= 0) bk->t_complete = now_s();
        if (bk->rc && !crc) {
            crc = bk->rc;
            msgf(cmsg, sizeof cmsg, "all-reduce of bucket %d: %s", b, ringlet_comm_last_error(d->comm));
        }
        if (!crc && !defer) write_back(d, b);
        bk->t_done = now_s();
    }
    if (d->used_req) {
        ringlet_result_t w = ringlet_wait(&d->used_req);
        if (w && !crc) {
            crc = w;
            msgf(cmsg, sizeof cmsg, "all-reduce of the used-parameter map: %s", ringlet_comm_last_error(d->comm));
        }
    }
    if (!crc && defer) {
        for (int b = 0; b < d->nbuckets; b++) {
            write_back(d, b);
            d->buckets[b].t_done = now_s();
        }
    }
    if (!crc && d->mem_rc) {
        crc = d->mem_rc;
        msgf(cmsg, sizeof cmsg, "a copy or conversion of the gradients failed: %s", d->mem_msg);
    }
    if (crc) {
        iter_fail(d, crc, cmsg);
    } else if (d->nbuckets) {
        bucket_t *last = &d->buckets[d->nbuckets - 1];
        double total = mem_load_value(d, (char *)last->wire_mem + last->flag_index * ringlet_datatype_size(last->wire),
                                      last->wire);
        if (last->op == RINGLET_AVG) total *= d->nranks;
        double others = total - d->own_flag;
        if (others > 0.5 && !d->iter_rc) {
            char m[MSG_MAX];
            msgf(m, sizeof m,
                     "ringlet_ddp_finish: %.0f other rank(s) reported a DDP usage error in this iteration (for "
                     "example a gradient reported twice, or a parameter that got no gradient); see their messages. "
                     "The gradients of this iteration are not valid",
                     others);
            iter_fail(d, RINGLET_ERR_INVALID_USAGE, m);
        }
    }
    /* every rank reaches this point in the same (first) iteration: the broadcast matches */
    if (d->opt.rebuild_buckets && !d->rebuilt && !crc) {
        d->rebuilt = 1;
        rebuild(d);
    }
    d->state = IT_FINISHED;
    d->stats.iterations++;
    d->stats.finish_end_time = now_s();
    if (d->iter_rc) rc = set_error(d, d->iter_rc, "%s", d->iter_msg);
out:
    pthread_mutex_unlock(&d->mu);
    return rc;
}

ringlet_result_t ringlet_ddp_set_stream(ringlet_ddp_t d, void *stream) {
    CHECK_DDP(d, "ringlet_ddp_set_stream");
    pthread_mutex_lock(&d->mu);
    ringlet_result_t rc = RINGLET_SUCCESS;
    if (d->state == IT_SYNC && d->nready > 0)
        rc = set_error(d, RINGLET_ERR_INVALID_USAGE,
                       "ringlet_ddp_set_stream: buckets of an unfinished iteration are in flight (set it before the "
                       "forward or after ringlet_ddp_finish)");
    else
        d->stream = stream;
    pthread_mutex_unlock(&d->mu);
    return rc;
}

/* ---- introspection -------------------------------------------------------------------- */

ringlet_result_t ringlet_ddp_grad_view(ringlet_ddp_t d, int index, void **view) {
    CHECK_DDP(d, "ringlet_ddp_grad_view");
    pthread_mutex_lock(&d->mu);
    ringlet_result_t rc = check_param(d, index, "ringlet_ddp_grad_view");
    if (!rc && !view) rc = set_error(d, RINGLET_ERR_INVALID_ARGUMENT, "ringlet_ddp_grad_view: view is NULL");
    if (!rc) *view = slot_ptr(d, &d->params[index]);
    pthread_mutex_unlock(&d->mu);
    return rc;
}

ringlet_result_t ringlet_ddp_param_used(ringlet_ddp_t d, int index, int *used) {
    CHECK_DDP(d, "ringlet_ddp_param_used");
    pthread_mutex_lock(&d->mu);
    ringlet_result_t rc = check_param(d, index, "ringlet_ddp_param_used");
    if (!rc && !used) rc = set_error(d, RINGLET_ERR_INVALID_ARGUMENT, "ringlet_ddp_param_used: used is NULL");
    if (!rc) *used = d->used_global[index] != 0;
    pthread_mutex_unlock(&d->mu);
    return rc;
}

ringlet_result_t ringlet_ddp_num_buckets(ringlet_ddp_t d, int *n) {
    CHECK_DDP(d, "ringlet_ddp_num_buckets");
    if (!n) return set_error(d, RINGLET_ERR_INVALID_ARGUMENT, "ringlet_ddp_num_buckets: nbuckets is NULL");
    *n = d->nbuckets;
    return RINGLET_SUCCESS;
}

ringlet_result_t ringlet_ddp_param_bucket(ringlet_ddp_t d, int index, int *bucket, size_t *offset) {
    CHECK_DDP(d, "ringlet_ddp_param_bucket");
    ringlet_result_t rc = check_param(d, index, "ringlet_ddp_param_bucket");
    if (rc) return rc;
    if (bucket) *bucket = d->params[index].bucket;
    if (offset) *offset = d->params[index].offset;
    return RINGLET_SUCCESS;
}

ringlet_result_t ringlet_ddp_bucket_info(ringlet_ddp_t d, int b, ringlet_ddp_bucket_info_t *info) {
    CHECK_DDP(d, "ringlet_ddp_bucket_info");
    if (b < 0 || b >= d->nbuckets)
        return set_error(d, RINGLET_ERR_INVALID_ARGUMENT, "ringlet_ddp_bucket_info: bucket %d is out of range [0, %d)",
                         b, d->nbuckets);
    if (!info) return set_error(d, RINGLET_ERR_INVALID_ARGUMENT, "ringlet_ddp_bucket_info: info is NULL");
    pthread_mutex_lock(&d->mu);
    const bucket_t *bk = &d->buckets[b];
    info->memory = bk->mem;
    info->count = bk->count;
    info->dtype = bk->dtype;
    info->wire_dtype = bk->wire;
    info->nparams = bk->nparams;
    info->first_param = info->last_param = bk->params[0];
    for (int j = 1; j < bk->nparams; j++) {
        if (bk->params[j] < info->first_param) info->first_param = bk->params[j];
        if (bk->params[j] > info->last_param) info->last_param = bk->params[j];
    }
    info->launch_time = bk->t_launch;
    info->done_time = bk->t_done;
    info->complete_time = bk->t_complete;
    pthread_mutex_unlock(&d->mu);
    return RINGLET_SUCCESS;
}

ringlet_result_t ringlet_ddp_stats(ringlet_ddp_t d, ringlet_ddp_stats_t *s) {
    CHECK_DDP(d, "ringlet_ddp_stats");
    if (!s) return set_error(d, RINGLET_ERR_INVALID_ARGUMENT, "ringlet_ddp_stats: stats is NULL");
    pthread_mutex_lock(&d->mu);
    *s = d->stats;
    pthread_mutex_unlock(&d->mu);
    return RINGLET_SUCCESS;
}
