/* Coalesced broadcasts from rank 0 (parameters at construction, buffers before each
 * forward), and the buffer calls. */
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

/* ---- coalesced broadcast from rank 0 ----------------------------------------------
 * Small tensors are packed into a staging slot (two slots, so packing the next message
 * overlaps the broadcast of the previous one); a tensor larger than half a slot goes
 * straight from/into its own memory. Every rank computes the same sequence. */

typedef struct {
    ringlet_request_t req;
    int lo, hi; /* tensors [lo, hi) (those that fit) are packed in it */
} slot_t;

static int goes_direct(const tensor_t *t, size_t slot) { return t->bytes > slot / 2; }

static void unpack_slot(struct ringlet_ddp *d, const tensor_t *ts, const slot_t *s, const unsigned char *mem,
                        size_t slot) {
    size_t off = 0;
    for (int i = s->lo; i < s->hi; i++) {
        if (!ts[i].bytes || goes_direct(&ts[i], slot)) continue;
        ddp_mem_copy(d, ts[i].data, mem + off, ts[i].bytes);
        off += ts[i].bytes;
    }
}

static ringlet_result_t bcast_wait(struct ringlet_ddp *d, ringlet_request_t *req, ringlet_result_t rc) {
    if (!*req) return rc;
    ringlet_result_t w = ringlet_wait(req);
    if (w && !rc) rc = ddp_set_error(d, w, "broadcast from rank 0: %s", ringlet_comm_last_error(d->comm));
    return rc;
}

/* Broadcasts the tensors' data from rank 0. staging: 2 * slot bytes. */
ringlet_result_t ddp_bcast_tensors(struct ringlet_ddp *d, const tensor_t *ts, int n, unsigned char *staging,
                                      size_t slot) {
    ringlet_result_t rc = RINGLET_SUCCESS;
    ringlet_request_t *direct = calloc(n ? (size_t)n : 1, sizeof *direct);
    if (!direct) return ddp_set_error(d, RINGLET_ERR_SYSTEM, "broadcast: out of memory");
    int ndirect = 0;
    slot_t slots[2] = {{NULL, 0, 0}, {NULL, 0, 0}};
    int cur = 0;
    size_t fill = 0;
    int root = d->rank == 0;
    slots[0].lo = 0;
    for (int i = 0; i <= n && !rc; i++) {
        int flush = i == n || (!goes_direct(&ts[i], slot) && ts[i].bytes && fill + ts[i].bytes > slot);
        if (flush && fill) {
            slot_t *s = &slots[cur];
            s->hi = i;
            ringlet_result_t r = ringlet_ibroadcast(staging + cur * slot, staging + cur * slot, fill, RINGLET_UINT8, 0,
                                                    d->comm, ddp_dstream(d), &s->req);
            if (r) {
                rc = ddp_set_error(d, r, "broadcast from rank 0: %s", ringlet_comm_last_error(d->comm));
                break;
            }
            cur ^= 1;
            fill = 0;
            /* the other slot is about to be refilled: finish its message first */
            s = &slots[cur];
            if (s->req) {
                rc = bcast_wait(d, &s->req, rc);
                if (!rc && !root) unpack_slot(d, ts, s, staging + cur * slot, slot);
            }
            s->lo = i;
        } else if (flush) {
            slots[cur].lo = i;
        }
        if (i == n) break;
        const tensor_t *t = &ts[i];
        if (!t->bytes) continue;
        if (goes_direct(t, slot)) {
            ringlet_result_t r = ringlet_ibroadcast(t->data, t->data, t->bytes, RINGLET_UINT8, 0, d->comm, ddp_dstream(d),
                                                    &direct[ndirect]);
            if (r) {
                rc = ddp_set_error(d, r, "broadcast from rank 0: %s", ringlet_comm_last_error(d->comm));
                break;
            }
            ndirect++;
        } else {
            if (root) ddp_mem_copy(d, staging + cur * slot + fill, t->data, t->bytes);
            fill += t->bytes;
        }
    }
    for (int k = 0; k < 2; k++) {
        int c = cur ^ 1 ^ k; /* the older message first (they complete in order anyway) */
        if (slots[c].req) {
            ringlet_result_t before = rc;
            rc = bcast_wait(d, &slots[c].req, rc);
            if (!rc && !before && !root) unpack_slot(d, ts, &slots[c], staging + c * slot, slot);
        }
    }
    for (int k = 0; k < ndirect; k++) rc = bcast_wait(d, &direct[k], rc);
    free(direct);
    return rc;
}

size_t ddp_staging_slot(const tensor_t *ts, int n, size_t cap) {
    size_t s = 0;
    for (int i = 0; i < n; i++)
        if (!goes_direct(&ts[i], cap)) s += ts[i].bytes;
    if (s > cap) s = cap;
    return s < ALIGN_BYTES ? ALIGN_BYTES : s;
}

ringlet_result_t ddp_sync_buffers(struct ringlet_ddp *d) {
    if (!d->nsync_buffers) return RINGLET_SUCCESS;
    d->stats.buffer_broadcasts++;
    /* This broadcast's own copy failures only: the iteration's (which its finish reports)
     * are put aside and given back. */
    ringlet_result_t iter_mem_rc = d->mem_rc;
    char iter_mem_msg[MSG_MAX];
    memcpy(iter_mem_msg, d->mem_msg, sizeof iter_mem_msg);
    d->mem_rc = RINGLET_SUCCESS;
    ringlet_result_t rc = ddp_bcast_tensors(d, d->buffers, d->nsync_buffers, d->staging, d->staging_slot);
    if (rc) ddp_set_error(d, rc, "buffer broadcast: %s", ringlet_comm_last_error(d->comm));
    else if (d->mem_rc) rc = ddp_set_error(d, d->mem_rc, "buffer broadcast: %s", d->mem_msg);
    d->mem_rc = iter_mem_rc;
    memcpy(d->mem_msg, iter_mem_msg, sizeof iter_mem_msg);
    return rc;
}

ringlet_result_t ringlet_ddp_broadcast_buffers(ringlet_ddp_t d) {
    CHECK_DDP(d, "ringlet_ddp_broadcast_buffers");
    int prev;
    ringlet_result_t rc = ddp_device_enter(d, "ringlet_ddp_broadcast_buffers", &prev);
    if (rc) return rc;
    pthread_mutex_lock(&d->mu);
    if (d->state == IT_SYNC && d->nready > 0)
        rc = ddp_set_error(d, RINGLET_ERR_INVALID_USAGE,
                       "ringlet_ddp_broadcast_buffers: gradients of an unfinished iteration are being reduced "
                       "(call it before the forward or after ringlet_ddp_finish)");
    else
        rc = ddp_sync_buffers(d);
    pthread_mutex_unlock(&d->mu);
    ddp_device_leave(prev);
    return rc;
}

ringlet_result_t ringlet_ddp_set_buffer(ringlet_ddp_t d, int index, void *data) {
    CHECK_DDP(d, "ringlet_ddp_set_buffer");
    pthread_mutex_lock(&d->mu);
    ringlet_result_t rc = RINGLET_SUCCESS;
    if (index < 0 || index >= d->nbuffers)
        rc = ddp_set_error(d, RINGLET_ERR_INVALID_ARGUMENT, "ringlet_ddp_set_buffer: buffer index %d is out of range [0, %d)",
                       index, d->nbuffers);
    else if (!data && d->buffers[index].count)
        rc = ddp_set_error(d, RINGLET_ERR_INVALID_ARGUMENT, "ringlet_ddp_set_buffer: data is NULL");
    else
        d->buffers[index].data = data;
    pthread_mutex_unlock(&d->mu);
    return rc;
}
