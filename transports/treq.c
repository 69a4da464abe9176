/* Request bookkeeping shared by the transports, and the registration of those that need
 * none. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "sock.h"
#include "transport.h"

void rl_treq_start(rl_treq *r, size_t len, int parts) {
    r->len = len;
    r->err[0] = 0;
    atomic_store(&r->status, RINGLET_SUCCESS);
    atomic_store_explicit(&r->pending, parts, memory_order_release);
}

void rl_treq_fail(rl_treq *r, ringlet_result_t code, const char *fmt, ...) {
    int expected = RINGLET_SUCCESS;
    /* Reserve the slot with an impossible value, write the text, then publish the code. */
    if (!atomic_compare_exchange_strong(&r->status, &expected, -1)) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->err, sizeof r->err, fmt, ap);
    va_end(ap);
    atomic_store(&r->status, code);
}

int rl_treq_part_done(rl_treq *r) { return atomic_fetch_sub_explicit(&r->pending, 1, memory_order_acq_rel) == 1; }

ringlet_result_t rl_transport_reg_none(void *ctx, void *buf, size_t len, void **mr, char *err) {
    (void)ctx, (void)buf, (void)len, (void)err;
    *mr = NULL;
    return RINGLET_SUCCESS;
}

void rl_transport_dereg_none(void *ctx, void *mr) { (void)ctx, (void)mr; }

ringlet_result_t rl_transport_accept_failed(const char *tp, int peer, int io, int sys_errno, char *err) {
    if (io == RL_IO_ERR)
        return snprintf(err, RL_ERR_MAX, "%s: waiting for rank %d to connect: accept: %s", tp, peer, strerror(sys_errno)),
               RINGLET_ERR_SYSTEM;
    snprintf(err, RL_ERR_MAX, "%s: waiting for rank %d to connect: %s", tp, peer, rl_io_str((rl_io_t)io));
    return io == RL_IO_TIMEOUT ? RINGLET_ERR_TIMEOUT : RINGLET_ERR_REMOTE;
}
