/* Small messages in one exchange (the latency path).
 *
 * A ring needs 2(P-1) steps for an all-reduce and P-1 for an all-gather, each a
 * message round trip; under RINGLET_ONESHOT_BYTES every rank instead sends its whole
 * contribution straight to every rank that needs it, all at once, and reduces what it
 * received itself. One message latency instead of 2(P-1), at the cost of P-1 times
 * the traffic, which is nothing at these sizes.
 *
 *   all-reduce      each rank sends its buffer to all; each reduces all P in rank order
 *   all-gather      each rank sends its block to all (barrier: a 1-byte all-gather)
 *   broadcast       the root sends to all
 *   reduce          all send to the root, which reduces in rank order
 *   reduce-scatter  each rank sends block q to rank q, which reduces in rank order
 *
 * Reducing in rank order (0 op 1 op ... op P-1) makes every rank's result identical,
 * bit for bit. Every rank picks the same algorithm for a call from the same inputs
 * (kind, bytes, P and the environment), so RINGLET_ALGO must be the same on all ranks.
 *
 * Device buffers: this rank's contribution is copied by the device into pinned memory,
 * exchanged from there into pinned blocks, and the device reduces the blocks in rank
 * order (or copies them into place): the CUDA kernels read the pinned blocks directly.
 *
 * Between ranks of one host over shared memory, a call that publishes at most
 * RINGLET_BOARD_BYTES (16 KiB) goes through the board (board.h) instead of messages.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "board.h"
#include "collective.h"
#include "conn.h"
#include "devcomm.h"
#include "failure.h"
#include "trace.h"
#include "util.h"
#include "wait.h"

#define ONESHOT_MAX_PEERS (RL_ONESHOT_MAX_RANKS - 1)

typedef struct {
    int peer;
    void *buf;
    size_t bytes;
    rl_conn *conn;
    int map;            /* receive: take a slot the transport lends, where it can (buf otherwise) */
    int lent;           /* ... it did: release it when done */
    const void *data;   /* receive, done: where the bytes are (buf, or the lent slot) */
} xfer;

int rl_oneshot_fits(const struct ringlet_comm *c, const struct ringlet_request *r) {
    int P = c->nranks, mode = c->algo;
    if (P < 2 || mode == RL_ALGO_RING || P > ONESHOT_MAX_PEERS + 1 || r->kind == RL_OP_SEND || r->kind == RL_OP_RECV) return 0;
    if (mode == RL_ALGO_ONESHOT) return 1;
    if (P > c->oneshot_max_ranks) return 0;
    if (r->kind == RL_OP_BARRIER) return 1;
    size_t bytes = r->count * ringlet_datatype_size(r->dtype);
    /* What one rank receives: P-1 blocks for the reducing and gathering ones. */
    if (r->kind == RL_OP_ALLGATHER || r->kind == RL_OP_REDUCE_SCATTER) bytes *= (size_t)P;
    return bytes <= c->oneshot_bytes;
}

/* A message over this many bytes moves in pieces of it: the pieces k of every message
 * make wave k, and a wave done is progress. The deadline counts time without progress:
 * a whole message taking longer than RINGLET_TIMEOUT to move (RINGLET_ALGO=oneshot or
 * star at large sizes, over a slow link) failed while its bytes were flowing. */
#define ONESHOT_PIECE ((size_t)1 << 20)

/* The bytes of a message of len bytes that the wave at off moves. */
static size_t piece_len(size_t len, size_t off) { return len - off < ONESHOT_PIECE ? len - off : ONESHOT_PIECE; }

/* A request this wave does not post (its message ended in an earlier one): done. */
static void treq_idle(rl_treq *t) {
    atomic_store(&t->status, RINGLET_SUCCESS);
    atomic_store_explicit(&t->pending, 0, memory_order_release);
}

/* Posts every receive, then every send, and waits for all of them (deadline and
 * failure as in the ring's engine), a wave of pieces at a time. The requests are the
 * caller's: a lent receive slot (a message of one piece only) stays valid until
 * release(rreq[i]). */
static ringlet_result_t exchange(struct ringlet_comm *c, const struct ringlet_request *r, xfer *sends, int ns,
                                 xfer *recvs, int nr, rl_treq *sreq, rl_treq *rreq, char *err) {
    double t0 = c->trace ? rl_now() : 0;
    char cerr[RL_ERR_MAX];
    cerr[0] = 0;
    ringlet_result_t rc = RINGLET_SUCCESS;
    int posted_r = 0, posted_s = 0;
    const char *opname = rl_op_name(r->kind);
    size_t most = 0;
    for (int i = 0; i < nr; i++) most = recvs[i].bytes > most ? recvs[i].bytes : most;
    for (int i = 0; i < ns; i++) most = sends[i].bytes > most ? sends[i].bytes : most;
    for (size_t off = 0; !rc && (off == 0 || off < most); off += ONESHOT_PIECE) {
        posted_r = posted_s = 0;
        for (int i = 0; i < nr; i++, posted_r++) {
            if (off && recvs[i].bytes <= off) {
                treq_idle(&rreq[i]);
                continue;
            }
            if (!off) rl_fault_point(&c->fault, c->rank, opname, r->seq, RL_FAULT_RECV);
            const rl_transport_ops *tp = recvs[i].conn->tp;
            size_t len = piece_len(recvs[i].bytes, off);
            rreq[i].chan = rl_op_chan(r->kind);
            recvs[i].lent = recvs[i].map && most <= ONESHOT_PIECE && tp->irecv_map &&
                            tp->irecv_map(recvs[i].conn->h, recvs[i].bytes, &rreq[i]) == RINGLET_SUCCESS;
            if (!recvs[i].lent) tp->irecv(recvs[i].conn->h, (char *)recvs[i].buf + off, len, NULL, &rreq[i]);
        }
        for (int i = 0; i < ns; i++, posted_s++) {
            if (off && sends[i].bytes <= off) {
                treq_idle(&sreq[i]);
                continue;
            }
            if (!off) rl_fault_point(&c->fault, c->rank, opname, r->seq, RL_FAULT_SEND);
            size_t len = piece_len(sends[i].bytes, off);
            sreq[i].chan = rl_op_chan(r->kind);
            sends[i].conn->tp->isend(sends[i].conn->h, (const char *)sends[i].buf + off, len, NULL, &sreq[i]);
        }
        double last = 0; /* when a request last completed, or the wave began (read only while waiting) */
        int waiting = -1;  /* index of a request not done: receives first, then sends + nr */
        int first = 0;     /* requests before this one are done */
        while (!rc) {
            unsigned gen = rl_comm_gen(c);
            rl_comm_progress(c);
            waiting = -1;
            for (int i = first; i < nr + ns && waiting < 0; i++) {
                rl_treq *t = i < nr ? &rreq[i] : &sreq[i - nr];
                if (!rl_treq_done(t)) waiting = i;
                else if (atomic_load(&t->status) != RINGLET_SUCCESS) {
                    rc = atomic_load(&t->status);
                    snprintf(cerr, sizeof cerr, "%s", t->err);
                }
            }
            if (rc || waiting < 0) break;
            if (atomic_load(&c->failed)) {
                rc = c->fail_code ? c->fail_code : RINGLET_ERR_REMOTE;
                break;
            }
            double now = rl_now();
            if (last == 0 || waiting > first) last = now; /* progress: the deadline restarts */
            first = waiting;
            if (now - last > c->timeout_s) {
                rc = RINGLET_ERR_TIMEOUT;
                const xfer *x = waiting < nr ? &recvs[waiting] : &sends[waiting - nr];
                char stall[RL_ERR_MAX];
                snprintf(cerr, sizeof cerr, "no progress for %.0f s (RINGLET_TIMEOUT) waiting to %s rank %d%s",
                         c->timeout_s, waiting < nr ? "receive from" : "send to", x->peer,
                         rl_conn_stall(x->conn, stall, sizeof stall));
                break;
            }
            rl_comm_wait_peer(c, gen, 100);
        }
    }
    if (!rc) {
        for (int i = 0; i < nr; i++) recvs[i].data = recvs[i].lent ? rreq[i].mapped : recvs[i].buf;
        if (c->trace) {
            double t1 = rl_now();
            for (int i = 0; i < nr; i++) rl_trace_span(c->trace, RL_LANE_RECV, "recv", t0, t1, opname, r->seq, i, recvs[i].bytes, recvs[i].peer);
            for (int i = 0; i < ns; i++) rl_trace_span(c->trace, RL_LANE_SEND, "send", t0, t1, opname, r->seq, i, sends[i].bytes, sends[i].peer);
        }
        return RINGLET_SUCCESS;
    }
    /* Fail the communicator (a dead peer named by the monitor wins), stop the
     * transfers still on our buffers, then report. */
    rc = rl_comm_op_failed(c, r, rc, cerr, err);
    for (int i = 0; i < posted_r; i++) {
        rl_comm_wait_treq(c, &rreq[i]);
        if (recvs[i].lent && rreq[i].mapped) recvs[i].conn->tp->release(recvs[i].conn->h, &rreq[i]);
    }
    for (int i = 0; i < posted_s; i++)
        rl_comm_wait_treq(c, &sreq[i]);
    return rc;
}

/* The exchange through the board (board.h): the same blocks, read where the peers
 * published them (map) or copied into buf. */
static ringlet_result_t board_exchange(struct ringlet_comm *c, const struct ringlet_request *r, const void *pub,
                                       size_t pub_bytes, int ns, xfer *recvs, int nr, char *err) {
    rl_board_read rd[ONESHOT_MAX_PEERS];
    size_t off = r->kind == RL_OP_REDUCE_SCATTER ? (size_t)c->rank * r->count * ringlet_datatype_size(r->dtype) : 0;
    for (int i = 0; i < nr; i++)
        rd[i] = (rl_board_read){.peer = recvs[i].peer, .buf = recvs[i].map ? NULL : recvs[i].buf, .off = off,
                                .bytes = r->kind == RL_OP_BARRIER ? 0 : recvs[i].bytes};
    ringlet_result_t rc = rl_board_exchange(c, r, pub, pub_bytes, ns, rd, nr, err);
    for (int i = 0; i < nr && !rc; i++) recvs[i].data = rd[i].data;
    return rc;
}

/* dst = blk[0] op blk[1] op ... op blk[P-1] in one pass (one kernel on a device), then
 * / P for avg. dst may be one of the blocks. */
static void reduce_in_order(struct ringlet_comm *c, const struct ringlet_request *r, rl_mem *mem, void *dst,
                            const void *const *blk, size_t bytes) {
    double t0 = c->trace ? rl_now() : 0;
    int P = c->nranks;
    rl_mem_reduce_many(mem, dst, blk, P, r->count, r->dtype, r->op);
    if (r->op == RINGLET_AVG) rl_mem_divide(mem, dst, r->count, r->dtype, P);
    if (c->trace) rl_trace_span(c->trace, RL_LANE_REDUCE, "reduce", t0, rl_now(), rl_op_name(r->kind), r->seq, 0, bytes, -1);
}

/* Where this rank's contribution is read from: the user's buffer (host), or a pinned
 * copy the device made (device: the sends and the reduction read it there). */
static ringlet_result_t stage_input(struct ringlet_comm *c, rl_mem *mem, const void *src, size_t bytes, char *pinned,
                                    const char **out, char *err) {
    if (!mem->dev) {
        *out = src;
        return RINGLET_SUCCESS;
    }
    struct rl_devcomm *d = mem->dev;
    *out = pinned;
    if (!bytes) return RINGLET_SUCCESS;
    if (d->d->memcpy_async(pinned, src, bytes, d->s_send) != RL_DEV_OK || d->d->event_record(d->ev_misc, d->s_send) != RL_DEV_OK)
        return rl_devcomm_error("copy of the input to pinned memory", err);
    return rl_devcomm_wait(c, d->ev_misc, "the copy of the input to pinned memory", err);
}

/* Whether this rank sends to (receives from) q in the one-shot form of a call of this kind. */
static void roles(rl_op_kind kind, int root, int me, int q, int *send, int *recv) {
    switch (kind) {
    case RL_OP_REDUCE:
        *send = me != root && q == root;
        *recv = me == root;
        break;
    case RL_OP_BROADCAST:
        *send = me == root;
        *recv = me != root && q == root;
        break;
    default: /* all-reduce, reduce-scatter, all-gather, barrier: everybody with everybody */
        *send = *recv = 1;
        break;
    }
}

/* The one-shot form of a call of this kind and root, from sendbuf into recvbuf, for the
 * call r (whose number, count, datatype and op it takes; messages name r's kind); no_board:
 * by messages even where the board would take it (the board has one round per call). */
static ringlet_result_t oneshot_as(struct ringlet_comm *c, struct ringlet_request *r, rl_mem *mem, rl_op_kind kind,
                                   int root, const void *sendbuf, void *recvbuf, int no_board, char *err) {
    int P = c->nranks, me = c->rank, ns = 0, nr = 0;
    size_t es = ringlet_datatype_size(r->dtype), bytes = r->count * es;
    xfer s[ONESHOT_MAX_PEERS], v[ONESHOT_MAX_PEERS];
    if (kind != RL_OP_ALLREDUCE && kind != RL_OP_REDUCE_SCATTER && kind != RL_OP_REDUCE &&
        kind != RL_OP_BROADCAST && kind != RL_OP_ALLGATHER && kind != RL_OP_BARRIER)
        return snprintf(err, RL_MSG_MAX, "internal: %s has no one-shot form", rl_op_name(r->kind)), RINGLET_ERR_INTERNAL;

    /* Connections first, sending ones before receiving ones: a connect never waits for
     * the peer, an accept waits for the peer's connect, so this order cannot deadlock
     * when the connections are made here for the first time. The message buffers are
     * strings: only their first bytes are cleared (zeroing them whole cost a small call
     * about as much as its reduction). */
    char cerr[RL_ERR_MAX];
    cerr[0] = 0;
    ringlet_result_t rc = RINGLET_SUCCESS;
    int dev = mem->dev != NULL;
    /* What this rank would send, in one piece: the board takes it where it fits (every
     * rank decides alike: the size is the largest any rank publishes). */
    size_t pub_bytes = kind == RL_OP_BARRIER ? 0 : kind == RL_OP_REDUCE_SCATTER ? (size_t)P * bytes : bytes;
    int board = !no_board && rl_board_fits(c, dev, pub_bytes), direct = dev && !board;
    for (int pass = 0; pass < 2 && !rc; pass++)
        for (int q = 0; q < P && !rc; q++) {
            int snd, rcv;
            if (q == me) continue;
            roles(kind, root, me, q, &snd, &rcv);
            if (pass == 0 && snd) {
                s[ns] = (xfer){.peer = q, .bytes = bytes};
                if (!board && !(rc = rl_comm_send_conn(c, q, dev, &s[ns].conn, cerr))) direct &= s[ns].conn->tp->device_memory;
                ns++;
            } else if (pass == 1 && rcv) {
                v[nr] = (xfer){.peer = q, .bytes = bytes};
                if (!board && !(rc = rl_comm_recv_conn(c, q, dev, &v[nr].conn, cerr))) direct &= v[nr].conn->tp->device_memory;
                nr++;
            }
        }
    if (rc) return rl_comm_op_failed(c, r, rc, cerr, err);
    /* Device buffers go three ways: every peer over a transport that moves device memory
     * (direct: from and into device memory; the user's earlier stream work must be done
     * first, those transports do not wait for it), or staged through pinned memory. */
    int staged = dev && !direct;
    if (direct && r->event && (rc = rl_devcomm_wait(c, r->event, "the stream's work before the call", cerr)))
        return rl_comm_op_failed(c, r, rc, cerr, err);

    int reduces = kind == RL_OP_ALLREDUCE || kind == RL_OP_REDUCE_SCATTER ||
                  (kind == RL_OP_REDUCE && root == me);
    /* tmp holds the P blocks a reducing rank combines (staged: also every block received,
     * and, after them, this rank's input). */
    char *tmp = NULL, *out = NULL;
    size_t in_bytes = (size_t)P * bytes, out_bytes = kind == RL_OP_REDUCE_SCATTER ? (size_t)P * bytes : bytes;
    char e[RL_MSG_MAX];
    e[0] = 0;
    if (staged) {
        if ((tmp = rl_devcomm_pinned(c, in_bytes + out_bytes, e))) out = tmp + in_bytes;
    } else if (reduces) {
        tmp = direct ? rl_devcomm_scratch(c, in_bytes, e) : rl_comm_temp(c, in_bytes);
    }
    if ((staged || reduces) && !tmp)
        return snprintf(err, RL_MSG_MAX, "%s: out of memory for scratch%s%.300s", rl_op_name(r->kind), *e ? ": " : "", e),
               dev ? RINGLET_ERR_CUDA : RINGLET_ERR_SYSTEM;
    const char *input = sendbuf;
    if (staged && kind != RL_OP_BARRIER && (ns > 0 || reduces) &&
        (rc = stage_input(c, mem, sendbuf, out_bytes, out, &input, err)))
        return rc;

    unsigned char bar_in = 0, bar_out[ONESHOT_MAX_PEERS + 1];
    for (int i = 0; i < ns; i++) {
        int q = s[i].peer;
        s[i].buf = kind == RL_OP_BARRIER ? (void *)&bar_in
                   : kind == RL_OP_REDUCE_SCATTER ? (char *)input + (size_t)q * bytes
                                                     : (void *)input;
        if (kind == RL_OP_BARRIER) s[i].bytes = 1;
    }
    for (int i = 0; i < nr; i++) {
        int q = v[i].peer;
        char *blk = tmp ? tmp + (size_t)q * bytes : NULL;
        switch (kind) {
        case RL_OP_BROADCAST: v[i].buf = staged ? blk : recvbuf; break;
        case RL_OP_ALLGATHER: v[i].buf = staged ? blk : (char *)recvbuf + (size_t)q * bytes; break;
        case RL_OP_BARRIER: v[i].buf = &bar_out[q], v[i].bytes = 1; break;
        default:
            /* A block to reduce: read where the transport lends it, if it lends memory of
             * the kind the reduction runs on (host memory on the host, device memory on
             * the device). */
            v[i].buf = blk;
            v[i].map = staged ? 0 : board || v[i].conn->tp->device_memory == dev;
            break;
        }
    }
    /* The messages' requests live in the communicator: 2 x 64 of them (1.6 KB each) on the
     * stack spread every call over 50 pages. */
    if (!board && !c->oneshot_treqs && !(c->oneshot_treqs = calloc(2 * (size_t)(P - 1), sizeof(rl_treq))))
        return snprintf(err, RL_MSG_MAX, "%s: out of memory for requests", rl_op_name(r->kind)), RINGLET_ERR_SYSTEM;
    rl_treq *sreq = c->oneshot_treqs, *rreq = board ? NULL : c->oneshot_treqs + (P - 1);
    rc = board ? board_exchange(c, r, input, ns ? pub_bytes : 0, ns, v, nr, err)
               : exchange(c, r, s, ns, v, nr, sreq, rreq, err);
    if (rc) return rc;
    switch (kind) {
    case RL_OP_ALLREDUCE:
    case RL_OP_REDUCE_SCATTER:
    case RL_OP_REDUCE:
        if (reduces) {
            /* Rank order; this rank's own block is read where it is (in place, sendbuf is
             * also the result: the one-pass reduction reads every block first). */
            const void *blk[ONESHOT_MAX_PEERS + 1];
            blk[me] = kind == RL_OP_REDUCE_SCATTER ? input + (size_t)me * bytes : input;
            for (int i = 0; i < nr; i++) blk[v[i].peer] = v[i].data;
            reduce_in_order(c, r, mem, recvbuf, blk, bytes);
        }
        break;
    case RL_OP_BROADCAST:
        if (me == root) rl_mem_copy(mem, recvbuf, sendbuf, bytes);
        else if (staged) rl_mem_copy(mem, recvbuf, tmp + (size_t)root * bytes, bytes);
        break;
    case RL_OP_ALLGATHER:
        rl_mem_copy(mem, (char *)recvbuf + (size_t)me * bytes, sendbuf, bytes);
        for (int q = 0; q < P && staged; q++)
            if (q != me) rl_mem_copy(mem, (char *)recvbuf + (size_t)q * bytes, tmp + (size_t)q * bytes, bytes);
        break;
    default:
        break;
    }
    /* Lent slots go back once the reduction that reads them is done (device: its kernel). */
    int any_lent = 0;
    for (int i = 0; i < nr; i++) any_lent |= v[i].lent;
    if (any_lent && dev && !mem->rc) {
        char e2[RL_MSG_MAX];
        if (mem->dev->d->event_record(mem->dev->ev_misc, mem->dev->s_recv) != RL_DEV_OK)
            mem->rc = rl_devcomm_error("device", mem->err);
        else if ((rc = rl_devcomm_wait(c, mem->dev->ev_misc, "the reduction of lent slots", e2)))
            mem->rc = rc, snprintf(mem->err, sizeof mem->err, "%.400s", e2);
    }
    for (int i = 0; i < nr; i++)
        if (v[i].lent) v[i].conn->tp->release(v[i].conn->h, &rreq[i]);
    if (mem->rc) return snprintf(err, RL_MSG_MAX, "%s #%llu: %.400s", rl_op_name(r->kind), (unsigned long long)r->seq, mem->err), mem->rc;
    return RINGLET_SUCCESS;
}

/* oneshot_as's all-reduce on host buffers through the board, without its general
 * set-up (the transfers' table, both passes over the peers, the scratch): the same
 * exchange and the same reduction, so a rank that takes either meets one that takes
 * the other. The 8-byte all-reduce is the latency path: that set-up was about a fifth
 * of its instructions. */
static ringlet_result_t board_allreduce(struct ringlet_comm *c, struct ringlet_request *r, rl_mem *mem, size_t bytes,
                                        char *err) {
    int P = c->nranks, me = c->rank, n = 0;
    rl_board_read rd[ONESHOT_MAX_PEERS];
    for (int q = 0; q < P; q++)
        if (q != me) {
            rd[n].peer = q;
            rd[n].buf = NULL; /* read in place */
            rd[n].off = 0;
            rd[n].bytes = bytes;
            n++;
        }
    ringlet_result_t rc = rl_board_exchange(c, r, r->sendbuf, bytes, n, rd, n, err);
    if (rc) return rc;
    const void *blk[ONESHOT_MAX_PEERS + 1];
    blk[me] = r->sendbuf;
    for (int i = 0; i < n; i++) blk[rd[i].peer] = rd[i].data;
    reduce_in_order(c, r, mem, r->recvbuf, blk, bytes);
    if (mem->rc) return snprintf(err, RL_MSG_MAX, "%s #%llu: %.400s", rl_op_name(r->kind), (unsigned long long)r->seq, mem->err), mem->rc;
    return RINGLET_SUCCESS;
}

ringlet_result_t rl_run_oneshot(struct ringlet_comm *c, struct ringlet_request *r, rl_mem *mem, char *err) {
    if (r->kind == RL_OP_ALLREDUCE && !mem->dev) {
        size_t bytes = r->count * ringlet_datatype_size(r->dtype);
        if (rl_board_fits(c, 0, bytes)) return board_allreduce(c, r, mem, bytes, err);
    }
    return oneshot_as(c, r, mem, r->kind, r->root, r->sendbuf, r->recvbuf, 0, err);
}

int rl_star_fits(const struct ringlet_comm *c, const struct ringlet_request *r) {
    int P = c->nranks;
    /* Nothing of this rank's own (its buffers' kind): ranks of one call may differ there. */
    if (r->kind != RL_OP_ALLREDUCE || P < 2 || P > ONESHOT_MAX_PEERS + 1 || r->count == 0) return 0;
    if (c->algo == RL_ALGO_STAR) return 1;
    if (c->algo != RL_ALGO_AUTO) return 0;
    /* Where every message costs system calls (some peer over TCP) and the ranks of a host
     * outnumber its cores, the work of all messages together is the call's time: the
     * one-shot path's P(P-1) messages against the star's 2(P-1) (on 2 cores, 8 B to 64
     * KiB: 0.55-0.9x the time at 3 and 5 ranks). At 2 ranks the one-shot path's two
     * messages cross at once. This goes before recursive doubling too, whose P log2 P
     * messages of the whole buffer are more work in all (at 4 ranks on 2 cores, alternated:
     * 8 B to 4 KiB as fast or faster, 32 and 64 KiB 0.75-0.9x doubling's time). */
    size_t bytes = r->count * ringlet_datatype_size(r->dtype);
    return c->tcp_peers && c->crowded && P >= 3 && P <= c->oneshot_max_ranks && bytes <= c->oneshot_bytes;
}

/* The all-reduce through rank 0: every other rank sends its buffer to rank 0, which
 * reduces the P buffers in rank order (so every rank ends with its bits) and sends the
 * result back to each. Two message latencies instead of one, but 2(P-1) messages in all
 * instead of P(P-1). On a device, rank 0's reduction is done before its result is sent
 * (the transports and the staging copy do not wait for the reduction's stream). */
ringlet_result_t rl_run_star(struct ringlet_comm *c, struct ringlet_request *r, rl_mem *mem, char *err) {
    ringlet_result_t rc = oneshot_as(c, r, mem, RL_OP_REDUCE, 0, r->sendbuf, r->recvbuf, 1, err);
    if (!rc && mem->dev) rc = rl_mem_fence(c, mem, err);
    if (!rc) rc = oneshot_as(c, r, mem, RL_OP_BROADCAST, 0, r->recvbuf, r->recvbuf, 1, err);
    return rc;
}
