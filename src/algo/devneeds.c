/* What an operation's device work will need, said before it is queued (devcomm.h: nothing
 * may be allocated or mapped once a stream is held). It mirrors the algorithms' choices
 * (collective.c's dispatch) and takes the most any of them could use for the call:
 *   ring          lane 0; reduce_scatter P * count elements of device scratch, reduce
 *                 count elements (the ranks between root and the chain's start)
 *   hierarchy     lanes 0 and 1
 *   doubling      (all-reduce) count elements of device scratch
 *   one-shot, star  (small calls; the star: all-reduce through rank 0, a one-shot reduce
 *                 and broadcast) P blocks of device scratch, or P + 1 (reduce_scatter:
 *                 2P) blocks of pinned memory when staged
 *   spread, group one lane per peer exchanged with, at most the communicator's
 *                 dev_lanes (more peers go in rounds, xchg.c); an all-to-all in
 *                 place, P blocks of device scratch
 *   premul sum    (and avg of float16) the scaled input (device scratch), 64 pinned bytes
 *                 (a device scalar);
 *                 in a group, the most any of its calls needs
 *   every peer a call exchanges with over a transport that maps device memory: its
 *   connection, made ready. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "collective.h"
#include "devcomm.h"

static size_t max_size(size_t a, size_t b) { return a > b ? a : b; }

static int is_collective(rl_op_kind k) { return k != RL_OP_SEND && k != RL_OP_RECV && k != RL_OP_GROUP; }

/* One collective call's needs (lanes, scratch, pinned), added to n. */
static void collective_needs(const struct ringlet_comm *c, const struct ringlet_request *r, rl_dev_needs *n) {
    int P = c->nranks;
    size_t es = ringlet_datatype_size(r->dtype), bytes = r->count * es, all = (size_t)P * bytes;
    int lanes = 1;
    if (r->kind == RL_OP_ALLTOALL || r->kind == RL_OP_GATHER || r->kind == RL_OP_SCATTER) lanes = P > 1 ? P - 1 : 1;
    else if (rl_hier_candidate(c, r)) lanes = 2;
    if (lanes > n->lanes) n->lanes = lanes;
    if (r->kind == RL_OP_REDUCE_SCATTER) n->scratch = max_size(n->scratch, all);
    if (r->kind == RL_OP_REDUCE || (r->kind == RL_OP_ALLREDUCE && rl_doubling_fits(c, r)))
        n->scratch = max_size(n->scratch, bytes);
    if (r->kind == RL_OP_ALLTOALL && r->sendbuf == r->recvbuf) n->scratch = max_size(n->scratch, all);
    if (P > 1 && (r->count > 0 || r->kind == RL_OP_BARRIER) && (rl_oneshot_fits(c, r) || rl_star_fits(c, r))) {
        n->scratch = max_size(n->scratch, all);
        n->pinned = max_size(n->pinned, all + (r->kind == RL_OP_REDUCE_SCATTER ? all : bytes));
    }
    if (r->premul.live || rl_avg_premul(c, r)) {
        n->scratch2 = max_size(n->scratch2, r->kind == RL_OP_REDUCE_SCATTER ? all : bytes);
        n->pinned = max_size(n->pinned, 64);
    }
}

static void mark_all(const struct ringlet_comm *c, rl_dev_needs *n) {
    for (int q = 0; q < c->nranks; q++)
        if (q != c->rank) n->send_to[q] = n->recv_from[q] = 1;
}

ringlet_result_t rl_op_prepare_device(struct ringlet_comm *c, struct ringlet_request *r, int wait, char *err) {
    rl_dev_needs n;
    memset(&n, 0, sizeof n);
    n.device = r->device;
    n.no_wait = !wait;
    n.stream_device = -1;
    if (r->device < 0) {
        /* Host buffers with a stream: the flag, and the stream's device made ready. */
        const rl_device_ops *d = rl_device();
        if (!d)
            return snprintf(err, RL_MSG_MAX, "a stream, but no device backend is usable here: %s",
                            rl_device_unavailable()),
                   RINGLET_ERR_INVALID_USAGE;
        void *streams[1 + RL_GROUP_MAX_STREAMS] = {r->stream};
        for (int i = 0; i < r->nxstream; i++) streams[1 + i] = r->xstream[i];
        for (int i = 0; i <= r->nxstream; i++) {
            if (!streams[i]) continue;
            if (d->stream_device(streams[i], &n.stream_device) != RL_DEV_OK)
                return rl_devcomm_error("the stream's device", err);
            ringlet_result_t rc = rl_devcomm_prepare(c, &n, err);
            if (rc) return rc;
        }
        return RINGLET_SUCCESS;
    }
    n.send_to = calloc((size_t)c->nranks, 1);
    n.recv_from = calloc((size_t)c->nranks, 1);
    if (!n.send_to || !n.recv_from) {
        free(n.send_to), free(n.recv_from);
        return snprintf(err, RL_MSG_MAX, "out of memory"), RINGLET_ERR_SYSTEM;
    }
    n.lanes = 1;
    if (is_collective(r->kind)) {
        collective_needs(c, r, &n);
        mark_all(c, &n);
    } else if (r->kind == RL_OP_SEND) {
        n.send_to[r->peer] = 1;
    } else if (r->kind == RL_OP_RECV) {
        n.recv_from[r->peer] = 1;
    } else { /* a group: its collectives one after another, its messages all at once */
        /* a lane per exchange of the messages (xchg.c), counted apart from the
         * collectives' marks (a collective before them marks every rank): one per distinct
         * peer; in rounds (more peers than lanes), the most distances any round has */
        int P = c->nranks;
        unsigned char *to = calloc((size_t)P, 1), *from = calloc((size_t)P, 1);
        if (!to || !from) {
            free(to), free(from), free(n.send_to), free(n.recv_from);
            return snprintf(err, RL_MSG_MAX, "out of memory"), RINGLET_ERR_SYSTEM;
        }
        for (int i = 0; i < r->nsub; i++) {
            const rl_subop *o = &r->sub[i];
            if (o->kind == RL_OP_SEND || o->kind == RL_OP_RECV) {
                (o->kind == RL_OP_SEND ? n.send_to : n.recv_from)[o->peer] = 1;
                if (o->peer != c->rank) (o->kind == RL_OP_SEND ? to : from)[o->peer] = 1;
                continue;
            }
            struct ringlet_request one;
            rl_subop_request(&one, (struct ringlet_comm *)c, o, r->seq);
            collective_needs(c, &one, &n);
            mark_all(c, &n);
        }
        int peers = 0, L = c->dev_lanes;
        if (P - 1 <= L) { /* all at once */
            for (int q = 0; q < P; q++) peers += to[q] || from[q];
        } else { /* distance d sends to rank + d and receives from rank - d, L distances a round */
            for (int d0 = 1; d0 < P; d0 += L) {
                int k = 0;
                for (int d = d0; d < d0 + L && d < P; d++) k += to[(c->rank + d) % P] || from[(c->rank - d + P) % P];
                if (k > peers) peers = k;
            }
        }
        free(to), free(from);
        if (peers > n.lanes) n.lanes = peers;
    }
    if (n.lanes > c->dev_lanes) n.lanes = c->dev_lanes; /* more peers: the exchange goes in rounds */
    ringlet_result_t rc = rl_devcomm_prepare(c, &n, err);
    free(n.send_to);
    free(n.recv_from);
    return rc;
}
