/* The pipelined exchange every ring algorithm (and point to point on device memory)
 * runs: this rank receives a sequence of messages from one peer and sends a sequence to
 * another, chunk by chunk, with several chunks in flight in each direction, so that
 * the network, the peer and the local work overlap.
 *
 * The algorithm says where chunk i goes and comes from (recv_at, send_at) and what to
 * do once receive i landed in a staging slot (process: reduce it into place). Send i
 * may wait for receive i - lag to be processed (send_dep), which is how data flows
 * round a ring; receive i may wait for send i - recv_lag to complete (recv_lag > 0:
 * it overwrites memory that send reads).
 *
 * Host memory: a chunk is sent straight from the user's buffer and received into place
 * or into a staging slot (a transport that lends its own memory, shared memory, lends
 * it instead, and process reads it there).
 * Device memory: a chunk is copied by the device into a pinned send slot, then sent; a
 * received chunk lands in a pinned receive slot, and the device copies it into place or
 * process enqueues the reduction kernel that reads it there. The copies and kernels run
 * on the communicator's two streams while the transports move other chunks. */
#ifndef RINGLET_PIPE_H
#define RINGLET_PIPE_H

#include "comm.h"
#include "mem.h"

/* count elements cut into nseg segments, each cut into chunks of ce elements. */
typedef struct rl_geom {
    size_t es;        /* element size */
    size_t unit;      /* segments are cut at multiples of unit elements (16 bytes' worth, or 1) */
    size_t base, rem; /* segment s has base + (s < rem) units ... */
    size_t tail;      /* ... and the last one these elements more (count % unit) */
    size_t ce;        /* elements per chunk */
    size_t nc;        /* chunks per segment (of the largest) */
    int nseg;
} rl_geom;

/* equal_blocks: nseg segments of count elements each (all-gather blocks); else count
 * split as evenly as possible in whole 16-byte units (where the element size divides 16),
 * the remainder to the last segment: every segment then starts at the buffer's offset mod
 * 16, as the staging slots do (aligned), so a reduction of its chunks can take the
 * kernels' 16-byte loads (a misaligned pair of operands takes one element at a time). */
rl_geom rl_geom_make(size_t count, int nseg, size_t es, size_t chunk_bytes, int equal_blocks);
/* Element offset and length of chunk j of segment s (length 0 past the segment's end). */
void rl_geom_chunk(const rl_geom *g, int s, size_t j, size_t *off, size_t *len);
/* Elements of segment s. */
size_t rl_geom_seg_len(const rl_geom *g, int s);

/* The chunk size for an exchange whose longest step moves step_bytes: a quarter of a step,
 * so that a middle-sized call still keeps several chunks in flight, in whole 4 KiB, at
 * least the communicator's chunk_floor (RL_CHUNK_FLOOR over shared memory, its chunk_bytes
 * over a network) and at most its chunk_bytes (which RINGLET_CHUNK_SIZE fixes for every call). The
 * same on every rank. */
#define RL_CHUNK_FLOOR ((size_t)64 << 10)
size_t rl_chunk_for(const struct ringlet_comm *c, size_t step_bytes);

typedef struct rl_pipe rl_pipe;
struct rl_pipe {
    struct ringlet_comm *c;
    const struct ringlet_request *r;
    const struct ringlet_request *r_recv; /* the receives' operation, when not r (a send/receive pair) */
    rl_mem *mem;
    int lane;         /* device staging: which of the communicator's lanes (devcomm.h) */
    int send_peer, recv_peer;
    size_t nrecv, nsend;
    size_t lag;       /* send i waits for receive i - lag to be processed (if send_dep) */
    int send_dep;
    size_t recv_lag;  /* > 0: receive i waits until send i - recv_lag completed */
    /* Where chunk i goes (dst NULL: a staging slot, then process) and comes from. */
    void (*recv_at)(rl_pipe *p, size_t i, void **dst, size_t *bytes);
    void (*send_at)(rl_pipe *p, size_t i, const void **src, size_t *bytes);
    /* Receive i (dst NULL) is in slot: reduce it into place through p->mem. */
    void (*process)(rl_pipe *p, size_t i, const void *slot);
    /* Host memory, optional: where receive i (dst NULL) may land instead of a staging
     * slot when the transport lends none (NULL: a slot); process then gets it as slot. */
    void *(*recv_into)(rl_pipe *p, size_t i);
    /* Host memory: the receive staging slots (nslots x chunk_bytes); NULL: the
     * communicator's. Two exchanges that run at once need their own. */
    char *host_slots;
    /* the algorithm's own */
    rl_geom g;
    int P, q;
    int k0;      /* all-reduce: the first of the steps this exchange runs */
    int avg_div; /* all-reduce with avg: the divisor at the last reduce-scatter step (0: none) */
    char *work;
};

/* Runs the exchange to the end, or fails the communicator (rl_comm_op_failed) and
 * returns its code with the message in err (RL_MSG_MAX). Device work it enqueued may
 * still run: the caller drains the streams (rl_devcomm_drain) before reusing memory. */
ringlet_result_t rl_pipe_run(rl_pipe *p, char *err);
/* n exchanges at once (each on its own lane, with its own peers), to the end or the
 * first failure (then all stop). */
ringlet_result_t rl_pipes_run(rl_pipe *pipes, int n, char *err);

/* The ring all-reduce (ring.c) as an exchange: steps [k0, k0 + nsteps) of r on a ring
 * of P ranks where this one is at position q, with p's peers, memory and lane set by
 * the caller. Steps 0..P-2 are the reduce-scatter (position q ends with segment q+1 of
 * count cut in P reduced in recvbuf), P-1..2P-3 the all-gather. avg: the reduced
 * segment is divided by avg_div at step P-2 (0: not divided here). */
void rl_ring_allreduce_steps(rl_pipe *p, const struct ringlet_request *r, int P, int q, int k0, int nsteps,
                             int avg_div, size_t chunk_bytes);
void rl_ring_ar_recv_at(rl_pipe *p, size_t i, void **dst, size_t *bytes);
void rl_ring_ar_send_at(rl_pipe *p, size_t i, const void **src, size_t *bytes);
void rl_ring_ar_process(rl_pipe *p, size_t i, const void *slot);
void *rl_ring_ar_recv_into(rl_pipe *p, size_t i);

#endif
