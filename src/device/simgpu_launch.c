/* The simulated GPU's kernels and stream memory operations (simgpu.h).
 *
 * A launch is checked as cudaLaunchKernel checks it (the stream belongs to the current
 * device; the kernel is loaded, at its first launch unless all were loaded before) and
 * returns its own status only. Before that, arguments that the launchers of
 * kernels/reduce_cuda.cu and convert_cuda.cu refuse (an unknown type or op, a NULL scaling
 * factor, an operand not aligned to its element) are refused as they refuse them: invalid
 * value, the thread's last error untouched. A one-source reduce_many is a copy there, and
 * here (or nothing, in place). The kernel itself is the CPU twin of kernels/, run by the
 * stream's thread; an operand the device cannot reach (pageable host memory, a range past
 * an allocation; a misaligned flag) becomes a fault that sets the sticky error when it
 * runs, as an illegal address does on a GPU. */
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "convert.h"
#include "reduce.h"
#include "simgpu.h"
#include "util.h"

/* Kernel numbers (one per template instance a launcher picks, as modules are loaded per
 * kernel): reduce and reduce_many per (dtype, op), the unary ones per dtype. */
enum {
    K_REDUCE = 0,                                            /* + dt * RINGLET_NUM_OPS + op */
    K_MANY = K_REDUCE + RINGLET_NUM_DATATYPES * RINGLET_NUM_OPS, /* likewise */
    K_SCALE = K_MANY + RINGLET_NUM_DATATYPES * RINGLET_NUM_OPS,  /* + dt */
    K_DIVIDE = K_SCALE + RINGLET_NUM_DATATYPES,                  /* + dt */
    K_CONVERT = K_DIVIDE + RINGLET_NUM_DATATYPES,                /* + 4 * source + destination (floats) */
    K_WAIT_FLAG = K_CONVERT + 16,
    K_WRITE_FLAG,
    K_COUNT
};
_Static_assert(K_COUNT <= SIM_KERNELS, "more kernels than the loading table holds");

static int float_index(ringlet_datatype_t t) {
    switch (t) {
    case RINGLET_FLOAT16: return 0;
    case RINGLET_BFLOAT16: return 1;
    case RINGLET_FLOAT32: return 2;
    default: return 3;
    }
}

/* A launcher's refusal of its arguments (unknown type or op, a pointer not aligned to its
 * element, a source count out of range, a NULL scaling factor), as the CUDA launchers
 * refuse them: invalid value, before any CUDA call, so the thread's last error stays as it
 * was and nothing is queued (on a GPU a misaligned load would be a sticky fault; the
 * launcher never makes one). */
__attribute__((format(printf, 1, 2))) static int refuse(const char *fmt, ...) {
    char msg[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    int saved = sim_thread_error();
    sim_fail(RL_RT_ERR_INVALID_VALUE, "%s (refused by the launcher)", msg);
    return sim_driver_failed(RL_RT_ERR_INVALID_VALUE, saved);
}

/* 0, or the refusal of the first of ptrs not aligned to align. */
static int refuse_misaligned(const char *kernel, size_t align, const void *const *ptrs, int np) {
    for (int i = 0; i < np; i++)
        if ((uintptr_t)ptrs[i] % align)
            return refuse("%s: operand at %p is not aligned to its element size (%zu bytes)", kernel, ptrs[i], align);
    return 0;
}

/* The checks of a launch before it is queued: the sticky error, the stream's device
 * against the current one, the kernel's loading. */
static int launch_checks(rl_dev_stream_t s, int kernel, const char *name) {
    int rc = sim_sticky_check(), dev = -1;
    if (rc || (rc = sim_stream_device(s, &dev))) return rc;
    if (dev != sim_current_device())
        return sim_fail(RL_RT_ERR_INVALID_HANDLE,
                        "launch of %s: the stream belongs to device %d, the current device is %d (a kernel is launched "
                        "on the current device)",
                        name, dev, sim_current_device());
    return sim_kernel_loaded(kernel, name);
}

/* The engine address of an operand of work that runs on device dev, or 0 with the fault's
 * text in o. */
static int operand_on(sim_op *o, int dev, const char *kernel, const char *name, const void *p, size_t bytes,
                      size_t align, void **eng) {
    char why[160];
    int k = sim_translate(p, bytes, eng, why, sizeof why);
    if (k == SIM_MEM_PAGEABLE || !p) {
        o->fault = RL_RT_ERR_ILLEGAL_ADDRESS;
        snprintf(o->msg, sizeof o->msg, "an illegal memory access was encountered: %s operand %s at %p is host memory "
                 "not allocated with host_alloc", kernel, name, p);
        return 0;
    }
    if (k == SIM_MEM_BAD) {
        o->fault = RL_RT_ERR_ILLEGAL_ADDRESS;
        snprintf(o->msg, sizeof o->msg, "an illegal memory access was encountered: %s operand %s: %.120s", kernel, name,
                 why);
        return 0;
    }
    int owner = k == SIM_MEM_DEVICE ? sim_peer_denied(p, dev) : -1;
    if (owner >= 0) {
        o->fault = RL_RT_ERR_ILLEGAL_ADDRESS;
        snprintf(o->msg, sizeof o->msg, "an illegal memory access was encountered: %s operand %s at %p is memory of "
                 "device %d (or mapped in its context), the work runs on device %d (no peer access)", kernel, name, p,
                 owner, dev);
        return 0;
    }
    if ((uintptr_t)p % align) {
        o->fault = RL_RT_ERR_MISALIGNED_ADDRESS;
        snprintf(o->msg, sizeof o->msg, "misaligned address: %s operand %s at %p is not aligned to %zu bytes", kernel,
                 name, p, align);
        return 0;
    }
    return 1;
}

/* A kernel's operand: kernels run on the current device (launch_checks: its stream's). */
static int operand(sim_op *o, const char *kernel, const char *name, const void *p, size_t bytes, size_t align,
                   void **eng) {
    return operand_on(o, sim_current_device(), kernel, name, p, bytes, align, eng);
}

/* Queues o, or the fault it became. */
static int submit(rl_dev_stream_t s, sim_op *o, int ok, const char *name) {
    if (!ok) o->kind = OP_FAULT;
    return sim_enqueue(s, o, name);
}

int sim_launch_reduce(void *dst, const void *a, const void *b, size_t n, ringlet_datatype_t dt, ringlet_op_t op,
                      rl_dev_stream_t s) {
    size_t es = ringlet_datatype_size(dt);
    if (!es || (unsigned)op >= RINGLET_NUM_OPS) return refuse("reduce: dtype %d, op %d", (int)dt, (int)op);
    if (!n) return RL_RT_SUCCESS; /* the launcher launches nothing */
    const void *ptrs[3] = {dst, a, b};
    int rc = refuse_misaligned("reduce", es, ptrs, 3);
    if (!rc) rc = launch_checks(s, K_REDUCE + (int)dt * RINGLET_NUM_OPS + (int)op, "reduce");
    if (rc) return rc;
    sim_op *o = sim_new_op(OP_REDUCE);
    if (!o) return sim_fail(RL_RT_ERR_MEMORY_ALLOCATION, "reduce: out of memory");
    void *d, *x, *y;
    int ok = operand(o, "reduce", "dst", dst, n * es, es, &d) && operand(o, "reduce", "a", a, n * es, es, &x) &&
             operand(o, "reduce", "b", b, n * es, es, &y);
    if (ok) o->dst = d, o->a = x, o->b = y, o->n = n, o->dt = dt, o->rop = op;
    return submit(s, o, ok, "reduce");
}

int sim_launch_reduce_many(void *dst, const void *const *srcs, int nsrc, size_t n, ringlet_datatype_t dt,
                           ringlet_op_t op, rl_dev_stream_t s) {
    size_t es = ringlet_datatype_size(dt);
    if (!es || (unsigned)op >= RINGLET_NUM_OPS || nsrc < 1 || nsrc > SIM_MAX_SOURCES)
        return refuse("reduce_many: dtype %d, op %d, %d sources", (int)dt, (int)op, nsrc);
    if (!n) return RL_RT_SUCCESS;
    const void *d0[1] = {dst};
    int rc = refuse_misaligned("reduce_many", es, d0, 1);
    if (!rc) rc = refuse_misaligned("reduce_many", es, (const void *const *)srcs, nsrc);
    if (!rc && nsrc == 1) return dst == srcs[0] ? RL_RT_SUCCESS : sim_memcpy_async(dst, srcs[0], n * es, s);
    if (!rc) rc = launch_checks(s, K_MANY + (int)dt * RINGLET_NUM_OPS + (int)op, "reduce_many");
    if (rc) return rc;
    sim_op *o = sim_new_op(OP_REDUCE_MANY);
    if (!o) return sim_fail(RL_RT_ERR_MEMORY_ALLOCATION, "reduce_many: out of memory");
    void *d;
    int ok = operand(o, "reduce_many", "dst", dst, n * es, es, &d);
    for (int k = 0; k < nsrc && ok; k++) {
        void *e;
        ok = operand(o, "reduce_many", "source", srcs[k], n * es, es, &e);
        o->srcs[k] = e;
    }
    if (ok) o->dst = d, o->nsrc = nsrc, o->n = n, o->dt = dt, o->rop = op;
    return submit(s, o, ok, "reduce_many");
}

int sim_launch_scale(void *dst, const void *src, size_t n, ringlet_datatype_t dt, const void *scalar,
                     rl_dev_stream_t s) {
    size_t es = ringlet_datatype_size(dt);
    if (!es || !scalar) return refuse("scale: dtype %d, scalar %p", (int)dt, scalar);
    if (!n) return RL_RT_SUCCESS;
    const void *ptrs[2] = {dst, src};
    int rc = refuse_misaligned("scale", es, ptrs, 2);
    if (!rc) rc = launch_checks(s, K_SCALE + (int)dt, "scale");
    if (rc) return rc;
    sim_op *o = sim_new_op(OP_SCALE);
    if (!o) return sim_fail(RL_RT_ERR_MEMORY_ALLOCATION, "scale: out of memory");
    void *d, *x;
    int ok = operand(o, "scale", "dst", dst, n * es, es, &d) && operand(o, "scale", "src", src, n * es, es, &x);
    if (ok) {
        o->dst = d, o->a = x, o->n = n, o->dt = dt;
        memcpy(o->scalar, scalar, es);
    }
    return submit(s, o, ok, "scale");
}

int sim_launch_convert(void *dst, ringlet_datatype_t dt, const void *src, ringlet_datatype_t st, size_t n,
                       double scale, rl_dev_stream_t s) {
    if (!rl_convert_supported(dt) || !rl_convert_supported(st))
        return refuse("convert: dtypes %d and %d (floating types only)", (int)dt, (int)st);
    if (!n) return RL_RT_SUCCESS;
    size_t ed = ringlet_datatype_size(dt), es = ringlet_datatype_size(st);
    const void *d0[1] = {dst}, *s0[1] = {src};
    int rc = refuse_misaligned("convert", ed, d0, 1);
    if (!rc) rc = refuse_misaligned("convert", es, s0, 1);
    if (!rc) rc = launch_checks(s, K_CONVERT + 4 * float_index(st) + float_index(dt), "convert");
    if (rc) return rc;
    sim_op *o = sim_new_op(OP_CONVERT);
    if (!o) return sim_fail(RL_RT_ERR_MEMORY_ALLOCATION, "convert: out of memory");
    void *d, *x;
    int ok = operand(o, "convert", "dst", dst, n * ed, ed, &d) && operand(o, "convert", "src", src, n * es, es, &x);
    if (ok) o->dst = d, o->a = x, o->n = n, o->dt = dt, o->st = st, o->fscale = scale;
    return submit(s, o, ok, "convert");
}

int sim_launch_divide(void *buf, size_t n, ringlet_datatype_t dt, int divisor, rl_dev_stream_t s) {
    size_t es = ringlet_datatype_size(dt);
    if (!es) return refuse("divide: dtype %d", (int)dt);
    if (!n || divisor < 2) return RL_RT_SUCCESS; /* the launcher launches nothing */
    const void *ptrs[1] = {buf};
    int rc = refuse_misaligned("divide", es, ptrs, 1);
    if (!rc) rc = launch_checks(s, K_DIVIDE + (int)dt, "divide");
    if (rc) return rc;
    sim_op *o = sim_new_op(OP_DIVIDE);
    if (!o) return sim_fail(RL_RT_ERR_MEMORY_ALLOCATION, "divide: out of memory");
    void *d;
    int ok = operand(o, "divide", "buf", buf, n * es, es, &d);
    if (ok) o->dst = d, o->n = n, o->dt = dt, o->divisor = divisor;
    return submit(s, o, ok, "divide");
}

/* A flag operation: kernel (K_WAIT_FLAG, K_WRITE_FLAG) or stream memory operation (-1). */
static int flag_op(int kind, int kernel, const char *name, volatile uint64_t *flag, uint64_t value,
                   rl_dev_stream_t s) {
    if (!flag) return sim_fail(RL_RT_ERR_INVALID_VALUE, "%s: NULL flag", name);
    int rc = kernel >= 0 ? launch_checks(s, kernel, name) : sim_sticky_check();
    if (rc) return rc;
    /* A kernel runs on the current device (its stream's: launch_checks); a stream memory
     * operation in its stream's context, whatever device is current (cuStreamWaitValue64). */
    int dev = sim_current_device();
    if (kernel < 0 && (rc = sim_stream_device(s, &dev))) return rc;
    sim_op *o = sim_new_op(kind);
    if (!o) return sim_fail(RL_RT_ERR_MEMORY_ALLOCATION, "%s: out of memory", name);
    void *f;
    int ok = operand_on(o, dev, name, "flag", (const void *)flag, 8, 8, &f);
    if (ok) o->a = o->dst = f, o->gen = value;
    return submit(s, o, ok, name);
}

int sim_launch_wait_flag(volatile uint64_t *flag, uint64_t value, rl_dev_stream_t s) {
    return flag_op(OP_WAIT_FLAG, K_WAIT_FLAG, "wait_flag", flag, value, s);
}

int sim_launch_write_flag(volatile uint64_t *flag, uint64_t value, rl_dev_stream_t s) {
    return flag_op(OP_WRITE_FLAG, K_WRITE_FLAG, "write_flag", flag, value, s);
}

/* Offered unless RINGLET_SIM_MEMOPS=0 (a testing aid: a device without them). */
int sim_memops_supported(int dev, int *yes, char *why, size_t whylen) {
    (void)dev; /* every simulated device alike */
    *yes = (int)rl_env_int("RINGLET_SIM_MEMOPS", 1, 0, 1);
    if (!*yes) snprintf(why, whylen, "RINGLET_SIM_MEMOPS=0");
    return RL_RT_SUCCESS;
}

static int memops_check(const char *name) {
    int yes = 0;
    char why[64];
    sim_memops_supported(0, &yes, why, sizeof why);
    return yes ? RL_RT_SUCCESS : sim_fail(RL_RT_ERR_NOT_SUPPORTED, "%s: not supported on this device (%s)", name, why);
}

/* The driver's calls: a failure leaves the runtime's last error as it was. */
int sim_stream_wait_value64(rl_dev_stream_t s, volatile uint64_t *addr, uint64_t value) {
    int saved = sim_thread_error(), rc = memops_check("stream_wait_value64");
    if (!rc) rc = flag_op(OP_WAIT_VALUE, -1, "stream_wait_value64", addr, value, s);
    return sim_driver_failed(rc, saved);
}

int sim_stream_write_value64(rl_dev_stream_t s, volatile uint64_t *addr, uint64_t value) {
    int saved = sim_thread_error(), rc = memops_check("stream_write_value64");
    if (!rc) rc = flag_op(OP_WRITE_VALUE, -1, "stream_write_value64", addr, value, s);
    return sim_driver_failed(rc, saved);
}
