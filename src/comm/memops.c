/* The public memory operations (ringlet.h): copies, fills and conversions that go to the
 * device layer when a pointer is device memory and run at once on host memory; pinned
 * host memory; a stream's synchronisation. */
#include <sched.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "convert.h"
#include "device.h"
#include "failure.h"
#include "log.h"
#include "names.h"
#include "util.h"

/* The backend when either pointer is device memory; NULL for host memory. */
static const rl_device_ops *on_device(const void *a, const void *b) {
    return rl_dev_ptr_device(a) >= 0 || rl_dev_ptr_device(b) >= 0 ? rl_device() : NULL;
}

/* With no backend: a pointer that is device memory all the same (a CUDA of the
 * program's own, device.h) would fault in the host's copy; refused instead. */
static ringlet_result_t refuse_unserved(const char *fn, const void *a, const void *b) {
    int which = rl_dev_unserved_pair(a, b);
    if (!which) return RINGLET_SUCCESS;
    const void *p = which == 1 ? a : b;
    return rl_error(NULL, RINGLET_ERR_CUDA, "%s: %p is device memory, but ringlet has no device backend: %s", fn, p,
                    rl_device_unavailable());
}

/* Selects the device of the call's stream. The runtime binds the thread's current device
 * first: left there, a thread that never chose one would have a context made on device 0,
 * GPU memory on a device the program may never use. The default stream (NULL,
 * RINGLET_STREAM_DEFAULT) is the current device's, as in CUDA: nothing is selected, so a
 * copy and the synchronisation of the default stream after it meet on one device. */
static int enter_for(const rl_device_ops *d, void *stream, int *saved) {
    int dev = -1;
    *saved = -1;
    if (!stream || stream == RINGLET_STREAM_DEFAULT) return RL_DEV_OK;
    if (d->stream_device(stream, &dev) != RL_DEV_OK) return RL_DEV_ERR;
    return d->device_enter(dev, saved);
}

/* Host memory the device's copies reach (pinned) may be read or written by work queued
 * on stream before this call: a call that runs now on the host runs after that work, as
 * CUDA orders it on the stream (a copy from pinned to pageable memory after a copy from the
 * device to that pinned buffer read the old bytes). Waited for only where the stream's
 * device has a context: none, no work was queued there (and no context is made). */
static ringlet_result_t host_after_stream(const char *fn, const void *a, const void *b, void *stream) {
    const rl_device_ops *d = rl_device();
    if (!d || !(d->ptr_host_mapped(a) || (b && d->ptr_host_mapped(b)))) return RINGLET_SUCCESS;
    int dev = -1, active = 0;
    int rc = stream && stream != RINGLET_STREAM_DEFAULT ? d->stream_device(stream, &dev) : d->get_device(&dev);
    if (rc != RL_DEV_OK) return rl_error(NULL, RINGLET_ERR_CUDA, "%s: the stream's device: %s", fn, rl_dev_error());
    if (d->context_active(dev, &active) != RL_DEV_OK || !active) return RINGLET_SUCCESS;
    return ringlet_stream_synchronize(stream);
}

ringlet_result_t ringlet_memcpy_async(void *dst, const void *src, size_t bytes, void *stream) {
    if (!bytes) return RINGLET_SUCCESS;
    if (!dst || !src) return rl_error(NULL, RINGLET_ERR_INVALID_ARGUMENT, "memcpy_async: %s is NULL", dst ? "src" : "dst");
    const rl_device_ops *d = on_device(dst, src);
    if (!d) {
        ringlet_result_t rc = refuse_unserved("memcpy_async", dst, src);
        if (!rc) rc = host_after_stream("memcpy_async", dst, src, stream);
        if (rc) return rc;
        memmove(dst, src, bytes);
        return RINGLET_SUCCESS;
    }
    /* A copy engine does not move as memmove does: overlapping ranges are undefined in CUDA. */
    uintptr_t d0 = (uintptr_t)dst, s0 = (uintptr_t)src;
    if (d0 != s0 && d0 < s0 + bytes && s0 < d0 + bytes)
        return rl_error(NULL, RINGLET_ERR_INVALID_ARGUMENT,
                        "memcpy_async: dst %p and src %p overlap over %zu bytes of device memory (undefined in CUDA)",
                        dst, src, bytes);
    int saved = -1;
    if (enter_for(d, stream, &saved) != RL_DEV_OK)
        return rl_error(NULL, RINGLET_ERR_CUDA, "memcpy_async: selecting the device: %s", rl_dev_error());
    int rc = d->memcpy_async(dst, src, bytes, stream);
    d->device_leave(saved);
    if (rc != RL_DEV_OK) return rl_error(NULL, RINGLET_ERR_CUDA, "memcpy_async of %zu bytes: %s", bytes, rl_dev_error());
    return RINGLET_SUCCESS;
}

ringlet_result_t ringlet_memset_async(void *dst, int value, size_t bytes, void *stream) {
    if (!bytes) return RINGLET_SUCCESS;
    if (!dst) return rl_error(NULL, RINGLET_ERR_INVALID_ARGUMENT, "memset_async: dst is NULL");
    const rl_device_ops *d = on_device(dst, NULL);
    if (!d) {
        ringlet_result_t rc = refuse_unserved("memset_async", dst, NULL);
        if (!rc) rc = host_after_stream("memset_async", dst, NULL, stream);
        if (rc) return rc;
        memset(dst, value, bytes);
        return RINGLET_SUCCESS;
    }
    int saved = -1;
    if (enter_for(d, stream, &saved) != RL_DEV_OK)
        return rl_error(NULL, RINGLET_ERR_CUDA, "memset_async: selecting the device: %s", rl_dev_error());
    int rc = d->memset_async(dst, value, bytes, stream);
    d->device_leave(saved);
    if (rc != RL_DEV_OK) return rl_error(NULL, RINGLET_ERR_CUDA, "memset_async of %zu bytes: %s", bytes, rl_dev_error());
    return RINGLET_SUCCESS;
}

ringlet_result_t ringlet_convert_async(void *dst, ringlet_datatype_t dt, const void *src, ringlet_datatype_t st,
                                       size_t n, double scale, void *stream) {
    if (!rl_convert_supported(dt) || !rl_convert_supported(st))
        return rl_error(NULL, RINGLET_ERR_INVALID_ARGUMENT,
                        "convert_async: datatypes %d and %d (float16, bfloat16, float32 and float64 only)", (int)dt,
                        (int)st);
    if (!n) return RINGLET_SUCCESS;
    if (!dst || !src) return rl_error(NULL, RINGLET_ERR_INVALID_ARGUMENT, "convert_async: %s is NULL", dst ? "src" : "dst");
    /* Whole elements are loaded and stored: a misaligned operand is a fault on a GPU that
     * leaves the device unusable, undefined on the CPU. */
    size_t ds = ringlet_datatype_size(dt), ss = ringlet_datatype_size(st);
    if ((uintptr_t)dst % ds || (uintptr_t)src % ss) {
        int bad_dst = (uintptr_t)dst % ds != 0;
        return rl_error(NULL, RINGLET_ERR_INVALID_ARGUMENT, "convert_async: %s at %p is not aligned to its %zu-byte %s elements",
                        bad_dst ? "dst" : "src", bad_dst ? dst : src, bad_dst ? ds : ss, rl_dtype_name(bad_dst ? dt : st));
    }
    /* No object is larger than PTRDIFF_MAX bytes (the collectives' limit too): a larger n
     * would wrap the ranges below. */
    size_t es_max = ds > ss ? ds : ss;
    if (n > (size_t)PTRDIFF_MAX / es_max)
        return rl_error(NULL, RINGLET_ERR_INVALID_ARGUMENT, "convert_async: n %zu is too large (%zu-byte elements)", n,
                        es_max);
    /* Every element is read once and written once, in any order (a kernel's threads run
     * at once): the two ranges may not overlap, but for the same buffer of one element
     * size (each element converted in place). */
    uintptr_t d0 = (uintptr_t)dst, s0 = (uintptr_t)src;
    if (!(d0 == s0 && ds == ss) && d0 < s0 + n * ss && s0 < d0 + n * ds)
        return rl_error(NULL, RINGLET_ERR_INVALID_ARGUMENT,
                        "convert_async: dst (%zu bytes at %p) and src (%zu bytes at %p) overlap (only the same buffer "
                        "of one element size converts in place)",
                        n * ds, dst, n * ss, src);
    const rl_device_ops *d = on_device(dst, src);
    if (!d) {
        ringlet_result_t rc = refuse_unserved("convert_async", dst, src);
        if (!rc) rc = host_after_stream("convert_async", dst, src, stream);
        if (rc) return rc;
        rl_convert_host(dst, dt, src, st, n, scale);
        return RINGLET_SUCCESS;
    }
    /* A kernel runs on its stream's device and reaches only that device's memory (ringlet
     * enables no peer access): on the default stream, the memory's device; on a stream of
     * another device, refused here rather than an illegal access that poisons the context. */
    int dd = rl_dev_ptr_device(dst), sd = rl_dev_ptr_device(src), dev = dd >= 0 ? dd : sd, on = dev;
    if (dd >= 0 && sd >= 0 && dd != sd)
        return rl_error(NULL, RINGLET_ERR_INVALID_ARGUMENT,
                        "convert_async: dst is memory of device %d, src of device %d (a conversion runs on one device)",
                        dd, sd);
    if (stream && stream != RINGLET_STREAM_DEFAULT && d->stream_device(stream, &on) != RL_DEV_OK)
        return rl_error(NULL, RINGLET_ERR_CUDA, "convert_async: the stream's device: %s", rl_dev_error());
    if (on != dev)
        return rl_error(NULL, RINGLET_ERR_INVALID_ARGUMENT,
                        "convert_async: the buffers are memory of device %d, the stream belongs to device %d", dev, on);
    int saved = -1;
    if (d->device_enter(dev, &saved) != RL_DEV_OK)
        return rl_error(NULL, RINGLET_ERR_CUDA, "convert_async: selecting device %d: %s", dev, rl_dev_error());
    /* The other operand, host memory, must be pinned and mapped for this device (asked with
     * it current: a registration may be one context's): a kernel's access to pageable
     * memory is an illegal address (a copy stages it; a conversion has no such path). */
    int bad_dst = dd < 0 && !d->ptr_host_mapped(dst), bad_src = sd < 0 && !d->ptr_host_mapped(src);
    if (bad_dst || bad_src) {
        d->device_leave(saved);
        return rl_error(NULL, RINGLET_ERR_INVALID_ARGUMENT,
                        "convert_async: %s at %p is pageable host memory (or not mapped for device %d), %s device "
                        "memory: a conversion runs in a kernel, which reaches only device memory and pinned host "
                        "memory (ringlet_host_alloc)",
                        bad_dst ? "dst" : "src", bad_dst ? dst : src, dev, bad_dst ? "src" : "dst");
    }
    int rc = d->convert(dst, dt, src, st, n, scale, stream);
    d->device_leave(saved);
    if (rc != RL_DEV_OK) return rl_error(NULL, RINGLET_ERR_CUDA, "convert_async of %zu elements: %s", n, rl_dev_error());
    return RINGLET_SUCCESS;
}

/* Polls an event behind the stream's work rather than synchronising: cudaStreamSynchronize
 * has no deadline, and work that never ends (a kernel waiting for a dead peer) would hold
 * the caller (the DDP's destroy among them) for ever. */
ringlet_result_t ringlet_stream_synchronize(void *stream) {
    const rl_device_ops *d = rl_device();
    if (!d) return RINGLET_SUCCESS;
    int saved = -1, dev = -1, capturing = 0;
    if (enter_for(d, stream, &saved) != RL_DEV_OK)
        return rl_error(NULL, RINGLET_ERR_CUDA, "stream_synchronize: the stream's device: %s", rl_dev_error());
    if (d->stream_device(stream, &dev) != RL_DEV_OK) {
        ringlet_result_t rc = rl_error(NULL, RINGLET_ERR_CUDA, "stream_synchronize: the stream's device: %s", rl_dev_error());
        d->device_leave(saved);
        return rc;
    }
    if (d->stream_capturing(stream, &capturing) == RL_DEV_OK && capturing) {
        /* refused as CUDA refuses it, the capture invalidated as there */
        int rc = d->stream_sync(stream);
        d->device_leave(saved);
        return rc == RL_DEV_OK ? RINGLET_SUCCESS : rl_error(NULL, RINGLET_ERR_CUDA, "stream_synchronize: %s", rl_dev_error());
    }
    rl_dev_event_t ev = NULL;
    if (d->event_create(&ev) != RL_DEV_OK || d->event_record(ev, stream) != RL_DEV_OK) {
        ringlet_result_t rc = rl_error(NULL, RINGLET_ERR_CUDA, "stream_synchronize: %s", rl_dev_error());
        if (ev) d->event_destroy(ev);
        d->device_leave(saved);
        return rc;
    }
    double t0 = rl_now(), limit = rl_timeout_s();
    long nap_us = 10;
    int q;
    while ((q = d->event_query(ev)) == RL_DEV_NOT_READY) {
        double waited = rl_now() - t0;
        if (waited > limit) {
            /* Frees (which wait for the whole device) are kept until it is done. */
            if (!rl_dev_note_stuck_event(ev, dev)) d->event_destroy(ev);
            d->device_leave(saved);
            return rl_error(NULL, RINGLET_ERR_TIMEOUT,
                            "stream_synchronize: the stream's work did not finish within %.0f s (RINGLET_TIMEOUT)", limit);
        }
        if (waited < 1e-4) sched_yield();
        else rl_nap_backoff(&nap_us);
    }
    ringlet_result_t rc = q == RL_DEV_OK ? RINGLET_SUCCESS
                                         : rl_error(NULL, RINGLET_ERR_CUDA, "stream_synchronize: %s", rl_dev_error());
    d->event_destroy(ev);
    d->device_leave(saved);
    return rc;
}

ringlet_result_t ringlet_host_alloc(void **ptr, size_t bytes) {
    if (!ptr) return rl_error(NULL, RINGLET_ERR_INVALID_ARGUMENT, "host_alloc: ptr is NULL");
    const rl_device_ops *d = rl_device();
    *ptr = NULL;
    if (!d) {
        if (!(*ptr = calloc(1, bytes ? bytes : 1)))
            return rl_error(NULL, RINGLET_ERR_SYSTEM, "host_alloc of %zu bytes: out of memory", bytes);
        return RINGLET_SUCCESS;
    }
    /* Not while a stream is held (device.h): it waits for ringlet's holds to end. */
    if (rl_dev_quiet_begin(rl_timeout_s(), "host_alloc") != RL_DEV_OK)
        return rl_error(NULL, RINGLET_ERR_CUDA, "host_alloc of %zu bytes: %s", bytes, rl_dev_error());
    int rc = d->host_alloc(ptr, bytes ? bytes : 1);
    rl_dev_quiet_end();
    if (rc != RL_DEV_OK) return rl_error(NULL, RINGLET_ERR_CUDA, "host_alloc of %zu bytes: %s", bytes, rl_dev_error());
    return RINGLET_SUCCESS;
}

ringlet_result_t ringlet_host_free(void *ptr) {
    if (!ptr) return RINGLET_SUCCESS;
    const rl_device_ops *d = rl_device();
    if (!d) {
        free(ptr);
        return RINGLET_SUCCESS;
    }
    int kept = 0;
    if (rl_dev_free_user(ptr, RL_DEV_MEM_PINNED, rl_timeout_s(), "host_free", &kept) != RL_DEV_OK)
        return rl_error(NULL, RINGLET_ERR_CUDA, "host_free: %s", rl_dev_error());
    if (kept) RL_INFO(-1, "host_free: %p is freed once device work that did not finish is done", ptr);
    return RINGLET_SUCCESS;
}
