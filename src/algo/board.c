#include "board.h"

#include <stdio.h>
#include <string.h>

#include "conn.h"
#include "doorbell.h"
#include "failure.h"
#include "trace.h"
#include "util.h"
#include "wait.h"

int rl_board_fits(struct ringlet_comm *c, int device, size_t pub_bytes) {
    return c->board_bytes && pub_bytes <= c->board_bytes && c->nranks <= RL_BOARD_MAX_RANKS &&
           (device ? c->board_device : c->board_host);
}

/* The wait's state: peers before `next` (in rank order, this rank skipped) have marked
 * call seq. */
typedef struct {
    rl_board_slot *const *slot;
    int nranks, me, next;
    uint64_t seq;
} board_wait;

static int all_marked(void *arg) {
    board_wait *w = arg;
    int s = (int)(w->seq & 1);
    for (; w->next < w->nranks; w->next++)
        if (w->next != w->me && atomic_load_explicit(&w->slot[w->next][s].seq, memory_order_acquire) != w->seq) return 0;
    return 1;
}

ringlet_result_t rl_board_exchange(struct ringlet_comm *c, const struct ringlet_request *r, const void *pub,
                                   size_t pub_bytes, int nsend, rl_board_read *reads, int n, char *err) {
    int P = c->nranks, me = c->rank;
    const char *opname = rl_op_name(r->kind);
    double t0 = c->trace ? rl_now() : 0;
    char cerr[RL_ERR_MAX]; /* a string: only its first byte cleared */
    cerr[0] = 0;
    ringlet_result_t rc = RINGLET_SUCCESS;
    rl_board_slot *slot[RL_BOARD_MAX_RANKS];
    rl_bell *bell[RL_BOARD_MAX_RANKS];
    for (int q = 0; q < P && !rc; q++)
        if (!(slot[q] = rl_doorbell_board(c, q, &bell[q]))) {
            rc = RINGLET_ERR_SYSTEM;
            snprintf(cerr, sizeof cerr, "rank %d's board (its doorbell's shared memory) cannot be mapped", q);
        }
    if (rc) {
        /* Most often the rank has left (destroyed the communicator, its board with it) after
         * a failure the monitor is about to name: that is the cause to report. */
        rl_comm_await_cause(c);
        return rl_comm_op_failed(c, r, rc, cerr, err);
    }

    board_wait w = {slot, P, me, 0, ++c->board_seq};
    int s = (int)(w.seq & 1);
    for (int i = 0; i < n; i++) rl_fault_point(&c->fault, me, opname, r->seq, RL_FAULT_RECV);
    for (int i = 0; i < nsend; i++) rl_fault_point(&c->fault, me, opname, r->seq, RL_FAULT_SEND);
    if (pub_bytes) memcpy(slot[me][s].data, pub, pub_bytes);
    /* the call's size, which every rank knows alike (what a rank publishes depends on its
     * role: a broadcast's root publishes, the others nothing) */
    uint64_t call_bytes = (uint64_t)r->count * ringlet_datatype_size(r->dtype);
    slot[me][s].bytes = call_bytes;
    slot[me][s].kind = (int32_t)r->kind;
    slot[me][s].root = rl_op_rooted(r->kind) ? r->root : -1;
    atomic_store_explicit(&slot[me][s].seq, w.seq, memory_order_release);
    /* Wakes the peers that sleep (rl_bell_ring_sleeper's pairing, with one fence for all). */
    atomic_thread_fence(memory_order_seq_cst);
    for (int q = 0; q < P; q++)
        if (q != me && atomic_load(&bell[q]->sleepers)) rl_bell_ring(bell[q]);

    double last = 0; /* when a peer last marked; the clock is read only while waiting */
    int seen = 0;
    for (;;) {
        unsigned gen = rl_comm_gen(c);
        if (all_marked(&w)) break;
        if (atomic_load(&c->failed)) {
            rc = c->fail_code ? c->fail_code : RINGLET_ERR_REMOTE;
            break;
        }
        double now = rl_now();
        if (last == 0 || w.next > seen) last = now; /* progress: the deadline restarts */
        seen = w.next;
        if (now - last > c->timeout_s) {
            rc = RINGLET_ERR_TIMEOUT;
            snprintf(cerr, sizeof cerr, "no progress for %.0f s (RINGLET_TIMEOUT) waiting for rank %d's part (shared memory)",
                     c->timeout_s, w.next);
            break;
        }
        rl_comm_wait_peer_for(c, gen, 100, all_marked, &w);
    }
    if (rc) return rl_comm_op_failed(c, r, rc, cerr, err);
    /* Every rank compares every peer's call with its own, so each fails alike; the
     * verdict is the call's error even where a peer that found it first and aborted is
     * already known to have failed (as a send's length mismatch, p2p.c). */
    for (int q = 0; q < P; q++) {
        const rl_board_slot *o = &slot[q][s];
        if (q == me || (o->bytes == call_bytes && o->kind == slot[me][s].kind && o->root == slot[me][s].root)) continue;
        snprintf(cerr, sizeof cerr,
                 "mismatched calls: rank %d called %s (%llu bytes, root %d) where this rank called %s (%llu bytes, "
                 "root %d); RINGLET_CHECK=1 compares every call",
                 q, rl_op_name((rl_op_kind)o->kind), (unsigned long long)o->bytes, (int)o->root, opname,
                 (unsigned long long)call_bytes, (int)slot[me][s].root);
        rl_comm_fail(c, RINGLET_ERR_INVALID_USAGE, "%s #%llu: %s", opname, (unsigned long long)r->seq, cerr);
        snprintf(err, RL_MSG_MAX, "%s #%llu (count %zu) failed: %.400s", opname, (unsigned long long)r->seq, r->count,
                 cerr);
        return RINGLET_ERR_INVALID_USAGE;
    }

    for (int i = 0; i < n; i++) {
        const unsigned char *at = slot[reads[i].peer][s].data + reads[i].off;
        if (reads[i].buf && reads[i].bytes) memcpy(reads[i].buf, at, reads[i].bytes);
        reads[i].data = reads[i].buf ? reads[i].buf : at;
    }
    if (c->trace) {
        double t1 = rl_now();
        rl_trace_span(c->trace, RL_LANE_SEND, "publish", t0, t1, opname, r->seq, 0, pub_bytes, -1);
        for (int i = 0; i < n; i++)
            rl_trace_span(c->trace, RL_LANE_RECV, "read", t0, t1, opname, r->seq, i, reads[i].bytes, reads[i].peer);
    }
    return RINGLET_SUCCESS;
}
