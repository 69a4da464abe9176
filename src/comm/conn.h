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
/* For the message of a request on conn that timed out: ": <what it waits for>" when it
 * waits on this rank's device (the transport's waits_on_device), else "". Returns buf. */
const char *rl_conn_stall(const rl_conn *conn, char *buf, size_t n);
/* An abort from another thread: a call may still be running on its caller's thread, or a
 * thread wait or test on a request, polling the transports. stop is set, so they end
 * within a poll slice; this lets them leave (1 s at most) before the device work is
 * drained and the connections and transports go. */
void rl_conn_wait_idle(struct ringlet_comm *c);
/* Closes every connection (teardown, after rl_conn_wait_idle: a call still running past
 * its second may yet queue device work after the drain; a best effort). */
void rl_conn_close_all(struct ringlet_comm *c);

#endif
