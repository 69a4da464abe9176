/* The communicator's internal state, shared by the core's files. */
#ifndef RINGLET_COMM_H
#define RINGLET_COMM_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>

#include "fault.h"
#include "ringlet.h"
#include "transport.h"

#define RL_MSG_MAX 512

/* What each rank publishes at bootstrap. Same binary on every rank, so sent as is. */
typedef struct rl_rank_info {
    uint8_t hostid[16]; /* same value = same host */
    int32_t rank;
    int32_t pid;
    uint32_t bloblen[RL_TP_MAX]; /* 0: that transport is not available on the rank */
    uint8_t blob[RL_TP_MAX][RL_BLOB_MAX];
} rl_rank_info;

/* A connection to one peer in one direction, over the transport chosen for the pair. */
typedef struct rl_conn {
    const rl_transport_ops *tp;
    void *h;
} rl_conn;

typedef enum {
    RL_OP_ALLREDUCE,
    RL_OP_BROADCAST,
    RL_OP_REDUCE,
    RL_OP_ALLGATHER,
    RL_OP_REDUCE_SCATTER,
    RL_OP_BARRIER,
    RL_OP_SEND,
    RL_OP_RECV,
} rl_op_kind;

const char *rl_op_name(rl_op_kind k);

struct ringlet_request {
    struct ringlet_comm *comm;
    struct ringlet_request *next; /* progress queue */
    struct ringlet_request *live_prev, *live_next; /* requests the user still holds */
    rl_op_kind kind;
    const void *sendbuf;
    void *recvbuf;
    size_t count;
    ringlet_datatype_t dtype;
    ringlet_op_t op;
    int root, peer;
    uint64_t seq;
    atomic_int done;   /* set last, after result and err */
    ringlet_result_t result;
    char err[RL_MSG_MAX];
    /* CUDA: device of the buffers (-1: host), the user's stream, the event marking the
     * stream's work before the call; detached: a stream call nobody waits on (the
     * progress thread frees it) */
    int device;
    void *stream;
    void *event;
    int detached;
    /* point to point: the progress thread posts treq, then sets posted */
    atomic_int posted;
    double posted_at;
    rl_treq treq;
};

struct rl_monitor; /* bootstrap connections kept for failure notices (bootstrap.c) */

struct ringlet_comm {
    int rank, nranks, local_rank, local_size;
    int *ring;     /* ring[i]: the rank at ring position i (ranks of a host side by side) */
    int ring_pos;  /* this rank's position */
    int next, prev;
    rl_rank_info *infos;
    uint8_t secret[32];
    double timeout_s;
    size_t chunk_bytes;
    int nslots;
    int algo;                 /* RINGLET_ALGO: RL_ALGO_AUTO, RL_ALGO_RING or RL_ALGO_ONESHOT */
    size_t oneshot_bytes;     /* auto: one-shot when a rank receives at most this much */
    int oneshot_max_ranks;    /* ... and there are at most this many ranks */

    void *tctx[RL_TP_MAX];           /* transports that initialised here */
    int forced_tp;                   /* RINGLET_TRANSPORT, or -1 */
    rl_conn *send_conns, *recv_conns; /* per peer rank, made on first use */
    struct sockaddr_storage ifaddr;  /* the interface chosen */
    char ifname[64];

    /* failure: the first one wins; stop tells every wait to give up */
    atomic_int stop;
    atomic_int failed;
    atomic_int aborted;
    ringlet_result_t fail_code;
    char fail_msg[RL_MSG_MAX];
    pthread_mutex_t fail_mu;

    /* wake-ups for waiters: any completion rings the bell. It is own_bell, or the
     * shared-memory transport's bell so that peer processes can ring it too. */
    rl_bell own_bell;
    _Atomic(rl_bell *) ev;
    atomic_int polled;  /* a connection over a transport without threads (shm) exists */
    double spin_s;      /* how long a waiter polls such transports before it sleeps */
    unsigned spin_pause; /* polls in a pause loop before the waiter starts yielding */

    /* progress thread and its queue of operations (issue order) */
    pthread_t progress;
    int progress_started;
    pthread_mutex_t q_mu;
    pthread_cond_t q_cv;
    struct ringlet_request *q_head, *q_tail;
    int q_quit;
    int inline_ok; /* RINGLET_INLINE (default 1): blocking host calls may run on the caller */
    int running; /* an operation is being run (progress thread, or inline by the caller) */
    uint64_t seq;

    char *slots;      /* nslots * chunk_bytes: receive staging, reused by every call */
    char *temp;       /* grown on demand: partial results of reduce_scatter / reduce */
    size_t temp_size;

    struct rl_trace *trace; /* RINGLET_TRACE, or NULL */
    rl_fault fault;         /* RINGLET_FAULT_KILL (tests) */
    struct rl_monitor *mon;
    struct rl_dev_state *dev; /* CUDA resources (device.c), made on first use */

    pthread_mutex_t err_mu;
    char last_error[RL_MSG_MAX];

    /* Requests handed to the user and not yet completed by test/wait: destroy frees
     * them (a request may not be used after its communicator is destroyed). */
    pthread_mutex_t live_mu;
    struct ringlet_request *live;
};

/* Records a failure (peer died, timeout, abort): every wait on the communicator gives
 * up and every later call returns code. failed_rank < 0 when no peer is to blame. */
void rl_comm_fail(struct ringlet_comm *c, ringlet_result_t code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* The failure that broke the communicator: its code, and (msg not NULL) its message. */
ringlet_result_t rl_comm_failure(struct ringlet_comm *c, char *msg, size_t len);
/* A connection broke: give the monitor a moment to name the real cause (a peer's death
 * reaches every rank through rank 0 within milliseconds; the broken link may only be a
 * neighbour that aborted because of it), then fail with what is known. */
void rl_comm_fail_link(struct ringlet_comm *c, ringlet_result_t code, const char *what);
/* An operation failed with code (what: the local view): fails the communicator if it
 * has not failed yet (a broken link first gives the monitor a moment to name the real
 * cause), and writes "<op> #seq (count n) failed: <the communicator's cause>" to err
 * (RL_MSG_MAX). Returns the communicator's failure code. */
ringlet_result_t rl_comm_op_failed(struct ringlet_comm *c, const struct ringlet_request *r, ringlet_result_t code,
                                   const char *what, char *err);
/* Wakes waiters (transport completions, finished operations). */
void rl_comm_notify(void *comm);
/* The wake-up counter's value: read it before checking for work, then wait with it. */
unsigned rl_comm_gen(struct ringlet_comm *c);
/* Waits until something completes or ms pass (polls threadless transports first). */
void rl_comm_wait_event(struct ringlet_comm *c, unsigned gen, int ms);
/* Drives transports that have no threads of their own; non-zero if anything moved. */
int rl_comm_progress(struct ringlet_comm *c);

/* Records an error message for ringlet_comm_last_error (comm may be NULL) and
 * returns code. */
ringlet_result_t rl_error(struct ringlet_comm *c, ringlet_result_t code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Connections made on first use (progress thread only). */
ringlet_result_t rl_comm_send_conn(struct ringlet_comm *c, int peer, rl_conn **conn, char *err);
ringlet_result_t rl_comm_recv_conn(struct ringlet_comm *c, int peer, rl_conn **conn, char *err);
/* Scratch for partial results, grown (never per call once large enough). */
void *rl_comm_temp(struct ringlet_comm *c, size_t bytes);

/* A copy of a request's operation only (what the algorithms read), never its links or
 * completion state, which other threads update. */
static inline void rl_request_shadow(struct ringlet_request *dst, const struct ringlet_request *src) {
    memset(dst, 0, sizeof *dst);
    dst->comm = src->comm;
    dst->kind = src->kind;
    dst->sendbuf = src->sendbuf;
    dst->recvbuf = src->recvbuf;
    dst->count = src->count;
    dst->dtype = src->dtype;
    dst->op = src->op;
    dst->root = src->root;
    dst->peer = src->peer;
    dst->seq = src->seq;
    dst->device = src->device;
}

/* Track (add = 1) or forget (add = 0) a request the user holds. */
void rl_comm_track(struct ringlet_comm *c, struct ringlet_request *r, int add);
/* Queues an operation for the progress thread (issue order; assigns r->seq and, for a
 * stream call, makes the stream wait for it). */
ringlet_result_t rl_comm_enqueue(struct ringlet_comm *c, struct ringlet_request *r, char *err);

/* Runs a blocking host collective on the caller's thread when nothing is queued or
 * running (no hand-off to the progress thread: the small-message latency path). Returns
 * 0 (not run; queue it) when busy, else 1 with the result in *rc and r->err. */
int rl_comm_try_inline(struct ringlet_comm *c, struct ringlet_request *r, ringlet_result_t *rc);

enum { RL_ALGO_AUTO = 0, RL_ALGO_RING = 1, RL_ALGO_ONESHOT = 2 };
/* Small messages in one exchange (oneshot.c): whether this call takes that path (the
 * same answer on every rank), and running it. */
int rl_oneshot_fits(const struct ringlet_comm *c, const struct ringlet_request *r);
ringlet_result_t rl_run_oneshot(struct ringlet_comm *c, struct ringlet_request *r, char *err);

/* Runs one collective on the progress thread (ring.c); message in err. */
ringlet_result_t rl_run_collective(struct ringlet_comm *c, struct ringlet_request *r, char *err);

/* Bootstrap (bootstrap.c). */
typedef struct rl_boot_target {
    struct sockaddr_storage addr; /* where rank 0 listens */
    uint8_t secret[32];
    int listen_fd;                /* rank 0: the listener already open (unique id), or -1 */
} rl_boot_target;
ringlet_result_t rl_boot_make_id(ringlet_unique_id_t *id, char *err);
ringlet_result_t rl_boot_parse_id(const ringlet_unique_id_t *id, int rank, rl_boot_target *t, char *err);
ringlet_result_t rl_boot_target_from_env(rl_boot_target *t, int *rank, int *nranks, int *local_rank, char *err);
/* Every rank's info to every rank, authenticated; leaves the monitor running. */
ringlet_result_t rl_boot_exchange(struct ringlet_comm *c, rl_boot_target *t, char *err);
/* Clean (destroy: says goodbye, rank 0 waits for the others) or not (abort). */
void rl_monitor_stop(struct ringlet_comm *c, int clean);

#endif
