/* ringlet-perf's output: rank 0's header, the table in nccl-tests' layout (one row per
 * size, -I's per-iteration lines under it), the footer, and the JSON file of -J. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "perf.h"

static void fmt_time(char *buf, size_t len, double us) {
    if (us >= 10000.0)
        snprintf(buf, len, "%7.0f", us);
    else if (us >= 100.0)
        snprintf(buf, len, "%7.1f", us);
    else
        snprintf(buf, len, "%7.2f", us);
}

void print_table_header(void) {
    printf("#\n");
    printf("# %10s  %12s  %8s  %6s  %6s           out-of-place                       in-place          \n", "", "", "",
           "", "");
    printf("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s %6s  %7s  %6s  %6s %6s\n", "size", "count", "type", "redop",
           "root", "time", "algbw", "busbw", "#wrong", "time", "algbw", "busbw", "#wrong");
    printf("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %5s  %7s  %6s  %6s  %5s\n", "(B)", "(elements)", "", "", "",
           "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", "");
    fflush(stdout);
}

const char *const kAverageName[4] = {"rank0", "mean", "min", "max"};

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

void json_begin(ctx_t *c, const rankinfo_t *info) {
    FILE *f = c->json;
    const opts_t *o = &c->o;
    fprintf(f, "{\n  \"tool\": \"ringlet-perf\",\n  \"version\": ");
    json_str(f, ringlet_version());
    fprintf(f, ",\n  \"collective\": \"%s\",\n  \"nranks\": %d,\n", kColl[o->coll].name, c->nranks);
    fprintf(f,
            "  \"settings\": {\"min_bytes\": %zu, \"max_bytes\": %zu, \"step_%s\": %zu, \"warmup\": %d, "
            "\"iters\": %d, \"check\": %d, \"blocking\": %d, \"average\": %d, \"average_name\": \"%s\", "
            "\"per_iteration\": %d, \"target_s\": %g, \"memory\": \"%s\"},\n",
            o->minb, o->maxb, o->stepfactor > 1 ? "factor" : "bytes",
            o->stepfactor > 1 ? (size_t)o->stepfactor : o->stepbytes, o->warmup, o->iters, o->check, o->blocking,
            o->average, kAverageName[o->average], o->per_iter, o->target_s, info[0].memory);
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
        fprintf(f, ", \"iters\": %d", c->row_iters[ip]);
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

void json_end(ctx_t *c, const totals_t *tot) {
    FILE *f = c->json;
    fprintf(f, "\n  ],\n  \"wrong_total\": %lld,\n  \"avg_busbw\": ", (long long)tot->wrong_total);
    json_num(f, tot->bw_count ? tot->bw_sum / (double)tot->bw_count : 0.0);
    fprintf(f, ",\n  \"ok\": %s\n}\n", tot->wrong_total ? "false" : "true");
}

/* One row: times tred (seconds, across ranks) and #wrong wsum of both forms. */
void print_row(ctx_t *c, const layout_t *L, const double tred[2], const int64_t wsum[2], totals_t *tot) {
    const int has_op = kColl[c->o.coll].has_op, has_root = kColl[c->o.coll].has_root;
    double bw[2][2];
    printf("%12zu  %12zu  %8s  %6s  %6d", L->bytes, L->count_col, type_name(c->dt), has_op ? op_name(c->op) : "none",
           has_root ? c->o.root : -1);
    for (int ip = 0; ip < 2; ip++) {
        char ts[32], ws[32];
        double sec = tred[ip];
        double algbw = sec > 0 ? (double)L->bytes / 1e9 / sec : 0.0;
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
            printf("#  %10zu  per-iteration time (us, %s across ranks, %d calls):", L->bytes, kAverageName[c->o.average],
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
    if (c->json) json_row(c, L, tred, bw, wsum);
}

void print_header(ctx_t *c, const rankinfo_t *info) {
    const opts_t *o = &c->o;
    printf("# Collective test starting: ringlet-perf %s\n", kColl[o->coll].name);
    printf("# nranks %d minBytes %zu maxBytes %zu step: %zu(%s) warmup iters: %d iters: %d validation: %d "
           "blocking: %d\n",
           c->nranks, o->minb, o->maxb, o->stepfactor > 1 ? (size_t)o->stepfactor : o->stepbytes,
           o->stepfactor > 1 ? "factor" : "bytes", o->warmup, o->iters, o->check, o->blocking);
    if (o->target_s > 0)
        printf("# -T %g: the timed calls of each size and form take about %g s (at least %d; \"iters\" in -J)\n",
               o->target_s, o->target_s, o->iters);
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

void print_footer(const ctx_t *c, const totals_t *tot) {
    printf("# Out of bounds values : %lld %s\n", (long long)tot->wrong_total, tot->wrong_total ? "FAILED" : "OK");
    printf("# Avg bus bandwidth    : %g \n", tot->bw_count ? tot->bw_sum / (double)tot->bw_count : 0.0);
    printf("#\n# Collective test concluded: ringlet-perf %s\n#\n", kColl[c->o.coll].name);
    fflush(stdout);
}
