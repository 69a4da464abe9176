/* Inside the NCCL layer: the communicator wrapper and the helpers both halves share.
 * The layer is built on include/ringlet.h alone (../shared/DESIGN.md). */
#ifndef RINGLET_NCCL_SHIM_H
#define RINGLET_NCCL_SHIM_H

#include <pthread.h>
#include <stdatomic.h>

#include "nccl.h"
#include "ringlet.h"

#define SHIM_MSG_MAX 512

struct initall_set;

struct ncclComm {
    uint32_t magic; /* SHIM_MAGIC while the handle is live */
    ringlet_comm_t rc;
    int nranks, rank;
    int blocking;
    int device; /* the device current at init (-1: none) */
    unsigned fork_gen; /* shim_fork_generation() when made: a forked child's calls fail at once */
    /* Non-blocking init: a thread runs it; init_done is set when it returns. */
    pthread_t init_thread;
    pthread_mutex_t join_mu; /* init_joined, init_thread */
    int init_joined;
    atomic_int init_done;
    ncclResult_t init_rc;
    ringlet_stop_token_t init_stop; /* ncclCommAbort stops an init still running with it */
    /* Non-blocking calls: requests not yet seen finished; the first error sticks. */
    pthread_mutex_t mu;
    ringlet_request_t *pending;
    int npending, cap;
    ncclResult_t async;
    struct initall_set *set; /* ranks of one communicator in this process: destroyed together */
    /* Every handle of the process, and destroying: destroyed alone (both under the layer's
     * group lock). */
    struct ncclComm *live_prev, *live_next;
    int destroying;
    /* Made by a split inside a group (joined at ncclGroupEnd): its parent; nocolor: only a
     * stand-in, where the caller gave no color. */
    struct ncclComm *split_parent;
    int nocolor;
    /* Which communicator this is a rank of, the same on its every rank: a hash of the
     * unique id, or of the parent's key, the color and the parent's split count. */
    uint64_t key;
    unsigned nsplits;
    /* Made inside a group whose ncclGroupEnd has not finished: destroy and abort leave the
     * freeing to it (release_later). Both under the layer's group lock. */
    int group_held, release_later;
    /* Calls under way on the handle (shim_enter), and doomed: aborted while some were, so
     * that the last of them to leave ends it (under mu). */
    int calls, doomed;
    /* Splits of this (non-blocking) communicator running on threads of their own, outside
     * a group (under mu; splits_cv says when one ends): its calls wait for them. */
    int splits_running;
    pthread_cond_t splits_cv;
    int finalized; /* ncclCommFinalize returned: a second one is refused, as NCCL's */
    /* ncclCommRegister's handles not yet deregistered (under mu): freed with the handle, as
     * NCCL's destroy releases a communicator's registrations. */
    struct shim_reg *regs;
    char err[SHIM_MSG_MAX];
};
#define SHIM_MAGIC 0x6e63636cu

/* ringlet's result as NCCL's (a deadline that passed is ncclRemoteError). */
ncclResult_t shim_result(ringlet_result_t rc);
/* Records a failure message for ncclGetLastError (comm's and the thread's); returns code. */
ncclResult_t shim_fail(struct ncclComm *c, ncclResult_t code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* A call that uses c's ringlet communicator: ncclCommAbort, which PyTorch's watchdog
 * calls from its own thread while a call waits, ends the communicator only once the calls
 * under way left. shim_enter: 0 (with the error recorded) when c was aborted already. */
ncclResult_t shim_enter(struct ncclComm *c, const char *fn);
void shim_leave(struct ncclComm *c);
/* shim_enter for a call inside a group: left by the outermost ncclGroupEnd, once the
 * group's calls (and splits) ran. */
ncclResult_t shim_group_enter(struct ncclComm *c, const char *fn);
/* After a ringlet call: its result, its message recorded on failure. */
ncclResult_t shim_check(struct ncclComm *c, ringlet_result_t rc);
/* A live communicator whose init is over (joined), or an error (fn names the call). */
ncclResult_t shim_ready(struct ncclComm *c, const char *fn);
/* shim_enter, then shim_ready (which may wait for a non-blocking init): an abort from
 * another thread meanwhile leaves the handle to the call. Left (shim_leave) on failure;
 * else the caller leaves. */
ncclResult_t shim_enter_ready(struct ncclComm *c, const char *fn);
/* Tests the pending non-blocking requests: ncclInProgress while any runs, else the
 * communicator's first error or ncclSuccess. */
ncclResult_t shim_poll(struct ncclComm *c);
/* Tracks a non-blocking request. */
ncclResult_t shim_track(struct ncclComm *c, ringlet_request_t r);
/* The depth of this thread's ncclGroupStart nesting. */
int shim_group_depth(void);
/* rc, a call's result: an error inside a group spoils the group, as NCCL's: the outermost
 * ncclGroupEnd returns it and runs none of the group's calls (inits and splits recorded
 * still end). */
ncclResult_t shim_group_spoil(ncclResult_t rc);
/* At the outermost ncclGroupEnd: waits for the blocking inits and every split called
 * inside the group (they ran on threads of their own), and makes the communicators one set,
 * destroyed together; the first failed one's error, else ncclInProgress while a
 * non-blocking one runs. */
ncclResult_t shim_group_inits_end(void);
/* Logs a line when NCCL_DEBUG is INFO or TRACE (or ringlet's RINGLET_LOG is). */
void shim_info(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* pnccl twins: the same function under the profiling name. */
#define SHIM_TWIN(name) __typeof__(nccl##name) pnccl##name __attribute__((alias("nccl" #name)))

#endif
