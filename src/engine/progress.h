/* The communicator's queue of operations and the progress thread that runs them in
 * issue order; blocking host calls may run on the caller's thread instead when nothing
 * is queued (the small-message latency path). */
#ifndef RINGLET_PROGRESS_H
#define RINGLET_PROGRESS_H

#include "comm.h"

/* Starts (stops: after the queued operations) the progress thread. */
ringlet_result_t rl_progress_start(struct ringlet_comm *c);
void rl_progress_stop(struct ringlet_comm *c);
/* Queues an operation for the progress thread (issue order; assigns r->seq and, for a
 * stream call, makes the stream wait for it). */
ringlet_result_t rl_comm_enqueue(struct ringlet_comm *c, struct ringlet_request *r, char *err);
/* Takes c->hold_order_mu within RINGLET_TIMEOUT (its holder may be blocked on a full
 * stream behind work that does not end): RINGLET_SUCCESS, or RINGLET_ERR_TIMEOUT with the
 * reason in err. */
ringlet_result_t rl_comm_hold_order_lock(struct ringlet_comm *c, char *err);
/* Of what r's device work needs, all that waits for no peer (rl_comm_enqueue makes the
 * rest): for a thread that queues several communicators' operations at once (a group
 * over ranks of one process), so that queuing one never waits for a peer's connection
 * that this thread has yet to make on another. */
ringlet_result_t rl_comm_prepare_early(struct ringlet_comm *c, struct ringlet_request *r, char *err);
/* Runs a blocking host collective on the caller's thread when nothing is queued or
 * running. Returns 0 (not run; queue it) when busy, else 1 with the result in *rc and
 * r->err, a failure recorded as c's last error (rl_error) while the call still counts as
 * running: once it returns, an abort and destroy from another thread may free c. */
int rl_comm_try_inline(struct ringlet_comm *c, struct ringlet_request *r, ringlet_result_t *rc);
/* Posts a send or receive on host memory (no stream) from the caller's thread when
 * nothing is queued or running, as the progress thread would (issue order kept), sparing
 * the hand-off to it (a woken thread on the caller's core: 12.8 us an 8-byte ping-pong
 * over shared memory, 37 us over TCP). 0: busy or failed (queue it); 1: posted, or
 * finished with the posting's error. */
int rl_comm_try_post(struct ringlet_comm *c, struct ringlet_request *r);
/* Nothing queued and nothing running (a snapshot). */
int rl_comm_idle(struct ringlet_comm *c);
/* Track (add = 1) or forget (add = 0) a request the user holds. */
void rl_comm_track(struct ringlet_comm *c, struct ringlet_request *r, int add);
/* 1 when a send or receive the user holds was posted and some piece of it has not
 * finished (what names the first such one); 0 when none. */
int rl_comm_posted_pending(struct ringlet_comm *c, char *what, size_t n);
/* Frees requests the user never completed (destroy). */
void rl_comm_free_live(struct ringlet_comm *c);
/* Frees a request (its point-to-point pieces too). */
void rl_request_free(struct ringlet_request *r);

#endif
