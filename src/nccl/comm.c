/* The NCCL layer's communicators: versions and ids, init (blocking or not, one rank or
 * all of them in one process), split, finalize, destroy, abort, queries, errors, memory
 * and registration; the calls ringlet does not provide answer ncclInvalidUsage. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "shim.h"

static _Thread_local char t_err[SHIM_MSG_MAX];
/* The process's last error, as NCCL's ncclGetLastError(NULL) answers from any thread
 * (PyTorch's watchdog asks from its own after ncclCommGetAsyncError). */
static char g_last_err[SHIM_MSG_MAX];
static pthread_mutex_t g_last_mu = PTHREAD_MUTEX_INITIALIZER;

static void note_last(const char *msg) {
    pthread_mutex_lock(&g_last_mu);
    snprintf(g_last_err, sizeof g_last_err, "%s", msg);
    pthread_mutex_unlock(&g_last_mu);
}
static void shim_warn(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* ---- results and messages ---- */

ncclResult_t shim_result(ringlet_result_t rc) {
    switch (rc) {
    case RINGLET_SUCCESS: return ncclSuccess;
    case RINGLET_ERR_CUDA: return ncclUnhandledCudaError;
    case RINGLET_ERR_SYSTEM: return ncclSystemError;
    case RINGLET_ERR_INVALID_ARGUMENT: return ncclInvalidArgument;
    case RINGLET_ERR_INVALID_USAGE: return ncclInvalidUsage;
    case RINGLET_ERR_REMOTE: return ncclRemoteError;
    case RINGLET_IN_PROGRESS: return ncclInProgress;
    case RINGLET_ERR_TIMEOUT: return ncclRemoteError; /* a peer that never answered */
    default: return ncclInternalError;
    }
}

ncclResult_t shim_fail(struct ncclComm *c, ncclResult_t code, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(t_err, sizeof t_err, fmt, ap);
    va_end(ap);
    note_last(t_err);
    if (c) {
        pthread_mutex_lock(&c->mu);
        snprintf(c->err, sizeof c->err, "%s", t_err);
        pthread_mutex_unlock(&c->mu);
    }
    shim_warn("error %d (%s): %s", (int)code, ncclGetErrorString(code), t_err);
    return code;
}

ncclResult_t shim_check(struct ncclComm *c, ringlet_result_t rc) {
    if (rc == RINGLET_SUCCESS) return ncclSuccess;
    /* ringlet keeps the calling thread's last message. */
    return shim_fail(c, shim_result(rc), "%s", ringlet_comm_last_error(NULL));
}

/* 0: quiet, 1: warnings, 2: info (NCCL_DEBUG, or ringlet's own RINGLET_DEBUG). */
static int shim_level(void) {
    static atomic_int level = -1; /* every thread computes the same value */
    int on = atomic_load_explicit(&level, memory_order_relaxed);
    if (on < 0) {
        const char *v[2] = {getenv("NCCL_DEBUG"), getenv("RINGLET_DEBUG")};
        on = 0;
        for (int i = 0; i < 2; i++) {
            if (!v[i]) continue;
            if (!strcasecmp(v[i], "INFO") || !strcasecmp(v[i], "TRACE")) on = 2;
            else if (!strcasecmp(v[i], "WARN") && on < 1) on = 1;
        }
        atomic_store_explicit(&level, on, memory_order_relaxed);
    }
    return on;
}

static void shim_log(int level, const char *fmt, va_list ap) {
    if (shim_level() < level) return;
    char line[SHIM_MSG_MAX + 64];
    vsnprintf(line, sizeof line, fmt, ap);
    fprintf(stderr, "NCCL %s [ringlet pid %d] %s\n", level > 1 ? "INFO" : "WARN", (int)getpid(), line);
}

void shim_info(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    shim_log(2, fmt, ap);
    va_end(ap);
}

static void shim_warn(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    shim_log(1, fmt, ap);
    va_end(ap);
}

ncclResult_t ncclGetVersion(int *version) {
    if (!version) return shim_fail(NULL, ncclInvalidArgument, "ncclGetVersion: version is NULL");
    *version = NCCL_VERSION_CODE;
    return ncclSuccess;
}

const char *ncclGetErrorString(ncclResult_t r) {
    switch (r) {
    case ncclSuccess: return "no error";
    case ncclUnhandledCudaError: return "unhandled cuda error (run with NCCL_DEBUG=INFO for details)";
    case ncclSystemError: return "unhandled system error (run with NCCL_DEBUG=INFO for details)";
    case ncclInternalError: return "internal error - please report this issue to the ringlet developers";
    case ncclInvalidArgument: return "invalid argument (run with NCCL_DEBUG=WARN for details)";
    case ncclInvalidUsage: return "invalid usage (run with NCCL_DEBUG=WARN for details)";
    case ncclRemoteError: return "remote process exited or there was a network error (or a deadline passed)";
    case ncclInProgress: return "NCCL operation in progress";
    default: return "unknown result code";
    }
}

/* The process's latest error, whichever communicator (or none) it was of, as NCCL answers
 * (the comm argument is not read: a communicator's older message must not hide a newer
 * failure, and a forked child must not touch a parent's lock); a copy for this thread. */
const char *ncclGetLastError(ncclComm_t c) {
    (void)c;
    static _Thread_local char copy[SHIM_MSG_MAX];
    pthread_mutex_lock(&g_last_mu);
    snprintf(copy, sizeof copy, "%s", g_last_err);
    pthread_mutex_unlock(&g_last_mu);
    return copy;
}

void ncclResetDebugInit(void) {}

ncclResult_t ncclGetUniqueId(ncclUniqueId *id) {
    if (!id) return shim_fail(NULL, ncclInvalidArgument, "ncclGetUniqueId: uniqueId is NULL");
    _Static_assert(sizeof(ncclUniqueId) == sizeof(ringlet_unique_id_t), "unique id sizes differ");
    ringlet_unique_id_t rid;
    ringlet_result_t rc = ringlet_get_unique_id(&rid);
    if (rc) return shim_check(NULL, rc);
    memcpy(id, &rid, sizeof *id);
    return ncclSuccess;
}

/* ---- configs ---- */

/* Blocking or not: inherited (1 for a new communicator), then cfg's field where its size
 * covers it, then NCCL_COMM_BLOCKING. */
static ncclResult_t read_config(const ncclConfig_t *cfg, const char *fn, int inherited, int *blocking) {
    *blocking = inherited;
    if (cfg) {
        if (cfg->magic != 0xcafebeef)
            return shim_fail(NULL, ncclInvalidArgument,
                             "%s: config was not set up with NCCL_CONFIG_INITIALIZER (magic 0x%x)", fn, cfg->magic);
        if (cfg->size >= offsetof(ncclConfig_t, blocking) + sizeof(int) && cfg->blocking != NCCL_CONFIG_UNDEF_INT) {
            if (cfg->blocking != 0 && cfg->blocking != 1)
                return shim_fail(NULL, ncclInvalidArgument, "%s: config.blocking is %d (0 or 1)", fn, cfg->blocking);
            *blocking = cfg->blocking;
        }
    }
    /* As NCCL: NCCL_COMM_BLOCKING=0 or 1 overrides the config (any other value is ignored). */
    const char *env = getenv("NCCL_COMM_BLOCKING");
    if (env && (!strcmp(env, "0") || !strcmp(env, "1"))) *blocking = *env == '1';
    return ncclSuccess;
}

/* ---- communicators ---- */

/* Forks of this process since the first communicator (a child sees one more than its
 * parent did; the layer uses ringlet.h alone, so it counts its own). */
static atomic_uint g_forks;
static pthread_once_t g_forks_once = PTHREAD_ONCE_INIT;
static void fork_child(void) { atomic_fetch_add_explicit(&g_forks, 1, memory_order_relaxed); }
static void watch_forks(void) { pthread_atfork(NULL, NULL, fork_child); }
static unsigned shim_fork_generation(void) {
    pthread_once(&g_forks_once, watch_forks);
    return atomic_load_explicit(&g_forks, memory_order_relaxed);
}

/* group_held, release_later, and the set of communicators made in a group: another thread
 * may destroy or abort a handle while the ncclGroupEnd of the thread that made it runs.
 * Also the list of live handles (g_live), and their sets and destroying. */
static pthread_mutex_t g_group_mu = PTHREAD_MUTEX_INITIALIZER;
static struct ncclComm *g_live;

static struct ncclComm *comm_new(int nranks, int rank, int blocking) {
    struct ncclComm *c = calloc(1, sizeof *c);
    if (!c) return NULL;
    c->magic = SHIM_MAGIC;
    c->nranks = nranks;
    c->rank = rank;
    c->blocking = blocking;
    c->device = -1;
    c->init_joined = 1;
    c->fork_gen = shim_fork_generation();
    atomic_init(&c->init_done, 1);
    pthread_mutex_init(&c->mu, NULL);
    pthread_mutex_init(&c->join_mu, NULL);
    pthread_cond_init(&c->splits_cv, NULL);
    if (ringlet_stop_token_create(&c->init_stop) != RINGLET_SUCCESS) {
        pthread_mutex_destroy(&c->mu);
        pthread_mutex_destroy(&c->join_mu);
        pthread_cond_destroy(&c->splits_cv);
        free(c);
        return NULL;
    }
    pthread_mutex_lock(&g_group_mu);
    c->live_next = g_live;
    if (g_live) g_live->live_prev = c;
    g_live = c;
    pthread_mutex_unlock(&g_group_mu);
    return c;
}

/* FNV-1a over bytes, then mixed: a communicator's key (shim.h). */
static uint64_t key_of(const void *p, size_t n, uint64_t h) {
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 0x100000001b3ull;
    h ^= h >> 31;
    return h * 0x9E3779B97F4A7C15ull;
}
#define KEY_SEED 0xcbf29ce484222325ull

/* A split's child: the same key on each of its ranks (every rank of the parent splits it
 * the same number of times). */
static uint64_t child_key(struct ncclComm *parent, int color) {
    uint64_t v[3] = {parent->key, (uint64_t)(uint32_t)color, parent->nsplits++};
    return key_of(v, sizeof v, KEY_SEED);
}

struct shim_reg; /* below: ncclCommRegister */
static void regs_free(struct ncclComm *c);

static void comm_free(struct ncclComm *c) {
    pthread_mutex_lock(&g_group_mu);
    if (c->live_prev) c->live_prev->live_next = c->live_next;
    else g_live = c->live_next;
    if (c->live_next) c->live_next->live_prev = c->live_prev;
    pthread_mutex_unlock(&g_group_mu);
    regs_free(c);
    c->magic = 0;
    pthread_mutex_destroy(&c->mu);
    pthread_mutex_destroy(&c->join_mu);
    pthread_cond_destroy(&c->splits_cv);
    ringlet_stop_token_destroy(c->init_stop);
    free(c->pending);
    free(c);
}

typedef struct {
    struct ncclComm *c;
    ringlet_unique_id_t id;
    int device; /* made current first (-1: leave it) */
} init_arg;

static void init_run(init_arg *a) {
    struct ncclComm *c = a->c;
    ringlet_result_t rc = RINGLET_SUCCESS;
    if (a->device >= 0) rc = ringlet_set_device(a->device);
    if (!rc) rc = ringlet_comm_init_rank_stoppable(&c->rc, c->nranks, a->id, c->rank, c->init_stop);
    if (!rc) ringlet_comm_device(c->rc, &c->device);
    c->init_rc = shim_check(c, rc);
    if (!rc) shim_info("rank %d of %d: communicator up on ringlet %s (device %d, %s)", c->rank, c->nranks,
                       ringlet_version(), c->device, c->blocking ? "blocking" : "non-blocking");
    atomic_store(&c->init_done, 1);
}

static void *init_thread(void *p) {
    init_run(p);
    free(p);
    return NULL;
}

static void *init_thread_keep(void *p) {
    init_run(p);
    return NULL;
}

/* Joins a non-blocking init's thread once, whichever thread asks first (a framework's
 * watchdog may poll ncclCommGetAsyncError while another thread issues calls). */
static void join_init(struct ncclComm *c) {
    pthread_mutex_lock(&c->join_mu);
    if (!c->init_joined) {
        pthread_join(c->init_thread, NULL);
        c->init_joined = 1;
    }
    pthread_mutex_unlock(&c->join_mu);
}

/* In a child forked after c was made: c's threads and locks are the parent's (an init
 * thread to join is not there), so nothing of c is touched, not even its lock. */
static ncclResult_t comm_forked(struct ncclComm *c, const char *fn) {
    if (shim_fork_generation() == c->fork_gen) return ncclSuccess;
    return shim_fail(NULL, ncclInvalidUsage, "%s: this process was forked after the communicator was made; it stays "
                                             "with the parent (make a new one in the child)",
                     fn);
}

/* Waits for c's splits running outside a group (split_async): its calls, the next split
 * included, come after them, in the same order on every rank. No deadline of its own: the
 * splits have ringlet's (RINGLET_TIMEOUT). */
static void wait_splits(struct ncclComm *c) {
    pthread_mutex_lock(&c->mu);
    while (c->splits_running > 0) pthread_cond_wait(&c->splits_cv, &c->mu);
    pthread_mutex_unlock(&c->mu);
}

ncclResult_t shim_ready(struct ncclComm *c, const char *fn) {
    if (!c) return shim_fail(NULL, ncclInvalidArgument, "%s: comm is NULL", fn);
    if (c->magic != SHIM_MAGIC) return shim_fail(NULL, ncclInvalidArgument, "%s: comm is not a live communicator", fn);
    ncclResult_t forked = comm_forked(c, fn);
    if (forked) return forked;
    join_init(c); /* a call on a communicator whose non-blocking init still runs waits for it */
    wait_splits(c);
    if (c->init_rc != ncclSuccess || !c->rc) {
        /* the init's own code, as NCCL answers; said for this thread only: c keeps the
         * init's message (ncclGetLastError(c)) rather than one more prefix per call */
        ncclResult_t code = c->init_rc != ncclSuccess && c->init_rc != ncclInProgress ? c->init_rc : ncclInvalidUsage;
        return shim_fail(NULL, code, "%s: the communicator's init failed: %s", fn, c->err);
    }
    return ncclSuccess;
}

/* Inits and splits called inside a group on this thread: each runs on a thread of its own
 * from the call on (one thread making several ranks must not wait in the first for the
 * others); ncclGroupEnd waits for the blocking inits and for every split
 * (shim_group_inits_end). */
static _Thread_local struct {
    struct ncclComm **c;
    int n, cap;
} t_group_inits;

static int group_init_add(struct ncclComm *c) {
    if (t_group_inits.n == t_group_inits.cap) {
        int cap = t_group_inits.cap ? 2 * t_group_inits.cap : 8;
        struct ncclComm **m = realloc(t_group_inits.c, sizeof *m * (size_t)cap);
        if (!m) return -1;
        t_group_inits.c = m;
        t_group_inits.cap = cap;
    }
    t_group_inits.c[t_group_inits.n++] = c;
    c->group_held = 1; /* not shared yet: the handle goes to the caller after this */
    return 0;
}


/* Starts c's init or split on a thread of its own (fn(a)), on the caller's current device
 * (into *device, a's field); on failure frees a and c (and takes c out of this thread's
 * group: the last one added). */
static int start_init_thread(struct ncclComm *c, void *(*fn)(void *), void *a, int *device, int grouped) {
    ringlet_get_device(device);
    atomic_store(&c->init_done, 0);
    c->init_joined = 0;
    if (pthread_create(&c->init_thread, NULL, fn, a) == 0) return 0;
    if (grouped) t_group_inits.n--;
    free(a);
    comm_free(c);
    return -1;
}

static ncclResult_t init_rank(ncclComm_t *out, int nranks, const ncclUniqueId *id, int rank, int blocking,
                              const char *fn) {
    if (!out) return shim_fail(NULL, ncclInvalidArgument, "%s: comm is NULL", fn);
    *out = NULL;
    if (nranks < 1 || rank < 0 || rank >= nranks)
        return shim_fail(NULL, ncclInvalidArgument, "%s: rank %d of %d ranks is out of range", fn, rank, nranks);
    struct ncclComm *c = comm_new(nranks, rank, blocking);
    init_arg *a = calloc(1, sizeof *a);
    if (!c || !a) {
        free(a);
        if (c) comm_free(c);
        return shim_fail(NULL, ncclSystemError, "%s: out of memory", fn);
    }
    a->c = c;
    memcpy(&a->id, id, sizeof a->id);
    a->device = -1;
    c->key = key_of(id, sizeof *id, KEY_SEED);
    int grouped = shim_group_depth() > 0;
    if (grouped && group_init_add(c)) {
        free(a);
        comm_free(c);
        return shim_fail(NULL, ncclSystemError, "%s: out of memory", fn);
    }
    if (blocking && !grouped) {
        init_run(a);
        free(a);
        if (c->init_rc != ncclSuccess) {
            ncclResult_t rc = c->init_rc;
            comm_free(c);
            return rc;
        }
        *out = c;
        return ncclSuccess;
    }
    /* Non-blocking, or in a group: the init runs on a thread of its own, on the caller's
     * device. */
    if (start_init_thread(c, init_thread, a, &a->device, grouped))
        return shim_fail(NULL, ncclSystemError, "%s: cannot start the init thread", fn);
    *out = c;
    /* as NCCL: in a group, ncclGroupEnd says ncclInProgress for the non-blocking ones */
    return blocking || grouped ? ncclSuccess : ncclInProgress;
}

/* A refused init inside a group spoils it (shim_group_spoil). */
ncclResult_t ncclCommInitRankConfig(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank, ncclConfig_t *config) {
    if (comm) *comm = NULL; /* also when the config is refused: a caller may destroy what it got */
    int blocking;
    ncclResult_t rc = read_config(config, "ncclCommInitRankConfig", 1, &blocking);
    if (rc) return shim_group_spoil(rc);
    return shim_group_spoil(init_rank(comm, nranks, &id, rank, blocking, "ncclCommInitRankConfig"));
}

ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank) {
    if (comm) *comm = NULL;
    int blocking;
    ncclResult_t rc = read_config(NULL, "ncclCommInitRank", 1, &blocking); /* NCCL_COMM_BLOCKING */
    return shim_group_spoil(rc ? rc : init_rank(comm, nranks, &id, rank, blocking, "ncclCommInitRank"));
}

/* ringlet's id names the rank-0 process and its job secret: one id is enough, so the
 * first of commIds is used (every rank holds it). The others were made by root ranks
 * (PyTorch: one per 128 ranks) that no init will use: this process's own are given back,
 * or each group would keep a listening socket open at each of those ranks, and the 65th
 * ncclGetUniqueId there would fail. */
ncclResult_t ncclCommInitRankScalable(ncclComm_t *comm, int nranks, int rank, int nId, ncclUniqueId *ids,
                                      ncclConfig_t *config) {
    if (comm) *comm = NULL;
    if (nId < 1 || !ids)
        return shim_group_spoil(shim_fail(NULL, ncclInvalidArgument,
                                          "ncclCommInitRankScalable: %d ids at %p (at least one)", nId, (void *)ids));
    int blocking;
    ncclResult_t rc = read_config(config, "ncclCommInitRankScalable", 1, &blocking);
    if (rc) return shim_group_spoil(rc);
    for (int i = 1; i < nId; i++) {
        if (!memcmp(&ids[i], &ids[0], sizeof ids[0])) continue; /* the id in use, given twice */
        ringlet_unique_id_t rid;
        memcpy(&rid, &ids[i], sizeof rid);
        (void)ringlet_unique_id_release(&rid);
    }
    return shim_group_spoil(init_rank(comm, nranks, &ids[0], rank, blocking, "ncclCommInitRankScalable"));
}

/* The communicators of one ncclCommInitAll: ringlet's destroy is collective, so they are
 * destroyed together, once the program has destroyed (or aborted) every one of them. */
struct initall_set {
    pthread_mutex_t mu;
    int n, left;
    struct ncclComm **members;
};

static void *destroy_thread(void *p) {
    struct ncclComm *c = p;
    if (c->rc) ringlet_comm_destroy(c->rc);
    c->rc = NULL;
    return NULL;
}

static void set_release(struct ncclComm *c) {
    struct initall_set *s = c->set;
    pthread_mutex_lock(&s->mu);
    int last = --s->left == 0;
    pthread_mutex_unlock(&s->mu);
    if (!last) return;
    pthread_t *th = calloc((size_t)s->n, sizeof *th);
    for (int i = 0; i < s->n; i++)
        if (!th || pthread_create(&th[i], NULL, destroy_thread, s->members[i]) != 0) {
            if (th) th[i] = 0;
            destroy_thread(s->members[i]); /* alone: its peers see it leave */
        }
    for (int i = 0; i < s->n && th; i++)
        if (th[i]) pthread_join(th[i], NULL);
    for (int i = 0; i < s->n; i++) comm_free(s->members[i]);
    free(th);
    pthread_mutex_destroy(&s->mu);
    free(s->members);
    free(s);
}

ncclResult_t ncclCommInitAll(ncclComm_t *comms, int ndev, const int *devlist) {
    if (!comms) return shim_fail(NULL, ncclInvalidArgument, "ncclCommInitAll: comms is NULL");
    if (ndev < 0) return shim_fail(NULL, ncclInvalidArgument, "ncclCommInitAll: ndev is %d", ndev);
    if (ndev == 0) return ncclSuccess; /* as NCCL: no communicator to make */
    int ndevices = 0;
    ringlet_device_count(&ndevices);
    for (int i = 0; devlist && i < ndev; i++)
        if (devlist[i] < 0 || (ndevices > 0 && devlist[i] >= ndevices))
            return shim_fail(NULL, ncclInvalidArgument, "ncclCommInitAll: devlist[%d] is %d (%d devices)", i, devlist[i],
                             ndevices);
    /* NCCL_COMM_BLOCKING=0 makes the communicators non-blocking, as NCCL's default config
     * does there. Their init still ends before this returns (ncclSuccess, where NCCL would
     * say ncclInProgress and leave it to ncclCommGetAsyncError, which then says done). */
    int blocking;
    ncclResult_t cr = read_config(NULL, "ncclCommInitAll", 1, &blocking);
    if (cr) return cr;
    ringlet_unique_id_t id;
    ringlet_result_t r = ringlet_get_unique_id(&id);
    if (r) return shim_check(NULL, r);
    struct initall_set *s = calloc(1, sizeof *s);
    init_arg *args = calloc((size_t)ndev, sizeof *args);
    pthread_t *th = calloc((size_t)ndev, sizeof *th);
    if (s) s->members = calloc((size_t)ndev, sizeof *s->members);
    ncclResult_t rc = s && args && th && s->members ? ncclSuccess : ncclSystemError;
    for (int i = 0; i < ndev && !rc; i++) {
        if (!(s->members[i] = comm_new(ndev, i, blocking))) rc = ncclSystemError;
        args[i] = (init_arg){s->members[i], id, -1};
        if (s->members[i]) s->members[i]->key = key_of(&id, sizeof id, KEY_SEED);
        /* Several ranks may share a device: without a devlist, rank i takes device i
         * when there is one, else device i mod the count. */
        if (ndevices > 0) args[i].device = devlist ? devlist[i] : i % ndevices;
    }
    int started = 0;
    for (; started < ndev && !rc; started++)
        if (pthread_create(&th[started], NULL, init_thread_keep, &args[started]) != 0) {
            rc = ncclSystemError;
            break; /* th[started] is no thread */
        }
    /* Those started wait for ranks that never will: stop their inits rather than let them
     * wait out the deadline. */
    for (int i = 0; i < started && rc; i++) ringlet_stop_token_fire(s->members[i]->init_stop);
    for (int i = 0; i < started; i++) pthread_join(th[i], NULL);
    for (int i = 0; i < started && !rc; i++)
        if (s->members[i]->init_rc) rc = s->members[i]->init_rc;
    if (rc) {
        char why[SHIM_MSG_MAX] = "out of memory or threads";
        for (int i = 0; i < ndev && s && s->members; i++)
            if (s->members[i] && s->members[i]->init_rc && s->members[i]->err[0]) {
                snprintf(why, sizeof why, "rank %d: %.480s", i, s->members[i]->err);
                break;
            }
        /* Ranks that came up leave together (destroy is collective). */
        pthread_t *dt = calloc((size_t)ndev, sizeof *dt);
        for (int i = 0; i < ndev && s && s->members && dt; i++)
            if (s->members[i] && pthread_create(&dt[i], NULL, destroy_thread, s->members[i]) != 0) dt[i] = 0;
        for (int i = 0; i < ndev && dt; i++)
            if (dt[i]) pthread_join(dt[i], NULL);
        for (int i = 0; i < ndev && s && s->members; i++)
            if (s->members[i]) comm_free(s->members[i]);
        free(dt);
        if (s) free(s->members);
        free(s), free(args), free(th);
        return shim_fail(NULL, rc, "ncclCommInitAll (%d ranks): %s", ndev, why);
    }
    pthread_mutex_init(&s->mu, NULL);
    s->n = s->left = ndev;
    for (int i = 0; i < ndev; i++) {
        s->members[i]->set = s;
        comms[i] = s->members[i];
    }
    free(args), free(th);
    return ncclSuccess;
}

/* Frees a handle its user let go of (destroy, abort), or leaves that to the ncclGroupEnd
 * that still holds it; a member of a set goes with the set. */
static void release_handle(struct ncclComm *c) {
    pthread_mutex_lock(&g_group_mu);
    int held = c->group_held;
    if (held) c->release_later = 1;
    struct initall_set *set = c->set;
    pthread_mutex_unlock(&g_group_mu);
    if (held) return;
    if (set) set_release(c);
    else comm_free(c);
}

/* Whether o is another live rank of c's communicator in this process, up, and not yet let
 * go of by its user nor part of a set. Caller holds g_group_mu. */
static int local_peer(const struct ncclComm *c, struct ncclComm *o) {
    if (o == c || o->key != c->key || o->set || o->destroying || o->nocolor || o->release_later || o->group_held ||
        o->fork_gen != c->fork_gen || !atomic_load(&o->init_done) || !o->rc)
        return 0;
    pthread_mutex_lock(&o->mu);
    int doomed = o->doomed;
    pthread_mutex_unlock(&o->mu);
    return !doomed;
}

/* c and the other live ranks of its communicator in this process (made on threads of their
 * own, or by non-blocking inits from one thread) become a set, destroyed together once the
 * last of them is let go of: ringlet's destroy waits for every rank's goodbye, so a thread
 * destroying them one after another waited out the deadline at the first, where NCCL's
 * destroy is local. Caller holds g_group_mu; c is in no set. */
static void join_local_ranks(struct ncclComm *c) {
    int n = 1;
    for (struct ncclComm *o = g_live; o; o = o->live_next) n += local_peer(c, o);
    if (n < 2) return;
    struct initall_set *s = calloc(1, sizeof *s);
    if (s && !(s->members = calloc((size_t)n, sizeof *s->members))) free(s), s = NULL;
    if (!s) return; /* destroyed alone: it waits for the others' goodbye */
    pthread_mutex_init(&s->mu, NULL);
    s->members[s->n++] = c, c->set = s;
    for (struct ncclComm *o = g_live; o && s->n < n; o = o->live_next)
        if (local_peer(c, o)) s->members[s->n++] = o, o->set = s;
    s->left = s->n;
}

/* Ranks of one communicator that this thread made in the group (same key), when there are
 * several: one set, destroyed together (ringlet's destroy is collective, and this thread
 * destroys them one after another). Caller holds g_group_mu. */
static void make_sets(struct ncclComm **cs, int n) {
    for (int i = 0; i < n; i++) {
        struct ncclComm *c = cs[i];
        if (c->nocolor || c->release_later || c->set) continue;
        int same = 0;
        for (int k = i; k < n; k++) same += !cs[k]->nocolor && !cs[k]->release_later && cs[k]->key == c->key;
        if (same < 2) continue;
        struct initall_set *s = calloc(1, sizeof *s);
        if (s && !(s->members = calloc((size_t)same, sizeof *s->members))) free(s), s = NULL;
        if (!s) {
            fprintf(stderr, "ringlet (NCCL layer) WARN: ncclGroupEnd: out of memory: the %d ranks of one "
                            "communicator made in the group must be destroyed from threads of their own\n", same);
            continue;
        }
        pthread_mutex_init(&s->mu, NULL);
        for (int k = i; k < n; k++)
            if (!cs[k]->nocolor && !cs[k]->release_later && cs[k]->key == c->key) s->members[s->n++] = cs[k], cs[k]->set = s;
        s->left = s->n;
    }
}

ncclResult_t shim_group_inits_end(void) {
    struct ncclComm **cs = t_group_inits.c;
    int n = t_group_inits.n;
    t_group_inits.c = NULL;
    t_group_inits.n = t_group_inits.cap = 0;
    if (!n) return ncclSuccess;
    /* The handles stay valid (group_held) until the end of this function. */
    ncclResult_t rc = ncclSuccess;
    int running = 0;
    for (int i = 0; i < n; i++) {
        struct ncclComm *c = cs[i];
        if (!c->blocking && !c->split_parent) { /* a non-blocking init: ncclCommGetAsyncError follows it */
            running |= !atomic_load(&c->init_done);
            continue;
        }
        join_init(c);
        if (c->init_rc && !rc) {
            if (c->rank >= 0)
                rc = shim_fail(NULL, c->init_rc, "ncclGroupEnd: the init of rank %d of %d failed: %.400s", c->rank,
                               c->nranks, c->err);
            else
                rc = shim_fail(NULL, c->init_rc, "ncclGroupEnd: a split failed: %.400s", c->err);
        }
    }
    /* Only once every split is over: a later split's thread may still wait for a stand-in. */
    pthread_mutex_lock(&g_group_mu);
    make_sets(cs, n);
    int nfree = 0;
    for (int i = 0; i < n; i++) {
        cs[i]->group_held = 0;
        if (cs[i]->nocolor || cs[i]->release_later) cs[nfree++] = cs[i]; /* the caller holds NULL, or let go */
    }
    pthread_mutex_unlock(&g_group_mu);
    for (int i = 0; i < nfree; i++) comm_free(cs[i]);
    free(cs);
    return rc ? rc : running ? ncclInProgress : ncclSuccess;
}

typedef struct {
    struct ncclComm *c, *parent;
    struct ncclComm *after; /* the group's previous split of the same parent, or NULL */
    int color, key, device;
    int no_newcomm; /* the caller passed newcomm NULL: the split runs, and fails on every rank */
} split_arg;

static void *split_thread(void *p) {
    split_arg *a = p;
    struct ncclComm *c = a->c;
    ringlet_comm_t nrc = NULL;
    if (a->after) join_init(a->after);
    ringlet_result_t rc = a->device >= 0 ? ringlet_set_device(a->device) : RINGLET_SUCCESS;
    if (!rc) rc = ringlet_comm_split(a->parent->rc, a->color, a->key, a->no_newcomm ? NULL : &nrc);
    c->init_rc = shim_check(c, rc);
    if (!rc && nrc) {
        c->rc = nrc;
        ringlet_comm_size(nrc, &c->nranks);
        ringlet_comm_rank(nrc, &c->rank);
        ringlet_comm_device(nrc, &c->device);
    }
    atomic_store(&c->init_done, 1);
    free(a);
    return NULL;
}

/* A split inside a group: on a thread of its own (see t_group_inits), on the parent's
 * device (ringlet_comm_split); the handle is returned at once (NULL where color is NCCL_SPLIT_NOCOLOR:
 * the split still runs, as every rank of comm takes part, and ncclGroupEnd frees its
 * stand-in). ncclGroupEnd waits for it, blocking or not, before the group's calls run
 * (they may use the parent too). */
static ncclResult_t split_in_group(struct ncclComm *comm, int color, int key, int blocking, ncclComm_t *newcomm) {
    /* The split's thread uses the parent until ncclGroupEnd joined it: held till then. */
    ncclResult_t rc = shim_group_enter(comm, "ncclCommSplit");
    if (rc) return shim_group_spoil(rc);
    struct ncclComm *c = comm_new(-1, -1, blocking);
    split_arg *a = calloc(1, sizeof *a);
    if (!c || !a || group_init_add(c)) {
        free(a);
        if (c) comm_free(c);
        return shim_group_spoil(shim_fail(comm, ncclSystemError, "ncclCommSplit: out of memory"));
    }
    /* Splits of one parent run one after another, each thread waiting for the one before
     * (not this thread: it may have the parent's other ranks still to split): their
     * exchanges over the parent must come in the same order on every rank. */
    struct ncclComm *after = NULL;
    for (int i = 0; i < t_group_inits.n - 1; i++)
        if (t_group_inits.c[i]->split_parent == comm) after = t_group_inits.c[i];
    /* newcomm NULL: the caller holds nothing, as for NCCL_SPLIT_NOCOLOR (ncclGroupEnd frees it) */
    c->nocolor = color == NCCL_SPLIT_NOCOLOR || !newcomm;
    c->split_parent = comm;
    c->key = child_key(comm, color);
    *a = (split_arg){c, comm, after, color, key, -1, !newcomm};
    if (start_init_thread(c, split_thread, a, &a->device, 1))
        return shim_group_spoil(shim_fail(comm, ncclSystemError, "ncclCommSplit: cannot start the split's thread"));
    if (!c->nocolor) *newcomm = c;
    return ncclSuccess;
}

static void abort_end(struct ncclComm *c);

/* A split of a non-blocking communicator outside a group, on its thread: the parent's
 * hold (shim_enter by split_async) and its running split end together, under its lock, so
 * that a destroy which waited for the split finds no call left under way. */
static void *split_async_thread(void *p) {
    split_arg *a = p;
    struct ncclComm *parent = a->parent;
    if (a->c) {
        split_thread(a); /* frees a */
    } else { /* NCCL_SPLIT_NOCOLOR: nothing to hand back */
        ringlet_comm_t none = NULL; /* (NULL here: newcomm NULL would be refused as an argument) */
        ringlet_result_t rc = a->device >= 0 ? ringlet_set_device(a->device) : RINGLET_SUCCESS;
        if (!rc) rc = ringlet_comm_split(parent->rc, a->color, a->key, &none);
        /* No handle to fail: said as the last error (NCCL_DEBUG=WARN prints it); a
         * failure that failed the parent, its async error says too. */
        if (rc) (void)shim_check(parent, rc);
        free(a);
    }
    pthread_mutex_lock(&parent->mu);
    parent->splits_running--;
    int last = --parent->calls == 0 && parent->doomed;
    pthread_cond_broadcast(&parent->splits_cv);
    pthread_mutex_unlock(&parent->mu);
    if (last) abort_end(parent);
    return NULL;
}

/* As NCCL's: a non-blocking parent's split returns ncclInProgress at once, and
 * ncclCommGetAsyncError of the new communicator (and of the parent) says when it is done;
 * one thread may so split several ranks of a process, one after another. */
static ncclResult_t split_async(struct ncclComm *comm, int color, int key, int blocking, ncclComm_t *newcomm) {
    ncclResult_t rc = shim_enter(comm, "ncclCommSplit"); /* the thread's hold, left there */
    if (rc) return rc;
    int nocolor = color == NCCL_SPLIT_NOCOLOR;
    struct ncclComm *c = nocolor ? NULL : comm_new(-1, -1, blocking);
    split_arg *a = calloc(1, sizeof *a);
    if ((!nocolor && !c) || !a) {
        free(a);
        if (c) comm_free(c);
        shim_leave(comm);
        return shim_fail(comm, ncclSystemError, "ncclCommSplit: out of memory");
    }
    uint64_t ckey = child_key(comm, color);
    *a = (split_arg){c, comm, NULL, color, key, -1, 0};
    pthread_mutex_lock(&comm->mu);
    comm->splits_running++;
    pthread_mutex_unlock(&comm->mu);
    int failed;
    if (c) {
        c->key = ckey;
        failed = start_init_thread(c, split_async_thread, a, &a->device, 0); /* frees a and c if it fails */
    } else { /* no handle to join the thread */
        pthread_t th;
        ringlet_get_device(&a->device);
        failed = pthread_create(&th, NULL, split_async_thread, a) != 0;
        if (failed) free(a);
        else pthread_detach(th);
    }
    if (failed) {
        pthread_mutex_lock(&comm->mu);
        comm->splits_running--;
        pthread_cond_broadcast(&comm->splits_cv);
        pthread_mutex_unlock(&comm->mu);
        shim_leave(comm);
        return shim_fail(comm, ncclSystemError, "ncclCommSplit: cannot start the split's thread");
    }
    if (c) *newcomm = c;
    return ncclInProgress;
}

/* ncclCommSplit on an entered, ready parent. */
static ncclResult_t split_entered(ncclComm_t comm, int color, int key, ncclConfig_t *config, ncclComm_t *newcomm) {
    int blocking;
    /* Without a config, the parent's; a config's unset field is the default, 1 (as NCCL's) */
    ncclResult_t rc = read_config(config, "ncclCommSplit", config ? 1 : comm->blocking, &blocking);
    if (rc) {
        /* The other ranks are in the split's exchange: this rank takes part, refusing, so
         * that every rank fails at once, naming it. Then its own message again. */
        if (shim_group_depth() > 0) (void)split_in_group(comm, RINGLET_SPLIT_REFUSE, key, 1, NULL);
        else (void)child_key(comm, color), (void)ringlet_comm_split(comm->rc, RINGLET_SPLIT_REFUSE, key, NULL);
        return read_config(config, "ncclCommSplit", 1, &blocking);
    }
    /* A bad color or a NULL newcomm goes to ringlet's split, which every rank takes part in
     * and then refuses (naming the rank), rather than leave the others in its exchange. */
    if (shim_group_depth() > 0) return split_in_group(comm, color, key, blocking, newcomm);
    if (!comm->blocking && newcomm) return split_async(comm, color, key, blocking, newcomm);
    uint64_t ckey = child_key(comm, color);
    ringlet_comm_t nrc = NULL;
    rc = shim_check(comm, ringlet_comm_split(comm->rc, color, key, newcomm ? &nrc : NULL));
    if (rc) return rc;
    if (!nrc) return ncclSuccess;
    int n = 0, r = 0;
    ringlet_comm_size(nrc, &n);
    ringlet_comm_rank(nrc, &r);
    struct ncclComm *c = comm_new(n, r, blocking);
    if (!c) {
        ringlet_comm_abort(nrc);
        ringlet_comm_destroy(nrc);
        return shim_fail(NULL, ncclSystemError, "ncclCommSplit: out of memory");
    }
    c->rc = nrc;
    c->key = ckey;
    ringlet_comm_device(nrc, &c->device);
    *newcomm = c;
    return ncclSuccess;
}

ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t *newcomm, ncclConfig_t *config) {
    if (newcomm) *newcomm = NULL;
    ncclResult_t rc = shim_enter_ready(comm, "ncclCommSplit");
    if (rc) return shim_group_spoil(rc);
    /* Not spoiled by a bad argument: this rank took part in the split, refusing, and every
     * rank's split fails at ncclGroupEnd, which runs the group's other calls on every
     * rank alike (spoiled on this rank only, they would wait for it on the others). */
    rc = split_entered(comm, color, key, config, newcomm);
    shim_leave(comm);
    return rc;
}

ncclResult_t ncclCommFinalize(ncclComm_t comm) {
    if (!comm) return ncclSuccess; /* as NCCL */
    ncclResult_t rc = shim_enter_ready(comm, "ncclCommFinalize");
    if (rc) return rc;
    pthread_mutex_lock(&comm->mu);
    int again = comm->finalized;
    comm->finalized = 1;
    pthread_mutex_unlock(&comm->mu);
    if (again) rc = shim_fail(comm, ncclInvalidArgument, "ncclCommFinalize: the communicator was finalized already");
    else if (!(rc = shim_check(comm, ringlet_comm_finalize(comm->rc)))) rc = shim_poll(comm);
    shim_leave(comm);
    return rc == ncclInProgress ? ncclSuccess : rc; /* finalize waited: nothing still runs */
}

/* Joins a non-blocking init that may still run (destroy and abort wait for it: ringlet's
 * init has its own deadline). */
static ncclResult_t comm_settle(struct ncclComm *c, const char *fn) {
    if (!c) return shim_fail(NULL, ncclInvalidArgument, "%s: comm is NULL", fn);
    if (c->magic != SHIM_MAGIC) return shim_fail(NULL, ncclInvalidArgument, "%s: comm is not a live communicator", fn);
    ncclResult_t forked = comm_forked(c, fn);
    if (forked) return forked;
    join_init(c);
    return ncclSuccess;
}

/* The destroy's wait for c's running splits (they hold c until they end), counted as a
 * call: an abort meanwhile (a watchdog's) leaves the handle's end to the last call to
 * leave, this one perhaps. 1: aborted meanwhile (c is gone, or going: not to be touched). */
static int destroy_waits_splits(struct ncclComm *c) {
    pthread_mutex_lock(&c->mu);
    if (!c->splits_running) {
        pthread_mutex_unlock(&c->mu);
        return 0;
    }
    c->calls++;
    while (c->splits_running > 0) pthread_cond_wait(&c->splits_cv, &c->mu);
    int doomed = c->doomed, last = --c->calls == 0 && doomed;
    pthread_mutex_unlock(&c->mu);
    if (last) abort_end(c);
    return doomed;
}

ncclResult_t ncclCommDestroy(ncclComm_t comm) {
    if (!comm) return ncclSuccess; /* as NCCL: cleanup after a failed init (which left NULL) */
    ncclResult_t rc = comm_settle(comm, "ncclCommDestroy");
    if (rc) return rc;
    if (destroy_waits_splits(comm))
        return shim_fail(NULL, ncclInvalidUsage, "ncclCommDestroy: the communicator was aborted while the destroy "
                                                 "waited for its split");
    pthread_mutex_lock(&comm->mu);
    int doomed = comm->doomed, calls = comm->calls;
    pthread_mutex_unlock(&comm->mu);
    if (doomed)
        return shim_fail(NULL, ncclInvalidUsage, "ncclCommDestroy: the communicator was aborted (its calls still under "
                                                 "way end it)");
    /* freed under them, they would use it after (a group's ncclGroupEnd leaves it at its end) */
    if (calls > 0)
        return shim_fail(comm, ncclInvalidUsage, "ncclCommDestroy: the communicator has %d call(s) under way: in a "
                         "group this thread has not ended (ncclGroupEnd first), or on another thread", calls);
    pthread_mutex_lock(&g_group_mu);
    if (!comm->set && !comm->group_held) join_local_ranks(comm);
    struct initall_set *set = comm->set;
    if (!set) comm->destroying = 1;
    pthread_mutex_unlock(&g_group_mu);
    if (set) {
        set_release(comm);
        return ncclSuccess;
    }
    ringlet_result_t r = comm->rc ? ringlet_comm_destroy(comm->rc) : RINGLET_SUCCESS;
    comm->rc = NULL;
    rc = r ? shim_check(NULL, r) : ncclSuccess;
    release_handle(comm);
    return rc;
}

/* The end of an aborted handle: ringlet's abort keeps its communicator answering errors
 * until destroy frees it; the NCCL handle is gone after abort, so both (destroy of an
 * aborted communicator waits for no peer, only for calls of this process still leaving). */
static void abort_end(struct ncclComm *c) {
    if (c->rc) ringlet_comm_destroy(c->rc);
    c->rc = NULL;
    release_handle(c);
}

ncclResult_t shim_enter(struct ncclComm *c, const char *fn) {
    if (!c || c->magic != SHIM_MAGIC || shim_fork_generation() != c->fork_gen) {
        ncclResult_t rc = shim_ready(c, fn); /* refuses it, saying why (nothing of c touched) */
        return rc ? rc : ncclInternalError;
    }
    pthread_mutex_lock(&c->mu);
    int doomed = c->doomed;
    if (!doomed) c->calls++;
    pthread_mutex_unlock(&c->mu);
    return doomed ? shim_fail(NULL, ncclInvalidUsage, "%s: the communicator was aborted", fn) : ncclSuccess;
}

ncclResult_t shim_enter_ready(struct ncclComm *c, const char *fn) {
    ncclResult_t rc = shim_enter(c, fn);
    if (rc) return rc;
    if ((rc = shim_ready(c, fn))) shim_leave(c);
    return rc;
}

void shim_leave(struct ncclComm *c) {
    pthread_mutex_lock(&c->mu);
    int last = --c->calls == 0 && c->doomed;
    pthread_mutex_unlock(&c->mu);
    if (last) abort_end(c);
}

ncclResult_t ncclCommAbort(ncclComm_t comm) {
    if (!comm) return ncclSuccess; /* as NCCL */
    /* An init still running stops within about 100 ms (NCCL's own abort may wait for it). */
    if (comm && comm->magic == SHIM_MAGIC) ringlet_stop_token_fire(comm->init_stop);
    ncclResult_t rc = comm_settle(comm, "ncclCommAbort");
    if (rc) return rc;
    /* The calls under way return (ringlet's abort may come from any thread); the last to
     * leave ends the handle, which they still use until they return. */
    if (comm->rc) ringlet_comm_abort(comm->rc);
    pthread_mutex_lock(&comm->mu);
    int busy = comm->doomed || comm->calls > 0;
    comm->doomed = 1;
    pthread_mutex_unlock(&comm->mu);
    if (!busy) abort_end(comm);
    return ncclSuccess;
}

ncclResult_t shim_track(struct ncclComm *c, ringlet_request_t r) {
    pthread_mutex_lock(&c->mu);
    if (c->npending == c->cap) {
        int cap = c->cap ? 2 * c->cap : 16;
        ringlet_request_t *p = realloc(c->pending, sizeof *p * (size_t)cap);
        if (!p) {
            pthread_mutex_unlock(&c->mu);
            ringlet_result_t rc = ringlet_wait(&r);
            return rc ? shim_check(c, rc) : ncclSuccess;
        }
        c->pending = p;
        c->cap = cap;
    }
    c->pending[c->npending++] = r;
    pthread_mutex_unlock(&c->mu);
    return ncclInProgress;
}

ncclResult_t shim_poll(struct ncclComm *c) {
    pthread_mutex_lock(&c->mu);
    int k = 0;
    for (int i = 0; i < c->npending; i++) {
        int done = 0;
        ringlet_result_t rc = ringlet_test(&c->pending[i], &done);
        if (!done) {
            c->pending[k++] = c->pending[i];
        } else if (rc && c->async == ncclSuccess) {
            c->async = shim_result(rc);
            snprintf(c->err, sizeof c->err, "%s", ringlet_comm_last_error(NULL));
            note_last(c->err);
        }
    }
    c->npending = k;
    ncclResult_t out = k ? ncclInProgress : c->async;
    pthread_mutex_unlock(&c->mu);
    return out;
}

/* Entered as a call (shim_enter): an abort from another thread (a watchdog's) meanwhile
 * leaves the handle to it until it returns. */
ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t *asyncError) {
    /* NULL: comm is not checked yet (it may not be a live handle) */
    if (!asyncError) return shim_fail(NULL, ncclInvalidArgument, "ncclCommGetAsyncError: asyncError is NULL");
    if (!comm) return shim_fail(NULL, ncclInvalidArgument, "ncclCommGetAsyncError: comm is not a live communicator");
    ncclResult_t entered = shim_enter(comm, "ncclCommGetAsyncError");
    if (entered) {
        /* an abort under way (from another thread): said as the communicator's error, as a
         * poller of it (PyTorch's watchdog) expects, rather than as this call's failure */
        if (comm->magic == SHIM_MAGIC && shim_fork_generation() == comm->fork_gen) {
            *asyncError = entered;
            return ncclSuccess;
        }
        return entered;
    }
    pthread_mutex_lock(&comm->mu);
    int splitting = comm->splits_running > 0; /* as NCCL's: the parent's split job still runs */
    pthread_mutex_unlock(&comm->mu);
    if (!atomic_load(&comm->init_done) || splitting) {
        *asyncError = ncclInProgress;
        shim_leave(comm);
        return ncclSuccess;
    }
    join_init(comm);
    if (comm->init_rc != ncclSuccess) {
        *asyncError = comm->init_rc;
        shim_leave(comm);
        return ncclSuccess;
    }
    ncclResult_t rc = shim_poll(comm);
    if (rc == ncclSuccess) {
        ringlet_result_t a = ringlet_comm_get_async_error(comm->rc);
        if (a) {
            rc = shim_result(a);
            pthread_mutex_lock(&comm->mu);
            snprintf(comm->err, sizeof comm->err, "%s", ringlet_comm_last_error(comm->rc));
            note_last(comm->err);
            pthread_mutex_unlock(&comm->mu);
        }
    }
    *asyncError = rc;
    shim_leave(comm);
    return ncclSuccess;
}

/* The queries enter the handle too: one may wait for a non-blocking init while another
 * thread aborts the communicator. */
ncclResult_t ncclCommCount(const ncclComm_t comm, int *count) {
    ncclResult_t rc = shim_enter_ready(comm, "ncclCommCount");
    if (rc) return rc;
    if (!count) rc = shim_fail(comm, ncclInvalidArgument, "ncclCommCount: count is NULL");
    else *count = comm->nranks;
    shim_leave(comm);
    return rc;
}

ncclResult_t ncclCommUserRank(const ncclComm_t comm, int *rank) {
    ncclResult_t rc = shim_enter_ready(comm, "ncclCommUserRank");
    if (rc) return rc;
    if (!rank) rc = shim_fail(comm, ncclInvalidArgument, "ncclCommUserRank: rank is NULL");
    else *rank = comm->rank;
    shim_leave(comm);
    return rc;
}

/* -1 where ringlet runs without a device backend (host memory only). */
ncclResult_t ncclCommCuDevice(const ncclComm_t comm, int *device) {
    ncclResult_t rc = shim_enter_ready(comm, "ncclCommCuDevice");
    if (rc) return rc;
    if (!device) rc = shim_fail(comm, ncclInvalidArgument, "ncclCommCuDevice: device is NULL");
    else rc = shim_check(comm, ringlet_comm_device(comm->rc, device));
    shim_leave(comm);
    return rc;
}

/* ---- memory and registration ---- */

ncclResult_t ncclMemAlloc(void **ptr, size_t size) {
    if (!ptr) return shim_fail(NULL, ncclInvalidArgument, "ncclMemAlloc: ptr is NULL");
    return shim_check(NULL, ringlet_mem_alloc(ptr, size));
}

ncclResult_t ncclMemFree(void *ptr) { return shim_check(NULL, ringlet_mem_free(ptr)); }

/* Registration is accepted and changes nothing: ringlet copies through its own slots
 * (and maps peers' slots), never a user buffer. The handle records what was passed. */
typedef struct shim_reg {
    void *buff;
    size_t size;
    struct shim_reg *prev, *next; /* in comm->regs */
} reg_t;

static void regs_free(struct ncclComm *c) {
    for (reg_t *h = c->regs, *next; h; h = next) {
        next = h->next;
        free(h);
    }
    c->regs = NULL;
}

static ncclResult_t register_entered(ncclComm_t comm, void *buff, size_t size, void **handle) {
    ncclResult_t rc = shim_ready(comm, "ncclCommRegister");
    if (rc) return rc;
    if (!handle) return shim_fail(comm, ncclInvalidArgument, "ncclCommRegister: handle is NULL");
    if (!buff && size) return shim_fail(comm, ncclInvalidArgument, "ncclCommRegister: buff is NULL");
    reg_t *h = malloc(sizeof *h);
    if (!h) return shim_fail(comm, ncclSystemError, "ncclCommRegister: out of memory");
    *h = (reg_t){buff, size, NULL, NULL};
    pthread_mutex_lock(&comm->mu);
    h->next = comm->regs;
    if (h->next) h->next->prev = h;
    comm->regs = h;
    pthread_mutex_unlock(&comm->mu);
    *handle = h;
    return ncclSuccess;
}

static ncclResult_t deregister_entered(ncclComm_t comm, void *handle) {
    ncclResult_t rc = shim_ready(comm, "ncclCommDeregister");
    if (rc || !handle) return rc; /* NULL: nothing to deregister (NCCL hands out NULL handles itself) */
    pthread_mutex_lock(&comm->mu);
    reg_t *h = comm->regs;
    while (h && h != handle) h = h->next; /* this communicator's, not yet deregistered */
    if (h) {
        if (h->prev) h->prev->next = h->next;
        else comm->regs = h->next;
        if (h->next) h->next->prev = h->prev;
    }
    pthread_mutex_unlock(&comm->mu);
    if (!h)
        return shim_fail(comm, ncclInvalidUsage,
                         "ncclCommDeregister: not a handle of this communicator's from ncclCommRegister (or "
                         "deregistered already)");
    free(h);
    return ncclSuccess;
}

/* Entered as the calls are (shim_enter): an abort from another thread (PyTorch's watchdog,
 * while its allocator hooks register) frees the handles only once these left. */
ncclResult_t ncclCommRegister(const ncclComm_t comm, void *buff, size_t size, void **handle) {
    ncclResult_t rc = shim_enter(comm, "ncclCommRegister");
    if (rc) return rc;
    rc = register_entered(comm, buff, size, handle);
    shim_leave(comm);
    return rc;
}

ncclResult_t ncclCommDeregister(const ncclComm_t comm, void *handle) {
    ncclResult_t rc = shim_enter(comm, "ncclCommDeregister");
    if (rc) return rc;
    rc = deregister_entered(comm, handle);
    shim_leave(comm);
    return rc;
}

/* ---- not provided ---- */

static ncclResult_t not_provided(struct ncclComm *c, const char *fn, const char *why) {
    return shim_fail(c && c->magic == SHIM_MAGIC ? c : NULL, ncclInvalidUsage, "%s is not provided by ringlet: %s", fn,
                     why);
}

ncclResult_t ncclCommShrink(ncclComm_t comm, int *exclude, int nexclude, ncclComm_t *newcomm, ncclConfig_t *config,
                            int flags) {
    (void)exclude, (void)nexclude, (void)config, (void)flags;
    if (newcomm) *newcomm = NULL;
    return not_provided(comm, "ncclCommShrink",
                        "a communicator without failed ranks is made with ncclCommSplit (the excluded ranks pass "
                        "NCCL_SPLIT_NOCOLOR); ringlet does not rebuild a communicator after a failure");
}

ncclResult_t ncclCommRevoke(ncclComm_t comm, int flags) {
    (void)flags;
    return not_provided(comm, "ncclCommRevoke", "use ncclCommAbort");
}

ncclResult_t ncclCommWindowRegister(ncclComm_t comm, void *buff, size_t size, ncclWindow_t *win, int flags) {
    (void)buff, (void)size, (void)flags;
    if (win) *win = NULL;
    return not_provided(comm, "ncclCommWindowRegister", "symmetric memory windows need NCCL's device kernels");
}

ncclResult_t ncclCommWindowDeregister(ncclComm_t comm, ncclWindow_t win) {
    (void)win;
    return not_provided(comm, "ncclCommWindowDeregister", "symmetric memory windows need NCCL's device kernels");
}

SHIM_TWIN(GetVersion);
SHIM_TWIN(GetErrorString);
SHIM_TWIN(GetLastError);
SHIM_TWIN(ResetDebugInit);
SHIM_TWIN(GetUniqueId);
SHIM_TWIN(CommInitRankConfig);
SHIM_TWIN(CommInitRank);
SHIM_TWIN(CommInitRankScalable);
SHIM_TWIN(CommInitAll);
SHIM_TWIN(CommSplit);
SHIM_TWIN(CommFinalize);
SHIM_TWIN(CommDestroy);
SHIM_TWIN(CommAbort);
SHIM_TWIN(CommGetAsyncError);
SHIM_TWIN(CommCount);
SHIM_TWIN(CommUserRank);
SHIM_TWIN(CommCuDevice);
SHIM_TWIN(MemAlloc);
SHIM_TWIN(MemFree);
SHIM_TWIN(CommRegister);
SHIM_TWIN(CommDeregister);
SHIM_TWIN(CommShrink);
SHIM_TWIN(CommRevoke);
SHIM_TWIN(CommWindowRegister);
SHIM_TWIN(CommWindowDeregister);
