/* Running one operation: on which memory, with which algorithm.
 *
 * rl_run_op is the one entry: it sets up the memory (host, or device buffers through
 * the communicator's device state, waiting for the user's stream), picks the one-shot
 * path or the ring for a collective, or the pipelined point-to-point transfer, and
 * drains the device work before it returns. The algorithms below only move chunks and
 * reduce them through rl_mem. */
#ifndef RINGLET_COLLECTIVE_H
#define RINGLET_COLLECTIVE_H

#include <string.h>

#include "comm.h"
#include "mem.h"

/* A group's collective o as a request of its own, numbered seq (the group's): what the
 * group runs (group.c), checks (collective.c) and prepares for (devneeds.c). */
static inline void rl_subop_request(struct ringlet_request *r, struct ringlet_comm *c, const rl_subop *o, uint64_t seq) {
    memset(r, 0, sizeof *r);
    r->comm = c;
    r->kind = o->kind;
    r->sendbuf = o->sendbuf;
    r->recvbuf = o->recvbuf;
    r->count = o->count;
    r->dtype = o->dtype;
    r->op = o->op;
    r->root = o->root;
    r->peer = o->peer;
    r->seq = seq;
    r->device = o->device;
    r->premul = o->premul;
}

/* The whole operation; the message in err (RL_MSG_MAX) names it. partner (or NULL): a
 * receive for a send r (or a send for a receive r), issued right after it, that runs in
 * the same exchange, so that a send and a receive between ranks never wait for each
 * other; it shares r's result, its message in partner_err. */
ringlet_result_t rl_run_op(struct ringlet_comm *c, struct ringlet_request *r, struct ringlet_request *partner,
                           char *err, char *partner_err);

/* Calling thread, before r is queued: makes what r's device work will need (devneeds.c,
 * devcomm.h); r on device buffers or with a stream. wait 0: all but what waits for a
 * peer (receiving ends whose sender has not connected yet), left for a later call. */
ringlet_result_t rl_op_prepare_device(struct ringlet_comm *c, struct ringlet_request *r, int wait, char *err);

/* The ring (ring.c). */
ringlet_result_t rl_run_ring(struct ringlet_comm *c, struct ringlet_request *r, rl_mem *mem, char *err);
/* Small messages in one exchange (oneshot.c): whether this call takes that path (the
 * same answer on every rank), and running it. */
int rl_oneshot_fits(const struct ringlet_comm *c, const struct ringlet_request *r);
ringlet_result_t rl_run_oneshot(struct ringlet_comm *c, struct ringlet_request *r, rl_mem *mem, char *err);

/* The all-reduce through rank 0 (oneshot.c: a one-shot reduce to rank 0, then a one-shot
 * broadcast from it): whether r takes it (RINGLET_ALGO=star, or auto for small
 * all-reduces where some ranks talk over TCP, on at least 3 ranks, a host having more of
 * them than cores), and the run. */
int rl_star_fits(const struct ringlet_comm *c, const struct ringlet_request *r);
ringlet_result_t rl_run_star(struct ringlet_comm *c, struct ringlet_request *r, rl_mem *mem, char *err);
/* The hierarchical all-reduce (hier.c): whether r may take it (an all-reduce on a job
 * of several hosts with the same number of ranks each, by RINGLET_ALGO and size), the
 * choice between it and the ring (measured per size class, the same on every rank),
 * and the algorithm itself (the ring where the job has not that shape). */
int rl_hier_candidate(const struct ringlet_comm *c, const struct ringlet_request *r);
/* avg of float16, run as a sum of inputs each multiplied by 1/P first (collective.c). */
int rl_avg_premul(const struct ringlet_comm *c, const struct ringlet_request *r);
ringlet_result_t rl_run_allreduce_choosing(struct ringlet_comm *c, struct ringlet_request *r, rl_mem *mem, char *err);
ringlet_result_t rl_run_hier(struct ringlet_comm *c, struct ringlet_request *r, rl_mem *mem, char *err);
/* The all-reduce by recursive halving and doubling (halving.c): whether r takes it (the
 * same answer on every rank), and running it. */
int rl_halving_fits(const struct ringlet_comm *c, const struct ringlet_request *r);
ringlet_result_t rl_run_halving(struct ringlet_comm *c, struct ringlet_request *r, rl_mem *mem, char *err);
/* The all-reduce by recursive doubling (halving.c): the whole buffer with one partner per
 * step, log2(P) steps; whether r takes it (the same answer on every rank), and running it. */
int rl_doubling_fits(const struct ringlet_comm *c, const struct ringlet_request *r);
ringlet_result_t rl_run_doubling(struct ringlet_comm *c, struct ringlet_request *r, rl_mem *mem, char *err);
/* All-to-all, gather and scatter (spread.c). */
ringlet_result_t rl_run_spread(struct ringlet_comm *c, struct ringlet_request *r, rl_mem *mem, char *err);
/* The calls of a group (group.c): its collectives in order, each through run_one (the
 * dispatcher of collective.c, passed in so that the two files do not call each other),
 * then its sends and receives with every peer at once. */
typedef ringlet_result_t (*rl_run_fn)(struct ringlet_comm *c, struct ringlet_request *r, rl_mem *mem, char *err);
ringlet_result_t rl_run_group(struct ringlet_comm *c, struct ringlet_request *r, rl_mem *mem, rl_run_fn run_one,
                              char *err);
/* A send, a receive, or both at once, as pipelined sequences of pieces (p2p.c): device
 * memory, or calls ordered on a stream. send or recv may be NULL. */
ringlet_result_t rl_run_p2p_pipe(struct ringlet_comm *c, struct ringlet_request *send, struct ringlet_request *recv,
                                 rl_mem *mem, char *err);

#endif
