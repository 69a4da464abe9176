/* The DDP layer's small helpers: messages and errors, the clock, dtype names, aligned
 * host memory, tensor names and shapes in messages. */
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

_Thread_local char ddp_t_last_error[MSG_MAX];

double ddp_now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}


/* snprintf into a message buffer; truncation is fine (and not warned about). */
RL_PRINTF(3, 4) int ddp_msgf(char *buf, size_t n, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(buf, n, fmt, ap);
    va_end(ap);
    return k;
}

/* Records the message on the object (if any) and the thread; returns rc. */
RL_PRINTF(3, 4) ringlet_result_t ddp_set_error(struct ringlet_ddp *d, ringlet_result_t rc, const char *fmt, ...) {
    char buf[MSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    memcpy(ddp_t_last_error, buf, sizeof buf);
    if (d) memcpy(d->last_error, buf, sizeof buf);
    return rc;
}

const char *ddp_dtype_name(ringlet_datatype_t t) {
    static const char *names[] = {"int8",    "uint8",   "int32",   "uint32",  "int64",
                                  "uint64",  "float16", "float32", "float64", "bfloat16"};
    return (unsigned)t < RINGLET_NUM_DATATYPES ? names[t] : "unknown-dtype";
}

int ddp_is_floating(ringlet_datatype_t t) {
    return t == RINGLET_FLOAT16 || t == RINGLET_FLOAT32 || t == RINGLET_FLOAT64 || t == RINGLET_BFLOAT16;
}

size_t ddp_align_up(size_t x, size_t a) { return (x + a - 1) / a * a; }

void *ddp_alloc_zero(size_t bytes) {
    size_t n = ddp_align_up(bytes ? bytes : 1, ALIGN_BYTES);
    void *p = aligned_alloc(ALIGN_BYTES, n);
    if (p) memset(p, 0, n);
    return p;
}

/* "parameter 3 ('fc.weight')" */
const char *ddp_tname(const tensor_t *t, const char *kind, int i, char *buf, size_t n) {
    if (t && t->name && t->name[0])
        ddp_msgf(buf, n, "%s %d ('%s')", kind, i, t->name);
    else
        ddp_msgf(buf, n, "%s %d", kind, i);
    return buf;
}

void ddp_format_shape(char *buf, size_t n, ringlet_datatype_t dtype, int memory, int ndim, const int64_t *shape) {
    size_t k = (size_t)ddp_msgf(buf, n, "%s%s [", memory == RINGLET_DDP_DEVICE ? "device " : "", ddp_dtype_name(dtype));
    for (int j = 0; j < ndim && k < n; j++) k += (size_t)ddp_msgf(buf + k, n - k, "%s%" PRId64, j ? ", " : "", shape[j]);
    if (k < n) ddp_msgf(buf + k, n - k, "]");
}

const char *ringlet_ddp_last_error(ringlet_ddp_t d) { return d ? d->last_error : ddp_t_last_error; }
