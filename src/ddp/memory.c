/* Host and device buffer operations of the DDP layer: on host memory at once, on device
 * memory queued on the DDP's stream (the public memory operations of ringlet.h). */
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

/* ---- memory: host memory at once, device memory on the DDP's stream ---------------- */

/* Device memory: makes the tensors' device current for a call, as NCCL makes its
 * communicator's device current: the buckets are allocated, and the default stream taken,
 * on the current device, and the caller's thread may have another (a thread that never
 * chose one has device 0). *prev is the device to give back (-1: nothing changed). */
ringlet_result_t ddp_device_enter(struct ringlet_ddp *d, const char *fn, int *prev) {
    *prev = -1;
    if (!d->on_device || d->device < 0) return RINGLET_SUCCESS;
    ringlet_result_t rc = ringlet_device_enter(d->device, prev);
    if (rc) { /* d's message too (ringlet_ddp_last_error(d)), written under d->mu */
        char why[MSG_MAX];
        ddp_msgf(why, sizeof why, "%s", ringlet_comm_last_error(NULL));
        pthread_mutex_lock(&d->mu);
        rc = ddp_set_error(d, rc, "%s: cannot make the tensors' device %d current: %s", fn, d->device, why);
        pthread_mutex_unlock(&d->mu);
    }
    return rc;
}
/* Whether gradient memory g is of the tensors' kind (host or device) and on their device:
 * only then is it all-reduced in place. */
int ddp_same_memory(const struct ringlet_ddp *d, const void *g) {
    int dev = -1;
    if (ringlet_mem_device(g, &dev) != RINGLET_SUCCESS) return 0;
    return d->on_device ? dev >= 0 && dev == d->device : dev < 0;
}
void ddp_device_leave(int prev) { ringlet_device_leave(prev); }

/* The stream of collectives and memory operations: none on host memory (calls complete
 * before they return), the DDP's stream (or the default one) on device memory. */
void *ddp_dstream(const struct ringlet_ddp *d) {
    return d->on_device ? (d->stream ? d->stream : RINGLET_STREAM_DEFAULT) : NULL;
}

/* The device of stream when that is another than the tensors' (its copies and collectives
 * would be refused there, on this rank alone, while the others wait in them); else -1. */
int ddp_stream_other_device(const struct ringlet_ddp *d, void *stream) {
    int sdev = -1;
    if (d->device < 0 || ringlet_stream_device(stream, &sdev) != RINGLET_SUCCESS) return -1;
    return sdev >= 0 && sdev != d->device ? sdev : -1;
}
static void mem_note(struct ringlet_ddp *d, ringlet_result_t rc) {
    if (rc && !d->mem_rc) {
        d->mem_rc = rc;
        ddp_msgf(d->mem_msg, sizeof d->mem_msg, "%s", ringlet_comm_last_error(NULL));
    }
}
/* Zeroed memory of the tensors' kind (device memory from the device backend). */
void *ddp_mem_alloc(struct ringlet_ddp *d, size_t bytes) {
    if (!d->on_device) return ddp_alloc_zero(bytes);
    void *p = NULL;
    if (ringlet_mem_alloc(&p, bytes ? bytes : 1)) return NULL;
    mem_note(d, ringlet_memset_async(p, 0, bytes, ddp_dstream(d)));
    return p;
}
void ddp_mem_free(int on_device, void *p) {
    if (on_device) ringlet_mem_free(p);
    else free(p);
}
void ddp_mem_copy(struct ringlet_ddp *d, void *dst, const void *src, size_t bytes) {
    mem_note(d, ringlet_memcpy_async(dst, src, bytes, ddp_dstream(d)));
}
void ddp_mem_zero(struct ringlet_ddp *d, void *dst, size_t bytes) {
    mem_note(d, ringlet_memset_async(dst, 0, bytes, ddp_dstream(d)));
}
/* dst (dt) = src (st) * scale: compression to float16/bfloat16 and back. */
void ddp_mem_convert(struct ringlet_ddp *d, void *dst, ringlet_datatype_t dt, const void *src, ringlet_datatype_t st,
                        size_t n, double scale) {
    mem_note(d, ringlet_convert_async(dst, dt, src, st, n, scale, ddp_dstream(d)));
}
/* One element of memory of the tensors' kind, written from or read into a double. On
 * device memory the value goes through the DDP's pinned word: a copy from pageable
 * memory returns only once done, which behind a held stream is never. The word is
 * written again only after the copy ran (the next iteration's, once this one's
 * all-reduces, queued after the copy, are collected). */
void ddp_mem_store_value(struct ringlet_ddp *d, void *dst, ringlet_datatype_t t, double v) {
    _Alignas(8) unsigned char e[8]; /* a float16 conversion refuses a misaligned operand */
    rl_ddp_store_value(e, t, v);
    if (!d->on_device) {
        memcpy(dst, e, ringlet_datatype_size(t));
        return;
    }
    memcpy(d->value_pinned, e, ringlet_datatype_size(t));
    ddp_mem_copy(d, dst, d->value_pinned, ringlet_datatype_size(t));
}
/* On device memory through the pinned word's second half (the first may still be read by
 * a store's copy): a copy into pageable memory would wait for the stream with no deadline,
 * where ringlet_stream_synchronize has RINGLET_TIMEOUT. */
double ddp_mem_load_value(struct ringlet_ddp *d, const void *src, ringlet_datatype_t t) {
    _Alignas(8) unsigned char e[8] = {0};
    if (!d->on_device) {
        memcpy(e, src, ringlet_datatype_size(t));
        return rl_ddp_load_value(e, t);
    }
    unsigned char *word = d->value_pinned + 8;
    memset(word, 0, 8);
    ddp_mem_copy(d, word, src, ringlet_datatype_size(t));
    mem_note(d, ringlet_stream_synchronize(ddp_dstream(d)));
    memcpy(e, word, 8);
    return rl_ddp_load_value(e, t);
}
