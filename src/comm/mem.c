#include "mem.h"

#include <stdio.h>
#include <stdlib.h>

#include "reduce.h"
#include "reduce_pool.h"

static void failed(rl_mem *m, const char *what) {
    if (m->rc) return;
    m->rc = rl_devcomm_error(what, m->err);
}

void rl_mem_reduce(rl_mem *m, void *dst, const void *a, const void *b, size_t n, ringlet_datatype_t dt,
                   ringlet_op_t op) {
    if (!m->dev) {
        rl_pool_reduce(m->pool, dst, a, b, n, dt, op);
    } else if (n && m->dev->d->reduce(dst, a, b, n, dt, op, m->dev->s_recv) != RL_DEV_OK) {
        failed(m, "reduction kernel");
    }
}

void rl_mem_reduce_many(rl_mem *m, void *dst, const void *const *srcs, int nsrc, size_t n, ringlet_datatype_t dt,
                        ringlet_op_t op) {
    if (!m->dev) {
        rl_reduce_host_many(dst, srcs, nsrc, n, dt, op);
    } else if (n && m->dev->d->reduce_many(dst, srcs, nsrc, n, dt, op, m->dev->s_recv) != RL_DEV_OK) {
        failed(m, "reduction kernel (many sources)");
    }
}

void rl_mem_scale(rl_mem *m, void *dst, const void *src, size_t n, ringlet_datatype_t dt, const void *scalar) {
    if (!m->dev) rl_scale_host(dst, src, n, dt, scalar);
    else if (n && m->dev->d->scale(dst, src, n, dt, scalar, m->dev->s_recv) != RL_DEV_OK) failed(m, "scaling kernel");
}

ringlet_result_t rl_mem_fence(struct ringlet_comm *c, rl_mem *m, char *err) {
    if (m->rc) return snprintf(err, RL_MSG_MAX, "%.400s", m->err), m->rc;
    if (!m->dev) return RINGLET_SUCCESS;
    if (m->dev->d->event_record(m->dev->ev_misc, m->dev->s_recv) != RL_DEV_OK) return rl_devcomm_error("device", err);
    return rl_devcomm_wait(c, m->dev->ev_misc, "the device's copy before the exchange", err);
}

void rl_mem_divide(rl_mem *m, void *buf, size_t n, ringlet_datatype_t dt, int divisor) {
    if (!m->dev) {
        rl_pool_divide(m->pool, buf, n, dt, divisor);
    } else if (n && divisor > 1 && m->dev->d->divide(buf, n, dt, divisor, m->dev->s_recv) != RL_DEV_OK) {
        failed(m, "division kernel");
    }
}

void rl_mem_copy(rl_mem *m, void *dst, const void *src, size_t bytes) {
    if (dst == src || !bytes) return;
    if (!m->dev) memmove(dst, src, bytes);
    else if (m->dev->d->memcpy_async(dst, src, bytes, m->dev->s_recv) != RL_DEV_OK) failed(m, "copy");
}

void *rl_comm_temp(struct ringlet_comm *c, size_t bytes) {
    if (bytes > c->temp_size) {
        void *p = NULL;
        if (posix_memalign(&p, 64, bytes ? bytes : 64) != 0) return NULL;
        free(c->temp);
        c->temp = p;
        c->temp_size = bytes;
    }
    return c->temp ? c->temp : (void *)c->slots;
}
