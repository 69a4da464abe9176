/* ringlet-perf: checking a result. After the timed calls each form runs once more on
 * the deterministic pattern; every output element is compared with the answer computed
 * here, inputs must be unchanged, and nothing outside the output may be written (the
 * rest of the receive buffer is poisoned with SENTINEL first). */
#include <math.h>
#include <string.h>

#include "perf.h"

static unsigned char g_sentinel_block[4096]; /* SENTINEL bytes: check_once writes them */

/* elements of size ts in [p, p+len) that are not all sentinel bytes */
static size_t count_touched(const char *p, size_t len, size_t ts) {
    size_t bad = 0, off = 0;
    while (off < len) {
        size_t chunk = len - off < sizeof g_sentinel_block ? len - off : sizeof g_sentinel_block;
        if (memcmp(p + off, g_sentinel_block, chunk) != 0) {
            for (size_t e = 0; e < chunk; e += ts)
                if (memcmp(p + off + e, g_sentinel_block, ts) != 0) bad++;
        }
        off += chunk;
    }
    return bad;
}

/* tolerance (relative to max(|expected|, 1)) for floating types */
static double float_tol(ringlet_datatype_t dt, int has_op, ringlet_op_t op, int n) {
    if (!has_op || op == RINGLET_MIN || op == RINGLET_MAX || op == RINGLET_PROD) return 0.0;
    int avg = op == RINGLET_AVG;
    switch (dt) {
    case RINGLET_FLOAT64:
        return avg ? 1e-12 : 0.0;
    case RINGLET_FLOAT32:
        return avg ? 1e-6 : 0.0;
    case RINGLET_FLOAT16: /* partial sums <= 8n are exact up to 2048 */
        return avg ? 2e-3 : (8 * n > 2048 ? 4e-3 * log2((double)n) : 0.0);
    case RINGLET_BFLOAT16: /* exact up to 256 */
        return avg ? 1.6e-2 : (8 * n > 256 ? 2e-2 * log2((double)n) : 0.0);
    default:
        return 0.0;
    }
}

typedef struct {
    ringlet_datatype_t dt;
    ringlet_op_t op;
    int has_op;
    int n;
    uint64_t mask;
    int bits;
    double tol;
    pattern_t pat;
} checker_t;

static checker_t make_checker(const ctx_t *c) {
    checker_t k;
    k.dt = c->dt;
    k.op = c->op;
    k.has_op = kColl[c->o.coll].has_op;
    k.n = c->nranks;
    k.bits = (int)(c->ts * 8);
    k.mask = k.bits >= 64 ? ~0ull : ((1ull << k.bits) - 1);
    k.tol = float_tol(c->dt, k.has_op, c->op, c->nranks);
    k.pat = make_pattern(c->dt, k.has_op, c->op);
    return k;
}

static int64_t sign_extend(uint64_t x, int bits) {
    if (bits >= 64) return (int64_t)x;
    uint64_t m = 1ull << (bits - 1);
    x &= (1ull << bits) - 1;
    return (int64_t)((x ^ m) - m);
}

/* Compares element i of buf with the reduction over all ranks of input index k
 * (or, with src >= 0, with rank src's input k alone). Returns 1 when wrong. */
static int wrong_elem(const checker_t *k, const void *buf, size_t i, size_t idx, int src) {
    if (!is_float(k->dt)) {
        uint64_t want;
        if (src >= 0 || !k->has_op) {
            want = (uint64_t)gen(&k->pat, src, idx) & k->mask;
        } else {
            uint64_t acc = 0;
            int64_t mm = 0;
            int sgn = is_signed_int(k->dt);
            for (int r = 0; r < k->n; r++) {
                int64_t v = gen(&k->pat, r, idx);
                switch (k->op) {
                case RINGLET_PROD:
                    acc = r == 0 ? (uint64_t)v : acc * (uint64_t)v;
                    break;
                case RINGLET_MAX:
                    mm = r == 0 || v > mm ? v : mm;
                    break;
                case RINGLET_MIN:
                    mm = r == 0 || v < mm ? v : mm;
                    break;
                default: /* sum, avg */
                    acc += (uint64_t)v;
                    break;
                }
            }
            if (k->op == RINGLET_MAX || k->op == RINGLET_MIN)
                want = (uint64_t)mm;
            else if (k->op == RINGLET_AVG) {
                acc &= k->mask;
                if (sgn)
                    want = (uint64_t)(sign_extend(acc, k->bits) / (int64_t)k->n);
                else
                    want = acc / (uint64_t)k->n;
            } else
                want = acc;
            want &= k->mask;
        }
        return load_bits(buf, k->dt, i) != want;
    }
    double want;
    if (src >= 0 || !k->has_op) {
        want = (double)gen(&k->pat, src, idx);
    } else {
        double acc = 0;
        for (int r = 0; r < k->n; r++) {
            double v = (double)gen(&k->pat, r, idx);
            switch (k->op) {
            case RINGLET_PROD:
                acc = r == 0 ? v : acc * v;
                break;
            case RINGLET_MAX:
                acc = r == 0 || v > acc ? v : acc;
                break;
            case RINGLET_MIN:
                acc = r == 0 || v < acc ? v : acc;
                break;
            default:
                acc += v;
                break;
            }
        }
        want = k->op == RINGLET_AVG ? acc / k->n : acc;
    }
    double got = load_double(buf, k->dt, i);
    if (k->tol == 0.0) {
        /* the exact expectation, rounded to the type as the library must */
        char tmp[8];
        switch (k->dt) {
        case RINGLET_FLOAT16: {
            uint16_t h = f32_to_f16((float)want);
            memcpy(tmp, &h, 2);
            break;
        }
        case RINGLET_BFLOAT16: {
            uint16_t h = f32_to_bf16((float)want);
            memcpy(tmp, &h, 2);
            break;
        }
        case RINGLET_FLOAT32: {
            float f = (float)want;
            memcpy(tmp, &f, 4);
            break;
        }
        default:
            memcpy(tmp, &want, 8);
            break;
        }
        return !(got == load_double(tmp, k->dt, 0));
    }
    double scale = fabs(want) > 1.0 ? fabs(want) : 1.0;
    return !(fabs(got - want) <= k->tol * scale);
}

/* The same answer as wrong_elem, summed over m elements, for float32 and float64
 * with an exact expectation (k->tol == 0): element i0 + j of buf against input
 * index idx0 + j of rank src, or (src < 0) the sum over all ranks. Works a block of
 * elements at a time, one rank after the other, which makes large checks several
 * times faster than wrong_elem (a 256 MiB check took seconds per rank). */
static int64_t fast_wrong(const checker_t *k, const void *buf, size_t i0, size_t idx0, size_t m, int src) {
    enum { BLK = 2048 };
    int64_t acc[BLK];
    int64_t wrong = 0;
    for (size_t b = 0; b < m; b += BLK) {
        size_t len = m - b < BLK ? m - b : BLK;
        size_t idx = idx0 + b;
        if (src >= 0) {
            for (size_t j = 0; j < len; j++) acc[j] = gen(&k->pat, src, idx + j);
        } else {
            memset(acc, 0, len * sizeof acc[0]);
            for (int r = 0; r < k->n; r++)
                for (size_t j = 0; j < len; j++) acc[j] += gen(&k->pat, r, idx + j);
        }
        if (k->dt == RINGLET_FLOAT32) {
            const float *f = (const float *)buf + i0 + b;
            for (size_t j = 0; j < len; j++) wrong += !(f[j] == (float)acc[j]);
        } else {
            const double *d = (const double *)buf + i0 + b;
            for (size_t j = 0; j < len; j++) wrong += !(d[j] == (double)acc[j]);
        }
    }
    return wrong;
}

/* Fills the input, poisons the rest of rbuf, runs the collective once, and counts
 * wrong elements: wrong results, changed inputs, and writes outside the output. */
int64_t check_once(ctx_t *c, const layout_t *L, int inplace) {
    memset(g_sentinel_block, SENTINEL, sizeof g_sentinel_block); /* cheap: 4 KiB a check */
    const checker_t k = make_checker(c);
    const size_t ts = c->ts;
    const int me = c->rank;
    const coll_t coll = c->o.coll;

    /* 1. inputs and poison */
    memset(c->rbuf, SENTINEL, c->alloc_bytes);
    char *in = inplace ? c->rbuf + L->in_off_ip * ts : c->sbuf;
    fill(in, c->dt, &k.pat, me, 0, L->in_elems);

    /* 2. one call, in the mode under test (device: on the twins, copied across) */
    const void *s;
    void *r;
    copy_across(c, 1, c->alloc_bytes);
    pointers(c, L, inplace, &s, &r);
    const char *name = coll_call_name(coll, c->o.blocking);
    if (c->o.blocking)
        CHECK_RL(c, name, issue(c, s, r, L->pc, NULL));
    else {
        CHECK_RL(c, name, issue(c, s, r, L->pc, &c->reqs[0]));
        CHECK_RL(c, "ringlet_wait", ringlet_wait(&c->reqs[0]));
    }
    copy_across(c, 0, c->alloc_bytes);

    /* 3. the output */
    int64_t wrong = 0;
    const char *out = inplace ? c->rbuf + L->out_off_ip * ts : c->rbuf;
    /* exact float32/float64 results: the block-wise checker (sum only when reducing) */
    const int fast = (c->dt == RINGLET_FLOAT32 || c->dt == RINGLET_FLOAT64) && k.tol == 0.0;
    const int fast_out = fast && (!k.has_op || k.op == RINGLET_SUM);
    if (fast_out) {
        switch (coll) {
        case C_ALLREDUCE:
        case C_REDUCE:
            wrong += fast_wrong(&k, out, 0, 0, L->out_elems, -1);
            break;
        case C_BROADCAST:
            wrong += fast_wrong(&k, out, 0, 0, L->out_elems, c->o.root);
            break;
        case C_ALLGATHER:
            for (int src = 0; src < c->nranks && L->pc; src++)
                wrong += fast_wrong(&k, out, (size_t)src * L->pc, 0, L->pc, src);
            break;
        case C_REDUCESCATTER:
            wrong += fast_wrong(&k, out, 0, (size_t)me * L->pc, L->out_elems, -1);
            break;
        default:
            break;
        }
    }
    for (size_t i = 0; i < (fast_out ? 0 : L->out_elems); i++) {
        switch (coll) {
        case C_ALLREDUCE:
        case C_REDUCE:
            wrong += wrong_elem(&k, out, i, i, -1);
            break;
        case C_BROADCAST:
            wrong += wrong_elem(&k, out, i, i, c->o.root);
            break;
        case C_ALLGATHER:
            wrong += wrong_elem(&k, out, i, i % L->pc, (int)(i / L->pc));
            break;
        case C_REDUCESCATTER:
            wrong += wrong_elem(&k, out, i, (size_t)me * L->pc + i, -1);
            break;
        default:
            break;
        }
    }

    /* 4. inputs must be left as they were (the parts that are not output) */
    const size_t out_lo = inplace ? L->out_off_ip : 0, out_hi = out_lo + L->out_elems;
    const size_t in_lo = inplace ? L->in_off_ip : 0;
    if (fast) { /* the input indices outside [out_lo, out_hi) in place; all of them otherwise */
        size_t a = L->in_elems, b = L->in_elems;
        if (inplace) {
            a = out_lo > in_lo ? out_lo - in_lo : 0;
            b = out_hi > in_lo ? out_hi - in_lo : 0;
            if (a > L->in_elems) a = L->in_elems;
            if (b > L->in_elems) b = L->in_elems;
            if (b < a) b = a;
        }
        wrong += fast_wrong(&k, in, 0, 0, a, me) + fast_wrong(&k, in, b, b, L->in_elems - b, me);
    }
    for (size_t j = 0; j < (fast ? 0 : L->in_elems); j++) {
        size_t pos = in_lo + j; /* position in rbuf when in place */
        if (inplace && pos >= out_lo && pos < out_hi) continue;
        wrong += wrong_elem(&k, in, j, j, me);
    }

    /* 5. nothing written outside the output (and, in place, the input) in rbuf */
    size_t lo = out_lo, hi = out_hi;
    if (inplace && L->in_elems) {
        if (in_lo < lo || lo == hi) lo = in_lo;
        if (in_lo + L->in_elems > hi) hi = in_lo + L->in_elems;
    }
    if (lo == hi) lo = hi = 0;
    wrong += (int64_t)count_touched(c->rbuf, lo * ts, ts);
    wrong += (int64_t)count_touched(c->rbuf + hi * ts, c->alloc_bytes - hi * ts, ts);
    return wrong;
}
