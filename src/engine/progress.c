/* The engine: the communicator's queue and its progress thread. It sits above the
 * algorithms (src/algo/) and calls them directly (rl_run_op, rl_p2p_post): a downward
 * call, checked by tests/mp/layers.sh, with no table of function pointers to fill at
 * init and nothing hidden from nm. The algorithms never queue work themselves. */
#include "progress.h"

#include <stdio.h>
#include <stdlib.h>

#include "collective.h"
#include "conn.h"
#include "devcomm.h"
#include "failure.h"
#include "p2p.h"
#include "util.h"
#include "wait.h"

void rl_request_free(struct ringlet_request *r) {
    rl_p2p_free(r);
    free(r->sub);
    free(r);
}

/* An operation is over: release its stream, hand the result to the waiter (or, for a
 * stream call nobody waits on, to the communicator). */
static void finish(struct ringlet_comm *c, struct ringlet_request *r, ringlet_result_t rc) {
    if (r->detached && rc) {
        /* A stream call: its error is the communicator's (ringlet_comm_get_async_error),
         * made so before the flag is set: a caller waiting for the flag (rl_devcomm_sync)
         * reads the communicator's state the moment it is, and must not find it sound. */
        rl_error(c, rc, "%s", r->err);
        if (!atomic_load(&c->failed)) rl_comm_fail(c, rc, "%s", r->err);
    }
    if (c->dev) rl_devcomm_release(c, r);
    if (r->detached) {
        rl_request_free(r);
        rl_comm_notify(c); /* a caller may wait for the flag (rl_devcomm_sync) */
        return;
    }
    r->result = rc;
    atomic_store_explicit(&r->done, 1, memory_order_release);
    rl_comm_notify(c);
}

static ringlet_result_t run(struct ringlet_comm *c, struct ringlet_request *r) {
    char err[RL_MSG_MAX];
    ringlet_result_t rc = rl_run_op(c, r, NULL, err, NULL);
    if (rc) snprintf(r->err, sizeof r->err, "%s", err);
    return rc;
}

/* A send or receive the progress thread runs to the end itself (device memory, or
 * ordered on a stream), rather than posting it for the waiter. */
static int p2p_pipelined(const struct ringlet_request *r) {
    return (r->kind == RL_OP_SEND || r->kind == RL_OP_RECV) && (r->device >= 0 || r->stream);
}

/* Queue lock held: the next queued request, when it pairs with r (a pipelined send and
 * receive, in either order, on the same memory), taken off the queue. Running them in
 * one exchange keeps ranks that send to each other from waiting for each other. Not on
 * one stream: there the second waits for the first by the stream's order (as NCCL's
 * calls outside a group do). */
static struct ringlet_request *take_partner(struct ringlet_comm *c, const struct ringlet_request *r) {
    struct ringlet_request *n = c->q_head;
    if (!n || n->holding || !p2p_pipelined(r) || !p2p_pipelined(n) || n->kind == r->kind || n->device != r->device)
        return NULL;
    if (r->stream && r->stream == n->stream) return NULL;
    c->q_head = n->next;
    if (!c->q_head) c->q_tail = NULL;
    return n;
}

/* Queue lock held, the queue idle, posted_watch armed (rl_comm_watch_posted): moves the
 * messages posted over transports without threads of their own, which nothing else moves
 * while no thread of this communicator waits (its owner may block on another one, and
 * the peer's send then stalls on a full FIFO, and that peer out of their collective).
 * First a grace of RL_PARK_POLL_MS, and nothing while a thread of this communicator waits
 * (npolling): the owner usually waits for them at once, and its waits poll them better
 * than this thread could (no wake-up per peer's ring). Then it polls, sleeping on the
 * bell the peers ring as they move data; the queue stays free meanwhile (a call runs on
 * its caller's thread, and rl_comm_enqueue rings the bell). Disarmed once nothing posted
 * is left. */
static void watch_posted(struct ringlet_comm *c) {
    double now = rl_now();
    if (c->watch_at == 0) c->watch_at = now + RL_PARK_POLL_MS * 1e-3;
    if (now < c->watch_at || atomic_load(&c->npolling)) {
        rl_cond_wait_ms(&c->q_cv, &c->q_mu, RL_PARK_POLL_MS);
        return;
    }
    rl_bell *b = atomic_load(&c->ev);
    unsigned gen = atomic_load(&b->gen);
    c->q_bell = 1;
    pthread_mutex_unlock(&c->q_mu);
    atomic_store(&c->posted_watch, 0); /* a post from now on arms it again */
    int p = rl_comm_progress(c);
    char what[8];
    int left = rl_comm_posted_pending(c, what, sizeof what);
    if (left) {
        atomic_store(&c->posted_watch, 1);
        /* device copies under way end unannounced: look again soon */
        if (!(p & RL_PROGRESS_MOVED)) rl_bell_wait(b, gen, p & RL_PROGRESS_BUSY ? 1 : RL_PARK_POLL_MS, rl_comm_poll_moved, c);
    }
    pthread_mutex_lock(&c->q_mu);
    c->q_bell = 0;
    if (!left) c->watch_at = 0;
}

/* Queue lock held, nothing to run: waits for the queue. While receives are parked for
 * their senders' connections (conn.h), it takes the idle queue every RL_PARK_POLL_MS to
 * accept what has come; while posted messages are watched, watch_posted. */
static void idle_wait(struct ringlet_comm *c) {
    if (!c->running && atomic_load(&c->posted_watch) && !atomic_load(&c->nparked)) {
        watch_posted(c);
        return;
    }
    if (c->running || !atomic_load(&c->nparked)) {
        /* watched: the queue is given back without a word (release_queue), so look again
         * in RL_PARK_POLL_MS (a wake-up there for every call costs small calls dearly) */
        if (atomic_load(&c->posted_watch)) rl_cond_wait_ms(&c->q_cv, &c->q_mu, RL_PARK_POLL_MS);
        else pthread_cond_wait(&c->q_cv, &c->q_mu);
        return;
    }
    c->running = 1;
    pthread_mutex_unlock(&c->q_mu);
    int left = rl_conn_poll_parked(c);
    pthread_mutex_lock(&c->q_mu);
    c->running = 0;
    /* a head still being held (holding) comes with a signal: wait for it, not poll */
    int head_held = c->q_head && c->q_head->holding;
    if (!left || ((c->q_head || c->q_quit) && !head_held)) return;
    if (atomic_load(&c->posted_watch)) {
        watch_posted(c);
        return;
    }
    rl_cond_wait_ms(&c->q_cv, &c->q_mu, RL_PARK_POLL_MS);
}

static void *progress_thread(void *arg) {
    struct ringlet_comm *c = arg;
    rl_conn_set_runner(c); /* while it holds c->running */
    for (;;) {
        pthread_mutex_lock(&c->q_mu);
        /* An operation run inline by the caller finishes before the next one starts, also
         * when quitting (an abort): that caller may still be in the transports, which the
         * teardown after this thread's end must not close under it. A head whose caller
         * still holds its streams (holding) is waited for, also when quitting. */
        while (c->running || (!c->q_head && !c->q_quit) || (c->q_head && c->q_head->holding)) {
            if (c->running && c->q_quit) rl_cond_wait_ms(&c->q_cv, &c->q_mu, 10);
            else idle_wait(c);
        }
        struct ringlet_request *r = c->q_head, *partner = NULL;
        if (r) {
            c->q_head = r->next;
            if (!c->q_head) c->q_tail = NULL;
            c->running = 1;
            partner = take_partner(c, r);
        }
        pthread_mutex_unlock(&c->q_mu);
        if (!r) break;
        if (atomic_load(&c->failed) || r->prep_rc || (partner && partner->prep_rc)) {
            char msg[RL_MSG_MAX], cause[RL_MSG_MAX];
            ringlet_result_t code = atomic_load(&c->failed) ? rl_comm_failure(c, msg, sizeof msg) : RINGLET_SUCCESS;
            /* The failed preparation's text, for its partner: kept here, since finish may
             * free the request (a stream call nobody waits on) or hand it to its waiter. */
            snprintf(cause, sizeof cause, "%s", r->prep_rc ? r->err : partner && partner->prep_rc ? partner->err : "");
            for (struct ringlet_request *q = r; q; q = q == r ? partner : NULL) {
                if (q->prep_rc) {
                    /* Its own preparation's failure, judged as an algorithm's is: a peer's
                     * failure is the communicator's, and a broken link or a stop may be this
                     * rank's view of another rank's death, which the monitor names. */
                    char what[RL_MSG_MAX];
                    snprintf(what, sizeof what, "%s", q->err);
                    ringlet_result_t qrc = rl_comm_op_failed(c, q, q->prep_rc, what, q->err);
                    if (q == r) snprintf(cause, sizeof cause, "%s", q->err);
                    finish(c, q, qrc);
                    continue;
                }
                if (code) {
                    snprintf(q->err, sizeof q->err, "%s #%llu not run: the communicator failed earlier: %.400s",
                             rl_op_name(q->kind), (unsigned long long)q->seq, msg);
                    finish(c, q, code);
                } else { /* the partner of one whose preparation failed */
                    snprintf(q->err, sizeof q->err, "%s #%llu not run: %.400s", rl_op_name(q->kind),
                             (unsigned long long)q->seq, cause);
                    finish(c, q, RINGLET_ERR_REMOTE);
                }
            }
        } else if ((r->kind == RL_OP_SEND || r->kind == RL_OP_RECV) && !p2p_pipelined(r)) {
            /* Posted and left to the waiter, so that sends and receives overlap. */
            ringlet_result_t rc = rl_p2p_post(c, r);
            if (rc) finish(c, r, rc);
            /* Its owner may block on another communicator before it waits: a message
             * left for pollers would then never move, and its peer might stall. */
            rl_comm_park(c);
            rl_comm_watch_posted(c);
        } else if (partner) {
            char err[RL_MSG_MAX], perr[RL_MSG_MAX];
            ringlet_result_t rc = rl_run_op(c, r, partner, err, perr);
            if (rc) {
                snprintf(r->err, sizeof r->err, "%s", err);
                snprintf(partner->err, sizeof partner->err, "%s", perr);
            }
            finish(c, r, rc);
            finish(c, partner, rc);
        } else {
            finish(c, r, run(c, r));
        }
        rl_conn_poll_parked(c); /* a busy queue too */
        pthread_mutex_lock(&c->q_mu);
        c->running = 0;
        pthread_mutex_unlock(&c->q_mu);
    }
    return NULL;
}

ringlet_result_t rl_progress_start(struct ringlet_comm *c) {
    if (pthread_create(&c->progress, NULL, progress_thread, c) != 0) return RINGLET_ERR_SYSTEM;
    c->progress_started = 1;
    return RINGLET_SUCCESS;
}

void rl_progress_stop(struct ringlet_comm *c) {
    if (!c->progress_started) return;
    pthread_mutex_lock(&c->q_mu);
    c->q_quit = 1;
    pthread_cond_signal(&c->q_cv);
    if (c->q_bell) rl_comm_notify(c); /* asleep on the bell (watch_posted) */
    pthread_mutex_unlock(&c->q_mu);
    pthread_join(c->progress, NULL);
    pthread_mutex_lock(&c->q_mu); /* claim_idle_queue reads it under the lock */
    c->progress_started = 0;
    pthread_mutex_unlock(&c->q_mu);
}

/* Queue lock not held: when nothing is queued or running, the calling thread takes the
 * queue (c->running), numbers r and returns 1; else 0. refuse_failed: a failed
 * communicator's calls take the queue's way, which fails them as such. So does a receive
 * from a rank with no connection from it yet: it may park (conn.h), and only the progress
 * thread polls for parked receives' connections. */
static int claim_idle_queue(struct ringlet_comm *c, struct ringlet_request *r, int refuse_failed) {
    pthread_mutex_lock(&c->q_mu);
    /* The connection is read only once the queue is idle: no thread makes connections then
     * (the runner's were made before it gave the queue back, under this lock). */
    if (c->q_head || c->running || !c->progress_started || (refuse_failed && atomic_load(&c->failed)) ||
        (r->kind == RL_OP_RECV && !c->recv_conns[r->peer].h)) {
        pthread_mutex_unlock(&c->q_mu);
        return 0;
    }
    c->running = 1;
    r->seq = ++c->seq;
    rl_request_count_colls(c, r);
    if (r->seq_out) *r->seq_out = r->seq;
    pthread_mutex_unlock(&c->q_mu);
    return 1;
}

/* Gives back what claim_idle_queue took. Calls queued meanwhile (another thread's) were
 * held back: let them run. */
static void release_queue(struct ringlet_comm *c) {
    pthread_mutex_lock(&c->q_mu);
    c->running = 0;
    /* parked: idle_wait polls again; quitting: the progress thread waits for this */
    if (c->q_head || atomic_load(&c->nparked) || c->q_quit) pthread_cond_signal(&c->q_cv);
    pthread_mutex_unlock(&c->q_mu);
}

int rl_comm_try_inline(struct ringlet_comm *c, struct ringlet_request *r, ringlet_result_t *rc) {
    if (!claim_idle_queue(c, r, 0)) return 0;
    struct ringlet_comm *was = rl_conn_set_runner(c);
    rl_comm_set_inline(1);
    *rc = run(c, r);
    rl_comm_set_inline(0);
    rl_conn_set_runner(was);
    /* Its error recorded while the call still counts as running: once released, an abort
     * and destroy from another thread may free c. */
    if (*rc) rl_error(c, *rc, "%s", r->err);
    release_queue(c);
    return 1;
}

int rl_comm_try_post(struct ringlet_comm *c, struct ringlet_request *r) {
    if (!claim_idle_queue(c, r, 1)) return 0;
    struct ringlet_comm *was = rl_conn_set_runner(c);
    ringlet_result_t rc = rl_p2p_post(c, r);
    if (rc) finish(c, r, rc);
    rl_conn_set_runner(was);
    release_queue(c);
    return 1;
}

int rl_comm_idle(struct ringlet_comm *c) {
    pthread_mutex_lock(&c->q_mu);
    int idle = !c->q_head && !c->running;
    pthread_mutex_unlock(&c->q_mu);
    return idle;
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

int rl_comm_posted_pending(struct ringlet_comm *c, char *what, size_t n) {
    int pending = 0;
    /* Under the lock a held request cannot be completed and freed meanwhile; its pieces
     * are only read (the thread that waits for it counts them). */
    pthread_mutex_lock(&c->live_mu);
    for (struct ringlet_request *r = c->live; r && !pending; r = r->live_next) {
        if (!atomic_load_explicit(&r->posted, memory_order_acquire) || atomic_load(&r->done)) continue;
        for (size_t i = 0; i < r->ntreq && !pending; i++) pending = !rl_treq_done(&r->treqs[i]);
        if (pending)
            snprintf(what, n, "%s #%llu with rank %d", rl_op_name(r->kind), (unsigned long long)r->seq, r->peer);
    }
    pthread_mutex_unlock(&c->live_mu);
    return pending;
}

void rl_comm_free_live(struct ringlet_comm *c) {
    /* Requests never waited on: their transfers stopped with the connections. */
    pthread_mutex_lock(&c->live_mu);
    while (c->live) {
        struct ringlet_request *r = c->live;
        c->live = r->live_next;
        rl_request_free(r);
    }
    pthread_mutex_unlock(&c->live_mu);
}

ringlet_result_t rl_comm_prepare_early(struct ringlet_comm *c, struct ringlet_request *r, char *err) {
    return r->device >= 0 ? rl_op_prepare_device(c, r, 0, err) : RINGLET_SUCCESS;
}

/* Queue lock held: takes r, queued, off the queue. */
static void unqueue(struct ringlet_comm *c, struct ringlet_request *r) {
    struct ringlet_request *prev = NULL;
    for (struct ringlet_request *q = c->q_head; q && q != r; q = q->next) prev = q;
    if (prev) prev->next = r->next;
    else c->q_head = r->next;
    if (c->q_tail == r) c->q_tail = prev;
    r->next = NULL;
}

ringlet_result_t rl_comm_hold_order_lock(struct ringlet_comm *c, char *err) {
    if (!pthread_mutex_trylock(&c->hold_order_mu)) return RINGLET_SUCCESS;
    double until = rl_now() + c->timeout_s;
    long nap_us = 20;
    while (pthread_mutex_trylock(&c->hold_order_mu)) {
        if (rl_now() > until)
            return snprintf(err, RL_MSG_MAX, "another thread's stream call has been holding its streams for %.0f s "
                            "(RINGLET_TIMEOUT): its stream's queue is full behind work that does not end", c->timeout_s),
                   RINGLET_ERR_TIMEOUT;
        rl_nap_backoff(&nap_us);
    }
    return RINGLET_SUCCESS;
}

ringlet_result_t rl_comm_enqueue(struct ringlet_comm *c, struct ringlet_request *r, char *err) {
    /* Device memory and streams first (devcomm.h): nothing of that kind may be made once
     * a stream is held, and the stream is held below. The hold section keeps another
     * thread's allocation from starting between the two; it is entered outside the queue
     * lock, which the progress thread needs to finish the operations an allocation waits
     * for. */
    int holds = r->stream != NULL;
    if (r->device >= 0 || holds) {
        ringlet_result_t rc = rl_op_prepare_device(c, r, 1, err);
        /* A peer that died, aborted or never came while the call made its connections:
         * the call is queued anyway, so that its failure reaches the caller as a queued
         * call's does (a stream call's asynchronously, its stream released), as long as
         * its stream can be held; the progress thread fails it with this error. */
        int peer_failed = rc == RINGLET_ERR_REMOTE || rc == RINGLET_ERR_TIMEOUT || atomic_load(&c->failed);
        if (rc && !(peer_failed && (!holds || rl_devcomm_can_hold(c)))) return rc;
        if (rc) {
            r->prep_rc = rc;
            snprintf(r->err, sizeof r->err, "%.400s", err);
        }
    }
    if (holds && rl_dev_hold_begin(c->timeout_s) != RL_DEV_OK)
        return snprintf(err, RL_MSG_MAX, "%s", rl_dev_error()), RINGLET_ERR_TIMEOUT;
    if (holds) {
        ringlet_result_t rc = rl_comm_hold_order_lock(c, err);
        if (rc) {
            rl_dev_hold_end();
            return rc;
        }
    }
    pthread_mutex_lock(&c->q_mu);
    if (c->q_quit) {
        /* Aborted (from another thread) while this call prepared: no thread would run it. */
        pthread_mutex_unlock(&c->q_mu);
        if (holds) pthread_mutex_unlock(&c->hold_order_mu), rl_dev_hold_end();
        return snprintf(err, RL_MSG_MAX, "the communicator was aborted"), RINGLET_ERR_INVALID_USAGE;
    }
    r->seq = ++c->seq;
    rl_request_count_colls(c, r);
    if (r->seq_out) *r->seq_out = r->seq;
    r->next = NULL;
    if (c->q_tail) c->q_tail->next = r;
    else c->q_head = r;
    c->q_tail = r;
    if (holds) {
        /* Its place is kept (holding) while its streams are held, outside the queue lock:
         * on a GPU the user's stream may be full, and the call then blocks until the
         * operations queued before it are done, which the progress thread runs and
         * finishes under that lock. Other threads' calls queue behind it meanwhile, and
         * their holds wait for its (hold_order_mu). */
        r->holding = 1;
        pthread_mutex_unlock(&c->q_mu);
        ringlet_result_t rc = rl_devcomm_enqueue(c, r, err);
        pthread_mutex_lock(&c->q_mu);
        r->holding = 0;
        if (!rc && c->q_quit) {
            /* Aborted meanwhile: the abort lets go of the streams it held (the flag). */
            rl_devcomm_drop_events(c, r);
            rc = RINGLET_ERR_INVALID_USAGE;
            snprintf(err, RL_MSG_MAX, "the communicator was aborted");
        }
        if (rc) {
            unqueue(c, r);
            /* The number stays used (no stream waits for it: rl_devcomm_enqueue); its
             * collectives are not counted (a retry counts them), so that this rank's count
             * stays the others' (monitor.c). */
            atomic_store_explicit(&c->colls_called,
                                  atomic_load_explicit(&c->colls_called, memory_order_relaxed) -
                                      (unsigned long long)rl_request_colls(r),
                                  memory_order_relaxed);
        }
        /* the progress thread may wait for it: on q_cv, or asleep on the bell */
        pthread_cond_signal(&c->q_cv);
        if (c->q_bell) rl_comm_notify(c);
        pthread_mutex_unlock(&c->q_mu);
        pthread_mutex_unlock(&c->hold_order_mu);
        rl_dev_hold_end();
        return rc;
    }
    pthread_cond_signal(&c->q_cv);
    if (c->q_bell) rl_comm_notify(c); /* asleep on the bell (watch_posted) */
    pthread_mutex_unlock(&c->q_mu);
    return RINGLET_SUCCESS;
}
