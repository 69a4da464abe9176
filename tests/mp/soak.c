/* Soak test: random collectives over two communicators at once, every result checked,
 * for a given time (public API only).
 *
 *   soak --seed S [--seconds T] [--rounds N] [--first-round R] [--max-bytes B]
 *        [--memory host|mixed] [--verbose]
 *
 * Communicators: the world (from the launcher's environment) and one split from it
 * (ringlet_comm_split, keys reversed so its ranks run in the opposite order; with 4 or more
 * ranks colored by rank parity, so it is two smaller communicators).
 *
 * The run is a sequence of rounds. Round k holds 1 to 4 operations; everything about an
 * operation is a hash of (seed, k, slot, field), so every rank draws the same sequence
 * without talking, and any round can be replayed alone (--first-round k --rounds 1). Per
 * operation:
 *   kind      allreduce, broadcast, reduce, allgather, reduce_scatter, alltoall, gather,
 *             scatter, send/recv (a shifted exchange among all ranks, or one sender and
 *             one receiver), barrier
 *   comm      the world or the split communicator
 *   dtype     all 10; op (reducing kinds) sum, prod, max, min, avg, or a pre-multiplied
 *             sum (ringlet_op_create_premul_sum, a host scalar per rank)
 *   size      0 (1 in 32), else log-uniform from 1 byte to --max-bytes (default 64 MiB):
 *             the largest buffer of the operation on a rank (P blocks for the kinds with
 *             P blocks), so most are small and a few large
 *   root      random; shift of an exchange random in 1..P-1
 *   in place or not (every kind that has an in-place form), blocking or non-blocking
 *   (i-form, sometimes one ringlet_test, then ringlet_wait), and with --memory mixed host
 *   or (simulated) device memory, with the default stream or none.
 * A round issues its operations in slot order, blocking ones as they come, then waits the
 * non-blocking ones in a random order; so non-blocking operations on both communicators are
 * in flight together while later ones are issued (the summary counts those rounds). The
 * blocking form of the exchange is a group of a send and a receive (plain blocking sends
 * would wait for each other); the one-way pair uses plain send and recv. The buffers of a
 * round total at most 3 x --max-bytes per rank (on device memory that much again).
 *
 * Inputs: element i of rank r's input is a hash of (seed, round, slot, comm, r, i), so each
 * rank rebuilds every rank's input and checks its own results against a reference it
 * computes itself. Checks are exact except float avg:
 *   integers                 bit-exact (sum and prod wrap, avg = wrapped sum / P truncated)
 *   data movement            bit-exact on random bit patterns, floats included
 *   float min/max            random finite bit patterns (no NaN, no -0), exact
 *   float sum, prod, premul  small-integer-valued inputs k * 2^e (|k| <= 8, e a per-op
 *                            exponent in [-6, 6]; prod: +-1/2, +-1, +-2 and 0; scalars of
 *                            the pre-multiplied sum -3..3): every partial result is exact in
 *                            every type (at most 8 significant bits), so any order of
 *                            reduction gives exactly the reference
 *   float avg                the same inputs; |got - ref| <= eps * sum|x| + eps * |ref| +
 *                            P * tiny (eps = 2^-10 float16, 2^-7 bfloat16, 2^-23 float32,
 *                            2^-52 float64; tiny: the smallest subnormal), the bound of
 *                            tests/mp/collectives.c, which holds whether the sum is divided
 *                            by P at the end (one rounding) or each input first
 * Besides values: return codes, requests set to NULL when done, guard bytes around every
 * buffer, out-of-place send buffers unchanged, a non-root reduce's receive buffer (when
 * given) untouched, a non-root in-place reduce's buffer unchanged, the other blocks of an
 * in-place reduce_scatter unchanged.
 *
 * End: after every round an all-reduce (max) over the world of {time is up, failures}; all
 * ranks stop together. Output per rank: "soak: rank R of P: seed S: N rounds, M ops (...),
 * B bytes checked, F failures"; exit 0 iff no rank failed. A wrong result prints a FAIL line
 * with the seed, the round and the slot and how to replay it; an error from the library
 * does the same and exits at once.
 */
#include <inttypes.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ringlet.h"

enum {
    K_ALLREDUCE,
    K_BROADCAST,
    K_REDUCE,
    K_ALLGATHER,
    K_REDUCE_SCATTER,
    K_ALLTOALL,
    K_GATHER,
    K_SCATTER,
    K_SENDRECV,
    K_BARRIER,
    K_NUM
};
static const char *const kind_name[K_NUM] = {"allreduce", "broadcast", "reduce",  "allgather", "reduce_scatter",
                                             "alltoall",  "gather",    "scatter", "sendrecv",  "barrier"};
static const char *const dt_name[RINGLET_NUM_DATATYPES] = {"int8",   "uint8",   "int32",   "uint32",  "int64",
                                                           "uint64", "float16", "float32", "float64", "bfloat16"};
static const size_t dt_size[RINGLET_NUM_DATATYPES] = {1, 1, 4, 4, 8, 8, 2, 4, 8, 2};
#define OP_PREMUL RINGLET_NUM_OPS /* this file's tag for a pre-multiplied sum */
static const char *const op_name[RINGLET_NUM_OPS + 1] = {"sum", "prod", "max", "min", "avg", "premul_sum"};

#define GUARD 64           /* sentinel bytes before and after every buffer */
#define SENT 0x5A          /* the sentinel byte */
#define MAX_SLOTS 4        /* operations per round */
#define MAX_FAIL_LINES 20  /* FAIL lines printed per rank */
#define MAX_RANKS 64

/* Fields of an operation's hash. */
enum { F_NOPS, F_KIND, F_COMM, F_DTYPE, F_OP, F_SIZE, F_ZERO, F_ROOT, F_SHIFT, F_INPLACE, F_NB, F_MEM, F_STREAM,
       F_RECVNULL, F_SCALE, F_TEST, F_WAIT, F_KEY, F_PAIR };

/* ---------------------------------------------------------------- options and state */

typedef struct {
    uint64_t seed;
    double seconds;
    uint64_t first_round, rounds; /* rounds 0: until --seconds */
    size_t max_bytes;
    int mixed_memory; /* host and device memory */
    int verbose;
} options_t;

static options_t g_opt = {0, 10.0, 0, 0, (size_t)64 << 20, 0, 0};
static ringlet_comm_t g_comm[2]; /* the world, the split communicator */
static int g_size[2], g_rank[2];
static const char *const comm_name[2] = {"world", "split"};

static struct {
    uint64_t ops[K_NUM], skipped, rounds, concurrent_rounds, nonblocking, device_ops, inplace;
    uint64_t bytes_checked, failures;
    int fail_lines;
} g_stat;

/* ---------------------------------------------------------------- hashing */

static uint64_t mix64(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* A field of operation (round, slot): the same on every rank. */
static uint64_t draw(uint64_t round, int slot, int field) {
    uint64_t z = mix64(g_opt.seed ^ 0x5851F42D4C957F2Dull);
    z = mix64(z + round * 0x9E3779B97F4A7C15ull);
    return mix64(z + (uint64_t)slot * 0xD6E8FEB86659FD93ull + (uint64_t)field * 0xA0761D6478BD642Full);
}

static double draw_unit(uint64_t round, int slot, int field) {
    return (double)(draw(round, slot, field) >> 11) * 0x1p-53;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* ---------------------------------------------------------------- float formats */

static int is_float(int dt) {
    return dt == RINGLET_FLOAT16 || dt == RINGLET_BFLOAT16 || dt == RINGLET_FLOAT32 || dt == RINGLET_FLOAT64;
}
static int is_signed_int(int dt) { return dt == RINGLET_INT8 || dt == RINGLET_INT32 || dt == RINGLET_INT64; }

static uint64_t width_mask(int dt) { return dt_size[dt] == 8 ? ~0ull : (1ull << (8 * dt_size[dt])) - 1; }

static double half_to_double(uint64_t h) {
    int sign = (h >> 15) & 1, e = (int)((h >> 10) & 0x1f);
    double m = (double)(h & 0x3ff), v;
    if (e == 0) v = ldexp(m, -24);
    else if (e == 31) v = m == 0 ? INFINITY : NAN;
    else v = ldexp(1024.0 + m, e - 25);
    return sign ? -v : v;
}

static double float_bits_to_double(uint32_t x) {
    float f;
    memcpy(&f, &x, 4);
    return f;
}

static double bits_to_double(int dt, uint64_t b) {
    switch (dt) {
    case RINGLET_FLOAT16: return half_to_double(b);
    case RINGLET_BFLOAT16: return float_bits_to_double((uint32_t)b << 16);
    case RINGLET_FLOAT32: return float_bits_to_double((uint32_t)b);
    default: {
        double d;
        memcpy(&d, &b, 8);
        return d;
    }
    }
}

/* Bits of v in a float type; v must be 0 or a normal number that the type holds exactly
 * (this file's float inputs all are). */
static uint64_t double_to_bits(int dt, double v) {
    float f = (float)v;
    uint32_t x;
    uint64_t d;
    memcpy(&x, &f, 4);
    switch (dt) {
    case RINGLET_FLOAT64: memcpy(&d, &v, 8); return d;
    case RINGLET_FLOAT32: return x;
    case RINGLET_BFLOAT16: return x >> 16;
    default:
        if ((x & 0x7fffffffu) == 0) return (x >> 16) & 0x8000u;
        return ((x >> 16) & 0x8000u) | ((((x >> 23) & 0xffu) - 127 + 15) << 10) | ((x & 0x7fffffu) >> 13);
    }
}

/* A random pattern made finite (no Inf or NaN) and without -0. */
static uint64_t finite_bits(int dt, uint64_t b) {
    uint64_t exp_mask, sign;
    switch (dt) {
    case RINGLET_FLOAT16: exp_mask = 0x7c00u, sign = 0x8000u; break;
    case RINGLET_BFLOAT16: exp_mask = 0x7f80u, sign = 0x8000u; break;
    case RINGLET_FLOAT32: exp_mask = 0x7f800000u, sign = 0x80000000u; break;
    default: exp_mask = 0x7ff0000000000000ull, sign = 0x8000000000000000ull; break;
    }
    if ((b & exp_mask) == exp_mask) b &= ~(sign >> 1); /* clear the top exponent bit */
    if (b == sign) b = 0;
    return b;
}

static double eps_of(int dt) {
    switch (dt) {
    case RINGLET_FLOAT16: return 0x1p-10;
    case RINGLET_BFLOAT16: return 0x1p-7;
    case RINGLET_FLOAT32: return 0x1p-23;
    default: return 0x1p-52;
    }
}
static double tiny_of(int dt) {
    switch (dt) {
    case RINGLET_FLOAT16: return 0x1p-24;
    case RINGLET_BFLOAT16: return 0x1p-133;
    case RINGLET_FLOAT32: return 0x1p-149;
    default: return 0x1p-1074;
    }
}

static void format_bits(int dt, uint64_t b, char *out, size_t n) {
    if (is_float(dt)) snprintf(out, n, "%.17g (bits 0x%" PRIx64 ")", bits_to_double(dt, b), b);
    else if (is_signed_int(dt)) snprintf(out, n, "%" PRId64, (int64_t)(b << (64 - 8 * dt_size[dt])) >> (64 - 8 * dt_size[dt]));
    else snprintf(out, n, "%" PRIu64, b);
}

/* ---------------------------------------------------------------- operations */

typedef struct {
    uint64_t round;
    int slot, kind, comm, P, me;
    int dt, op;       /* op: a ringlet_op_t or OP_PREMUL (reducing kinds) */
    int root;         /* rooted kinds; the sender of a one-way send/recv */
    int shift;        /* send/recv: an exchange to me + shift (0: one-way, root to root + pair) */
    int pair;         /* one-way send/recv: the receiver is root + pair */
    int inplace, nb, device, stream, recv_null;
    int scale;        /* float sum/avg/premul inputs: k * 2^scale */
    size_t count;     /* elements per rank's block */
    size_t bound;     /* upper bound of its buffer bytes, the same on every rank */
} op_desc_t;

typedef struct {
    unsigned char *host; /* GUARD + bytes + GUARD */
    unsigned char *dev;  /* device twin (device operations) */
    size_t bytes;
} buf_t;

enum { A_NONE, A_SEND, A_RECV }; /* which buffer an argument points into */

typedef struct {
    op_desc_t d;
    buf_t sbuf, rbuf;
    int s_which, r_which; /* the call's arguments: buffer and byte offset */
    size_t s_off, r_off;
    ringlet_op_t rop;
    int rop_made;
    ringlet_request_t req[2];
} op_run_t;

static int reducing(int kind) { return kind == K_ALLREDUCE || kind == K_REDUCE || kind == K_REDUCE_SCATTER; }
static int p_blocks(int kind) {
    return kind == K_ALLGATHER || kind == K_REDUCE_SCATTER || kind == K_ALLTOALL || kind == K_GATHER ||
           kind == K_SCATTER;
}
static int has_inplace(int kind) { return kind != K_SENDRECV && kind != K_BARRIER; }

static void describe(const op_desc_t *d, char *out, size_t n) {
    char extra[64] = "";
    if (d->kind == K_BROADCAST || d->kind == K_REDUCE || d->kind == K_GATHER || d->kind == K_SCATTER)
        snprintf(extra, sizeof extra, " root=%d", d->root);
    else if (d->kind == K_SENDRECV && d->shift)
        snprintf(extra, sizeof extra, " exchange shift=%d", d->shift);
    else if (d->kind == K_SENDRECV)
        snprintf(extra, sizeof extra, " one-way %d->%d", d->root, (d->root + d->pair) % d->P);
    char data_desc[96] = "";
    if (d->kind != K_BARRIER)
        snprintf(data_desc, sizeof data_desc, " dtype=%s%s%s count=%zu", dt_name[d->dt], reducing(d->kind) ? " op=" : "",
                 reducing(d->kind) ? op_name[d->op] : "", d->count);
    snprintf(out, n, "round %" PRIu64 " slot %d: %s on %s (rank %d of %d)%s%s%s %s %s%s", d->round, d->slot,
             kind_name[d->kind], comm_name[d->comm], d->me, d->P, data_desc, extra,
             d->inplace ? " in-place" : "", d->nb ? "non-blocking" : "blocking", d->device ? "device" : "host",
             d->device ? (d->stream ? " (default stream)" : " (no stream)") : "");
}

/* The size of an operation's largest buffer: 0 one time in 32, else log-uniform in
 * [1, max bytes]. */
static size_t draw_bytes(uint64_t round, int slot) {
    if (draw(round, slot, F_ZERO) % 32 == 0 || g_opt.max_bytes == 0) return 0;
    size_t bytes = (size_t)exp2(draw_unit(round, slot, F_SIZE) * log2((double)g_opt.max_bytes));
    return bytes < 1 ? 1 : bytes > g_opt.max_bytes ? g_opt.max_bytes : bytes;
}

/* The operation in slot `slot` of round `round`. */
static op_desc_t plan_op(uint64_t round, int slot) {
    op_desc_t d;
    memset(&d, 0, sizeof d);
    d.round = round;
    d.slot = slot;
    d.kind = (int)(draw(round, slot, F_KIND) % K_NUM);
    d.comm = (int)(draw(round, slot, F_COMM) % 2);
    d.P = g_size[d.comm];
    d.me = g_rank[d.comm];
    d.dt = (int)(draw(round, slot, F_DTYPE) % RINGLET_NUM_DATATYPES);
    d.op = reducing(d.kind) ? (int)(draw(round, slot, F_OP) % (RINGLET_NUM_OPS + 1)) : RINGLET_SUM;
    d.root = (int)(draw(round, slot, F_ROOT) % (uint64_t)d.P);
    d.shift = d.P > 1 ? 1 + (int)(draw(round, slot, F_SHIFT) % (uint64_t)(d.P - 1)) : 0;
    if (d.kind == K_SENDRECV && draw(round, slot, F_PAIR) % 3 == 0) d.pair = d.shift, d.shift = 0;
    d.inplace = has_inplace(d.kind) && draw(round, slot, F_INPLACE) % 2;
    d.nb = (int)(draw(round, slot, F_NB) % 2);
    d.device = g_opt.mixed_memory && draw(round, slot, F_MEM) % 2;
    d.stream = d.device && draw(round, slot, F_STREAM) % 2;
    /* On device memory a non-blocking send and receive pair on one stream would run one
     * after the other (README, "Send and receive"): without a stream they run as one. */
    if (d.kind == K_SENDRECV && d.nb && d.shift) d.stream = 0;
    d.recv_null = (int)(draw(round, slot, F_RECVNULL) % 2);
    d.scale = (int)(draw(round, slot, F_SCALE) % 13) - 6;
    const size_t bytes = d.kind == K_BARRIER ? 0 : draw_bytes(round, slot);
    const size_t per = dt_size[d.dt] * (p_blocks(d.kind) ? (size_t)d.P : 1);
    d.count = bytes ? (bytes / per ? bytes / per : 1) : 0;
    d.bound = 2 * (bytes + 8 * MAX_RANKS); /* send and receive buffers, whatever the communicator */
    return d;
}

/* Sizes and operations of round `round`: its slots, at most 3 x max bytes of buffers. */
static int plan_round(uint64_t round, op_desc_t *ops) {
    int want = 1 + (int)(draw(round, 0, F_NOPS) % MAX_SLOTS), n = 0;
    size_t total = 0, budget = 3 * g_opt.max_bytes + 16 * MAX_RANKS;
    for (int s = 0; s < want; s++) {
        op_desc_t d = plan_op(round, s);
        if (n > 0 && total + d.bound > budget) break;
        total += d.bound;
        ops[n++] = d;
    }
    return n;
}

/* ---------------------------------------------------------------- inputs */

/* The key of rank r's input in operation d. */
static uint64_t input_key(const op_desc_t *d, int r) {
    return mix64(draw(d->round, d->slot, F_KEY) + (uint64_t)(d->comm * MAX_RANKS + r + 1) * 0x2545F4914F6CDD1Dull);
}

/* Rank r's input of an operation, element by element: one hash per 8 bytes of elements,
 * kept while the elements of that word are read. */
typedef struct {
    const op_desc_t *d;
    uint64_t key, word;
    size_t word_index; /* of `word`; SIZE_MAX: none yet */
} gen_t;

static gen_t gen_of(const op_desc_t *d, int r) {
    gen_t g = {d, input_key(d, r), 0, SIZE_MAX};
    return g;
}

static uint64_t raw_bits(gen_t *g, size_t i) {
    const size_t es = dt_size[g->d->dt], per = 8 / es;
    if (i / per != g->word_index) {
        g->word_index = i / per;
        g->word = mix64(g->key + ((uint64_t)g->word_index + 1) * 0x9E3779B97F4A7C15ull);
    }
    return es == 8 ? g->word : (g->word >> (8 * es * (i % per))) & width_mask(g->d->dt);
}

static const double prod_values[16] = {0, -2, -1, -0.5, 0.5, 1, 2, -2, -1, -0.5, 0.5, 1, 2, 1, -1, 2};

/* Element i of the input. Movement and integers: random bits; float min/max: random
 * finite values; float sum/avg/premul: k * 2^scale, |k| <= 8; float prod: a power of two
 * of magnitude 1/2..2, or 0. */
static uint64_t input_elem(gen_t *g, size_t i) {
    const op_desc_t *d = g->d;
    uint64_t b = raw_bits(g, i);
    if (!is_float(d->dt) || !reducing(d->kind)) return b;
    switch (d->op) {
    case RINGLET_MAX:
    case RINGLET_MIN: return finite_bits(d->dt, b);
    case RINGLET_PROD: return double_to_bits(d->dt, prod_values[b % 16]);
    default: return double_to_bits(d->dt, ldexp((double)((int)(b % 17) - 8), d->scale));
    }
}

/* Rank r's scalar of a pre-multiplied sum: -3..3, as bits of the type. */
static uint64_t premul_scalar(const op_desc_t *d, int r) {
    int k = (int)(mix64(input_key(d, r) ^ 0x77) % 7) - 3;
    if (is_float(d->dt)) return double_to_bits(d->dt, (double)k);
    return (uint64_t)(int64_t)k & width_mask(d->dt);
}

static void store_elem(int dt, unsigned char *p, size_t j, uint64_t b) {
    switch (dt_size[dt]) {
    case 1: p[j] = (uint8_t)b; break;
    case 2: { uint16_t v = (uint16_t)b; memcpy(p + 2 * j, &v, 2); break; }
    case 4: { uint32_t v = (uint32_t)b; memcpy(p + 4 * j, &v, 4); break; }
    default: memcpy(p + 8 * j, &b, 8); break;
    }
}

static uint64_t load_elem(int dt, const unsigned char *p, size_t j) {
    switch (dt_size[dt]) {
    case 1: return p[j];
    case 2: { uint16_t v; memcpy(&v, p + 2 * j, 2); return v; }
    case 4: { uint32_t v; memcpy(&v, p + 4 * j, 4); return v; }
    default: { uint64_t v; memcpy(&v, p + 8 * j, 8); return v; }
    }
}

/* Elements [first, first + n) of rank r's input, at p. */
static void fill_input(const op_desc_t *d, int r, unsigned char *p, size_t first, size_t n) {
    gen_t g = gen_of(d, r);
    for (size_t j = 0; j < n; j++) store_elem(d->dt, p, j, input_elem(&g, first + j));
}

/* ---------------------------------------------------------------- failures */

static void print_replay(const op_desc_t *d) {
    printf("replay: ringlet-run -n %d soak --seed %" PRIu64 " --max-bytes %zu --memory %s --first-round %" PRIu64
           " --rounds 1 --verbose (same transport and RINGLET_* environment)\n",
           g_size[0], g_opt.seed, g_opt.max_bytes, g_opt.mixed_memory ? "mixed" : "host", d->round);
}

static void report_failure(const op_desc_t *d, const char *what) {
    g_stat.failures++;
    if (g_stat.fail_lines++ >= MAX_FAIL_LINES) return;
    char desc[400];
    describe(d, desc, sizeof desc);
    printf("FAIL rank %d: seed %" PRIu64 " %s: %s\n", g_rank[0], g_opt.seed, desc, what);
    if (g_stat.fail_lines == 1) print_replay(d);
}

/* An error from the library: nothing after it can be trusted; stop this rank. */
static void fatal_call(const op_desc_t *d, const char *call, ringlet_result_t rc) {
    char desc[400];
    describe(d, desc, sizeof desc);
    printf("FAIL rank %d: seed %" PRIu64 " %s: %s returned %d (%s): %s\n", g_rank[0], g_opt.seed, desc, call, (int)rc,
           ringlet_strerror(rc), ringlet_comm_last_error(g_comm[d->comm]));
    print_replay(d);
    fflush(stdout);
    ringlet_comm_abort(g_comm[1]);
    ringlet_comm_abort(g_comm[0]);
    exit(1);
}

static void check_rc(const op_desc_t *d, const char *call, ringlet_result_t rc) {
    if (rc != RINGLET_SUCCESS) fatal_call(d, call, rc);
}

/* ---------------------------------------------------------------- buffers */

static void buf_alloc(const op_desc_t *d, buf_t *b, size_t bytes) {
    size_t total = bytes + 2 * GUARD;
    b->bytes = bytes;
    b->dev = NULL;
    if (d->device) {
        check_rc(d, "ringlet_host_alloc", ringlet_host_alloc((void **)&b->host, total));
        check_rc(d, "ringlet_mem_alloc", ringlet_mem_alloc((void **)&b->dev, total));
    } else {
        b->host = malloc(total);
        if (!b->host) {
            printf("FAIL rank %d: out of memory (%zu bytes)\n", g_rank[0], total);
            exit(1);
        }
    }
    memset(b->host, SENT, total);
}

static void buf_free(buf_t *b, int device) {
    if (!b->host) return;
    if (device) {
        ringlet_host_free(b->host);
        ringlet_mem_free(b->dev);
    } else {
        free(b->host);
    }
    b->host = b->dev = NULL;
}

static unsigned char *data(const buf_t *b) { return b->host + GUARD; }

static void check_guards(const op_desc_t *d, const buf_t *b, const char *name) {
    if (!b->host) return;
    for (size_t i = 0; i < GUARD; i++) {
        if (b->host[i] != SENT || b->host[GUARD + b->bytes + i] != SENT) {
            char w[160];
            snprintf(w, sizeof w, "%s: a guard byte %s the buffer was written", name,
                     b->host[i] != SENT ? "before" : "after");
            report_failure(d, w);
            return;
        }
    }
}

/* ---------------------------------------------------------------- layouts */

/* Allocates the buffers of the operation and writes this rank's inputs (what the call
 * reads) and sentinels (what it writes); sets the arguments. n = count, B = block bytes. */
static void set_args(op_run_t *r, int sw, size_t so, int rw, size_t ro) {
    r->s_which = sw, r->s_off = so, r->r_which = rw, r->r_off = ro;
}

static void prepare_op(op_run_t *r) {
    const op_desc_t *d = &r->d;
    const size_t n = d->count, B = n * dt_size[d->dt], P = (size_t)d->P, me = (size_t)d->me;
    const int root = d->me == d->root;
    switch (d->kind) {
    case K_ALLREDUCE:
    case K_BROADCAST:
    case K_REDUCE: {
        int has_recv = d->kind != K_REDUCE || root || d->inplace || !d->recv_null;
        if (d->inplace) {
            buf_alloc(d, &r->rbuf, B);
            if (d->kind != K_BROADCAST || root) fill_input(d, d->me, data(&r->rbuf), 0, n);
            set_args(r, A_RECV, 0, A_RECV, 0);
        } else {
            buf_alloc(d, &r->sbuf, B);
            fill_input(d, d->me, data(&r->sbuf), 0, n);
            if (has_recv) buf_alloc(d, &r->rbuf, B);
            set_args(r, A_SEND, 0, has_recv ? A_RECV : A_NONE, 0);
        }
        break;
    }
    case K_ALLGATHER:
        buf_alloc(d, &r->rbuf, P * B);
        if (d->inplace) {
            fill_input(d, d->me, data(&r->rbuf) + me * B, 0, n);
            set_args(r, A_RECV, me * B, A_RECV, 0);
        } else {
            buf_alloc(d, &r->sbuf, B);
            fill_input(d, d->me, data(&r->sbuf), 0, n);
            set_args(r, A_SEND, 0, A_RECV, 0);
        }
        break;
    case K_REDUCE_SCATTER:
        buf_alloc(d, &r->sbuf, P * B);
        fill_input(d, d->me, data(&r->sbuf), 0, P * n);
        if (d->inplace) {
            set_args(r, A_SEND, 0, A_SEND, me * B);
        } else {
            buf_alloc(d, &r->rbuf, B);
            set_args(r, A_SEND, 0, A_RECV, 0);
        }
        break;
    case K_ALLTOALL:
        buf_alloc(d, &r->rbuf, P * B);
        if (d->inplace) {
            fill_input(d, d->me, data(&r->rbuf), 0, P * n);
            set_args(r, A_RECV, 0, A_RECV, 0);
        } else {
            buf_alloc(d, &r->sbuf, P * B);
            fill_input(d, d->me, data(&r->sbuf), 0, P * n);
            set_args(r, A_SEND, 0, A_RECV, 0);
        }
        break;
    case K_GATHER:
        if (root) buf_alloc(d, &r->rbuf, P * B);
        if (root && d->inplace) {
            fill_input(d, d->me, data(&r->rbuf) + me * B, 0, n);
            set_args(r, A_RECV, me * B, A_RECV, 0);
        } else {
            buf_alloc(d, &r->sbuf, B);
            fill_input(d, d->me, data(&r->sbuf), 0, n);
            set_args(r, A_SEND, 0, root ? A_RECV : A_NONE, 0);
        }
        break;
    case K_SCATTER:
        if (root) {
            buf_alloc(d, &r->sbuf, P * B);
            fill_input(d, d->me, data(&r->sbuf), 0, P * n);
        }
        if (root && d->inplace) {
            set_args(r, A_SEND, 0, A_SEND, me * B);
        } else {
            buf_alloc(d, &r->rbuf, B);
            set_args(r, root ? A_SEND : A_NONE, 0, A_RECV, 0);
        }
        break;
    case K_SENDRECV: {
        int sends = d->shift || root, recvs = d->shift || d->me == (d->root + d->pair) % d->P;
        if (sends) {
            buf_alloc(d, &r->sbuf, B);
            fill_input(d, d->me, data(&r->sbuf), 0, n);
        }
        if (recvs) buf_alloc(d, &r->rbuf, B);
        set_args(r, sends ? A_SEND : A_NONE, 0, recvs ? A_RECV : A_NONE, 0);
        break;
    }
    default: set_args(r, A_NONE, 0, A_NONE, 0); break;
    }
}

/* ---------------------------------------------------------------- issuing */

static void *arg_ptr(const op_run_t *r, int which, size_t off) {
    const buf_t *b = which == A_SEND ? &r->sbuf : which == A_RECV ? &r->rbuf : NULL;
    if (!b) return NULL;
    return (r->d.device ? b->dev : b->host) + GUARD + off;
}

static void make_premul_op(op_run_t *r) {
    const op_desc_t *d = &r->d;
    r->rop = (ringlet_op_t)d->op;
    if (d->op != OP_PREMUL) return;
    uint64_t s = premul_scalar(d, d->me);
    unsigned char scalar[8];
    store_elem(d->dt, scalar, 0, s);
    check_rc(d, "ringlet_op_create_premul_sum",
             ringlet_op_create_premul_sum(&r->rop, scalar, (ringlet_datatype_t)d->dt, RINGLET_SCALAR_HOST,
                                          g_comm[d->comm]));
    r->rop_made = 1;
}

/* The blocking exchange: a group, so that the send and the receive go at once. */
static ringlet_result_t exchange_blocking(op_run_t *r, const void *s, void *v, void *st) {
    const op_desc_t *d = &r->d;
    ringlet_comm_t c = g_comm[d->comm];
    const ringlet_datatype_t dt = (ringlet_datatype_t)d->dt;
    check_rc(d, "ringlet_group_start", ringlet_group_start());
    check_rc(d, "ringlet_send (in a group)", ringlet_send(s, d->count, dt, (d->me + d->shift) % d->P, c, st));
    check_rc(d, "ringlet_recv (in a group)", ringlet_recv(v, d->count, dt, (d->me - d->shift + d->P) % d->P, c, st));
    return ringlet_group_end();
}

static void issue_sendrecv(op_run_t *r, const void *s, void *v, void *st) {
    const op_desc_t *d = &r->d;
    ringlet_comm_t c = g_comm[d->comm];
    const ringlet_datatype_t dt = (ringlet_datatype_t)d->dt;
    const size_t n = d->count;
    if (d->shift) {
        const int to = (d->me + d->shift) % d->P, from = (d->me - d->shift + d->P) % d->P;
        if (!d->nb) {
            check_rc(d, "ringlet_group_end (send and recv)", exchange_blocking(r, s, v, st));
            return;
        }
        check_rc(d, "ringlet_isend", ringlet_isend(s, n, dt, to, c, st, &r->req[0]));
        check_rc(d, "ringlet_irecv", ringlet_irecv(v, n, dt, from, c, st, &r->req[1]));
        return;
    }
    const int to = (d->root + d->pair) % d->P;
    if (d->me == d->root)
        check_rc(d, "ringlet_send/isend",
                 d->nb ? ringlet_isend(s, n, dt, to, c, st, &r->req[0]) : ringlet_send(s, n, dt, to, c, st));
    else if (d->me == to)
        check_rc(d, "ringlet_recv/irecv",
                 d->nb ? ringlet_irecv(v, n, dt, d->root, c, st, &r->req[1]) : ringlet_recv(v, n, dt, d->root, c, st));
}

static ringlet_result_t call_blocking(op_run_t *r, const void *s, void *v, void *st) {
    const op_desc_t *d = &r->d;
    ringlet_comm_t c = g_comm[d->comm];
    const ringlet_datatype_t dt = (ringlet_datatype_t)d->dt;
    const size_t n = d->count;
    switch (d->kind) {
    case K_ALLREDUCE: return ringlet_allreduce(s, v, n, dt, r->rop, c, st);
    case K_BROADCAST: return ringlet_broadcast(s, v, n, dt, d->root, c, st);
    case K_REDUCE: return ringlet_reduce(s, v, n, dt, r->rop, d->root, c, st);
    case K_ALLGATHER: return ringlet_allgather(s, v, n, dt, c, st);
    case K_REDUCE_SCATTER: return ringlet_reduce_scatter(s, v, n, dt, r->rop, c, st);
    case K_ALLTOALL: return ringlet_alltoall(s, v, n, dt, c, st);
    case K_GATHER: return ringlet_gather(s, v, n, dt, d->root, c, st);
    case K_SCATTER: return ringlet_scatter(s, v, n, dt, d->root, c, st);
    default: return ringlet_barrier(c, st);
    }
}

static ringlet_result_t call_nonblocking(op_run_t *r, const void *s, void *v, void *st) {
    const op_desc_t *d = &r->d;
    ringlet_comm_t c = g_comm[d->comm];
    const ringlet_datatype_t dt = (ringlet_datatype_t)d->dt;
    const size_t n = d->count;
    ringlet_request_t *q = &r->req[0];
    switch (d->kind) {
    case K_ALLREDUCE: return ringlet_iallreduce(s, v, n, dt, r->rop, c, st, q);
    case K_BROADCAST: return ringlet_ibroadcast(s, v, n, dt, d->root, c, st, q);
    case K_REDUCE: return ringlet_ireduce(s, v, n, dt, r->rop, d->root, c, st, q);
    case K_ALLGATHER: return ringlet_iallgather(s, v, n, dt, c, st, q);
    case K_REDUCE_SCATTER: return ringlet_ireduce_scatter(s, v, n, dt, r->rop, c, st, q);
    case K_ALLTOALL: return ringlet_ialltoall(s, v, n, dt, c, st, q);
    case K_GATHER: return ringlet_igather(s, v, n, dt, d->root, c, st, q);
    case K_SCATTER: return ringlet_iscatter(s, v, n, dt, d->root, c, st, q);
    default: return ringlet_ibarrier(c, st, q);
    }
}

/* A non-blocking call must hand out a request; sometimes test it once at once. */
static void check_new_requests(op_run_t *r) {
    const op_desc_t *d = &r->d;
    int expect[2] = {r->s_which != A_NONE, r->r_which != A_NONE};
    if (d->kind != K_SENDRECV) expect[0] = 1, expect[1] = 0;
    for (int i = 0; i < 2; i++) {
        if (expect[i] && !r->req[i]) report_failure(d, "a non-blocking call returned success but no request");
        if (!r->req[i] || draw(d->round, d->slot, F_TEST) % 2) continue;
        int done = -1;
        ringlet_result_t rc = ringlet_test(&r->req[i], &done);
        if (done != 0 && done != 1) report_failure(d, "ringlet_test set *done to neither 0 nor 1");
        check_rc(d, "ringlet_test", rc);
        if (done == 1 && r->req[i]) report_failure(d, "ringlet_test reported done but left the request set");
    }
}

static void issue_op(op_run_t *r) {
    const op_desc_t *d = &r->d;
    const void *s = arg_ptr(r, r->s_which, r->s_off);
    void *v = arg_ptr(r, r->r_which, r->r_off);
    void *st = d->stream ? RINGLET_STREAM_DEFAULT : NULL;
    if (d->kind == K_SENDRECV) {
        issue_sendrecv(r, s, v, st);
    } else if (d->nb) {
        check_rc(d, kind_name[d->kind], call_nonblocking(r, s, v, st));
    } else {
        check_rc(d, kind_name[d->kind], call_blocking(r, s, v, st));
    }
    if (d->nb) check_new_requests(r);
}

static void wait_op(op_run_t *r) {
    for (int i = 0; i < 2; i++) {
        if (!r->req[i]) continue;
        check_rc(&r->d, "ringlet_wait", ringlet_wait(&r->req[i]));
        if (r->req[i]) report_failure(&r->d, "ringlet_wait returned but left the request set");
        r->req[i] = NULL;
    }
}

/* ---------------------------------------------------------------- device staging */

static void copy_buffers(op_run_t *r, int to_device) {
    buf_t *bufs[2] = {&r->sbuf, &r->rbuf};
    for (int i = 0; i < 2; i++) {
        buf_t *b = bufs[i];
        if (!b->host) continue;
        size_t total = b->bytes + 2 * GUARD;
        ringlet_result_t rc = to_device ? ringlet_memcpy_async(b->dev, b->host, total, RINGLET_STREAM_DEFAULT)
                                        : ringlet_memcpy_async(b->host, b->dev, total, RINGLET_STREAM_DEFAULT);
        check_rc(&r->d, to_device ? "ringlet_memcpy_async (to the device)" : "ringlet_memcpy_async (back)", rc);
    }
}

/* Device operations of a round: their buffers to or from the device, then a stream sync. */
static void stage_round(op_run_t *runs, int n, int to_device) {
    int any = 0;
    for (int i = 0; i < n; i++)
        if (runs[i].d.device) copy_buffers(&runs[i], to_device), any = 1;
    if (any) check_rc(&runs[0].d, "ringlet_stream_synchronize", ringlet_stream_synchronize(RINGLET_STREAM_DEFAULT));
}

/* ---------------------------------------------------------------- checks */

typedef struct {
    const op_desc_t *d;
    const char *name;
    size_t bad, first;
    char detail[300];
} verdict_t;

static void note_bad(verdict_t *v, size_t j, const char *fmt_got, const char *fmt_exp, const char *rule) {
    if (v->bad++ == 0) {
        v->first = j;
        snprintf(v->detail, sizeof v->detail, "got %s, expected %s%s", fmt_got, fmt_exp, rule);
    }
}

/* An element that must match bit for bit. */
static void check_bits(verdict_t *v, size_t j, uint64_t got, uint64_t want) {
    if (got == want) return;
    char g[64], e[64];
    format_bits(v->d->dt, got, g, sizeof g);
    format_bits(v->d->dt, want, e, sizeof e);
    note_bad(v, j, g, e, " (bit-exact)");
}

static void close_verdict(verdict_t *v, size_t n) {
    g_stat.bytes_checked += n * dt_size[v->d->dt];
    if (!v->bad) return;
    char w[600];
    snprintf(w, sizeof w, "%s: first bad element %zu (%zu of %zu bad): %s", v->name, v->first, v->bad, n, v->detail);
    report_failure(v->d, w);
}

/* p[0, n) must be elements [first, first + n) of rank src's input. */
static void check_copy(const op_desc_t *d, const char *name, const unsigned char *p, size_t n, int src, size_t first) {
    verdict_t v = {d, name, 0, 0, ""};
    gen_t g = gen_of(d, src);
    for (size_t j = 0; j < n; j++) {
        check_bits(&v, j, load_elem(d->dt, p, j), input_elem(&g, first + j));
    }
    close_verdict(&v, n);
}

/* Every byte of p[0, bytes) still the sentinel. */
static void check_untouched(const op_desc_t *d, const char *name, const unsigned char *p, size_t bytes) {
    for (size_t i = 0; i < bytes; i++) {
        if (p[i] != SENT) {
            char w[200];
            snprintf(w, sizeof w, "%s must not be written, but byte %zu of %zu is 0x%02x", name, i, bytes, p[i]);
            report_failure(d, w);
            return;
        }
    }
}

/* What the reference of a reduction needs: every rank's input and scalar. */
typedef struct {
    gen_t gen[MAX_RANKS];
    uint64_t scalar[MAX_RANKS]; /* pre-multiplied sum */
} ref_ctx_t;

static void ref_init(ref_ctx_t *c, const op_desc_t *d) {
    for (int r = 0; r < d->P; r++) {
        c->gen[r] = gen_of(d, r);
        c->scalar[r] = d->op == OP_PREMUL ? premul_scalar(d, r) : 0;
    }
}

/* The integer reduction of element i over the communicator's ranks. */
static uint64_t reduce_int(const op_desc_t *d, ref_ctx_t *c, size_t i) {
    const uint64_t mask = width_mask(d->dt);
    const int sh = 64 - 8 * (int)dt_size[d->dt], sgn = is_signed_int(d->dt);
    uint64_t acc = 0;
    for (int r = 0; r < d->P; r++) {
        uint64_t x = input_elem(&c->gen[r], i);
        if (d->op == OP_PREMUL) x *= c->scalar[r];
        if (r == 0 && d->op != OP_PREMUL) {
            acc = x;
            continue;
        }
        int64_t sx = (int64_t)(x << sh) >> sh, sa = (int64_t)(acc << sh) >> sh;
        switch (d->op) {
        case RINGLET_PROD: acc *= x; break;
        case RINGLET_MAX: acc = (sgn ? sx > sa : x > acc) ? x : acc; break;
        case RINGLET_MIN: acc = (sgn ? sx < sa : x < acc) ? x : acc; break;
        default: acc += x; break; /* sum, avg, premul */
        }
        acc &= mask;
    }
    acc &= mask;
    if (d->op == RINGLET_AVG)
        acc = sgn ? (uint64_t)(((int64_t)(acc << sh) >> sh) / d->P) & mask : acc / (uint64_t)d->P;
    return acc;
}

/* The float reduction of element i in double (exact but for avg); *abs_sum = sum |x|. */
static double reduce_float(const op_desc_t *d, ref_ctx_t *c, size_t i, double *abs_sum) {
    double acc = 0, s = 0;
    for (int r = 0; r < d->P; r++) {
        double x = bits_to_double(d->dt, input_elem(&c->gen[r], i));
        if (d->op == OP_PREMUL) x *= bits_to_double(d->dt, c->scalar[r]);
        s += fabs(x);
        if (r == 0) {
            acc = x;
            continue;
        }
        switch (d->op) {
        case RINGLET_PROD: acc *= x; break;
        case RINGLET_MAX: acc = x > acc ? x : acc; break;
        case RINGLET_MIN: acc = x < acc ? x : acc; break;
        default: acc += x; break;
        }
    }
    *abs_sum = s;
    return d->op == RINGLET_AVG ? acc / d->P : acc;
}

static void check_float_elem(verdict_t *v, size_t j, uint64_t got_bits, double ref, double abs_sum) {
    const op_desc_t *d = v->d;
    double got = bits_to_double(d->dt, got_bits), bound = 0;
    if (d->op == RINGLET_AVG) bound = eps_of(d->dt) * (abs_sum + fabs(ref)) + d->P * tiny_of(d->dt);
    if (fabs(got - ref) <= bound) return;
    char g[64], e[64], rule[96];
    format_bits(d->dt, got_bits, g, sizeof g);
    snprintf(e, sizeof e, "%.17g", ref);
    if (d->op == RINGLET_AVG) snprintf(rule, sizeof rule, " (|diff| %.3g > bound %.3g)", fabs(got - ref), bound);
    else snprintf(rule, sizeof rule, " (exact)");
    note_bad(v, j, g, e, rule);
}

/* p[0, n) must be the reduction over all ranks of input elements [first, first + n). */
static void check_reduced(const op_desc_t *d, const char *name, const unsigned char *p, size_t n, size_t first) {
    verdict_t v = {d, name, 0, 0, ""};
    ref_ctx_t ctx;
    ref_init(&ctx, d);
    for (size_t j = 0; j < n; j++) {
        uint64_t got = load_elem(d->dt, p, j);
        if (is_float(d->dt)) {
            double s, ref = reduce_float(d, &ctx, first + j, &s);
            check_float_elem(&v, j, got, ref, s);
        } else {
            check_bits(&v, j, got, reduce_int(d, &ctx, first + j));
        }
    }
    close_verdict(&v, n);
}

/* Each of the P blocks of p: block q from rank q's input at element offset `first`
 * (allgather, gather), or from rank q's block `me` (alltoall: first = me * n). */
static void check_blocks(const op_desc_t *d, const char *name, const unsigned char *p, size_t first) {
    const size_t B = d->count * dt_size[d->dt];
    for (int q = 0; q < d->P; q++) {
        char w[96];
        snprintf(w, sizeof w, "%s, block of rank %d", name, q);
        check_copy(d, w, p + (size_t)q * B, d->count, q, first);
    }
}

static void verify_allreduce_like(const op_run_t *r) {
    const op_desc_t *d = &r->d;
    const size_t n = d->count;
    const int root = d->me == d->root;
    if (!d->inplace) check_copy(d, "sendbuf (must not change)", data(&r->sbuf), n, d->me, 0);
    if (d->kind == K_ALLREDUCE || (d->kind == K_REDUCE && root)) check_reduced(d, "result", data(&r->rbuf), n, 0);
    else if (d->kind == K_BROADCAST) check_copy(d, "result (root's data)", data(&r->rbuf), n, d->root, 0);
    else if (d->inplace) check_copy(d, "in-place buffer of a non-root rank (must not change)", data(&r->rbuf), n, d->me, 0);
    else if (r->rbuf.host) check_untouched(d, "recvbuf of a non-root rank", data(&r->rbuf), n * dt_size[d->dt]);
}

static void verify_reduce_scatter(const op_run_t *r) {
    const op_desc_t *d = &r->d;
    const size_t n = d->count, B = n * dt_size[d->dt], me = (size_t)d->me;
    if (!d->inplace) {
        check_copy(d, "sendbuf (must not change)", data(&r->sbuf), d->P * n, d->me, 0);
        check_reduced(d, "result", data(&r->rbuf), n, me * n);
        return;
    }
    check_reduced(d, "result (in place)", data(&r->sbuf) + me * B, n, me * n);
    for (int q = 0; q < d->P; q++)
        if ((size_t)q != me) check_copy(d, "another block of the in-place buffer (must not change)", data(&r->sbuf) + (size_t)q * B, n, d->me, (size_t)q * n);
}

static void verify_op(const op_run_t *r) {
    const op_desc_t *d = &r->d;
    const size_t n = d->count, me = (size_t)d->me;
    const int root = d->me == d->root;
    check_guards(d, &r->sbuf, "sendbuf");
    check_guards(d, &r->rbuf, "recvbuf");
    switch (d->kind) {
    case K_ALLREDUCE:
    case K_BROADCAST:
    case K_REDUCE: verify_allreduce_like(r); break;
    case K_REDUCE_SCATTER: verify_reduce_scatter(r); break;
    case K_ALLGATHER:
        if (!d->inplace) check_copy(d, "sendbuf (must not change)", data(&r->sbuf), n, d->me, 0);
        check_blocks(d, "result", data(&r->rbuf), 0);
        break;
    case K_ALLTOALL:
        if (!d->inplace) check_copy(d, "sendbuf (must not change)", data(&r->sbuf), d->P * n, d->me, 0);
        check_blocks(d, "result", data(&r->rbuf), me * n);
        break;
    case K_GATHER:
        if (r->sbuf.host) check_copy(d, "sendbuf (must not change)", data(&r->sbuf), n, d->me, 0);
        if (root) check_blocks(d, "result on the root", data(&r->rbuf), 0);
        break;
    case K_SCATTER:
        if (root) check_copy(d, "root's sendbuf (must not change)", data(&r->sbuf), d->P * n, d->me, 0);
        if (r->rbuf.host) check_copy(d, "result (the root's block)", data(&r->rbuf), n, d->root, me * n);
        break;
    case K_SENDRECV: {
        int from = d->shift ? (d->me - d->shift + d->P) % d->P : d->root;
        if (r->sbuf.host) check_copy(d, "sendbuf (must not change)", data(&r->sbuf), n, d->me, 0);
        if (r->rbuf.host) check_copy(d, "message received", data(&r->rbuf), n, from, 0);
        break;
    }
    default: break;
    }
}

/* ---------------------------------------------------------------- rounds */

static int concurrent(const op_desc_t *ops, int n) {
    for (int i = 0; i < n; i++)
        for (int j = i + 1; j < n; j++)
            if (ops[i].nb && ops[j].comm != ops[i].comm) return 1;
    return 0;
}

static void count_op(const op_desc_t *d) {
    if (d->kind == K_SENDRECV && d->P < 2) {
        g_stat.skipped++;
        return;
    }
    g_stat.ops[d->kind]++;
    g_stat.nonblocking += (uint64_t)d->nb;
    g_stat.device_ops += (uint64_t)d->device;
    g_stat.inplace += (uint64_t)d->inplace;
}

/* A random order of waiting for the round's operations (the same on every rank). */
static void wait_order(uint64_t round, int n, int *order) {
    for (int i = 0; i < n; i++) order[i] = i;
    for (int i = n - 1; i > 0; i--) {
        int j = (int)(draw(round, i, F_WAIT) % (uint64_t)(i + 1)), t = order[i];
        order[i] = order[j], order[j] = t;
    }
}

static void run_round(uint64_t round) {
    op_desc_t ops[MAX_SLOTS];
    op_run_t runs[MAX_SLOTS];
    int n = plan_round(round, ops), order[MAX_SLOTS];
    memset(runs, 0, sizeof runs);
    for (int i = 0; i < n; i++) {
        runs[i].d = ops[i];
        if (g_opt.verbose) {
            char desc[400];
            describe(&ops[i], desc, sizeof desc);
            printf("op %s\n", desc);
        }
        if (ops[i].kind == K_SENDRECV && ops[i].P < 2) continue; /* no peer on a communicator of one */
        prepare_op(&runs[i]);
    }
    stage_round(runs, n, 1);
    for (int i = 0; i < n; i++) {
        if (ops[i].kind == K_SENDRECV && ops[i].P < 2) continue;
        make_premul_op(&runs[i]);
        issue_op(&runs[i]);
    }
    wait_order(round, n, order);
    for (int i = 0; i < n; i++) wait_op(&runs[order[i]]);
    stage_round(runs, n, 0);
    for (int i = 0; i < n; i++) {
        if (!(ops[i].kind == K_SENDRECV && ops[i].P < 2)) verify_op(&runs[i]);
        count_op(&ops[i]);
        if (runs[i].rop_made) check_rc(&ops[i], "ringlet_op_destroy", ringlet_op_destroy(runs[i].rop, g_comm[ops[i].comm]));
        buf_free(&runs[i].sbuf, ops[i].device);
        buf_free(&runs[i].rbuf, ops[i].device);
    }
    g_stat.concurrent_rounds += (uint64_t)concurrent(ops, n);
    g_stat.rounds++;
}

/* Every rank learns whether any rank's time is up or any rank failed: {stop, failures}. */
static void agree(int time_up, int32_t *flags, uint64_t round) {
    int32_t mine[2] = {time_up, g_stat.failures ? 1 : 0};
    op_desc_t d;
    memset(&d, 0, sizeof d);
    d.round = round, d.slot = -1, d.kind = K_ALLREDUCE, d.P = g_size[0], d.me = g_rank[0], d.dt = RINGLET_INT32;
    d.op = RINGLET_MAX;
    check_rc(&d, "ringlet_allreduce (of the stop flags)",
             ringlet_allreduce(mine, flags, 2, RINGLET_INT32, RINGLET_MAX, g_comm[0], NULL));
}

/* ---------------------------------------------------------------- setup and main */

static size_t parse_size(const char *s) {
    char *end;
    double v = strtod(s, &end);
    if (*end == 'K' || *end == 'k') v *= 1024;
    else if (*end == 'M' || *end == 'm') v *= 1024 * 1024;
    else if (*end == 'G' || *end == 'g') v *= 1024.0 * 1024 * 1024;
    return v < 0 ? 0 : (size_t)v;
}

static void usage(void) {
    fprintf(stderr, "usage: soak --seed S [--seconds T] [--rounds N] [--first-round R] [--max-bytes B[K|M|G]] "
                    "[--memory host|mixed] [--verbose]\n");
    exit(2);
}

static void parse_args(int argc, char **argv) {
    int have_seed = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--verbose") == 0) {
            g_opt.verbose = 1;
            continue;
        }
        if (!v) usage();
        i++;
        if (strcmp(a, "--seed") == 0) g_opt.seed = strtoull(v, NULL, 0), have_seed = 1;
        else if (strcmp(a, "--seconds") == 0) g_opt.seconds = strtod(v, NULL);
        else if (strcmp(a, "--rounds") == 0) g_opt.rounds = strtoull(v, NULL, 0);
        else if (strcmp(a, "--first-round") == 0) g_opt.first_round = strtoull(v, NULL, 0);
        else if (strcmp(a, "--max-bytes") == 0) g_opt.max_bytes = parse_size(v);
        else if (strcmp(a, "--memory") == 0 && (strcmp(v, "host") == 0 || strcmp(v, "mixed") == 0))
            g_opt.mixed_memory = strcmp(v, "mixed") == 0;
        else usage();
    }
    if (!have_seed) usage();
}

static void init_comms(void) {
    ringlet_result_t rc = ringlet_comm_init_env(&g_comm[0]);
    if (rc != RINGLET_SUCCESS) {
        printf("FAIL: ringlet_comm_init_env returned %d (%s): %s\n", (int)rc, ringlet_strerror(rc),
               ringlet_comm_last_error(NULL));
        exit(1);
    }
    ringlet_comm_rank(g_comm[0], &g_rank[0]);
    ringlet_comm_size(g_comm[0], &g_size[0]);
    if (g_size[0] < 1 || g_size[0] > MAX_RANKS) {
        printf("FAIL: %d ranks (1..%d supported)\n", g_size[0], MAX_RANKS);
        exit(1);
    }
    const int P = g_size[0], color = P >= 4 ? g_rank[0] % 2 : 0;
    rc = ringlet_comm_split(g_comm[0], color, P - g_rank[0], &g_comm[1]);
    if (rc != RINGLET_SUCCESS || !g_comm[1]) {
        printf("FAIL rank %d: ringlet_comm_split returned %d: %s\n", g_rank[0], (int)rc, ringlet_comm_last_error(g_comm[0]));
        exit(1);
    }
    ringlet_comm_rank(g_comm[1], &g_rank[1]);
    ringlet_comm_size(g_comm[1], &g_size[1]);
    /* keys reversed: this rank's place among the ranks of its color, from the end */
    int members = 0, place = 0;
    for (int r = 0; r < P; r++)
        if ((P >= 4 ? r % 2 : 0) == color) members++, place += r > g_rank[0];
    if (g_size[1] != members || g_rank[1] != place) {
        printf("FAIL rank %d: the split communicator says rank %d of %d, expected %d of %d\n", g_rank[0], g_rank[1],
               g_size[1], place, members);
        exit(1);
    }
}

static void check_device(void) {
    int count = 0;
    if (!g_opt.mixed_memory) return;
    if (ringlet_device_count(&count) != RINGLET_SUCCESS || count < 1) {
        printf("FAIL rank %d: --memory mixed, but no device (set RINGLET_DEVICE=sim): %s\n", g_rank[0],
               ringlet_comm_last_error(NULL));
        exit(1);
    }
}

static void print_summary(double seconds) {
    char kinds[512] = "";
    size_t len = 0;
    uint64_t total = 0;
    for (int k = 0; k < K_NUM; k++) {
        total += g_stat.ops[k];
        len += (size_t)snprintf(kinds + len, sizeof kinds - len, "%s%s %" PRIu64, k ? ", " : "", kind_name[k],
                                g_stat.ops[k]);
    }
    printf("soak: rank %d of %d: seed %" PRIu64 ": %" PRIu64 " rounds, %" PRIu64 " ops (%s; %" PRIu64
           " non-blocking, %" PRIu64 " in place, %" PRIu64 " on device memory, %" PRIu64
           " skipped), %" PRIu64 " rounds with both communicators in flight, %" PRIu64 " bytes checked, %" PRIu64
           " failures (%.1f s)\n",
           g_rank[0], g_size[0], g_opt.seed, g_stat.rounds, total, kinds, g_stat.nonblocking, g_stat.inplace,
           g_stat.device_ops, g_stat.skipped, g_stat.concurrent_rounds, g_stat.bytes_checked, g_stat.failures, seconds);
}

int main(int argc, char **argv) {
    parse_args(argc, argv);
    setvbuf(stdout, NULL, _IOLBF, 0);
    init_comms();
    check_device();
    if (g_rank[0] == 0)
        printf("soak: seed %" PRIu64 ", %d ranks, split communicator of %d, max %zu bytes, %s memory, %.0f s%s\n",
               g_opt.seed, g_size[0], g_size[1], g_opt.max_bytes, g_opt.mixed_memory ? "host and device" : "host",
               g_opt.seconds, g_opt.rounds ? " (or the rounds given)" : "");
    const double t0 = now_s();
    int32_t flags[2] = {0, 0};
    for (uint64_t round = g_opt.first_round;; round++) {
        const double tr = now_s();
        run_round(round);
        if (g_opt.verbose) printf("round %" PRIu64 " done in %.3f s\n", round, now_s() - tr);
        int done = now_s() - t0 >= g_opt.seconds || (g_opt.rounds && round + 1 - g_opt.first_round >= g_opt.rounds);
        agree(done, flags, round);
        if (flags[0] || flags[1]) break;
    }
    if (flags[1] && !g_stat.failures) printf("FAIL rank %d: another rank found a wrong result (see its lines)\n", g_rank[0]);
    print_summary(now_s() - t0);
    ringlet_result_t rc1 = ringlet_comm_destroy(g_comm[1]), rc0 = ringlet_comm_destroy(g_comm[0]);
    if (rc0 != RINGLET_SUCCESS || rc1 != RINGLET_SUCCESS) {
        printf("FAIL rank %d: ringlet_comm_destroy returned %d and %d\n", g_rank[0], (int)rc1, (int)rc0);
        return 1;
    }
    return flags[1] ? 1 : 0;
}
