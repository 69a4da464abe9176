/* Connections to peers, made on first use, over the transport chosen per pair and per
 * kind of memory. */
#ifndef RINGLET_CONN_H
#define RINGLET_CONN_H

#include "comm.h"

/* The transport for the pair (this rank, peer), for host or device buffers: the forced
 * one (RINGLET_TRANSPORT), else for device buffers CUDA IPC when both ranks are on one
 * host and this rank can map the peer's memory; else shared memory on one host, IB
 * between hosts that both have it, TCP otherwise. Both ends compute the same answer. */
ringlet_result_t rl_conn_pick_transport(struct ringlet_comm *c, int peer, int device, int *tp, char *err);
/* Whether rl_conn_pick_transport asks CUDA IPC whether it reaches peer, for device buffers:
 * nothing forced, one host, both ranks have it. */
int rl_conn_ipc_candidate(const struct ringlet_comm *c, int peer);
/* The transport host buffers take between ranks a and b (either way), from what both
 * published and RINGLET_TRANSPORT: the same answer on every rank; -1 where a forced
 * transport is missing on one of them. */
int rl_conn_host_transport(const struct ringlet_comm *c, int a, int b);
/* The send (receive) connection to peer for host (device = 0) or device buffers, made
 * now if it does not exist yet (by the progress thread, or by whoever runs an operation).
 * Host and device buffers share a connection when they pick the same transport. */
ringlet_result_t rl_comm_send_conn(struct ringlet_comm *c, int peer, int device, rl_conn **conn, char *err);
ringlet_result_t rl_comm_recv_conn(struct ringlet_comm *c, int peer, int device, rl_conn **conn, char *err);
/* Receives that wait for their connection (TCP and IB: a receive's first message from a
 * peer comes over a connection the peer makes, with its first send). Rather than wait in
 * the accept, which would hold up every later call of this rank (its own sends among
 * them, which the peer may be waiting for: both posted a receive, then a send), a
 * receive on host memory (no stream) parks each of its pieces until the peer's
 * connection is there; a later receive from that peer parks behind it, so posting order
 * holds. Only the thread that runs the queue (the progress thread, or a caller that took
 * the idle queue) makes connections, parks and posts.
 *
 * The receive connection from peer for a point-to-point receive on host memory: *conn the
 * connection, or NULL where the caller must park its pieces (rl_conn_park): some are
 * parked already, or the accept would wait for the peer now. */
ringlet_result_t rl_comm_recv_conn_or_park(struct ringlet_comm *c, int peer, rl_conn **conn, char *err);
/* Parks a piece (req: running from now on). *local is set when the piece fails for this
 * rank's own reason (an accept out of descriptors): that receive fails alone. Fails only
 * for want of memory, with err. */
ringlet_result_t rl_conn_park(struct ringlet_comm *c, int peer, void *buf, size_t len, rl_treq *req, int *local,
                              char *err);
/* By the queue's runner: accepts the connections of parked receives that have arrived,
 * posting their pieces in order (any making of that connection does: a collective's
 * too); fails every parked piece once the communicator stopped. Returns the number still
 * parked. */
int rl_conn_poll_parked(struct ringlet_comm *c);
/* The same, from the runner's waits inside an operation (wait.c), at most every
 * RL_PARK_POLL_MS: the operation may wait for a peer whose sends wait for this rank to
 * accept their connection (an irecv, then a collective here; a large send, then the
 * collective there). Nothing on any other thread. */
void rl_conn_poll_parked_due(struct ringlet_comm *c);
#define RL_PARK_POLL_MS 10
/* This thread now runs the communicator's queue (c: the progress thread, or a caller that
 * took the idle queue), or no longer does (NULL). Returns the previous. */
struct ringlet_comm *rl_conn_set_runner(struct ringlet_comm *c);
/* Whether receives from peer are parked (any thread). */
int rl_conn_parked_for(struct ringlet_comm *c, int peer);
/* Fails and drops every parked piece (teardown, once stop is set and the progress thread
 * has ended; again within rl_conn_close_all). */
void rl_conn_drop_parked(struct ringlet_comm *c);
/* For the message of a request on conn that timed out: ": <what it waits for>" when it
 * waits on this rank's device (the transport's waits_on_device), else "". Returns buf. */
const char *rl_conn_stall(const rl_conn *conn, char *buf, size_t n);
/* An abort from another thread: a call may still be running on its caller's thread, or a
 * thread wait or test on a request, polling the transports. stop is set, so they end
 * within a poll slice; this lets them leave (1 s at most) before the device work is
 * drained and the connections and transports go (grace_s: RL_ABORT_GRACE_S). Destroy
 * waits again, up to the deadline, before it frees the struct those calls still read.
 * Non-zero if a call is still inside after grace_s. */
int rl_conn_wait_idle(struct ringlet_comm *c, double grace_s);
/* Closes every connection (teardown, after rl_conn_wait_idle: a call still running past
 * its second may yet queue device work after the drain; a best effort). */
void rl_conn_close_all(struct ringlet_comm *c);

#endif
