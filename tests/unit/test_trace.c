/* Unit test for src/comm/trace.c (RINGLET_TRACE):
 *   - tracing off: RINGLET_TRACE unset or empty gives NULL; every call accepts NULL;
 *   - rank 1 of 3 records spans from 4 threads at once (random counts, names and ops
 *     that need JSON escaping, invalid UTF-8, chunk/peer -1, negative durations, a NaN
 *     start); the file must be "<dir>/t.rank1.json", valid JSON with every span exactly
 *     once and with the right fields, checked by an embedded /usr/bin/python3 script;
 *   - file naming: "%r", ".rank<r>.json" with and without ".json", nranks == 1 as is;
 *   - RINGLET_TRACE_MAX: spans past the cap are dropped and reported in the file;
 *   - write errors (missing directory, target is a directory): one warning on stderr,
 *     no crash, no file and no temporary left behind.
 *   - a communicator aborted from another thread while a call of it is still under way:
 *     the abort writes the trace only once the call has left (within the abort's grace),
 *     with the spans the call recorded meanwhile, and the trace stays valid for a call
 *     that outlives the grace (freed only by destroy; ASan sees a use after free).
 * Exit status 0 on success, 1 on a failure (each printed), 77 (after the checks that
 * need no Python) when /usr/bin/python3 is missing.
 */
#include "trace.h"

#include "comm.h"
#include "ringlet.h"
#include "util.h"

#include <dirent.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define PYTHON "/usr/bin/python3"

static int failures;
static char dir[256];
static char checker[320];
static int have_python;

static void check(const char *what, int cond) {
    if (!cond) {
        printf("FAIL %s\n", what);
        failures++;
    }
}

static int file_exists(const char *path) { return access(path, F_OK) == 0; }

/* Span i of thread k: every field is a function of (k, i), so the checker can tell
 * each span apart (seq = k * 1000000 + i) and knows what it must contain.
 * Keep in sync with kChecker below. */
static const char *const kNames[] = {
    "send",
    "q\"uote",
    "back\\slash",
    "ctl\t\n\x01" "end",
    "utf8 \xc3\xa9 \xe2\x9c\x93",          /* e-acute, check mark: valid UTF-8, kept */
    "bad \xff\xc0\x80 \xed\xa0\x80 x", /* invalid byte, overlong, surrogate: U+FFFD each byte */
};
#define NNAMES (sizeof kNames / sizeof kNames[0])
static const char *const kOps[] = {"allreduce", "re\"duce\\"};

static void record(rl_trace *t, int k, int i) {
    double t0 = 1000.0 + k + i * 1e-3;
    double t1 = i % 11 == 10 ? t0 - 1.0 : t0 + i * 1e-6; /* a negative duration is written as 0 */
    const char *op = i % 7 == 0 ? NULL : kOps[i % 2];
    rl_trace_span(t, k, kNames[i % NNAMES], t0, t1, op, (uint64_t)k * 1000000u + (uint64_t)i, i % 3 == 0 ? -1 : i,
                  (size_t)i * 4099u, i % 5 == 0 ? -1 : i % 3);
}

/* The checker: python3 CHECKER FILE RANK NRANKS DROPPED INVALID COUNT0 COUNT1 COUNT2 COUNT3.
 * Spans of thread k must be exactly i = 0 .. COUNTk-1 as record() wrote them.
 * (No backslashes or double quotes in it, to keep it readable as a C string.) */
static const char *const kChecker =
    "import json, sys, math\n"
    "path = sys.argv[1]\n"
    "rank, nranks, dropped, invalid = (int(a) for a in sys.argv[2:6])\n"
    "counts = [int(a) for a in sys.argv[6:10]]\n"
    "errs = []\n"
    "Q, B, R = chr(34), chr(92), chr(0xfffd)\n"
    "names = ['send', 'q' + Q + 'uote', 'back' + B + 'slash', 'ctl' + chr(9) + chr(10) + chr(1) + 'end',\n"
    "         'utf8 ' + chr(0xe9) + ' ' + chr(0x2713), 'bad ' + R * 3 + ' ' + R * 3 + ' x']\n"
    "ops = ['allreduce', 're' + Q + 'duce' + B]\n"
    "def no_constant(c):\n"
    "    raise ValueError('not JSON: ' + c)\n"
    "try:\n"
    "    with open(path, 'rb') as f:\n"
    "        doc = json.loads(f.read().decode('utf-8'), parse_constant=no_constant)\n"
    "except Exception as e:\n"
    "    print('FAIL %s: not valid JSON: %s' % (path, e))\n"
    "    sys.exit(1)\n"
    "def chk(what, cond):\n"
    "    if not cond:\n"
    "        errs.append(what)\n"
    "try:\n"
    "    chk('top level is an object', isinstance(doc, dict))\n"
    "    chk('displayTimeUnit ns', doc.get('displayTimeUnit') == 'ns')\n"
    "    od = doc['otherData']\n"
    "    chk('otherData.rank', od['rank'] == rank)\n"
    "    chk('otherData.nranks', od['nranks'] == nranks)\n"
    "    chk('otherData.version', isinstance(od['version'], str) and od['version'].count('.') == 2)\n"
    "    chk('otherData.events %r' % od['events'], od['events'] == sum(counts))\n"
    "    chk('otherData.dropped %r' % od['dropped'], od['dropped'] == dropped)\n"
    "    chk('otherData.invalid %r' % od['invalid'], od['invalid'] == invalid)\n"
    "    ev = doc['traceEvents']\n"
    "    chk('traceEvents is a list', isinstance(ev, list))\n"
    "    meta = [e for e in ev if e['ph'] == 'M']\n"
    "    pn = [e for e in meta if e['name'] == 'process_name']\n"
    "    chk('one process_name rank N', len(pn) == 1 and pn[0]['args']['name'] == 'rank %d' % rank\n"
    "        and pn[0]['pid'] == rank)\n"
    "    ps = [e for e in meta if e['name'] == 'process_sort_index']\n"
    "    chk('process_sort_index', len(ps) == 1 and ps[0]['args']['sort_index'] == rank)\n"
    "    tn = {e['tid']: e['args']['name'] for e in meta if e['name'] == 'thread_name' and e['pid'] == rank}\n"
    "    chk('thread names %r' % tn, tn == {0: 'operation', 1: 'send', 2: 'recv', 3: 'reduce'})\n"
    "    xs = [e for e in ev if e['ph'] == 'X']\n"
    "    chk('%d X events, expected %d' % (len(xs), sum(counts)), len(xs) == sum(counts))\n"
    "    seen = [set() for _ in range(4)]\n"
    "    last = -math.inf\n"
    "    for e in xs:\n"
    "        if len(errs) > 20:\n"
    "            break\n"
    "        a = e['args']\n"
    "        k, i = divmod(a['seq'], 1000000)\n"
    "        w = 'span seq %d: ' % a['seq']\n"
    "        if k not in range(4) or i in seen[k]:\n"
    "            chk(w + 'unknown or duplicate', False)\n"
    "            continue\n"
    "        seen[k].add(i)\n"
    "        chk(w + 'sorted by ts', e['ts'] >= last)\n"
    "        last = e['ts']\n"
    "        chk(w + 'pid', e['pid'] == rank)\n"
    "        chk(w + 'tid', e['tid'] == k)\n"
    "        chk(w + 'cat', e['cat'] == 'ringlet')\n"
    "        chk(w + 'name %r' % e['name'], e['name'] == names[i % len(names)])\n"
    "        chk(w + 'ts %r' % e['ts'], abs(e['ts'] - (1e9 + k * 1e6 + i * 1e3)) < 0.01)\n"
    "        chk(w + 'dur %r' % e['dur'], abs(e['dur'] - (0 if i % 11 == 10 else i)) < 0.01)\n"
    "        chk(w + 'op', a.get('op') == (None if i % 7 == 0 else ops[i % 2]))\n"
    "        chk(w + 'chunk', a.get('chunk') == (None if i % 3 == 0 else i))\n"
    "        chk(w + 'peer', a.get('peer') == (None if i % 5 == 0 else i % 3))\n"
    "        chk(w + 'bytes', a['bytes'] == i * 4099)\n"
    "        chk(w + 'no other args', set(a) <= {'op', 'seq', 'chunk', 'bytes', 'peer'})\n"
    "    for k in range(4):\n"
    "        chk('thread %d: %d spans, expected %d' % (k, len(seen[k]), counts[k]), seen[k] == set(range(counts[k])))\n"
    "    inst = [e for e in ev if e['ph'] == 'i']\n"
    "    if dropped:\n"
    "        chk('one drop note', len(inst) == 1 and inst[0]['args']['dropped'] == dropped\n"
    "            and 'dropped' in inst[0]['name'])\n"
    "    else:\n"
    "        chk('no drop note', not inst)\n"
    "    chk('only M, X, i events', all(e['ph'] in ('M', 'X', 'i') for e in ev))\n"
    "    chk('every event has ph, pid, tid, ts', all({'ph', 'pid', 'tid', 'ts'} <= set(e) for e in ev))\n"
    "except (KeyError, TypeError, AttributeError) as e:\n"
    "    errs.append('malformed: %r' % e)\n"
    "for m in errs[:20]:\n"
    "    print('FAIL %s: %s' % (path, m))\n"
    "if not errs:\n"
    "    print('ok   %s: %d spans' % (path, sum(counts)))\n"
    "sys.exit(1 if errs else 0)\n";

/* Runs the checker on path; counts the failure when it does not pass. */
static void check_file(const char *path, int rank, int nranks, int dropped, int invalid, const int counts[4]) {
    if (!have_python) return;
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "%s %s %s %d %d %d %d %d %d %d %d", PYTHON, checker, path, rank, nranks, dropped, invalid,
             counts[0], counts[1], counts[2], counts[3]);
    fflush(stdout);
    int st = system(cmd);
    if (st == -1 || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
        printf("FAIL checker on %s (status %d)\n", path, st);
        failures++;
    }
}

/* -------------------------------------------------------------------------- */

typedef struct {
    rl_trace *t;
    int k, count;
    pthread_barrier_t *go;
} worker_arg;

static void *worker(void *p) {
    worker_arg *a = p;
    pthread_barrier_wait(a->go);
    for (int i = 0; i < a->count; i++) {
        record(a->t, a->k, a->count - 1 - i); /* out of order: the writer sorts */
        if (a->k == 0 && i == 3) rl_trace_span(a->t, 0, "nan", NAN, 1.0, "x", 0, -1, 0, -1); /* ignored */
    }
    return NULL;
}

static void test_null(void) {
    unsetenv("RINGLET_TRACE");
    check("RINGLET_TRACE unset: open gives NULL", rl_trace_open(0, 2) == NULL);
    setenv("RINGLET_TRACE", "", 1);
    check("RINGLET_TRACE empty: open gives NULL", rl_trace_open(0, 2) == NULL);
    rl_trace_span(NULL, 0, "x", 1.0, 2.0, "op", 1, 2, 3, 4);
    rl_trace_span(NULL, 0, NULL, 1.0, 2.0, NULL, 1, -1, 3, -1);
    rl_trace_close(NULL);
}

static void test_threads(void) {
    char name[300], path[320], other[320];
    snprintf(name, sizeof name, "%s/t.json", dir);
    snprintf(path, sizeof path, "%s/t.rank1.json", dir);
    setenv("RINGLET_TRACE", name, 1);
    rl_trace *t = rl_trace_open(1, 3);
    check("threads: open gives a trace", t != NULL);
    if (!t) return;
    pthread_t th[4];
    worker_arg wa[4];
    int counts[4];
    pthread_barrier_t go;
    pthread_barrier_init(&go, NULL, 4);
    for (int k = 0; k < 4; k++) {
        counts[k] = 200 + rand() % 300;
        wa[k] = (worker_arg){t, k, counts[k], &go};
        if (pthread_create(&th[k], NULL, worker, &wa[k]) != 0) {
            printf("FAIL pthread_create\n");
            exit(1);
        }
    }
    for (int k = 0; k < 4; k++) pthread_join(th[k], NULL);
    pthread_barrier_destroy(&go);
    rl_trace_close(t);
    printf("threads: %d + %d + %d + %d spans\n", counts[0], counts[1], counts[2], counts[3]);
    check("threads: t.rank1.json written", file_exists(path));
    check("threads: t.json not written", !file_exists(name));
    snprintf(other, sizeof other, "%s/t.json.rank1.json", dir);
    check("threads: .json not doubled", !file_exists(other));
    check_file(path, 1, 3, 0, 1, counts);
}

/* open/close with RINGLET_TRACE = dir/env as rank of nranks; the file must be dir/want */
static void naming(const char *env, int rank, int nranks, const char *want) {
    char name[320], path[320], what[400];
    snprintf(name, sizeof name, "%s/%s", dir, env);
    snprintf(path, sizeof path, "%s/%s", dir, want);
    setenv("RINGLET_TRACE", name, 1);
    rl_trace *t = rl_trace_open(rank, nranks);
    snprintf(what, sizeof what, "naming: RINGLET_TRACE=%s rank %d of %d writes %s", env, rank, nranks, want);
    check(what, t != NULL);
    rl_trace_close(t);
    check(what, file_exists(path));
    static const int zero[4] = {0, 0, 0, 0};
    check_file(path, rank, nranks, 0, 0, zero);
}

static void test_naming(void) {
    naming("x-%r-%r.json", 2, 4, "x-2-2.json");
    naming("y-%r", 0, 1, "y-0");
    naming("plain", 0, 2, "plain.rank0.json");
    naming("p.json.txt", 11, 12, "p.json.txt.rank11.json");
    naming("single.json", 0, 1, "single.json");
    char p[320];
    snprintf(p, sizeof p, "%s/single.rank0.json", dir);
    check("naming: nranks 1 adds no .rank0", !file_exists(p));
}

static void test_drops(void) {
    char name[320];
    snprintf(name, sizeof name, "%s/drop.json", dir);
    setenv("RINGLET_TRACE", name, 1);
    setenv("RINGLET_TRACE_MAX", "10", 1);
    rl_trace *t = rl_trace_open(0, 1);
    check("drops: open", t != NULL);
    for (int i = 0; i < 25; i++) record(t, 0, i);
    rl_trace_close(t);
    static const int ten[4] = {10, 0, 0, 0};
    check_file(name, 0, 1, 15, 0, ten);

    snprintf(name, sizeof name, "%s/drop0.json", dir);
    setenv("RINGLET_TRACE", name, 1);
    setenv("RINGLET_TRACE_MAX", "0", 1);
    t = rl_trace_open(0, 1);
    for (int i = 0; i < 3; i++) record(t, 2, i);
    rl_trace_close(t);
    static const int none[4] = {0, 0, 0, 0};
    check_file(name, 0, 1, 3, 0, none);
    unsetenv("RINGLET_TRACE_MAX");
}

/* Runs open + one span + close with RINGLET_TRACE=name and stderr captured; returns how
 * many lines of stderr mention RINGLET_TRACE. */
static int warnings_of_failed_write(const char *name, int nranks) {
    char log[320];
    snprintf(log, sizeof log, "%s/stderr.txt", dir);
    fflush(stderr);
    int saved = dup(2);
    int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (saved < 0 || fd < 0) {
        printf("FAIL cannot capture stderr\n");
        exit(1);
    }
    dup2(fd, 2);
    close(fd);
    setenv("RINGLET_TRACE", name, 1);
    rl_trace *t = rl_trace_open(0, nranks);
    record(t, 1, 1);
    rl_trace_close(t);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    FILE *f = fopen(log, "r");
    int n = 0;
    char line[1024];
    while (f && fgets(line, sizeof line, f)) {
        if (strstr(line, "RINGLET_TRACE")) n++;
        printf("  (captured) %s", line);
    }
    if (f) fclose(f);
    unlink(log);
    return n;
}

static void test_write_errors(void) {
    char name[320];
    snprintf(name, sizeof name, "%s/missing/t.json", dir);
    check("write error (no such directory): one warning", warnings_of_failed_write(name, 1) == 1);
    check("write error (no such directory): no file", !file_exists(name));

    snprintf(name, sizeof name, "%s/adir", dir);
    if (mkdir(name, 0700) != 0) {
        printf("FAIL mkdir %s\n", name);
        failures++;
        return;
    }
    check("write error (target is a directory): one warning", warnings_of_failed_write(name, 1) == 1);
    DIR *d = opendir(dir);
    struct dirent *de;
    while (d && (de = readdir(d)) != NULL) {
        if (strstr(de->d_name, ".tmp")) {
            printf("FAIL write error: temporary %s left behind\n", de->d_name);
            failures++;
        }
    }
    if (d) closedir(d);
    rmdir(name);
}

/* The checker's verdict, quietly (a probe: which of two traces the file holds). */
static int file_holds(const char *path, int rank, int nranks, const int counts[4]) {
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "%s %s %s %d %d 0 0 %d %d %d %d >/dev/null 2>&1", PYTHON, checker, path, rank, nranks,
             counts[0], counts[1], counts[2], counts[3]);
    fflush(stdout);
    int st = system(cmd);
    return st != -1 && WIFEXITED(st) && WEXITSTATUS(st) == 0;
}

typedef struct {
    rl_trace *t;
    pthread_barrier_t *go;
} closer_arg;
static void *closer(void *p) {
    closer_arg *a = p;
    pthread_barrier_wait(a->go);
    rl_trace_close(a->t);
    return NULL;
}

/* Two communicators of one process and rank write one path at once (both aborted by a
 * watchdog): the file must be one of the two traces, whole, and no temporary file left. */
static void test_same_path(void) {
    char name[320], path[320];
    snprintf(name, sizeof name, "%s/same.json", dir);
    snprintf(path, sizeof path, "%s/same.rank0.json", dir);
    setenv("RINGLET_TRACE", name, 1);
    int bad = 0, rounds = have_python ? 10 : 0;
    for (int round = 0; round < rounds && !bad; round++) {
        static const int ca[4] = {20000, 0, 0, 0}, cb[4] = {0, 15000, 3000, 0}; /* different files */
        rl_trace *a = rl_trace_open(0, 2), *b = rl_trace_open(0, 2);
        if (!a || !b) {
            printf("FAIL same path: open\n");
            failures++;
            return;
        }
        for (int k = 0; k < 4; k++)
            for (int i = 0; i < ca[k] || i < cb[k]; i++) {
                if (i < ca[k]) record(a, k, i);
                if (i < cb[k]) record(b, k, i);
            }
        pthread_barrier_t go;
        pthread_barrier_init(&go, NULL, 2);
        closer_arg xa = {a, &go}, xb = {b, &go};
        pthread_t ta, tb;
        pthread_create(&ta, NULL, closer, &xa);
        pthread_create(&tb, NULL, closer, &xb);
        pthread_join(ta, NULL);
        pthread_join(tb, NULL);
        pthread_barrier_destroy(&go);
        if (!file_holds(path, 0, 2, ca) && !file_holds(path, 0, 2, cb)) {
            printf("FAIL same path: round %d: %s is neither trace whole\n", round, path);
            bad = 1;
        }
        DIR *d = opendir(dir);
        for (struct dirent *de; d && (de = readdir(d)) != NULL;)
            if (strstr(de->d_name, "same.rank0.json.tmp")) printf("FAIL same path: %s left\n", de->d_name), bad = 1;
        if (d) closedir(d);
        unlink(path);
    }
    failures += bad;
    unsetenv("RINGLET_TRACE");
    if (!bad && rounds) printf("same path: %d rounds of two traces closed at once: the file was one of them, whole\n", rounds);
}

static void *abort_comm(void *arg) {
    ringlet_comm_abort(arg);
    return NULL;
}

/* A call under way (counted as a waiter, as a wait counts itself) holding the trace, as
 * pipe.c's calls do, when another thread aborts the communicator. */
static void test_abort_in_flight(void) {
    char name[320];
    snprintf(name, sizeof name, "%s/abort.json", dir);
    setenv("RINGLET_TRACE", name, 1);
    ringlet_unique_id_t id;
    ringlet_comm_t comm = NULL;
    if (ringlet_get_unique_id(&id) || ringlet_comm_init_rank(&comm, 1, id, 0)) {
        printf("FAIL abort in flight: init: %s\n", ringlet_comm_last_error(NULL));
        failures++;
        return;
    }
    struct ringlet_comm *c = comm;
    rl_trace *tr = c->trace;
    check("abort in flight: the communicator has a trace", tr != NULL);
    atomic_fetch_add(&c->waiters, 1);
    pthread_t th;
    double t_start = rl_now(); /* the abort's wait for the call (its grace, 1 s) starts after this */
    if (pthread_create(&th, NULL, abort_comm, comm) != 0) {
        printf("FAIL pthread_create\n");
        exit(1);
    }
    /* The abort's teardown sets stop, then waits for the call to leave. */
    double until = rl_now() + 60;
    while (!atomic_load(&c->stop) && rl_now() < until) rl_sleep_ms(1);
    check("abort in flight: the abort stopped the communicator", atomic_load(&c->stop));
    enum { SPANS = 40 };
    for (int i = 0; i < SPANS; i++) record(tr, 0, i);
    double late = rl_now() - t_start;
    atomic_fetch_sub(&c->waiters, 1);
    pthread_join(th, NULL);
    record(tr, 1, 0); /* a call past the abort: kept nowhere, but safe */
    ringlet_comm_destroy(comm);
    unsetenv("RINGLET_TRACE");
    check("abort in flight: the trace was written", file_exists(name));
    /* Only where the call left within the abort's grace (1 s, which began after t_start) are
     * its spans sure to be in the file. */
    static const int counts[4] = {SPANS, 0, 0, 0};
    if (late < 0.8) check_file(name, 0, 1, 0, 0, counts);
    else printf("abort in flight: the call left %.2f s after the abort began, past its grace: not looked for\n", late);
}

int main(void) {
    setenv("RINGLET_DEBUG", "WARN", 1); /* before the first log call, which reads it once */
    unsigned seed = (unsigned)time(NULL);
    srand(seed);
    printf("test_trace: seed %u\n", seed);
    have_python = access(PYTHON, X_OK) == 0;

    snprintf(dir, sizeof dir, "%s/ringlet-trace.XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }
    snprintf(checker, sizeof checker, "%s/check.py", dir);
    FILE *f = fopen(checker, "w");
    if (!f || fputs(kChecker, f) < 0 || fclose(f) != 0) {
        printf("FAIL cannot write %s\n", checker);
        return 1;
    }

    test_null();
    test_threads();
    test_naming();
    test_drops();
    test_write_errors();
    test_same_path();
    test_abort_in_flight();

    /* cleanup: every file we made, then the directory */
    DIR *d = opendir(dir);
    struct dirent *de;
    char p[600];
    while (d && (de = readdir(d)) != NULL) {
        if (de->d_name[0] == '.') continue;
        snprintf(p, sizeof p, "%s/%s", dir, de->d_name);
        unlink(p);
    }
    if (d) closedir(d);
    rmdir(dir);

    if (failures) {
        printf("test_trace: %d failures\n", failures);
        return 1;
    }
    if (!have_python) {
        printf("SKIP: no python3 (%s): the JSON files were not checked\n", PYTHON);
        return 77;
    }
    printf("test_trace: all passed\n");
    return 0;
}
