/* Construction of a DDP object (collective): the local checks, the registrations the
 * ranks compare (with the first difference named on every rank), the initial broadcast
 * of rank 0's values; destruction. */
#include <fenv.h>
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
       OPT_BCAST_BYTES, OPT_DIRECT_BYTES, OPT_REBUILD, OPT_INIT_ONLY, OPT_COUNT };
static const char *opt_names[OPT_COUNT] = {"bucket_cap_bytes",       "first_bucket_cap_bytes", "broadcast_buffers",
                                           "average_gradients",      "find_unused_parameters", "compression",
                                           "init_sync",              "RINGLET_DDP_BCAST_BYTES",
                                           "RINGLET_DDP_DIRECT_BYTES", "rebuild_buckets",
                                           "init_only_buffers"};

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
    v[OPT_REBUILD] = o->rebuild_buckets != 0; /* the rebuild's broadcast is a collective */
    v[OPT_INIT_ONLY] = (uint64_t)o->init_only_buffers;
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
            ddp_msgf(msg, n, "option %s is %" PRIu64 " on rank 0 but %" PRIu64 " on rank %d", opt_names[k], va, vb, r);
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
                ddp_format_shape(sa, sizeof sa, ta.dtype, ta.memory, ta.ndim, ta.shape);
                ddp_format_shape(sb, sizeof sb, tb.dtype, tb.memory, tb.ndim, tb.shape);
                char nm[200] = "";
                if (ta.name[0]) ddp_msgf(nm, sizeof nm, " ('%s')", ta.name);
                ddp_msgf(msg, n, "%s %" PRIu64 "%s is %s on rank 0 but %s on rank %d", what, i, nm, sa, sb, r);
                return;
            }
        }
        if (counts_a[kind] != counts_b[kind]) {
            ddp_msgf(msg, n, "rank 0 registers %" PRIu64 " %ss but rank %d registers %" PRIu64
                     " (the first %" PRIu64 " agree)", counts_a[kind], what, r, counts_b[kind], common);
            return;
        }
        /* the parameters of a list with equal counts agree: skip the rest of b's */
    }
    ddp_msgf(msg, n, "the registrations of rank 0 and rank %d differ", r);
}

/* ---- tensors -------------------------------------------------------------------- */

/* 1 / n rounded to nearest, whatever the thread set (fesetround, an enabled trap on
 * inexact): a rank whose thread rounds otherwise would scale its gradients by another
 * factor. The volatile variables keep the division between the switches. */
static double inverse_of(int n) {
    fenv_t env;
    feholdexcept(&env); /* saves the environment, clears the flags, stops traps */
    fesetround(FE_TONEAREST);
    volatile double one = 1.0, den = n, q;
    q = one / den;
    fesetenv(&env);
    return q;
}

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
        ddp_msgf(msg, msgn, "n%ss is %d (negative)", kind, n);
        return RINGLET_ERR_INVALID_ARGUMENT;
    }
    if (n > 0 && !in) {
        ddp_msgf(msg, msgn, "%ss is NULL but n%ss is %d", kind, kind, n);
        return RINGLET_ERR_INVALID_ARGUMENT;
    }
    tensor_t *ts = calloc(n ? (size_t)n : 1, sizeof *ts);
    if (!ts) {
        ddp_msgf(msg, msgn, "out of memory");
        return RINGLET_ERR_SYSTEM;
    }
    *out = ts;
    char nb[200];
    for (int i = 0; i < n; i++) {
        const ringlet_ddp_tensor_t *s = &in[i];
        tensor_t *t = &ts[i];
        t->name = strdup(s->name ? s->name : "");
        int nd = s->shape ? s->ndim : 1;
        t->shape = malloc(sizeof(int64_t) * (size_t)(nd > 0 && nd <= MAX_NDIM ? nd : 1)); /* checked below */
        if (!t->name || !t->shape) {
            ddp_msgf(msg, msgn, "out of memory");
            return RINGLET_ERR_SYSTEM;
        }
        t->data = s->data;
        t->grad = is_param ? s->grad : NULL;
        t->count = s->count;
        t->dtype = s->dtype;
        t->memory = s->memory;
        t->ndim = nd;
        t->bucket = -1;
        ddp_tname(t, kind, i, nb, sizeof nb);
        size_t es = ringlet_datatype_size(s->dtype);
        if (!es) {
            ddp_msgf(msg, msgn, "%s: dtype %d is not a ringlet_datatype_t", nb, (int)s->dtype);
            return RINGLET_ERR_INVALID_ARGUMENT;
        }
        if (is_param && !ddp_is_floating(s->dtype)) {
            ddp_msgf(msg, msgn, "%s: dtype %s; parameters must be float16, bfloat16, float32 or float64", nb,
                     ddp_dtype_name(s->dtype));
            return RINGLET_ERR_INVALID_ARGUMENT;
        }
        if (s->memory != RINGLET_DDP_HOST && s->memory != RINGLET_DDP_DEVICE) {
            ddp_msgf(msg, msgn, "%s: memory %d is neither RINGLET_DDP_HOST nor RINGLET_DDP_DEVICE", nb, (int)s->memory);
            return RINGLET_ERR_INVALID_ARGUMENT;
        }
        if (s->count > (SIZE_MAX / 4) / es) {
            ddp_msgf(msg, msgn, "%s: count %zu is too large", nb, s->count);
            return RINGLET_ERR_INVALID_ARGUMENT;
        }
        t->bytes = s->count * es;
        if (s->shape) {
            if (s->ndim < 0 || s->ndim > MAX_NDIM) {
                ddp_msgf(msg, msgn, "%s: ndim %d is out of range [0, %d]", nb, s->ndim, MAX_NDIM);
                return RINGLET_ERR_INVALID_ARGUMENT;
            }
            uint64_t prod = 1;
            int over = 0;
            for (int j = 0; j < s->ndim; j++) {
                if (s->shape[j] < 0) {
                    ddp_msgf(msg, msgn, "%s: shape[%d] is %" PRId64 " (negative)", nb, j, s->shape[j]);
                    return RINGLET_ERR_INVALID_ARGUMENT;
                }
                t->shape[j] = s->shape[j];
                if (s->shape[j] && prod > UINT64_MAX / (uint64_t)s->shape[j]) over = 1;
                prod *= (uint64_t)s->shape[j];
            }
            if (over || prod != s->count) {
                char sh[256];
                ddp_format_shape(sh, sizeof sh, s->dtype, s->memory, s->ndim, t->shape);
                ddp_msgf(msg, msgn, "%s: shape %s holds %s%" PRIu64 " elements but count is %zu", nb, sh,
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
                ddp_msgf(msg, msgn, "%s is in device memory, but ringlet has no device backend here (no usable GPU; "
                                "RINGLET_DEVICE=sim simulates one)", nb);
                return RINGLET_ERR_INVALID_USAGE;
            }
        }
        if (s->count && !s->data) {
            ddp_msgf(msg, msgn, "%s: data is NULL", nb);
            return RINGLET_ERR_INVALID_ARGUMENT;
        }
    }
    return RINGLET_SUCCESS;
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
    ddp_free_buckets(d->on_device, d->buckets, d->nbuckets);
    free(d->ready);
    free(d->used_local);
    free(d->used_global);
    ddp_mem_free(d->on_device, d->staging);
    if (d->value_pinned) ringlet_host_free(d->value_pinned);
    free(d->order);
    for (int k = 0; k < d->nretired; k++) ddp_free_buckets(d->on_device, d->retired[k], d->retired_n[k]);
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
            ddp_msgf(msg, n, "options->struct_size is %zu (expected %zu): initialise options with "
                     "ringlet_ddp_options_init", options->struct_size, sizeof *options);
            return RINGLET_ERR_INVALID_ARGUMENT;
        }
        memcpy(&d->opt, options, options->struct_size);
        d->opt.struct_size = sizeof d->opt;
    }
    ringlet_ddp_options_t *o = &d->opt;
    if (o->bucket_cap_bytes == 0 || o->first_bucket_cap_bytes == 0) {
        ddp_msgf(msg, n, "options: bucket_cap_bytes (%zu) and first_bucket_cap_bytes (%zu) must be positive",
                 o->bucket_cap_bytes, o->first_bucket_cap_bytes);
        return RINGLET_ERR_INVALID_ARGUMENT;
    }
    if ((unsigned)o->compression > RINGLET_DDP_COMPRESS_BFLOAT16) {
        ddp_msgf(msg, n, "options: compression %d is not a ringlet_ddp_compression_t", (int)o->compression);
        return RINGLET_ERR_INVALID_ARGUMENT;
    }
    ringlet_result_t rc = copy_tensors(params, nparams, 1, &d->params, msg, n);
    d->nparams = d->params ? (nparams > 0 ? nparams : 0) : 0;
    if (rc) return rc;
    /* The buckets' sizes (a sum of parameters', with alignment) must not wrap: each
     * parameter is under SIZE_MAX / 4 bytes, and so must their total be. */
    size_t total = 0;
    for (int i = 0; i < d->nparams; i++) {
        total += d->params[i].bytes + ALIGN_BYTES;
        if (total > SIZE_MAX / 4) {
            ddp_msgf(msg, n, "the parameters total more than %zu bytes (parameter %d, %zu bytes, passes it)",
                     SIZE_MAX / 4, i, d->params[i].bytes);
            return RINGLET_ERR_INVALID_ARGUMENT;
        }
    }
    rc = copy_tensors(buffers, nbuffers, 0, &d->buffers, msg, n);
    d->nbuffers = d->buffers ? (nbuffers > 0 ? nbuffers : 0) : 0;
    if (rc) return rc;
    if (o->init_only_buffers < 0 || o->init_only_buffers > d->nbuffers) {
        ddp_msgf(msg, n, "options: init_only_buffers is %d, not in [0, %d] (the number of buffers)",
                 o->init_only_buffers, d->nbuffers);
        return RINGLET_ERR_INVALID_ARGUMENT;
    }
    d->nsync_buffers = d->nbuffers - o->init_only_buffers;
    /* One kind of memory for everything: the buckets and the staging follow it. */
    int nt = d->nparams + d->nbuffers;
    for (int k = 0; k < nt; k++) {
        const tensor_t *t = k < d->nparams ? &d->params[k] : &d->buffers[k - d->nparams];
        if (k == 0) d->on_device = t->memory == RINGLET_DDP_DEVICE;
        if ((t->memory == RINGLET_DDP_DEVICE) != d->on_device) {
            char nb[200];
            ddp_msgf(msg, n, "%s is in %s memory but the first tensor is in %s memory: one DDP object takes one kind",
                 ddp_tname(t, k < d->nparams ? "parameter" : "buffer", k < d->nparams ? k : k - d->nparams, nb, sizeof nb),
                 d->on_device ? "host" : "device", d->on_device ? "device" : "host");
            return RINGLET_ERR_INVALID_ARGUMENT;
        }
    }
    /* Device memory: one device, and it is current. The buckets and staging are allocated
     * on the current device and a default stream is the current device's for the copies:
     * on another, construction would fail later, far from the cause. */
    d->device = -1;
    for (int k = 0; k < nt && d->on_device; k++) {
        const tensor_t *t = k < d->nparams ? &d->params[k] : &d->buffers[k - d->nparams];
        int dev = -1;
        if (!t->count || !t->data || ringlet_mem_device(t->data, &dev) || dev < 0) continue;
        if (d->device >= 0 && dev != d->device) {
            char nb[200];
            ddp_msgf(msg, n, "%s is on device %d but the tensors before it on device %d: one DDP object takes one device",
                     ddp_tname(t, k < d->nparams ? "parameter" : "buffer", k < d->nparams ? k : k - d->nparams, nb, sizeof nb),
                     dev, d->device);
            return RINGLET_ERR_INVALID_ARGUMENT;
        }
        d->device = dev;
    }
    int cur = -1;
    if (d->device >= 0 && ringlet_get_device(&cur) == RINGLET_SUCCESS && cur != d->device) {
        ddp_msgf(msg, n, "the tensors are on device %d but the current device is %d: make device %d current first "
                 "(ringlet_set_device; torch.cuda.set_device)", d->device, cur, d->device);
        return RINGLET_ERR_INVALID_USAGE;
    }
    int sdev = ddp_stream_other_device(d, d->opt.stream);
    if (sdev >= 0) {
        ddp_msgf(msg, n, "options.stream is a stream of device %d, but the tensors are on device %d", sdev, d->device);
        return RINGLET_ERR_INVALID_ARGUMENT;
    }
    d->stream = d->opt.stream;
    return RINGLET_SUCCESS;
}

/* Every rank's outcome of a step of its own, agreed on: when a rank failed, the highest
 * such rank's code and message become every rank's error. */
static ringlet_result_t agree_or_fail(struct ringlet_ddp *d, ringlet_comm_t comm, ringlet_result_t lrc,
                                      const char *lmsg) {
    int32_t mine = lrc ? (int32_t)(d->rank + 1) * 64 + (int32_t)lrc : 0, worst = 0;
    ringlet_result_t rc = ringlet_allreduce(&mine, &worst, 1, RINGLET_INT32, RINGLET_MAX, comm, NULL);
    if (rc) return ddp_set_error(NULL, rc, "ringlet_ddp_create: %s", ringlet_comm_last_error(comm));
    if (!worst) return RINGLET_SUCCESS;
    int bad = worst / 64 - 1;
    ringlet_result_t code = (ringlet_result_t)(worst % 64);
    if (code == RINGLET_SUCCESS || code >= RINGLET_NUM_RESULTS) code = RINGLET_ERR_SYSTEM;
    char rmsg[MSG_MAX];
    memset(rmsg, 0, sizeof rmsg);
    const char *own = "ringlet_ddp_create: "; /* said once, in front */
    if (d->rank == bad) snprintf(rmsg, sizeof rmsg, "%s", strncmp(lmsg, own, strlen(own)) ? lmsg : lmsg + strlen(own));
    rc = ringlet_broadcast(rmsg, rmsg, sizeof rmsg, RINGLET_UINT8, bad, comm, NULL);
    if (rc) return ddp_set_error(NULL, rc, "ringlet_ddp_create: %s", ringlet_comm_last_error(comm));
    rmsg[sizeof rmsg - 1] = 0;
    return ddp_set_error(NULL, code, "ringlet_ddp_create: rank %d: %s", bad, rmsg);
}

ringlet_result_t ringlet_ddp_create(ringlet_ddp_t *out, ringlet_comm_t comm, const ringlet_ddp_tensor_t *params,
                                    int nparams, const ringlet_ddp_tensor_t *buffers, int nbuffers,
                                    const ringlet_ddp_options_t *options) {
    if (!out) return ddp_set_error(NULL, RINGLET_ERR_INVALID_ARGUMENT, "ringlet_ddp_create: ddp (the output) is NULL");
    *out = NULL;
    if (!comm) return ddp_set_error(NULL, RINGLET_ERR_INVALID_ARGUMENT, "ringlet_ddp_create: comm is NULL");
    struct ringlet_ddp *d = calloc(1, sizeof *d);
    if (!d) return ddp_set_error(NULL, RINGLET_ERR_SYSTEM, "ringlet_ddp_create: out of memory");
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
        ddp_set_error(NULL, rc, "ringlet_ddp_create: %s", ringlet_comm_last_error(comm));
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
            ddp_msgf(lmsg, sizeof lmsg, "out of memory");
        }
    }
    uint64_t mine[SUMMARY_WORDS] = {SUMMARY_MAGIC,           (uint64_t)lrc,  (uint64_t)(lrc ? 0 : d->nparams),
                                    (uint64_t)(lrc ? 0 : d->nbuffers), hash_opts, (uint64_t)desc.len,
                                    0, 0};
    uint64_t *all = malloc(sizeof(uint64_t) * SUMMARY_WORDS * (size_t)d->nranks);
    if (!all) {
        /* cannot even take part: the others will see this rank fail */
        free(desc.p);
        ddp_set_error(NULL, RINGLET_ERR_SYSTEM, "ringlet_ddp_create: out of memory");
        ddp_free(d);
        return RINGLET_ERR_SYSTEM;
    }
    rc = ringlet_allgather(mine, all, SUMMARY_WORDS, RINGLET_UINT64, comm, NULL);
    if (rc) {
        ddp_set_error(NULL, rc, "ringlet_ddp_create: exchanging the registrations: %s", ringlet_comm_last_error(comm));
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
            ddp_set_error(NULL, rc, "ringlet_ddp_create: %s", ringlet_comm_last_error(comm));
            goto fail;
        }
        rmsg[sizeof rmsg - 1] = 0;
        rc = (ringlet_result_t)all[bad * SUMMARY_WORDS + 1];
        if (rc == RINGLET_SUCCESS || rc >= RINGLET_NUM_RESULTS) rc = RINGLET_ERR_INVALID_USAGE;
        if (lrc && bad != d->rank && strcmp(rmsg, lmsg) != 0)
            ddp_set_error(NULL, rc, "ringlet_ddp_create: rank %d: %s (and on this rank, %d: %s)", bad, rmsg, d->rank,
                      lmsg);
        else
            ddp_set_error(NULL, rc, "ringlet_ddp_create: rank %d: %s", bad, rmsg);
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
            rc = ddp_set_error(NULL, RINGLET_ERR_SYSTEM, "ringlet_ddp_create: out of memory");
            goto fail;
        }
        if (d->rank == 0) memcpy(a, desc.p, la);
        if (d->rank == diff) memcpy(b, desc.p, lb);
        rc = ringlet_broadcast(a, a, la, RINGLET_UINT8, 0, comm, NULL);
        if (!rc) rc = ringlet_broadcast(b, b, lb, RINGLET_UINT8, diff, comm, NULL);
        if (rc) {
            ddp_set_error(NULL, rc, "ringlet_ddp_create: %s", ringlet_comm_last_error(comm));
        } else {
            char m[MSG_MAX - 64];
            first_difference(a, la, b, lb, diff, m, sizeof m);
            rc = ddp_set_error(NULL, RINGLET_ERR_INVALID_USAGE,
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
    d->scale = d->opt.average_gradients ? inverse_of(d->nranks) : 1.0;
    ringlet_result_t lrc4 = ddp_build_buckets(d);
    char msg4[MSG_MAX];
    if (lrc4) memcpy(msg4, d->last_error, sizeof msg4);
    size_t np = d->nparams ? (size_t)d->nparams : 1;
    if (!lrc4) {
        d->ready = calloc(np, 1);
        d->used_local = calloc(np, 1);
        d->used_global = calloc(np, 1);
        d->order = malloc(sizeof(int) * np);
        d->staging_slot = ddp_staging_slot(d->buffers, d->nsync_buffers, d->bcast_cap);
        d->staging = ddp_mem_alloc(d, 2 * d->staging_slot);
        if (d->on_device && ringlet_host_alloc((void **)&d->value_pinned, 64)) d->value_pinned = NULL;
        if (!d->ready || !d->used_local || !d->used_global || !d->staging || !d->order ||
            (d->on_device && !d->value_pinned)) {
            lrc4 = RINGLET_ERR_SYSTEM;
            ddp_msgf(msg4, sizeof msg4, "out of memory (buckets and staging%s)", d->on_device ? ", device memory" : "");
        }
    }
    /* 4b. a rank that could not make them (device memory running out on one GPU) fails
     * every rank, with its message: the others would wait for it in the broadcasts below */
    if ((rc = agree_or_fail(d, comm, lrc4, msg4))) goto fail;
    memset(d->used_global, 1, np);
    d->state = IT_NONE;
    d->prev_forward_synced = 1;

    /* 5. rank 0's values everywhere */
    if (d->opt.init_sync) {
        /* Local failures (memory, a copy) are agreed on before and after the broadcast:
         * the others would wait in it, or succeed beside a rank that failed. */
        int nt = d->nparams + d->nbuffers;
        tensor_t *all_t = calloc(nt ? (size_t)nt : 1, sizeof *all_t);
        unsigned char *stg = NULL;
        size_t slot = ALIGN_BYTES;
        if (all_t) {
            memcpy(all_t, d->params, sizeof *all_t * (size_t)d->nparams);
            memcpy(all_t + d->nparams, d->buffers, sizeof *all_t * (size_t)d->nbuffers);
            slot = ddp_staging_slot(all_t, nt, d->bcast_cap);
            stg = ddp_mem_alloc(d, 2 * slot);
        }
        rc = agree_or_fail(d, comm, all_t && stg ? RINGLET_SUCCESS : RINGLET_ERR_SYSTEM,
                           "out of memory (the initial broadcast's staging)");
        if (!rc) {
            rc = ddp_bcast_tensors(d, all_t, nt, stg, slot);
            if (rc) ddp_set_error(NULL, rc, "ringlet_ddp_create: %s", d->last_error);
        }
        if (stg) ddp_mem_free(d->on_device, stg);
        free(all_t);
        if (rc) goto fail;
        char cmsg[MSG_MAX];
        ddp_msgf(cmsg, sizeof cmsg, "copying to and from the broadcast staging: %s", d->mem_msg);
        if ((rc = agree_or_fail(d, comm, d->mem_rc, cmsg))) goto fail;
    }

    /* 6. gradients as views of their buckets */
    if (d->opt.gradient_as_bucket_view) {
        for (int i = 0; i < d->nparams; i++) {
            tensor_t *p = &d->params[i];
            void *v = ddp_slot_ptr(d, p);
            if (p->grad && p->grad != v) ddp_mem_copy(d, v, p->grad, p->bytes);
            p->grad = v;
        }
    }
    *out = d;
    ddp_t_last_error[0] = 0;
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
    if (!d) return ddp_set_error(NULL, RINGLET_ERR_INVALID_ARGUMENT, "ringlet_ddp_destroy: ddp is NULL");
    int prev;
    ddp_device_enter(d, "ringlet_ddp_destroy", &prev); /* the default stream below is that device's */
    pthread_mutex_lock(&d->mu);
    ddp_settle_previous(d, "ringlet_ddp_destroy"); /* its failures no longer matter */
    wait_in_flight(d);
    /* device memory: the queued write-backs land before the buckets go */
    if (d->on_device) ringlet_stream_synchronize(ddp_dstream(d));
    pthread_mutex_unlock(&d->mu);
    ddp_free(d);
    ddp_device_leave(prev);
    return RINGLET_SUCCESS;
}
