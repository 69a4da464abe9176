/* The communicator's and the request's internal state, shared by the core's files.
 * Functions live in headers of their own: failure.h (errors and the failed state),
 * wait.h (wake-ups), conn.h (connections), progress.h (the queue), collective.h (the
 * algorithms), devcomm.h (device buffers and streams), bootstrap.h. */
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
/* How long an abort lets what is under way finish (calls leaving, device work ending)
 * before it goes on without them. */
#define RL_ABORT_GRACE_S 1.0
#define RL_BELL_NAME_MAX 64

/* What each rank publishes at bootstrap. Same binary on every rank, so sent as is. */
/* The settings that decide which algorithm a collective takes, or how it cuts its buffer
 * (comm.c's tuning_names): a rank that chose otherwise would wait for messages no rank
 * sends, so every rank must have the same (compared at init). */
#define RL_TUNING_N 10

typedef struct rl_rank_info {
    uint8_t hostid[16]; /* same value = same host */
    int32_t rank;
    int32_t pid;
    uint32_t bloblen[RL_TP_MAX]; /* 0: that transport is not available on the rank */
    uint8_t blob[RL_TP_MAX][RL_BLOB_MAX];
    char bell_name[RL_BELL_NAME_MAX]; /* its doorbell (doorbell.h), "" when it has none */
    int32_t check;                    /* RINGLET_CHECK (must be the same on every rank) */
    int32_t transport;                /* RINGLET_TRANSPORT: 1 + its index, 0 unset (must be the same too) */
    int32_t init_failed;              /* its init failed before the exchange (its code): it goes at once */
    uint32_t board_bytes;             /* RINGLET_BOARD_BYTES, 0 without a doorbell (doorbell.h) */
    int32_t core;                     /* 1 + the one core it may run on at init (ringlet-run --bind), 0: several */
    int32_t ncpu;                     /* cores online on its host */
    uint64_t tuning[RL_TUNING_N];     /* RINGLET_ALGO and the thresholds (must be the same on every rank) */
} rl_rank_info;

/* A connection to one peer in one direction, over the transport chosen for the pair. */
typedef struct rl_conn {
    const rl_transport_ops *tp;
    void *h;
} rl_conn;


/* Whether a collective of this kind has a root. */
static inline int rl_op_rooted(int k) {
    return k == RL_OP_BROADCAST || k == RL_OP_REDUCE || k == RL_OP_GATHER || k == RL_OP_SCATTER;
}


/* Point-to-point messages are cut into pieces of this many bytes (the last shorter; a
 * message of up to this size, 0 included, is one piece), whatever the memory, so that
 * a host buffer on one end and a device buffer on the other agree. */
#define RL_P2P_PIECE ((size_t)1 << 20)

/* A reduction op made by ringlet_op_create_premul_sum (ids from RINGLET_NUM_OPS). */
#define RL_MAX_USER_OPS 64
typedef struct rl_userop {
    int live;
    ringlet_datatype_t dtype;
    int on_device;           /* the scalar: value (host, copied at creation) or dptr (device) */
    unsigned char value[8];
    const void *dptr;
} rl_userop;

/* One call of a group, as recorded. */
typedef struct rl_subop {
    rl_op_kind kind;
    const void *sendbuf;
    void *recvbuf;
    size_t count;
    ringlet_datatype_t dtype;
    ringlet_op_t op;
    int root, peer, device;
    void *stream;
    rl_userop premul; /* a pre-multiplied sum: the op as it was at the call */
} rl_subop;

#define RL_GROUP_MAX_STREAMS 16

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
    uint64_t coll_first; /* the number of its first collective on the communicator (rl_request_colls); 0: none */
    atomic_int done;   /* set last, after result and err */
    ringlet_result_t result;
    char err[RL_MSG_MAX];
    /* Device: the device of the buffers (-1: host memory); the user's stream (NULL: none),
     * with the event that marks the stream's work before the call; detached: a stream
     * call nobody waits on (the progress thread frees it). */
    int device;
    void *stream;
    void *event;
    int event_device; /* the device of event (the stream's): a query or destroy runs there */
    int detached;
    int hold_later;     /* rl_devcomm_hold holds its streams (a group) */
    /* Queued, its streams being held by its caller outside the queue lock (q_mu): the
     * progress thread takes nothing from the queue from it on until it is cleared. */
    int holding;
    /* Its preparation failed on a peer's failure (devcomm.h): queued all the same, the
     * progress thread fails it with this code and the message in err. */
    ringlet_result_t prep_rc;
    uint64_t *seq_out;  /* where enqueue also writes the number (a detached request may be gone) */
    /* A group: its calls, and the streams they use besides `stream` (each with the
     * event of its work before the group) */
    rl_subop *sub;
    int nsub;
    int nxstream;
    void *xstream[RL_GROUP_MAX_STREAMS], *xevent[RL_GROUP_MAX_STREAMS];
    int xevent_device[RL_GROUP_MAX_STREAMS];
    /* A pre-multiplied sum: the op as it was at the call (op is a user op id). */
    rl_userop premul;
    /* Point to point on host memory: the progress thread posts the pieces' transport
     * requests (treqs: treq1, or an array for more than one piece), then sets posted;
     * the waiter completes the request from them. */
    atomic_int posted;
    int posted_here; /* by the calling thread (api.c's post_here): its waits poll as inline calls do */
    double posted_at; /* when posted, then when a piece last completed: RINGLET_TIMEOUT counts from it */
    double traced_from; /* RINGLET_TRACE: when posted (its span ends when a waiter sees it done) */
    size_t ntreq, ndone; /* pieces posted, pieces seen done (in order) */
    int park_local;      /* a parked piece failed for this rank's own reason (conn.h): it fails alone */
    rl_treq *treqs;
    rl_treq treq1;
};

struct rl_monitor;  /* bootstrap connections kept for failure notices (monitor.c) */
struct rl_devcomm;  /* device streams, staging slots and scratch (devcomm.c) */

struct ringlet_comm {
    int rank, nranks, local_rank, local_size;
    int *ring;     /* ring[i]: the rank at ring position i (ranks of a host side by side) */
    int ring_pos;  /* this rank's position */
    int next, prev;
    rl_rank_info *infos;
    uint8_t secret[32];
    double timeout_s;
    unsigned fork_gen; /* rl_fork_generation() when made: a forked child cannot use it */
    size_t chunk_bytes; /* the largest chunk (and staging slot); a call may cut smaller ones (rl_chunk_for) */
    size_t chunk_floor; /* ... but none below this (rl_chunk_for; 0: RL_CHUNK_FLOOR) */
    int chunk_fixed;    /* RINGLET_CHUNK_SIZE was given: every chunk is chunk_bytes */
    int nslots;
    int algo;                 /* RINGLET_ALGO: RL_ALGO_AUTO, _RING, _ONESHOT, _HIER, _HALVING, _DOUBLING or _STAR */
    size_t oneshot_bytes;     /* auto: one-shot when a rank receives at most this much */
    int oneshot_max_ranks;    /* ... and there are at most this many ranks */
    /* One-shot calls that publish at most this many bytes go through the board instead of
     * messages (board.c; 0: never): the least of every rank's RINGLET_BOARD_BYTES, when
     * every rank has one and every pair of ranks talks over shared memory. board_seq
     * counts the board's calls, the same on every rank. */
    size_t board_bytes;
    /* Device buffers may take the board too: no two ranks could reach each other over
     * cuda_ipc (fewer than two published it, or RINGLET_TRANSPORT is forced). From what
     * every rank published, never from a pair's own reachability, which only its two
     * ranks know: a rank that took the board while the others exchanged messages hung. */
    int board_device;
    /* Host buffers take it unless device buffers may not while a mix of both kinds is
     * allowed (two or more ranks, not all, published cuda_ipc): a rank on host buffers
     * then took the board while its peers on device buffers exchanged messages, and both
     * waited until RINGLET_TIMEOUT. Where every rank has cuda_ipc, a mix is refused (the
     * README) and host calls keep it. */
    int board_host;
    uint64_t board_seq;
    uint64_t algos_noted; /* (algorithm, call kind) pairs run so far (collective.c's INFO line) */
    int tcp_peers; /* some peer is reached over TCP (host buffers) */
    int crowded;   /* some host has more of this communicator's ranks than cores online */
    size_t halving_min_bytes, halving_max_bytes; /* auto: halving.c's all-reduce between these */
    size_t doubling_max_bytes; /* auto: recursive doubling (halving.c) up to this, over the network */
    /* The hierarchical all-reduce (hier.c): auto considers it from this many bytes; it
     * cuts a message into slices of about this many; per size class (log2 of the bytes)
     * the measured times (0: not yet; [0] ring, [1] hierarchical) and the choice (0: not
     * yet, 1 ring, 2 hierarchical). */
    size_t hier_min_bytes, hier_slice_bytes;
    /* Device buffers: the most peers an exchange (all-to-all, gather, scatter, a group's
     * messages) stages at once, one lane each (devcomm.h); more go in rounds
     * (RINGLET_DEVICE_LANES, 2..RL_DEV_MAX_LANES). */
    int dev_lanes;
#define RL_HIER_CLASSES 64
    double hier_time[RL_HIER_CLASSES][2];
    signed char hier_pick[RL_HIER_CLASSES];
    unsigned char hier_calls[RL_HIER_CLASSES]; /* calls of the class made while measuring */

    void *tctx[RL_TP_MAX];           /* transports that initialised here */
    int forced_tp;                   /* RINGLET_TRANSPORT, or -1 */
    rl_conn *send_conns, *recv_conns; /* per peer rank, made on first use */
    rl_conn *send_conns_dev, *recv_conns_dev; /* device buffers, where another transport carries them */
    /* Pieces of receives parked until their sender connects (conn.h), in posting order per
     * peer; nparked counts them all. */
    struct rl_parked **parked;
    atomic_int nparked;
    pthread_mutex_t park_mu;
    double park_polled_at; /* the runner's last poll for their connections */
    struct sockaddr_storage ifaddr;  /* the interface chosen */
    char ifname[64];

    /* failure: the first one wins; stop tells every wait to give up */
    atomic_int stop;
    atomic_int failed;
    atomic_int aborted;
    ringlet_result_t fail_code;
    int fail_remote; /* the failure is another rank's, which the monitor relayed */
    int fail_lost;   /* this rank's own, and it can take part no more (rl_comm_fail_lost) */
    char fail_msg[RL_MSG_MAX];
    pthread_mutex_t fail_mu;
    /* Under fail_mu: the stop token of a split's init under way (ringlet_comm_split), fired
     * when this communicator fails: its members wait for each other there, and one that
     * died meanwhile would hold the others till the deadline. NULL: none. */
    ringlet_stop_token_t split_stop;

    /* wake-ups for waiters: any completion rings the bell. It is the doorbell (shared
     * memory, so that peer processes can ring it too), or own_bell without one. */
    rl_bell own_bell;
    _Atomic(rl_bell *) ev;
    struct rl_doorbell *db;
    atomic_int polled;  /* a connection over a transport without threads (shm) exists */
    int parts_released; /* connections and transports closed (comm.c: release_parts) */
    atomic_int threaded; /* a connection over a transport whose own threads move data (TCP, IB) */
    double spin_s;      /* how long a waiter polls such transports before it sleeps */
    unsigned spin_pause; /* polls in a pause loop before the waiter starts yielding */
    unsigned peer_pause; /* the same for waits on peers (rl_comm_wait_peer); UINT_MAX: never yields */
    atomic_int naps;     /* waits left that sleep at once when a peer shares the core (wait.c) */
    int bound_alone;     /* every rank of this host may run on one core only, each on its own (wait.c) */
    double alone_spin_s; /* spin_s for a waiter that never yields (bound_alone, wait.c) */

    /* progress thread and its queue of operations (issue order) */
    pthread_t progress;
    int progress_started;
    pthread_mutex_t q_mu;
    /* Stream calls queue their holds on the users' streams one at a time, in the order of
     * their numbers (a call's wait on stream S must come after the events of the calls
     * numbered before it); never taken by the progress thread, whose work a call blocked on
     * a full stream waits for. Taken before q_mu. */
    pthread_mutex_t hold_order_mu;
    pthread_cond_t q_cv;
    struct ringlet_request *q_head, *q_tail;
    int q_quit;
    /* Non-blocking sends and receives over a transport without threads of its own (shared
     * memory, cuda_ipc) may be in flight, their owner perhaps blocked on another
     * communicator: the progress thread moves them while no thread of this one waits
     * (progress.c's watch_posted; set by rl_comm_watch_posted, cleared when none is left). */
    atomic_int posted_watch;
    atomic_int npolling; /* threads inside a wait begun while posted_watch was set (wait.c): they poll */
    int q_bell;          /* the progress thread sleeps on the bell, not q_cv (watch_posted; q_mu) */
    double watch_at;     /* progress thread only: when watch_posted first polls (0: not armed) */
    int inline_ok; /* RINGLET_INLINE (default 1): blocking host calls may run on the caller */
    int check; /* RINGLET_CHECK: every collective's fingerprint is compared first (collective.c) */
    uint64_t check_seq; /* RINGLET_CHECK: collectives checked so far (sends and receives, which only
                         * some ranks call, are not counted), the number in the fingerprint */
    int running; /* an operation is being run (progress thread, or inline by the caller) */
    atomic_int waiters; /* threads in ringlet_test / ringlet_wait: they poll the transports,
                         * so an abort's teardown lets them leave before closing those */
    uint64_t seq;
    /* Collectives called on this communicator (rl_request_count_colls), and the rank that
     * had called the fewest with its count, as rank 0 last said (its monitor counts every
     * rank's from their heartbeats; lag 0: not known): a call that times out says
     * whether that rank has not called it yet. */
    atomic_ullong colls_called;
    atomic_ullong lag; /* rl_lag_pack: both from one report */

    char *slots;      /* nslots * chunk_bytes: receive staging, reused by every call */
    rl_treq *oneshot_treqs; /* the one-shot exchange's requests: 2 (P - 1), made on first use */
    char *temp;       /* grown on demand: partial results of reduce_scatter / reduce */
    size_t temp_size;
    char *temp2;      /* grown on demand: the scaled input of a pre-multiplied sum */
    size_t temp2_size;
    struct rl_reduce_pool *pool; /* RINGLET_REDUCE_THREADS (reduce_pool.h), or NULL: one thread reduces */
    int init_device;  /* the device layer's current device at init, or -1 */
    /* The device a transport that maps device memory connects on (cuda_ipc allocates and
     * maps on the current device, and the progress thread's is device 0 until set): the
     * device calls' once they began (devcomm.c), else init_device; -1: none. */
    atomic_int conn_device;
    pthread_mutex_t ops_mu;
    rl_userop userops[RL_MAX_USER_OPS];

    struct rl_trace *trace; /* RINGLET_TRACE, or NULL */
    rl_fault fault;         /* RINGLET_FAULT_KILL / _STOP (tests) */
    struct rl_monitor *mon;
    /* made by the first call on device buffers or with a stream (rl_devcomm_prepare, on a
     * calling thread), read by the progress thread */
    struct rl_devcomm *_Atomic dev;

    pthread_mutex_t err_mu;
    char last_error[RL_MSG_MAX];

    /* Requests handed to the user and not yet completed by test/wait: destroy frees
     * them (a request may not be used after its communicator is destroyed). */
    pthread_mutex_t live_mu;
    pthread_mutex_t close_mu; /* one teardown at a time: an abort's, and a destroy right after it */
    atomic_int closers;       /* aborts under way: a destroy frees nothing until they left */
    struct ringlet_request *live;
};

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
    dst->coll_first = src->coll_first;
    dst->device = src->device;
}

/* Collectives in a request (a group's: among its calls). Sends and receives, which only
 * some ranks call, are not counted: every rank's count of collectives called is
 * comparable (monitor.c: which rank lags). */
static inline int rl_request_colls(const struct ringlet_request *r) {
    if (r->kind != RL_OP_GROUP) return r->kind != RL_OP_SEND && r->kind != RL_OP_RECV;
    int n = 0;
    for (int i = 0; i < r->nsub; i++) n += r->sub[i].kind != RL_OP_SEND && r->sub[i].kind != RL_OP_RECV;
    return n;
}

/* The rank that had called the fewest collectives and its count, in one word (count in
 * the high 40 bits, rank + 1 in the low 24; 0: not known). */
static inline unsigned long long rl_lag_pack(int rank, unsigned long long colls) {
    return (colls << 24) | ((unsigned long long)(rank + 1) & 0xffffff);
}
static inline int rl_lag_rank(unsigned long long lag) { return (int)(lag & 0xffffff) - 1; }
static inline unsigned long long rl_lag_colls(unsigned long long lag) { return lag >> 24; }

/* Numbers request r's collectives (queue lock held, when r gets its seq). */
static inline void rl_request_count_colls(struct ringlet_comm *c, struct ringlet_request *r) {
    int n = rl_request_colls(r);
    if (!n) {
        r->coll_first = 0;
        return;
    }
    /* Written under the queue lock only: a plain store (no locked add on every call); the
     * monitor thread reads it. */
    unsigned long long was = atomic_load_explicit(&c->colls_called, memory_order_relaxed);
    r->coll_first = was + 1;
    atomic_store_explicit(&c->colls_called, was + (unsigned long long)n, memory_order_relaxed);
}

enum { RL_ALGO_AUTO = 0, RL_ALGO_RING = 1, RL_ALGO_ONESHOT = 2, RL_ALGO_HIER = 3, RL_ALGO_HALVING = 4, RL_ALGO_DOUBLING = 5, RL_ALGO_STAR = 6 };
/* The most ranks the small-message paths (one-shot, star, recursive doubling, board) take:
 * the one-shot and star reductions take every rank's block in one reduce_many call, which
 * takes at most 64 sources on a device (host or device buffers: every rank chooses alike). */
#define RL_ONESHOT_MAX_RANKS 64
/* How long a waiter bound alone polls a peer before it sleeps, unless RINGLET_SPIN_US says. */
#define RL_ALONE_SPIN_US 10000

#endif
