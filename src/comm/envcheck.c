/* Every RINGLET_* variable checked at init (envcheck.h). The rules are their readers':
 * where a reader's bounds are a constant of its own header, that constant is used here;
 * the readers in files of the device layer and the CUDA IPC transport keep theirs in their
 * .c files, so the same numbers are written here (marked). */
#include "envcheck.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "comm.h"
#include "devcomm.h"
#include "doorbell.h"
#include "fault.h"
#include "ib.h"
#include "log.h"
#include "shm.h"
#include "tcp.h"
#include "trace.h"
#include "transport.h"
#include "util.h"

enum { K_INT, K_BOOL, K_DOUBLE, K_WORD, K_WORD_NOCASE, K_INT_OR_WORD, K_DECIMAL, K_FAULT, K_TRANSPORT };

typedef struct {
    const char *name;
    int kind;
    long long lo, hi;  /* K_INT, K_INT_OR_WORD, K_DECIMAL */
    const char *words; /* K_WORD*, K_INT_OR_WORD: the allowed words, comma-separated */
    double dlo, dhi;   /* K_DOUBLE */
} var_t;

#define GIB (1LL << 30)
#define MIB (1LL << 20)

/* Strings taken as they are (names, paths, interface and device specs) are not here:
 * RINGLET_SECRET, RINGLET_HOSTID, RINGLET_TRACE, RINGLET_SOCKET_IFNAME, RINGLET_IB_HCA,
 * RINGLET_IB_LIBDIR. */
static const var_t vars[] = {
    /* the communicator (comm.c, util.c, log.c, bootstrap.c, collective.c) */
    {.name = "RINGLET_TIMEOUT", .kind = K_DOUBLE, .dlo = 0.1, .dhi = 1e7}, /* util.c's rl_timeout_s */
    {.name = "RINGLET_DEBUG", .kind = K_WORD_NOCASE, .words = RL_LOG_LEVELS}, /* log.c */
    {.name = "RINGLET_TRANSPORT", .kind = K_TRANSPORT},
    {.name = "RINGLET_ALGO", .kind = K_WORD, .words = "auto,ring,oneshot,hier,halving,doubling,star"},
    {.name = "RINGLET_CHUNK_SIZE", .kind = K_INT, .lo = 4096, .hi = GIB},
    {.name = "RINGLET_NCHUNKS_INFLIGHT", .kind = K_INT, .lo = 1, .hi = 64},
    {.name = "RINGLET_ONESHOT_BYTES", .kind = K_INT, .lo = 0, .hi = GIB},
    {.name = "RINGLET_ONESHOT_MAX_RANKS", .kind = K_INT, .lo = 2, .hi = RL_ONESHOT_MAX_RANKS},
    {.name = "RINGLET_BOARD_BYTES", .kind = K_INT, .lo = 0, .hi = RL_BOARD_BYTES},
    {.name = "RINGLET_HIER_MIN_BYTES", .kind = K_INT, .lo = 0, .hi = 1LL << 40},
    {.name = "RINGLET_HALVING_MIN_BYTES", .kind = K_INT, .lo = 0, .hi = 1LL << 40},
    {.name = "RINGLET_HALVING_MAX_BYTES", .kind = K_INT, .lo = 0, .hi = 1LL << 40},
    {.name = "RINGLET_DOUBLING_MAX_BYTES", .kind = K_INT, .lo = 0, .hi = 1LL << 40},
    {.name = "RINGLET_HIER_SLICE_BYTES", .kind = K_INT, .lo = 0, .hi = 1LL << 40},
    {.name = "RINGLET_DEVICE_LANES", .kind = K_INT, .lo = 2, .hi = RL_DEV_MAX_LANES},
    {.name = "RINGLET_SPIN_US", .kind = K_DOUBLE, .dlo = 0, .dhi = 1e6},
    {.name = "RINGLET_INLINE", .kind = K_BOOL},
    {.name = "RINGLET_CHECK", .kind = K_BOOL},
    {.name = "RINGLET_BOOTSTRAP_PORT", .kind = K_DECIMAL, .lo = 1, .hi = 65535}, /* bootstrap.c reads it in base 10 */
    {.name = "RINGLET_REDUCE_THREADS", .kind = K_INT_OR_WORD, .lo = 1, .hi = 64, .words = "auto"}, /* reduce_pool.c's MAX_THREADS */
    {.name = "RINGLET_REDUCE_MIN_BYTES", .kind = K_INT, .lo = 64, .hi = GIB},       /* reduce_pool.c: a cache line .. 1G */
    {.name = "RINGLET_TRACE_MAX", .kind = K_INT, .lo = 0, .hi = RL_TRACE_MAX_LIMIT},
    {.name = "RINGLET_FAULT_KILL", .kind = K_FAULT},
    {.name = "RINGLET_FAULT_STOP", .kind = K_FAULT},
    /* transports */
    {.name = "RINGLET_NSOCKS_PERPEER", .kind = K_INT, .lo = 1, .hi = RL_TCP_MAX_SOCKS},
    {.name = "RINGLET_SOCKET_BUFSIZE", .kind = K_INT, .lo = 0, .hi = GIB},
    {.name = "RINGLET_TCP_INLINE_BYTES", .kind = K_INT, .lo = 0, .hi = RL_TCP_INLINE_NOLIMIT},
    {.name = "RINGLET_SHM_SLOT_SIZE", .kind = K_INT, .lo = RL_SHM_SLOT_MIN, .hi = RL_SHM_SLOT_MAX},
    {.name = "RINGLET_SHM_NSLOTS", .kind = K_INT, .lo = RL_SHM_NSLOTS_MIN, .hi = RL_SHM_NSLOTS_MAX},
    {.name = "RINGLET_SHM_DISABLE", .kind = K_BOOL},
    {.name = "RINGLET_CUDA_IPC_SLOT_SIZE", .kind = K_INT, .lo = 4096, .hi = GIB}, /* as in cuda_ipc.c */
    {.name = "RINGLET_CUDA_IPC_NSLOTS", .kind = K_INT, .lo = 2, .hi = 64},        /* as in cuda_ipc.c (IPC_MAX_SLOTS) */
    {.name = "RINGLET_CUDA_IPC_DISABLE", .kind = K_BOOL},
    {.name = "RINGLET_IB_DISABLE", .kind = K_BOOL},
    {.name = "RINGLET_IB_GID_INDEX", .kind = K_INT, .lo = -1, .hi = 1 << 20},
    {.name = "RINGLET_IB_QPS_PER_PEER", .kind = K_INT, .lo = 1, .hi = RL_IB_MAX_QPS},
    {.name = "RINGLET_IB_NSLOTS", .kind = K_INT, .lo = 2, .hi = 1024},
    {.name = "RINGLET_IB_SLOT_SIZE", .kind = K_INT, .lo = 4096, .hi = 64 * MIB},
    {.name = "RINGLET_IB_TIMEOUT", .kind = K_INT, .lo = 1, .hi = 31},
    {.name = "RINGLET_IB_RETRY_CNT", .kind = K_INT, .lo = 0, .hi = 7},
    {.name = "RINGLET_IB_SL", .kind = K_INT, .lo = 0, .hi = 15},
    {.name = "RINGLET_IB_TC", .kind = K_INT, .lo = 0, .hi = 255},
    {.name = "RINGLET_IB_SPIN_US", .kind = K_INT, .lo = 0, .hi = 1000000},
    /* the device layer (src/device/) and devcomm.c: the same rules as there */
    {.name = "RINGLET_DEVICE", .kind = K_WORD, .words = "auto,cuda,sim,none"},
    {.name = "RINGLET_DEVICE_REDUCE", .kind = K_WORD, .words = "direct,copy"},
    {.name = "RINGLET_SIM_JITTER", .kind = K_INT, .lo = 0, .hi = 1000000},
    {.name = "RINGLET_SIM_DEVICES", .kind = K_INT, .lo = 1, .hi = 64},
    {.name = "RINGLET_SIM_MEMORY", .kind = K_INT, .lo = 0, .hi = 1LL << 50},
    {.name = "RINGLET_SIM_IPC_DENY", .kind = K_BOOL},
    {.name = "RINGLET_SIM_MEMOPS", .kind = K_BOOL},
    {.name = "RINGLET_SIM_QUEUE_DEPTH", .kind = K_INT, .lo = 2, .hi = 1 << 20},
    {.name = "RINGLET_SIM_PEER", .kind = K_BOOL},
    {.name = "RINGLET_SIM_ON_DEADLOCK", .kind = K_WORD_NOCASE, .words = "error,exit"},
    {.name = "RINGLET_STREAM_HOLD", .kind = K_WORD, .words = "auto,memop,kernel,sync"},
    /* the CPU kernels (kernels/reduce_cpu.c; a set this CPU cannot run is passed over) */
    {.name = "RINGLET_CPU_ISA", .kind = K_WORD, .words = "avx512f,avx2,default"},
    /* the DDP layer (src/ddp/create.c reads them as plain decimal numbers) */
    {.name = "RINGLET_DDP_BCAST_BYTES", .kind = K_DECIMAL, .lo = 64, .hi = GIB},
    {.name = "RINGLET_DDP_DIRECT_BYTES", .kind = K_DECIMAL, .lo = 0, .hi = 1LL << 62},
};

/* s is one of the comma-separated words (case-insensitive when nocase). */
static int word_in(const char *s, const char *words, int nocase) {
    size_t n = strlen(s);
    for (const char *w = words; *w;) {
        const char *e = strchr(w, ',');
        size_t len = e ? (size_t)(e - w) : strlen(w);
        if (len == n && (nocase ? strncasecmp(w, s, n) : strncmp(w, s, n)) == 0) return 1;
        w += len + (e != NULL);
    }
    return 0;
}

/* "a, b or c" from "a,b,c". */
static void words_text(const char *words, char *out, size_t len) {
    size_t o = 0;
    int nw = 1;
    for (const char *w = words; *w; w++) nw += *w == ',';
    int k = 0;
    out[0] = 0;
    for (const char *w = words; *w && o < len;) {
        const char *e = strchr(w, ',');
        int l = e ? (int)(e - w) : (int)strlen(w);
        o += (size_t)snprintf(out + o, len - o, "%s%.*s", k == 0 ? "" : k == nw - 1 ? " or " : ", ", l, w);
        k++;
        w += l + (e != NULL);
    }
}

/* Digits only, read in base 10 (a leading 0 is no octal prefix here), within [lo, hi]. */
static int decimal_ok(const char *s, long long lo, long long hi) {
    if (!*s) return 0;
    for (const char *p = s; *p; p++)
        if (*p < '0' || *p > '9') return 0;
    errno = 0;
    long long v = strtoll(s, NULL, 10);
    return errno != ERANGE && v >= lo && v <= hi;
}

ringlet_result_t rl_env_check(char *err) {
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
        const var_t *v = &vars[i];
        const char *var; /* v->name, or NCCL's name for it where only that is set */
        const char *s = rl_env_get(v->name, &var);
        if (!s || !*s) continue;
        long long x;
        double d;
        char allowed[200] = "";
        int ok;
        switch (v->kind) {
        case K_INT:
            ok = rl_parse_int(s, v->lo, v->hi, &x) == 0;
            snprintf(allowed, sizeof allowed, "an integer from %lld to %lld (K, M and G multiply by 1024, 1024^2, 1024^3)",
                     v->lo, v->hi);
            break;
        case K_BOOL:
            ok = !strcmp(s, "0") || !strcmp(s, "1");
            snprintf(allowed, sizeof allowed, "0 or 1");
            break;
        case K_DOUBLE:
            ok = rl_parse_double(s, v->dlo, v->dhi, &d) == 0;
            snprintf(allowed, sizeof allowed, "a number from %.15g to %.15g", v->dlo, v->dhi);
            break;
        case K_WORD:
        case K_WORD_NOCASE:
            ok = word_in(s, v->words, v->kind == K_WORD_NOCASE);
            words_text(v->words, allowed, sizeof allowed);
            break;
        case K_INT_OR_WORD: {
            ok = word_in(s, v->words, 0) || rl_parse_int(s, v->lo, v->hi, &x) == 0;
            char w[64];
            words_text(v->words, w, sizeof w);
            snprintf(allowed, sizeof allowed, "%s or an integer from %lld to %lld", w, v->lo, v->hi);
            break;
        }
        case K_DECIMAL:
            ok = decimal_ok(s, v->lo, v->hi);
            snprintf(allowed, sizeof allowed, "a decimal integer from %lld to %lld", v->lo, v->hi);
            break;
        case K_FAULT: {
            rl_fault f;
            ok = rl_fault_parse(s, &f) == 0;
            snprintf(allowed, sizeof allowed, "<seq>:send:<n> or <seq>:recv:<n>, seq from 1");
            break;
        }
        default: { /* K_TRANSPORT: auto or a transport of this build */
            ok = !strcmp(s, "auto") || rl_transport_by_name(s) >= 0;
            char words[128];
            size_t o = (size_t)snprintf(words, sizeof words, "auto");
            for (int t = 0; t < RL_TP_MAX; t++)
                if (rl_transports[t] && o < sizeof words)
                    o += (size_t)snprintf(words + o, sizeof words - o, ",%s", rl_transports[t]->name);
            words_text(words, allowed, sizeof allowed - 40);
            o = strlen(allowed);
            snprintf(allowed + o, sizeof allowed - o, " (the transports of this build)");
            break;
        }
        }
        if (!ok) {
            snprintf(err, RL_MSG_MAX, "%s=%.64s%s%s%s: must be %s", var, s, strlen(s) > 64 ? "..." : "",
                     var != v->name ? ", read for " : "", var != v->name ? v->name : "", allowed);
            return RINGLET_ERR_INVALID_ARGUMENT;
        }
    }
    return RINGLET_SUCCESS;
}
