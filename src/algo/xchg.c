#include "xchg.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "p2p.h"
#include "pipe.h"
#include "util.h"

/* The messages of one direction with one peer, as one sequence of pieces (as many as the
 * call has: its slices of one arena per exchange). */
typedef struct {
    const rl_msg **msg;
    size_t *first; /* piece index where each message starts; [n] = total */
    int n, cap;
} seq_t;

typedef struct {
    seq_t send, recv;
} peer_t;

/* One exchange's sequences: what it sends to its send peer, what it receives from its
 * receive peer (the same peer, but for device rounds). */
typedef struct {
    const seq_t *send, *recv;
} ends_t;

/* Message and offset of piece i. */
static void locate(const seq_t *q, size_t i, const rl_msg **m, size_t *off, size_t *bytes) {
    int k = 0;
    while (k + 1 < q->n && q->first[k + 1] <= i) k++;
    size_t j = i - q->first[k];
    *m = q->msg[k];
    *off = j * RL_P2P_PIECE;
    *bytes = rl_p2p_piece_bytes((*m)->bytes, j);
}

static void x_send_at(rl_pipe *p, size_t i, const void **src, size_t *bytes) {
    const rl_msg *m;
    size_t off;
    locate(((ends_t *)p->work)->send, i, &m, &off, bytes);
    *src = (const char *)m->buf + off;
}

static void x_recv_at(rl_pipe *p, size_t i, void **dst, size_t *bytes) {
    const rl_msg *m;
    size_t off;
    locate(((ends_t *)p->work)->recv, i, &m, &off, bytes);
    *dst = (char *)m->buf + off;
}

static void add(seq_t *q, const rl_msg *m) {
    q->msg[q->n] = m;
    q->first[q->n + 1] = q->first[q->n] + rl_p2p_pieces(m->bytes);
    q->n++;
}

/* Gives every peer's sequences their slices of msgs and firsts (counted in cap). */
static void carve(peer_t *peers, int P, const rl_msg **msgs, size_t *firsts) {
    for (int q = 0; q < P; q++) {
        seq_t *qs[2] = {&peers[q].send, &peers[q].recv};
        for (int k = 0; k < 2; k++) {
            qs[k]->msg = msgs;
            qs[k]->first = firsts;
            msgs += qs[k]->cap;
            firsts += qs[k]->cap + 1;
        }
    }
}

/* Exchange with to and from (lane: device staging) in *p; 0 if there is nothing to move. */
static int set_pipe(rl_pipe *p, struct ringlet_comm *c, const struct ringlet_request *r, rl_mem *mem, int lane,
                    int to, int from, ends_t *e, const peer_t *peers) {
    e->send = &peers[to].send;
    e->recv = &peers[from].recv;
    if (!e->send->n && !e->recv->n) return 0;
    memset(p, 0, sizeof *p);
    p->c = c;
    p->r = r;
    p->mem = mem;
    p->lane = lane;
    p->send_peer = to;
    p->recv_peer = from;
    p->nsend = e->send->first[e->send->n];
    p->nrecv = e->recv->first[e->recv->n];
    p->send_at = x_send_at;
    p->recv_at = x_recv_at;
    p->work = (char *)e;
    p->g.es = 1;
    return 1;
}

/* Messages to this rank itself (a group's send and receive with self): the k-th send to
 * self is the k-th receive from self, of as many bytes and not overlapping it; copied when
 * copy is set, else only checked. */
ringlet_result_t rl_xchg_self(struct ringlet_comm *c, const struct ringlet_request *r, rl_mem *mem, const rl_msg *sends,
                              int ns, const rl_msg *recvs, int nr, int copy, char *err) {
    int self_s = 0, self_r = 0;
    for (int i = 0; i < ns; i++) self_s += sends[i].peer == c->rank;
    for (int i = 0; i < nr; i++) self_r += recvs[i].peer == c->rank;
    if (self_s != self_r)
        return snprintf(err, RL_MSG_MAX, "%s #%llu: %d sends to this rank itself but %d receives from it",
                        rl_op_name(r->kind), (unsigned long long)r->seq, self_s, self_r),
               RINGLET_ERR_INVALID_USAGE;
    for (int i = 0, j = 0; i < ns; i++) {
        if (sends[i].peer != c->rank) continue;
        while (recvs[j].peer != c->rank) j++;
        const rl_msg *v = &recvs[j++];
        if (v->bytes != sends[i].bytes)
            return snprintf(err, RL_MSG_MAX, "%s #%llu: a send of %zu bytes to this rank itself meets a receive of %zu "
                            "bytes", rl_op_name(r->kind), (unsigned long long)r->seq, sends[i].bytes, v->bytes),
                   RINGLET_ERR_INVALID_ARGUMENT;
        /* A copy between overlapping ranges: wrong data on the host, undefined on a device. */
        if (v->buf != sends[i].buf && rl_ranges_overlap(v->buf, v->bytes, sends[i].buf, v->bytes))
            return snprintf(err, RL_MSG_MAX, "%s #%llu: a send to this rank itself (%p) and its receive (%p) of %zu "
                            "bytes overlap", rl_op_name(r->kind), (unsigned long long)r->seq, sends[i].buf, v->buf,
                            v->bytes),
                   RINGLET_ERR_INVALID_ARGUMENT;
        if (copy && v->buf != sends[i].buf) rl_mem_copy(mem, v->buf, sends[i].buf, v->bytes);
    }
    return RINGLET_SUCCESS;
}

ringlet_result_t rl_run_peers(struct ringlet_comm *c, const struct ringlet_request *r, rl_mem *mem, const rl_msg *sends,
                              int ns, const rl_msg *recvs, int nr, char *err) {
    int P = c->nranks;
    peer_t *peers = calloc((size_t)P, sizeof *peers);
    rl_pipe *pipes = calloc((size_t)P, sizeof *pipes);
    ends_t *ends = calloc((size_t)P, sizeof *ends);
    const rl_msg **msgs = malloc(sizeof *msgs * (size_t)(ns + nr + 1));
    size_t *firsts = calloc((size_t)(ns + nr) + 2 * (size_t)P, sizeof *firsts);
    ringlet_result_t rc = RINGLET_SUCCESS;
    if (!peers || !pipes || !ends || !msgs || !firsts) {
        rc = RINGLET_ERR_SYSTEM;
        snprintf(err, RL_MSG_MAX, "%s #%llu: out of memory", rl_op_name(r->kind), (unsigned long long)r->seq);
    }
    if (!rc) rc = rl_xchg_self(c, r, mem, sends, ns, recvs, nr, 1, err);
    if (!rc) {
        for (int i = 0; i < ns; i++)
            if (sends[i].peer != c->rank) peers[sends[i].peer].send.cap++;
        for (int i = 0; i < nr; i++)
            if (recvs[i].peer != c->rank) peers[recvs[i].peer].recv.cap++;
        carve(peers, P, msgs, firsts);
        for (int i = 0; i < ns; i++)
            if (sends[i].peer != c->rank) add(&peers[sends[i].peer].send, &sends[i]);
        for (int i = 0; i < nr; i++)
            if (recvs[i].peer != c->rank) add(&peers[recvs[i].peer].recv, &recvs[i]);
    }
    if (!rc && mem->rc) {
        rc = mem->rc;
        snprintf(err, RL_MSG_MAX, "%s #%llu: copy to this rank itself: %.400s", rl_op_name(r->kind),
                 (unsigned long long)r->seq, mem->err);
    }
    int L = c->dev_lanes;
    if (!rc && (!mem->dev || P - 1 <= L)) {
        /* One exchange per peer, all at once, starting with the next ranks (every rank
         * starts its sends at a different peer: less contention for one receiver). */
        int n = 0;
        for (int d = 1; d <= P; d++) {
            int q = (c->rank + d) % P;
            n += set_pipe(&pipes[n], c, r, mem, n, q, q, &ends[n], peers);
        }
        rc = rl_pipes_run(pipes, n, err);
    } else if (!rc) {
        /* Device buffers, more peers than lanes (each lane holds pinned slots): distance d
         * sends to rank + d and receives from rank - d, the distances in rounds of L. A
         * round's distances are the same on every rank, so a send and its receive run in
         * the same round, and a round's exchanges all run at once: every round ends. */
        for (int d0 = 1; d0 < P && !rc; d0 += L) {
            int n = 0;
            for (int d = d0; d < d0 + L && d < P; d++)
                n += set_pipe(&pipes[n], c, r, mem, n, (c->rank + d) % P, (c->rank - d + P) % P, &ends[n], peers);
            rc = rl_pipes_run(pipes, n, err);
        }
    }
    free(peers);
    free(pipes);
    free(ends);
    free(msgs);
    free(firsts);
    return rc;
}
