/* ringlet-perf's parts (see ringlet_perf.c):
 *   perf_options.c  the command line
 *   perf_data.c     collectives, element types and ops, the input pattern
 *   perf_check.c    checking a result (#wrong)
 *   perf_run.c      issuing and timing the calls of one size
 *   perf_output.c   the table, the header and the JSON file
 *   ringlet_perf.c  main: the communicator, the buffers, the loop over sizes
 */
#ifndef RINGLET_PERF_H
#define RINGLET_PERF_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "device.h"
#include "ringlet.h"

/* ---- collectives, element types and ops (perf_data.c) ---- */

typedef enum { C_ALLREDUCE, C_BROADCAST, C_REDUCE, C_ALLGATHER, C_REDUCESCATTER, C_COUNT } coll_t;

typedef struct {
    const char *name;
    const char *alias1; /* nccl-tests' binary-style names */
    const char *alias2;
    int has_op;   /* the collective reduces */
    int has_root; /* the collective has a root */
} coll_info_t;
extern const coll_info_t kColl[C_COUNT];

typedef struct {
    const char *name; /* as nccl-tests prints it */
    const char *alias1;
    const char *alias2;
    ringlet_datatype_t dt;
} type_info_t;
extern const type_info_t kTypes[];
extern const int NTYPES;

typedef struct {
    const char *name;
    ringlet_op_t op;
} op_info_t;
extern const op_info_t kOps[];
extern const int NOPS;

double bus_factor(coll_t c, int n); /* nccl-tests' bus bandwidth factors */
const char *type_name(ringlet_datatype_t dt);
const char *op_name(ringlet_op_t op);
int is_float(ringlet_datatype_t dt);
int is_signed_int(ringlet_datatype_t dt);
uint16_t f32_to_f16(float f);
uint16_t f32_to_bf16(float f);
/* Element i of buf: raw bits of an integer type (zero-extended), or a float type's value. */
uint64_t load_bits(const void *buf, ringlet_datatype_t dt, size_t i);
double load_double(const void *buf, ringlet_datatype_t dt, size_t i);

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

pattern_t make_pattern(ringlet_datatype_t dt, int has_op, ringlet_op_t op);

/* Inline: the checker calls it for every element of every rank. */
static inline int64_t gen(const pattern_t *p, int rank, size_t i) {
    const uint64_t seed = 0x5eed1e7u;
    uint64_t h = ((uint64_t)i + 1) * 0x9e3779b97f4a7c15ull ^ ((uint64_t)rank + 1) * 0xc2b2ae3d27d4eb4full ^ seed;
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

/* Elements first .. first + n of rank's input, into buf[0 .. n). */
void fill(void *buf, ringlet_datatype_t dt, const pattern_t *p, int rank, size_t first, size_t n);

/* ---- options (perf_options.c) ---- */

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
    double target_s;  /* -T: seconds of timed calls per size and form (0: -n calls) */
    const char *json; /* -J: rank 0 writes the results there */
    int memory;       /* -M: 0 host, 1 device, -1 not given (device when a device backend runs) */
} opts_t;

/* This process's rank as the launcher's environment says, before init (0 if unsaid). */
int env_rank_guess(void);
/* 0 on success, 1 on a usage error (message printed), 2 for -h. Errors are printed by
 * every rank (the launcher may stop the others as soon as the first one exits, and that
 * one must have said why); the usage text by rank 0 only (talk). */
int parse_args(int argc, char **argv, opts_t *o, int talk);

/* ---- a run (perf_run.c) ---- */

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
    int row_iters[2]; /* the timed calls of the current row, out of place and in place */
    /* current test */
    ringlet_datatype_t dt;
    ringlet_op_t op;
    size_t ts;
} ctx_t;

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

typedef struct {
    double bw_sum;
    long bw_count;
    int64_t wrong_total;
} totals_t;

/* A failed call: the message on stderr, the communicator aborted, exit 1. */
_Noreturn void die_ringlet(ctx_t *c, const char *what, ringlet_result_t r);
_Noreturn void die_dev(ctx_t *c, const char *what);
#define CHECK_RL(ctx, what, call)                              \
    do {                                                       \
        ringlet_result_t r_ = (call);                          \
        if (r_ != RINGLET_SUCCESS) die_ringlet(ctx, what, r_); \
    } while (0)

/* Issues one collective on (s, r) with paramcount pc: blocking when req is NULL. */
ringlet_result_t issue(ctx_t *c, const void *s, void *r, size_t pc, ringlet_request_t *req);
const char *coll_call_name(coll_t coll, int blocking);
/* The call's buffers: host, or their device twins. */
void pointers(const ctx_t *c, const layout_t *L, int inplace, const void **s, void **r);
/* -M device: host buffers to their twins, or back; bytes from the start of each. */
void copy_across(ctx_t *c, int to_device, size_t bytes);
/* One size: out-of-place then in-place, timed then checked; rank 0 prints the row. */
void run_size(ctx_t *c, size_t reqbytes, totals_t *tot);

/* ---- checking (perf_check.c) ---- */

/* Poisons rbuf with this byte before a checked call. */
#define SENTINEL 0xa5
/* Fills the input, poisons the rest of rbuf, runs the collective once, and counts
 * wrong elements: wrong results, changed inputs, and writes outside the output. */
int64_t check_once(ctx_t *c, const layout_t *L, int inplace);

/* ---- output (perf_output.c) ---- */

typedef struct {
    int32_t pid;
    int32_t local_rank;
    char host[56];
    char memory[40]; /* "host memory", "device 0 (cuda)" */
} rankinfo_t;

extern const char *const kAverageName[4];
void print_header(ctx_t *c, const rankinfo_t *info);
void print_table_header(void);
/* One row: times tred (seconds, across ranks) and #wrong wsum of both forms. */
void print_row(ctx_t *c, const layout_t *L, const double tred[2], const int64_t wsum[2], totals_t *tot);
void print_footer(const ctx_t *c, const totals_t *tot);
void json_begin(ctx_t *c, const rankinfo_t *info);
void json_end(ctx_t *c, const totals_t *tot);

#endif
