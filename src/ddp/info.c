/* Introspection of a DDP object: gradient views, usage, the bucket layout, times. */
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

/* ---- introspection -------------------------------------------------------------------- */

ringlet_result_t ringlet_ddp_grad_view(ringlet_ddp_t d, int index, void **view) {
    CHECK_DDP(d, "ringlet_ddp_grad_view");
    pthread_mutex_lock(&d->mu);
    ringlet_result_t rc = ddp_check_param(d, index, "ringlet_ddp_grad_view");
    if (!rc && !view) rc = ddp_set_error(d, RINGLET_ERR_INVALID_ARGUMENT, "ringlet_ddp_grad_view: view is NULL");
    if (!rc) *view = ddp_slot_ptr(d, &d->params[index]);
    pthread_mutex_unlock(&d->mu);
    return rc;
}

ringlet_result_t ringlet_ddp_param_used(ringlet_ddp_t d, int index, int *used) {
    CHECK_DDP(d, "ringlet_ddp_param_used");
    pthread_mutex_lock(&d->mu);
    ringlet_result_t rc = ddp_check_param(d, index, "ringlet_ddp_param_used");
    if (!rc && !used) rc = ddp_set_error(d, RINGLET_ERR_INVALID_ARGUMENT, "ringlet_ddp_param_used: used is NULL");
    if (!rc) *used = d->used_global[index] != 0;
    pthread_mutex_unlock(&d->mu);
    return rc;
}

ringlet_result_t ringlet_ddp_num_buckets(ringlet_ddp_t d, int *n) {
    CHECK_DDP(d, "ringlet_ddp_num_buckets");
    if (!n) return ddp_set_error(d, RINGLET_ERR_INVALID_ARGUMENT, "ringlet_ddp_num_buckets: nbuckets is NULL");
    pthread_mutex_lock(&d->mu); /* a rebuild in another thread's finish changes the layout */
    *n = d->nbuckets;
    pthread_mutex_unlock(&d->mu);
    return RINGLET_SUCCESS;
}

ringlet_result_t ringlet_ddp_param_bucket(ringlet_ddp_t d, int index, int *bucket, size_t *offset) {
    CHECK_DDP(d, "ringlet_ddp_param_bucket");
    pthread_mutex_lock(&d->mu);
    ringlet_result_t rc = ddp_check_param(d, index, "ringlet_ddp_param_bucket");
    if (!rc && bucket) *bucket = d->params[index].bucket;
    if (!rc && offset) *offset = d->params[index].offset;
    pthread_mutex_unlock(&d->mu);
    return rc;
}

ringlet_result_t ringlet_ddp_bucket_info(ringlet_ddp_t d, int b, ringlet_ddp_bucket_info_t *info) {
    CHECK_DDP(d, "ringlet_ddp_bucket_info");
    if (!info) return ddp_set_error(d, RINGLET_ERR_INVALID_ARGUMENT, "ringlet_ddp_bucket_info: info is NULL");
    pthread_mutex_lock(&d->mu);
    if (b < 0 || b >= d->nbuckets) {
        ringlet_result_t rc = ddp_set_error(d, RINGLET_ERR_INVALID_ARGUMENT,
                                            "ringlet_ddp_bucket_info: bucket %d is out of range [0, %d)", b, d->nbuckets);
        pthread_mutex_unlock(&d->mu);
        return rc;
    }
    const bucket_t *bk = &d->buckets[b];
    info->memory = bk->mem;
    info->count = bk->count;
    info->dtype = bk->dtype;
    info->wire_dtype = bk->wire;
    info->nparams = bk->nparams;
    info->first_param = info->last_param = bk->params[0];
    for (int j = 1; j < bk->nparams; j++) {
        if (bk->params[j] < info->first_param) info->first_param = bk->params[j];
        if (bk->params[j] > info->last_param) info->last_param = bk->params[j];
    }
    info->launch_time = bk->t_launch;
    info->done_time = bk->t_done;
    info->complete_time = bk->t_complete;
    pthread_mutex_unlock(&d->mu);
    return RINGLET_SUCCESS;
}

ringlet_result_t ringlet_ddp_stats(ringlet_ddp_t d, ringlet_ddp_stats_t *s) {
    CHECK_DDP(d, "ringlet_ddp_stats");
    if (!s) return ddp_set_error(d, RINGLET_ERR_INVALID_ARGUMENT, "ringlet_ddp_stats: stats is NULL");
    pthread_mutex_lock(&d->mu);
    *s = d->stats;
    pthread_mutex_unlock(&d->mu);
    return RINGLET_SUCCESS;
}
