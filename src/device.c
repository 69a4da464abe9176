/* CUDA buffers and streams (see device.h). Device buffers travel staged through
 * pinned host buffers owned by the communicator; reductions then run on the host
 * kernels. A pipelined path (GPU reductions, copies overlapping the network) and the
 * CUDA IPC transport are the next steps and need a GPU to be measured. */
#include "device.h"

#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "util.h"

#ifndef RINGLET_CUDA

int rl_dev_present(void) { return 0; }
int rl_dev_of_ptr(const void *p) {
    (void)p;
    return -1;
}
ringlet_result_t rl_dev_enqueue(struct ringlet_comm *c, struct ringlet_request *r, char *err) {
    (void)c, (void)r;
    snprintf(err, RL_MSG_MAX, "stream is not NULL, and this build has no CUDA support");
    return RINGLET_ERR_INVALID_ARGUMENT;
}
ringlet_result_t rl_dev_run(struct ringlet_comm *c, struct ringlet_request *r, char *err) {
    (void)c, (void)r;
    snprintf(err, RL_MSG_MAX, "device buffers need a CUDA build");
    return RINGLET_ERR_INVALID_USAGE;
}
void rl_dev_comm_fini(struct ringlet_comm *c) { (void)c; }
void rl_dev_release(struct ringlet_comm *c, struct ringlet_request *r) { (void)c, (void)r; }

#else

#include <cuda_runtime_api.h>

#include "reduce_cuda.h"

/* Per communicator: the flag streams wait on, and the pinned staging buffer. */
struct rl_dev_state {
    volatile uint64_t *flag;     /* host view */
    const uint64_t *flag_dev;    /* device view of the same memory */
    char *stage;                 /* pinned */
    size_t stage_size;
    /* Outgrown staging buffers: freed only at teardown, because cudaFreeHost may
     * synchronise the device while a user's stream is held by the wait kernel. */
    char *old_stages[64];
    int nold;
    /* Copies run here, never on the legacy default stream, which would wait for the
     * user's blocking streams and so for the wait kernel this library enqueued. */
    cudaStream_t copy_stream;
    int copy_device;
};

static int g_present = -1;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

static void probe(void) {
    int n = 0;
    /* No driver (CI) answers with an error at once: host only. */
    g_present = cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
    if (!g_present) cudaGetLastError();
}

int rl_dev_present(void) {
    pthread_once(&g_once, probe);
    return g_present;
}

int rl_dev_of_ptr(const void *p) {
    if (!p || !rl_dev_present()) return -1;
    struct cudaPointerAttributes a;
    if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
        cudaGetLastError();
        return -1;
    }
    return a.type == cudaMemoryTypeDevice ? a.device : -1;
}

static struct rl_dev_state *state(struct ringlet_comm *c, char *err) {
    if (c->dev) return c->dev;
    struct rl_dev_state *s = calloc(1, sizeof *s);
    if (!s) return snprintf(err, RL_MSG_MAX, "out of memory"), NULL;
    void *h = NULL, *d = NULL;
    cudaError_t e = cudaHostAlloc(&h, 64, cudaHostAllocMapped | cudaHostAllocPortable);
    if (e == cudaSuccess) e = cudaHostGetDevicePointer(&d, h, 0);
    if (e != cudaSuccess) {
        snprintf(err, RL_MSG_MAX, "cannot map a host flag for stream ordering: %s", cudaGetErrorString(e));
        if (h) cudaFreeHost(h);
        free(s);
        return NULL;
    }
    memset(h, 0, 64);
    s->flag = h;
    s->flag_dev = d;
    c->dev = s;
    return s;
}

void rl_dev_release(struct ringlet_comm *c, struct ringlet_request *r) {
    if (r->event) {
        cudaEventDestroy((cudaEvent_t)r->event);
        r->event = NULL;
    }
    if (!r->stream || !c->dev) return;
    /* Operations finish in issue order, so the flag only grows. */
    __atomic_store_n(c->dev->flag, r->seq, __ATOMIC_SEQ_CST);
}

ringlet_result_t rl_dev_enqueue(struct ringlet_comm *c, struct ringlet_request *r, char *err) {
    if (!rl_dev_present()) {
        snprintf(err, RL_MSG_MAX, "stream is not NULL, but no CUDA device is usable here");
        return RINGLET_ERR_INVALID_ARGUMENT;
    }
    struct rl_dev_state *s = state(c, err);
    if (!s) return RINGLET_ERR_CUDA;
    cudaEvent_t ev;
    cudaError_t e = cudaEventCreateWithFlags(&ev, cudaEventDisableTiming);
    if (e == cudaSuccess) e = cudaEventRecord(ev, (cudaStream_t)r->stream);
    if (e != cudaSuccess) {
        snprintf(err, RL_MSG_MAX, "cannot record an event on the stream: %s", cudaGetErrorString(e));
        return RINGLET_ERR_CUDA;
    }
    r->event = ev;
    /* Called under the queue lock, with r->seq already assigned. */
    int rc = rl_stream_wait_flag(s->flag_dev, r->seq, r->stream);
    if (rc) {
        cudaEventDestroy(ev);
        r->event = NULL;
        snprintf(err, RL_MSG_MAX, "cannot make the stream wait: %s", cudaGetErrorString((cudaError_t)rc));
        return RINGLET_ERR_CUDA;
    }
    return RINGLET_SUCCESS;
}

/* Bytes each side of a request touches. */
static void sizes(struct ringlet_comm *c, const struct ringlet_request *r, size_t *sb, size_t *rb) {
    size_t es = ringlet_datatype_size(r->dtype), n = r->count * es, all = n * (size_t)c->nranks;
    switch (r->kind) {
    case RL_OP_ALLGATHER: *sb = n, *rb = all; break;
    case RL_OP_REDUCE_SCATTER: *sb = all, *rb = n; break;
    case RL_OP_SEND: *sb = n, *rb = 0; break;
    case RL_OP_RECV: *sb = 0, *rb = n; break;
    case RL_OP_BARRIER: *sb = *rb = 0; break;
    default: *sb = *rb = n; break;
    }
}

static ringlet_result_t cuda_err(cudaError_t e, const char *what, char *err) {
    snprintf(err, RL_MSG_MAX, "%s: %s", what, cudaGetErrorString(e));
    return RINGLET_ERR_CUDA;
}

/* Waits for the stream's earlier work, within the deadline. */
static ringlet_result_t wait_event(struct ringlet_comm *c, struct ringlet_request *r, char *err) {
    if (!r->event) return RINGLET_SUCCESS;
    double t0 = rl_now();
    cudaError_t e;
    while ((e = cudaEventQuery((cudaEvent_t)r->event)) == cudaErrorNotReady) {
        if (atomic_load(&c->stop)) return snprintf(err, RL_MSG_MAX, "stopped"), RINGLET_ERR_REMOTE;
        if (rl_now() - t0 > c->timeout_s)
            return snprintf(err, RL_MSG_MAX, "the stream's work before the call did not finish within %.0f s",
                            c->timeout_s),
                   RINGLET_ERR_TIMEOUT;
        /* Yield for the first millisecond (small calls), then sleep (long kernels). */
        if (rl_now() - t0 < 1e-3) sched_yield();
        else rl_sleep_ms(1);
    }
    cudaEventDestroy((cudaEvent_t)r->event);
    r->event = NULL;
    return e == cudaSuccess ? RINGLET_SUCCESS : cuda_err(e, "stream", err);
}

ringlet_result_t rl_dev_run(struct ringlet_comm *c, struct ringlet_request *r, char *err) {
    ringlet_result_t rc = RINGLET_SUCCESS;
    struct rl_dev_state *s = state(c, err);
    if (!s) rc = RINGLET_ERR_CUDA;
    if (!rc && r->device >= 0) {
        cudaError_t e = cudaSetDevice(r->device);
        if (e != cudaSuccess) rc = cuda_err(e, "cudaSetDevice", err);
    }
    if (!rc) rc = wait_event(c, r, err);
    size_t sb = 0, rb = 0;
    sizes(c, r, &sb, &rb);
    if (!rc && !s->copy_stream) {
        cudaError_t e = cudaStreamCreateWithFlags(&s->copy_stream, cudaStreamNonBlocking);
        if (e != cudaSuccess) rc = cuda_err(e, "copy stream", err), s->copy_stream = NULL;
        s->copy_device = r->device;
    }
    if (!rc && r->device >= 0 && r->device != s->copy_device)
        rc = RINGLET_ERR_INVALID_USAGE,
        snprintf(err, RL_MSG_MAX, "buffers on CUDA device %d, but this communicator uses device %d", r->device,
                 s->copy_device);
    if (!rc && sb + rb > s->stage_size) {
        if (s->nold == (int)(sizeof s->old_stages / sizeof s->old_stages[0]))
            rc = RINGLET_ERR_SYSTEM, snprintf(err, RL_MSG_MAX, "pinned staging grew too often");
        char *bigger = NULL;
        /* Grow by at least 2x so that a sweep of sizes reallocates only a few times. */
        size_t want = sb + rb > 2 * s->stage_size ? sb + rb : 2 * s->stage_size;
        cudaError_t e = rc ? cudaSuccess : cudaHostAlloc((void **)&bigger, want, cudaHostAllocPortable);
        if (!rc && e != cudaSuccess) rc = cuda_err(e, "pinned staging buffer", err);
        if (!rc) {
            if (s->stage) s->old_stages[s->nold++] = s->stage;
            s->stage = bigger;
            s->stage_size = want;
        }
    }
    /* Host shadows of the buffers, keeping the in-place relations. */
    struct ringlet_request h;
    rl_request_shadow(&h, r);
    size_t es = ringlet_datatype_size(r->dtype), blk = r->count * es;
    char *hs = s ? s->stage : NULL, *hr = hs ? hs + sb : NULL;
    if (!rc) {
        h.device = -1;
        h.recvbuf = rb ? hr : NULL;
        if (r->sendbuf == r->recvbuf) hs = hr;
        else if (r->kind == RL_OP_ALLGATHER && (const char *)r->sendbuf == (char *)r->recvbuf + (size_t)c->rank * blk)
            hs = hr + (size_t)c->rank * blk;
        else if (r->kind == RL_OP_REDUCE_SCATTER && (char *)r->recvbuf == (const char *)r->sendbuf + (size_t)c->rank * blk)
            hr = hs + (size_t)c->rank * blk, h.recvbuf = hr;
        h.sendbuf = sb && r->sendbuf ? hs : NULL;
        cudaError_t e = cudaSuccess;
        if (h.sendbuf) e = cudaMemcpyAsync((void *)h.sendbuf, r->sendbuf, sb, cudaMemcpyDeviceToHost, s->copy_stream);
        if (e == cudaSuccess) e = cudaStreamSynchronize(s->copy_stream);
        if (e != cudaSuccess) rc = cuda_err(e, "copy of sendbuf to the host", err);
    }
    if (!rc) {
        if (r->kind == RL_OP_SEND || r->kind == RL_OP_RECV) {
            rl_conn *conn;
            char cerr[RL_ERR_MAX] = "";
            rc = r->kind == RL_OP_SEND ? rl_comm_send_conn(c, r->peer, &conn, cerr)
                                       : rl_comm_recv_conn(c, r->peer, &conn, cerr);
            if (!rc) rc = r->kind == RL_OP_SEND ? conn->tp->isend(conn->h, h.sendbuf, sb, NULL, &r->treq)
                                                : conn->tp->irecv(conn->h, h.recvbuf, rb, NULL, &r->treq);
            double t0 = rl_now();
            while (!rc && !rl_treq_done(&r->treq)) {
                if (rl_now() - t0 > c->timeout_s) rl_comm_fail(c, RINGLET_ERR_TIMEOUT, "%s with rank %d timed out",
                                                               rl_op_name(r->kind), r->peer);
                rl_comm_wait_event(c, rl_comm_gen(c), 100);
            }
            if (!rc && atomic_load(&r->treq.status)) rc = atomic_load(&r->treq.status), snprintf(cerr, sizeof cerr, "%s", r->treq.err);
            if (rc) snprintf(err, RL_MSG_MAX, "%s with rank %d: %s", rl_op_name(r->kind), r->peer, cerr);
        } else {
            rc = rl_run_collective(c, &h, err);
        }
    }
    int writes = rb && r->recvbuf && (r->kind != RL_OP_REDUCE || r->root == c->rank);
    if (!rc && writes) {
        cudaError_t e = cudaMemcpyAsync(r->recvbuf, h.recvbuf, rb, cudaMemcpyHostToDevice, s->copy_stream);
        if (e == cudaSuccess) e = cudaStreamSynchronize(s->copy_stream);
        if (e != cudaSuccess) rc = cuda_err(e, "copy of the result to the device", err);
    }
    /* Never leave a stream waiting, even on failure (the error is the communicator's
     * async error then, as with NCCL). */
    rl_dev_release(c, r);
    return rc;
}

void rl_dev_comm_fini(struct ringlet_comm *c) {
    struct rl_dev_state *s = c->dev;
    if (!s) return;
    for (int i = 0; i < s->nold; i++) cudaFreeHost(s->old_stages[i]);
    if (s->copy_stream) cudaStreamDestroy(s->copy_stream);
    if (s->stage) cudaFreeHost(s->stage);
    /* Every queued operation released its stream already; this lets go of any stream
     * still spinning on the flag before its memory goes. */
    __atomic_store_n(s->flag, UINT64_MAX, __ATOMIC_SEQ_CST);
    cudaDeviceSynchronize();
    cudaFreeHost((void *)s->flag);
    free(s);
    c->dev = NULL;
}

#endif
