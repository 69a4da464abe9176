/* Exchanges with many peers at once: every message this rank sends to or receives from
 * each peer, all peers at the same time (one pipelined exchange per peer, pipe.h), each
 * message framed as point-to-point messages are (RL_P2P_PIECE pieces) and on their
 * channel (names.h), so a message of a group matches a plain send or receive on the
 * other side. Used by all-to-all, gather, scatter and grouped sends and receives. */
#ifndef RINGLET_XCHG_H
#define RINGLET_XCHG_H

#include "comm.h"
#include "mem.h"

typedef struct rl_msg {
    int peer;
    void *buf;    /* const for sends */
    size_t bytes;
} rl_msg;

/* Sends sends[0..ns) and receives recvs[0..nr): messages to (from) one peer go in the
 * order listed; peers proceed independently. r names the operation in errors. */
ringlet_result_t rl_run_peers(struct ringlet_comm *c, const struct ringlet_request *r, rl_mem *mem, const rl_msg *sends,
                              int ns, const rl_msg *recvs, int nr, char *err);

/* The messages of sends and recvs that this rank sends to itself, checked (the k-th send
 * meets the k-th receive, of as many bytes, not overlapping it) and, with copy, copied.
 * rl_run_peers does both; a group checks first, before its collectives run. */
ringlet_result_t rl_xchg_self(struct ringlet_comm *c, const struct ringlet_request *r, rl_mem *mem, const rl_msg *sends,
                              int ns, const rl_msg *recvs, int nr, int copy, char *err);

#endif
