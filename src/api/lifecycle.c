/* The communicator's public life: init (from a unique id or the environment), destroy,
 * abort, finalize, split. The parts are made and unmade below (src/comm/comm_open.h);
 * the progress thread (src/engine/progress.h) is started and stopped here, between
 * them, since the engine sits above the communicator's layer. */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bootstrap.h"
#include "comm.h"
#include "comm_open.h"
#include "conn.h"
#include "device.h"
#include "envcheck.h"
#include "failure.h"
#include "group_aside.h"
#include "log.h"
#include "progress.h"
#include "stop_token.h"
#include "util.h"
#include "wait.h"

/* Stops the progress thread, then the parts below it; the struct stays. One at a time: a
 * call that an abort from another thread ended returns while the abort still tears down
 * (it waits for that call to leave), and its thread may destroy the communicator at once
 * (a finalizer, a watchdog's cleanup): that destroy waits here for the abort's teardown
 * rather than running a second one beside it and freeing what it uses. */
static void comm_close_locked(struct ringlet_comm *c, int clean) {
    rl_progress_stop(c);
    rl_comm_teardown(c, clean);
}
static void comm_close(struct ringlet_comm *c, int clean) {
    pthread_mutex_lock(&c->close_mu);
    comm_close_locked(c, clean);
    pthread_mutex_unlock(&c->close_mu);
}

static void comm_free(struct ringlet_comm *c) {
    rl_comm_free_live(c);
    rl_comm_free(c);
}

/* timeout_s: the communicator's own deadline (> 0), or RINGLET_TIMEOUT's (0). */
static ringlet_result_t comm_init(ringlet_comm_t *out, int nranks, int rank, rl_boot_target *t, ringlet_stop_token_t token,
                                  double timeout_s) {
    char err[RL_MSG_MAX] = "";
    struct ringlet_comm *c;
    ringlet_result_t rc = rl_comm_open(&c, nranks, rank, t, token, timeout_s, err);
    if (!c) return rc; /* refused before anything was built, and reported */
    if (rc == RINGLET_SUCCESS && (rc = rl_progress_start(c)) != RINGLET_SUCCESS)
        snprintf(err, sizeof err, "cannot start the progress thread");
    rc = rl_comm_open_done(c, rc, token, err);
    if (rc != RINGLET_SUCCESS) {
        /* The peers hear why (the monitor says a failure's reason): else rank 0 would take
         * this rank, alive, for a process that exited. Not a setting that every rank judges
         * alike (invalid usage): each says its own, and a peer still judging would quote
         * this one's in a second line. */
        if (!atomic_load(&c->failed) && c->mon && rc != RINGLET_ERR_INVALID_USAGE)
            rl_comm_fail_quiet(c, rc, "its init failed: %s", err);
        comm_close(c, 0);
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

ringlet_result_t ringlet_unique_id_release(const ringlet_unique_id_t *id) {
    if (!id) return rl_error(NULL, RINGLET_ERR_INVALID_ARGUMENT, "unique_id_release: id is NULL");
    (void)rl_boot_release_id(id);
    return RINGLET_SUCCESS;
}

ringlet_result_t ringlet_stop_token_create(ringlet_stop_token_t *token) {
    if (!token) return rl_error(NULL, RINGLET_ERR_INVALID_ARGUMENT, "stop_token_create: token is NULL");
    if (!(*token = rl_stop_token_new()))
        return rl_error(NULL, RINGLET_ERR_SYSTEM, "stop_token_create: out of memory");
    return RINGLET_SUCCESS;
}

ringlet_result_t ringlet_comm_init_rank(ringlet_comm_t *comm, int nranks, ringlet_unique_id_t id, int rank) {
    return ringlet_comm_init_rank_stoppable(comm, nranks, id, rank, NULL);
}

/* Init from a unique id with a deadline of its own (timeout_s > 0) or RINGLET_TIMEOUT's (0). */
static ringlet_result_t init_rank(ringlet_comm_t *comm, int nranks, ringlet_unique_id_t *id, int rank,
                                  ringlet_stop_token_t token, double timeout_s) {
    if (!comm) return rl_error(NULL, RINGLET_ERR_INVALID_ARGUMENT, "init: comm (the output pointer) is NULL");
    *comm = NULL;
    if (nranks < 1) return rl_error(NULL, RINGLET_ERR_INVALID_ARGUMENT, "init: nranks %d is < 1", nranks);
    if (rank < 0 || rank >= nranks)
        return rl_error(NULL, RINGLET_ERR_INVALID_ARGUMENT, "init: rank %d is out of range [0, %d)", rank, nranks);
    rl_boot_target t;
    char err[RL_MSG_MAX];
    ringlet_result_t rc = rl_env_check(err);
    if (rc) return rl_error(NULL, rc, "init: %s", err);
    rc = rl_boot_parse_id(id, rank, &t, err);
    if (rc) return rl_error(NULL, rc, "init: unique %s", err);
    return comm_init(comm, nranks, rank, &t, token, timeout_s);
}

ringlet_result_t ringlet_comm_init_rank_stoppable(ringlet_comm_t *comm, int nranks, ringlet_unique_id_t id, int rank,
                                          ringlet_stop_token_t token) {
    return init_rank(comm, nranks, &id, rank, token, 0);
}

ringlet_result_t ringlet_comm_init_rank_config(ringlet_comm_t *comm, int nranks, ringlet_unique_id_t id, int rank,
                                               const ringlet_comm_config_t *config) {
    double timeout_s = 0;
    if (config) {
        /* Older callers pass a smaller struct: fields past its end keep their defaults. */
        if (config->struct_size < offsetof(ringlet_comm_config_t, timeout_s) + sizeof config->timeout_s) {
            if (comm) *comm = NULL;
            return rl_error(NULL, RINGLET_ERR_INVALID_ARGUMENT,
                            "init: config->struct_size %zu is too small (set it to sizeof(ringlet_comm_config_t), %zu)",
                            config->struct_size, sizeof(ringlet_comm_config_t));
        }
        timeout_s = config->timeout_s;
        if (!(timeout_s == 0 || (timeout_s >= 0.1 && timeout_s <= 1e7))) { /* NaN fails both */
            if (comm) *comm = NULL;
            return rl_error(NULL, RINGLET_ERR_INVALID_ARGUMENT,
                            "init: config->timeout_s %g is not allowed (0 for RINGLET_TIMEOUT, or 0.1 to 1e7 seconds)",
                            timeout_s);
        }
    }
    return init_rank(comm, nranks, &id, rank, NULL, timeout_s);
}

ringlet_result_t ringlet_comm_init_env(ringlet_comm_t *comm) {
    if (!comm) return rl_error(NULL, RINGLET_ERR_INVALID_ARGUMENT, "init: comm (the output pointer) is NULL");
    *comm = NULL;
    rl_boot_target t;
    int rank = -1, nranks = -1, local = -1;
    char err[RL_MSG_MAX];
    ringlet_result_t rc = rl_env_check(err);
    if (rc) return rl_error(NULL, rc, "init from environment: %s", err);
    rc = rl_boot_target_from_env(&t, &rank, &nranks, &local, err);
    if (rc) return rl_error(NULL, rc, "init from environment: %s", err);
    return comm_init(comm, nranks, rank, &t, NULL, 0);
}

/* Whether calls of other threads (waiters, a running operation) or aborts are still
 * inside c after grace_s. */
static int calls_inside(struct ringlet_comm *c, double grace_s) {
    for (double until = rl_now() + grace_s;; rl_sleep_ms(1)) {
        int busy = rl_conn_wait_idle(c, 0) || atomic_load(&c->closers);
        if (!busy || rl_now() > until) return busy;
    }
}

ringlet_result_t ringlet_comm_destroy(ringlet_comm_t c) {
    if (!c) return rl_error(NULL, RINGLET_ERR_INVALID_ARGUMENT, "destroy: comm is NULL");
    ringlet_result_t rc = rl_comm_forked(c, "destroy"); /* the parent's to destroy; its memory stays here */
    if (rc) return rc;
    if (rl_group_forget(c))
        RL_WARN(c->rank, "destroy: calls of this communicator were recorded in this thread's open group: dropped; "
                         "the group's end runs none of its calls");
    comm_close(c, !atomic_load(&c->aborted) && !atomic_load(&c->failed));
    /* A call of another thread that the teardown ended may still be inside, leaving (an
     * abort and destroy by a watchdog while a thread waits): the struct and its requests
     * are freed once it left. Past the deadline they are left allocated, never freed
     * under a call. */
    if (calls_inside(c, c->timeout_s)) {
        char msg[RL_MSG_MAX];
        snprintf(msg, sizeof msg,
                 "destroy: a call of another thread was still inside the communicator %.0f s after its teardown "
                 "(RINGLET_TIMEOUT); its memory is left allocated",
                 c->timeout_s);
        RL_WARN(c->rank, "%s", msg);
        return rl_error(NULL, RINGLET_ERR_TIMEOUT, "%s", msg);
    }
    comm_free(c);
    return RINGLET_SUCCESS;
}

ringlet_result_t ringlet_comm_abort(ringlet_comm_t c) {
    if (!c) return rl_error(NULL, RINGLET_ERR_INVALID_ARGUMENT, "abort: comm is NULL");
    ringlet_result_t rc = rl_comm_forked(c, "abort");
    if (rc) return rc;
    /* Counted: a destroy from another thread (a watchdog aborting a hung destroy) frees
     * nothing until this left. */
    atomic_fetch_add(&c->closers, 1);
    if (atomic_exchange(&c->aborted, 1)) {
        atomic_fetch_sub(&c->closers, 1);
        return RINGLET_SUCCESS;
    }
    /* Held from before the failure wakes the calls: a thread whose call it ends may
     * destroy at once, and that destroy must wait for this teardown. */
    pthread_mutex_lock(&c->close_mu);
    /* The peers read this as the rank's reason (monitor.c): its last error is most often
     * why the application aborts, so they say it too. */
    char last[RL_MSG_MAX];
    snprintf(last, sizeof last, "%s", ringlet_comm_last_error(c));
    if (last[0])
        rl_comm_fail(c, RINGLET_ERR_INVALID_USAGE, "the communicator was aborted by this rank (its last error: %s)", last);
    else
        rl_comm_fail(c, RINGLET_ERR_INVALID_USAGE, "the communicator was aborted by this rank");
    comm_close_locked(c, 0);
    pthread_mutex_unlock(&c->close_mu);
    atomic_fetch_sub(&c->closers, 1);
    return RINGLET_SUCCESS;
}

ringlet_result_t ringlet_comm_finalize(ringlet_comm_t c) {
    if (!c) return rl_error(NULL, RINGLET_ERR_INVALID_ARGUMENT, "finalize: comm is NULL");
    ringlet_result_t forked = rl_comm_forked(c, "finalize");
    if (forked) return forked;
    double until = rl_now() + c->timeout_s;
    /* The queue's operations, then the sends and receives posted outside it (a
     * non-blocking one the user has not waited for moves on in the transports). Counted
     * as a waiter, as a wait is: an abort from another thread tears the transports down
     * only once this has left them. */
    char what[96] = "";
    ringlet_result_t rc = RINGLET_SUCCESS;
    atomic_fetch_add(&c->waiters, 1);
    while (!atomic_load(&c->failed)) {
        pthread_mutex_lock(&c->q_mu);
        int busy = c->q_head || c->running;
        pthread_mutex_unlock(&c->q_mu);
        *what = 0;
        if (!busy) {
            rl_comm_progress(c); /* threadless transports move when someone waits */
            busy = rl_comm_posted_pending(c, what, sizeof what);
        }
        if (!busy) break;
        if (rl_now() > until) {
            rc = rl_error(c, RINGLET_ERR_TIMEOUT, "finalize: %s%s still running after %.0f s (RINGLET_TIMEOUT)",
                          *what ? "" : "operations", what, c->timeout_s);
            break;
        }
        rl_sleep_ms(1);
    }
    /* Read while still counted: once not, an abort and destroy from another thread may
     * free c. */
    if (!rc) rc = ringlet_comm_get_async_error(c);
    atomic_fetch_sub(&c->waiters, 1);
    return rc;
}

/* Split: every rank learns every rank's (color, key); each new communicator's first
 * rank makes a unique id, which every rank learns too (two all-gathers over comm); then
 * the members init the new communicator from it. The all-gathers are ordinary calls on
 * comm (api.c, this layer): queued, fingerprinted and failed as any other, and so
 * split sits here, above the engine, not in src/comm/. */
static ringlet_result_t split_counted(ringlet_comm_t c, int color, int key, ringlet_comm_t *newcomm);

/* The whole split counts as a call under way on c (a waiter): an abort and destroy of c
 * from another thread waits for it to leave (the new communicator's init included). */
ringlet_result_t ringlet_comm_split(ringlet_comm_t c, int color, int key, ringlet_comm_t *newcomm) {
    if (!c) return rl_error(c, RINGLET_ERR_INVALID_ARGUMENT, "split: comm is NULL");
    atomic_fetch_add(&c->waiters, 1);
    ringlet_result_t rc = split_counted(c, color, key, newcomm);
    atomic_fetch_sub(&c->waiters, 1);
    return rc;
}

/* What a rank's arguments to split were wrong in (sent in the first exchange, so that
 * every rank refuses the split at once, naming it, rather than wait for its exchanges). */
enum { SPLIT_ARGS_OK, SPLIT_NO_NEWCOMM, SPLIT_BAD_COLOR, SPLIT_REFUSED };

static ringlet_result_t split_counted(ringlet_comm_t c, int color, int key, ringlet_comm_t *newcomm) {
    ringlet_comm_t unused;
    int32_t bad = color == RINGLET_SPLIT_REFUSE                    ? SPLIT_REFUSED
                  : !newcomm                                        ? SPLIT_NO_NEWCOMM
                  : color < 0 && color != RINGLET_SPLIT_NOCOLOR ? SPLIT_BAD_COLOR
                                                                 : SPLIT_ARGS_OK;
    if (!newcomm) newcomm = &unused;
    *newcomm = NULL;
    int P = c->nranks, me = c->rank;
    int32_t mine[4] = {color, key, me, bad}, *all = calloc((size_t)P * 4, sizeof *all);
    ringlet_unique_id_t *ids = calloc((size_t)P, sizeof *ids);
    if (!all || !ids) {
        free(all), free(ids);
        return rl_error(c, RINGLET_ERR_SYSTEM, "split: out of memory");
    }
    /* Inside a group: run now (the group would record the exchanges, not run them). */
    int group = rl_group_set_aside();
    ringlet_result_t rc = ringlet_allgather(mine, all, 4, RINGLET_INT32, c, NULL);
    int refused = 0;
    for (int q = 0; q < P && !rc; q++) {
        refused = all[4 * q + 3] != SPLIT_ARGS_OK;
        if (all[4 * q + 3] == SPLIT_NO_NEWCOMM)
            rc = rl_error(c, RINGLET_ERR_INVALID_ARGUMENT, "split: rank %d passed a NULL newcomm", q);
        else if (all[4 * q + 3] == SPLIT_REFUSED)
            rc = rl_error(c, RINGLET_ERR_INVALID_ARGUMENT,
                          "split: rank %d refused it (RINGLET_SPLIT_REFUSE: an argument of a layer above, such as "
                          "the NCCL layer's config, was wrong on that rank)", q);
        else if (all[4 * q + 3] != SPLIT_ARGS_OK)
            rc = rl_error(c, RINGLET_ERR_INVALID_ARGUMENT,
                          "split: rank %d passed color %d, which is negative (and not RINGLET_SPLIT_NOCOLOR)", q,
                          (int)all[4 * q]);
    }
    if (refused) { /* every rank refuses it, having seen the same: nothing more is exchanged */
        rl_group_restore(group);
        free(all), free(ids);
        return rc;
    }
    /* This rank's new rank: members of its color before it in (key, rank) order. */
    int newrank = 0, size = 0, leader = -1;
    for (int q = 0; q < P && !rc && color != RINGLET_SPLIT_NOCOLOR; q++) {
        if (all[4 * q] != color) continue;
        size++;
        int kq = all[4 * q + 1];
        if (kq < key || (kq == key && q < me)) newrank++;
        if (leader < 0 || kq < all[4 * leader + 1] || (kq == all[4 * leader + 1] && q < leader)) leader = q;
    }
    ringlet_unique_id_t id, none;
    memset(&id, 0, sizeof id);
    memset(&none, 0, sizeof none);
    /* A leader that cannot make an id still takes part in the exchange, with zeros: the
     * others then fail at once, rather than wait for an exchange it would skip. */
    ringlet_result_t idrc = RINGLET_SUCCESS;
    char idmsg[RL_MSG_MAX] = "";
    /* this rank makes id: its listening socket is this process's until an init takes it */
    int own_id = !rc && color != RINGLET_SPLIT_NOCOLOR && newrank == 0;
    if (own_id && (idrc = ringlet_get_unique_id(&id))) {
        snprintf(idmsg, sizeof idmsg, "%s", ringlet_comm_last_error(NULL));
        memset(&id, 0, sizeof id);
        own_id = 0;
    }
    if (!rc) rc = ringlet_allgather(&id, ids, sizeof id, RINGLET_UINT8, c, NULL);
    if (!rc && idrc) rc = rl_error(NULL, idrc, "this rank, the first of its color, could not make the new id: %s", idmsg);
    else if (!rc && color != RINGLET_SPLIT_NOCOLOR && !memcmp(&ids[leader], &none, sizeof none))
        rc = rl_error(NULL, RINGLET_ERR_REMOTE, "rank %d, the first of color %d, could not make the new communicator's id",
                      leader, color);
    /* The new communicator is on comm's device, not on the caller's current one (as NCCL's
     * split is): a thread that drives ranks on several devices splits them all from one.
     * Its init runs there (cuda_ipc's probe memory is made on the current device), if that
     * device has a context: entering one without would make it (a job on host buffers). */
    int dev = -1, saved = -1, active = 0, entered = 0;
    const rl_device_ops *d = rl_device();
    if (d && ringlet_comm_device(c, &dev) == RINGLET_SUCCESS && dev >= 0 &&
        d->context_active(dev, &active) == RL_DEV_OK && active)
        entered = d->device_enter(dev, &saved) == RL_DEV_OK;
    /* An id no init will take (the exchange failed): given back, its socket closed (a process
     * holds 64 at most, and a listening socket of a split that failed would still accept). */
    if (rc && own_id) ringlet_unique_id_release(&id);
    /* The new communicator keeps this one's deadline (which may not be RINGLET_TIMEOUT's).
     * Its init ends when this one fails (a member that died after the exchanges: this
     * one's monitor hears it at once, the new one's init would wait for it till the
     * deadline), through a stop token this one fires (c->split_stop). Counted as a waiter:
     * an abort and destroy of c from another thread waits for it to leave. */
    if (!rc && color != RINGLET_SPLIT_NOCOLOR) {
        ringlet_stop_token_t stop = NULL;
        if (ringlet_stop_token_create(&stop) != RINGLET_SUCCESS) stop = NULL; /* then not stoppable */
        pthread_mutex_lock(&c->fail_mu);
        int mine_slot = stop && !c->split_stop; /* another thread's split of c holds it: not stoppable */
        if (mine_slot) c->split_stop = stop;
        if (mine_slot && atomic_load(&c->failed)) ringlet_stop_token_fire(stop);
        pthread_mutex_unlock(&c->fail_mu);
        rc = init_rank(newcomm, size, &ids[leader], newrank, mine_slot ? stop : NULL, c->timeout_s);
        pthread_mutex_lock(&c->fail_mu);
        if (mine_slot) c->split_stop = NULL;
        pthread_mutex_unlock(&c->fail_mu);
        ringlet_stop_token_destroy(stop);
        /* A member gone (the new init saw a connection close or stall): c's monitor names
         * the cause within moments, though maybe after this init saw its effect (rank 0's
         * new init, stopped by c's failure, closed its connections first). */
        if (rc == RINGLET_ERR_REMOTE || rc == RINGLET_ERR_TIMEOUT) rl_comm_await_cause(c);
        /* Stopped by c's failure: that failure is the reason. */
        if (rc && atomic_load(&c->failed)) {
            char why[RL_MSG_MAX];
            rc = rl_comm_failure(c, why, sizeof why);
            rl_error(NULL, rc, "the communicator being split failed during the new one's init: %s", why);
        }
    }
    if (entered) d->device_leave(saved);
    if (!rc && *newcomm) rl_comm_trace_split(*newcomm);
    if (!rc && *newcomm && dev >= 0) {
        (*newcomm)->init_device = dev;
        atomic_store(&(*newcomm)->conn_device, dev);
    }
    rl_group_restore(group);
    free(all);
    free(ids);
    if (rc) return rl_error(c, rc, "split (color %d, key %d): %s", color, key, ringlet_comm_last_error(*newcomm ? *newcomm : NULL));
    return RINGLET_SUCCESS;
}
