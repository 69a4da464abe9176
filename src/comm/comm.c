/* A communicator's parts, made and unmade: the settings from the environment, the
 * bootstrap, the transports, the ring order, the ring's connections, the reduction
 * threads; and, in reverse, their teardown. The public life (init, destroy, abort,
 * split: src/api/lifecycle.c) runs these around the progress thread (src/engine/),
 * which sits above this layer and so is started and stopped there, not here. */
#include <errno.h>
#include <limits.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "bootstrap.h"
#include "comm.h"
#include "comm_open.h"
#include "conn.h"
#include "devcomm.h"
#include "device.h"
#include "doorbell.h"
#include "envcheck.h"
#include "failure.h"
#include "log.h"
#include "netif.h"
#include "reduce_pool.h"
#include "sha256.h"
#include "shmseg.h"
#include "sock.h"
#include "stop_token.h"
#include "trace.h"
#include "util.h"
#include "wait.h"

/* ---- init ---- */

static void host_id(uint8_t out[16]) {
    char buf[512] = "";
    const char *forced = getenv("RINGLET_HOSTID"); /* tests: pretend to be several hosts */
    if (forced && *forced) {
        snprintf(buf, sizeof buf, "forced:%s", forced);
    } else {
        gethostname(buf, 255);
        buf[255] = 0;
        size_t n = strlen(buf);
        FILE *f = fopen("/proc/sys/kernel/random/boot_id", "r");
        if (f) {
            if (!fgets(buf + n, (int)(sizeof buf - n), f)) buf[n] = 0;
            fclose(f);
        }
        /* Containers of one machine with the host's name (--network=host) but each its own
         * /dev/shm cannot share memory: different hosts to ringlet (TCP between them). */
        struct stat st;
        n = strlen(buf);
        if (stat("/dev/shm", &st) == 0)
            snprintf(buf + n, sizeof buf - n, ":shm%llx", (unsigned long long)st.st_dev);
    }
    uint8_t h[32];
    rl_sha256(buf, strlen(buf), h);
    memcpy(out, h, 16);
}

/* 1 + the one core this thread may run on, 0 when it may run on several (or unknown). */
static int32_t one_core(void) {
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) != 0 || CPU_COUNT(&set) != 1) return 0;
    for (int i = 0; i < CPU_SETSIZE; i++)
        if (CPU_ISSET(i, &set)) return i + 1;
    return 0;
}

/* Whether every rank of this host was bound to one core at init, each to its own: then
 * no rank of the job needs the core a waiter runs on. */
static int bound_alone(const struct ringlet_comm *c) {
    const rl_rank_info *me = &c->infos[c->rank];
    if (!me->core) return 0;
    for (int q = 0; q < c->nranks; q++)
        if (q != c->rank && !memcmp(c->infos[q].hostid, me->hostid, 16) &&
            (!c->infos[q].core || c->infos[q].core == me->core))
            return 0;
    return 1;
}

/* Ring order: hosts in order of their lowest rank, ranks of a host side by side, so
 * the ring crosses each host boundary once. */
static void build_ring(struct ringlet_comm *c) {
    int P = c->nranks, n = 0;
    char *placed = calloc(P > 0 ? (size_t)P : 1, 1);
    for (int r = 0; r < P && placed; r++) {
        if (placed[r]) continue;
        for (int q = r; q < P; q++)
            if (!placed[q] && !memcmp(c->infos[q].hostid, c->infos[r].hostid, 16)) {
                placed[q] = 1;
                c->ring[n++] = q;
            }
    }
    if (!placed)
        for (int r = 0; r < P; r++) c->ring[r] = r;
    free(placed);
    for (int i = 0; i < P; i++)
        if (c->ring[i] == c->rank) c->ring_pos = i;
    c->next = c->ring[(c->ring_pos + 1) % P];
    c->prev = c->ring[(c->ring_pos + P - 1) % P];
    c->local_rank = c->local_size = 0;
    for (int q = 0; q < P; q++)
        if (!memcmp(c->infos[q].hostid, c->infos[c->rank].hostid, 16)) {
            if (q < c->rank) c->local_rank++;
            c->local_size++;
        }
}

/* Whether some pair of ranks sends host buffers over TCP (tcp_peers), the board's limit
 * (every pair over shared memory), and whether a host has more ranks than cores (crowded),
 * from what every rank published. Algorithms are chosen from these, so they must be the
 * same on every rank: every pair counts, not only this rank's own (a rank whose IB or
 * shared memory failed at init reaches its peers over TCP, and so do they it). Computed up
 * to RL_ONESHOT_MAX_RANKS (P^2 / 2 pairs), where the paths that use them run; beyond, all
 * are off. */
static void peer_transports_setup(struct ringlet_comm *c) {
    int P = c->nranks, all_shm = P > 1 && P <= RL_ONESHOT_MAX_RANKS;
    size_t b = RL_BOARD_BYTES;
    c->tcp_peers = c->crowded = 0;
    for (int p = 0; p < P && all_shm; p++)
        if (c->infos[p].board_bytes < b) b = c->infos[p].board_bytes;
    for (int p = 0; p < P && P <= RL_ONESHOT_MAX_RANKS; p++) {
        int on_host = 0;
        for (int q = 0; q < P; q++) {
            int same = !memcmp(c->infos[p].hostid, c->infos[q].hostid, 16);
            on_host += same;
            if (q <= p) continue;
            int tp = rl_conn_host_transport(c, p, q);
            all_shm &= tp == RL_TP_SHM;
            c->tcp_peers |= tp == RL_TP_TCP;
        }
        c->crowded |= on_host > c->infos[p].ncpu;
    }
    c->board_bytes = all_shm ? b : 0;
    int ipc_ranks = 0;
    for (int p = 0; p < P && c->forced_tp < 0; p++) ipc_ranks += c->infos[p].bloblen[RL_TP_CUDA_IPC] > 0;
    c->board_device = c->board_bytes && ipc_ranks < 2;
    c->board_host = c->board_bytes && (c->board_device || ipc_ranks == P);
}

void rl_comm_trace_split(struct ringlet_comm *c) {
    if (!c->trace) return;
    /* The communicator's tag: a digest of every rank's TCP listener (its random id) */
    rl_sha256_ctx h;
    uint8_t d[32];
    rl_sha256_init(&h);
    for (int r = 0; r < c->nranks; r++) rl_sha256_update(&h, c->infos[r].blob[RL_TP_TCP], c->infos[r].bloblen[RL_TP_TCP]);
    rl_sha256_final(&h, d);
    rl_trace_name_comm(c->trace, (uint32_t)d[0] << 24 | (uint32_t)d[1] << 16 | (uint32_t)d[2] << 8 | d[3]);
}

static const char *const tuning_names[RL_TUNING_N] = {
    "RINGLET_ALGO",           "RINGLET_CHUNK_SIZE",        "RINGLET_ONESHOT_BYTES",
    "RINGLET_ONESHOT_MAX_RANKS", "RINGLET_HIER_MIN_BYTES", "RINGLET_HALVING_MIN_BYTES",
    "RINGLET_HALVING_MAX_BYTES", "RINGLET_DOUBLING_MAX_BYTES", "RINGLET_HIER_SLICE_BYTES",
    "RINGLET_DEVICE_LANES"};

static void tuning_of(const struct ringlet_comm *c, uint64_t v[RL_TUNING_N]) {
    const uint64_t mine[RL_TUNING_N] = {(uint64_t)c->algo,          c->chunk_fixed ? c->chunk_bytes : 0,
                                        c->oneshot_bytes,           (uint64_t)c->oneshot_max_ranks,
                                        c->hier_min_bytes,          c->halving_min_bytes,
                                        c->halving_max_bytes,       c->doubling_max_bytes,
                                        c->hier_slice_bytes,        (uint64_t)c->dev_lanes};
    memcpy(v, mine, sizeof mine);
}

static void tuning_value(int k, uint64_t v, char *out, size_t n) {
    static const char *const algos[] = {"auto", "ring", "oneshot", "hier", "halving", "doubling", "star"};
    if (k == 0 && v < sizeof algos / sizeof algos[0]) snprintf(out, n, "%s", algos[v]);
    else if (k == 1 && v == 0) snprintf(out, n, "unset (chosen)");
    else snprintf(out, n, "%llu", (unsigned long long)v);
}

/* Every rank's algorithm settings against this rank's: the first difference, named. */
static void tuning_check(const struct ringlet_comm *c, char *err, ringlet_result_t *rc) {
    for (int r = 0; r < c->nranks; r++)
        for (int k = 0; k < RL_TUNING_N; k++) {
            uint64_t a = c->infos[r].tuning[k], b = c->infos[c->rank].tuning[k];
            if (a == b) continue;
            char va[32], vb[32];
            tuning_value(k, a, va, sizeof va);
            tuning_value(k, b, vb, sizeof vb);
            *rc = RINGLET_ERR_INVALID_USAGE;
            snprintf(err, RL_MSG_MAX, "%s is %s on rank %d but %s on rank %d: it decides which algorithm a collective "
                     "takes, so it must be the same on every rank", tuning_names[k], va, r, vb, c->rank);
            return;
        }
}

static struct ringlet_comm *comm_alloc(int rank, int nranks) {
    struct ringlet_comm *c = calloc(1, sizeof *c);
    if (!c) return NULL;
    c->rank = rank;
    c->nranks = nranks;
    pthread_mutex_init(&c->fail_mu, NULL);
    atomic_init(&c->ev, &c->own_bell);
    pthread_mutex_init(&c->q_mu, NULL);
    pthread_mutex_init(&c->hold_order_mu, NULL);
    pthread_cond_init(&c->q_cv, NULL);
    pthread_mutex_init(&c->err_mu, NULL);
    pthread_mutex_init(&c->live_mu, NULL);
    pthread_mutex_init(&c->close_mu, NULL);
    pthread_mutex_init(&c->ops_mu, NULL);
    pthread_mutex_init(&c->park_mu, NULL);
    c->init_device = -1;
    c->fork_gen = rl_fork_generation();
    c->infos = calloc((size_t)nranks, sizeof *c->infos);
    c->ring = calloc((size_t)nranks, sizeof *c->ring);
    c->send_conns = calloc((size_t)nranks, sizeof(rl_conn));
    c->recv_conns = calloc((size_t)nranks, sizeof(rl_conn));
    c->send_conns_dev = calloc((size_t)nranks, sizeof(rl_conn));
    c->recv_conns_dev = calloc((size_t)nranks, sizeof(rl_conn));
    c->parked = calloc((size_t)nranks, sizeof *c->parked);
    if (!c->infos || !c->ring || !c->send_conns || !c->recv_conns || !c->send_conns_dev || !c->recv_conns_dev ||
        !c->parked) {
        free(c->infos), free(c->ring), free(c->send_conns), free(c->recv_conns);
        free(c->send_conns_dev), free(c->recv_conns_dev), free(c->parked), free(c);
        return NULL;
    }
    return c;
}

static void release_parts(struct ringlet_comm *c);

/* Stops threads and closes connections; keeps the struct (an aborted handle must still
 * answer calls with an error until it is destroyed). */
void rl_comm_teardown(struct ringlet_comm *c, int clean) {
    rl_reduce_pool_stop(c->pool); /* kept until rl_comm_free: a call still running falls back to its own thread */
    if (!clean) atomic_store(&c->stop, 1);
    /* Goodbye first (rank 0 waits for the others while every link still works), then
     * stop whatever transfer is still posted (an irecv nobody waited for) so that
     * closing the connections never waits on a peer. */
    rl_monitor_stop(c, clean);
    atomic_store(&c->stop, 1);
    /* Threadless transports (shm, cuda_ipc) fail their posted requests when polled with
     * stop set; after an abort nobody else polls them (the progress thread is gone, the
     * waiters leave the transports alone), so once here: a thread waiting on a request
     * sees it fail now and leaves, instead of after rl_conn_wait_idle's grace. */
    rl_comm_progress(c);
    /* A thread waiting on a parked receive (conn.h) leaves now: nobody polls it any more. */
    rl_conn_drop_parked(c);
    rl_devcomm_release_all(c);
    if (rl_conn_wait_idle(c, RL_ABORT_GRACE_S)) {
        /* A thread still inside may be in a transport's progress or a connection (held
         * off the CPU, or waiting for device work): closed once it has left. */
        RL_INFO(c->rank, "teardown: a call of another thread is still inside after %.0f s: the connections and "
                         "transports are closed once it has left (at the destroy)", RL_ABORT_GRACE_S);
        return;
    }
    release_parts(c);
}

/* Connections, transports and buffers: only once no call is inside (the teardown's
 * grace, else the destroy's wait); once. */
static void release_parts(struct ringlet_comm *c) {
    if (c->parts_released) return;
    c->parts_released = 1;
    rl_trace_write(c->trace); /* with the spans of the calls that just left; freed with c */
    rl_devcomm_settle(c); /* after the calls left, before connections and transports free device memory */
    rl_conn_close_all(c);
    atomic_store(&c->polled, 0);
    for (int i = 0; i < RL_TP_MAX; i++)
        if (c->tctx[i]) rl_transports[i]->fini(c->tctx[i]);
    memset(c->tctx, 0, sizeof c->tctx);
    rl_doorbell_close(c);
    rl_devcomm_fini(c);
    free(c->slots);
    free(c->oneshot_treqs);
    free(c->temp);
    free(c->temp2);
    c->oneshot_treqs = NULL;
    c->slots = c->temp = c->temp2 = NULL;
    c->temp_size = c->temp2_size = 0;
}

void rl_comm_free(struct ringlet_comm *c) {
    release_parts(c); /* where the teardown left them to a call still inside */
    rl_reduce_pool_free(c->pool);
    rl_trace_close(c->trace);
    pthread_mutex_destroy(&c->live_mu);
    pthread_mutex_destroy(&c->close_mu);
    pthread_mutex_destroy(&c->ops_mu);
    free(c->infos), free(c->ring), free(c->send_conns), free(c->recv_conns);
    free(c->send_conns_dev), free(c->recv_conns_dev), free(c->parked);
    pthread_mutex_destroy(&c->park_mu);
    pthread_mutex_destroy(&c->fail_mu);
    pthread_mutex_destroy(&c->q_mu);
    pthread_mutex_destroy(&c->hold_order_mu);
    pthread_cond_destroy(&c->q_cv);
    pthread_mutex_destroy(&c->err_mu);
    free(c);
}

ringlet_result_t rl_comm_open(struct ringlet_comm **out, int nranks, int rank, rl_boot_target *t,
                              ringlet_stop_token_t token, double timeout_s, char *err) {
    *out = NULL;
    struct ringlet_comm *c = comm_alloc(rank, nranks);
    if (!c) {
        if (t->listen_fd >= 0) close(t->listen_fd);
        return rl_error(NULL, RINGLET_ERR_SYSTEM, "init: out of memory");
    }
    memcpy(c->secret, t->secret, 32);
    c->timeout_s = timeout_s > 0 ? timeout_s : rl_timeout_s();
    c->chunk_bytes = (size_t)rl_env_int("RINGLET_CHUNK_SIZE", 0, 4096, 1LL << 30); /* 0: chosen after bootstrap */
    c->chunk_bytes &= ~(size_t)63; /* staging slots are this far apart: each starts aligned for every type */
    c->chunk_fixed = c->chunk_bytes != 0;
    c->nslots = (int)rl_env_int("RINGLET_NCHUNKS_INFLIGHT", 4, 1, 64);
    const char *algo = getenv("RINGLET_ALGO");
    c->algo = RL_ALGO_AUTO;
    if (algo && !strcmp(algo, "ring")) c->algo = RL_ALGO_RING;
    else if (algo && !strcmp(algo, "oneshot")) c->algo = RL_ALGO_ONESHOT;
    else if (algo && !strcmp(algo, "hier")) c->algo = RL_ALGO_HIER;
    else if (algo && !strcmp(algo, "halving")) c->algo = RL_ALGO_HALVING;
    else if (algo && !strcmp(algo, "doubling")) c->algo = RL_ALGO_DOUBLING;
    else if (algo && !strcmp(algo, "star")) c->algo = RL_ALGO_STAR;
    else if (algo && *algo && strcmp(algo, "auto") != 0) {
        if (t->listen_fd >= 0) close(t->listen_fd);
        rl_comm_free(c);
        return rl_error(NULL, RINGLET_ERR_INVALID_ARGUMENT, "init: RINGLET_ALGO=%s is not one of auto, ring, oneshot, hier, halving, doubling, star", algo);
    }
    c->oneshot_bytes = (size_t)rl_env_int("RINGLET_ONESHOT_BYTES", 64 << 10, 0, 1LL << 30);
    c->oneshot_max_ranks = (int)rl_env_int("RINGLET_ONESHOT_MAX_RANKS", 8, 2, RL_ONESHOT_MAX_RANKS);
    c->hier_min_bytes = (size_t)rl_env_int("RINGLET_HIER_MIN_BYTES", 1 << 20, 0, 1LL << 40);
    c->halving_min_bytes = (size_t)rl_env_int("RINGLET_HALVING_MIN_BYTES", 64 << 10, 0, 1LL << 40);
    c->halving_max_bytes = (size_t)rl_env_int("RINGLET_HALVING_MAX_BYTES", 4 << 20, 0, 1LL << 40);
    c->doubling_max_bytes = (size_t)rl_env_int("RINGLET_DOUBLING_MAX_BYTES", 64 << 10, 0, 1LL << 40);
    c->hier_slice_bytes = (size_t)rl_env_int("RINGLET_HIER_SLICE_BYTES", 16 << 20, 0, 1LL << 40);
    c->dev_lanes = (int)rl_env_int("RINGLET_DEVICE_LANES", RL_DEV_MAX_LANES, 2, RL_DEV_MAX_LANES);
    const char *tname = getenv("RINGLET_TRANSPORT");
    c->forced_tp = -1;
    if (tname && *tname && strcmp(tname, "auto") != 0) {
        c->forced_tp = rl_transport_by_name(tname);
        if (c->forced_tp < 0) {
            if (t->listen_fd >= 0) close(t->listen_fd);
            rl_comm_free(c);
            return rl_error(NULL, RINGLET_ERR_INVALID_ARGUMENT,
                            "init: RINGLET_TRANSPORT=%s is not a transport of this build", tname);
        }
    }
    int rthreads;
    size_t rmin;
    if (rl_reduce_pool_env(&rthreads, &rmin, err) != 0) { /* rl_env_check passed it: the environment changed */
        if (t->listen_fd >= 0) close(t->listen_fd);
        rl_comm_free(c);
        return rl_error(NULL, RINGLET_ERR_INVALID_ARGUMENT, "init (rank %d of %d): %s", rank, nranks, err);
    }
    ringlet_result_t rc = RINGLET_SUCCESS;

    /* The interface peers reach this rank on. */
    const char *var;
    const char *spec = rl_env_get("RINGLET_SOCKET_IFNAME", &var);
    struct rl_netif nif[16];
    int n = rl_netif_list(spec, nif, 16);
    if (n <= 0) {
        /* Not a return: like a forced transport that cannot start (below), the rank still
         * meets the others, saying its init failed, so that theirs fail at once quoting it
         * (the bootstrap reaches rank 0 by MASTER_ADDR, not by this interface). */
        rc = RINGLET_ERR_SYSTEM;
        snprintf(err, RL_MSG_MAX, "no network interface%s%s%s%s%s", spec ? " matches " : "", spec ? var : "",
                 spec ? "=" : "", spec ? spec : "", n < 0 ? " (getifaddrs failed)" : "");
    } else {
        c->ifaddr = nif[0].addr;
        snprintf(c->ifname, sizeof c->ifname, "%s", nif[0].name);
    }
    /* The token from here, where no return frees c without rl_comm_open_done (which
     * detaches it): the settings refused above must not leave it pointing into c. */
    rl_stop_token_attach(token, &c->stop);

    /* Segments of dead jobs (doorbells, shared memory, cuda_ipc's) go first, whichever
     * transports run here. */
    rl_shmseg_remove_stale();
    rl_doorbell_open(c);
    rl_transport_init tin = {rank,           nranks,    &c->stop,  rl_comm_notify,    c, c->timeout_s,
                             c->secret,      &c->ifaddr, rl_doorbell_peer, c, &c->failed, &c->aborted};
    /* Every transport that can run here publishes its blob; TCP must. */
    for (int i = 0; i < RL_TP_MAX && rc == RINGLET_SUCCESS; i++) {
        if (!rl_transports[i]) continue;
        size_t bloblen = 0;
        char terr[RL_ERR_MAX] = "";
        ringlet_result_t trc = rl_transports[i]->init(&tin, &c->tctx[i], c->infos[rank].blob[i], &bloblen, terr);
        if (trc == RINGLET_SUCCESS) {
            c->infos[rank].bloblen[i] = (uint32_t)bloblen;
        } else {
            c->tctx[i] = NULL;
            if (i == RL_TP_TCP || i == c->forced_tp) {
                rc = trc;
                snprintf(err, RL_MSG_MAX, "%s", terr);
            } else {
                RL_INFO(rank, "transport %s unavailable: %s", rl_transports[i]->name, terr);
            }
        }
    }
    c->spin_s = rl_env_double("RINGLET_SPIN_US", 50, 0, 1e6) * 1e-6;
    c->trace = rl_trace_open(rank, nranks);
    rl_fault_from_env(&c->fault);
    c->inline_ok = (int)rl_env_int("RINGLET_INLINE", 1, 0, 1);
    c->check = (int)rl_env_int("RINGLET_CHECK", 0, 0, 1);
    c->infos[rank].check = c->check;
    c->infos[rank].transport = c->forced_tp + 1;
    tuning_of(c, c->infos[rank].tuning);
    c->infos[rank].board_bytes = c->db ? (uint32_t)rl_env_int("RINGLET_BOARD_BYTES", RL_BOARD_BYTES, 0, RL_BOARD_BYTES) : 0;
    const rl_device_ops *dops = rl_device();
    if (dops && dops->get_device(&c->init_device) != RL_DEV_OK) c->init_device = -1;
    if (!dops) rl_dev_unserved_look(); /* device memory of the program's own CUDA is refused */
    atomic_store(&c->conn_device, c->init_device);
    c->infos[rank].rank = rank;
    c->infos[rank].pid = (int32_t)getpid();
    c->infos[rank].core = one_core();
    c->infos[rank].ncpu = (int32_t)sysconf(_SC_NPROCESSORS_ONLN);
    host_id(c->infos[rank].hostid);
    /* A transport this rank cannot start (a forced one, or TCP without an interface): the
     * exchange still runs, saying so, and the rank then fails, telling why (lifecycle.c's
     * comm_init): else the others would wait for it until RINGLET_TIMEOUT and say only
     * that it never joined. */
    c->infos[rank].init_failed = (int32_t)rc;
    char xerr[RL_MSG_MAX];
    ringlet_result_t xrc = rl_boot_exchange(c, t, rc ? xerr : err);
    if (rc == RINGLET_SUCCESS) rc = xrc;
    for (int r = 0; rc == RINGLET_SUCCESS && r < nranks; r++)
        if (c->infos[r].init_failed) {
            rc = RINGLET_ERR_REMOTE;
            snprintf(err, RL_MSG_MAX, "rank %d's init failed (%s) before the ranks met", r,
                     ringlet_strerror((ringlet_result_t)c->infos[r].init_failed));
            /* Its reason, through the monitor (rl_comm_open_done quotes it): it fails, said or
             * not, so its going is certain; heard within RINGLET_TIMEOUT at the latest. */
            rl_comm_await_cause_for(c, c->timeout_s);
        }
    if (rc == RINGLET_SUCCESS) tuning_check(c, err, &rc);
    for (int r = 0; rc == RINGLET_SUCCESS && r < nranks; r++)
        if (c->infos[r].check != c->check) {
            /* The check is an exchange of its own before every collective: all or none. */
            rc = RINGLET_ERR_INVALID_USAGE;
            snprintf(err, RL_MSG_MAX, "RINGLET_CHECK is %d on rank %d but %d on rank %d: set it the same on every rank",
                     c->infos[r].check, r, c->check, rank);
        } else if (c->infos[r].transport != c->infos[rank].transport) {
            /* A rank forcing a transport alone would wait at init for connections the others
             * make over another (until RINGLET_TIMEOUT, "waiting for rank N to connect"). */
            int a = c->infos[r].transport, b = c->infos[rank].transport;
            rc = RINGLET_ERR_INVALID_USAGE;
            snprintf(err, RL_MSG_MAX,
                     "RINGLET_TRANSPORT is %s on rank %d but %s on rank %d: both ends of a pair must choose its "
                     "transport alike, so set it the same on every rank",
                     a > 0 && a <= RL_TP_MAX ? rl_transports[a - 1]->name : "unset (auto)", r,
                     b > 0 && b <= RL_TP_MAX ? rl_transports[b - 1]->name : "unset (auto)", rank);
        }
    if (rc == RINGLET_SUCCESS) {
        build_ring(c);
        peer_transports_setup(c);
        /* More ranks than cores here: a waiter yields at once, since the rank it waits
         * for may need this core to run at all. Otherwise a caller's wait on peers polls
         * without yielding (rl_comm_wait_peer: with a CPU hog beside two ranks on two
         * cores, yielding took the 8-byte all-reduce over shared memory from a median of
         * 2.4 us to 17.7 us, the hog getting the core for its time slice), and other
         * waits yield after 256 rounds. */
        int over = c->local_size > sysconf(_SC_NPROCESSORS_ONLN);
        c->bound_alone = bound_alone(c);
        /* A rank bound alone waits for a peer that may have lost its core to another job
         * for a time slice (1.4 ms on 2 cores of Linux 6.18, longer on older kernels and
         * more cores): a waiter that slept after 50 us left its core idle, the scheduler
         * moved the other job over, and the next waits slept as well (a CPU hog beside two
         * ranks over TCP, 8 B: 24 us a call against 19-20 polling for 5 ms or more, Open
         * MPI's 19-20). Its core is its own: poll as long as such a slice lasts. */
        c->alone_spin_s = getenv("RINGLET_SPIN_US") ? c->spin_s : RL_ALONE_SPIN_US * 1e-6;
        c->spin_pause = over ? 0 : 256;
        c->peer_pause = over ? 0 : UINT_MAX;
        c->pool = rl_reduce_pool_new(rank, rthreads, c->local_size, rmin, c->spin_s);
        if (!c->chunk_bytes) {
            /* Measured defaults: 256 KiB when the whole ring is over shared memory (a chunk
             * then fits one lent slot and stays in cache), 512 KiB when any of it crosses a
             * network. Every rank must pick the same (a ring step's chunks are counted from
             * it on both ends), so a job of several hosts takes 512 KiB on every rank, also
             * on ranks whose own two neighbours are local; and so does a job where one
             * rank has no shared memory (RINGLET_SHM_DISABLE, a full /dev/shm): every pair
             * of the ring is judged, from what every rank published. */
            int all_shm = nranks > 1 && c->local_size == nranks;
            for (int i = 0; i < nranks && all_shm; i++)
                all_shm = rl_conn_host_transport(c, c->ring[i], c->ring[(i + 1) % nranks]) == RL_TP_SHM;
            c->chunk_bytes = all_shm ? 256 << 10 : 512 << 10;
            /* Over a network a call's chunks are the whole 512 KiB (or the whole step when
             * it is shorter): each chunk costs system calls and thread handoffs on both
             * ends, and the reduction a smaller chunk would hide is short beside them (TCP
             * on 2 cores: 1 MiB at 2, 3 and 4 ranks took 10-20% less in 256 KiB chunks than
             * in the quarter step's 128 / 88 KiB, and about 5% less again in 512 KiB ones);
             * over shared memory the algorithms' own floor (0: RL_CHUNK_FLOOR, 64 KiB). */
            c->chunk_floor = all_shm ? 0 : c->chunk_bytes;
        }
        char a[96];
        rl_sockaddr_str((struct sockaddr *)&c->ifaddr, a, sizeof a);
        RL_INFO(rank, "%d ranks, local rank %d of %d; transport %s; TCP on interface %s (%s); ring prev %d next %d; "
                      "chunk %zu bytes x %d in flight",
                nranks, c->local_rank, c->local_size, c->forced_tp >= 0 ? rl_transports[c->forced_tp]->name : "auto",
                c->ifname, a, c->prev, c->next, c->chunk_bytes, c->nslots);
        if (posix_memalign((void **)&c->slots, 64, c->chunk_bytes * (size_t)c->nslots) != 0) {
            c->slots = NULL;
            rc = RINGLET_ERR_SYSTEM;
            snprintf(err, RL_MSG_MAX, "out of memory for %d chunks of %zu bytes", c->nslots, c->chunk_bytes);
        }
    }
    /* The ring's connections now, so that init fails rather than the first call. */
    rl_conn *conn;
    if (rc == RINGLET_SUCCESS && nranks > 1) rc = rl_comm_send_conn(c, c->next, 0, &conn, err);
    if (rc == RINGLET_SUCCESS && nranks > 1) rc = rl_comm_recv_conn(c, c->prev, 0, &conn, err);
    *out = c;
    return rc;
}

ringlet_result_t rl_comm_open_done(struct ringlet_comm *c, ringlet_result_t rc, ringlet_stop_token_t token, char *err) {
    /* Every rank's connections are made before any rank may leave (a rank whose init
     * returned could otherwise destroy and remove what a slower one still connects to). */
    if (rc == RINGLET_SUCCESS) rc = rl_boot_ready(c, err);
    /* From here a cancel finds nothing to stop (the caller aborts what init returned). */
    if (rl_stop_token_attach(token, NULL)) {
        rc = RINGLET_ERR_INVALID_USAGE;
        snprintf(err, RL_MSG_MAX, "aborted while it ran");
    }
    /* A peer's failure explains this one, unless the error is a setting this rank
     * judged itself (every rank judges it the same, and some may leave first). */
    if (rc != RINGLET_SUCCESS && atomic_load(&c->failed) && rc != RINGLET_ERR_INVALID_USAGE &&
        !c->infos[c->rank].init_failed) /* its own transport's failure is this rank's cause */
        snprintf(err, RL_MSG_MAX, "%s", c->fail_msg);
    return rc;
}
