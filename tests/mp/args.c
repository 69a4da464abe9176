/* Argument errors of the public API (public header only).
 *
 *   args init   one process, no launcher: ringlet_strerror, ringlet_datatype_size,
 *               init errors (NULL comm pointer, nranks, rank, garbage unique ids,
 *               bad launcher environment, init_rank_config: bad settings and a
 *               deadline of its own), then a real 1-rank communicator made
 *               from the same unique id after those errors.
 *   args p2     under ringlet-run -n 2 (works for any P >= 2): every argument error
 *               of every call taking a communicator, blocking and non-blocking
 *               (NULL comm, NULL sendbuf/recvbuf, datatype, op, root, peer, count
 *               overflow, NULL request), then a real all-reduce on the same
 *               communicator, then ringlet_comm_abort and the calls after it.
 *
 * Argument errors are local: both ranks run the same sequence and no check may talk
 * to the peer. Each check wants a result code and, where the brief names one, a word
 * in the message (ringlet_comm_last_error(comm), or (NULL) for calls without a
 * communicator). So that a message left over from an earlier error cannot pass a
 * check, every check is preceded by a different argument error whose message does
 * not contain the word wanted (when it happens to contain it, the check still runs).
 * "rank" must appear as a word start (not inside "nranks"); "op" as a whole word.
 * Prints "args MODE: rank R: N checks, F failed" and exits 0 iff none failed;
 * ARGS_VERBOSE=1 prints every check with the code and message it got.
 */
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ringlet.h"

static int g_rank = 0, g_P = 1;
static long g_checks, g_failed;
static int g_verbose; /* ARGS_VERBOSE=1: print every check and its message */
static float g_s[64], g_r[64];

/* Every rank of the job got here: each makes $ARGS_SYNC/<stage>.<rank>, then waits (60 s
 * at most) for the others' (the ranks share a host: ringlet-run). Orders the steps after
 * which a rank fails its communicator, whose peers are told at once, after everything the
 * others still do with them. */
static int ranks_meet(const char *stage, int me, int P) {
    const char *dir = getenv("ARGS_SYNC");
    char path[512];
    if (!dir) return 0;
    snprintf(path, sizeof path, "%s/%s.%d", dir, stage, me);
    FILE *f = fopen(path, "w");
    if (f) fclose(f);
    for (int k = 0; k < 6000; k++) {
        int here = 0;
        for (int r = 0; r < P; r++) {
            snprintf(path, sizeof path, "%s/%s.%d", dir, stage, r);
            here += access(path, F_OK) == 0;
        }
        if (here == P) return 1;
        struct timespec ts = {0, 10 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    return 0;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int is_letter(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }

/* kw in msg; "rank" not preceded by a letter; "op" with no letter on either side. */
static int has_kw(const char *msg, const char *kw) {
    if (!msg || !kw) return 0;
    const int word_start = strcmp(kw, "rank") == 0, whole = strcmp(kw, "op") == 0;
    size_t n = strlen(kw);
    for (const char *p = strstr(msg, kw); p; p = strstr(p + 1, kw)) {
        int before = p > msg && is_letter(p[-1]);
        int after = is_letter(p[n]);
        if ((word_start || whole) && before) continue;
        if (whole && after) continue;
        return 1;
    }
    return 0;
}

__attribute__((format(printf, 2, 3))) static void fail(long line, const char *fmt, ...) {
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    g_failed++;
    printf("FAIL args rank %d (line %ld): %s\n", g_rank, line, buf);
}

static const char *msg_of(ringlet_comm_t comm) {
    const char *m = ringlet_comm_last_error(comm);
    return m ? m : "(NULL)";
}

/* A different argument error, so that the message afterwards is not stale for kw. */
static void reset_msg(ringlet_comm_t comm, const char *kw) {
    if (comm) {
        if (strcmp(kw, "sendbuf") != 0)
            (void)ringlet_allreduce(NULL, g_r, 4, RINGLET_FLOAT32, RINGLET_SUM, comm, NULL);
        else
            (void)ringlet_allreduce(g_s, NULL, 4, RINGLET_FLOAT32, RINGLET_SUM, comm, NULL);
    } else {
        (void)ringlet_get_unique_id(NULL);
    }
}

static const char *rc_name(ringlet_result_t rc) {
    static const char *const names[] = {"SUCCESS",        "ERR_CUDA",      "ERR_SYSTEM",
                                        "ERR_INTERNAL",   "ERR_INVALID_ARGUMENT", "ERR_INVALID_USAGE",
                                        "ERR_REMOTE",     "IN_PROGRESS",   "ERR_TIMEOUT"};
    return (int)rc >= 0 && (int)rc < RINGLET_NUM_RESULTS ? names[rc] : "(unknown code)";
}

/* want < 0: any code but success. kw NULL: only a non-empty message wanted. */
static void check(const char *what, long line, ringlet_comm_t msgcomm, int want, const char *kw, ringlet_result_t rc) {
    g_checks++;
    const char *m = msg_of(msgcomm);
    char buf[512];
    if (g_verbose) printf("rank %d: %s -> %d %s: '%s'\n", g_rank, what, (int)rc, rc_name(rc), m);
    if ((want >= 0 && (int)rc != want) || (want < 0 && rc == RINGLET_SUCCESS)) {
        snprintf(buf, sizeof buf, "returned %d %s, want %s; message '%s'", (int)rc, rc_name(rc),
                 want >= 0 ? rc_name((ringlet_result_t)want) : "an error", m);
        fail(line, "%s: %s", what, buf);
        return;
    }
    if (rc == RINGLET_SUCCESS) return;
    if (kw && !has_kw(m, kw)) {
        snprintf(buf, sizeof buf, "message '%s' does not name '%s'", m, kw);
        fail(line, "%s: %s", what, buf);
    } else if (!kw && m[0] == '\0') {
        fail(line, "%s: %s", what, "empty error message");
    }
}

#define CHECK(msgcomm, want, kw, call)                                                                                 \
    do {                                                                                                               \
        reset_msg(msgcomm, (kw) ? (kw) : "");                                                                          \
        ringlet_result_t rc_ = (call);                                                                                 \
        check(#call, __LINE__, msgcomm, want, kw, rc_);                                                                \
    } while (0)

#define EXPECT(cond, text)                                                                                             \
    do {                                                                                                               \
        g_checks++;                                                                                                    \
        if (!(cond)) fail(__LINE__, "%s", text);                                                                           \
    } while (0)

/* ---------------------------------------------------------------- the calls */

enum { K_ALLREDUCE, K_BROADCAST, K_REDUCE, K_ALLGATHER, K_REDUCE_SCATTER, K_BARRIER, K_SEND, K_RECV, K_NUM };
static const char *const kname[K_NUM] = {"allreduce",      "broadcast", "reduce", "allgather",
                                         "reduce_scatter", "barrier",   "send",   "recv"};

typedef struct {
    const void *s;
    void *r;
    size_t count;
    ringlet_datatype_t dt;
    ringlet_op_t op;
    int root, peer;
} args_t;

static args_t valid_args(void) {
    args_t a = {g_s, g_r, 4, RINGLET_FLOAT32, RINGLET_SUM, g_rank, (g_rank + 1) % g_P};
    return a;
}

/* nb: the i-form with reqp (may be NULL) */
static ringlet_result_t call(int k, int nb, const args_t *a, ringlet_comm_t c, ringlet_request_t *reqp) {
    if (!nb) {
        switch (k) {
        case K_ALLREDUCE: return ringlet_allreduce(a->s, a->r, a->count, a->dt, a->op, c, NULL);
        case K_BROADCAST: return ringlet_broadcast(a->s, a->r, a->count, a->dt, a->root, c, NULL);
        case K_REDUCE: return ringlet_reduce(a->s, a->r, a->count, a->dt, a->op, a->root, c, NULL);
        case K_ALLGATHER: return ringlet_allgather(a->s, a->r, a->count, a->dt, c, NULL);
        case K_REDUCE_SCATTER: return ringlet_reduce_scatter(a->s, a->r, a->count, a->dt, a->op, c, NULL);
        case K_BARRIER: return ringlet_barrier(c, NULL);
        case K_SEND: return ringlet_send(a->s, a->count, a->dt, a->peer, c, NULL);
        default: return ringlet_recv(a->r, a->count, a->dt, a->peer, c, NULL);
        }
    }
    switch (k) {
    case K_ALLREDUCE: return ringlet_iallreduce(a->s, a->r, a->count, a->dt, a->op, c, NULL, reqp);
    case K_BROADCAST: return ringlet_ibroadcast(a->s, a->r, a->count, a->dt, a->root, c, NULL, reqp);
    case K_REDUCE: return ringlet_ireduce(a->s, a->r, a->count, a->dt, a->op, a->root, c, NULL, reqp);
    case K_ALLGATHER: return ringlet_iallgather(a->s, a->r, a->count, a->dt, c, NULL, reqp);
    case K_REDUCE_SCATTER: return ringlet_ireduce_scatter(a->s, a->r, a->count, a->dt, a->op, c, NULL, reqp);
    case K_BARRIER: return ringlet_ibarrier(c, NULL, reqp);
    case K_SEND: return ringlet_isend(a->s, a->count, a->dt, a->peer, c, NULL, reqp);
    default: return ringlet_irecv(a->r, a->count, a->dt, a->peer, c, NULL, reqp);
    }
}

/* One argument error: call kind k (blocking and non-blocking) with args a on comm c;
 * want code `want` and kw in the message of msgcomm. */
static void check_call(int k, const args_t *a, ringlet_comm_t c, ringlet_comm_t msgcomm, int want, const char *kw,
                       const char *desc, long line) {
    for (int nb = 0; nb < 2; nb++) {
        char what[256];
        snprintf(what, sizeof what, "%s%s with %s", nb ? "ringlet_i" : "ringlet_", kname[k], desc);
        reset_msg(msgcomm, kw ? kw : "");
        ringlet_request_t req = NULL;
        ringlet_result_t rc = call(k, nb, a, c, &req);
        check(what, line, msgcomm, want, kw, rc);
        if (nb && req != NULL) {
            g_checks++;
            fail(line, "%s: %s", what, "returned a request although the call failed");
        }
    }
}

/* ---------------------------------------------------------------- init mode */

static void strerror_checks(void) {
    const char *s[RINGLET_NUM_RESULTS];
    for (int i = 0; i < RINGLET_NUM_RESULTS; i++) {
        s[i] = ringlet_strerror((ringlet_result_t)i);
        g_checks++;
        if (!s[i] || !s[i][0]) {
            char n[16];
            snprintf(n, sizeof n, "%d", i);
            fail(__LINE__, "ringlet_strerror(%s) is NULL or empty", n);
            s[i] = NULL;
        }
    }
    for (int i = 0; i < RINGLET_NUM_RESULTS; i++)
        for (int j = i + 1; j < RINGLET_NUM_RESULTS; j++)
            if (s[i] && s[j]) {
                g_checks++;
                if (strcmp(s[i], s[j]) == 0) fail(__LINE__, "ringlet_strerror gives '%s' for two codes", s[i]);
            }
    const int odd[] = {RINGLET_NUM_RESULTS, 99, -1};
    for (int i = 0; i < 3; i++) {
        const char *m = ringlet_strerror((ringlet_result_t)odd[i]);
        EXPECT(m != NULL && m[0] != '\0', "ringlet_strerror of an unknown code is NULL or empty");
    }
    const size_t sizes[RINGLET_NUM_DATATYPES] = {1, 1, 4, 4, 8, 8, 2, 4, 8, 2};
    for (int d = 0; d < RINGLET_NUM_DATATYPES; d++)
        EXPECT(ringlet_datatype_size((ringlet_datatype_t)d) == sizes[d], "ringlet_datatype_size of a valid type");
    EXPECT(ringlet_datatype_size((ringlet_datatype_t)RINGLET_NUM_DATATYPES) == 0, "ringlet_datatype_size(10) != 0");
    EXPECT(ringlet_datatype_size((ringlet_datatype_t)99) == 0, "ringlet_datatype_size(99) != 0");
    EXPECT(ringlet_datatype_size((ringlet_datatype_t)-1) == 0, "ringlet_datatype_size(-1) != 0");
    EXPECT(ringlet_version() != NULL && ringlet_version()[0] != '\0', "ringlet_version() empty");
    EXPECT(ringlet_comm_last_error(NULL) != NULL, "ringlet_comm_last_error(NULL) is NULL");
}

static const char *const launcher_vars[] = {"RANK",          "WORLD_SIZE",           "LOCAL_RANK",
                                            "LOCAL_WORLD_SIZE", "MASTER_ADDR",       "MASTER_PORT",
                                            "SLURM_PROCID",  "SLURM_NTASKS",         "SLURM_LOCALID",
                                            "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
                                            "GROUP_RANK",    NULL};

static void env_case(const char *desc, const char *rank, const char *size, int with_master, const char *want) {
    for (int i = 0; launcher_vars[i]; i++) unsetenv(launcher_vars[i]);
    if (with_master) {
        setenv("MASTER_ADDR", "127.0.0.1", 1);
        setenv("MASTER_PORT", "29731", 1);
    }
    if (rank) setenv("RANK", rank, 1);
    if (size) setenv("WORLD_SIZE", size, 1);
    ringlet_comm_t c = NULL;
    double t = now_s();
    char what[160];
    snprintf(what, sizeof what, "ringlet_comm_init_env with %s", desc);
    reset_msg(NULL, "");
    ringlet_result_t rc = ringlet_comm_init_env(&c);
    check(what, __LINE__, NULL, -1, want, rc);
    if (rc != RINGLET_SUCCESS) printf("args init: %s -> %s\n", desc, msg_of(NULL));
    if (rc == RINGLET_SUCCESS && c) ringlet_comm_destroy(c);
    EXPECT(rc == RINGLET_SUCCESS || c == NULL, "ringlet_comm_init_env failed but set *comm");
    if (now_s() - t > 5.0) fail(__LINE__, "%s took more than 5 s", what);
}

/* A bad value of every RINGLET_* variable the library reads fails init, naming the
 * variable, the value and what is allowed ("RINGLET_X=v: must be ..."); args.sh checks
 * that every variable of the README's tables is here, in env_bad or env_free. */
static const char *const env_bad[][2] = {
    {"RINGLET_TIMEOUT", "0"},          {"RINGLET_DEBUG", "loud"},
    {"RINGLET_TRANSPORT", "tcpp"},     {"RINGLET_CUDA_IPC_SLOT_SIZE", "1K"},
    {"RINGLET_CUDA_IPC_NSLOTS", "65"}, {"RINGLET_CUDA_IPC_DISABLE", "yes"},
    {"RINGLET_SHM_SLOT_SIZE", "100"},  {"RINGLET_SHM_NSLOTS", "1"},
    {"RINGLET_SHM_DISABLE", "true"},   {"RINGLET_SPIN_US", "-1"},
    {"RINGLET_ALGO", "tree"},          {"RINGLET_HIER_MIN_BYTES", "-1"},
    {"RINGLET_HIER_SLICE_BYTES", "x"}, {"RINGLET_ONESHOT_BYTES", "2G"},
    {"RINGLET_HALVING_MIN_BYTES", "-1"}, {"RINGLET_HALVING_MAX_BYTES", "lots"},
    {"RINGLET_DOUBLING_MAX_BYTES", "-4"}, {"RINGLET_BOARD_BYTES", "32K"},
    {"RINGLET_ONESHOT_MAX_RANKS", "1"}, {"RINGLET_INLINE", "2"},
    /* integers are decimal (or 0x hex): "0100" is a hundred, past the limit of 64 (C's
     * octal would read 64); no blanks or '+' before the digits */
    {"RINGLET_ONESHOT_MAX_RANKS", "0100"}, {"RINGLET_NCHUNKS_INFLIGHT", " 4"}, {"RINGLET_NCHUNKS_INFLIGHT", "+4"},
    {"RINGLET_TCP_INLINE_BYTES", "-1"},
    {"RINGLET_TRACE_MAX", "-3"},       {"RINGLET_NSOCKS_PERPEER", "0"},
    {"RINGLET_REDUCE_THREADS", "many"}, {"RINGLET_REDUCE_MIN_BYTES", "8"},
    {"RINGLET_SOCKET_BUFSIZE", "big"}, {"RINGLET_CHUNK_SIZE", "-5"},
    {"RINGLET_NCHUNKS_INFLIGHT", "0"}, {"RINGLET_BOOTSTRAP_PORT", "70000"},
    {"RINGLET_BOOTSTRAP_PORT", "0x7531"}, /* read in base 10: a hex value was passed, then ignored */
    {"RINGLET_DEVICE", "gpu"},         {"RINGLET_DEVICE_REDUCE", "fast"}, {"RINGLET_DEVICE_LANES", "1"},
    {"RINGLET_SIM_JITTER", "-1"},      {"RINGLET_SIM_DEVICES", "0"}, {"RINGLET_SIM_MEMORY", "-1"},
    {"RINGLET_SIM_IPC_DENY", "2"},     {"RINGLET_CHECK", "yes"},
    {"RINGLET_SIM_MEMOPS", "on"},      {"RINGLET_STREAM_HOLD", "spin"},
    {"RINGLET_SIM_PEER", "no"},        {"RINGLET_SIM_ON_DEADLOCK", "abort"},
    {"RINGLET_SIM_QUEUE_DEPTH", "1"},
    {"RINGLET_FAULT_KILL", "3:sned:1"}, {"RINGLET_FAULT_STOP", "0:send:1"},
    {"RINGLET_FAULT_KILL", "1:send:-1"}, {"RINGLET_FAULT_STOP", "1:recv: 3"},
    {"RINGLET_IB_GID_INDEX", "-2"},    {"RINGLET_IB_QPS_PER_PEER", "0"},
    {"RINGLET_IB_SLOT_SIZE", "128M"},  {"RINGLET_IB_NSLOTS", "1"},
    {"RINGLET_IB_TIMEOUT", "32"},      {"RINGLET_IB_RETRY_CNT", "8"},
    {"RINGLET_IB_SL", "16"},           {"RINGLET_IB_TC", "256"},
    {"RINGLET_IB_SPIN_US", "-1"},      {"RINGLET_IB_DISABLE", "yes"},
    {"RINGLET_CPU_ISA", "sse9"},       {"RINGLET_DDP_BCAST_BYTES", "1M"},
    {"RINGLET_DDP_DIRECT_BYTES", "-1"},
};
/* Taken as they are: names, paths, interface and device specifications. */
static const char *const env_free[] = {"RINGLET_SECRET",        "RINGLET_SOCKET_IFNAME", "RINGLET_TRACE",
                                       "RINGLET_HOSTID",        "RINGLET_IB_HCA",        "RINGLET_IB_LIBDIR"};

static int env_values(void) {
    for (size_t i = 0; i < sizeof env_bad / sizeof env_bad[0]; i++) {
        const char *var = env_bad[i][0], *val = env_bad[i][1];
        char want[128], what[160];
        snprintf(want, sizeof want, "%s=%s: must be ", var, val);
        snprintf(what, sizeof what, "ringlet_comm_init_env with %s=%s", var, val);
        for (int form = 0; form < 2; form++) { /* from the environment, and from a unique id */
            setenv("MASTER_ADDR", "127.0.0.1", 1);
            setenv("MASTER_PORT", "29733", 1);
            setenv("RANK", "0", 1);
            setenv("WORLD_SIZE", "1", 1);
            ringlet_unique_id_t id;
            ringlet_result_t rc = form ? ringlet_get_unique_id(&id) : RINGLET_SUCCESS;
            setenv(var, val, 1);
            ringlet_comm_t c = NULL;
            reset_msg(NULL, "");
            if (!rc) rc = form ? ringlet_comm_init_rank(&c, 1, id, 0) : ringlet_comm_init_env(&c);
            unsetenv(var);
            check(what, __LINE__, NULL, RINGLET_ERR_INVALID_ARGUMENT, want, rc);
            if (rc == RINGLET_SUCCESS && c) ringlet_comm_destroy(c);
            if (rc != RINGLET_SUCCESS && form == 0) printf("args init: %s=%s -> %s\n", var, val, msg_of(NULL));
        }
    }
    (void)env_free;
    return 0;
}

static int run_init(void) {
    strerror_checks();

    ringlet_unique_id_t id;
    memset(&id, 0, sizeof id);
    CHECK(NULL, RINGLET_ERR_INVALID_ARGUMENT, NULL, ringlet_get_unique_id(NULL));
    CHECK(NULL, RINGLET_ERR_INVALID_ARGUMENT, "token", ringlet_stop_token_create(NULL));
    ringlet_result_t rc = ringlet_get_unique_id(&id);
    if (rc != RINGLET_SUCCESS) {
        printf("FAIL args: ringlet_get_unique_id returned %d: %s\n", (int)rc, msg_of(NULL));
        return 1;
    }
    /* convert_async on overlapping host buffers: refused (a kernel's threads would read
     * what others wrote; the host loop too, for a wider destination), but the same buffer
     * of one element size, converted in place */
    static float cv[8];
    for (int i = 0; i < 8; i++) cv[i] = (float)(i * 5 - 9);
    CHECK(NULL, RINGLET_ERR_INVALID_ARGUMENT, "overlap",
          ringlet_convert_async(cv, RINGLET_FLOAT32, (uint16_t *)cv + 2, RINGLET_FLOAT16, 4, 1.0, NULL));
    CHECK(NULL, RINGLET_ERR_INVALID_ARGUMENT, "overlap",
          ringlet_convert_async(cv + 1, RINGLET_FLOAT32, cv, RINGLET_FLOAT32, 4, 1.0, NULL));
    CHECK(NULL, RINGLET_SUCCESS, NULL, ringlet_convert_async(cv, RINGLET_FLOAT32, cv, RINGLET_FLOAT32, 8, 2.0, NULL));
    int cv_ok = 1;
    for (int i = 0; i < 8; i++) cv_ok &= cv[i] == (float)(2 * (i * 5 - 9));
    EXPECT(cv_ok, "convert_async in place (float32, scale 2) gave a wrong result");
    ringlet_comm_t c = NULL;
    CHECK(NULL, RINGLET_ERR_INVALID_ARGUMENT, "comm", ringlet_comm_init_rank(NULL, 1, id, 0));
    CHECK(NULL, RINGLET_ERR_INVALID_ARGUMENT, "nranks", ringlet_comm_init_rank(&c, 0, id, 0));
    CHECK(NULL, RINGLET_ERR_INVALID_ARGUMENT, "nranks", ringlet_comm_init_rank(&c, -1, id, 0));
    CHECK(NULL, RINGLET_ERR_INVALID_ARGUMENT, "rank", ringlet_comm_init_rank(&c, 1, id, 1));
    CHECK(NULL, RINGLET_ERR_INVALID_ARGUMENT, "rank", ringlet_comm_init_rank(&c, 2, id, -1));
    CHECK(NULL, RINGLET_ERR_INVALID_ARGUMENT, "rank", ringlet_comm_init_rank(&c, 2, id, 2));
    CHECK(NULL, RINGLET_ERR_INVALID_ARGUMENT, "rank", ringlet_comm_init_rank(&c, 3, id, 1000));
    EXPECT(c == NULL, "a failed ringlet_comm_init_rank set *comm");

    /* ringlet_comm_init_rank_config: bad settings are refused at once, naming them; a
     * deadline of its own applies to init (RINGLET_TIMEOUT is 10 s here): rank 0 of 2,
     * whose peer never comes, gives up after the config's 1 s, not 10 s. */
    {
        ringlet_comm_config_t cfg = RINGLET_COMM_CONFIG_INIT;
        cfg.struct_size = 4;
        CHECK(NULL, RINGLET_ERR_INVALID_ARGUMENT, "struct_size", ringlet_comm_init_rank_config(&c, 1, id, 0, &cfg));
        cfg = (ringlet_comm_config_t)RINGLET_COMM_CONFIG_INIT;
        cfg.timeout_s = -1;
        CHECK(NULL, RINGLET_ERR_INVALID_ARGUMENT, "timeout_s", ringlet_comm_init_rank_config(&c, 1, id, 0, &cfg));
        cfg.timeout_s = 0.01;
        CHECK(NULL, RINGLET_ERR_INVALID_ARGUMENT, "timeout_s", ringlet_comm_init_rank_config(&c, 1, id, 0, &cfg));
        cfg.timeout_s = NAN;
        CHECK(NULL, RINGLET_ERR_INVALID_ARGUMENT, "timeout_s", ringlet_comm_init_rank_config(&c, 1, id, 0, &cfg));
        CHECK(NULL, RINGLET_ERR_INVALID_ARGUMENT, "rank", ringlet_comm_init_rank_config(&c, 1, id, 3, NULL));
        EXPECT(c == NULL, "a failed ringlet_comm_init_rank_config set *comm");
        ringlet_unique_id_t lone;
        if (ringlet_get_unique_id(&lone) != RINGLET_SUCCESS) {
            fail(__LINE__, "ringlet_get_unique_id for the deadline case: %s", msg_of(NULL));
        } else {
            cfg.timeout_s = 1.0;
            double t0 = now_s();
            CHECK(NULL, RINGLET_ERR_TIMEOUT, "1 s", ringlet_comm_init_rank_config(&c, 2, lone, 0, &cfg));
            double dt = now_s() - t0;
            if (dt < 0.9 || dt > 5.0)
                fail(__LINE__, "init with config timeout_s 1 and no peer took %.2f s (want about 1 s; RINGLET_TIMEOUT=10)", dt);
            EXPECT(c == NULL, "a timed-out ringlet_comm_init_rank_config set *comm");
        }
    }

    /* garbage unique ids: refused locally (quickly), the message says "unique id" */
    for (int g = 0; g < 4; g++) {
        ringlet_unique_id_t bad;
        uint64_t z = 0x9E3779B97F4A7C15ull * (uint64_t)(g + 1);
        for (int i = 0; i < RINGLET_UNIQUE_ID_BYTES; i++) {
            z ^= z << 13, z ^= z >> 7, z ^= z << 17;
            bad.internal[i] = g == 0 ? 0 : g == 1 ? (char)0xff : (char)(z >> 24);
        }
        if (g == 3) { /* a real id with the first 16 bytes garbled */
            bad = id;
            for (int i = 0; i < 16; i++) bad.internal[i] ^= (char)0x5a;
        }
        for (int r = 1; r >= 0; r--) {
            char what[128];
            snprintf(what, sizeof what, "ringlet_comm_init_rank(nranks 2, rank %d) with a %s unique id", r,
                     g == 0 ? "zero" : g == 1 ? "0xff" : g == 2 ? "random" : "garbled");
            double t = now_s();
            reset_msg(NULL, "unique id");
            c = NULL;
            rc = ringlet_comm_init_rank(&c, 2, bad, r);
            check(what, __LINE__, NULL, -1, "unique id", rc);
            if (rc == RINGLET_SUCCESS && c) ringlet_comm_abort(c);
            EXPECT(c == NULL || rc == RINGLET_SUCCESS, "a failed ringlet_comm_init_rank set *comm");
            if (now_s() - t > 3.0) fail(__LINE__, "%s took more than 3 s", what);
        }
    }

    /* the id is still good after those errors: a real one-rank communicator */
    c = NULL;
    rc = ringlet_comm_init_rank(&c, 1, id, 0);
    if (rc != RINGLET_SUCCESS || !c) {
        g_failed++;
        printf("FAIL args: ringlet_comm_init_rank(nranks 1, rank 0) after the argument errors returned %d: %s\n",
               (int)rc, msg_of(NULL));
    } else {
        int n = -1, r = -1;
        EXPECT(ringlet_comm_size(c, &n) == RINGLET_SUCCESS && n == 1, "ringlet_comm_size of a 1-rank comm");
        EXPECT(ringlet_comm_rank(c, &r) == RINGLET_SUCCESS && r == 0, "ringlet_comm_rank of a 1-rank comm");
        int32_t v[5] = {1, -2, 3, 2147483647, -2147483647 - 1}, w[5] = {0};
        rc = ringlet_allreduce(v, w, 5, RINGLET_INT32, RINGLET_SUM, c, NULL);
        EXPECT(rc == RINGLET_SUCCESS && memcmp(v, w, sizeof v) == 0, "1-rank allreduce sum");
        rc = ringlet_allreduce(v, v, 5, RINGLET_INT32, RINGLET_AVG, c, NULL);
        EXPECT(rc == RINGLET_SUCCESS && memcmp(v, w, sizeof v) == 0, "1-rank in-place allreduce avg");
        g_rank = 0, g_P = 1;
        /* a few argument errors on a live communicator of one rank */
        args_t a = valid_args();
        a.dt = (ringlet_datatype_t)99;
        check_call(K_ALLREDUCE, &a, c, c, RINGLET_ERR_INVALID_ARGUMENT, "datatype", "datatype 99", __LINE__);
        a = valid_args();
        a.peer = 0;
        check_call(K_SEND, &a, c, c, RINGLET_ERR_INVALID_ARGUMENT, "peer", "peer == own rank", __LINE__);
        rc = ringlet_comm_destroy(c);
        EXPECT(rc == RINGLET_SUCCESS, "ringlet_comm_destroy of a 1-rank comm");
    }

    /* init from a broken launcher environment: an error, never a crash or a hang */
    setenv("RINGLET_SECRET", "args-test-secret", 1);
    env_case("no launcher variables at all", NULL, NULL, 0, "RANK and WORLD_SIZE");
    env_case("WORLD_SIZE=0", "0", "0", 1, "WORLD_SIZE=0: the world size must be at least 1");
    env_case("RANK=2 WORLD_SIZE=2", "2", "2", 1, "RANK=2 is out of range for WORLD_SIZE=2: ranks run from 0 to 1");
    env_case("RANK=-1 WORLD_SIZE=2", "-1", "2", 1, "RANK=-1 is not a number");
    env_case("WORLD_SIZE=abc", "0", "abc", 1, "WORLD_SIZE=abc is not a number");
    env_case("RANK=x1 WORLD_SIZE=2", "x1", "2", 1, "RANK=x1 is not a number");
    env_case("RANK without WORLD_SIZE", "0", NULL, 1, "RANK and WORLD_SIZE");
    /* torchrun's MASTER_PORT holds its store: ringlet's rank 0 takes the next one, which 65535 lacks */
    setenv("TORCHELASTIC_RUN_ID", "args", 1);
    for (int i = 0; launcher_vars[i]; i++) unsetenv(launcher_vars[i]);
    setenv("MASTER_ADDR", "127.0.0.1", 1);
    setenv("MASTER_PORT", "65535", 1);
    setenv("RANK", "0", 1);
    setenv("WORLD_SIZE", "1", 1);
    ringlet_comm_t tc = NULL;
    reset_msg(NULL, "");
    ringlet_result_t trc = ringlet_comm_init_env(&tc);
    unsetenv("TORCHELASTIC_RUN_ID");
    check("ringlet_comm_init_env under torchrun with MASTER_PORT=65535", __LINE__, NULL, RINGLET_ERR_INVALID_ARGUMENT,
          "MASTER_PORT=65535 under torchrun", trc);
    if (trc == RINGLET_SUCCESS && tc) ringlet_comm_destroy(tc);
    return env_values();
}

/* ---------------------------------------------------------------- p2 mode */

/* With a device (RINGLET_DEVICE=sim, or a GPU): a reduction or a conversion of misaligned
 * device memory is refused before any kernel sees it (on a GPU a misaligned load is a
 * sticky fault: the device would be unusable afterwards), and the device still works. */
static void device_checks(ringlet_comm_t comm) {
    int ndev = 0;
    if (ringlet_device_count(&ndev) != RINGLET_SUCCESS || ndev < 1) {
        printf("args p2: rank %d: no device, device checks skipped\n", g_rank);
        return;
    }
    enum { N = 515 };
    char *dbuf = NULL;
    static float hv[N], hw[N];
    if (ringlet_mem_alloc((void **)&dbuf, 2 * N * sizeof(float) + 64) != RINGLET_SUCCESS) {
        fail(__LINE__, "ringlet_mem_alloc: %s", msg_of(NULL));
        return;
    }
    float *dv = (float *)(dbuf + 64);
    CHECK(comm, RINGLET_ERR_INVALID_ARGUMENT, "sendbuf",
          ringlet_allreduce(dbuf + 2, dv, N, RINGLET_FLOAT32, RINGLET_SUM, comm, NULL));
    CHECK(comm, RINGLET_ERR_INVALID_ARGUMENT, "recvbuf",
          ringlet_reduce_scatter(dv, dbuf + 2, 1, RINGLET_FLOAT32, RINGLET_MAX, comm, NULL));
    CHECK(NULL, RINGLET_ERR_INVALID_ARGUMENT, "src",
          ringlet_convert_async(dv, RINGLET_FLOAT32, dbuf + 1, RINGLET_BFLOAT16, 4, 1.0, NULL));
    /* Device memory with pageable host memory: a kernel would fault on it (sticky, on a GPU
     * and in the simulator), so it is refused; with pinned memory it runs. */
    static uint16_t pageable[8];
    CHECK(NULL, RINGLET_ERR_INVALID_ARGUMENT, "pageable",
          ringlet_convert_async(pageable, RINGLET_FLOAT16, dv, RINGLET_FLOAT32, 8, 1.0, NULL));
    CHECK(NULL, RINGLET_ERR_INVALID_ARGUMENT, "pageable",
          ringlet_convert_async(dv, RINGLET_FLOAT32, pageable, RINGLET_BFLOAT16, 8, 1.0, NULL));
    uint16_t *pinned = NULL;
    float back[8];
    for (int i = 0; i < 8; i++) hv[i] = (float)(i * 3 - 7 + g_rank) * 0.5f;
    ringlet_result_t prc = ringlet_host_alloc((void **)&pinned, 8 * sizeof *pinned);
    if (prc == RINGLET_SUCCESS) prc = ringlet_memcpy_async(dv, hv, 8 * sizeof(float), NULL);
    if (prc == RINGLET_SUCCESS) prc = ringlet_convert_async(pinned, RINGLET_BFLOAT16, dv, RINGLET_FLOAT32, 8, 2.0, NULL);
    if (prc == RINGLET_SUCCESS) prc = ringlet_stream_synchronize(NULL);
    if (prc == RINGLET_SUCCESS) prc = ringlet_convert_async(back, RINGLET_FLOAT32, pinned, RINGLET_BFLOAT16, 8, 1.0, NULL);
    int pok = prc == RINGLET_SUCCESS;
    for (int i = 0; pok && i < 8; i++) pok = back[i] == 2.0f * hv[i]; /* small halves: exact in bfloat16 */
    EXPECT(pok, "a conversion from device memory into pinned host memory failed or gave a wrong result");
    if (pinned) ringlet_host_free(pinned);
    for (int i = 0; i < N; i++) hv[i] = (float)((i * 7 + g_rank * 13) % 101) - 50.0f;
    ringlet_result_t rc = ringlet_memcpy_async(dv, hv, sizeof hv, NULL);
    if (rc == RINGLET_SUCCESS) rc = ringlet_allreduce(dv, dv, N, RINGLET_FLOAT32, RINGLET_SUM, comm, NULL);
    if (rc == RINGLET_SUCCESS) rc = ringlet_memcpy_async(hw, dv, sizeof hw, NULL);
    if (rc == RINGLET_SUCCESS) rc = ringlet_stream_synchronize(NULL);
    int ok = rc == RINGLET_SUCCESS;
    for (int i = 0; ok && i < N; i++) {
        float want = 0; /* small integers: exact in any order */
        for (int r = 0; r < g_P; r++) want += (float)((i * 7 + r * 13) % 101) - 50.0f;
        ok = hw[i] == want;
    }
    if (rc != RINGLET_SUCCESS) printf("rank %d: device allreduce: %d (%s)\n", g_rank, (int)rc, msg_of(comm));
    EXPECT(ok, "a device all-reduce after the misaligned calls failed or gave a wrong result");
    EXPECT(ringlet_mem_free(dbuf) == RINGLET_SUCCESS, "ringlet_mem_free of the device buffer");
    printf("args p2: rank %d: device checks done\n", g_rank);
}

static int run_p2(void) {
    ringlet_comm_t comm = NULL;
    ringlet_result_t rc = ringlet_comm_init_env(&comm);
    if (rc != RINGLET_SUCCESS) {
        printf("FAIL args: ringlet_comm_init_env returned %d: %s\n", (int)rc, msg_of(NULL));
        return 1;
    }
    ringlet_comm_rank(comm, &g_rank);
    ringlet_comm_size(comm, &g_P);
    if (g_P < 2) {
        printf("FAIL args: p2 mode needs at least 2 ranks\n");
        return 1;
    }
    const int me = g_rank, P = g_P;
    for (int i = 0; i < 64; i++) g_s[i] = (float)(i + me), g_r[i] = -1.0f;
    args_t a;

    /* NULL comm: every call; the thread's message names "comm" */
    for (int k = 0; k < K_NUM; k++) {
        a = valid_args();
        check_call(k, &a, NULL, NULL, RINGLET_ERR_INVALID_ARGUMENT, "comm", "a NULL comm", __LINE__);
    }
    {
        int x;
        CHECK(NULL, RINGLET_ERR_INVALID_ARGUMENT, "comm", ringlet_comm_rank(NULL, &x));
        CHECK(NULL, RINGLET_ERR_INVALID_ARGUMENT, "comm", ringlet_comm_size(NULL, &x));
        CHECK(NULL, RINGLET_ERR_INVALID_ARGUMENT, "comm", ringlet_comm_local_rank(NULL, &x));
        CHECK(NULL, RINGLET_ERR_INVALID_ARGUMENT, "comm", ringlet_comm_local_size(NULL, &x));
        CHECK(NULL, RINGLET_ERR_INVALID_ARGUMENT, "comm", ringlet_comm_get_async_error(NULL));
        CHECK(comm, RINGLET_ERR_INVALID_ARGUMENT, NULL, ringlet_comm_rank(comm, NULL));
        CHECK(comm, RINGLET_ERR_INVALID_ARGUMENT, NULL, ringlet_comm_size(comm, NULL));
        CHECK(comm, RINGLET_ERR_INVALID_ARGUMENT, NULL, ringlet_comm_local_rank(comm, NULL));
        CHECK(comm, RINGLET_ERR_INVALID_ARGUMENT, NULL, ringlet_comm_local_size(comm, NULL));
        /* destroy/abort of NULL: no crash; success (as NCCL) or an argument error */
        rc = ringlet_comm_destroy(NULL);
        EXPECT(rc == RINGLET_SUCCESS || rc == RINGLET_ERR_INVALID_ARGUMENT, "ringlet_comm_destroy(NULL)");
        rc = ringlet_comm_abort(NULL);
        EXPECT(rc == RINGLET_SUCCESS || rc == RINGLET_ERR_INVALID_ARGUMENT, "ringlet_comm_abort(NULL)");
    }

    /* NULL buffers with count > 0 (root = own rank, so every rank is the root) */
    const int with_send[] = {K_ALLREDUCE, K_BROADCAST, K_REDUCE, K_ALLGATHER, K_REDUCE_SCATTER, K_SEND};
    const int with_recv[] = {K_ALLREDUCE, K_BROADCAST, K_REDUCE, K_ALLGATHER, K_REDUCE_SCATTER, K_RECV};
    for (int i = 0; i < 6; i++) {
        a = valid_args();
        a.s = NULL;
        check_call(with_send[i], &a, comm, comm, RINGLET_ERR_INVALID_ARGUMENT, "sendbuf", "sendbuf NULL, count 4",
                   __LINE__);
        a = valid_args();
        a.r = NULL;
        check_call(with_recv[i], &a, comm, comm, RINGLET_ERR_INVALID_ARGUMENT, "recvbuf", "recvbuf NULL, count 4",
                   __LINE__);
    }

    /* datatype out of range */
    const int bad_dt[] = {99, -1, RINGLET_NUM_DATATYPES};
    for (int k = 0; k < K_NUM; k++) {
        if (k == K_BARRIER) continue;
        for (int i = 0; i < 3; i++) {
            char d[64];
            snprintf(d, sizeof d, "datatype %d", bad_dt[i]);
            a = valid_args();
            a.dt = (ringlet_datatype_t)bad_dt[i];
            check_call(k, &a, comm, comm, RINGLET_ERR_INVALID_ARGUMENT, "datatype", d, __LINE__);
        }
    }

    /* op out of range */
    const int bad_op[] = {99, -1, RINGLET_NUM_OPS};
    const int reducing[] = {K_ALLREDUCE, K_REDUCE, K_REDUCE_SCATTER};
    for (int k = 0; k < 3; k++) {
        for (int i = 0; i < 3; i++) {
            char d[64];
            snprintf(d, sizeof d, "op %d", bad_op[i]);
            a = valid_args();
            a.op = (ringlet_op_t)bad_op[i];
            check_call(reducing[k], &a, comm, comm, RINGLET_ERR_INVALID_ARGUMENT, "op", d, __LINE__);
        }
    }

    /* root out of range */
    const int bad_root[] = {-1, P, 1000};
    for (int i = 0; i < 3; i++) {
        char d[64];
        snprintf(d, sizeof d, "root %d", bad_root[i]);
        for (int k = K_BROADCAST; k <= K_REDUCE; k++) {
            a = valid_args();
            a.root = bad_root[i];
            check_call(k, &a, comm, comm, RINGLET_ERR_INVALID_ARGUMENT, "root", d, __LINE__);
        }
    }

    /* peer out of range or own rank */
    const int bad_peer[] = {-1, P, me, 1000};
    for (int i = 0; i < 4; i++) {
        char d[64];
        snprintf(d, sizeof d, "peer %d%s", bad_peer[i], bad_peer[i] == me ? " (own rank)" : "");
        for (int k = K_SEND; k <= K_RECV; k++) {
            a = valid_args();
            a.peer = bad_peer[i];
            check_call(k, &a, comm, comm, RINGLET_ERR_INVALID_ARGUMENT, "peer", d, __LINE__);
        }
    }

    /* counts whose byte size overflows size_t (the small buffers must never be touched) */
    for (int k = 0; k < K_NUM; k++) {
        if (k == K_BARRIER) continue;
        a = valid_args();
        a.count = SIZE_MAX / 2;
        check_call(k, &a, comm, comm, RINGLET_ERR_INVALID_ARGUMENT, "count", "count SIZE_MAX/2 of float32", __LINE__);
        a.count = SIZE_MAX / 4;
        a.dt = RINGLET_FLOAT64;
        check_call(k, &a, comm, comm, RINGLET_ERR_INVALID_ARGUMENT, "count", "count SIZE_MAX/4 of float64", __LINE__);
        a.count = SIZE_MAX;
        a.dt = RINGLET_FLOAT16;
        check_call(k, &a, comm, comm, RINGLET_ERR_INVALID_ARGUMENT, "count", "count SIZE_MAX of float16", __LINE__);
    }
    /* count * size fits, nranks * count * size does not */
    for (int k = K_ALLGATHER; k <= K_REDUCE_SCATTER; k++) {
        a = valid_args();
        a.count = SIZE_MAX / 4 / (size_t)P + 1;
        check_call(k, &a, comm, comm, RINGLET_ERR_INVALID_ARGUMENT, "count",
                   "count SIZE_MAX/4/nranks+1 of float32 (nranks*count*4 overflows)", __LINE__);
        a.count = SIZE_MAX / (size_t)P + 1;
        a.dt = RINGLET_INT8;
        check_call(k, &a, comm, comm, RINGLET_ERR_INVALID_ARGUMENT, "count",
                   "count SIZE_MAX/nranks+1 of int8 (nranks*count overflows)", __LINE__);
    }

    /* buffers not aligned to their elements: refused by the calls that reduce (reduce.h's
     * kernels load whole elements); misaligned by a byte for float16, by 2 for float32 */
    for (int k = 0; k < 3; k++) {
        for (int h = 0; h < 2; h++) {
            const size_t skew = h ? 1 : 2;
            char d[96];
            a = valid_args();
            if (h) a.dt = RINGLET_FLOAT16;
            a.s = (const char *)g_s + skew;
            snprintf(d, sizeof d, "sendbuf %zu bytes past a %s element", skew, h ? "float16" : "float32");
            check_call(reducing[k], &a, comm, comm, RINGLET_ERR_INVALID_ARGUMENT, "sendbuf", d, __LINE__);
            a.s = g_s;
            a.r = (char *)g_r + skew;
            snprintf(d, sizeof d, "recvbuf %zu bytes past a %s element", skew, h ? "float16" : "float32");
            check_call(reducing[k], &a, comm, comm, RINGLET_ERR_INVALID_ARGUMENT, "recvbuf", d, __LINE__);
        }
    }
    /* sendbuf and recvbuf overlapping other than in the in-place form (a float past it):
     * refused, since the result would be wrong data (and a device copy between them is
     * undefined in CUDA) */
    {
        const int me4 = g_rank * 4; /* this rank's block, 4 elements each */
        for (int k = 0; k < K_NUM; k++) {
            if (k == K_BARRIER || k == K_SEND || k == K_RECV) continue;
            a = valid_args();
            if (k == K_ALLGATHER) a.s = g_r + me4 + 1, a.r = g_r;
            else if (k == K_REDUCE_SCATTER) a.s = g_s, a.r = (float *)g_s + me4 + 1;
            else a.s = g_s, a.r = (float *)g_s + 1;
            check_call(k, &a, comm, comm, RINGLET_ERR_INVALID_ARGUMENT, "overlap",
                       "sendbuf and recvbuf a float apart from the in-place form", __LINE__);
        }
        if (g_rank != 0) { /* sendbuf == recvbuf is the in-place form of rank 0 only */
            a = valid_args();
            a.s = g_r;
            check_call(K_ALLGATHER, &a, comm, comm, RINGLET_ERR_INVALID_ARGUMENT, "overlap",
                       "sendbuf == recvbuf on a rank other than 0", __LINE__);
        }
        CHECK(comm, RINGLET_ERR_INVALID_ARGUMENT, "overlap",
              ringlet_alltoall(g_s, (float *)g_s + 1, 4, RINGLET_FLOAT32, comm, NULL));
        CHECK(comm, RINGLET_ERR_INVALID_ARGUMENT, "overlap",
              ringlet_gather(g_r + me4 + 1, g_r, 4, RINGLET_FLOAT32, g_rank, comm, NULL));
        CHECK(comm, RINGLET_ERR_INVALID_ARGUMENT, "overlap",
              ringlet_scatter(g_s, (float *)g_s + me4 + 1, 4, RINGLET_FLOAT32, g_rank, comm, NULL));
    }
    {
        uint16_t hv[4] = {0};
        CHECK(NULL, RINGLET_ERR_INVALID_ARGUMENT, "dst",
              ringlet_convert_async((char *)g_r + 2, RINGLET_FLOAT32, hv, RINGLET_FLOAT16, 2, 1.0, NULL));
        CHECK(NULL, RINGLET_ERR_INVALID_ARGUMENT, "src",
              ringlet_convert_async(g_r, RINGLET_FLOAT32, (char *)hv + 1, RINGLET_FLOAT16, 2, 1.0, NULL));
    }

    /* NULL request pointer for the i-forms */
    for (int k = 0; k < K_NUM; k++) {
        char what[96];
        snprintf(what, sizeof what, "ringlet_i%s with a NULL request pointer", kname[k]);
        a = valid_args();
        reset_msg(comm, "request");
        rc = call(k, 1, &a, comm, NULL);
        check(what, __LINE__, comm, RINGLET_ERR_INVALID_ARGUMENT, "request", rc);
    }
    {
        int done = 7;
        ringlet_request_t nullreq = NULL;
        CHECK(NULL, RINGLET_ERR_INVALID_ARGUMENT, NULL, ringlet_test(NULL, &done));
        CHECK(NULL, RINGLET_ERR_INVALID_ARGUMENT, NULL, ringlet_wait(NULL));
        /* *request == NULL: success (nothing to wait for) or an argument error; never a crash */
        rc = ringlet_wait(&nullreq);
        EXPECT(rc == RINGLET_SUCCESS || rc == RINGLET_ERR_INVALID_ARGUMENT, "ringlet_wait(&NULL request)");
        rc = ringlet_test(&nullreq, &done);
        EXPECT(rc == RINGLET_SUCCESS || rc == RINGLET_ERR_INVALID_ARGUMENT, "ringlet_test(&NULL request)");
    }

    /* the communicator is still usable */
    rc = ringlet_comm_get_async_error(comm);
    EXPECT(rc == RINGLET_SUCCESS, "ringlet_comm_get_async_error after argument errors is not success");
    {
        enum { N = 1000 };
        static int32_t v[N], w[N];
        for (int i = 0; i < N; i++) v[i] = i * 3 + me;
        rc = ringlet_allreduce(v, w, N, RINGLET_INT32, RINGLET_SUM, comm, NULL);
        int ok = rc == RINGLET_SUCCESS;
        for (int i = 0; ok && i < N; i++) ok = w[i] == (int32_t)(i * 3 * P + P * (P - 1) / 2);
        if (!ok) printf("rank %d: allreduce returned %d (%s)\n", me, (int)rc, msg_of(comm));
        EXPECT(ok, "a real allreduce after the argument errors failed or gave a wrong result");
        ringlet_request_t req = NULL;
        rc = ringlet_iallreduce(v, v, N, RINGLET_INT32, RINGLET_MAX, comm, NULL, &req);
        if (rc == RINGLET_SUCCESS) rc = ringlet_wait(&req);
        ok = rc == RINGLET_SUCCESS && req == NULL;
        for (int i = 0; ok && i < N; i++) ok = v[i] == i * 3 + P - 1;
        EXPECT(ok, "a real iallreduce (max, in place) after the argument errors failed or gave a wrong result");
        /* count 0 with NULL buffers is no error */
        CHECK(comm, RINGLET_SUCCESS, NULL, ringlet_allreduce(NULL, NULL, 0, RINGLET_FLOAT32, RINGLET_SUM, comm, NULL));
        CHECK(comm, RINGLET_SUCCESS, NULL, ringlet_broadcast(NULL, NULL, 0, RINGLET_FLOAT32, 0, comm, NULL));
        CHECK(comm, RINGLET_SUCCESS, NULL, ringlet_reduce(NULL, NULL, 0, RINGLET_FLOAT32, RINGLET_SUM, 0, comm, NULL));
        CHECK(comm, RINGLET_SUCCESS, NULL, ringlet_allgather(NULL, NULL, 0, RINGLET_FLOAT32, comm, NULL));
        CHECK(comm, RINGLET_SUCCESS, NULL,
              ringlet_reduce_scatter(NULL, NULL, 0, RINGLET_FLOAT32, RINGLET_SUM, comm, NULL));
        rc = ringlet_barrier(comm, NULL);
        EXPECT(rc == RINGLET_SUCCESS, "barrier after the argument errors");
        /* where nothing reduces, any alignment is fine: an all-gather a byte off, each rank's
         * block its own */
        static int32_t g[N + 1], *gall;
        gall = malloc(((size_t)P * N + 1) * sizeof *gall);
        for (int i = 0; i < N; i++) {
            int32_t x = i * 5 + me * 100003;
            memcpy((char *)g + 1 + (size_t)i * sizeof x, &x, sizeof x);
        }
        rc = gall ? ringlet_allgather((char *)g + 1, (char *)gall + 1, N, RINGLET_INT32, comm, NULL) : RINGLET_ERR_SYSTEM;
        ok = rc == RINGLET_SUCCESS;
        for (int r = 0; ok && r < P; r++) {
            int32_t x;
            for (int i = 0; ok && i < N; i++) {
                memcpy(&x, (char *)gall + 1 + ((size_t)r * N + (size_t)i) * sizeof x, sizeof x);
                ok = x == i * 5 + r * 100003;
            }
        }
        free(gall);
        EXPECT(ok, "an all-gather of buffers a byte off their alignment failed or gave a wrong result");
        /* the in-place forms of all-gather and reduce-scatter (their buffers overlap) work */
        int32_t *ip = malloc((size_t)P * N * sizeof *ip);
        for (int i = 0; ip && i < N; i++) ip[(size_t)me * N + (size_t)i] = i * 7 + me * 1009;
        rc = ip ? ringlet_allgather(ip + (size_t)me * N, ip, N, RINGLET_INT32, comm, NULL) : RINGLET_ERR_SYSTEM;
        ok = rc == RINGLET_SUCCESS;
        for (int r = 0; ok && r < P; r++)
            for (int i = 0; ok && i < N; i++) ok = ip[(size_t)r * N + (size_t)i] == i * 7 + r * 1009;
        EXPECT(ok, "an in-place all-gather (sendbuf == recvbuf + rank * count) failed or gave a wrong result");
        for (size_t i = 0; ip && i < (size_t)P * N; i++) ip[i] = (int32_t)(i * 3 + (size_t)me);
        rc = ip ? ringlet_reduce_scatter(ip, ip + (size_t)me * N, N, RINGLET_INT32, RINGLET_SUM, comm, NULL)
                : RINGLET_ERR_SYSTEM;
        ok = rc == RINGLET_SUCCESS;
        for (int i = 0; ok && i < N; i++)
            ok = ip[(size_t)me * N + (size_t)i] == (int32_t)(((size_t)me * N + (size_t)i) * 3 * (size_t)P) + P * (P - 1) / 2;
        EXPECT(ok, "an in-place reduce-scatter (recvbuf == sendbuf + rank * count) failed or gave a wrong result");
        free(ip);
    }
    device_checks(comm);
    /* Each rank alone from here: a communicator of its own for the overlap below (its failure
     * would be the peers' too on comm, where a peer still working would see it first), then,
     * once every rank is past its last call with the others, the abort of comm. */
    ringlet_comm_t self = NULL;
    rc = ringlet_comm_split(comm, me, 0, &self);
    EXPECT(rc == RINGLET_SUCCESS && self, "a split into one communicator per rank failed");
    EXPECT(ranks_meet("split", me, P), "the ranks did not meet after the split (ARGS_SYNC unset, or a rank is missing)");
    if (self) {
        /* a group's send to this rank itself and its receive overlapping (a float apart): found
         * where the group runs, so it fails the communicator, as its other mismatches do */
        reset_msg(NULL, "overlap"); /* before the group: CHECK's own reset would join it */
        rc = ringlet_group_start();
        if (rc == RINGLET_SUCCESS) rc = ringlet_send(g_s, 4, RINGLET_FLOAT32, 0, self, NULL);
        if (rc == RINGLET_SUCCESS) rc = ringlet_recv((float *)g_s + 1, 4, RINGLET_FLOAT32, 0, self, NULL);
        ringlet_result_t grc = ringlet_group_end();
        EXPECT(rc == RINGLET_SUCCESS, "the group's start, send or receive to this rank itself failed");
        check("a group's send to this rank itself and its receive a float apart", __LINE__, NULL,
              RINGLET_ERR_INVALID_ARGUMENT, "overlap", grc);
        EXPECT(ringlet_comm_destroy(self) == RINGLET_SUCCESS, "destroy of the failed communicator of one rank failed");
    }

    /* abort: every call afterwards is an INVALID_USAGE naming the abort; destroy succeeds */
    {
        double t = now_s();
        rc = ringlet_comm_abort(comm);
        EXPECT(rc == RINGLET_SUCCESS, "ringlet_comm_abort did not return success");
        if (now_s() - t > 5.0) fail(__LINE__, "ringlet_comm_abort took more than 5 s");
        for (int k = 0; k < K_NUM; k++) {
            a = valid_args();
            check_call(k, &a, comm, comm, RINGLET_ERR_INVALID_USAGE, "abort", "valid arguments after abort",
                       __LINE__);
        }
        EXPECT(ringlet_comm_get_async_error(comm) != RINGLET_SUCCESS,
               "ringlet_comm_get_async_error after abort is success");
        t = now_s();
        rc = ringlet_comm_destroy(comm);
        EXPECT(rc == RINGLET_SUCCESS, "ringlet_comm_destroy after ringlet_comm_abort did not return success");
        if (now_s() - t > 5.0) fail(__LINE__, "ringlet_comm_destroy after abort took more than 5 s");
    }
    return 0;
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    g_verbose = getenv("ARGS_VERBOSE") && atoi(getenv("ARGS_VERBOSE")) > 0;
    const char *mode = argc > 1 ? argv[1] : "";
    int rc;
    if (strcmp(mode, "init") == 0)
        rc = run_init();
    else if (strcmp(mode, "p2") == 0)
        rc = run_p2();
    else {
        fprintf(stderr, "usage: args init|p2\n");
        return 2;
    }
    printf("args %s: rank %d: %ld checks, %ld failed\n", mode, g_rank, g_checks, g_failed + rc);
    return rc || g_failed ? 1 : 0;
}
