/* The per-step engine: pre_forward, gradients reported ready (copied into their
 * buckets, which start their all-reduces as they complete), finish (waits, writes the
 * results back, spreads usage errors to every rank). */
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ringlet.h"
#include "ringlet_ddp.h"
#include "ddp_internal.h"

/* ---- iterations ------------------------------------------------------------------------ */

/* First error of the iteration (kept for finish). */
void ddp_iter_fail(struct ringlet_ddp *d, ringlet_result_t rc, const char *msg) {
    if (d->iter_rc) return;
    d->iter_rc = rc;
    ddp_msgf(d->iter_msg, sizeof d->iter_msg, "%s", msg);
}

static void launch_one(struct ringlet_ddp *d, bucket_t *b, int k, void *buf, size_t count, ringlet_datatype_t t) {
    ringlet_result_t rc = ringlet_iallreduce(buf, buf, count, t, b->op, d->comm, ddp_dstream(d), &b->reqs[b->nreqs]);
    if (rc) {
        char m[MSG_MAX];
        ddp_msgf(m, sizeof m, "all-reduce of bucket %d: %s", k, ringlet_comm_last_error(d->comm));
        ddp_iter_fail(d, rc, m);
        b->reqs[b->nreqs] = NULL;
        if (!b->rc) b->rc = rc;
    }
    b->nreqs++;
}

/* Issues the all-reduces of every complete bucket from next_launch on, in order: the
 * packed part (with the flag), then the direct parameters in slot order. The same
 * sequence on every rank. */
static void launch_ready(struct ringlet_ddp *d) {
    while (d->next_launch < d->nbuckets && d->buckets[d->next_launch].pending == 0) {
        int k = d->next_launch;
        bucket_t *b = &d->buckets[k];
        int last = k == d->nbuckets - 1;
        size_t ws = ringlet_datatype_size(b->wire);
        if (b->has_flag) { /* a failed copy into a bucket is as bad as a usage error: the others must know */
            d->own_flag = d->iter_rc || d->mem_rc ? 1.0 : 0.0;
            ddp_mem_store_value(d, (char *)b->wire_mem + b->flag_index * ws, b->wire, d->own_flag);
        }
        b->t_launch = ddp_now_s();
        b->t_complete = 0;
        b->rc = RINGLET_SUCCESS;
        b->nreqs = 0;
        if (b->packed_count) launch_one(d, b, k, b->wire_mem, b->packed_count, b->wire);
        for (int j = 0; j < b->nparams; j++) {
            tensor_t *p = &d->params[b->params[j]];
            if (p->direct) launch_one(d, b, k, p->launch_on, p->count, b->wire);
        }
        b->launched = 1;
        d->next_launch++;
        if (last && d->opt.find_unused_parameters && d->nparams) {
            ringlet_result_t rc = ringlet_iallreduce(d->used_local, d->used_global, (size_t)d->nparams, RINGLET_UINT8, RINGLET_MAX,
                                    d->comm, NULL, &d->used_req);
            if (rc) {
                char m[MSG_MAX];
                ddp_msgf(m, sizeof m, "all-reduce of the used-parameter map: %s", ringlet_comm_last_error(d->comm));
                ddp_iter_fail(d, rc, m);
                d->used_req = NULL;
            }
            d->used_launched = 1;
        }
    }
}

/* Notes which launched buckets have completed (for the trace; cheap: a flag test per
 * bucket in flight, oldest first, stopping at the first one still running). */
static void poll_done(struct ringlet_ddp *d) {
    for (int b = 0; b < d->next_launch; b++) {
        bucket_t *bk = &d->buckets[b];
        if (bk->t_complete > 0) continue;
        for (int r = 0; r < bk->nreqs; r++) {
            if (!bk->reqs[r]) continue;
            int done = 0;
            ringlet_result_t rc = ringlet_test(&bk->reqs[r], &done);
            if (!done) return;
            if (rc && !bk->rc) bk->rc = rc;
        }
        bk->t_complete = ddp_now_s();
    }
}

/* How parameter i's gradient enters its bucket. */
enum { SRC_GRAD, SRC_ZERO };

static void mark(struct ringlet_ddp *d, int i, int used, int src) {
    tensor_t *p = &d->params[i];
    bucket_t *b = &d->buckets[p->bucket];
    void *g = src == SRC_GRAD ? p->grad : NULL;
    void *v = ddp_slot_ptr(d, p);
    if (b->wire != b->dtype) { /* compressed (and scaled: the sum of 16-bit values stays in range) */
        void *w = (char *)b->wire_mem + p->offset * ringlet_datatype_size(b->wire);
        if (g)
            ddp_mem_convert(d, w, b->wire, g, p->dtype, p->count, d->scale);
        else
            ddp_mem_zero(d, w, p->count * ringlet_datatype_size(b->wire));
    } else if (p->direct && used && g && (uintptr_t)g % ringlet_datatype_size(p->dtype) == 0 &&
               ddp_same_memory(d, g)) {
        /* in place on the gradient: no copy (a misaligned gradient, or one in memory of
         * another kind or device, which an all-reduce refuses, goes through its slot: a
         * refusal here would skip a collective the other ranks make) */
        p->launch_on = g;
    } else { /* averaging is the all-reduce's (RINGLET_AVG): a plain copy */
        if (g && g != v)
            ddp_mem_copy(d, v, g, p->bytes);
        else if (!g)
            ddp_mem_zero(d, v, p->bytes);
        p->launch_on = v;
    }
    d->ready[i] = 1;
    if (used) d->used_local[i] = 1; /* (or in a no_sync iteration since the last finish) */
    d->nready++;
    d->order[d->norder++] = i;
    b->pending--;
    poll_done(d);
    launch_ready(d);
}

ringlet_result_t ddp_check_param(struct ringlet_ddp *d, int i, const char *fn) {
    if (i < 0 || i >= d->nparams)
        return ddp_set_error(d, RINGLET_ERR_INVALID_ARGUMENT, "%s: parameter index %d is out of range [0, %d)", fn, i,
                         d->nparams);
    return RINGLET_SUCCESS;
}

static void reset_iteration(struct ringlet_ddp *d, int grad_sync) {
    size_t np = d->nparams ? (size_t)d->nparams : 1;
    memset(d->ready, 0, np); /* used_local is not: no_sync iterations add to it until a finish */
    memset(d->used_global, 1, np);
    for (int i = 0; i < d->nparams; i++) d->params[i].unreported = 0;
    for (int b = 0; b < d->nbuckets; b++) {
        d->buckets[b].pending = d->buckets[b].nparams;
        d->buckets[b].launched = 0;
    }
    d->nready = 0;
    d->norder = 0;
    d->next_launch = 0;
    d->used_launched = 0;
    d->iter_rc = RINGLET_SUCCESS;
    d->iter_msg[0] = 0;
    d->own_flag = 0;
    d->mem_rc = RINGLET_SUCCESS;
    d->state = grad_sync ? IT_SYNC : IT_NOSYNC;
}

static ringlet_result_t pre_forward(struct ringlet_ddp *d, int grad_sync) {
    pthread_mutex_lock(&d->mu);
    ringlet_result_t rc = RINGLET_SUCCESS;
    if (d->state == IT_SYNC && d->nready > 0) {
        rc = ddp_set_error(d, RINGLET_ERR_INVALID_USAGE,
                       "ringlet_ddp_pre_forward: the previous iteration reported %d of %d gradients but was not "
                       "finished (call ringlet_ddp_finish at the end of every backward); buckets may be in flight, "
                       "so this DDP object cannot go on",
                       d->nready, d->nparams);
        pthread_mutex_unlock(&d->mu);
        return rc;
    }
    if (grad_sync != RINGLET_DDP_NO_SYNC && grad_sync != RINGLET_DDP_SYNC && grad_sync != RINGLET_DDP_NO_GRAD) {
        rc = ddp_set_error(d, RINGLET_ERR_INVALID_ARGUMENT,
                       "ringlet_ddp_pre_forward: grad_sync %d is not RINGLET_DDP_NO_SYNC, _SYNC or _NO_GRAD", grad_sync);
        pthread_mutex_unlock(&d->mu);
        return rc;
    }
    /* The previous iteration's outcome on device memory (finish did not wait): reported
     * here, and the new iteration starts all the same. */
    ringlet_result_t prev = ddp_settle_previous(d, "ringlet_ddp_pre_forward");
    char prev_msg[MSG_MAX];
    if (prev) memcpy(prev_msg, d->last_error, sizeof prev_msg);
    int bcast = d->opt.broadcast_buffers && d->nsync_buffers > 0 && d->prev_forward_synced;
    d->prev_forward_synced = grad_sync == RINGLET_DDP_SYNC;
    if (grad_sync != RINGLET_DDP_NO_GRAD) reset_iteration(d, grad_sync == RINGLET_DDP_SYNC);
    if (bcast) rc = ddp_sync_buffers(d);
    if (prev && !rc) rc = ddp_set_error(d, prev, "%s", prev_msg);
    pthread_mutex_unlock(&d->mu);
    return rc;
}

/* why: grad_failed's reason (the framework could not give the gradient): the parameter
 * contributes zeros, its result goes to its slot only, and the iteration fails on every
 * rank at finish (the buckets' error flag). */
static ringlet_result_t report(struct ringlet_ddp *d, int i, void *grad, int used, const char *why, const char *fn) {
    pthread_mutex_lock(&d->mu);
    ringlet_result_t rc = ddp_check_param(d, i, fn);
    if (rc) goto out;
    tensor_t *p = &d->params[i];
    char nb[200];
    if (d->state == IT_NOSYNC) { /* no_sync: the gradient only accumulates locally */
        if (grad) p->grad = grad;
        /* but the use counts (as in PyTorch's reducer): with find_unused_parameters, a
         * parameter used only in the no_sync iterations is still reduced at the next sync */
        if (used) d->used_local[i] = 1;
        goto out;
    }
    if (d->state == IT_NONE) {
        rc = ddp_set_error(d, RINGLET_ERR_INVALID_USAGE,
                       "%s(%s): no iteration started: call ringlet_ddp_pre_forward before each forward", fn,
                       ddp_tname(p, "parameter", i, nb, sizeof nb));
        goto out;
    }
    if (d->ready[i]) {
        rc = ddp_set_error(d, RINGLET_ERR_INVALID_USAGE,
                       "%s: %s was reported ready twice in one iteration%s", fn,
                       ddp_tname(p, "parameter", i, nb, sizeof nb),
                       d->state == IT_FINISHED
                           ? " (after this iteration's finish: a second backward without a forward in between? "
                             "accumulating over several backward passes needs no_sync)"
                           : " (is it used twice, or is backward run more than once per forward?)");
        ddp_iter_fail(d, rc, d->last_error);
        goto out;
    }
    if (why) {
        char m[MSG_MAX];
        ddp_msgf(m, sizeof m, "%s: %s", ddp_tname(p, "parameter", i, nb, sizeof nb), why);
        ddp_iter_fail(d, RINGLET_ERR_INVALID_USAGE, m);
        p->unreported = 1; /* its gradient memory may be gone (the failure's cause): not written */
        mark(d, i, 0, SRC_ZERO);
        goto out;
    }
    if (grad) p->grad = grad;
    if (used && !p->grad && p->count) {
        rc = ddp_set_error(d, RINGLET_ERR_INVALID_ARGUMENT, "%s: %s has no gradient memory (grad is NULL)", fn,
                       ddp_tname(p, "parameter", i, nb, sizeof nb));
        ddp_iter_fail(d, rc, d->last_error);
        mark(d, i, 0, SRC_ZERO); /* keep the collectives in step with the other ranks */
        goto out;
    }
    /* grad_unused with grad == NULL: no gradient at all, zeros (not the registered one) */
    mark(d, i, used, (used || grad) ? SRC_GRAD : SRC_ZERO);
out:
    pthread_mutex_unlock(&d->mu);
    return rc;
}

ringlet_result_t ringlet_ddp_pre_forward(ringlet_ddp_t d, int grad_sync) {
    CHECK_DDP(d, "ringlet_ddp_pre_forward");
    int prev;
    ringlet_result_t rc = ddp_device_enter(d, "ringlet_ddp_pre_forward", &prev);
    if (!rc) rc = pre_forward(d, grad_sync);
    ddp_device_leave(prev);
    return rc;
}

static ringlet_result_t report_on_device(struct ringlet_ddp *d, int i, void *grad, int used, const char *why,
                                         const char *fn) {
    int prev;
    ringlet_result_t rc = ddp_device_enter(d, fn, &prev);
    if (!rc) rc = report(d, i, grad, used, why, fn);
    ddp_device_leave(prev);
    return rc;
}

ringlet_result_t ringlet_ddp_grad_ready(ringlet_ddp_t d, int index, void *grad) {
    CHECK_DDP(d, "ringlet_ddp_grad_ready");
    return report_on_device(d, index, grad, 1, NULL, "ringlet_ddp_grad_ready");
}

ringlet_result_t ringlet_ddp_grad_unused(ringlet_ddp_t d, int index, void *grad) {
    CHECK_DDP(d, "ringlet_ddp_grad_unused");
    return report_on_device(d, index, grad, 0, NULL, "ringlet_ddp_grad_unused");
}

ringlet_result_t ringlet_ddp_grad_failed(ringlet_ddp_t d, int index, const char *why) {
    CHECK_DDP(d, "ringlet_ddp_grad_failed");
    return report_on_device(d, index, NULL, 0, why && *why ? why : "its gradient could not be given (no reason said)",
                            "ringlet_ddp_grad_failed");
}

/* Result of bucket b into the gradients of its parameters. */
static void write_back(struct ringlet_ddp *d, int b) {
    bucket_t *bk = &d->buckets[b];
    for (int j = 0; j < bk->nparams; j++) {
        int i = bk->params[j];
        tensor_t *p = &d->params[i];
        if (!d->used_global[i]) continue; /* unused on every rank: untouched */
        void *v = ddp_slot_ptr(d, p);
        void *dst = p->grad && !p->unreported ? p->grad : v;
        if (bk->wire != bk->dtype)
            ddp_mem_convert(d, dst, p->dtype, (char *)bk->wire_mem + p->offset * ringlet_datatype_size(bk->wire), bk->wire,
                        p->count, 1.0);
        else if (p->direct && p->launch_on == dst)
            ; /* reduced in place */
        else if (dst != v)
            ddp_mem_copy(d, dst, v, p->bytes);
    }
}

/* Waits for bucket b's all-reduces; its first failure becomes *crc (with cmsg) unless
 * one is there already. */
static void wait_bucket(struct ringlet_ddp *d, int b, ringlet_result_t *crc, char *cmsg) {
    bucket_t *bk = &d->buckets[b];
    for (int r = 0; r < bk->nreqs; r++)
        if (bk->reqs[r]) {
            ringlet_result_t w = ringlet_wait(&bk->reqs[r]);
            if (w && !bk->rc) bk->rc = w;
        }
    if (bk->t_complete <= 0) bk->t_complete = ddp_now_s();
    if (bk->rc && !*crc) {
        *crc = bk->rc;
        ddp_msgf(cmsg, MSG_MAX, "all-reduce of bucket %d: %s", b, ringlet_comm_last_error(d->comm));
    }
}

/* finish on device memory without waiting: the write-backs are queued on the stream,
 * each behind its bucket's all-reduce (which holds the stream until it is done); the
 * ranks' error flags are summed by a small non-blocking all-reduce on host memory, queued
 * behind the buckets; ddp_settle_previous collects both at the next call. */
static void finish_queued(struct ringlet_ddp *d) {
    int bad_input = d->iter_rc || d->mem_rc; /* before the write-backs: their failures are this rank's own */
    for (int b = 0; b < d->nbuckets; b++) {
        if (!d->buckets[b].rc) write_back(d, b);
        d->buckets[b].t_done = ddp_now_s();
    }
    d->flag_send = bad_input ? 1.0 : 0.0;
    d->flag_recv = 0;
    d->flag_own_error = d->iter_rc != RINGLET_SUCCESS || d->mem_rc != RINGLET_SUCCESS;
    ringlet_result_t rc =
        ringlet_iallreduce(&d->flag_send, &d->flag_recv, 1, RINGLET_FLOAT64, RINGLET_SUM, d->comm, NULL, &d->flag_req);
    if (rc) {
        char m[MSG_MAX];
        ddp_msgf(m, sizeof m, "all-reduce of the ranks' error flags: %s", ringlet_comm_last_error(d->comm));
        ddp_iter_fail(d, rc, m);
        d->flag_req = NULL;
    }
    d->flag_pending = 1;
    if (d->mem_rc) {
        char m[MSG_MAX];
        ddp_msgf(m, sizeof m, "a copy or conversion of the gradients failed: %s", d->mem_msg);
        ddp_iter_fail(d, d->mem_rc, m);
    }
}

ringlet_result_t ddp_settle_previous(struct ringlet_ddp *d, const char *fn) {
    if (!d->flag_pending) return RINGLET_SUCCESS;
    d->flag_pending = 0;
    ringlet_result_t crc = RINGLET_SUCCESS;
    char cmsg[MSG_MAX] = "";
    for (int b = 0; b < d->nbuckets; b++) wait_bucket(d, b, &crc, cmsg);
    if (d->flag_req) {
        ringlet_result_t w = ringlet_wait(&d->flag_req);
        if (w && !crc) {
            crc = w;
            ddp_msgf(cmsg, sizeof cmsg, "all-reduce of the ranks' error flags: %s", ringlet_comm_last_error(d->comm));
        }
    }
    if (crc)
        return ddp_set_error(d, crc, "%s: the previous iteration's gradients were not reduced: %s", fn, cmsg);
    double others = d->flag_recv - d->flag_send;
    if (others > 0.5 && !d->flag_own_error)
        return ddp_set_error(d, RINGLET_ERR_INVALID_USAGE,
                             "%s: in the previous iteration %.0f other rank(s) reported a DDP usage error (for example "
                             "a gradient reported twice, a parameter that got no gradient, or a failed copy of a "
                             "gradient); see their messages. The "
                             "gradients of that iteration were not valid (on device memory ringlet_ddp_finish does not "
                             "wait, so this is reported here)",
                             fn, others);
    return RINGLET_SUCCESS;
}

static ringlet_result_t finish(struct ringlet_ddp *d) {
    pthread_mutex_lock(&d->mu);
    ringlet_result_t rc = RINGLET_SUCCESS;
    if (d->state == IT_NOSYNC) goto out;
    if (d->state == IT_NONE) {
        rc = ddp_set_error(d, RINGLET_ERR_INVALID_USAGE,
                       "ringlet_ddp_finish: no iteration started: call ringlet_ddp_pre_forward before each forward");
        goto out;
    }
    if (d->state == IT_FINISHED) {
        rc = ddp_set_error(d, RINGLET_ERR_INVALID_USAGE,
                       "ringlet_ddp_finish: called twice in one iteration (%s)",
                       d->iter_rc ? d->iter_msg : "no error in it");
        goto out;
    }
    d->stats.finish_start_time = ddp_now_s();
    d->stats.buckets_before_finish = d->next_launch;

    /* parameters nobody reported */
    int missing = 0, first_missing = -1;
    for (int i = 0; i < d->nparams; i++)
        if (!d->ready[i]) {
            if (first_missing < 0) first_missing = i;
            missing++;
        }
    if (missing && !d->opt.find_unused_parameters) {
        char m[MSG_MAX], nb[200];
        int k = ddp_msgf(m, sizeof m,
                         "ringlet_ddp_finish: %s got no gradient in this iteration (not reported ready)",
                         ddp_tname(&d->params[first_missing], "parameter", first_missing, nb, sizeof nb));
        if (missing > 1 && k > 0 && (size_t)k < sizeof m) {
            k += ddp_msgf(m + k, sizeof m - (size_t)k, "; %d more:", missing - 1);
            int shown = 0;
            for (int i = first_missing + 1; i < d->nparams && shown < 4 && k > 0 && (size_t)k < sizeof m; i++)
                if (!d->ready[i]) {
                    k += ddp_msgf(m + k, sizeof m - (size_t)k, "%s %s", shown ? "," : "",
                                  ddp_tname(&d->params[i], "parameter", i, nb, sizeof nb));
                    shown++;
                }
            if (missing - 1 > shown && k > 0 && (size_t)k < sizeof m)
                k += ddp_msgf(m + k, sizeof m - (size_t)k, ", ...");
        }
        if (k > 0 && (size_t)k < sizeof m)
            ddp_msgf(m + k, sizeof m - (size_t)k,
                     ". If the forward does not use every parameter in every iteration, enable "
                     "find_unused_parameters");
        ddp_iter_fail(d, RINGLET_ERR_INVALID_USAGE, m);
    }
    for (int i = 0; i < d->nparams; i++)
        if (!d->ready[i]) {
            d->params[i].unreported = !d->opt.find_unused_parameters;
            mark(d, i, 0, d->opt.find_unused_parameters ? SRC_GRAD : SRC_ZERO);
        }
    launch_ready(d); /* buckets with no parameter left to wait for (none, normally) */

    /* Device memory, nothing the host must decide from the results (the used map, a first
     * rebuild): the write-back is queued behind the all-reduces on the stream, and the
     * error flag is read at the next call (settle_previous), so finish never waits. */
    if (d->on_device && !d->opt.find_unused_parameters && !(d->opt.rebuild_buckets && !d->rebuilt)) {
        finish_queued(d);
        goto done;
    }
    int defer = d->opt.find_unused_parameters; /* the used map decides what is written back */
    ringlet_result_t crc = RINGLET_SUCCESS;
    char cmsg[MSG_MAX] = "";
    for (int b = 0; b < d->nbuckets; b++) {
        wait_bucket(d, b, &crc, cmsg);
        if (!crc && !defer) write_back(d, b);
        d->buckets[b].t_done = ddp_now_s();
    }
    if (d->used_req) {
        ringlet_result_t w = ringlet_wait(&d->used_req);
        if (w && !crc) {
            crc = w;
            ddp_msgf(cmsg, sizeof cmsg, "all-reduce of the used-parameter map: %s", ringlet_comm_last_error(d->comm));
        }
    }
    if (!crc && defer) {
        for (int b = 0; b < d->nbuckets; b++) {
            write_back(d, b);
            d->buckets[b].t_done = ddp_now_s();
        }
    }
    ringlet_result_t coll_rc = crc; /* the collectives': every rank's alike (a copy's failure is this rank's) */
    if (!crc && d->mem_rc) {
        crc = d->mem_rc;
        ddp_msgf(cmsg, sizeof cmsg, "a copy or conversion of the gradients failed: %s", d->mem_msg);
    }
    if (crc) {
        ddp_iter_fail(d, crc, cmsg);
    } else if (d->nbuckets) {
        bucket_t *last = &d->buckets[d->nbuckets - 1];
        double total = ddp_mem_load_value(d, (char *)last->wire_mem + last->flag_index * ringlet_datatype_size(last->wire),
                                      last->wire);
        if (last->op == RINGLET_AVG) total *= d->nranks;
        double others = total - d->own_flag;
        if (d->mem_rc) { /* the read of the flag failed (its stream's work did not finish) */
            ddp_msgf(cmsg, sizeof cmsg, "reading the buckets' usage-error flag failed: %s", d->mem_msg);
            ddp_iter_fail(d, d->mem_rc, cmsg);
        } else if (others > 0.5 && !d->iter_rc) {
            char m[MSG_MAX];
            ddp_msgf(m, sizeof m,
                     "ringlet_ddp_finish: %.0f other rank(s) reported a DDP usage error in this iteration (for "
                     "example a gradient reported twice, a parameter that got no gradient, or a failed copy of a "
                     "gradient); see their messages. "
                     "The gradients of this iteration are not valid",
                     others);
            ddp_iter_fail(d, RINGLET_ERR_INVALID_USAGE, m);
        }
    }
    /* every rank reaches this point in the same (first) iteration: the broadcast matches */
    if (d->opt.rebuild_buckets && !d->rebuilt && !coll_rc) {
        d->rebuilt = 1;
        ddp_rebuild(d);
    }
done:
    memset(d->used_local, 0, d->nparams ? (size_t)d->nparams : 1); /* sent (used_req waited for, or none) */
    d->state = IT_FINISHED;
    d->stats.iterations++;
    d->stats.finish_end_time = ddp_now_s();
    if (d->iter_rc) rc = ddp_set_error(d, d->iter_rc, "%s", d->iter_msg);
out:
    pthread_mutex_unlock(&d->mu);
    return rc;
}

ringlet_result_t ringlet_ddp_finish(ringlet_ddp_t d) {
    CHECK_DDP(d, "ringlet_ddp_finish");
    int prev;
    ringlet_result_t rc = ddp_device_enter(d, "ringlet_ddp_finish", &prev);
    if (!rc) rc = finish(d);
    ddp_device_leave(prev);
    return rc;
}

/* Device memory, the stream changing: the work queued on the old one (the previous
 * iteration's write-backs, which read the buckets; broadcast copies through the staging)
 * must be done before the new stream refills them, and nothing orders the two streams:
 * the host waits for the old one. The all-reduces are waited for first (the stream may
 * be held until they end); their outcome stays for ddp_settle_previous to report. */
static ringlet_result_t drain_old_stream(struct ringlet_ddp *d) {
    ringlet_result_t ignored = RINGLET_SUCCESS;
    char m[MSG_MAX];
    for (int b = 0; b < d->nbuckets; b++) wait_bucket(d, b, &ignored, m);
    ringlet_result_t rc = ringlet_stream_synchronize(ddp_dstream(d));
    if (rc)
        return ddp_set_error(d, rc, "ringlet_ddp_set_stream: waiting for the work queued on the previous stream: %s",
                             ringlet_comm_last_error(NULL));
    return RINGLET_SUCCESS;
}

ringlet_result_t ringlet_ddp_set_stream(ringlet_ddp_t d, void *stream) {
    CHECK_DDP(d, "ringlet_ddp_set_stream");
    int prev;
    ringlet_result_t rc = ddp_device_enter(d, "ringlet_ddp_set_stream", &prev); /* the default stream's device */
    if (rc) return rc;
    pthread_mutex_lock(&d->mu);
    int sdev = ddp_stream_other_device(d, stream);
    if (sdev >= 0)
        rc = ddp_set_error(d, RINGLET_ERR_INVALID_ARGUMENT,
                           "ringlet_ddp_set_stream: a stream of device %d, but the tensors are on device %d (the "
                           "stream stays as it was)", sdev, d->device);
    else if (d->state == IT_SYNC && d->nready > 0)
        rc = ddp_set_error(d, RINGLET_ERR_INVALID_USAGE,
                       "ringlet_ddp_set_stream: buckets of an unfinished iteration are in flight (set it before the "
                       "forward or after ringlet_ddp_finish)");
    else if (d->on_device && stream != d->stream)
        rc = drain_old_stream(d);
    if (!rc) d->stream = stream;
    pthread_mutex_unlock(&d->mu);
    ddp_device_leave(prev);
    return rc;
}
