/* Point to point: a message of n bytes travels as pieces of RL_P2P_PIECE bytes (comm.h),
 * whatever the memory on either end, and a last piece shorter than that: n mod
 * RL_P2P_PIECE bytes, none where n is a multiple of it. The transports compare each
 * piece's length with the receive's, so a receive of another length fails on its last
 * piece at the latest: were the last piece a full one, a receive of k pieces would match
 * the first k of a longer send, end well, and leave the rest to the next receive.
 *
 * Host memory, no stream: the progress thread posts every piece's transport request in
 * issue order and goes on, or, when nothing is queued or running, the calling thread
 * does (rl_comm_try_post); the waiter completes the request from them. So a receive
 * and a send posted by one rank can be in flight at once, in any order.
 * Device memory, or a call ordered on a stream: the progress thread runs the transfer
 * to the end as a pipelined sequence of pieces (collective.h's rl_run_p2p_pipe). */
#ifndef RINGLET_P2P_H
#define RINGLET_P2P_H

#include "comm.h"

/* Progress thread, or the caller in issue order: posts the pieces of a host send or
 * receive (on failure: the request's error in r->err, returned). */
ringlet_result_t rl_p2p_post(struct ringlet_comm *c, struct ringlet_request *r);
/* Requests this thread has posted so far (tests: which thread posts). */
unsigned long rl_p2p_posts(void);
/* Waiter: whether the posted request finished (1), with its result set; 0 if not. */
int rl_p2p_test(struct ringlet_request *r);
/* Waits until every posted piece finished (after the communicator failed). */
void rl_p2p_drain(struct ringlet_request *r);
/* For the message of a posted request that timed out: ": " and what it waits for on this
 * rank's own device (rl_conn_stall), else "" (buf, n bytes). */
const char *rl_p2p_stall(struct ringlet_request *r, char *buf, size_t n);
/* Frees the pieces' requests (request teardown). */
void rl_p2p_free(struct ringlet_request *r);
/* Number of pieces of a message of `bytes` (at least 1), and the length of piece i. */
static inline size_t rl_p2p_pieces(size_t bytes) { return bytes / RL_P2P_PIECE + 1; }
static inline size_t rl_p2p_piece_bytes(size_t bytes, size_t i) {
    return i < bytes / RL_P2P_PIECE ? RL_P2P_PIECE : bytes % RL_P2P_PIECE;
}

#endif
