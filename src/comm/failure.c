#include "failure.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "device.h"
#include "log.h"
#include "util.h"
#include "wait.h"

static _Thread_local char t_last_error[RL_MSG_MAX];

ringlet_result_t rl_error(struct ringlet_comm *c, ringlet_result_t code, const char *fmt, ...) {
    char msg[RL_MSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    snprintf(t_last_error, sizeof t_last_error, "%s", msg);
    /* A CUDA failure at a call that left the device context unusable (a sticky error: a
     * kernel of this process faulted): no later call of this rank can work, and its peers
     * would wait for its part until RINGLET_TIMEOUT, not knowing why. The communicator
     * fails here, and the monitor has every rank fail at once with the cause. Other CUDA
     * errors at a call (a refused argument) leave it usable. */
    int sticky = c && code == RINGLET_ERR_CUDA && rl_dev_error_sticky();
    /* A forked child leaves the parent's communicator alone (its locks may have been
     * held by a parent's thread at the fork): the thread's message only. */
    if (c && rl_fork_generation() != c->fork_gen) c = NULL;
    if (c) {
        pthread_mutex_lock(&c->err_mu);
        snprintf(c->last_error, sizeof c->last_error, "%s", msg);
        pthread_mutex_unlock(&c->err_mu);
        RL_INFO(c->rank, "error %d (%s): %s", code, ringlet_strerror(code), msg);
        if (sticky) rl_comm_fail_lost(c, code, "%s (a sticky CUDA error: this rank's device context is unusable)", msg);
    } else {
        RL_INFO(-1, "error %d (%s): %s", code, ringlet_strerror(code), msg);
    }
    return code;
}

ringlet_result_t rl_comm_forked(struct ringlet_comm *c, const char *fn) {
    if (rl_fork_generation() == c->fork_gen) return RINGLET_SUCCESS;
    /* Not noted in c (its lock may have been held by a thread of the parent's). */
    return rl_error(NULL, RINGLET_ERR_INVALID_USAGE,
                    "%s: this process (pid %d) was forked after rank %d's communicator was made (pid %d): a "
                    "communicator's threads and connections stay with the parent; make a new one in the child",
                    fn, (int)getpid(), c->rank, (int)c->infos[c->rank].pid);
}

const char *ringlet_comm_last_error(ringlet_comm_t c) {
    if (c && rl_fork_generation() == c->fork_gen) {
        /* Copy under the lock: the progress thread may write it meanwhile. */
        static _Thread_local char copy[RL_MSG_MAX];
        pthread_mutex_lock(&c->err_mu);
        memcpy(copy, c->last_error, sizeof copy);
        pthread_mutex_unlock(&c->err_mu);
        return copy;
    }
    return t_last_error;
}

enum {
    FAIL_REMOTE = 1, /* the monitor relayed it */
    FAIL_LOST = 2,   /* this rank's own, and it can take part no more */
    FAIL_QUIET = 4,  /* not logged: the caller returns it (a failed init) */
};
static void fail_v(struct ringlet_comm *c, ringlet_result_t code, int how, const char *fmt, va_list ap) {
    pthread_mutex_lock(&c->fail_mu);
    if (!atomic_load(&c->failed)) {
        vsnprintf(c->fail_msg, sizeof c->fail_msg, fmt, ap);
        c->fail_code = code;
        c->fail_remote = (how & FAIL_REMOTE) != 0;
        c->fail_lost = (how & FAIL_LOST) != 0;
        atomic_store(&c->failed, 1);
        if (!atomic_load(&c->aborted) && !(how & FAIL_QUIET)) RL_WARN(c->rank, "communicator failed: %s", c->fail_msg);
    }
    ringlet_stop_token_fire(c->split_stop); /* NULL: none */
    pthread_mutex_unlock(&c->fail_mu);
    atomic_store(&c->stop, 1);
    rl_comm_notify(c);
}

void rl_comm_fail(struct ringlet_comm *c, ringlet_result_t code, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fail_v(c, code, 0, fmt, ap);
    va_end(ap);
}

void rl_comm_fail_remote(struct ringlet_comm *c, ringlet_result_t code, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fail_v(c, code, FAIL_REMOTE, fmt, ap);
    va_end(ap);
}

void rl_comm_fail_lost(struct ringlet_comm *c, ringlet_result_t code, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fail_v(c, code, FAIL_LOST, fmt, ap);
    va_end(ap);
}

void rl_comm_fail_quiet(struct ringlet_comm *c, ringlet_result_t code, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fail_v(c, code, FAIL_QUIET, fmt, ap);
    va_end(ap);
}

int rl_comm_own_failure(struct ringlet_comm *c, char *msg, size_t len, int *lost) {
    pthread_mutex_lock(&c->fail_mu);
    int own = atomic_load(&c->failed) && !c->fail_remote;
    if (own) snprintf(msg, len, "%s", c->fail_msg);
    *lost = own && c->fail_lost;
    pthread_mutex_unlock(&c->fail_mu);
    return own;
}

ringlet_result_t rl_comm_failure(struct ringlet_comm *c, char *msg, size_t len) {
    pthread_mutex_lock(&c->fail_mu);
    ringlet_result_t code = c->fail_code;
    if (msg) snprintf(msg, len, "%s", c->fail_msg);
    pthread_mutex_unlock(&c->fail_mu);
    return code;
}

void rl_comm_await_cause(struct ringlet_comm *c) {
    rl_comm_await_cause_for(c, c->timeout_s < 1.0 ? c->timeout_s : 1.0);
}

void rl_comm_await_cause_for(struct ringlet_comm *c, double s) {
    double until = rl_now() + s;
    while (!atomic_load(&c->failed) && !atomic_load(&c->aborted) && !atomic_load(&c->stop) && rl_now() < until)
        rl_comm_wait_event(c, rl_comm_gen(c), 20);
}

void rl_comm_fail_link(struct ringlet_comm *c, ringlet_result_t code, const char *what) {
    rl_comm_await_cause(c);
    rl_comm_fail(c, code, "%s", what);
}

ringlet_result_t rl_comm_op_failed(struct ringlet_comm *c, const struct ringlet_request *r, ringlet_result_t code,
                                   const char *what, char *err) {
    if (!atomic_load(&c->failed)) {
        /* A stall whose cause is a rank that has not called this collective (busy outside
         * ringlet, or blocked in another call): say so, with the counts rank 0 last told. */
        char hint[RL_MSG_MAX];
        unsigned long long packed = atomic_load(&c->lag);
        int lag = rl_lag_rank(packed);
        unsigned long long called = rl_lag_colls(packed);
        if (code == RINGLET_ERR_TIMEOUT && r->coll_first && lag >= 0 && lag != c->rank && called < r->coll_first) {
            snprintf(hint, sizeof hint, "%.250s; rank %d has not called this collective: it has called %llu "
                     "collectives on this communicator, this is collective %llu (is it busy outside ringlet, or "
                     "waiting in another call?)", what, lag, called, (unsigned long long)r->coll_first);
            what = hint;
        }
        /* A broken link or a stall may be a neighbour's view of another rank's fault,
         * which the monitor names (a death at once, silence after RINGLET_TIMEOUT). */
        if (code == RINGLET_ERR_REMOTE || code == RINGLET_ERR_TIMEOUT) rl_comm_fail_link(c, code, what);
        else rl_comm_fail(c, code, "%s", what);
    }
    char msg[RL_MSG_MAX];
    code = rl_comm_failure(c, msg, sizeof msg);
    snprintf(err, RL_MSG_MAX, "%s #%llu (count %zu) failed: %.400s", rl_op_name(r->kind), (unsigned long long)r->seq,
             r->count, msg);
    return code;
}

ringlet_result_t ringlet_comm_get_async_error(ringlet_comm_t c) {
    if (!c) return rl_error(NULL, RINGLET_ERR_INVALID_ARGUMENT, "get_async_error: comm is NULL");
    ringlet_result_t forked = rl_comm_forked(c, "get_async_error");
    if (forked) return forked;
    if (!atomic_load(&c->failed)) return RINGLET_SUCCESS;
    /* ringlet_comm_last_error says why from the moment this reports it: the failed call's
     * own message comes when the progress thread finishes it, which may be later (a peer's
     * failure fails the communicator first). A message that already names the cause stays. */
    char msg[RL_MSG_MAX];
    ringlet_result_t code = rl_comm_failure(c, msg, sizeof msg);
    msg[400] = 0; /* calls quote the cause with %.400s */
    pthread_mutex_lock(&c->err_mu);
    if (!strstr(c->last_error, msg)) { /* checked and written at once: a call's message may come meanwhile */
        snprintf(c->last_error, sizeof c->last_error, "%s", msg);
        snprintf(t_last_error, sizeof t_last_error, "%s", msg);
    }
    pthread_mutex_unlock(&c->err_mu);
    return code;
}
