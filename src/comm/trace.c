/* RINGLET_TRACE: spans kept in memory, written as one Chrome-trace JSON file per rank
 * when the trace is closed. See trace.h for the file naming and the lanes.
 *
 * Recording is on the hot path (one span per chunk per step), so a span is a small
 * fixed-size record: its name and op are interned once into a string table and the
 * record keeps their indices. Everything is formatted only at close.
 *
 * RINGLET_TRACE_MAX (default 1,000,000) caps the number of spans kept; later spans are
 * counted as dropped and the file says so (otherData.dropped and an instant event at
 * the first dropped span), so a long run cannot exhaust memory.
 */
#include "trace.h"

#include "log.h"
#include "ringlet.h"
#include "util.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define TRACE_MAX_DEFAULT 1000000LL
#define TRACE_CAP0 4096

#define STR_STR(x) #x
#define STR(x) STR_STR(x)
#define TRACE_VERSION STR(RINGLET_VERSION_MAJOR) "." STR(RINGLET_VERSION_MINOR) "." STR(RINGLET_VERSION_PATCH)

typedef struct {
    double t0, t1; /* rl_now() seconds */
    uint64_t seq;
    long long chunk;
    uint64_t bytes;
    int peer;
    int lane;
    uint32_t name; /* index into the string table */
    uint32_t op;   /* index into the string table, NO_STR when the op is NULL */
} span_t;

#define NO_STR UINT32_MAX

struct rl_trace {
    pthread_mutex_t mu;
    int rank, nranks;
    char *path;          /* the file this rank writes */
    span_t *ev;          /* ev[0..n) recorded spans, capacity cap */
    size_t n, cap, max;  /* max: RINGLET_TRACE_MAX */
    uint64_t dropped;    /* spans past max, or lost to a failed allocation */
    double first_drop;   /* t0 of the first dropped span */
    uint64_t invalid;    /* spans with a start time that is not finite, ignored */
    /* interned strings: strs[0..nstr), looked up through an open-addressing hash of
     * indices (hcap a power of two, kept under half full) */
    char **strs;
    uint32_t nstr, strcap;
    uint32_t *hash, hcap;
    double mono_to_real_us; /* CLOCK_REALTIME - CLOCK_MONOTONIC at open, microseconds */
    int written;            /* rl_trace_write ran: later spans are not kept */
};

/* ------------------------------------------------------------------------- */
/* string table                                                              */

static uint32_t str_hash(const char *s) {
    uint32_t h = 2166136261u; /* FNV-1a */
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 16777619u;
    return h;
}

static int hash_grow(rl_trace *t) {
    uint32_t ncap = t->hcap ? t->hcap * 2 : 64;
    uint32_t *nh = malloc((size_t)ncap * sizeof *nh);
    if (!nh) return -1;
    for (uint32_t i = 0; i < ncap; i++) nh[i] = NO_STR;
    for (uint32_t k = 0; k < t->nstr; k++) {
        uint32_t i = str_hash(t->strs[k]) & (ncap - 1);
        while (nh[i] != NO_STR) i = (i + 1) & (ncap - 1);
        nh[i] = k;
    }
    free(t->hash);
    t->hash = nh;
    t->hcap = ncap;
    return 0;
}

/* Index of s in the table, added when new; NO_STR when out of memory. Under t->mu. */
static uint32_t intern(rl_trace *t, const char *s) {
    if (t->hcap == 0 || (t->nstr + 1) * 2 > t->hcap) {
        if (t->hcap >= (1u << 30) || hash_grow(t) != 0) return NO_STR;
    }
    uint32_t i = str_hash(s) & (t->hcap - 1);
    for (; t->hash[i] != NO_STR; i = (i + 1) & (t->hcap - 1))
        if (strcmp(t->strs[t->hash[i]], s) == 0) return t->hash[i];
    if (t->nstr == t->strcap) {
        uint32_t ncap = t->strcap ? t->strcap * 2 : 32;
        char **ns = realloc(t->strs, (size_t)ncap * sizeof *ns);
        if (!ns) return NO_STR;
        t->strs = ns;
        t->strcap = ncap;
    }
    char *copy = strdup(s);
    if (!copy) return NO_STR;
    t->strs[t->nstr] = copy;
    t->hash[i] = t->nstr;
    return t->nstr++;
}

/* ------------------------------------------------------------------------- */
/* file name                                                                 */

/* "%r" -> rank everywhere; else, with nranks > 1, "<name>.rank<r>.json" (a trailing
 * ".json" of name is removed first); nranks <= 1: name unchanged. */
static char *trace_path(const char *name, int rank, int nranks) {
    char rs[16];
    int rl = snprintf(rs, sizeof rs, "%d", rank);
    size_t len = strlen(name);
    if (strstr(name, "%r")) {
        size_t n = 0;
        for (const char *p = name; (p = strstr(p, "%r")) != NULL; p += 2) n++;
        char *out = malloc(len + n * (size_t)rl + 1);
        if (!out) return NULL;
        char *o = out;
        for (const char *p = name; *p;) {
            if (p[0] == '%' && p[1] == 'r') {
                memcpy(o, rs, (size_t)rl);
                o += rl;
                p += 2;
            } else {
                *o++ = *p++;
            }
        }
        *o = '\0';
        return out;
    }
    if (nranks <= 1) return strdup(name);
    size_t base = len;
    if (len >= 5 && strcmp(name + len - 5, ".json") == 0) base = len - 5;
    size_t cap = base + (size_t)rl + sizeof ".rank.json";
    char *out = malloc(cap);
    if (!out) return NULL;
    snprintf(out, cap, "%.*s.rank%s.json", (int)base, name, rs);
    return out;
}

/* ------------------------------------------------------------------------- */
/* open / record                                                             */

rl_trace *rl_trace_open(int rank, int nranks) {
    const char *name = getenv("RINGLET_TRACE");
    if (!name || !*name) return NULL;
    rl_trace *t = calloc(1, sizeof *t);
    if (!t) {
        RL_WARN(rank, "RINGLET_TRACE: out of memory; no trace");
        return NULL;
    }
    t->path = trace_path(name, rank, nranks);
    if (!t->path || pthread_mutex_init(&t->mu, NULL) != 0) {
        RL_WARN(rank, "RINGLET_TRACE: out of memory; no trace");
        free(t->path);
        free(t);
        return NULL;
    }
    t->rank = rank;
    t->nranks = nranks;
    t->max = (size_t)rl_env_int("RINGLET_TRACE_MAX", TRACE_MAX_DEFAULT, 0, RL_TRACE_MAX_LIMIT);
    /* Both clocks, so that perf/trace_merge.py --align realtime can line up ranks of
     * several hosts, whose monotonic clocks have unrelated origins. */
    struct timespec rt;
    clock_gettime(CLOCK_REALTIME, &rt);
    double mono = rl_now();
    t->mono_to_real_us = ((double)rt.tv_sec + (double)rt.tv_nsec * 1e-9 - mono) * 1e6;
    RL_INFO(rank, "RINGLET_TRACE: recording up to %zu spans for %s", t->max, t->path);
    return t;
}

void rl_trace_name_comm(rl_trace *t, uint32_t tag) {
    if (!t) return;
    const char *name = getenv("RINGLET_TRACE");
    if (!name || !*name) return;
    /* "<name>.comm<tag>" then the usual rules; a "%r" becomes "<rank>.comm<tag>". */
    size_t len = strlen(name), base = len;
    int pct = strstr(name, "%r") != NULL;
    if (!pct && len >= 5 && strcmp(name + len - 5, ".json") == 0) base = len - 5;
    size_t cap = len + 32;
    char *tagged = malloc(cap);
    if (!tagged) return;
    if (pct) {
        const char *at = strstr(name, "%r");
        snprintf(tagged, cap, "%.*s%%r.comm%08x%s", (int)(at - name), name, (unsigned)tag, at + 2);
    } else {
        snprintf(tagged, cap, "%.*s.comm%08x.json", (int)base, name, (unsigned)tag);
    }
    char *path = trace_path(tagged, t->rank, 2); /* always with the rank, even alone */
    free(tagged);
    if (!path) return;
    pthread_mutex_lock(&t->mu);
    free(t->path);
    t->path = path;
    pthread_mutex_unlock(&t->mu);
    RL_INFO(t->rank, "RINGLET_TRACE: this split communicator writes %s", t->path);
}

void rl_trace_span(rl_trace *t, int lane, const char *name, double t0, double t1, const char *op, uint64_t seq,
                   long long chunk, size_t bytes, int peer) {
    if (!t) return;
    pthread_mutex_lock(&t->mu);
    if (t->written) goto out;
    if (!isfinite(t0)) {
        t->invalid++;
        goto out;
    }
    if (t->n == t->cap && t->n < t->max) {
        size_t ncap = t->cap ? t->cap * 2 : TRACE_CAP0;
        if (ncap > t->max) ncap = t->max;
        span_t *ne = realloc(t->ev, ncap * sizeof *ne);
        if (ne) {
            t->ev = ne;
            t->cap = ncap;
        }
    }
    uint32_t ni = t->n < t->cap ? intern(t, name ? name : "?") : NO_STR;
    uint32_t oi = op && ni != NO_STR ? intern(t, op) : NO_STR;
    if (ni == NO_STR || (op && oi == NO_STR)) { /* at the cap, or out of memory */
        if (t->dropped++ == 0) t->first_drop = t0;
        goto out;
    }
    span_t *e = &t->ev[t->n++];
    e->t0 = t0;
    e->t1 = isfinite(t1) && t1 > t0 ? t1 : t0; /* a negative or unknown duration: 0 */
    e->seq = seq;
    e->chunk = chunk;
    e->bytes = (uint64_t)bytes;
    e->peer = peer;
    e->lane = lane;
    e->name = ni;
    e->op = oi;
out:
    pthread_mutex_unlock(&t->mu);
}

/* ------------------------------------------------------------------------- */
/* writing                                                                   */

/* s as a JSON string: quotes, backslashes and control characters escaped; bytes that
 * are not valid UTF-8 become U+FFFD so the file always parses. */
static void put_str(FILE *f, const char *s) {
    const unsigned char *p = (const unsigned char *)s;
    putc('"', f);
    while (*p) {
        unsigned c = *p;
        if (c == '"' || c == '\\') {
            putc('\\', f);
            putc((int)c, f);
            p++;
        } else if (c < 0x20) {
            switch (c) {
            case '\n': fputs("\\n", f); break;
            case '\r': fputs("\\r", f); break;
            case '\t': fputs("\\t", f); break;
            case '\b': fputs("\\b", f); break;
            case '\f': fputs("\\f", f); break;
            default: fprintf(f, "\\u%04x", c); break;
            }
            p++;
        } else if (c < 0x80) {
            putc((int)c, f);
            p++;
        } else {
            /* length of a well-formed UTF-8 sequence starting at p, or 0 */
            size_t n = 0;
            if (c >= 0xc2 && c <= 0xdf) n = 2;
            else if (c >= 0xe0 && c <= 0xef) n = 3;
            else if (c >= 0xf0 && c <= 0xf4) n = 4;
            for (size_t k = 1; k < n; k++)
                if ((p[k] & 0xc0) != 0x80) n = 0;
            /* overlong, surrogate and past-U+10FFFF forms */
            if (n == 3 && ((c == 0xe0 && p[1] < 0xa0) || (c == 0xed && p[1] >= 0xa0))) n = 0;
            if (n == 4 && ((c == 0xf0 && p[1] < 0x90) || (c == 0xf4 && p[1] >= 0x90))) n = 0;
            if (n) {
                fwrite(p, 1, n, f);
                p += n;
            } else {
                fputs("\\ufffd", f);
                p++;
            }
        }
    }
    putc('"', f);
}

static const char *const lane_names[] = {"operation", "send", "recv", "reduce"};

static void put_meta(FILE *f, int pid, int tid, const char *what, const char *key, const char *sval, int ival) {
    fprintf(f, ",\n{\"ph\":\"M\",\"pid\":%d,\"tid\":%d,\"ts\":0,\"name\":\"%s\",\"args\":{\"%s\":", pid, tid, what,
            key);
    if (sval) put_str(f, sval);
    else fprintf(f, "%d", ival);
    fputs("}}", f);
}

static int span_cmp(const void *a, const void *b) {
    const span_t *x = a, *y = b;
    if (x->t0 != y->t0) return x->t0 < y->t0 ? -1 : 1;
    if (x->t1 != y->t1) return x->t1 > y->t1 ? -1 : 1; /* the enclosing span first */
    return (x->lane > y->lane) - (x->lane < y->lane);
}

/* Writes every event to f; returns ferror(f). Under t->mu. */
static int write_json(rl_trace *t, FILE *f) {
    int pid = t->rank;
    char host[256] = "";
    if (gethostname(host, sizeof host - 1) != 0) host[0] = '\0';
    host[sizeof host - 1] = '\0';

    /* Sorted by start time: easier to read, and viewers that do not sort still nest
     * spans correctly. The order of equal spans on one lane does not matter. */
    if (t->n > 1) qsort(t->ev, t->n, sizeof *t->ev, span_cmp);

    fputs("{\"traceEvents\":[\n", f);
    char label[32];
    snprintf(label, sizeof label, "rank %d", t->rank);
    /* the first event has no leading comma; the rest are written by put_meta/below */
    fprintf(f, "{\"ph\":\"M\",\"pid\":%d,\"tid\":0,\"ts\":0,\"name\":\"process_name\",\"args\":{\"name\":", pid);
    put_str(f, label);
    fputs("}}", f);
    put_meta(f, pid, 0, "process_sort_index", "sort_index", NULL, t->rank);
    for (int l = 0; l < 4; l++) {
        put_meta(f, pid, l, "thread_name", "name", lane_names[l], 0);
        put_meta(f, pid, l, "thread_sort_index", "sort_index", NULL, l);
    }
    for (size_t i = 0; i < t->n; i++) {
        const span_t *e = &t->ev[i];
        fputs(",\n{\"ph\":\"X\",\"cat\":\"ringlet\",\"name\":", f);
        put_str(f, t->strs[e->name]);
        fprintf(f, ",\"pid\":%d,\"tid\":%d,\"ts\":%.3f,\"dur\":%.3f,\"args\":{", pid, e->lane, e->t0 * 1e6,
                (e->t1 - e->t0) * 1e6);
        if (e->op != NO_STR) {
            fputs("\"op\":", f);
            put_str(f, t->strs[e->op]);
            putc(',', f);
        }
        fprintf(f, "\"seq\":%" PRIu64, e->seq);
        if (e->chunk != -1) fprintf(f, ",\"chunk\":%lld", e->chunk);
        fprintf(f, ",\"bytes\":%" PRIu64, e->bytes);
        if (e->peer != -1) fprintf(f, ",\"peer\":%d", e->peer);
        fputs("}}", f);
    }
    if (t->dropped) {
        char note[160];
        snprintf(note, sizeof note, "trace full: %" PRIu64 " later spans dropped (RINGLET_TRACE_MAX=%zu)", t->dropped,
                 t->max);
        fputs(",\n{\"ph\":\"i\",\"s\":\"p\",\"cat\":\"ringlet\",\"name\":", f);
        put_str(f, note);
        fprintf(f, ",\"pid\":%d,\"tid\":0,\"ts\":%.3f,\"args\":{\"dropped\":%" PRIu64 "}}", pid,
                t->first_drop * 1e6, t->dropped);
    }
    fputs("\n],\n\"displayTimeUnit\":\"ns\",\n\"otherData\":{\"version\":", f);
    put_str(f, TRACE_VERSION);
    fprintf(f, ",\"rank\":%d,\"nranks\":%d,\"host\":", t->rank, t->nranks);
    put_str(f, host);
    fprintf(f,
            ",\"os_pid\":%d,\"clock\":\"CLOCK_MONOTONIC\",\"realtime_minus_monotonic_us\":%.3f"
            ",\"events\":%zu,\"dropped\":%" PRIu64 ",\"invalid\":%" PRIu64 ",\"max_events\":%zu}}\n",
            (int)getpid(), t->mono_to_real_us, t->n, t->dropped, t->invalid, t->max);
    fflush(f);
    return ferror(f);
}

/* Writes "<path>.tmp<pid>.<n>" then renames it over path, so a reader never sees half a
 * file and a failed write leaves no debris. n counts the process's writes: two
 * communicators of one process and rank writing the same path at once (an abort of
 * both) each have a file of their own (O_EXCL), and the last rename wins whole. */
static void write_file(rl_trace *t) {
    static atomic_uint writes;
    size_t tl = strlen(t->path) + 48;
    char *tmp = malloc(tl);
    if (!tmp) {
        RL_WARN(t->rank, "RINGLET_TRACE: out of memory; %s not written", t->path);
        return;
    }
    snprintf(tmp, tl, "%s.tmp%d.%u", t->path, (int)getpid(), atomic_fetch_add(&writes, 1));
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    /* Left by an earlier process of the same pid killed while it wrote (pids are reused):
     * never this process's own, whose writes each have a count of their own. */
    if (fd < 0 && errno == EEXIST && unlink(tmp) == 0) fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    FILE *f = fd >= 0 ? fdopen(fd, "w") : NULL;
    if (fd >= 0 && !f) close(fd), unlink(tmp);
    if (!f) {
        RL_WARN(t->rank, "RINGLET_TRACE: cannot write %s: %s; no trace written", t->path, strerror(errno));
        free(tmp);
        return;
    }
    errno = 0;
    int bad = write_json(t, f);
    int err = errno;
    if (fclose(f) != 0 && !bad) bad = 1, err = errno;
    if (!bad && rename(tmp, t->path) != 0) bad = 1, err = errno;
    if (bad) {
        RL_WARN(t->rank, "RINGLET_TRACE: cannot write %s: %s; no trace written", t->path,
                err ? strerror(err) : "write error");
        unlink(tmp);
    } else {
        RL_INFO(t->rank, "RINGLET_TRACE: wrote %zu spans to %s", t->n, t->path);
        if (t->dropped)
            RL_WARN(t->rank, "RINGLET_TRACE: %" PRIu64 " spans dropped past RINGLET_TRACE_MAX=%zu (%s)", t->dropped,
                    t->max, t->path);
    }
    free(tmp);
}

void rl_trace_write(rl_trace *t) {
    if (!t) return;
    pthread_mutex_lock(&t->mu);
    if (!t->written) write_file(t);
    t->written = 1;
    pthread_mutex_unlock(&t->mu);
}

void rl_trace_close(rl_trace *t) {
    if (!t) return;
    rl_trace_write(t);
    pthread_mutex_destroy(&t->mu);
    for (uint32_t i = 0; i < t->nstr; i++) free(t->strs[i]);
    free(t->strs);
    free(t->hash);
    free(t->ev);
    free(t->path);
    free(t);
}
