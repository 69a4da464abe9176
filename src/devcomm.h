/* A communicator's use of the device layer (src/device/): the stream order of calls,
 * and the streams, pinned staging slots and scratch memory of its device operations.
 *
 * Stream order (as NCCL's calls): the calling thread records an event on the user's
 * stream (the work before the call) and enqueues on it a wait until a pinned flag
 * reaches the operation's sequence number (the work after the call). The progress
 * thread makes its own streams wait for the event, runs the operation, and sets the
 * flag. So the call returns at once and the user's side never synchronises with the
 * host. */
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
     * device staging slots (made on first use) */
    char *dev_slots;
    rl_dev_event_t ev_send[RL_DEV_MAX_SLOTS], ev_recv[RL_DEV_MAX_SLOTS];
} rl_devlane;

struct rl_devcomm {
    const rl_device_ops *d;
    volatile uint64_t *flag; /* pinned; user streams wait on it */
    int device;              /* of the buffers (one per communicator); -1 until the first such call */
    /* Made by the first operation on device buffers (progress thread only): */
    rl_dev_stream_t s_send;  /* copies into the pinned send slots */
    rl_dev_stream_t s_recv;  /* reductions and copies out of the pinned receive slots */
    rl_dev_event_t ev_drain[2], ev_misc;
    size_t slot_bytes;
    int nslots;
    /* RINGLET_DEVICE_REDUCE=copy: a received chunk is first copied into device memory
     * (the lane's dev_slots) and reduced from there; direct (default): the kernel reads
     * the pinned slot itself. Which is faster is a property of the GPU and its link. */
    int reduce_from_copy;
    rl_devlane *lanes[RL_DEV_MAX_LANES]; /* made on first use */
    void *scratch;       /* device memory: partial results */
    size_t scratch_size;
    void *scratch2;      /* device memory: a pre-multiplied sum's scaled input */
    size_t scratch2_size;
    void *pinned;        /* pinned memory: the one-shot path's blocks */
    size_t pinned_size;
    /* Outgrown buffers, freed at teardown only: freeing waits for every stream of the
     * device, and a user's stream may be held by the flag for a later operation. */
    void *retired[64];
    int retired_pinned[64];
    int nretired;
};

/* Calling thread, under the queue lock, with r->seq assigned: the stream order above. */
ringlet_result_t rl_devcomm_enqueue(struct ringlet_comm *c, struct ringlet_request *r, char *err);
/* With r->hold_later, enqueue records the events only; the caller holds the streams
 * afterwards with this (a group over several communicators of this process that share a
 * stream: every communicator's event comes before any hold, or the first hold would keep
 * the others' operations, which it needs, from starting). */
ringlet_result_t rl_devcomm_hold(struct ringlet_comm *c, void *const *streams, int n, uint64_t seq, char *err);
/* Progress thread, before an operation on device buffers (r->device >= 0): the
 * streams and slots (made on first use), the thread's current device, and the
 * internal streams waiting for the user's earlier work. */
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
/* Lane i (its pinned slots and events), made on first use; NULL with err on failure. */
rl_devlane *rl_devcomm_lane(struct ringlet_comm *c, int i, char *err);
/* The lane's device staging slots, made on first use. */
ringlet_result_t rl_devcomm_device_slots(struct ringlet_comm *c, rl_devlane *l, char *err);
/* Device scratch (rl_devcomm_scratch) or pinned scratch (rl_devcomm_pinned) of at least
 * bytes; NULL with err on failure. Valid until the next call of the same kind. */
void *rl_devcomm_scratch(struct ringlet_comm *c, size_t bytes, char *err);
void *rl_devcomm_pinned(struct ringlet_comm *c, size_t bytes, char *err);
void *rl_devcomm_scratch2(struct ringlet_comm *c, size_t bytes, char *err);
/* Lets go of every user stream still held (teardown, before anything is freed: freeing
 * device memory waits for every stream of the device, as cudaFree does). */
void rl_devcomm_release_all(struct ringlet_comm *c);
/* Releases every stream still waiting, then frees everything (teardown). */
void rl_devcomm_fini(struct ringlet_comm *c);

/* Enqueued device work failed: the operation's error. */
ringlet_result_t rl_devcomm_error(const char *what, char *err);

#endif
