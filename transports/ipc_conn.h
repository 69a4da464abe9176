/* The CUDA IPC transport's types and small helpers, shared by its two files (this header
 * is not named cuda_*.h: tests/mp/layers.sh takes those for CUDA's own):
 *   cuda_ipc.c       moving data: posting, progress, the receiver's mapping of the
 *                    sender's slots (ready, attach), the ops table; its comment says how
 *                    the transport works
 *   cuda_ipc_conn.c  the connections' life: the control segment, init, connect, accept,
 *                    the probe (reachable), close, fini
 */
#ifndef RINGLET_IPC_CONN_H
#define RINGLET_IPC_CONN_H

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "device.h"
#include "posted.h"
#include "slot_fifo.h"
#include "transport.h"
#include "util.h"

#define IPC_MAGIC 0x33504952u /* "RIP3": the layout of 2026-12-06 (a channel in every slot's record) */
/* The control segment's header page and the unit of its per-peer blocks: 64 KiB, the largest
 * page Linux uses, since a peer maps its block at its offset (as shm.h's RL_SHM_PAGE). */
#define IPC_PAGE 65536u
/* Exported allocations (the probe, the slots) are whole multiples of this: cudaMalloc may
 * carve small allocations out of one larger block, and an IPC handle then shares the whole
 * block, other allocations of the process in it (CUDA's programming guide: share 2 MiB
 * multiples only). */
#define IPC_SHARE_UNIT ((size_t)2 << 20)
#define IPC_MAX_SLOTS 64
#define IPC_NAME_MAX 64
enum { IPC_MAPPED = 0, IPC_UNMAPPED = 1, IPC_UNMAP_LATER = 2 }; /* ctl_t.unmapped */

/* ipc_ctx.has_probe: none (the allocation or its export failed), made, or still to be made
 * (at the communicator's first use of device buffers, published in the segment's header
 * then, seg_hdr.probe_state). */
enum { IPC_PROBE_NONE = 0, IPC_PROBE_MADE = 1, IPC_PROBE_LATER = 2 };
enum { IPC_PROBE_PENDING = 0, IPC_PROBE_READY = 1, IPC_PROBE_FAILED = 2 }; /* seg_hdr.probe_state */

typedef struct {
    uint32_t magic;
    int32_t rank, nranks, pid;
    uint64_t pidns; /* pid's PID namespace (rl_pid_ns) */
    uint64_t ctl_stride;
    uint8_t tag[32]; /* HMAC(secret, name) */
    /* The probe, made at the first use of device buffers: READY once probe holds its handle. */
    atomic_int probe_state;
    rl_dev_handle probe;
} seg_hdr;
_Static_assert(sizeof(seg_hdr) <= IPC_PAGE, "segment header too large");

/* A slot's record, on a cache line of its own. */
typedef struct {
    _Alignas(64) rl_fifo_rec r;
} rec_t;

/* One sender's control block in the receiver's segment. */
typedef struct {
    rl_fifo_ctl fifo; /* sender: OPEN once it wrote the fields below */
    uint32_t nslots;
    uint64_t slot_bytes;
    int32_t device;
    int32_t sender_pid;   /* to tell a sender that died from a mapping that failed */
    uint64_t sender_pidns; /* sender_pid's PID namespace (rl_pid_ns) */
    rl_dev_handle handle; /* the sender's slots */
    /* receiver: IPC_UNMAPPED once its close unmapped the sender's slots (or it never
     * mapped them): the sender frees them only then, or when fifo.receiver is still NONE
     * once it closed (map_sender: the receiver sets OPEN before it maps), or once the
     * receiver's process is gone. IPC_UNMAP_LATER: its close kept the unmap for later
     * (behind device work noted stuck): still mapped, but a clean end need not wait for
     * it. Freeing memory another process has open through IPC is undefined in CUDA. */
    atomic_int unmapped;
    /* 1: one of the pair's two ranks found it cannot map the other's memory (reachable) and
     * sends and receives the pair's device buffers through host memory: if the other one
     * can map (CUDA IPC allowed one way only), its cuda_ipc ends fail at once with that
     * cause, not at RINGLET_TIMEOUT. Set in both of the pair's blocks by the one who cannot. */
    atomic_int declined;
    rec_t rec[IPC_MAX_SLOTS];
} ctl_t;

/* What a rank publishes: its segment's name (its probe is published in the segment's header). */
typedef struct {
    char name[IPC_NAME_MAX];
} blob_t;
_Static_assert(sizeof(blob_t) <= RL_BLOB_MAX, "blob too large");

/* One posted message, in the request's private bytes. */
typedef struct ipc_op {
    rl_posted p;       /* p.off: bytes whose piece was started */
    uint32_t npieces;  /* 0 until known (a receive posted before the sender connected) */
    uint32_t started;  /* pieces copied in or out (or lent) */
    uint32_t done;     /* pieces finished */
    uint64_t first;    /* position of its first piece */
} ipc_op;
_Static_assert(sizeof(ipc_op) <= RL_TREQ_PRIV, "request private area too small");

struct ipc_ctx;

/* A peer's process: its pid, which means that process only in its PID namespace ns. */
typedef struct {
    int32_t pid;
    uint64_t ns;
} ipc_proc;

typedef struct ipc_conn {
    struct ipc_ctx *ctx;
    struct ipc_conn *next;
    int peer, sending, device;
    ipc_proc peer_proc; /* sender: the receiver's process */
    ctl_t *ctl;
    void *ctl_map; /* sender: its block mapped from the receiver's segment */
    size_t ctl_map_len;
    char *slots;   /* sender: its own slots; receiver: the sender's, imported (NULL until then) */
    int unmap_kept; /* receiver: a mapping of them that failed to set up is still to be unmapped */
    double blame_until;           /* receiver, progress: a mapping of them failed; until when it may yet */
    char blame_why[RL_ERR_MAX];   /* be the sender's death (cuda_ipc.c, attach), and why it failed */
    uint32_t nslots;
    uint64_t slot_bytes;
    rl_dev_stream_t stream;
    rl_dev_event_t ev[IPC_MAX_SLOTS];
    rl_posted_q q;
    /* The FIFO over ctl. Sender: its head counts the pieces whose copy was enqueued, ppos
     * those published (copy done); pmsg / plen / pchan what each slot's piece will publish.
     * Receiver: its rpos counts the pieces taken (copy enqueued or lent); owner, whose
     * copy a slot's is. */
    rl_fifo fifo;
    uint64_t ppos;
    uint64_t pmsg[IPC_MAX_SLOTS], plen[IPC_MAX_SLOTS];
    unsigned char pchan[IPC_MAX_SLOTS];
    unsigned char state[IPC_MAX_SLOTS];
    ipc_op *owner[IPC_MAX_SLOTS];
    /* A failure that waits for the device copies queued for its requests (rl_ipc_fail):
     * its code and reason, and its deadline; drain is recorded after those copies. */
    int failing;
    ringlet_result_t fail_code;
    char fail_why[RL_ERR_MAX];
    double fail_until;
    rl_dev_event_t drain;
} ipc_conn;

typedef struct ipc_ctx {
    rl_transport_init in;
    uint8_t secret[32];
    const rl_device_ops *d;
    char name[IPC_NAME_MAX];
    int lock_fd; /* holds the segment's lock while it lives (shmseg.h) */
    seg_hdr *seg;
    size_t seg_len, ctl_stride;
    uint32_t nslots;
    uint64_t slot_bytes;
    void *probe; /* a page of device memory peers map once, to see whether they can */
    int has_probe; /* IPC_PROBE_*: exported (else no peer maps this rank's memory), or later */
    signed char *reach; /* per peer: 0 untried, 1 yes, -1 no */
    pthread_mutex_t mu;
    ipc_conn *conns;
    int closing;        /* the teardown began (rl_ipc_close, rl_ipc_fini) */
    double close_until; /* the teardown's one deadline, from its first close (0: none yet) */
} ipc_ctx;

/* Runs on the connection's device, restoring the thread's own afterwards where it has one
 * (progress may run on a user's thread; device.h, device_enter). */
static inline int dev_enter(ipc_conn *k) {
    int saved = -1;
    k->ctx->d->device_enter(k->device, &saved);
    return saved;
}

static inline void dev_leave(ipc_conn *k, int saved) { k->ctx->d->device_leave(saved); }

/* Wakes rank peer if it sleeps on its bell (what it waits for is published before). */
static inline void ring_rank(ipc_ctx *x, int peer) {
    rl_bell *b = x->in.peer_bell ? x->in.peer_bell(x->in.bell_arg, peer) : NULL;
    if (b) rl_bell_ring_sleeper(b);
}

static inline void ring_peer(ipc_conn *k) { ring_rank(k->ctx, k->peer); }

/* Stream and events of a connection, on the current device: those it lacks (a mapping
 * tried again after a failure keeps what the first try made; conn_free destroys them). */
static inline int conn_streams(ipc_conn *k, char *err) {
    const rl_device_ops *d = k->ctx->d;
    rl_dev_stream_t s = NULL;
    if (!k->stream) {
        if (d->stream_create(&s) != RL_DEV_OK) return snprintf(err, RL_ERR_MAX, "cuda_ipc stream: %s", rl_dev_error()), -1;
        k->stream = s;
    }
    for (uint32_t i = 0; i <= k->nslots; i++) { /* the slots' events, then drain */
        rl_dev_event_t *at = i < k->nslots ? &k->ev[i] : &k->drain, e = NULL;
        if (*at) continue;
        if (d->event_create(&e) != RL_DEV_OK) return snprintf(err, RL_ERR_MAX, "cuda_ipc events: %s", rl_dev_error()), -1;
        *at = e;
    }
    return 0;
}

/* A process that exited (or was killed): gone, or a zombie not reaped yet (util.h). */
static inline int process_gone(ipc_proc p) { return rl_process_gone_in((int)p.pid, p.ns); }

/* Why the peer will not use cuda_ipc with this rank (ctl_t.declined), in why (RL_ERR_MAX). */
static inline void declined_why(const ipc_conn *k, char *why) {
    snprintf(why, RL_ERR_MAX,
             "rank %d cannot map this rank's device memory, though this rank maps its: CUDA IPC works one way only "
             "between these two processes (it stages through host memory; RINGLET_CUDA_IPC_DISABLE=1 stages all)",
             k->peer);
}

/* ---- cuda_ipc.c ---- */

/* Fails every posted request of k once the device copies queued for them are done; now:
 * at once (a close). The context's lock held. */
void rl_ipc_fail(ipc_conn *k, ringlet_result_t code, const char *why);
void rl_ipc_fail_now(ipc_conn *k, ringlet_result_t code, const char *why);

/* ---- cuda_ipc_conn.c ---- */

ringlet_result_t rl_ipc_init(const rl_transport_init *in, void **out, void *blob, size_t *bloblen, char *err);
ringlet_result_t rl_ipc_connect(void *ctx, int peer, const void *blob, size_t bloblen, void **out, char *err);
ringlet_result_t rl_ipc_accept(void *ctx, int peer, void **out, char *err);
void rl_ipc_close(void *conn);
void rl_ipc_fini(void *ctx);
int rl_ipc_reachable(void *ctx, int peer, const void *blob, size_t bloblen, char *why);
ringlet_result_t rl_ipc_publish(void *ctx, char *why);
ringlet_result_t rl_ipc_peer_ready(void *ctx, int peer, const void *blob, size_t bloblen, double deadline, char *why);

#endif
