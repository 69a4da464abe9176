/* ringlet-perf: bandwidth and correctness of ringlet's collectives, with the
 * output layout of nccl-tests (all_reduce_perf and friends), so that tables from
 * the two diff line by line.
 *
 *   ringlet-run -n 4 ringlet-perf allreduce -b 4K -e 64M -f 4 -c 1
 *
 * One process per rank; the ranks come from the launcher's environment
 * (ringlet_comm_init_env). Only rank 0 prints. See perf/README.md.
 *
 * Uses the public header include/ringlet.h, and the device layer's internal header
 * (src/device/device.h) for device memory and streams (-M device): the same source runs
 * over CUDA on a GPU and over the simulated GPU (RINGLET_DEVICE=sim).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "device.h"
#include "ringlet.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* ------------------------------------------------------------------------- */
/* collectives                                                               */

typedef enum { C_ALLREDUCE, C_BROADCAST, C_REDUCE, C_ALLGATHER, C_REDUCESCATTER, C_COUNT } coll_t;

static const struct {
    const char *name;
    const char *alias1; /* nccl-tests' binary-style names */
    const char *alias2;
    int has_op;   /* the collective reduces */
    int has_root; /* the collective has a root */
} kColl[C_COUNT] = {
    [C_ALLREDUCE] = {"allreduce", "all_reduce", "all_reduce_perf", 1, 0},
    [C_BROADCAST] = {"broadcast", "bcast", "broadcast_perf", 0, 1},
    [C_REDUCE] = {"reduce", "reduce_perf", "reduce_perf", 1, 1},
    [C_ALLGATHER] = {"allgather", "all_gather", "all_gather_perf", 0, 0},
    [C_REDUCESCATTER] = {"reducescatter", "reduce_scatter", "reduce_scatter_perf", 1, 0},
};

/* nccl-tests' bus bandwidth factors */
static double bus_factor(coll_t c, int n) {
    switch (c) {
    case C_ALLREDUCE:
        return 2.0 * (n - 1) / n;
    case C_ALLGATHER:
    case C_REDUCESCATTER:
        return (double)(n - 1) / n;
    default:
        return 1.0;
    }
}

/* ------------------------------------------------------------------------- */
/* data types and ops                                                        */

static const struct {
    const char *name; /* as nccl-tests prints it */
    const char *alias1;
    const char *alias2;
    ringlet_datatype_t dt;
} kTypes[] = {
    {"int8", "char", NULL, RINGLET_INT8},          {"uint8", NULL, NULL, RINGLET_UINT8},
    {"int32", "int", NULL, RINGLET_INT32},         {"uint32", NULL, NULL, RINGLET_UINT32},
    {"int64", NULL, NULL, RINGLET_INT64},          {"uint64", NULL, NULL, RINGLET_UINT64},
    {"half", "float16", "fp16", RINGLET_FLOAT16},  {"float", "float32", "fp32", RINGLET_FLOAT32},
    {"double", "float64", "fp64", RINGLET_FLOAT64}, {"bfloat16", "bf16", NULL, RINGLET_BFLOAT16},
};
#define NTYPES ((int)(sizeof kTypes / sizeof kTypes[0]))

static const struct {
    const char *name;
    ringlet_op_t op;
} kOps[] = {
    {"sum", RINGLET_SUM}, {"prod", RINGLET_PROD}, {"max", RINGLET_MAX}, {"min", RINGLET_MIN}, {"avg", RINGLET_AVG},
};
#define NOPS ((int)(sizeof kOps / sizeof kOps[0]))

static const char *type_name(ringlet_datatype_t dt) {
    for (int i = 0; i < NTYPES; i++)
        if (kTypes[i].dt == dt) return kTypes[i].name;
    return "?";
}

static const char *op_name(ringlet_op_t op) {
    for (int i = 0; i < NOPS; i++)
        if (kOps[i].op == op) return kOps[i].name;
    return "?";
}

static int is_float(ringlet_datatype_t dt) {
    return dt == RINGLET_FLOAT16 || dt == RINGLET_FLOAT32 || dt == RINGLET_FLOAT64 || dt == RINGLET_BFLOAT16;
}

static int is_signed_int(ringlet_datatype_t dt) {
    return dt == RINGLET_INT8 || dt == RINGLET_INT32 || dt == RINGLET_INT64;
}

/* IEEE binary16 <-> binary32, round to nearest even */
static uint16_t f32_to_f16(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    uint32_t sign = (x >> 16) & 0x8000u;
    uint32_t exp = (x >> 23) & 0xffu;
    uint32_t man = x & 0x7fffffu;
    if (exp == 0xff) return (uint16_t)(sign | 0x7c00u | (man ? 0x200u : 0));
    int e = (int)exp - 127 + 15;
    if (e >= 31) return (uint16_t)(sign | 0x7c00u);
    if (e <= 0) {
        if (e < -10) return (uint16_t)sign;
        man |= 0x800000u;
        unsigned shift = (unsigned)(14 - e);
        uint32_t h = man >> shift;
        uint32_t rem = man & ((1u << shift) - 1);
        uint32_t half = 1u << (shift - 1);
        if (rem > half || (rem == half && (h & 1))) h++;
        return (uint16_t)(sign | h);
    }
    uint32_t h = ((uint32_t)e << 10) | (man >> 13);
    uint32_t rem = man & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1))) h++; /* a carry into the exponent is right */
    return (uint16_t)(sign | h);
}

static float f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t man = h & 0x3ffu;
    float f;
    if (exp == 0) {
        f = (float)man * 5.9604644775390625e-8f; /* man * 2^-24 */
        return sign ? -f : f;
    }
    uint32_t x = exp == 31 ? (sign | 0x7f800000u | (man << 13)) : (sign | ((exp + 112) << 23) | (man << 13));
    memcpy(&f, &x, 4);
    return f;
}

static uint16_t f32_to_bf16(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40u);
    x += 0x7fffu + ((x >> 16) & 1u);
    return (uint16_t)(x >> 16);
}

static float bf16_to_f32(uint16_t h) {
    uint32_t x = (uint32_t)h << 16;
    float f;
    memcpy(&f, &x, 4);
    return f;
}

/* Element access through memcpy: no aliasing questions, and the compiler turns it
 * into plain loads and stores. */
static void store_val(void *buf, ringlet_datatype_t dt, size_t i, int64_t v) {
    char *p = buf;
    switch (dt) {
    case RINGLET_INT8:
    case RINGLET_UINT8: {
        uint8_t x = (uint8_t)(uint64_t)v;
        memcpy(p + i, &x, 1);
        break;
    }
    case RINGLET_INT32:
    case RINGLET_UINT32: {
        uint32_t x = (uint32_t)(uint64_t)v;
        memcpy(p + 4 * i, &x, 4);
        break;
    }
    case RINGLET_INT64:
    case RINGLET_UINT64: {
        uint64_t x = (uint64_t)v;
        memcpy(p + 8 * i, &x, 8);
        break;
    }
    case RINGLET_FLOAT16: {
        uint16_t x = f32_to_f16((float)v);
        memcpy(p + 2 * i, &x, 2);
        break;
    }
    case RINGLET_BFLOAT16: {
        uint16_t x = f32_to_bf16((float)v);
        memcpy(p + 2 * i, &x, 2);
        break;
    }
    case RINGLET_FLOAT32: {
        float x = (float)v;
        memcpy(p + 4 * i, &x, 4);
        break;
    }
    case RINGLET_FLOAT64: {
        double x = (double)v;
        memcpy(p + 8 * i, &x, 8);
        break;
    }
    default:
        break;
    }
}

/* raw bits of an integer element, zero-extended */
static uint64_t load_bits(const void *buf, ringlet_datatype_t dt, size_t i) {
    const char *p = buf;
    switch (dt) {
    case RINGLET_INT8:
    case RINGLET_UINT8: {
        uint8_t x;
        memcpy(&x, p + i, 1);
        return x;
    }
    case RINGLET_INT32:
    case RINGLET_UINT32: {
        uint32_t x;
        memcpy(&x, p + 4 * i, 4);
        return x;
    }
    default: {
        uint64_t x;
        memcpy(&x, p + 8 * i, 8);
        return x;
    }
    }
}

static double load_double(const void *buf, ringlet_datatype_t dt, size_t i) {
    const char *p = buf;
    switch (dt) {
    case RINGLET_FLOAT16: {
        uint16_t x;
        memcpy(&x, p + 2 * i, 2);
        return f16_to_f32(x);
    }
    case RINGLET_BFLOAT16: {
        uint16_t x;
        memcpy(&x, p + 2 * i, 2);
        return bf16_to_f32(x);
    }
    case RINGLET_FLOAT32: {
        float x;
        memcpy(&x, p + 4 * i, 4);
        return x;
    }
    default: {
        double x;
        memcpy(&x, p + 8 * i, 8);
        return x;
    }
    }
}

/* ------------------------------------------------------------------------- */
/* deterministic input pattern                                               */

/* The value of rank r's input element i: a small integer, exact in every type,
 * chosen so that the reduction of up to hundreds of ranks stays exact too:
 *   sum, avg           -8..8 (unsigned 0..16)
 *   prod               floats +-1, signed ints +-1 +-2, unsigned 1..3 (ints wrap, as specified)
 *   min, max, no op    -100..100 (unsigned 0..200) */
typedef struct {
    int64_t lo;
    uint32_t span;
    int prod_float; /* +-1 only */
    int prod_sint;  /* +-1, +-2 */
} pattern_t;

static pattern_t make_pattern(ringlet_datatype_t dt, int has_op, ringlet_op_t op) {
    pattern_t p = {0, 1, 0, 0};
    int sgn = is_float(dt) || is_signed_int(dt);
    if (has_op && (op == RINGLET_SUM || op == RINGLET_AVG)) {
        p.lo = sgn ? -8 : 0;
        p.span = 17;
    } else if (has_op && op == RINGLET_PROD) {
        if (is_float(dt))
            p.prod_float = 1;
        else if (sgn)
            p.prod_sint = 1;
        else {
            p.lo = 1;
            p.span = 3;
        }
    } else {
        p.lo = sgn ? -100 : 0;
        p.span = 201;
    }
    return p;
}

static uint64_t g_seed = 0x5eed1e7u;

static inline int64_t gen(const pattern_t *p, int rank, size_t i) {
    uint64_t h = ((uint64_t)i + 1) * 0x9e3779b97f4a7c15ull ^ ((uint64_t)rank + 1) * 0xc2b2ae3d27d4eb4full ^ g_seed;
    h ^= h >> 31;
    h *= 0xbf58476d1ce4e5b9ull;
    h ^= h >> 29;
    uint32_t u = (uint32_t)(h >> 32);
    if (p->prod_float) return (u & 1) ? 1 : -1;
    if (p->prod_sint) {
        static const int64_t v[4] = {-2, -1, 1, 2};
        return v[u & 3];
    }
    return p->lo + (int64_t)(((uint64_t)u * p->span) >> 32);
}

static void fill(void *buf, ringlet_datatype_t dt, const pattern_t *p, int rank, size_t first, size_t n) {
    if (dt == RINGLET_FLOAT32) { /* the common case, without store_val's switch per element */
        float *f = buf;
        for (size_t i = 0; i < n; i++) f[i] = (float)gen(p, rank, first + i);
        return;
    }
    for (size_t i = 0; i < n; i++) store_val(buf, dt, i, gen(p, rank, first + i));
}

/* ------------------------------------------------------------------------- */
/* options                                                                   */

typedef struct {
    coll_t coll;
    size_t minb, maxb;
    size_t stepbytes;
    long stepfactor; /* > 1: multiply; otherwise add stepbytes */
    int iters, warmup, check, blocking, root;
    int all_types, all_ops;
    ringlet_datatype_t dt;
    ringlet_op_t op;
    int op_given;
    int average;      /* -a: time across ranks: 0 rank 0's, 1 mean, 2 min, 3 max */
    int average_given;
    int per_iter;     /* -I 1: time every iteration */
    const char *json; /* -J: rank 0 writes the results there */
    int memory;       /* -M: 0 host, 1 device, -1 not given (device when a device backend runs) */
} opts_t;

static int env_rank_guess(void) {
    const char *names[] = {"RANK", "SLURM_PROCID", "OMPI_COMM_WORLD_RANK", "PMI_RANK"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        const char *v = getenv(names[i]);
        if (v && *v) return atoi(v);
    }
    return 0;
}

static void usage(FILE *f) {
    fprintf(f,
            "usage: ringlet-perf allreduce|broadcast|reduce|allgather|reducescatter [flags]\n"
            "  -b minbytes   smallest size (default 32M; K/M/G suffixes, powers of 1024)\n"
            "  -e maxbytes   largest size (default 32M)\n"
            "  -f factor     multiply the size by this step factor\n"
            "  -i stepbytes  add this many bytes per step (default 1M; used when no -f > 1)\n"
            "  -n iters      timed iterations per size (default 20)\n"
            "  -w iters      warm-up iterations per size and form (default 5)\n"
            "  -c 0|1        check results (default 1)\n"
            "  -d type       int8 uint8 int32 uint32 int64 uint64 half|float16 bfloat16\n"
            "                float|float32 double|float64 all (default float)\n"
            "  -o op         sum prod min max avg all (default sum)\n"
            "  -r root       root rank of broadcast and reduce (default 0)\n"
            "  -z 0|1        1: blocking calls; 0: issue the non-blocking forms, then wait (default 1)\n"
            "  -a 0|1|2|3    time across ranks: 0 rank 0's, 1 mean, 2 min, 3 max (default 3)\n"
            "  -I 0|1        1: time each iteration; min/median/max lines, and the times in -J (default 0)\n"
            "  -J file       rank 0 writes every row (and -I's times) to file as JSON\n"
            "  -M host|device  buffers in host or device memory (default: device when a GPU is usable,\n"
            "                or RINGLET_DEVICE=sim asks for the simulated one; else host). Device: calls\n"
            "                are ordered on a stream and each size's timing ends with a stream sync\n"
            "  -h            this text\n"
            "Launch one process per rank, e.g.: ringlet-run -n 4 ringlet-perf allreduce -b 4K -e 64M -f 4\n");
}

static int parse_size(const char *s, size_t *out) {
    errno = 0;
    char *end;
    if (*s == '-' || *s == '\0') return -1;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || end == s) return -1;
    unsigned long long mul = 1;
    switch (*end) {
    case 'k':
    case 'K':
        mul = 1ull << 10;
        end++;
        break;
    case 'm':
    case 'M':
        mul = 1ull << 20;
        end++;
        break;
    case 'g':
    case 'G':
        mul = 1ull << 30;
        end++;
        break;
    default:
        break;
    }
    if (mul > 1 && (*end == 'i' || *end == 'I')) end++;
    if (*end == 'b' || *end == 'B') end++;
    if (*end != '\0') return -1;
    if (v > SIZE_MAX / mul) return -1;
    *out = (size_t)(v * mul);
    return 0;
}

static int parse_int(const char *s, long lo, long hi, long *out) {
    errno = 0;
    char *end;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end != '\0' || v < lo || v > hi) return -1;
    *out = v;
    return 0;
}

/* returns 0 on success, 1 on a usage error (message printed), 2 for -h */
/* Errors are printed by every rank (the launcher may stop the others as soon as the
 * first one exits, and that one must have said why); the usage text by rank 0 only
 * (talk). */
static int parse_args(int argc, char **argv, opts_t *o, int talk) {
    *o = (opts_t){.coll = C_ALLREDUCE,
                  .minb = 32u << 20,
                  .maxb = 32u << 20,
                  .stepbytes = 1u << 20,
                  .stepfactor = 1,
                  .iters = 20,
                  .warmup = 5,
                  .check = 1,
                  .blocking = 1,
                  .root = 0,
                  .dt = RINGLET_FLOAT32,
                  .op = RINGLET_SUM,
                  .average = 3,
                  .memory = -1};
    const char *collname = NULL;
    int first = 1;
    if (argc > 1 && argv[1][0] != '-') {
        collname = argv[1];
        first = 2;
    }
    int emax_given = 0;
    for (int i = first; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            if (talk) usage(stdout);
            return 2;
        }
        if (a[0] != '-' || a[1] == '\0' || a[2] != '\0') {
            if (!collname && a[0] != '-') {
                collname = a;
                continue;
            }
            fprintf(stderr, "ringlet-perf: unexpected argument '%s'\n", a);
            return 1;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "ringlet-perf: %s needs a value\n", a);
            return 1;
        }
        const char *v = argv[++i];
        long l = 0;
        int bad = 0;
        switch (a[1]) {
        case 'b':
            bad = parse_size(v, &o->minb);
            break;
        case 'e':
            bad = parse_size(v, &o->maxb);
            emax_given = 1;
            break;
        case 'f':
            bad = parse_int(v, 1, 1 << 20, &l);
            o->stepfactor = l;
            break;
        case 'i':
            bad = parse_size(v, &o->stepbytes) || o->stepbytes == 0;
            o->stepfactor = 1;
            break;
        case 'n':
            bad = parse_int(v, 1, INT_MAX, &l);
            o->iters = (int)l;
            break;
        case 'w':
            bad = parse_int(v, 0, INT_MAX, &l);
            o->warmup = (int)l;
            break;
        case 'c':
            bad = parse_int(v, 0, 1, &l);
            o->check = (int)l;
            break;
        case 'z':
            bad = parse_int(v, 0, 1, &l);
            o->blocking = (int)l;
            break;
        case 'r':
            bad = parse_int(v, 0, INT_MAX, &l);
            o->root = (int)l;
            break;
        case 'a':
            bad = parse_int(v, 0, 3, &l);
            o->average = (int)l;
            o->average_given = 1;
            break;
        case 'I':
            bad = parse_int(v, 0, 1, &l);
            o->per_iter = (int)l;
            break;
        case 'J':
            bad = *v == '\0';
            o->json = v;
            break;
        case 'M':
            bad = strcmp(v, "host") != 0 && strcmp(v, "device") != 0;
            o->memory = strcmp(v, "device") == 0;
            break;
        case 'd': {
            bad = 1;
            o->all_types = strcmp(v, "all") == 0;
            if (o->all_types) bad = 0;
            for (int t = 0; t < NTYPES && bad; t++)
                if (strcmp(v, kTypes[t].name) == 0 || (kTypes[t].alias1 && strcmp(v, kTypes[t].alias1) == 0) ||
                    (kTypes[t].alias2 && strcmp(v, kTypes[t].alias2) == 0)) {
                    o->dt = kTypes[t].dt;
                    bad = 0;
                }
            break;
        }
        case 'o': {
            bad = 1;
            o->op_given = 1;
            o->all_ops = strcmp(v, "all") == 0;
            if (o->all_ops) bad = 0;
            for (int k = 0; k < NOPS && bad; k++)
                if (strcmp(v, kOps[k].name) == 0) {
                    o->op = kOps[k].op;
                    bad = 0;
                }
            break;
        }
        default:
            fprintf(stderr, "ringlet-perf: unknown flag %s\n", a);
            return 1;
        }
        if (bad) {
            fprintf(stderr, "ringlet-perf: bad value '%s' for %s\n", v, a);
            return 1;
        }
    }
    if (!collname) {
        fprintf(stderr, "ringlet-perf: name a collective first\n");
        if (talk) usage(stderr);
        return 1;
    }
    int found = 0;
    for (int c = 0; c < C_COUNT; c++)
        if (strcmp(collname, kColl[c].name) == 0 || strcmp(collname, kColl[c].alias1) == 0 ||
            strcmp(collname, kColl[c].alias2) == 0) {
            o->coll = (coll_t)c;
            found = 1;
        }
    if (!found) {
        fprintf(stderr, "ringlet-perf: unknown collective '%s'\n", collname);
        return 1;
    }
    if (!emax_given && o->maxb < o->minb) o->maxb = o->minb;
    if (o->maxb < o->minb) {
        fprintf(stderr, "ringlet-perf: maxbytes (-e) is below minbytes (-b)\n");
        return 1;
    }
    if (!kColl[o->coll].has_op && o->op_given && (o->all_ops || o->op != RINGLET_SUM)) {
        fprintf(stderr, "ringlet-perf: %s does not reduce; -o %s is not supported with it\n", kColl[o->coll].name,
                o->all_ops ? "all" : op_name(o->op));
        return 1;
    }
    /* -r with a collective that has no root is ignored (root column -1), as in nccl-tests,
     * so that one set of flags serves every collective */
    return 0;
}

/* ------------------------------------------------------------------------- */
/* run state                                                                 */

typedef struct {
    opts_t o;
    ringlet_comm_t comm;
    int rank, nranks;
    char *sbuf, *rbuf; /* both alloc_bytes long, 64-byte aligned */
    size_t alloc_bytes;
    /* -M device: the buffers the calls get are device twins of sbuf/rbuf; data is
     * filled and checked in sbuf/rbuf and copied across */
    const rl_device_ops *dev;
    rl_dev_stream_t stream;
    char *dsbuf, *drbuf;
    ringlet_request_t *reqs;
    int nreqs;
    double *iter_s;   /* -I 1: seconds of each timed call, [form][iters] */
    double *iter_red; /* the same reduced across ranks (-a) */
    FILE *json;       /* -J, rank 0 only */
    int json_rows;
    /* current test */
    ringlet_datatype_t dt;
    ringlet_op_t op;
    size_t ts;
} ctx_t;

static void die_ringlet(ctx_t *c, const char *what, ringlet_result_t r) {
    fprintf(stderr, "ringlet-perf: rank %d: %s failed: %s: %s\n", c ? c->rank : -1, what, ringlet_strerror(r),
            ringlet_comm_last_error(c ? c->comm : NULL));
    fflush(stderr);
    if (c && c->comm) ringlet_comm_abort(c->comm);
    exit(1);
}

#define CHECK_RL(ctx, what, call)                        \
    do {                                                 \
        ringlet_result_t r_ = (call);                    \
        if (r_ != RINGLET_SUCCESS) die_ringlet(ctx, what, r_); \
    } while (0)

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Issues one collective on (s, r) with paramcount pc: blocking when req is NULL. */
static ringlet_result_t issue(ctx_t *c, const void *s, void *r, size_t pc, ringlet_request_t *req) {
    const opts_t *o = &c->o;
    void *st = c->stream; /* NULL for host memory */
    switch (o->coll) {
    case C_ALLREDUCE:
        return req ? ringlet_iallreduce(s, r, pc, c->dt, c->op, c->comm, st, req)
                   : ringlet_allreduce(s, r, pc, c->dt, c->op, c->comm, st);
    case C_BROADCAST:
        return req ? ringlet_ibroadcast(s, r, pc, c->dt, o->root, c->comm, st, req)
                   : ringlet_broadcast(s, r, pc, c->dt, o->root, c->comm, st);
    case C_REDUCE:
        return req ? ringlet_ireduce(s, r, pc, c->dt, c->op, o->root, c->comm, st, req)
                   : ringlet_reduce(s, r, pc, c->dt, c->op, o->root, c->comm, st);
    case C_ALLGATHER:
        return req ? ringlet_iallgather(s, r, pc, c->dt, c->comm, st, req)
                   : ringlet_allgather(s, r, pc, c->dt, c->comm, st);
    case C_REDUCESCATTER:
        return req ? ringlet_ireduce_scatter(s, r, pc, c->dt, c->op, c->comm, st, req)
                   : ringlet_reduce_scatter(s, r, pc, c->dt, c->op, c->comm, st);
    default:
        return RINGLET_ERR_INVALID_ARGUMENT;
    }
}

static const char *coll_call_name(coll_t coll, int blocking) {
    static const char *b[C_COUNT] = {"ringlet_allreduce", "ringlet_broadcast", "ringlet_reduce", "ringlet_allgather",
                                     "ringlet_reduce_scatter"};
    static const char *nb[C_COUNT] = {"ringlet_iallreduce", "ringlet_ibroadcast", "ringlet_ireduce",
                                      "ringlet_iallgather", "ringlet_ireduce_scatter"};
    return blocking ? b[coll] : nb[coll];
}

/* Buffer layout of one test: counts in elements, offsets in elements. */
typedef struct {
    size_t pc;          /* the count passed to the call */
    size_t bytes;       /* size column and algbw numerator */
    size_t count_col;   /* count column */
    size_t in_elems;    /* elements of this rank's input */
    size_t out_elems;   /* elements of this rank's output (0: reduce on a non-root) */
    size_t in_off_ip;   /* in place: input offset within rbuf */
    size_t out_off_ip;  /* in place: output offset within rbuf */
} layout_t;

static layout_t make_layout(const ctx_t *c, size_t reqbytes) {
    layout_t L = {0};
    size_t n = (size_t)c->nranks, count = reqbytes / c->ts;
    switch (c->o.coll) {
    case C_ALLGATHER:
        L.pc = count / n;
        L.in_elems = L.pc;
        L.out_elems = L.pc * n;
        L.in_off_ip = (size_t)c->rank * L.pc;
        L.bytes = L.pc * n * c->ts;
        break;
    case C_REDUCESCATTER:
        L.pc = count / n;
        L.in_elems = L.pc * n;
        L.out_elems = L.pc;
        L.out_off_ip = (size_t)c->rank * L.pc;
        L.bytes = L.pc * n * c->ts;
        break;
    default:
        L.pc = count;
        L.in_elems = count;
        L.out_elems = (c->o.coll == C_REDUCE && c->rank != c->o.root) ? 0 : count;
        L.bytes = count * c->ts;
        break;
    }
    L.count_col = L.pc;
    return L;
}

/* The call's buffers: host, or their device twins. */
static void pointers(const ctx_t *c, const layout_t *L, int inplace, const void **s, void **r) {
    char *sb = c->dev ? c->dsbuf : c->sbuf, *rb = c->dev ? c->drbuf : c->rbuf;
    if (!inplace) {
        *s = sb;
        *r = rb;
        return;
    }
    *s = rb + L->in_off_ip * c->ts;
    *r = rb + L->out_off_ip * c->ts;
}

static void die_dev(ctx_t *c, const char *what) {
    fprintf(stderr, "ringlet-perf: rank %d: %s: %s\n", c->rank, what, rl_dev_error());
    if (c->comm) ringlet_comm_abort(c->comm);
    exit(1);
}

/* -M device: host buffers to their twins, or back; bytes from the start of each. */
static void copy_across(ctx_t *c, int to_device, size_t bytes) {
    if (!c->dev || !bytes) return;
    for (int i = 0; i < 2; i++) {
        char *h = i ? c->rbuf : c->sbuf, *d = i ? c->drbuf : c->dsbuf;
        if (c->dev->memcpy_async(to_device ? d : h, to_device ? h : d, bytes, c->stream) != RL_DEV_OK)
            die_dev(c, "copy between host and device");
    }
    if (c->dev->stream_sync(c->stream) != RL_DEV_OK) die_dev(c, "stream sync");
}

/* Runs `iters` calls; the average seconds per call on this rank. With iter_s, also
 * each call's seconds: blocking, from the end of the previous call (or the start) to
 * its return; non-blocking, from the previous wait's return (the first: from before
 * the first issue) to its wait's return. The pieces add up to the total. No barrier
 * between calls, so the loop is timed exactly as without -I. */
static double run_loop(ctx_t *c, const layout_t *L, int inplace, int iters, int timed, double *iter_s) {
    const void *s;
    void *r;
    pointers(c, L, inplace, &s, &r);
    const char *name = coll_call_name(c->o.coll, c->o.blocking);
    if (timed) CHECK_RL(c, "ringlet_barrier", ringlet_barrier(c->comm, NULL));
    double t0 = now_s(), prev = t0;
    if (c->o.blocking) {
        for (int k = 0; k < iters; k++) {
            CHECK_RL(c, name, issue(c, s, r, L->pc, NULL));
            /* -I on a stream: each call's own time needs its own sync */
            if (iter_s && c->dev && c->dev->stream_sync(c->stream) != RL_DEV_OK) die_dev(c, "stream sync");
            if (iter_s) {
                double t = now_s();
                iter_s[k] = t - prev;
                prev = t;
            }
        }
        /* Stream calls returned at once: the work is done when the stream is. */
        if (c->dev && c->dev->stream_sync(c->stream) != RL_DEV_OK) die_dev(c, "stream sync");
    } else {
        for (int k = 0; k < iters; k++) CHECK_RL(c, name, issue(c, s, r, L->pc, &c->reqs[k]));
        for (int k = 0; k < iters; k++) {
            CHECK_RL(c, "ringlet_wait", ringlet_wait(&c->reqs[k]));
            if (iter_s) {
                double t = now_s();
                iter_s[k] = t - prev;
                prev = t;
            }
        }
    }
    double t1 = now_s();
    return iters > 0 ? (t1 - t0) / iters : 0.0;
}

/* ------------------------------------------------------------------------- */
/* checking                                                                  */

#define SENTINEL 0xa5
static unsigned char g_sentinel_block[4096];

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
static int64_t check_once(ctx_t *c, const layout_t *L, int inplace) {
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

/* ------------------------------------------------------------------------- */
/* output                                                                    */

static void fmt_time(char *buf, size_t len, double us) {
    if (us >= 10000.0)
        snprintf(buf, len, "%7.0f", us);
    else if (us >= 100.0)
        snprintf(buf, len, "%7.1f", us);
    else
        snprintf(buf, len, "%7.2f", us);
}

static void print_table_header(void) {
    printf("#\n");
    printf("# %10s  %12s  %8s  %6s  %6s           out-of-place                       in-place          \n", "", "", "",
           "", "");
    printf("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s %6s  %7s  %6s  %6s %6s\n", "size", "count", "type", "redop",
           "root", "time", "algbw", "busbw", "#wrong", "time", "algbw", "busbw", "#wrong");
    printf("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %5s  %7s  %6s  %6s  %5s\n", "(B)", "(elements)", "", "", "",
           "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", "");
    fflush(stdout);
}

typedef struct {
    double bw_sum;
    long bw_count;
    int64_t wrong_total;
} totals_t;

static const char *kAverageName[4] = {"rank0", "mean", "min", "max"};

/* Times across ranks as -a asks: 0 rank 0's own (no communication: only rank 0
 * prints), 1 the mean, 2 the smallest, 3 the largest. out[i] from in[i]. */
static void reduce_times(ctx_t *c, const double *in, double *out, size_t n) {
    if (c->o.average == 0) {
        memcpy(out, in, n * sizeof *in);
        return;
    }
    ringlet_op_t op = c->o.average == 1 ? RINGLET_SUM : c->o.average == 2 ? RINGLET_MIN : RINGLET_MAX;
    CHECK_RL(c, "ringlet_allreduce (time)", ringlet_allreduce(in, out, n, RINGLET_FLOAT64, op, c->comm, NULL));
    if (c->o.average == 1)
        for (size_t i = 0; i < n; i++) out[i] /= c->nranks;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* min, median, max of v[0..n) (n >= 1); sorts v */
static void stats3(double *v, size_t n, double out[3]) {
    qsort(v, n, sizeof *v, cmp_double);
    out[0] = v[0];
    out[1] = n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
    out[2] = v[n - 1];
}

/* ---- JSON (-J), written by rank 0 as it goes: a run that dies leaves a file that
 * does not parse, which says so ---- */

static void json_str(FILE *f, const char *s) {
    fputc('"', f);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\')
            fprintf(f, "\\%c", *p);
        else if (*p < 0x20)
            fprintf(f, "\\u%04x", *p);
        else
            fputc(*p, f);
    }
    fputc('"', f);
}

static void json_num(FILE *f, double v) {
    if (isfinite(v))
        fprintf(f, "%.9g", v);
    else
        fputs("null", f);
}

typedef struct {
    int32_t pid;
    int32_t local_rank;
    char host[56];
    char memory[40]; /* "host memory", "device 0 (cuda)" */
} rankinfo_t;

static void json_begin(ctx_t *c, const rankinfo_t *info) {
    FILE *f = c->json;
    const opts_t *o = &c->o;
    fprintf(f, "{\n  \"tool\": \"ringlet-perf\",\n  \"version\": ");
    json_str(f, ringlet_version());
    fprintf(f, ",\n  \"collective\": \"%s\",\n  \"nranks\": %d,\n", kColl[o->coll].name, c->nranks);
    fprintf(f,
            "  \"settings\": {\"min_bytes\": %zu, \"max_bytes\": %zu, \"step_%s\": %zu, \"warmup\": %d, "
            "\"iters\": %d, \"check\": %d, \"blocking\": %d, \"average\": %d, \"average_name\": \"%s\", "
            "\"per_iteration\": %d, \"memory\": \"%s\"},\n",
            o->minb, o->maxb, o->stepfactor > 1 ? "factor" : "bytes",
            o->stepfactor > 1 ? (size_t)o->stepfactor : o->stepbytes, o->warmup, o->iters, o->check, o->blocking,
            o->average, kAverageName[o->average], o->per_iter, info[0].memory);
    fprintf(f, "  \"env\": {");
    int first = 1;
    for (char **e = environ; e && *e; e++) {
        if (strncmp(*e, "RINGLET_", 8) != 0 || strncmp(*e, "RINGLET_SECRET=", 15) == 0) continue;
        const char *eq = strchr(*e, '=');
        if (!eq) continue;
        char name[128];
        snprintf(name, sizeof name, "%.*s", (int)(eq - *e), *e);
        fputs(first ? "" : ", ", f);
        json_str(f, name);
        fputs(": ", f);
        json_str(f, eq + 1);
        first = 0;
    }
    fprintf(f, "},\n  \"ranks\": [");
    for (int r = 0; r < c->nranks; r++) {
        fprintf(f, "%s\n    {\"rank\": %d, \"pid\": %d, \"host\": ", r ? "," : "", r, (int)info[r].pid);
        json_str(f, info[r].host);
        fprintf(f, ", \"local_rank\": %d}", (int)info[r].local_rank);
    }
    fprintf(f, "\n  ],\n  \"results\": [");
    fflush(f);
}

static void json_row(ctx_t *c, const layout_t *L, const double sec[2], const double bw[2][2], const int64_t wrong[2]) {
    FILE *f = c->json;
    const int has_op = kColl[c->o.coll].has_op, has_root = kColl[c->o.coll].has_root;
    fprintf(f, "%s\n    {\"collective\": \"%s\", \"size\": %zu, \"count\": %zu, \"type\": \"%s\", \"redop\": \"%s\", "
               "\"root\": %d, \"nranks\": %d",
            c->json_rows++ ? "," : "", kColl[c->o.coll].name, L->bytes, L->count_col, type_name(c->dt),
            has_op ? op_name(c->op) : "none", has_root ? c->o.root : -1, c->nranks);
    for (int ip = 0; ip < 2; ip++) {
        fprintf(f, ",\n     \"%s\": {\"time_us\": ", ip ? "in_place" : "out_of_place");
        json_num(f, sec[ip] * 1e6);
        fputs(", \"algbw\": ", f);
        json_num(f, bw[ip][0]);
        fputs(", \"busbw\": ", f);
        json_num(f, bw[ip][1]);
        if (c->o.check)
            fprintf(f, ", \"wrong\": %lld", (long long)wrong[ip]);
        else
            fputs(", \"wrong\": null", f);
        if (c->iter_red) {
            fputs(",\n       \"iter_us\": [", f);
            const double *v = c->iter_red + (size_t)ip * c->o.iters;
            for (int k = 0; k < c->o.iters; k++) {
                if (k) fputs(k % 8 ? ", " : ",\n         ", f);
                json_num(f, v[k] * 1e6);
            }
            fputs("]", f);
        }
        fputs("}", f);
    }
    fputs("}", f);
    fflush(f);
}

static void json_end(ctx_t *c, const totals_t *tot) {
    FILE *f = c->json;
    fprintf(f, "\n  ],\n  \"wrong_total\": %lld,\n  \"avg_busbw\": ", (long long)tot->wrong_total);
    json_num(f, tot->bw_count ? tot->bw_sum / (double)tot->bw_count : 0.0);
    fprintf(f, ",\n  \"ok\": %s\n}\n", tot->wrong_total ? "false" : "true");
}

/* One size: out-of-place then in-place, timed then checked. */
static void run_size(ctx_t *c, size_t reqbytes, totals_t *tot) {
    layout_t L = make_layout(c, reqbytes);
    double t[2] = {0, 0}, tred[2] = {0, 0};
    int64_t w[2] = {0, 0}, wsum[2] = {0, 0};
    const pattern_t pat = make_pattern(c->dt, kColl[c->o.coll].has_op, c->op);
    for (int ip = 0; ip < 2; ip++) {
        /* timed data: the check pattern (small integers: no denormals, no NaN; in
         * place, sums grow but prod, min, max and avg stay put) */
        fill(ip ? c->rbuf + L.in_off_ip * c->ts : c->sbuf, c->dt, &pat, c->rank, 0, L.in_elems);
        copy_across(c, 1, (L.in_elems + L.in_off_ip) * c->ts);
        if (c->o.warmup > 0) run_loop(c, &L, ip, c->o.warmup, 0, NULL);
        t[ip] = run_loop(c, &L, ip, c->o.iters, 1, c->iter_s ? c->iter_s + (size_t)ip * c->o.iters : NULL);
        if (c->o.check) w[ip] = check_once(c, &L, ip);
    }
    reduce_times(c, t, tred, 2);
    if (c->iter_s) reduce_times(c, c->iter_s, c->iter_red, 2 * (size_t)c->o.iters);
    if (c->o.check)
        CHECK_RL(c, "ringlet_allreduce (#wrong)", ringlet_allreduce(w, wsum, 2, RINGLET_INT64, RINGLET_SUM, c->comm, NULL));
    tot->wrong_total += wsum[0] + wsum[1]; /* the same on every rank */
    if (c->rank != 0) return;

    const int has_op = kColl[c->o.coll].has_op, has_root = kColl[c->o.coll].has_root;
    double bw[2][2];
    printf("%12zu  %12zu  %8s  %6s  %6d", L.bytes, L.count_col, type_name(c->dt), has_op ? op_name(c->op) : "none",
           has_root ? c->o.root : -1);
    for (int ip = 0; ip < 2; ip++) {
        char ts[32], ws[32];
        double sec = tred[ip];
        double algbw = sec > 0 ? (double)L.bytes / 1e9 / sec : 0.0;
        double busbw = algbw * bus_factor(c->o.coll, c->nranks);
        bw[ip][0] = algbw;
        bw[ip][1] = busbw;
        fmt_time(ts, sizeof ts, sec * 1e6);
        if (c->o.check)
            snprintf(ws, sizeof ws, "%5lld", (long long)wsum[ip]);
        else
            snprintf(ws, sizeof ws, "%5s", "N/A");
        printf("  %7s  %6.2f  %6.2f  %5s", ts, algbw, busbw, ws);
        tot->bw_sum += busbw;
        tot->bw_count++;
    }
    printf("\n");
    if (c->iter_red) {
        /* per-iteration times (us): min / median / max, as comment lines under the row */
        double *tmp = malloc((size_t)c->o.iters * sizeof *tmp);
        if (tmp) {
            printf("#  %10zu  per-iteration time (us, %s across ranks, %d calls):", L.bytes, kAverageName[c->o.average],
                   c->o.iters);
            for (int ip = 0; ip < 2; ip++) {
                double st[3];
                memcpy(tmp, c->iter_red + (size_t)ip * c->o.iters, (size_t)c->o.iters * sizeof *tmp);
                stats3(tmp, (size_t)c->o.iters, st);
                printf("  %s min %.2f median %.2f max %.2f", ip ? "in-place" : "out-of-place", st[0] * 1e6,
                       st[1] * 1e6, st[2] * 1e6);
            }
            printf("\n");
            free(tmp);
        }
    }
    fflush(stdout);
    if (c->json) json_row(c, &L, tred, bw, wsum);
}

static void print_header(ctx_t *c, const rankinfo_t *info) {
    const opts_t *o = &c->o;
    printf("# Collective test starting: ringlet-perf %s\n", kColl[o->coll].name);
    printf("# nranks %d minBytes %zu maxBytes %zu step: %zu(%s) warmup iters: %d iters: %d validation: %d "
           "blocking: %d\n",
           c->nranks, o->minb, o->maxb, o->stepfactor > 1 ? (size_t)o->stepfactor : o->stepbytes,
           o->stepfactor > 1 ? "factor" : "bytes", o->warmup, o->iters, o->check, o->blocking);
    if (o->average_given || o->per_iter || o->json) /* only with the new flags: the header stays nccl-tests' */
        printf("# time across ranks: %s (-a %d)  per-iteration: %d  json: %s\n", kAverageName[o->average], o->average,
               o->per_iter, o->json ? o->json : "-");
    printf("#\n# ringlet %s", ringlet_version());
    for (char **e = environ; e && *e; e++) /* the knobs that were set, for the record */
        if (strncmp(*e, "RINGLET_", 8) == 0 && strncmp(*e, "RINGLET_SECRET=", 15) != 0) printf("  %s", *e);
    printf("\n#\n# Using ranks\n");
    for (int r = 0; r < c->nranks; r++)
        printf("#  Rank %2d Group  0 Pid %6d on %10s local_rank %2d [%s]\n", r, (int)info[r].pid, info[r].host,
               (int)info[r].local_rank, info[r].memory);
    fflush(stdout);
}

/* ------------------------------------------------------------------------- */

static void *alloc64(size_t bytes) {
    size_t b = (bytes + 63) / 64 * 64;
    if (b == 0) b = 64;
    return aligned_alloc(64, b);
}

int main(int argc, char **argv) {
    opts_t o;
    int guess = env_rank_guess();
    int pr = parse_args(argc, argv, &o, guess == 0);
    if (pr == 2) return 0;
    if (pr) return 1;

    ctx_t C = {0};
    ctx_t *c = &C;
    c->o = o;
    c->rank = -1;
    memset(g_sentinel_block, SENTINEL, sizeof g_sentinel_block);

    ringlet_result_t res = ringlet_comm_init_env(&c->comm);
    if (res != RINGLET_SUCCESS) {
        c->comm = NULL;
        die_ringlet(c, "ringlet_comm_init_env", res);
    }
    CHECK_RL(c, "ringlet_comm_rank", ringlet_comm_rank(c->comm, &c->rank));
    CHECK_RL(c, "ringlet_comm_size", ringlet_comm_size(c->comm, &c->nranks));
    int local_rank = 0;
    CHECK_RL(c, "ringlet_comm_local_rank", ringlet_comm_local_rank(c->comm, &local_rank));

    if (kColl[o.coll].has_root && o.root >= c->nranks) { /* checked on every rank: all exit */
        fprintf(stderr, "ringlet-perf: root %d is not below nranks %d\n", o.root, c->nranks);
        ringlet_comm_destroy(c->comm);
        return 1;
    }

    /* buffers: allocated once at the largest size, first touched here */
    c->alloc_bytes = (o.maxb + 63) / 64 * 64;
    if (c->alloc_bytes == 0) c->alloc_bytes = 64;
    c->sbuf = alloc64(c->alloc_bytes);
    c->rbuf = alloc64(c->alloc_bytes);
    c->nreqs = o.iters > o.warmup ? o.iters : o.warmup;
    if (c->nreqs < 1) c->nreqs = 1;
    c->reqs = calloc((size_t)c->nreqs, sizeof *c->reqs);
    if (o.per_iter) {
        c->iter_s = calloc(2 * (size_t)o.iters, sizeof *c->iter_s);
        c->iter_red = calloc(2 * (size_t)o.iters, sizeof *c->iter_red);
    }
    if (!c->sbuf || !c->rbuf || !c->reqs || (o.per_iter && (!c->iter_s || !c->iter_red))) {
        fprintf(stderr, "ringlet-perf: rank %d: cannot allocate 2 x %zu bytes\n", c->rank, c->alloc_bytes);
        ringlet_comm_abort(c->comm);
        return 1;
    }
    memset(c->sbuf, 0, c->alloc_bytes); /* first touch, by the rank that uses them */
    memset(c->rbuf, 0, c->alloc_bytes);

    /* -M: device memory when asked, or by default when a device backend runs */
    const rl_device_ops *dev = rl_device();
    if (o.memory == 1 && !dev) {
        fprintf(stderr, "ringlet-perf: rank %d: -M device, but no device backend: %s\n", c->rank,
                rl_device_unavailable());
        ringlet_comm_abort(c->comm);
        return 1;
    }
    int device = -1;
    if (dev && o.memory != 0) {
        int ndev = 0;
        c->dev = dev;
        if (dev->count(&ndev) != RL_DEV_OK || ndev < 1) die_dev(c, "device count");
        device = local_rank % ndev; /* one device per local rank, round robin */
        if (dev->set_device(device) != RL_DEV_OK) die_dev(c, "set device");
        if (dev->mem_alloc((void **)&c->dsbuf, c->alloc_bytes) != RL_DEV_OK ||
            dev->mem_alloc((void **)&c->drbuf, c->alloc_bytes) != RL_DEV_OK)
            die_dev(c, "device memory for the buffers");
        if (dev->stream_create(&c->stream) != RL_DEV_OK) die_dev(c, "stream");
    }

    /* who is where */
    rankinfo_t mine;
    memset(&mine, 0, sizeof mine);
    mine.pid = (int32_t)getpid();
    mine.local_rank = local_rank;
    if (gethostname(mine.host, sizeof mine.host - 1) != 0) strcpy(mine.host, "?");
    if (c->dev) snprintf(mine.memory, sizeof mine.memory, "device %d (%s)", device, c->dev->name);
    else snprintf(mine.memory, sizeof mine.memory, "host memory");
    rankinfo_t *all = calloc((size_t)c->nranks, sizeof *all);
    if (!all) {
        fprintf(stderr, "ringlet-perf: out of memory\n");
        ringlet_comm_abort(c->comm);
        return 1;
    }
    CHECK_RL(c, "ringlet_allgather (rank info)",
             ringlet_allgather(&mine, all, sizeof mine, RINGLET_UINT8, c->comm, NULL));

    /* -J: rank 0 opens the file; every rank learns whether it could */
    if (o.json) {
        int32_t ok = 1, all_ok = 0;
        if (c->rank == 0) {
            c->json = fopen(o.json, "w");
            if (!c->json) {
                fprintf(stderr, "ringlet-perf: cannot write %s: %s\n", o.json, strerror(errno));
                ok = 0;
            }
        }
        CHECK_RL(c, "ringlet_allreduce (json)", ringlet_allreduce(&ok, &all_ok, 1, RINGLET_INT32, RINGLET_MIN, c->comm, NULL));
        if (!all_ok) {
            if (c->rank != 0) fprintf(stderr, "ringlet-perf: rank 0 cannot write %s (-J)\n", o.json);
            ringlet_comm_destroy(c->comm);
            return 1;
        }
    }
    if (c->rank == 0) print_header(c, all);
    if (c->json) json_begin(c, all);
    free(all);

    totals_t tot = {0, 0, 0};
    int ntypes = o.all_types ? NTYPES : 1;
    int nops = (o.all_ops && kColl[o.coll].has_op) ? NOPS : 1;
    for (int ti = 0; ti < ntypes; ti++) {
        c->dt = o.all_types ? kTypes[ti].dt : o.dt;
        c->ts = ringlet_datatype_size(c->dt);
        if (c->ts == 0) {
            fprintf(stderr, "ringlet-perf: the library does not know type %s\n", type_name(c->dt));
            ringlet_comm_destroy(c->comm);
            return 1;
        }
        for (int oi = 0; oi < nops; oi++) {
            c->op = o.all_ops ? kOps[oi].op : o.op;
            if (c->rank == 0) print_table_header();
            size_t sz = o.minb;
            for (;;) {
                run_size(c, sz, &tot);
                size_t next;
                if (o.stepfactor > 1) {
                    if (sz == 0 || sz > SIZE_MAX / (size_t)o.stepfactor) break;
                    next = sz * (size_t)o.stepfactor;
                } else {
                    if (sz > SIZE_MAX - o.stepbytes) break;
                    next = sz + o.stepbytes;
                }
                if (next > o.maxb) break;
                sz = next;
            }
        }
    }

    if (c->rank == 0) {
        printf("# Out of bounds values : %lld %s\n", (long long)tot.wrong_total, tot.wrong_total ? "FAILED" : "OK");
        printf("# Avg bus bandwidth    : %g \n", tot.bw_count ? tot.bw_sum / (double)tot.bw_count : 0.0);
        printf("#\n# Collective test concluded: ringlet-perf %s\n#\n", kColl[o.coll].name);
        fflush(stdout);
    }
    if (c->json) {
        json_end(c, &tot);
        if (fclose(c->json) != 0) fprintf(stderr, "ringlet-perf: writing %s: %s\n", o.json, strerror(errno));
        c->json = NULL;
    }
    CHECK_RL(c, "ringlet_comm_destroy", ringlet_comm_destroy(c->comm));
    c->comm = NULL;
    if (c->dev) {
        c->dev->mem_free(c->dsbuf);
        c->dev->mem_free(c->drbuf);
        c->dev->stream_destroy(c->stream);
    }
    free(c->sbuf);
    free(c->rbuf);
    free(c->reqs);
    free(c->iter_s);
    free(c->iter_red);
    return tot.wrong_total ? 2 : 0; /* every rank knows the total */
}
