/* Communicator life: init (bootstrap, transport, ring), the progress thread that runs
 * operations in issue order, failure state, destroy and abort. */
#include <errno.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "comm.h"
#include "device.h"
#include "log.h"
#include "netif.h"
#include "sha256.h"
#include "sock.h"
#include "trace.h"
#include "util.h"

static _Thread_local char t_last_error[RL_MSG_MAX];

const char *rl_op_name(rl_op_kind k) {
    static const char *names[] = {"allreduce", "broadcast", "reduce", "allgather", "reduce_scatter",
                                  "barrier",   "send",      "recv"};
    return (unsigned)k < sizeof names / sizeof names[0] ? names[k] : "?";
}

ringlet_result_t rl_error(struct ringlet_comm *c, ringlet_result_t code, const char *fmt, ...) {
    char msg[RL_MSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    snprintf(t_last_error, sizeof t_last_error, "%s", msg);
    if (c) {
        pthread_mutex_lock(&c->err_mu);
        snprintf(c->last_error, sizeof c->last_error, "%s", msg);
        pthread_mutex_unlock(&c->err_mu);
        RL_INFO(c->rank, "error %d (%s): %s", code, ringlet_strerror(code), msg);
    } else {
        RL_INFO(-1, "error %d (%s): %s", code, ringlet_strerror(code), msg);
    }
    return code;
}

const char *ringlet_comm_last_error(ringlet_comm_t c) {
    if (c) {
        /* Copy under the lock: the progress thread may write it meanwhile. */
        static _Thread_local char copy[RL_MSG_MAX];
        pthread_mutex_lock(&c->err_mu);
        memcpy(copy, c->last_error, sizeof copy);
        pthread_mutex_unlock(&c->err_mu);
        return copy;
    }
    return t_last_error;
}

void rl_comm_notify(void *arg) {
    struct ringlet_comm *c = arg;
    rl_bell_ring(atomic_load(&c->ev));
}

unsigned rl_comm_gen(struct ringlet_comm *c) { return atomic_load(&atomic_load(&c->ev)->gen); }

int rl_comm_progress(struct ringlet_comm *c) {
    if (!atomic_load_explicit(&c->polled, memory_order_relaxed)) return 0;
    int moved = 0;
    for (int i = 0; i < RL_TP_MAX; i++)
        if (c->tctx[i] && rl_transports[i]->progress) moved |= rl_transports[i]->progress(c->tctx[i]);
    return moved;
}

static int comm_poll(void *c) { return rl_comm_progress(c); }

void rl_comm_wait_event(struct ringlet_comm *c, unsigned gen, int ms) {
    rl_bell *b = atomic_load(&c->ev);
    if (atomic_load_explicit(&c->polled, memory_order_relaxed)) {
        /* A peer process answers within microseconds; sleeping and being woken costs
         * more than that, so poll for a while first (yielding: ranks may share cores). */
        double until = 0;
        for (unsigned n = 0;; n++) {
            if (rl_comm_progress(c) || atomic_load(&b->gen) != gen) return;
            /* The first rounds in a pause loop (a reply often comes within a
             * microsecond, and a yield is a system call), then yield the core; the
             * clock is read only every 64 rounds. */
            if (n < c->spin_pause) {
                rl_cpu_relax();
                continue;
            }
            sched_yield();
            if (n % 64 == 0) {
                double now = rl_now();
                if (until == 0) until = now + c->spin_s;
                else if (now > until) break;
            }
        }
    }
    rl_bell_wait(b, gen, ms, comm_poll, c);
}

void rl_comm_fail(struct ringlet_comm *c, ringlet_result_t code, const char *fmt, ...) {
    pthread_mutex_lock(&c->fail_mu);
    if (!atomic_load(&c->failed)) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(c->fail_msg, sizeof c->fail_msg, fmt, ap);
        va_end(ap);
        c->fail_code = code;
        atomic_store(&c->failed, 1);
        if (!atomic_load(&c->aborted)) RL_WARN(c->rank, "communicator failed: %s", c->fail_msg);
    }
    pthread_mutex_unlock(&c->fail_mu);
    atomic_store(&c->stop, 1);
    rl_comm_notify(c);
}

/* The transport for a pair: the forced one, else the best both ranks have (IB
 * between hosts, TCP otherwise). Both ends compute the same answer from the table. */
static ringlet_result_t pick_transport(struct ringlet_comm *c, int peer, int *tp, char *err) {
    const rl_rank_info *me = &c->infos[c->rank], *them = &c->infos[peer];
    if (c->forced_tp >= 0) {
        *tp = c->forced_tp;
        if (them->bloblen[*tp]) return RINGLET_SUCCESS;
        snprintf(err, RL_ERR_MAX, "RINGLET_TRANSPORT=%s, but rank %d does not have it", rl_transports[*tp]->name, peer);
        return RINGLET_ERR_INVALID_USAGE;
    }
    int same_host = !memcmp(me->hostid, them->hostid, 16);
    if (same_host && me->bloblen[RL_TP_SHM] && them->bloblen[RL_TP_SHM]) *tp = RL_TP_SHM;
    else if (!same_host && me->bloblen[RL_TP_IB] && them->bloblen[RL_TP_IB]) *tp = RL_TP_IB;
    else *tp = RL_TP_TCP;
    return RINGLET_SUCCESS;
}

static ringlet_result_t get_conn(struct ringlet_comm *c, int peer, int send, rl_conn **conn, char *err) {
    rl_conn *slot = send ? &c->send_conns[peer] : &c->recv_conns[peer];
    if (!slot->h) {
        int tp;
        ringlet_result_t rc = pick_transport(c, peer, &tp, err);
        if (rc) return rc;
        const rl_transport_ops *ops = rl_transports[tp];
        rc = send ? ops->connect(c->tctx[tp], peer, c->infos[peer].blob[tp], c->infos[peer].bloblen[tp], &slot->h, err)
                  : ops->accept(c->tctx[tp], peer, &slot->h, err);
        if (rc) return rc;
        slot->tp = ops;
        if (ops->progress) atomic_store(&c->polled, 1);
        RL_INFO(c->rank, "%s rank %d over %s", send ? "sending to" : "receiving from", peer, ops->name);
    }
    *conn = slot;
    return RINGLET_SUCCESS;
}

ringlet_result_t rl_comm_failure(struct ringlet_comm *c, char *msg, size_t len) {
    pthread_mutex_lock(&c->fail_mu);
    ringlet_result_t code = c->fail_code;
    if (msg) snprintf(msg, len, "%s", c->fail_msg);
    pthread_mutex_unlock(&c->fail_mu);
    return code;
}

void rl_comm_fail_link(struct ringlet_comm *c, ringlet_result_t code, const char *what) {
    double until = rl_now() + (c->timeout_s < 1.0 ? c->timeout_s : 1.0);
    while (!atomic_load(&c->failed) && !atomic_load(&c->aborted) && rl_now() < until)
        rl_comm_wait_event(c, rl_comm_gen(c), 20);
    rl_comm_fail(c, code, "%s", what);
}

ringlet_result_t rl_comm_op_failed(struct ringlet_comm *c, const struct ringlet_request *r, ringlet_result_t code,
                                   const char *what, char *err) {
    if (!atomic_load(&c->failed)) {
        if (code == RINGLET_ERR_REMOTE) rl_comm_fail_link(c, code, what);
        else rl_comm_fail(c, code, "%s", what);
    }
    char msg[RL_MSG_MAX];
    code = rl_comm_failure(c, msg, sizeof msg);
    snprintf(err, RL_MSG_MAX, "%s #%llu (count %zu) failed: %.400s", rl_op_name(r->kind), (unsigned long long)r->seq,
             r->count, msg);
    return code;
}

ringlet_result_t rl_comm_send_conn(struct ringlet_comm *c, int peer, rl_conn **conn, char *err) {
    return get_conn(c, peer, 1, conn, err);
}

ringlet_result_t rl_comm_recv_conn(struct ringlet_comm *c, int peer, rl_conn **conn, char *err) {
    return get_conn(c, peer, 0, conn, err);
}

void *rl_comm_temp(struct ringlet_comm *c, size_t bytes) {
    if (bytes > c->temp_size) {
        void *p = NULL;
        if (posix_memalign(&p, 64, bytes ? bytes : 64) != 0) return NULL;
        free(c->temp);
        c->temp = p;
        c->temp_size = bytes;
    }
    return c->temp ? c->temp : (void *)c->slots;
}

/* ---- progress thread ---- */

static void finish(struct ringlet_comm *c, struct ringlet_request *r, ringlet_result_t rc) {
    rl_dev_release(c, r);
    if (r->detached) {
        /* A stream call: its error is the communicator's (ringlet_comm_get_async_error). */
        if (rc) {
            rl_error(c, rc, "%s", r->err);
            if (!atomic_load(&c->failed)) rl_comm_fail(c, rc, "%s", r->err);
        }
        free(r);
        return;
    }
    r->result = rc;
    atomic_store_explicit(&r->done, 1, memory_order_release);
    rl_comm_notify(c);
}

static void run_p2p(struct ringlet_comm *c, struct ringlet_request *r) {
    char err[RL_ERR_MAX] = "";
    rl_conn *conn;
    size_t bytes = r->count * ringlet_datatype_size(r->dtype);
    ringlet_result_t rc = r->kind == RL_OP_SEND ? rl_comm_send_conn(c, r->peer, &conn, err)
                                                : rl_comm_recv_conn(c, r->peer, &conn, err);
    rl_fault_point(&c->fault, c->rank, rl_op_name(r->kind), r->seq, r->kind == RL_OP_SEND ? RL_FAULT_SEND : RL_FAULT_RECV, 0);
    if (rc == RINGLET_SUCCESS)
        rc = r->kind == RL_OP_SEND ? conn->tp->isend(conn->h, r->sendbuf, bytes, NULL, &r->treq)
                                   : conn->tp->irecv(conn->h, r->recvbuf, bytes, NULL, &r->treq);
    if (rc != RINGLET_SUCCESS) {
        if (atomic_load(&c->failed)) snprintf(err, sizeof err, "%.200s", c->fail_msg);
        snprintf(r->err, sizeof r->err, "%s #%llu to/from rank %d: %s", rl_op_name(r->kind),
                 (unsigned long long)r->seq, r->peer, err);
        finish(c, r, rc);
        return;
    }
    /* The waiter completes it from the transport request. */
    r->posted_at = rl_now();
    atomic_store_explicit(&r->posted, 1, memory_order_release);
    rl_comm_notify(c);
}

/* A host collective on the calling thread; the message in r->err. */
static ringlet_result_t run_host_collective(struct ringlet_comm *c, struct ringlet_request *r) {
    char err[RL_MSG_MAX];
    err[0] = 0;
    int timed = c->trace || rl_log_level() >= RL_LOG_TRACE; /* a clock read costs ~10% of a small call */
    double t0 = timed ? rl_now() : 0;
    ringlet_result_t rc = rl_run_collective(c, r, err);
    if (timed) {
        double t1 = rl_now();
        size_t bytes = r->count * ringlet_datatype_size(r->dtype);
        rl_trace_span(c->trace, RL_LANE_OP, rl_op_name(r->kind), t0, t1, rl_op_name(r->kind), r->seq, -1, bytes, -1);
        RL_TRACE(c->rank, "%s #%llu count %zu: %.1f us, %s", rl_op_name(r->kind), (unsigned long long)r->seq, r->count,
                 (t1 - t0) * 1e6, rc ? err : "ok");
    }
    if (rc) snprintf(r->err, sizeof r->err, "%s", err);
    return rc;
}

static void *progress_thread(void *arg) {
    struct ringlet_comm *c = arg;
    for (;;) {
        pthread_mutex_lock(&c->q_mu);
        /* An operation run inline by the caller finishes before the next one starts. */
        while ((!c->q_head || c->running) && !c->q_quit) pthread_cond_wait(&c->q_cv, &c->q_mu);
        struct ringlet_request *r = c->q_head;
        if (r) {
            c->q_head = r->next;
            if (!c->q_head) c->q_tail = NULL;
            c->running = 1;
        }
        pthread_mutex_unlock(&c->q_mu);
        if (!r) break;
        if (atomic_load(&c->failed)) {
            char msg[RL_MSG_MAX];
            ringlet_result_t code = rl_comm_failure(c, msg, sizeof msg);
            snprintf(r->err, sizeof r->err, "%s #%llu not run: the communicator failed earlier: %.400s",
                     rl_op_name(r->kind), (unsigned long long)r->seq, msg);
            finish(c, r, code);
        } else if (r->device >= 0 || r->stream) {
            char err[RL_MSG_MAX] = "";
            ringlet_result_t rc = rl_dev_run(c, r, err);
            if (rc) snprintf(r->err, sizeof r->err, "%s #%llu: %.400s", rl_op_name(r->kind), (unsigned long long)r->seq, err);
            finish(c, r, rc);
        } else if (r->kind == RL_OP_SEND || r->kind == RL_OP_RECV) {
            run_p2p(c, r);
        } else {
            finish(c, r, run_host_collective(c, r));
        }
        pthread_mutex_lock(&c->q_mu);
        c->running = 0;
        pthread_mutex_unlock(&c->q_mu);
    }
    return NULL;
}

int rl_comm_try_inline(struct ringlet_comm *c, struct ringlet_request *r, ringlet_result_t *rc) {
    pthread_mutex_lock(&c->q_mu);
    if (c->q_head || c->running || !c->progress_started) {
        pthread_mutex_unlock(&c->q_mu);
        return 0;
    }
    c->running = 1;
    r->seq = ++c->seq;
    pthread_mutex_unlock(&c->q_mu);
    *rc = run_host_collective(c, r);
    pthread_mutex_lock(&c->q_mu);
    c->running = 0;
    /* Calls queued meanwhile (another thread's) were held back: let them run. */
    if (c->q_head) pthread_cond_signal(&c->q_cv);
    pthread_mutex_unlock(&c->q_mu);
    return 1;
}

void rl_comm_track(struct ringlet_comm *c, struct ringlet_request *r, int add) {
    pthread_mutex_lock(&c->live_mu);
    if (add) {
        r->live_prev = NULL;
        r->live_next = c->live;
        if (c->live) c->live->live_prev = r;
        c->live = r;
    } else {
        if (r->live_prev) r->live_prev->live_next = r->live_next;
        else c->live = r->live_next;
        if (r->live_next) r->live_next->live_prev = r->live_prev;
    }
    pthread_mutex_unlock(&c->live_mu);
}

ringlet_result_t rl_comm_enqueue(struct ringlet_comm *c, struct ringlet_request *r, char *err) {
    pthread_mutex_lock(&c->q_mu);
    r->seq = ++c->seq;
    if (r->stream) {
        ringlet_result_t rc = rl_dev_enqueue(c, r, err);
        if (rc) {
            c->seq--;
            pthread_mutex_unlock(&c->q_mu);
            return rc;
        }
    }
    r->next = NULL;
    if (c->q_tail) c->q_tail->next = r;
    else c->q_head = r;
    c->q_tail = r;
    pthread_cond_signal(&c->q_cv);
    pthread_mutex_unlock(&c->q_mu);
    return RINGLET_SUCCESS;
}

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
    }
    uint8_t h[32];
    rl_sha256(buf, strlen(buf), h);
    memcpy(out, h, 16);
}

/* Ring order: hosts in order of their lowest rank, ranks of a host side by side, so
 * the ring crosses each host boundary once. */
static void build_ring(struct ringlet_comm *c) {
    int P = c->nranks, n = 0;
    char *placed = calloc((size_t)P, 1);
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

static struct ringlet_comm *comm_alloc(int rank, int nranks) {
    struct ringlet_comm *c = calloc(1, sizeof *c);
    if (!c) return NULL;
    c->rank = rank;
    c->nranks = nranks;
    pthread_mutex_init(&c->fail_mu, NULL);
    atomic_init(&c->ev, &c->own_bell);
    pthread_mutex_init(&c->q_mu, NULL);
    pthread_cond_init(&c->q_cv, NULL);
    pthread_mutex_init(&c->err_mu, NULL);
    pthread_mutex_init(&c->live_mu, NULL);
    c->infos = calloc((size_t)nranks, sizeof *c->infos);
    c->ring = calloc((size_t)nranks, sizeof *c->ring);
    c->send_conns = calloc((size_t)nranks, sizeof(rl_conn));
    c->recv_conns = calloc((size_t)nranks, sizeof(rl_conn));
    if (!c->infos || !c->ring || !c->send_conns || !c->recv_conns) {
        free(c->infos), free(c->ring), free(c->send_conns), free(c->recv_conns), free(c);
        return NULL;
    }
    return c;
}

/* Stops threads and closes connections; keeps the struct (an aborted handle must still
 * answer calls with an error until it is destroyed). */
static void comm_teardown(struct ringlet_comm *c, int clean) {
    if (c->progress_started) {
        pthread_mutex_lock(&c->q_mu);
        c->q_quit = 1;
        pthread_cond_signal(&c->q_cv);
        pthread_mutex_unlock(&c->q_mu);
        pthread_join(c->progress, NULL);
        c->progress_started = 0;
    }
    rl_trace_close(c->trace);
    c->trace = NULL;
    if (!clean) atomic_store(&c->stop, 1);
    /* Goodbye first (rank 0 waits for the others while every link still works), then
     * stop whatever transfer is still posted (an irecv nobody waited for) so that
     * closing the connections never waits on a peer. */
    rl_monitor_stop(c, clean);
    atomic_store(&c->stop, 1);
    for (int p = 0; p < c->nranks; p++) {
        if (c->send_conns[p].h) c->send_conns[p].tp->close(c->send_conns[p].h);
        if (c->recv_conns[p].h) c->recv_conns[p].tp->close(c->recv_conns[p].h);
        c->send_conns[p].h = c->recv_conns[p].h = NULL;
    }
    /* The shared-memory bell goes away with its transport. */
    atomic_store(&c->ev, &c->own_bell);
    atomic_store(&c->polled, 0);
    for (int i = 0; i < RL_TP_MAX; i++)
        if (c->tctx[i]) rl_transports[i]->fini(c->tctx[i]);
    memset(c->tctx, 0, sizeof c->tctx);
    rl_dev_comm_fini(c);
    free(c->slots);
    free(c->temp);
    c->slots = c->temp = NULL;
    c->temp_size = 0;
}

static void comm_free(struct ringlet_comm *c) {
    /* Requests never waited on: their transfers stopped with the connections. */
    while (c->live) {
        struct ringlet_request *r = c->live;
        c->live = r->live_next;
        free(r);
    }
    pthread_mutex_destroy(&c->live_mu);
    free(c->infos), free(c->ring), free(c->send_conns), free(c->recv_conns);
    pthread_mutex_destroy(&c->fail_mu);
    pthread_mutex_destroy(&c->q_mu);
    pthread_cond_destroy(&c->q_cv);
    pthread_mutex_destroy(&c->err_mu);
    free(c);
}

static ringlet_result_t comm_init(ringlet_comm_t *out, int nranks, int rank, rl_boot_target *t) {
    char err[RL_MSG_MAX] = "";
    struct ringlet_comm *c = comm_alloc(rank, nranks);
    if (!c) {
        if (t->listen_fd >= 0) close(t->listen_fd);
        return rl_error(NULL, RINGLET_ERR_SYSTEM, "init: out of memory");
    }
    memcpy(c->secret, t->secret, 32);
    c->timeout_s = rl_timeout_s();
    c->chunk_bytes = (size_t)rl_env_int("RINGLET_CHUNK_SIZE", 0, 4096, 1LL << 30); /* 0: chosen after bootstrap */
    c->nslots = (int)rl_env_int("RINGLET_NCHUNKS_INFLIGHT", 4, 1, 64);
    const char *algo = getenv("RINGLET_ALGO");
    c->algo = RL_ALGO_AUTO;
    if (algo && !strcmp(algo, "ring")) c->algo = RL_ALGO_RING;
    else if (algo && !strcmp(algo, "oneshot")) c->algo = RL_ALGO_ONESHOT;
    else if (algo && *algo && strcmp(algo, "auto") != 0) {
        if (t->listen_fd >= 0) close(t->listen_fd);
        comm_free(c);
        return rl_error(NULL, RINGLET_ERR_INVALID_ARGUMENT, "init: RINGLET_ALGO=%s is not one of auto, ring, oneshot", algo);
    }
    c->oneshot_bytes = (size_t)rl_env_int("RINGLET_ONESHOT_BYTES", 64 << 10, 0, 1LL << 30);
    c->oneshot_max_ranks = (int)rl_env_int("RINGLET_ONESHOT_MAX_RANKS", 8, 2, 65);
    const char *tname = getenv("RINGLET_TRANSPORT");
    c->forced_tp = -1;
    if (tname && *tname && strcmp(tname, "auto") != 0) {
        c->forced_tp = rl_transport_by_name(tname);
        if (c->forced_tp < 0) {
            if (t->listen_fd >= 0) close(t->listen_fd);
            comm_free(c);
            return rl_error(NULL, RINGLET_ERR_INVALID_ARGUMENT,
                            "init: RINGLET_TRANSPORT=%s is not a transport of this build", tname);
        }
    }
    ringlet_result_t rc = RINGLET_SUCCESS;

    /* The interface peers reach this rank on. */
    const char *spec = getenv("RINGLET_SOCKET_IFNAME");
    struct rl_netif nif[16];
    int n = rl_netif_list(spec, nif, 16);
    if (n <= 0) {
        rc = rl_error(NULL, RINGLET_ERR_SYSTEM, "init: no network interface%s%s", spec ? " matches RINGLET_SOCKET_IFNAME=" : "",
                      spec ? spec : "");
        if (t->listen_fd >= 0) close(t->listen_fd);
        comm_free(c);
        return rc;
    }
    c->ifaddr = nif[0].addr;
    snprintf(c->ifname, sizeof c->ifname, "%s", nif[0].name);

    rl_transport_init tin = {rank, nranks, &c->stop, rl_comm_notify, c, c->timeout_s, c->secret, &c->ifaddr};
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
                snprintf(err, sizeof err, "%s", terr);
            } else {
                RL_INFO(rank, "transport %s unavailable: %s", rl_transports[i]->name, terr);
            }
        }
    }
    /* Sleep on the bell that same-host peers can ring. */
    for (int i = 0; i < RL_TP_MAX; i++)
        if (c->tctx[i] && rl_transports[i]->bell) atomic_store(&c->ev, rl_transports[i]->bell(c->tctx[i]));
    c->spin_s = rl_env_double("RINGLET_SPIN_US", 50, 0, 1e6) * 1e-6;
    c->trace = rl_trace_open(rank, nranks);
    rl_fault_from_env(&c->fault);
    c->inline_ok = (int)rl_env_int("RINGLET_INLINE", 1, 0, 1);
    c->infos[rank].rank = rank;
    c->infos[rank].pid = (int32_t)getpid();
    host_id(c->infos[rank].hostid);
    if (rc == RINGLET_SUCCESS) {
        rc = rl_boot_exchange(c, t, err);
    } else if (t->listen_fd >= 0) {
        close(t->listen_fd);
    }
    if (rc == RINGLET_SUCCESS) {
        build_ring(c);
        /* More ranks than cores here: a waiter yields at once, since the rank it waits
         * for may need this core to run at all. */
        c->spin_pause = c->local_size > sysconf(_SC_NPROCESSORS_ONLN) ? 0 : 256;
        if (!c->chunk_bytes) {
            /* Measured defaults: 256 KiB when both ring neighbours are reached over shared
             * memory (a chunk then fits one lent slot and stays in cache), 512 KiB for the
             * network transports. Every rank of a one-host job picks the same. */
            int tn = RL_TP_TCP, tp = RL_TP_TCP;
            char e2[RL_ERR_MAX];
            if (nranks > 1 && pick_transport(c, c->next, &tn, e2) == RINGLET_SUCCESS &&
                pick_transport(c, c->prev, &tp, e2) == RINGLET_SUCCESS && tn == RL_TP_SHM && tp == RL_TP_SHM)
                c->chunk_bytes = 256 << 10;
            else
                c->chunk_bytes = 512 << 10;
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
            snprintf(err, sizeof err, "out of memory for %d chunks of %zu bytes", c->nslots, c->chunk_bytes);
        }
    }
    /* The ring's connections now, so that init fails rather than the first call. */
    rl_conn *conn;
    if (rc == RINGLET_SUCCESS && nranks > 1) rc = rl_comm_send_conn(c, c->next, &conn, err);
    if (rc == RINGLET_SUCCESS && nranks > 1) rc = rl_comm_recv_conn(c, c->prev, &conn, err);
    if (rc == RINGLET_SUCCESS) {
        if (pthread_create(&c->progress, NULL, progress_thread, c) != 0) {
            rc = RINGLET_ERR_SYSTEM;
            snprintf(err, sizeof err, "cannot start the progress thread");
        } else {
            c->progress_started = 1;
        }
    }
    if (rc != RINGLET_SUCCESS) {
        if (atomic_load(&c->failed)) snprintf(err, sizeof err, "%s", c->fail_msg);
        comm_teardown(c, 0);
        comm_free(c);
        return rl_error(NULL, rc, "init (rank %d of %d): %s", rank, nranks, err);
    }
    *out = c;
    return RINGLET_SUCCESS;
}

ringlet_result_t ringlet_get_unique_id(ringlet_unique_id_t *id) {
    if (!id) return rl_error(NULL, RINGLET_ERR_INVALID_ARGUMENT, "get_unique_id: id is NULL");
    char err[RL_MSG_MAX];
    ringlet_result_t rc = rl_boot_make_id(id, err);
    return rc ? rl_error(NULL, rc, "get_unique_id: %s", err) : RINGLET_SUCCESS;
}

ringlet_result_t ringlet_comm_init_rank(ringlet_comm_t *comm, int nranks, ringlet_unique_id_t id, int rank) {
    if (!comm) return rl_error(NULL, RINGLET_ERR_INVALID_ARGUMENT, "init: comm (the output pointer) is NULL");
    *comm = NULL;
    if (nranks < 1) return rl_error(NULL, RINGLET_ERR_INVALID_ARGUMENT, "init: nranks %d is < 1", nranks);
    if (rank < 0 || rank >= nranks)
        return rl_error(NULL, RINGLET_ERR_INVALID_ARGUMENT, "init: rank %d is out of range [0, %d)", rank, nranks);
    rl_boot_target t;
    char err[RL_MSG_MAX];
    ringlet_result_t rc = rl_boot_parse_id(&id, rank, &t, err);
    if (rc) return rl_error(NULL, rc, "init: unique %s", err);
    return comm_init(comm, nranks, rank, &t);
}

ringlet_result_t ringlet_comm_init_env(ringlet_comm_t *comm) {
    if (!comm) return rl_error(NULL, RINGLET_ERR_INVALID_ARGUMENT, "init: comm (the output pointer) is NULL");
    *comm = NULL;
    rl_boot_target t;
    int rank = -1, nranks = -1, local = -1;
    char err[RL_MSG_MAX];
    ringlet_result_t rc = rl_boot_target_from_env(&t, &rank, &nranks, &local, err);
    if (rc) return rl_error(NULL, rc, "init from environment: %s", err);
    if (nranks < 1 || rank >= nranks) {
        if (t.listen_fd >= 0) close(t.listen_fd);
        return rl_error(NULL, RINGLET_ERR_INVALID_ARGUMENT, "init from environment: rank %d, world size %d", rank, nranks);
    }
    return comm_init(comm, nranks, rank, &t);
}

ringlet_result_t ringlet_comm_destroy(ringlet_comm_t c) {
    if (!c) return rl_error(NULL, RINGLET_ERR_INVALID_ARGUMENT, "destroy: comm is NULL");
    comm_teardown(c, !atomic_load(&c->aborted) && !atomic_load(&c->failed));
    comm_free(c);
    return RINGLET_SUCCESS;
}

ringlet_result_t ringlet_comm_abort(ringlet_comm_t c) {
    if (!c) return rl_error(NULL, RINGLET_ERR_INVALID_ARGUMENT, "abort: comm is NULL");
    if (atomic_exchange(&c->aborted, 1)) return RINGLET_SUCCESS;
    rl_comm_fail(c, RINGLET_ERR_INVALID_USAGE, "the communicator was aborted by this rank");
    comm_teardown(c, 0);
    return RINGLET_SUCCESS;
}

ringlet_result_t ringlet_comm_get_async_error(ringlet_comm_t c) {
    if (!c) return rl_error(NULL, RINGLET_ERR_INVALID_ARGUMENT, "get_async_error: comm is NULL");
    return atomic_load(&c->failed) ? rl_comm_failure(c, NULL, 0) : RINGLET_SUCCESS;
}
