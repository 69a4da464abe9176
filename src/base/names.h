/* Names and sizes of data types, reduction ops and result codes, and the kinds of
 * operation: what every layer that prints or sizes a buffer needs (ringlet_datatype_size
 * and ringlet_strerror are public, in ringlet.h, and defined in names.c). */
#ifndef RINGLET_NAMES_H
#define RINGLET_NAMES_H

#include "ringlet.h"

/* "float32", "sum", ...; "?" for a value out of range. */
const char *rl_dtype_name(ringlet_datatype_t d);
const char *rl_redop_name(ringlet_op_t op);

/* The operations ringlet runs: a request's kind. */
typedef enum {
    RL_OP_ALLREDUCE,
    RL_OP_BROADCAST,
    RL_OP_REDUCE,
    RL_OP_ALLGATHER,
    RL_OP_REDUCE_SCATTER,
    RL_OP_BARRIER,
    RL_OP_SEND,
    RL_OP_RECV,
    RL_OP_ALLTOALL,
    RL_OP_GATHER,
    RL_OP_SCATTER,
    RL_OP_GROUP, /* the calls of one ringlet_group_start/end on one communicator */
} rl_op_kind;

/* "allreduce", ...; "?" out of range. */
static inline const char *rl_op_name(rl_op_kind k) {
    static const char *const names[] = {"allreduce", "broadcast", "reduce", "allgather", "reduce_scatter", "barrier",
                                        "send",      "recv",      "alltoall", "gather", "scatter",        "group"};
    return (unsigned)k < sizeof names / sizeof names[0] ? names[k] : "?";
}

/* The channel of a message (rl_treq.chan, transport.h): what it belongs to, the same on
 * both ends: the operation kind + 1 (0: none given). Sends and receives, grouped or not,
 * and all-to-all, gather and scatter share one: the last three frame their messages as
 * sends and receives (xchg.h), so that either matches the other (the torch backend takes
 * one or the other by each rank's own tensors). */
static inline unsigned char rl_op_chan(rl_op_kind k) {
    int p2p = k == RL_OP_RECV || k == RL_OP_GROUP || k == RL_OP_ALLTOALL || k == RL_OP_GATHER || k == RL_OP_SCATTER;
    return (unsigned char)((p2p ? RL_OP_SEND : k) + 1);
}
/* For messages: "allreduce", "send, recv, alltoall, gather or scatter", ... */
static inline const char *rl_chan_name(unsigned chan) {
    return chan == 0                          ? "none"
           : chan == rl_op_chan(RL_OP_SEND) ? "send, recv, alltoall, gather or scatter"
                                              : rl_op_name((rl_op_kind)(chan - 1));
}

#endif
