/* Bucket layout: the assignment of parameters to buckets (at construction, and once
 * more after the first iteration with rebuild_buckets), their memory and slots. */
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

/* ---- buckets ---------------------------------------------------------------------- */

void ddp_free_buckets(int on_device, bucket_t *bs, int n) {
    if (!bs) return;
    for (int b = 0; b < n; b++) {
        if (bs[b].wire_mem != bs[b].mem) ddp_mem_free(on_device, bs[b].wire_mem);
        ddp_mem_free(on_device, bs[b].mem);
        free(bs[b].params);
        free(bs[b].reqs);
    }
    free(bs);
}

static int cmp_bucket(const void *x, const void *y) {
    const bucket_t *a = x, *b = y;
    /* the bucket whose first parameter comes first in the order goes first */
    return (a->first_pos > b->first_pos) - (a->first_pos < b->first_pos);
}

/* Assigns the parameters, taken in `order` (a permutation of 0..nparams-1: reverse
 * registration order at construction, rank 0's gradient-ready order at a rebuild), to
 * buckets: one open bucket per dtype, closed as soon as it holds cap bytes or more (the
 * first bucket of each dtype: first_bucket_cap_bytes), as PyTorch's DDP does: the
 * parameter that crosses the cap stays in the bucket. (A hard cap would put a layer's
 * bias, which is ready with the layer's weight, into the bucket before the weight's and
 * so hold that bucket back until the weight is ready.) Buckets are numbered by their
 * first parameter's place in the order. Allocates the bucket memory (zeroed). On success
 * the new buckets and every parameter's bucket, offset and direct mark are in *out,
 * *nout, pb[], po[], pd[]. Within a bucket the slots go [packed][flag][direct]. */
static ringlet_result_t assign_buckets(struct ringlet_ddp *d, const int *order, bucket_t **out, int *nout, int *pb,
                                       size_t *po, int *pd) {
    int np = d->nparams;
    bucket_t *bs = calloc(np ? (size_t)np : 1, sizeof *bs); /* at most one bucket per parameter */
    int open[RINGLET_NUM_DATATYPES], closed_count[RINGLET_NUM_DATATYPES] = {0};
    size_t fill[RINGLET_NUM_DATATYPES] = {0};
    int nb = 0;
    if (!bs) goto oom;
    for (int k = 0; k < RINGLET_NUM_DATATYPES; k++) open[k] = -1;
    for (int k = 0; k < np; k++) {
        int i = order[k];
        tensor_t *p = &d->params[i];
        int key = (int)p->dtype;
        size_t es = ringlet_datatype_size(p->dtype), al = ALIGN_BYTES / es;
        if (open[key] < 0) {
            open[key] = nb++;
            fill[key] = 0;
            bs[open[key]].dtype = p->dtype;
            bs[open[key]].first_pos = k;
            bs[open[key]].params = malloc(sizeof(int) * (size_t)np);
            if (!bs[open[key]].params) goto oom;
        }
        bucket_t *b = &bs[open[key]];
        fill[key] = ddp_align_up(fill[key], al) + p->count;
        b->params[b->nparams++] = i;
        size_t cap = closed_count[key] == 0 ? d->opt.first_bucket_cap_bytes : d->opt.bucket_cap_bytes;
        if (fill[key] * es >= cap) { /* full: the next parameter of this dtype opens a new one */
            open[key] = -1;
            closed_count[key]++;
        }
    }
    qsort(bs, (size_t)nb, sizeof *bs, cmp_bucket);
    ringlet_datatype_t wire_of_comp = d->opt.compression == RINGLET_DDP_COMPRESS_FLOAT16    ? RINGLET_FLOAT16
                                      : d->opt.compression == RINGLET_DDP_COMPRESS_BFLOAT16 ? RINGLET_BFLOAT16
                                                                                              : RINGLET_NUM_DATATYPES;
    for (int k = 0; k < nb; k++) {
        bucket_t *b = &bs[k];
        int compress = wire_of_comp != RINGLET_NUM_DATATYPES &&
                       (b->dtype == RINGLET_FLOAT32 || b->dtype == RINGLET_FLOAT64);
        b->wire = compress ? wire_of_comp : b->dtype;
        b->op = d->opt.average_gradients && !compress ? RINGLET_AVG : RINGLET_SUM;
        size_t es = ringlet_datatype_size(b->dtype), al = ALIGN_BYTES / es, off = 0;
        int ndirect = 0;
        for (int pass = 0; pass < 2; pass++) { /* packed slots, flag, then direct slots */
            for (int j = 0; j < b->nparams; j++) {
                int i = b->params[j];
                int direct = !compress && d->direct_min && d->params[i].bytes >= d->direct_min;
                if (direct != pass) continue;
                pb[i] = k;
                pd[i] = direct;
                off = ddp_align_up(off, al);
                po[i] = off;
                off += d->params[i].count;
                ndirect += direct;
            }
            if (pass == 0) {
                b->has_flag = k == nb - 1;
                b->flag_index = off;
                off += b->has_flag ? 1 : 0;
                b->packed_count = off;
            }
        }
        b->count = off;
        b->maxreqs = 1 + ndirect;
        b->reqs = calloc((size_t)b->maxreqs, sizeof *b->reqs);
        b->mem = ddp_mem_alloc(d, b->count * es);
        b->wire_mem = compress ? ddp_mem_alloc(d, b->count * ringlet_datatype_size(b->wire)) : b->mem;
        if (!b->mem || !b->wire_mem || !b->reqs) {
            size_t count = b->count; /* b goes with bs */
            ddp_free_buckets(d->on_device, bs, nb);
            return ddp_set_error(d, RINGLET_ERR_SYSTEM, "out of memory for bucket %d (%zu elements)", k, count);
        }
    }
    *out = bs;
    *nout = nb;
    return RINGLET_SUCCESS;
oom:
    ddp_free_buckets(d->on_device, bs, nb);
    return ddp_set_error(d, RINGLET_ERR_SYSTEM, "out of memory");
}

/* The construction's assignment: reverse registration order. */
ringlet_result_t ddp_build_buckets(struct ringlet_ddp *d) {
    int np = d->nparams;
    int *order = malloc(sizeof(int) * (size_t)(np ? np : 1)), *pb = malloc(sizeof(int) * (size_t)(np ? np : 1));
    int *pd = malloc(sizeof(int) * (size_t)(np ? np : 1));
    size_t *po = malloc(sizeof(size_t) * (size_t)(np ? np : 1));
    ringlet_result_t rc = RINGLET_SUCCESS;
    if (!order || !pb || !po || !pd) {
        rc = ddp_set_error(d, RINGLET_ERR_SYSTEM, "ringlet_ddp_create: out of memory");
    } else {
        for (int k = 0; k < np; k++) order[k] = np - 1 - k;
        rc = assign_buckets(d, order, &d->buckets, &d->nbuckets, pb, po, pd);
        if (!rc)
            for (int i = 0; i < np; i++) {
                d->params[i].bucket = pb[i];
                d->params[i].offset = po[i];
                d->params[i].direct = pd[i];
            }
        else
            ddp_set_error(d, rc, "ringlet_ddp_create: %s", d->last_error);
    }
    free(order);
    free(pb);
    free(po);
    free(pd);
    return rc;
}

void *ddp_slot_ptr(const struct ringlet_ddp *d, const tensor_t *p) {
    const bucket_t *b = &d->buckets[p->bucket];
    return (char *)b->mem + p->offset * ringlet_datatype_size(b->dtype);
}

/* Whether every rank can go on (ok on each): one all-reduce. 0, or the collective's failure. */
static ringlet_result_t all_ranks_ok(struct ringlet_ddp *d, int ok, int *all_ok) {
    int32_t mine = ok ? 0 : 1, any = 1;
    ringlet_result_t rc = ringlet_allreduce(&mine, &any, 1, RINGLET_INT32, RINGLET_MAX, d->comm, NULL);
    *all_ok = !rc && any == 0;
    return rc;
}

/* rebuild_buckets: at the end of the first synchronising iteration, every rank takes
 * rank 0's report order (a broadcast) and reassigns the buckets in it. Every rank must
 * end with the same layout (the all-reduces' counts follow from it), so a rank that
 * cannot make the new buckets (memory) keeps the old ones, and the others learn it and
 * keep theirs: the rebuild only speeds later iterations up, and its gradients are done. */
void ddp_rebuild(struct ringlet_ddp *d) {
    int np = d->nparams;
    if (np < 2 || d->norder != np) return;
    int32_t *ord = malloc(sizeof(int32_t) * (size_t)np);
    int *o = malloc(sizeof(int) * (size_t)np), *pb = malloc(sizeof(int) * (size_t)np);
    int *pd = malloc(sizeof(int) * (size_t)np);
    size_t *po = malloc(sizeof(size_t) * (size_t)np);
    unsigned char *seen = calloc((size_t)np, 1);
    bucket_t *nb = NULL;
    int nnb = 0, all_ok = 0;
    char m[MSG_MAX];
    ringlet_result_t rc = all_ranks_ok(d, ord && o && pb && po && pd && seen, &all_ok);
    if (rc) goto comm_failed;
    if (!all_ok) goto out;
    for (int k = 0; k < np; k++) ord[k] = d->order[k];
    rc = ringlet_broadcast(ord, ord, (size_t)np, RINGLET_INT32, 0, d->comm, NULL);
    if (rc) goto comm_failed;
    for (int k = 0; k < np; k++) {
        if (ord[k] < 0 || ord[k] >= np || seen[ord[k]]) { /* the same on every rank: rank 0's */
            ddp_iter_fail(d, RINGLET_ERR_INTERNAL, "bucket rebuild: rank 0's gradient order is not a permutation");
            goto out;
        }
        seen[ord[k]] = 1;
        o[k] = ord[k];
    }
    int made = assign_buckets(d, o, &nb, &nnb, pb, po, pd) == RINGLET_SUCCESS;
    if (made) {
        bucket_t **r = realloc(d->retired, sizeof *r * (size_t)(d->nretired + 1));
        if (r) d->retired = r;
        int *rn = r ? realloc(d->retired_n, sizeof *rn * (size_t)(d->nretired + 1)) : NULL;
        if (rn) d->retired_n = rn;
        made = r && rn;
    }
    rc = all_ranks_ok(d, made, &all_ok);
    if (rc || !all_ok) {
        if (nb) ddp_free_buckets(d->on_device, nb, nnb);
        if (rc) goto comm_failed;
        goto out;
    }
    int same = nnb == d->nbuckets;
    for (int i = 0; same && i < np; i++)
        same = pb[i] == d->params[i].bucket && po[i] == d->params[i].offset && pd[i] == d->params[i].direct;
    if (same) {
        ddp_free_buckets(d->on_device, nb, nnb);
        goto out;
    }
    for (int i = 0; i < np; i++) { /* results that live in their bucket move with it */
        tensor_t *p = &d->params[i];
        void *old = ddp_slot_ptr(d, p);
        void *nv = (char *)nb[pb[i]].mem + po[i] * ringlet_datatype_size(p->dtype);
        if (p->grad == old || !p->grad) ddp_mem_copy(d, nv, old, p->bytes);
        if (p->grad == old) p->grad = nv;
    }
    d->retired[d->nretired] = d->buckets;
    d->retired_n[d->nretired] = d->nbuckets;
    d->nretired++;
    d->buckets = nb;
    d->nbuckets = nnb;
    for (int i = 0; i < np; i++) {
        d->params[i].bucket = pb[i];
        d->params[i].offset = po[i];
        d->params[i].direct = pd[i];
    }
    d->stats.bucket_rebuilds++;
    goto out;
comm_failed:
    ddp_msgf(m, sizeof m, "bucket rebuild: %s", ringlet_comm_last_error(d->comm));
    ddp_iter_fail(d, rc, m);
out:
    free(ord);
    free(o);
    free(pb);
    free(pd);
    free(po);
    free(seen);
}

ringlet_result_t ringlet_ddp_free_retired(ringlet_ddp_t d, size_t *bytes) {
    CHECK_DDP(d, "ringlet_ddp_free_retired");
    if (bytes) *bytes = 0;
    int prev;
    ringlet_result_t rc = ddp_device_enter(d, "ringlet_ddp_free_retired", &prev); /* the default stream's device */
    if (rc) return rc;
    pthread_mutex_lock(&d->mu);
    if (d->nretired && d->on_device && (rc = ringlet_stream_synchronize(ddp_dstream(d))))
        ddp_set_error(d, rc, "ringlet_ddp_free_retired: waiting for the DDP's stream: %s", ringlet_comm_last_error(NULL));
    size_t freed = 0;
    for (int k = 0; k < d->nretired && !rc; k++) {
        for (int b = 0; b < d->retired_n[k]; b++) {
            const bucket_t *bk = &d->retired[k][b];
            freed += bk->count * ringlet_datatype_size(bk->dtype);
            if (bk->wire_mem != bk->mem) freed += bk->count * ringlet_datatype_size(bk->wire);
        }
        ddp_free_buckets(d->on_device, d->retired[k], d->retired_n[k]);
    }
    if (!rc) d->nretired = 0;
    pthread_mutex_unlock(&d->mu);
    ddp_device_leave(prev);
    if (bytes) *bytes = freed;
    return rc;
}
