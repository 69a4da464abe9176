/* Communicators come and go without leaking, and abort works from another thread.
 *
 *   lifecycle --cycles N --aborts M [--memory host|device] [--count C] [--reduce-workers W]
 *       N init/destroy cycles, then M init/abort/destroy cycles, each with one all-reduce
 *       of C int32 (default 256; so that every transport connects); with --reduce-workers,
 *       W threads named ringlet-reduce must be running after each all-reduce (the
 *       communicator's reduction threads started; RINGLET_REDUCE_THREADS=W+1 and C large
 *       enough to split), then one more init/destroy cycle (an abort does not wait for
 *       peers: GPU memory they still map is freed by a later init or end). Before (after
 *       one warm-up cycle) and after:
 *       open descriptors, threads, /dev/shm segments of this process, memory mappings
 *       must be the same, and the resident set may grow by at most 16 MiB (the
 *       allocator keeps some). Prints the figures.
 *   lifecycle --abort-thread
 *       rank 0: a thread blocks in an all-reduce that rank 1 never joins; the main
 *       thread aborts the communicator: the call must return (an error) and abort must
 *       return, each within 5 s (the times are printed; the goals are 100 ms and 1 s);
 *       a second abort returns at once. Rank 1 waits for rank 0 to finish, then aborts.
 *       With --destroy-after: the blocked thread destroys the communicator as soon as its
 *       call returned, while the abort may still tear it down (it waits for that call to
 *       leave): the destroy must wait for that teardown and succeed (the address and
 *       thread sanitizers' builds see a second teardown beside it).
 *       At 3 ranks the blocked call is a receive from rank 1, which never sends (over TCP:
 *       it waits parked for rank 1's connection); ranks 1 and 2 wait as rank 1 does.
 *   lifecycle --abort-destroy R
 *       R rounds of: rank 0 waits (ringlet_wait, in a thread) on a receive from rank 1,
 *       which never sends, another thread finalizes (held up by that receive), and another
 *       runs an all-reduce rank 1 never joins; once all are inside (the communicator
 *       counts the wait and the finalize, and runs the all-reduce: white-box, comm.h), the
 *       main thread aborts the communicator and destroys it at once, as a watchdog
 *       (Python's Communicator.abort, torch's abort) does, then joins the threads: the
 *       three calls must end with an error, and nothing may touch what the destroy freed
 *       (the address and thread sanitizers' builds see it). Rank 1 calls nothing (rank
 *       0's calls end by its abort only) and destroys once rank 0 is done.
 *   lifecycle --group-destroy   (2 ranks, RINGLET_TIMEOUT 60 s in the test)
 *       rank 0: a thread's group holds an all-reduce on the world W and one on its copy D
 *       (a split); rank 1 joins W's only. Once rank 1's returned, the main thread aborts
 *       and destroys W: the destroy must return within 10 s (the group is done with W; it
 *       still waits on D, till D's deadline); then D is aborted, the group ends with an
 *       error, and D is destroyed.
 *   lifecycle --split-death   (3 ranks, RINGLET_TIMEOUT 60 s in the test)
 *       ranks 0 and 1 split the world into one color; rank 2 takes part in the split's
 *       two exchanges by hand (as its members do), then exits without its init: the
 *       others' split must fail within 20 s with RINGLET_ERR_REMOTE naming rank 2 (the
 *       world's monitor hears of its exit at once; the new communicator's init would
 *       wait for it till the deadline).
 *   lifecycle --late-peer [--count C]
 *       rank 0: an all-reduce of C int32 that rank 1 never joins (rank 1 waits as in
 *       --abort-thread), run with RINGLET_TIMEOUT=5: it must fail with
 *       RINGLET_ERR_TIMEOUT, naming rank 1 and the all-reduce, within 30 s.
 *   lifecycle --late-peer-test
 *       rank 0: a receive from rank 1, which never sends (waiting as above), polled with
 *       ringlet_test only, RINGLET_TIMEOUT=5: the request must end with
 *       RINGLET_ERR_TIMEOUT naming rank 1 and the receive within 30 s (it polled forever).
 *   lifecycle --peer-why   (3 ranks)
 *       rank 1 aborts its communicator, then destroys it and leaves; ranks 0 and 2 call an
 *       all-reduce: it must fail with RINGLET_ERR_REMOTE within 30 s (RINGLET_TIMEOUT is 60
 *       s in the test), naming rank 1 and quoting what rank 1 said of its failure (its
 *       abort), on rank 0 (which heard it) and on rank 2 (told by rank 0).
 *   lifecycle --abort-destroying
 *       rank 0's destroy waits for rank 1 to leave; another thread aborts it meanwhile:
 *       the abort must return long before RINGLET_TIMEOUT; rank 1 destroys after it.
 *   lifecycle --left R [--last L | --other O] [--abort] [--group]   (3 ranks; more with --other)
 *       rank R destroys the communicator after a barrier; the others' all-reduce must fail
 *       at once (RINGLET_ERR_REMOTE, naming rank R as having destroyed it), not time out.
 *   lifecycle --laggard   (4 ranks)
 *       rank 2 stays out of an all-reduce until the others' has failed at the 8 s deadline
 *       of their communicator: every one's error says that rank 2 has not called it.
 *   lifecycle --abort-init
 *       one process, no launcher: inits that wait for peers who never come are stopped
 *       from another thread through a stop token (ringlet_comm_init_rank_stoppable): a
 *       rank 1 stuck in its handshake with a rank 0 that never answers, a rank 0 waiting
 *       for a rank 1 that never joins, and a token fired before init began. Each init must
 *       fail with RINGLET_ERR_INVALID_USAGE within 5 s of the fire (RINGLET_TIMEOUT is
 *       60 s in the test; the goal is 1 s; the times are printed).
 *   lifecycle --fork
 *       each rank: an all-reduce, then fork(); in the child (no exec) an all-reduce, a
 *       non-blocking one, a test and a wait of the parent's request, the async error
 *       and the communicator's destroy must each fail at once with
 *       RINGLET_ERR_INVALID_USAGE, the last error saying the process forked;
 *       the parent's communicator then still works (an all-reduce, checked).
 * Prints "lifecycle: rank R: OK ..." or FAIL lines; exit 0 iff all passed.
 */
#include <dirent.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "comm.h" /* --abort-destroy: c->waiters */
#include "device.h"
#include "ringlet.h"

static int g_rank, g_failed;
static long g_count = 256, g_workers = -1; /* --count, --reduce-workers (-1: not checked) */
static char g_dir[96] = "/tmp"; /* the abort cycles' handshake files */
static const rl_device_ops *D;

#define FAIL(...) (g_failed++, printf("FAIL rank %d: ", g_rank), printf(__VA_ARGS__), printf("\n"), fflush(stdout))

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static long count_dir(const char *path, const char *prefix) {
    DIR *d = opendir(path);
    long n = 0;
    struct dirent *e;
    while (d && (e = readdir(d)))
        if (e->d_name[0] != '.' && (!prefix || !strncmp(e->d_name, prefix, strlen(prefix)))) n++;
    if (d) closedir(d);
    return n;
}
/* Threads of this process whose name starts with name. */
static long count_named(const char *name) {
    DIR *d = opendir("/proc/self/task");
    struct dirent *e;
    long n = 0;
    while (d && (e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        char path[300], comm[64] = "";
        snprintf(path, sizeof path, "/proc/self/task/%s/comm", e->d_name);
        FILE *f = fopen(path, "r");
        if (f && fgets(comm, sizeof comm, f)) n += !strncmp(comm, name, strlen(name));
        if (f) fclose(f);
    }
    if (d) closedir(d);
    return n;
}
static long count_lines(const char *path) {
    FILE *f = fopen(path, "r");
    long n = 0;
    int ch;
    while (f && (ch = fgetc(f)) != EOF) n += ch == '\n';
    if (f) fclose(f);
    return n;
}
static long rss_kib(void) {
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long v = -1;
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, "VmRSS:", 6)) v = atol(line + 6);
    if (f) fclose(f);
    return v;
}

typedef struct {
    long fds, threads, shm, maps, rss;
} usage_t;
static usage_t usage(void) {
    char prefix[64];
    snprintf(prefix, sizeof prefix, "ringlet-%d-", (int)getpid());
    return (usage_t){count_dir("/proc/self/fd", NULL), count_dir("/proc/self/task", NULL),
                     count_dir("/dev/shm", prefix), count_lines("/proc/self/maps"), rss_kib()};
}

/* One communicator's life: init, an all-reduce (checked), then destroy or abort+destroy. */
static int cycle(int abort_it, int k) {
    ringlet_comm_t c;
    if (ringlet_comm_init_env(&c)) return FAIL("cycle %d: init: %s", k, ringlet_comm_last_error(NULL)), 1;
    int size = 0;
    ringlet_comm_size(c, &size);
    size_t hbytes = (size_t)g_count * sizeof(int32_t);
    int32_t *h = malloc(hbytes), *buf = h;
    if (!h) return FAIL("cycle %d: out of memory", k), 1;
    for (long i = 0; i < g_count; i++) h[i] = (int32_t)(i + k + g_rank);
    void *dbuf = NULL;
    if (D) {
        if (D->mem_alloc(&dbuf, hbytes) != RL_DEV_OK || D->memcpy_async(dbuf, h, hbytes, NULL) != RL_DEV_OK)
            return free(h), FAIL("cycle %d: device memory: %s", k, rl_dev_error()), 1;
        buf = dbuf;
    }
    ringlet_result_t rc =
        ringlet_allreduce(buf, buf, (size_t)g_count, RINGLET_INT32, RINGLET_SUM, c, D ? RINGLET_STREAM_DEFAULT : NULL);
    if (D && !rc) {
        if (D->memcpy_async(h, dbuf, hbytes, NULL) != RL_DEV_OK || D->stream_sync(NULL) != RL_DEV_OK) rc = RINGLET_ERR_CUDA;
    }
    int bad = 0;
    for (long i = 0; i < g_count && !rc; i++) bad += h[i] != (int32_t)(size * (i + k) + size * (size - 1) / 2);
    free(h);
    if (rc || bad) FAIL("cycle %d: allreduce: %s, %d wrong", k, rc ? ringlet_comm_last_error(c) : "ok", bad);
    long workers = g_workers >= 0 ? count_named("ringlet-reduce") : -1;
    /* The last cycle's joined workers may still be listed a moment (see the end of main) */
    for (double t1 = now(); workers > g_workers && now() - t1 < 5; workers = count_named("ringlet-reduce")) usleep(1000);
    if (workers != g_workers) FAIL("cycle %d: %ld reduction threads running, wanted %ld", k, workers, g_workers);
    if (abort_it) {
        /* Aborts only once every rank's all-reduce has returned (this rank's last message
         * may still be on its way when its own returns): a file per rank and cycle. */
        char path[128];
        snprintf(path, sizeof path, "%s/%d.%d", g_dir, k, g_rank);
        FILE *f = fopen(path, "w");
        if (f) fclose(f);
        for (int r = 0; r < size; r++) {
            snprintf(path, sizeof path, "%s/%d.%d", g_dir, k, r);
            for (double t0 = now(); access(path, F_OK) != 0 && now() - t0 < 60;) usleep(200);
        }
        ringlet_comm_abort(c);
        ringlet_comm_abort(c); /* twice: a no-op */
    }
    ringlet_comm_destroy(c);
    if (dbuf) D->mem_free(dbuf);
    return rc || bad;
}

/* An all-reduce of random int32 (the same generator on every rank, offset by the rank),
 * checked bit for bit. */
static int checked_allreduce(ringlet_comm_t c, int size, unsigned seed, const char *what) {
    enum { N = 4099 };
    static int32_t buf[N], want[N];
    for (long i = 0; i < N; i++) {
        unsigned x = seed * 2654435761u + (unsigned)i * 40503u;
        buf[i] = (int32_t)(x >> 4) + g_rank;
        want[i] = (int32_t)((uint32_t)(x >> 4) * (uint32_t)size + (uint32_t)(size * (size - 1) / 2));
    }
    ringlet_result_t rc = ringlet_allreduce(buf, buf, N, RINGLET_INT32, RINGLET_SUM, c, NULL);
    int bad = 0;
    for (long i = 0; i < N && !rc; i++) bad += buf[i] != want[i];
    if (rc || bad) FAIL("%s: allreduce: %s, %d wrong", what, rc ? ringlet_comm_last_error(c) : "ok", bad);
    return rc || bad;
}

/* A child forked after the communicator was made cannot use it: every call fails at once. */
/* --fork-kill (2 ranks, shared memory): rank 1 forks a child that lives on (no exec, as a
 * worker pool's), then is killed (SIGKILL). Rank 0's all-reduce must fail naming rank 1 as
 * gone (its process exited), as without the child: the child closed its copies of rank 1's
 * monitor connection at the fork, so rank 1's end closes them. (The child held them open,
 * and rank 0 heard of rank 1 only by its silence, after RINGLET_TIMEOUT, as unresponsive.) */
static int fork_then_killed(void) {
    ringlet_comm_t c;
    if (ringlet_comm_init_env(&c)) return FAIL("fork-kill: init: %s", ringlet_comm_last_error(NULL)), 1;
    int size = 0;
    ringlet_comm_size(c, &size);
    if (checked_allreduce(c, size, 1, "fork-kill: before")) return 1;
    char path[600];
    snprintf(path, sizeof path, "%s/child", getenv("LIFECYCLE_DIR") ? getenv("LIFECYCLE_DIR") : "/tmp");
    if (g_rank == 1) {
        fflush(stdout);
        pid_t pid = fork();
        if (pid == 0) { /* lives on 60 s at most, holding whatever it kept */
            close(0), close(1), close(2);
            for (double t0 = now(); now() - t0 < 60;) usleep(100000);
            _exit(0);
        }
        FILE *f = fopen(path, "w");
        if (f) fprintf(f, "%d\n", (int)pid), fclose(f);
        raise(SIGKILL);
    }
    int32_t x[4] = {1, 2, 3, 4};
    double t0 = now();
    ringlet_result_t rc = ringlet_allreduce(x, x, 4, RINGLET_INT32, RINGLET_SUM, c, NULL);
    const char *msg = ringlet_comm_last_error(c);
    if (rc != RINGLET_ERR_REMOTE || !strstr(msg, "rank 1") || !strstr(msg, "exited"))
        FAIL("fork-kill: rank 1 killed, its forked child alive: %s after %.1f s: %s", ringlet_strerror(rc), now() - t0, msg);
    else
        printf("lifecycle: rank 0: OK rank 1 killed, its forked child alive: failed after %.1f s: %s\n", now() - t0, msg);
    ringlet_comm_destroy(c);
    return g_failed ? 1 : 0;
}

static int fork_child_calls(void) {
    ringlet_comm_t c;
    if (ringlet_comm_init_env(&c)) return FAIL("fork: init: %s", ringlet_comm_last_error(NULL)), 1;
    int size = 0;
    ringlet_comm_size(c, &size);
    if (checked_allreduce(c, size, 1, "fork: before")) return 1;
    /* A request of the parent's, in flight (maybe) at the fork. */
    int32_t pend[1000];
    for (int i = 0; i < 1000; i++) pend[i] = (int32_t)(i * 7 + g_rank);
    ringlet_request_t preq = NULL;
    if (ringlet_iallreduce(pend, pend, 1000, RINGLET_INT32, RINGLET_SUM, c, NULL, &preq))
        return FAIL("fork: iallreduce: %s", ringlet_comm_last_error(c)), 1;
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        int32_t x[4] = {1, 2, 3, 4};
        ringlet_request_t req = NULL;
        double t0 = now();
        ringlet_result_t a = ringlet_allreduce(x, x, 4, RINGLET_INT32, RINGLET_SUM, c, NULL);
        const char *why = ringlet_comm_last_error(NULL);
        int said = strstr(why, "forked") != NULL;
        ringlet_result_t b = ringlet_iallreduce(x, x, 4, RINGLET_INT32, RINGLET_SUM, c, NULL, &req);
        int done = -1;
        ringlet_result_t t = ringlet_test(&preq, &done);
        ringlet_result_t w = ringlet_wait(&preq);
        ringlet_result_t g = ringlet_comm_get_async_error(c);
        said = said && strstr(ringlet_comm_last_error(c), "forked") != NULL; /* the thread's, not the parent's */
        ringlet_result_t d = ringlet_comm_destroy(c);
        double dt = now() - t0;
        int ok = a == RINGLET_ERR_INVALID_USAGE && b == a && t == a && done == 0 && w == a && g == a && d == a &&
                 req == NULL && said;
        if (!ok)
            printf("FAIL rank %d: fork: in the child: allreduce %d, iallreduce %d, test %d (done %d), wait %d, "
                   "async error %d, destroy %d, %.1f s: %s\n",
                   g_rank, (int)a, (int)b, (int)t, done, (int)w, (int)g, (int)d, dt, ringlet_comm_last_error(c));
        fflush(stdout);
        _exit(ok ? 0 : 1);
    }
    int st = 0;
    if (pid < 0 || waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st) != 0)
        FAIL("fork: the child's calls did not all fail at once (status 0x%x)", st);
    int bad = 0;
    if (ringlet_wait(&preq)) FAIL("fork: the parent's wait: %s", ringlet_comm_last_error(c)), bad = 1;
    for (int i = 0; i < 1000 && !bad; i++)
        if (pend[i] != (int32_t)(size * i * 7 + size * (size - 1) / 2)) FAIL("fork: the parent's request: element %d", i), bad = 1;
    bad |= checked_allreduce(c, size, 2, "fork: after, in the parent");
    if (ringlet_comm_destroy(c)) FAIL("fork: destroy: %s", ringlet_comm_last_error(NULL)), bad = 1;
    if (!g_failed) printf("lifecycle: rank %d: OK a child forked after init: every call failed at once\n", g_rank);
    return g_failed || bad;
}

typedef struct {
    ringlet_comm_t c;
    ringlet_result_t rc;
    double t_return;
    int destroy_after;          /* --destroy-after: destroy c once the call returned */
    ringlet_result_t destroy_rc;
    int32_t buf[1024];
} waiter_t;
static void *wait_thread(void *p) {
    waiter_t *w = p;
    w->rc = ringlet_allreduce(w->buf, w->buf, 1024, RINGLET_INT32, RINGLET_SUM, w->c, NULL);
    w->t_return = now();
    if (w->destroy_after) w->destroy_rc = ringlet_comm_destroy(w->c);
    return NULL;
}

/* A receive from rank 1, which is no ring neighbour's sender at 3 ranks (0 -> 1 -> 2 -> 0)
 * and never sends: it waits parked for rank 1's connection. */
static void *recv_thread(void *p) {
    waiter_t *w = p;
    w->rc = ringlet_recv(w->buf, 1024, RINGLET_INT32, 1, w->c, NULL);
    w->t_return = now();
    return NULL;
}

/* --abort-thread, rank 0: a thread blocks in an all-reduce that rank 1 never joins (at 3
 * ranks: in a receive from rank 1); this one aborts the communicator. */
static void abort_waiter(ringlet_comm_t c, int P, int destroy_after) {
    waiter_t w = {c, 0, 0, destroy_after, 0, {0}};
    pthread_t th;
    pthread_create(&th, NULL, P == 3 ? recv_thread : wait_thread, &w);
    usleep(200 * 1000); /* likely inside its wait by now; either way it must return */
    double t0 = now();
    ringlet_comm_abort(c);
    double t_abort = now() - t0;
    pthread_join(th, NULL);
    double t_call = w.t_return - t0;
    if (destroy_after) { /* c is gone */
        if (w.rc == RINGLET_SUCCESS) FAIL("the all-reduce rank 1 never joined succeeded");
        if (w.destroy_rc != RINGLET_SUCCESS)
            FAIL("destroy right after the aborted call returned: %s", ringlet_strerror(w.destroy_rc));
        if (!g_failed)
            printf("lifecycle: rank 0: OK abort from another thread, the blocked thread destroying at once: abort "
                   "returned in %.1f ms, the call %.1f ms after the abort began (%s), then its destroy\n",
                   t_abort * 1e3, t_call * 1e3, ringlet_strerror(w.rc));
        return;
    }
    t0 = now();
    ringlet_comm_abort(c);
    double t_again = now() - t0;
    if (w.rc == RINGLET_SUCCESS) FAIL("the %s rank 1 never joined succeeded", P == 3 ? "receive" : "all-reduce");
    if (t_call > 5 || t_abort > 5 || t_again > 5)
        FAIL("abort took %.3f s, the waiting call returned %.3f s after it, a second abort %.3f s", t_abort, t_call,
             t_again);
    if (!g_failed)
        printf("lifecycle: rank 0: OK abort from another thread: abort returned in %.1f ms, the blocked %s %.1f "
               "ms after the abort began (goals 1000 and 100 ms), a second abort in %.3f ms; the call said: %s\n",
               t_abort * 1e3, P == 3 ? "receive" : "all-reduce", t_call * 1e3, t_again * 1e3, ringlet_strerror(w.rc));
}

/* --abort-destroy: a thread in ringlet_wait on a receive nobody sends. */
typedef struct {
    ringlet_request_t q;
    atomic_int started;
    ringlet_result_t rc;
} req_waiter_t;
static void *req_wait_thread(void *p) {
    req_waiter_t *w = p;
    atomic_store(&w->started, 1);
    w->rc = ringlet_wait(&w->q);
    return NULL;
}
/* --abort-destroy: a thread in ringlet_comm_finalize, held up by the receive nobody sends. */
static void *finalize_thread(void *p) {
    waiter_t *w = p;
    w->rc = ringlet_comm_finalize(w->c);
    return NULL;
}
static int comm_running(ringlet_comm_t c) {
    pthread_mutex_lock(&c->q_mu);
    int r = c->running;
    pthread_mutex_unlock(&c->q_mu);
    return r;
}

static int abort_destroy_rounds(long rounds) {
    for (long k = 0; k < rounds && !g_failed; k++) {
        ringlet_comm_t c;
        if (ringlet_comm_init_env(&c)) return printf("FAIL: round %ld: %s\n", k, ringlet_comm_last_error(NULL)), 1;
        /* Every init returned before rank 0 aborts (else rank 1's init fails on it). */
        if (ringlet_barrier(c, NULL)) return printf("FAIL: round %ld: barrier: %s\n", k, ringlet_comm_last_error(c)), 1;
        int32_t v[16] = {0};
        char done[160]; /* rank 0's word that this round's communicator is gone */
        snprintf(done, sizeof done, "%s/abort-destroy.%ld", g_dir, k);
        if (g_rank != 0) {
            /* No call: rank 0's end only by its abort (a receive here would take its
             * all-reduce's message, fail on its channel, and fail rank 0's calls first).
             * The next init only once rank 0's communicator is gone: till then its
             * bootstrap port answers for the aborted one (60 s at most). */
            for (double t0 = now(); access(done, F_OK) != 0 && now() - t0 < 60;) usleep(200);
            if (access(done, F_OK) != 0) FAIL("round %ld: rank 0 did not finish in 60 s", k);
            ringlet_comm_destroy(c);
            continue;
        }
        req_waiter_t w = {.q = NULL};
        if (ringlet_irecv(v, 16, RINGLET_INT32, 1, c, NULL, &w.q)) {
            FAIL("round %ld: irecv: %s", k, ringlet_comm_last_error(c));
            break;
        }
        /* wait_thread: an all-reduce nobody joins (host memory, nothing queued: run on
         * that thread, inline) */
        waiter_t cw = {.c = c}, fw = {.c = c};
        pthread_t th, th2, th3;
        pthread_create(&th, NULL, req_wait_thread, &w);
        /* inside ringlet_wait: started, and counted by the communicator (60 s at most);
         * then the all-reduce's thread, inside its call (the communicator runs it) */
        for (double t0 = now(); !(atomic_load(&w.started) && atomic_load(&c->waiters) > 0) && now() - t0 < 60;)
            usleep(100);
        if (!(atomic_load(&w.started) && atomic_load(&c->waiters) > 0))
            FAIL("round %ld: the waiting thread was not inside ringlet_wait after 60 s", k);
        /* a finalize, counted as a waiter too, held up by that receive */
        pthread_create(&th3, NULL, finalize_thread, &fw);
        for (double t0 = now(); atomic_load(&c->waiters) < 2 && now() - t0 < 60;) usleep(100);
        if (atomic_load(&c->waiters) < 2) FAIL("round %ld: the finalize was not inside after 60 s", k);
        pthread_create(&th2, NULL, wait_thread, &cw);
        for (double t0 = now(); !comm_running(c) && now() - t0 < 60;) usleep(100);
        if (!comm_running(c)) FAIL("round %ld: the all-reduce was not running after 60 s", k);
        double t0 = now();
        ringlet_comm_abort(c);
        ringlet_comm_destroy(c); /* the waiting threads are still inside: destroy must wait for them */
        double t_gone = now() - t0;
        FILE *f = fopen(done, "w");
        if (f) fclose(f);
        pthread_join(th, NULL);
        pthread_join(th2, NULL);
        pthread_join(th3, NULL);
        if (fw.rc == RINGLET_SUCCESS) FAIL("round %ld: a finalize with a receive nobody sent succeeded", k);
        if (w.rc == RINGLET_SUCCESS) FAIL("round %ld: a wait on a receive rank 1 never sent succeeded", k);
        if (cw.rc == RINGLET_SUCCESS) FAIL("round %ld: an all-reduce rank 1 never joined succeeded", k);
        if (t_gone > 10) FAIL("round %ld: abort and destroy took %.1f s", k, t_gone);
        if (!g_failed && k == rounds - 1)
            printf("lifecycle: rank 0: OK %ld rounds of abort and destroy while threads waited on a request, finalized "
                   "and ran an all-reduce: the last took %.1f ms; the wait said %s, the finalize %s, the all-reduce %s\n",
                   rounds, t_gone * 1e3, ringlet_strerror(w.rc), ringlet_strerror(fw.rc), ringlet_strerror(cw.rc));
    }
    if (g_rank != 0 && !g_failed) printf("lifecycle: rank %d: OK (idle in %ld rounds)\n", g_rank, rounds);
    return g_failed ? 1 : 0;
}

typedef struct {
    ringlet_unique_id_t id;
    int rank;
    ringlet_stop_token_t token;
    ringlet_comm_t comm;
    ringlet_result_t rc;
    double t_return;
    char msg[512]; /* the init's error (the last error is per thread) */
} initer_t;
static void *init_thread(void *p) {
    initer_t *a = p;
    a->rc = ringlet_comm_init_rank_stoppable(&a->comm, 2, a->id, a->rank, a->token);
    a->t_return = now();
    snprintf(a->msg, sizeof a->msg, "%s", ringlet_comm_last_error(NULL));
    return NULL;
}

/* One stopped init: fire_early fires the token before the init starts. */
static void stop_one_init(const char *label, int rank, int fire_early) {
    initer_t a = {.rank = rank};
    if (ringlet_get_unique_id(&a.id) || ringlet_stop_token_create(&a.token))
        return (void)FAIL("%s: cannot make a unique id or a token: %s", label, ringlet_comm_last_error(NULL));
    if (fire_early) ringlet_stop_token_fire(a.token);
    pthread_t th;
    double t_start = now();
    pthread_create(&th, NULL, init_thread, &a);
    if (!fire_early) usleep(200 * 1000); /* likely waiting by now; either way init must stop */
    double t0 = fire_early ? t_start : now();
    ringlet_stop_token_fire(a.token);
    pthread_join(th, NULL);
    double dt = a.t_return - t0;
    const char *msg = a.msg;
    if (a.rc != RINGLET_ERR_INVALID_USAGE || a.comm || !strstr(msg, "aborted"))
        FAIL("%s: init returned %d (%s), comm %p; wanted %d and no communicator", label, a.rc, msg, (void *)a.comm,
             RINGLET_ERR_INVALID_USAGE);
    else if (dt > 5)
        FAIL("%s: init returned %.3f s after the token fired", label, dt);
    else
        printf("lifecycle: rank 0: OK %s: init returned %.1f ms after the fire: %s\n", label, dt * 1e3, msg);
    ringlet_stop_token_fire(a.token); /* a second fire, after init ended: no effect */
    ringlet_stop_token_destroy(a.token);
}

/* --group-destroy: a group on two communicators; the one it is done with is destroyed. */
typedef struct {
    ringlet_comm_t w, d;
    ringlet_result_t rc;
} group_waiter_t;
static void *group_thread(void *p) {
    group_waiter_t *g = p;
    int32_t x[16] = {1}, y[16] = {2};
    ringlet_group_start();
    ringlet_allreduce(x, x, 16, RINGLET_INT32, RINGLET_SUM, g->w, NULL);
    ringlet_allreduce(y, y, 16, RINGLET_INT32, RINGLET_SUM, g->d, NULL);
    g->rc = ringlet_group_end();
    return NULL;
}

static int group_destroy(void) {
    ringlet_comm_t w, d = NULL;
    if (ringlet_comm_init_env(&w)) return printf("FAIL: %s\n", ringlet_comm_last_error(NULL)), 1;
    if (ringlet_comm_split(w, 0, g_rank, &d) || !d) return printf("FAIL: split: %s\n", ringlet_comm_last_error(w)), 1;
    char done[160], joined[160];
    snprintf(done, sizeof done, "%s/group-destroy.done", g_dir);
    snprintf(joined, sizeof joined, "%s/group-destroy.joined", g_dir);
    if (g_rank != 0) {
        int32_t x[16] = {5};
        if (ringlet_allreduce(x, x, 16, RINGLET_INT32, RINGLET_SUM, w, NULL) || x[0] != 6)
            FAIL("rank 1: the all-reduce on the world: %s, %d", ringlet_comm_last_error(w), x[0]);
        FILE *f = fopen(joined, "w");
        if (f) fclose(f);
        for (double t0 = now(); access(done, F_OK) != 0 && now() - t0 < 60;) usleep(200);
        ringlet_comm_destroy(d);
        ringlet_comm_destroy(w);
        if (!g_failed) printf("lifecycle: rank 1: OK (joined the world's all-reduce only)\n");
        return g_failed ? 1 : 0;
    }
    group_waiter_t g = {w, d, RINGLET_SUCCESS};
    pthread_t th;
    pthread_create(&th, NULL, group_thread, &g);
    for (double t0 = now(); access(joined, F_OK) != 0 && now() - t0 < 60;) usleep(200);
    double t0 = now();
    ringlet_comm_abort(w);
    ringlet_result_t rc = ringlet_comm_destroy(w);
    double t_w = now() - t0;
    ringlet_comm_abort(d);
    pthread_join(th, NULL);
    ringlet_comm_destroy(d);
    FILE *f = fopen(done, "w");
    if (f) fclose(f);
    if (rc != RINGLET_SUCCESS || t_w > 10)
        FAIL("destroy of the world while a group waited on its copy: %s after %.1f s", ringlet_strerror(rc), t_w);
    if (g.rc == RINGLET_SUCCESS) FAIL("a group with an all-reduce rank 1 never joined succeeded");
    if (!g_failed)
        printf("lifecycle: rank 0: OK the world destroyed in %.1f ms while a group waited on its copy; the group "
               "said %s\n", t_w * 1e3, ringlet_strerror(g.rc));
    return g_failed ? 1 : 0;
}

/* --split-death: rank 2 leaves a split after its exchanges; the others' split must end. */
static int split_death(void) {
    ringlet_comm_t c, sub = NULL;
    if (ringlet_comm_init_env(&c)) return printf("FAIL: %s\n", ringlet_comm_last_error(NULL)), 1;
    if (ringlet_barrier(c, NULL)) return printf("FAIL: barrier: %s\n", ringlet_comm_last_error(c)), 1;
    if (g_rank == 2) {
        /* The split's exchanges (lifecycle.c's ringlet_comm_split): (color, key, rank,
         * 0: its arguments are right), then each rank's id (zeros: not the first of its
         * color); then gone. */
        int32_t mine[4] = {0, 0, 2, 0}, all[12];
        ringlet_unique_id_t id, ids[3];
        memset(&id, 0, sizeof id);
        if (ringlet_allgather(mine, all, 4, RINGLET_INT32, c, NULL) ||
            ringlet_allgather(&id, ids, sizeof id, RINGLET_UINT8, c, NULL))
            return printf("FAIL rank 2: the split's exchanges: %s\n", ringlet_comm_last_error(c)), 1;
        printf("lifecycle: rank 2: OK (left after the split's exchanges)\n");
        fflush(stdout);
        _exit(0);
    }
    double t0 = now();
    ringlet_result_t rc = ringlet_comm_split(c, 0, 0, &sub);
    double dt = now() - t0;
    const char *msg = ringlet_comm_last_error(c);
    if (rc != RINGLET_ERR_REMOTE || sub || !strstr(msg, "rank 2") || dt > 20)
        FAIL("a split whose rank 2 left after its exchanges: %s after %.1f s: %s", ringlet_strerror(rc), dt, msg);
    else
        printf("lifecycle: rank %d: OK a split whose rank 2 left failed after %.3f s: %s\n", g_rank, dt, msg);
    if (sub) ringlet_comm_destroy(sub);
    ringlet_comm_destroy(c);
    return g_failed ? 1 : 0;
}

/* --peer-why: rank 1 aborts and leaves; the others' all-reduce must quote its reason. */
static int peer_says_why(void) {
    ringlet_comm_t c;
    if (ringlet_comm_init_env(&c)) return printf("FAIL: %s\n", ringlet_comm_last_error(NULL)), 1;
    int32_t x[64];
    for (int i = 0; i < 64; i++) x[i] = g_rank * 64 + i;
    if (ringlet_allreduce(x, x, 64, RINGLET_INT32, RINGLET_SUM, c, NULL)) /* every link made */
        return printf("FAIL rank %d: the first all-reduce: %s\n", g_rank, ringlet_comm_last_error(c)), 1;
    if (g_rank == 1) {
        ringlet_comm_abort(c);
        ringlet_comm_destroy(c);
        printf("lifecycle: rank 1: OK (aborted and left)\n");
        return 0;
    }
    double t0 = now();
    ringlet_result_t rc = ringlet_allreduce(x, x, 64, RINGLET_INT32, RINGLET_SUM, c, NULL);
    double dt = now() - t0;
    const char *msg = ringlet_comm_last_error(c);
    if (rc != RINGLET_ERR_REMOTE || !strstr(msg, "rank 1 failed") || !strstr(msg, "it said") ||
        !strstr(msg, "aborted") || dt > 30)
        FAIL("an all-reduce after rank 1 aborted: %s after %.1f s: %s", ringlet_strerror(rc), dt, msg);
    else
        printf("lifecycle: rank %d: OK an all-reduce after rank 1 aborted failed after %.3f s: %s\n", g_rank, dt, msg);
    ringlet_comm_destroy(c);
    return g_failed ? 1 : 0;
}

/* --laggard (4 ranks): on a communicator with an 8 s deadline (made from a unique id sent
 * over a world communicator, so the ranks' start is not in it), rank 2 stays out of the
 * second all-reduce until the others' has failed (it waits for the world's barrier, which
 * they reach after), and then leaves: their error must say that rank 2 has not called it.
 * Rank 0 learns who lags from heartbeats (one a second) and tells it at its next one:
 * about 2 s after the call; 8 s leaves room for a loaded machine's late heartbeats. */
/* --abort-destroying (2 ranks): rank 0's clean destroy waits for rank 1 to leave first
 * (rank 0 leaves last); a watchdog thread aborts it meanwhile. The abort must end that wait
 * (it waited for the rest of RINGLET_TIMEOUT). Rank 1 destroys only once rank 0's abort
 * returned, so rank 0's destroy is in its wait when the abort comes, by construction. */
static void *destroy_thread(void *p) {
    waiter_t *w = p;
    w->destroy_rc = ringlet_comm_destroy(w->c);
    return NULL;
}
static int abort_destroying(void) {
    ringlet_comm_t c;
    if (ringlet_comm_init_env(&c)) return printf("FAIL: %s\n", ringlet_comm_last_error(NULL)), 1;
    char done[160];
    snprintf(done, sizeof done, "%s/abort-destroying", g_dir);
    if (g_rank != 0) {
        for (double t0 = now(); access(done, F_OK) != 0 && now() - t0 < 120;) usleep(1000);
        if (access(done, F_OK) != 0) FAIL("rank 0's abort did not return in 120 s");
        ringlet_comm_destroy(c);
        if (!g_failed) printf("lifecycle: rank %d: OK (destroyed after rank 0's abort)\n", g_rank);
        return g_failed != 0;
    }
    waiter_t w = {.c = c};
    pthread_t th;
    pthread_create(&th, NULL, destroy_thread, &w);
    /* The destroy holds close_mu through its teardown, and waits there for rank 1. */
    while (!pthread_mutex_trylock(&c->close_mu)) {
        pthread_mutex_unlock(&c->close_mu);
        usleep(100);
    }
    double t0 = now(), limit = c->timeout_s / 2;
    ringlet_result_t rc = ringlet_comm_abort(c);
    double t = now() - t0;
    FILE *f = fopen(done, "w");
    if (f) fclose(f);
    pthread_join(th, NULL);
    if (rc) FAIL("abort: %s", ringlet_strerror(rc));
    if (t > limit) FAIL("the abort waited %.1f s for the destroy's wait for rank 1 (RINGLET_TIMEOUT %.0f s)", t, 2 * limit);
    if (w.destroy_rc) FAIL("destroy: %s", ringlet_strerror(w.destroy_rc));
    if (!g_failed) printf("lifecycle: rank 0: OK an abort during the destroy's wait for rank 1 returned in %.1f ms\n", t * 1e3);
    return g_failed != 0;
}

/* --left R (3 ranks): rank R destroys the communicator after a barrier (the one rank
 * whose call was refused, say, which then cleans up); the others' next all-reduce must
 * fail at once with RINGLET_ERR_REMOTE naming rank R as having destroyed it, not wait
 * for its part until RINGLET_TIMEOUT (60 s in the test). With --last L (L != R), rank L
 * calls last: after the third rank's all-reduce failed and it destroyed the communicator
 * too (its file says so), and once rank L could have heard of that (2 s at most; nothing
 * waits for that time to pass: the test is the same, only weaker, on a machine too slow
 * to hear it in time). The third rank destroyed the communicator after a failure that was
 * not its own, so it must not be taken for a rank that died (nor, rank 0, for the cause):
 * rank L's all-reduce still names rank R. --other O (any number of ranks) names that
 * third rank, and every rank but R and O calls last. --abort: rank O aborts the
 * communicator before its destroy, as a program does after an error (it was then taken
 * for a rank that died). --group: the ranks calling last run a group of two all-reduces,
 * so that their count of calls passes rank O's too (they named rank O, the lower rank,
 * which left after more calls than rank R). */
static int left_rank(int who, int other, int abort_other, int group) {
    ringlet_comm_t c;
    if (ringlet_comm_init_env(&c)) return printf("FAIL: %s\n", ringlet_comm_last_error(NULL)), 1;
    ringlet_result_t rc = ringlet_barrier(c, NULL);
    if (rc) FAIL("barrier: %s", ringlet_comm_last_error(c));
    if (g_rank == who) {
        if ((rc = ringlet_comm_destroy(c))) FAIL("destroy: %s", ringlet_strerror(rc));
        if (!g_failed) printf("lifecycle: rank %d: OK destroyed the communicator after the barrier\n", g_rank);
        return g_failed != 0;
    }
    char done[160];
    snprintf(done, sizeof done, "%s/left-other-done", g_dir);
    int last = other >= 0 && g_rank != other;
    if (last) {
        for (double t0 = now(); access(done, F_OK) != 0 && now() - t0 < 30;) usleep(1000);
        for (double t0 = now(); ringlet_comm_get_async_error(c) == RINGLET_SUCCESS && now() - t0 < 2;) usleep(1000);
    }
    int32_t v[64], out[64], out2[64];
    for (int i = 0; i < 64; i++) v[i] = g_rank * 1000 + i;
    double t0 = now();
    if (last && group) {
        ringlet_group_start();
        ringlet_allreduce(v, out, 64, RINGLET_INT32, RINGLET_SUM, c, NULL);
        ringlet_allreduce(v, out2, 64, RINGLET_INT32, RINGLET_SUM, c, NULL);
        rc = ringlet_group_end();
    } else {
        rc = ringlet_allreduce(v, out, 64, RINGLET_INT32, RINGLET_SUM, c, NULL);
    }
    double t = now() - t0;
    char want[64];
    snprintf(want, sizeof want, "rank %d destroyed the communicator", who);
    const char *msg = ringlet_comm_last_error(c);
    if (rc != RINGLET_ERR_REMOTE || !strstr(msg, want))
        FAIL("%s after rank %d's destroy: %s after %.1f s: %s", last && group ? "a group of two all-reduces" : "an all-reduce",
             who, ringlet_strerror(rc), t, msg);
    if (g_rank == other && abort_other) ringlet_comm_abort(c);
    ringlet_comm_destroy(c);
    if (g_rank == other) {
        FILE *f = fopen(done, "w");
        if (f) fclose(f);
    }
    if (!g_failed)
        printf("lifecycle: rank %d: OK %s rank %d left failed in %.1f ms: %s\n", g_rank,
               last && group ? "a group of two all-reduces" : "an all-reduce", who, t * 1e3, msg);
    return g_failed != 0;
}

static int laggard(void) {
    ringlet_comm_t world, c = NULL;
    if (ringlet_comm_init_env(&world)) return printf("FAIL: %s\n", ringlet_comm_last_error(NULL)), 1;
    ringlet_unique_id_t id;
    ringlet_result_t rc = g_rank == 0 ? ringlet_get_unique_id(&id) : RINGLET_SUCCESS;
    if (!rc) rc = ringlet_broadcast(&id, &id, sizeof id, RINGLET_UINT8, 0, world, NULL);
    ringlet_comm_config_t cfg = RINGLET_COMM_CONFIG_INIT;
    cfg.timeout_s = 8;
    if (!rc) rc = ringlet_comm_init_rank_config(&c, 4, id, g_rank, &cfg);
    if (rc) return printf("FAIL rank %d: a communicator with an 8 s deadline: %s\n", g_rank, ringlet_comm_last_error(NULL)), 1;
    int32_t x[64];
    for (int i = 0; i < 64; i++) x[i] = g_rank * 64 + i;
    if (ringlet_allreduce(x, x, 64, RINGLET_INT32, RINGLET_SUM, c, NULL)) /* every link made */
        return printf("FAIL rank %d: the first all-reduce: %s\n", g_rank, ringlet_comm_last_error(c)), 1;
    if (g_rank != 2) {
        rc = ringlet_allreduce(x, x, 64, RINGLET_INT32, RINGLET_SUM, c, NULL);
        const char *msg = ringlet_comm_last_error(c);
        if (rc == RINGLET_SUCCESS || !strstr(msg, "rank 2 has not called this collective"))
            FAIL("the all-reduce rank 2 stayed out of: %s: %s", ringlet_strerror(rc), msg);
        else
            printf("lifecycle: rank %d: OK the all-reduce rank 2 stayed out of: %s\n", g_rank, msg);
    }
    if (ringlet_barrier(world, NULL)) FAIL("the world's barrier: %s", ringlet_comm_last_error(world));
    else if (g_rank == 2) printf("lifecycle: rank 2: OK stayed out\n");
    ringlet_comm_destroy(c);
    ringlet_comm_destroy(world);
    return g_failed ? 1 : 0;
}

int main(int argc, char **argv) {
    long ncycles = 0, naborts = 0, abort_destroy = 0;
    int abort_thread = 0, late_peer = 0, peer_why = 0, forks = 0, destroy_after = 0, left_who = 0, left_last = -1;
    int left_other = -1, left_abort = 0, left_group = 0;
    if (argc == 2 && !strcmp(argv[1], "--abort-init")) {
        setvbuf(stdout, NULL, _IOLBF, 0);
        stop_one_init("stop a rank 1 whose rank 0 never answers", 1, 0);
        stop_one_init("stop a rank 0 whose rank 1 never joins", 0, 0);
        stop_one_init("a token fired before init", 0, 1);
        /* An init refused (no network interface; one rank, so that no peer is waited
         * for): the token must not be left pointing into the freed communicator (a fire
         * after it wrote there: address sanitizer). */
        ringlet_stop_token_t tok = NULL;
        ringlet_unique_id_t id;
        if (ringlet_get_unique_id(&id) || ringlet_stop_token_create(&tok)) {
            FAIL("refused init: no unique id or token: %s", ringlet_comm_last_error(NULL));
        } else {
            setenv("RINGLET_SOCKET_IFNAME", "nosuch0", 1);
            ringlet_comm_t c = NULL;
            ringlet_result_t rc = ringlet_comm_init_rank_stoppable(&c, 1, id, 0, tok);
            unsetenv("RINGLET_SOCKET_IFNAME");
            if (rc == RINGLET_SUCCESS || c) FAIL("init with RINGLET_SOCKET_IFNAME=nosuch0 succeeded");
            else if (!strstr(ringlet_comm_last_error(NULL), "no network interface matches"))
                FAIL("init with RINGLET_SOCKET_IFNAME=nosuch0: %s", ringlet_comm_last_error(NULL));
            ringlet_stop_token_fire(tok);
            ringlet_stop_token_destroy(tok);
            printf("lifecycle: rank 0: OK a refused init, then its token fired: %s\n", ringlet_strerror(rc));
        }
        return g_failed ? 1 : 0;
    }
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--cycles") && i + 1 < argc) ncycles = atol(argv[++i]);
        else if (!strcmp(argv[i], "--aborts") && i + 1 < argc) naborts = atol(argv[++i]);
        else if (!strcmp(argv[i], "--abort-thread")) abort_thread = 1;
        else if (!strcmp(argv[i], "--destroy-after")) destroy_after = 1;
        else if (!strcmp(argv[i], "--abort-destroy") && i + 1 < argc) abort_destroy = atol(argv[++i]);
        else if (!strcmp(argv[i], "--late-peer")) late_peer = 1;
        else if (!strcmp(argv[i], "--late-peer-test")) late_peer = 2;
        else if (!strcmp(argv[i], "--peer-why")) peer_why = 1;
        else if (!strcmp(argv[i], "--laggard")) peer_why = 2;
        else if (!strcmp(argv[i], "--split-death")) peer_why = 3;
        else if (!strcmp(argv[i], "--group-destroy")) peer_why = 4;
        else if (!strcmp(argv[i], "--abort-destroying")) peer_why = 5;
        else if (!strcmp(argv[i], "--left") && i + 1 < argc) peer_why = 6, left_who = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--last") && i + 1 < argc) left_last = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--other") && i + 1 < argc) left_other = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--abort")) left_abort = 1;
        else if (!strcmp(argv[i], "--group")) left_group = 1;
        else if (!strcmp(argv[i], "--fork")) forks = 1;
        else if (!strcmp(argv[i], "--fork-kill")) forks = 2;
        else if (!strcmp(argv[i], "--count") && i + 1 < argc) g_count = atol(argv[++i]);
        else if (!strcmp(argv[i], "--reduce-workers") && i + 1 < argc) g_workers = atol(argv[++i]);
        else if (!strcmp(argv[i], "--memory") && i + 1 < argc) {
            if (!strcmp(argv[++i], "device") && !(D = rl_device()))
                return printf("FAIL: no device backend: %s\n", rl_device_unavailable()), 1;
        } else {
            return fprintf(stderr, "usage: lifecycle --cycles N --aborts M [--memory host|device] [--count C] "
                                   "[--reduce-workers W] | --abort-thread | --abort-destroy R | --late-peer [--count C] | --late-peer-test | --peer-why | --laggard | --split-death | --group-destroy | --abort-destroying | --left R [--last L | --other O] [--abort] [--group] | --fork | "
                                   "--fork-kill | "
                                   "--abort-init\n"),
                   2;
        }
    }
    if (g_count < 1) return fprintf(stderr, "lifecycle: --count must be at least 1\n"), 2;
    g_rank = atoi(getenv("RANK") ? getenv("RANK") : "0");
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (getenv("LIFECYCLE_DIR")) snprintf(g_dir, sizeof g_dir, "%s", getenv("LIFECYCLE_DIR"));
    else snprintf(g_dir, sizeof g_dir, "/tmp/ringlet-lifecycle-%s", getenv("MASTER_PORT") ? getenv("MASTER_PORT") : "0");
    mkdir(g_dir, 0700);
    if (abort_destroy) return abort_destroy_rounds(abort_destroy);
    if (peer_why == 3) return split_death();
    if (peer_why == 4) return group_destroy();
    if (peer_why == 5) return abort_destroying();
    if (peer_why == 6) {
        if (left_other < 0 && left_last >= 0 && left_last != left_who) left_other = 3 - left_who - left_last;
        return left_rank(left_who, left_other == left_who ? -1 : left_other, left_abort, left_group);
    }
    if (peer_why == 2) return laggard();
    if (peer_why) return peer_says_why();
    if (forks == 2) return fork_then_killed();
    if (forks) return fork_child_calls() ? 1 : 0;
    if (abort_thread || late_peer) {
        ringlet_comm_t c;
        if (ringlet_comm_init_env(&c)) return printf("FAIL: %s\n", ringlet_comm_last_error(NULL)), 1;
        /* rank 0's word that it is done: in LIFECYCLE_DIR (lifecycle.sh's temporary folder) */
        char path[600];
        if (getenv("LIFECYCLE_DIR")) {
            mkdir(getenv("LIFECYCLE_DIR"), 0700);
            snprintf(path, sizeof path, "%s/peer", getenv("LIFECYCLE_DIR"));
        } else {
            snprintf(path, sizeof path, "/tmp/ringlet-lifecycle-%s", getenv("MASTER_PORT") ? getenv("MASTER_PORT") : "0");
        }
        int P = 0;
        ringlet_comm_size(c, &P);
        if (g_rank != 0) {
            /* Never joins: waits (60 s at most) until rank 0 says it is done. */
            snprintf(path + strlen(path), sizeof path - strlen(path), ".%d", g_rank);
            for (double t0 = now(); access(path, F_OK) != 0 && now() - t0 < 60;) usleep(1000);
            unlink(path);
            ringlet_comm_abort(c);
            ringlet_comm_destroy(c);
            printf("lifecycle: rank %d: OK (the idle side)\n", g_rank);
            return 0;
        }
        if (late_peer == 2) {
            /* A receive rank 1 never sends, only polled (as torch's is_completed polls). */
            int32_t v = 0;
            ringlet_request_t q = NULL;
            double t0 = now();
            ringlet_result_t rc = ringlet_irecv(&v, 1, RINGLET_INT32, 1, c, NULL, &q);
            int done = 0;
            while (!rc && !done && now() - t0 < 30) {
                rc = ringlet_test(&q, &done);
                if (!done) usleep(1000);
            }
            double dt = now() - t0;
            const char *msg = ringlet_comm_last_error(c);
            if (!done || rc != RINGLET_ERR_TIMEOUT || !strstr(msg, "rank 1") || !strstr(msg, "recv"))
                FAIL("a receive rank 1 never sent, polled with ringlet_test: done %d, %s after %.1f s: %s", done,
                     ringlet_strerror(rc), dt, msg);
            else
                printf("lifecycle: rank 0: OK a receive rank 1 never sent, polled, failed after %.1f s: %s\n", dt, msg);
        } else if (late_peer) {
            int32_t *x = calloc((size_t)g_count, sizeof *x);
            for (long i = 0; x && i < g_count; i++) x[i] = (int32_t)(i * 7919 % 1001);
            double t0 = now();
            ringlet_result_t rc = x ? ringlet_allreduce(x, x, (size_t)g_count, RINGLET_INT32, RINGLET_SUM, c, NULL)
                                    : RINGLET_ERR_SYSTEM;
            double dt = now() - t0;
            const char *msg = ringlet_comm_last_error(c);
            if (rc != RINGLET_ERR_TIMEOUT || !strstr(msg, "rank 1") || !strstr(msg, "allreduce") || dt > 30)
                FAIL("an all-reduce of %ld int32 rank 1 never joined: %s after %.1f s: %s", g_count, ringlet_strerror(rc),
                     dt, msg);
            else
                printf("lifecycle: rank 0: OK an all-reduce of %ld int32 rank 1 never joined failed after %.1f s: %s\n",
                       g_count, dt, msg);
            free(x);
        } else {
            abort_waiter(c, P, destroy_after && P == 2);
        }
        if (!(destroy_after && P == 2)) ringlet_comm_destroy(c);
        size_t at = strlen(path);
        for (int r = 1; r < P; r++) {
            snprintf(path + at, sizeof path - at, ".%d", r);
            FILE *f = fopen(path, "w");
            if (f) fclose(f);
        }
        return g_failed ? 1 : 0;
    }
    cycle(0, 0); /* warm-up: what stays for the process's life (the device backend, caches) */
    usage_t a = usage();
    double t0 = now();
    for (long k = 1; k <= ncycles && !g_failed; k++) cycle(0, (int)k);
    for (long k = 1; k <= naborts && !g_failed; k++) cycle(1, (int)(ncycles + k));
    /* An abort does not wait for peers: GPU memory a peer still had mapped (cuda_ipc's
     * slots) is freed by a later init or end. One clean cycle, after every peer's last
     * abort (its init needs theirs), frees what the aborts left. */
    if (naborts && !g_failed) cycle(0, (int)(ncycles + naborts + 1));
    usage_t b = usage();
    /* A joined thread may still be listed a moment (pthread_join returns when the kernel
     * clears its id, before the task leaves /proc/self/task): a leaked one never goes. */
    for (double t1 = now(); b.threads != a.threads && now() - t1 < 5; b.threads = usage().threads) usleep(1000);
    /* Under a sanitizer its allocator maps and keeps memory of its own (quarantine):
     * there LeakSanitizer checks the memory, at exit. */
    int sanitized = getenv("LIFECYCLE_SANITIZED") != NULL;
    if (sanitized) b.maps = a.maps, b.rss = a.rss;
    if (b.fds != a.fds || b.threads != a.threads || b.shm != a.shm || b.maps != a.maps || b.rss - a.rss > 16 * 1024)
        FAIL("after %ld init/destroy and %ld init/abort cycles: fds %ld -> %ld, threads %ld -> %ld, /dev/shm %ld -> %ld, "
             "mappings %ld -> %ld, RSS %ld -> %ld KiB",
             ncycles, naborts, a.fds, b.fds, a.threads, b.threads, a.shm, b.shm, a.maps, b.maps, a.rss, b.rss);
    else
        printf("lifecycle: rank %d: OK %ld init/destroy and %ld init/abort/destroy cycles%s in %.1f s: fds %ld, threads "
               "%ld, /dev/shm %ld, mappings %ld (all unchanged), RSS %ld -> %ld KiB\n",
               g_rank, ncycles, naborts, D ? " (device memory)" : "", now() - t0, b.fds, b.threads, b.shm, b.maps,
               a.rss, b.rss);
    if (sanitized && !g_failed) printf("lifecycle: rank %d: (sanitizer build: mappings and RSS left to LeakSanitizer)\n", g_rank);
    return g_failed ? 1 : 0;
}
