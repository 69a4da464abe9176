/* The transport interface: moves bytes between two ranks, nothing else.
 *
 * A transport knows no collectives, data types or reductions. Its life:
 *   init     -> a context and a blob (how peers reach this rank) that the bootstrap
 *               hands to every rank;
 *   connect  -> a send connection to a peer, from the peer's blob;
 *   accept   -> the receive connection from a peer (the peer's connect, any order:
 *               connect never waits for the peer to call accept);
 *   isend / irecv post one message into a caller-owned request; test reports it done.
 *   Messages on one connection arrive in the order they were posted, and a receive
 *   must be posted with the exact length the sender used (a mismatch fails the receive,
 *   and the sender at its next operation on the connection or through the monitor; never
 *   silent truncation).
 *   reg_mr / dereg_mr register memory for transports that need it (verbs); others
 *   accept and ignore it.
 *   close / fini release everything; a request still in flight fails first.
 *   progress (optional) moves data for a transport that has no threads of its own
 *   (shared memory): whoever waits on such a transport's requests calls it. Such a
 *   transport wakes a peer process that may be waiting by ringing its doorbell
 *   (rl_transport_init's peer_bell) when it hands the peer data or room.
 *   A transport with threads may have progress too, with park (TCP): progress then
 *   moves what a polling waiter can take sooner than a thread would (messages it moves
 *   without a thread switch), and park hands that back to the threads.
 *
 * Deadlines and failures: a transport stops waiting as soon as *stop (owned by the
 * communicator) becomes non-zero, and fails the request; the communicator sets it when
 * a peer fails, on timeout and on abort. Completions call notify(notify_arg) so that a
 * waiter can sleep instead of spinning.
 */
#ifndef RINGLET_TRANSPORT_H
#define RINGLET_TRANSPORT_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "ringlet.h"
#include "names.h"

#define RL_BLOB_MAX 256   /* bytes a transport may publish per rank */
#define RL_ERR_MAX 256    /* error message length */
#define RL_TREQ_PRIV 1024 /* transport-private bytes per request */

/* One posted message. Owned by the caller (no allocation per message); must stay put
 * until done. */
typedef struct rl_treq {
    atomic_int pending;  /* parts still running; 0 = done */
    atomic_int status;   /* ringlet_result_t of the first failure, else RINGLET_SUCCESS */
    char err[RL_ERR_MAX]; /* written before status is set */
    size_t len;
    /* Set by the caller before it posts, the same on both ends (rl_op_chan, names.h):
     * a receive whose sender gave another fails, naming both (calls in another order on
     * the two ranks), rather than take another call's message of the same length. */
    unsigned char chan;
    const void *mapped;  /* irecv_map: where the message lies, once done */
    _Alignas(16) unsigned char priv[RL_TREQ_PRIV];
} rl_treq;

/* A wake-up counter: ring bumps gen and wakes sleepers (a futex, shared across
 * processes when the bell lives in shared memory); wait sleeps while gen is unchanged.
 * gen and sleepers sit on separate cache lines: the owner bumps gen often, peers read
 * sleepers often. */
typedef struct rl_bell {
    atomic_uint gen;
    char pad_[60];
    atomic_uint sleepers;
} rl_bell;
void rl_bell_ring(rl_bell *b);
/* For a peer that has just published data the sleeper's poll would find: wakes it only
 * when it sleeps (a read of a clean cache line otherwise). Pairs with rl_bell_wait's
 * poll after it counts itself as a sleeper. */
void rl_bell_ring_sleeper(rl_bell *b);
/* Sleeps until gen differs from seen, or ms pass. poll (may be NULL) runs once after
 * this thread counts as a sleeper: non-zero (it found work) returns at once. */
void rl_bell_wait(rl_bell *b, unsigned seen, int ms, int (*poll)(void *), void *arg);

typedef struct rl_transport_init {
    int rank, nranks;
    const atomic_int *stop;  /* non-zero: give up every wait */
    void (*notify)(void *arg);
    void *notify_arg;
    double timeout_s;        /* for connect/accept */
    const uint8_t *secret;   /* 32 bytes: authenticates connections */
    const void *local_addr;  /* struct sockaddr_storage *: the interface bootstrap chose */
    /* The doorbell of a peer of this host (the word its waiters sleep on), or NULL if it
     * has none: ring it (rl_bell_ring_sleeper) after publishing what it waits for. */
    rl_bell *(*peer_bell)(void *arg, int peer);
    void *bell_arg;
    /* non-zero: the communicator failed or was aborted, so a close waits for no peer
     * (NULL: never) */
    const atomic_int *failed;
    /* non-zero: this rank aborted the communicator, which waits for nothing, its own
     * device copies included (NULL: never) */
    const atomic_int *aborted;
} rl_transport_init;

typedef struct rl_transport_ops {
    const char *name;
    /* 1: buffers may be device memory (the transport moves them with the device layer),
     * and irecv_map lends device memory. 0: host memory only. */
    int device_memory;
    ringlet_result_t (*init)(const rl_transport_init *in, void **ctx, void *blob, size_t *bloblen, char *err);
    ringlet_result_t (*connect)(void *ctx, int peer, const void *peer_blob, size_t bloblen, void **conn, char *err);
    ringlet_result_t (*accept)(void *ctx, int peer, void **conn, char *err);
    /* Optional, for a transport whose accept waits for the peer's connect (NULL: it never
     * waits): takes what has reached the listener without waiting (each hello checked as
     * accept checks it) and returns 1 when accept(peer) would not wait for the peer now
     * (its connection is all there, or accepting fails for this rank's own reason, which
     * accept then reports), else 0. Called by the thread that makes connections. */
    int (*accept_ready)(void *ctx, int peer);
    ringlet_result_t (*isend)(void *conn, const void *buf, size_t len, void *mr, rl_treq *req);
    ringlet_result_t (*irecv)(void *conn, void *buf, size_t len, void *mr, rl_treq *req);
    ringlet_result_t (*reg_mr)(void *ctx, void *buf, size_t len, void **mr, char *err);
    void (*dereg_mr)(void *ctx, void *mr);
    void (*close)(void *conn);
    void (*fini)(void *ctx);
    /* Optional (NULL for transports whose threads do everything; see park). progress returns
     * RL_PROGRESS_MOVED when it moved anything, | RL_PROGRESS_BUSY while it has device
     * work under way whose end only its own polling sees (call again soon rather than
     * sleep); it is safe from any thread. */
    int (*progress)(void *ctx);
    /* Optional, with progress, for a transport whose threads can finish every request
     * (and then call notify): progress returns RL_PROGRESS_POLL while it holds work
     * that only polling moves (a waiter spins only then), | RL_PROGRESS_THREADED while its
     * threads have work too (they may need the core the waiter spins on), and park, called
     * by a waiter before it sleeps, hands all such work to the threads. Safe from any
     * thread. */
    void (*park)(void *ctx);
    /* Optional: receive without a copy. Done, req->mapped points at the message inside
     * the transport's own memory (a shared-memory slot), valid until release(conn, req);
     * an algorithm reduces straight from it. Releases come in posting order. Returns
     * RINGLET_ERR_INVALID_USAGE (nothing posted) when len does not fit one slot: the
     * caller then posts a normal irecv. */
    ringlet_result_t (*irecv_map)(void *conn, size_t len, rl_treq *req);
    void (*release)(void *conn, rl_treq *req);
    /* Optional: whether this rank can reach peer over this transport at all (tried once,
     * e.g. mapping the peer's memory); 0 with the reason in why (RL_ERR_MAX) makes the
     * communicator use another transport for the pair; -1 (once): the pair can use neither,
     * since the peer already uses this transport toward this rank (the call fails, why); -1
     * also where what the peer published cannot be read (undecided: a later call tries
     * again), -2 where it was not awaited first (peer_ready: a defect of ringlet's). */
    int (*reachable)(void *ctx, int peer, const void *peer_blob, size_t bloblen, char *why);
    /* Optional, with reachable, for what a rank makes only at its first use of device
     * buffers (cuda_ipc's probe): publish makes this
     * rank's (in a quiet section), then peer_ready waits, with no quiet section held and
     * within the deadline, until the peer's is there, before reachable is first called for
     * that peer; a rank publishes before it waits for anyone's. RINGLET_SUCCESS or an error
     * with why (RL_ERR_MAX). */
    ringlet_result_t (*publish)(void *ctx, char *why);
    ringlet_result_t (*peer_ready)(void *ctx, int peer, const void *peer_blob, size_t bloblen, double deadline,
                                   char *why);
    /* Optional, for a transport that maps a peer's memory: makes a connection ready to
     * move data with no call that can synchronise the device afterwards (device.h's
     * holds): a receiving end waits (until deadline, or stop) for its sender to connect,
     * then maps the sender's memory in a quiet section. Called by the communicator before
     * the operation that first uses the connection is queued; isend / irecv on a
     * connection that is not ready fail. reachable must be called in a quiet section, too,
     * the first time for a peer. */
    ringlet_result_t (*ready)(void *conn, double deadline, char *err);
    /* Optional, for a transport whose copies run on this rank's device: whether the
     * requests on conn still running wait on this rank's device rather than on the peer
     * (copies of theirs queued there and not finished: work ahead of them on the device
     * does not end). 1 with what they wait for in why (n bytes), else 0. Safe from any
     * thread; for the message of a request that timed out. */
    int (*waits_on_device)(void *conn, char *why, size_t n);
} rl_transport_ops;

/* The end of a message about requests that wait on this rank's own device (waits_on_device,
 * and the pipe's staged device copies). */
#define RL_DEVICE_STUCK_HINT "(work ahead on the device does not end: a kernel waiting for something?)"

enum { RL_PROGRESS_MOVED = 1, RL_PROGRESS_BUSY = 2, RL_PROGRESS_POLL = 4, RL_PROGRESS_THREADED = 8 };

/* Done (1) or running (0). */
static inline int rl_treq_done(rl_treq *r) { return atomic_load_explicit(&r->pending, memory_order_acquire) == 0; }

/* Helpers for transports: fail a request part with a message (first failure wins). */
void rl_treq_fail(rl_treq *r, ringlet_result_t code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* A receive's failure where the sender's channel differs (rl_treq.chan): the sender's
 * channel name, the receive's (rl_chan_name). */
#define RL_CHAN_MISMATCH_FMT                                                                                          \
    "the peer sent a message of its %s where this rank's receive is for its %s (the two ranks called in another "   \
    "order)"
void rl_treq_start(rl_treq *r, size_t len, int parts);
/* Marks one part done; returns 1 when it was the last. */
int rl_treq_part_done(rl_treq *r);
/* An accept that gave up waiting for peer's connection (io: sock.h's rl_io_t, not OK):
 * the message, "<tp>: waiting for rank <peer> to connect: ...", in err (RL_ERR_MAX), and
 * the code: the deadline's, a stop as the peer's side (the communicator failed), and a
 * failure of the accept itself (this rank out of descriptors, ...) as this rank's own,
 * with the reason of sys_errno (accept's errno). */
ringlet_result_t rl_transport_accept_failed(const char *tp, int peer, int io, int sys_errno, char *err);
/* reg_mr / dereg_mr of a transport that needs no registration: *mr = NULL. */
ringlet_result_t rl_transport_reg_none(void *ctx, void *buf, size_t len, void **mr, char *err);
void rl_transport_dereg_none(void *ctx, void *mr);

/* The registry (registry.c): every transport this build has, by id. A rank publishes
 * one blob per transport that initialised; a pair uses a transport both published. */
enum { RL_TP_TCP = 0, RL_TP_IB = 1, RL_TP_SHM = 2, RL_TP_CUDA_IPC = 3, RL_TP_MAX = 4 };
extern const rl_transport_ops *const rl_transports[RL_TP_MAX];
/* Id of a transport by name, or -1. */
int rl_transport_by_name(const char *name);

extern const rl_transport_ops rl_transport_tcp;
extern const rl_transport_ops rl_transport_ib;
extern const rl_transport_ops rl_transport_shm;
extern const rl_transport_ops rl_transport_cuda_ipc;

#endif
