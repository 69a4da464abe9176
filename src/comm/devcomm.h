/* A communicator's use of the device layer (src/device/): the stream order of calls,
 * and the streams, pinned staging slots and scratch memory of its device operations.
 *
 * Stream order (as NCCL's calls): the calling thread records an event on the user's
 * stream (the work before the call) and holds the stream until a pinned flag reaches
 * the operation's sequence number (the work after the call). The progress thread makes
 * its own streams wait for the event, runs the operation, and sets the flag. So the call
 * returns at once and the user's side never synchronises with the host.
 *
 * Nothing that can synchronise the device (allocations, frees, IPC mappings, a kernel's
 * first load) may happen while a stream is held: on a GPU it could wait for the held
 * stream forever (device.h). So everything an operation's device work needs is made by
 * rl_devcomm_prepare on the calling thread, before the operation is queued and its
 * streams held, inside a quiet section of the device layer; the progress thread only
 * looks things up (and fails, as an internal error, on anything not prepared). Memory is
 * freed through rl_dev_free_later, which waits for a moment when no stream is held. */
#ifndef RINGLET_DEVCOMM_H
#define RINGLET_DEVCOMM_H

#include "comm.h"
#include "device.h"

#define RL_DEV_MAX_SLOTS 64
#define RL_DEV_MAX_LANES 64

/* The staging of one pipelined exchange (pipe.h): a ring uses lane 0; point-to-point
 * transfers with several peers at once (a group, all-to-all) use one lane per peer. */
typedef struct rl_devlane {
    char *send_slots, *recv_slots; /* pinned, nslots * slot_bytes each */
    /* RINGLET_DEVICE_REDUCE=copy, or a device transport whose slot a chunk does not fit:
     * device staging slots */
    char *dev_slots;
    rl_dev_event_t ev_send[RL_DEV_MAX_SLOTS], ev_recv[RL_DEV_MAX_SLOTS];
} rl_devlane;

/* What an operation's device work needs, made by rl_devcomm_prepare (collective.c says
 * what each algorithm uses). */
typedef struct rl_dev_needs {
    int device;        /* the buffers' device; -1: host buffers (a stream only) */
    int stream_device; /* host buffers: the stream's device */
    int lanes;        /* lanes 0 .. lanes-1 */
    int dev_slots;    /* with device staging slots */
    size_t scratch, scratch2, pinned; /* bytes of each (rl_devcomm_scratch ...) */
    /* Device connections (over a transport that maps peer memory, where one reaches the
     * peer): to and from each rank marked (arrays of nranks, NULL: none). */
    unsigned char *send_to, *recv_from;
    /* Make only what needs no peer: the receiving ends that wait for their senders are
     * left for a later call (a group over several communicators of one thread). */
    int no_wait;
} rl_dev_needs;

#define RL_DEV_MAX_READY 64
#define RL_DEV_MAX_HELD 32 /* user streams whose waits on the flag are followed (held) */

struct rl_devcomm {
    const rl_device_ops *d;
    pthread_mutex_t mu;      /* prepare (calling threads) against the progress thread's lookups */
    pthread_mutex_t prep_mu; /* one prepare at a time */
    int published; /* cuda_ipc's probe made or found made here (prep_mu) */
    volatile uint64_t *flag; /* pinned; user streams wait on it */
    int device;              /* of the buffers (one per communicator); -1 until the first such call */
    rl_dev_stream_t s_send;  /* copies into the pinned send slots */
    rl_dev_stream_t s_recv;  /* reductions and copies out of the pinned receive slots */
    rl_dev_event_t ev_drain[2], ev_misc;
    int settled;             /* rl_devcomm_settle ran */
    size_t slot_bytes;
    int nslots;
    /* RINGLET_DEVICE_REDUCE=copy: a received chunk is first copied into device memory
     * (the lane's dev_slots) and reduced from there; direct (default): the kernel reads
     * the pinned slot itself. Which is faster is a property of the GPU and its link. */
    int reduce_from_copy;
    rl_devlane *lanes[RL_DEV_MAX_LANES];
    void *scratch;       /* device memory: partial results */
    size_t scratch_size;
    void *scratch2;      /* device memory: a pre-multiplied sum's scaled input */
    size_t scratch2_size;
    void *pinned;        /* pinned memory: the one-shot path's blocks */
    size_t pinned_size;
    /* Per rank: device connections made ready (rl_devcomm_prepare); devices made ready. */
    unsigned char *send_ready, *recv_ready;
    unsigned char ready_devices[RL_DEV_MAX_READY];
    int device_receiving; /* some peer's pieces come over a device transport: lanes get device slots */
    /* Outgrown buffers, freed at teardown: an operation running may still use them. */
    void *retired[64];
    int retired_kind[64];
    int nretired;
    /* User streams made to wait on flag, each with an event recorded after its latest wait
     * (under mu): the flag's memory goes only once every one of them has passed its wait
     * (settle), since a stream whose earlier work still runs reads it later (CUDA does not
     * say that cudaFreeHost waits for that). More streams than this: the flag is kept. */
    struct {
        void *stream;
        rl_dev_event_t passed;
        int dev;
        pthread_t thread; /* a handle of the current device's streams (NULL, 0x1, 0x2): whose */
    } held[RL_DEV_MAX_HELD];
    int nheld, held_overflow, held_closed; /* closed: settle took them (later waits: overflow) */
};

/* Calling thread, no lock held, before the operation is queued: makes what need says
 * (the communicator's device state and the device made ready too), in quiet sections of
 * the device layer; waits (within the deadline) for peers to connect where device
 * connections are new. The thread's current device is kept. */
ringlet_result_t rl_devcomm_prepare(struct ringlet_comm *c, const rl_dev_needs *need, char *err);
/* Calling thread, no lock held: cuda_ipc's probe of this rank made on device dev (once),
 * as rl_devcomm_prepare makes it first. A group on several
 * communicators publishes every one's before it prepares any: a preparation waits for
 * its peers' probes, and a peer may prepare the group's communicators in another order. */
ringlet_result_t rl_devcomm_publish(struct ringlet_comm *c, int dev, char *err);
/* Whether streams can be held (and released) now: the flag exists. */
int rl_devcomm_can_hold(struct ringlet_comm *c);
/* Calling thread, under the communicator's hold_order_mu (not its queue lock: a full
 * stream blocks the call until the progress thread finished the operations before it), in
 * a hold section (device.h), with r->seq assigned and r prepared: the stream order above. */
ringlet_result_t rl_devcomm_enqueue(struct ringlet_comm *c, struct ringlet_request *r, char *err);
/* Destroys the events rl_devcomm_enqueue made for r (a request taken back after it). */
void rl_devcomm_drop_events(struct ringlet_comm *c, struct ringlet_request *r);
/* With r->hold_later, enqueue records the events only; the caller holds the streams
 * afterwards with this, in a hold section (a group over several communicators of this
 * process that share a stream: every communicator's event comes before any hold, or the
 * first hold would keep the others' operations, which it needs, from starting). */
ringlet_result_t rl_devcomm_hold(struct ringlet_comm *c, void *const *streams, int n, uint64_t seq, char *err);
/* Calling thread, after the operation numbered seq was queued and its streams held (no
 * lock, no section): where a stream's device holds no streams (RINGLET_STREAM_HOLD=sync),
 * waits until the operation is done, so that the caller's later work on the stream comes
 * after it; its failure is the communicator's. */
ringlet_result_t rl_devcomm_sync(struct ringlet_comm *c, void *const *streams, int n, uint64_t seq, char *err);
/* Progress thread, before an operation on device buffers (r->device >= 0): the thread's
 * current device, and the internal streams waiting for the user's earlier work. */
ringlet_result_t rl_devcomm_begin(struct ringlet_comm *c, struct ringlet_request *r, struct rl_devcomm **out,
                                  char *err);
/* Waits, within the deadline, for an event of the communicator's streams (what: for
 * the message). */
ringlet_result_t rl_devcomm_wait(struct ringlet_comm *c, rl_dev_event_t ev, const char *what, char *err);
/* Waits, within the deadline, until the work enqueued on the internal streams is done.
 * Every operation on device buffers ends with it, success or not. */
ringlet_result_t rl_devcomm_drain(struct ringlet_comm *c, char *err);
/* Lets the request's stream go on (flag = seq), whatever the outcome. */
void rl_devcomm_release(struct ringlet_comm *c, struct ringlet_request *r);
/* Progress thread: lane i, its device staging slots, and the scratch memory, as prepared;
 * NULL with err (an internal error) where the operation did not prepare them. Scratch is
 * valid until the next prepare of the communicator that grows it. */
rl_devlane *rl_devcomm_lane(struct ringlet_comm *c, int i, char *err);
ringlet_result_t rl_devcomm_device_slots(struct ringlet_comm *c, rl_devlane *l, char *err);
void *rl_devcomm_scratch(struct ringlet_comm *c, size_t bytes, char *err);
void *rl_devcomm_pinned(struct ringlet_comm *c, size_t bytes, char *err);
void *rl_devcomm_scratch2(struct ringlet_comm *c, size_t bytes, char *err);
/* Lets go of every user stream still held (teardown, before anything is freed). */
void rl_devcomm_release_all(struct ringlet_comm *c);
/* Teardown, before connections close and transports free memory: releases every stream
 * still waiting and waits (the deadline at most) for the communicator's device copies;
 * where they did not finish, notes them stuck (rl_dev_note_stuck), so that no free hangs
 * behind them. Once per communicator. */
void rl_devcomm_settle(struct ringlet_comm *c);
/* Settles, then frees everything (teardown). */
void rl_devcomm_fini(struct ringlet_comm *c);

/* The buffers' device of the communicator, or -1 before its first device operation. */
int rl_devcomm_device(struct ringlet_comm *c);

/* Enqueued device work failed: the operation's error. */
ringlet_result_t rl_devcomm_error(const char *what, char *err);

/* The flag value that releases every hold (below 2^62, as wait_flag wants, and above
 * every sequence number). */
#define RL_DEVCOMM_RELEASE_ALL ((uint64_t)1 << 61)

#endif
