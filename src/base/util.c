#include "util.h"

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "log.h"

double rl_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void rl_sleep_ms(int ms) {
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

void rl_nap_backoff(long *us) {
    struct timespec ts = {0, *us * 1000};
    nanosleep(&ts, NULL);
    *us = *us * 2 > 1000 ? 1000 : *us * 2;
}

void rl_cond_wait_ms(pthread_cond_t *cv, pthread_mutex_t *mu, long ms) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    ts.tv_sec += ms / 1000;
    ts.tv_nsec += (ms % 1000) * 1000000L;
    if (ts.tv_nsec >= 1000000000L) ts.tv_sec++, ts.tv_nsec -= 1000000000L;
    pthread_cond_clockwait(cv, mu, CLOCK_MONOTONIC, &ts);
}

int rl_process_gone(int pid) {
    if (pid <= 0) return 0;
    if (kill(pid, 0) != 0) return errno == ESRCH;
    char path[64], buf[256];
    snprintf(path, sizeof path, "/proc/%d/stat", pid);
    FILE *f = fopen(path, "r");
    if (!f) return kill(pid, 0) != 0 && errno == ESRCH; /* no /proc here: it was alive at the kill */
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    const char *close_paren = strrchr(buf, ')'); /* the state follows the command name */
    return close_paren && close_paren[1] == ' ' && (close_paren[2] == 'Z' || close_paren[2] == 'X');
}

unsigned long long rl_pid_ns(void) {
    /* Asked once per process (a child forked into a new namespace asks again). */
    static _Atomic long long cached_pid = -1;
    static _Atomic unsigned long long cached_ns;
    long long me = (long long)getpid();
    if (atomic_load(&cached_pid) == me) return atomic_load(&cached_ns);
    struct stat st;
    unsigned long long ns = stat("/proc/self/ns/pid", &st) == 0 ? (unsigned long long)st.st_ino : 0;
    atomic_store(&cached_ns, ns);
    atomic_store(&cached_pid, me);
    return ns;
}

int rl_process_gone_in(int pid, unsigned long long ns) {
    unsigned long long mine = rl_pid_ns();
    if (ns != mine && ns && mine) return 0;
    return rl_process_gone(pid);
}

int rl_parse_int(const char *s, long long lo, long long hi, long long *out) {
    char *end;
    /* Decimal (a leading 0 too: "010" is ten, not C's octal eight) or 0x hex; no blanks
     * or '+' before it (strtoll would skip them). */
    const char *digits = s[0] == '-' ? s + 1 : s;
    if (!(digits[0] >= '0' && digits[0] <= '9')) return -1;
    int hex = digits[0] == '0' && (digits[1] == 'x' || digits[1] == 'X');
    errno = 0;
    long long v = strtoll(s, &end, hex ? 16 : 10);
    long long mul = 1;
    if (*end == 'k' || *end == 'K') mul = 1LL << 10, end++;
    else if (*end == 'm' || *end == 'M') mul = 1LL << 20, end++;
    else if (*end == 'g' || *end == 'G') mul = 1LL << 30, end++;
    /* Bounds of v first, so that v * mul cannot overflow (a large negative number with
     * a suffix did, e.g. "-30000000002G"). */
    if (errno || end == s || *end || v > LLONG_MAX / mul || v < LLONG_MIN / mul) return -1;
    v *= mul;
    if (v < lo || v > hi) return -1;
    *out = v;
    return 0;
}

int rl_parse_double(const char *s, double lo, double hi, double *out) {
    char *end;
    double v = strtod(s, &end);
    if (end == s || *end || !(v >= lo && v <= hi)) return -1;
    *out = v;
    return 0;
}

/* NCCL's names of the variables whose meaning and values ringlet's mirror: a launch
 * script or cluster environment written for NCCL holds for ringlet too (ringlet's own
 * wins where both are set). NCCL_IB_SL and NCCL_IB_TC of -1 are NCCL's "not set". Left
 * out: NCCL_IB_GID_INDEX (NCCL applies it on RoCE only; ringlet's turns on GRH on
 * InfiniBand too), NCCL_IB_QPS_PER_CONNECTION (NCCL allows 128, ringlet 16), and those
 * whose meaning differs (NCCL_ALGO, NCCL_PROTO, NCCL_BUFFSIZE, the socket thread counts).
 * tests/run.sh and tests/gpu/run.sh unset these NCCL names: a name added here goes there too. */
static const struct {
    const char *ours, *nccl;
    int minus_one_unset;
} g_nccl_names[] = {
    {"RINGLET_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME", 0}, /* the same syntax (netif.h) */
    {"RINGLET_IB_HCA", "NCCL_IB_HCA", 0},               /* the same syntax (ib_verbs.h) */
    {"RINGLET_IB_DISABLE", "NCCL_IB_DISABLE", 0},
    {"RINGLET_SHM_DISABLE", "NCCL_SHM_DISABLE", 0},
    {"RINGLET_CUDA_IPC_DISABLE", "NCCL_P2P_DISABLE", 0}, /* NCCL's P2P inside a host is cuda_ipc */
    {"RINGLET_IB_TIMEOUT", "NCCL_IB_TIMEOUT", 0},
    {"RINGLET_IB_RETRY_CNT", "NCCL_IB_RETRY_CNT", 0},
    {"RINGLET_IB_SL", "NCCL_IB_SL", 1},
    {"RINGLET_IB_TC", "NCCL_IB_TC", 1},
};

#define NCCL_NAMES (sizeof g_nccl_names / sizeof g_nccl_names[0])
static atomic_int g_nccl_said[NCCL_NAMES]; /* the INFO line, once per name and process */

const char *rl_env_get(const char *name, const char **from) {
    const char *s = getenv(name);
    if (from) *from = name;
    if (s && *s) return s;
    for (size_t i = 0; i < NCCL_NAMES; i++) {
        if (strcmp(g_nccl_names[i].ours, name) != 0) continue;
        const char *n = getenv(g_nccl_names[i].nccl);
        if (n && *n && !(g_nccl_names[i].minus_one_unset && !strcmp(n, "-1"))) {
            if (from) *from = g_nccl_names[i].nccl;
            if (!atomic_exchange(&g_nccl_said[i], 1))
                RL_INFO(-1, "%s=%s read for %s (unset)", g_nccl_names[i].nccl, n, name);
            return n;
        }
        break;
    }
    return s;
}

long long rl_env_int(const char *name, long long def, long long lo, long long hi) {
    const char *s = rl_env_get(name, &name);
    long long v;
    if (!s || !*s) return def;
    if (rl_parse_int(s, lo, hi, &v) != 0) {
        RL_WARN(-1, "%s=%s is not an integer in [%lld, %lld]; using %lld", name, s, lo, hi, def);
        return def;
    }
    return v;
}

int rl_env_local_rank(void) {
    static const char *vars[] = {"LOCAL_RANK", "SLURM_LOCALID", "OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID"};
    for (int i = 0; i < 4; i++) {
        const char *s = getenv(vars[i]);
        long long v;
        if (s && *s) return rl_parse_int(s, 0, 1 << 24, &v) == 0 ? (int)v : -1;
    }
    return -1;
}

double rl_env_double(const char *name, double def, double lo, double hi) {
    const char *s = rl_env_get(name, &name);
    double v;
    if (!s || !*s) return def;
    if (rl_parse_double(s, lo, hi, &v) != 0) {
        RL_WARN(-1, "%s=%s is not a number in [%g, %g]; using %g", name, s, lo, hi, def);
        return def;
    }
    return v;
}

double rl_timeout_s(void) { return rl_env_double("RINGLET_TIMEOUT", 300.0, 0.1, 1e7); }

static atomic_uint g_forks;
static pthread_once_t g_forks_once = PTHREAD_ONCE_INIT;
static void fork_child(void) { atomic_fetch_add_explicit(&g_forks, 1, memory_order_relaxed); }
static void watch_forks(void) { pthread_atfork(NULL, NULL, fork_child); }

unsigned rl_fork_generation(void) {
    pthread_once(&g_forks_once, watch_forks);
    return atomic_load_explicit(&g_forks, memory_order_relaxed);
}
