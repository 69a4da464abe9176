/* Running a group (ringlet_group_start/end) on one communicator: its collectives in the
 * order they were called, then all its sends and receives at once (xchg.h), so that ranks
 * that send to each other never wait for each other. Every rank must have made the same
 * group; a message of it matches a plain send or receive as well. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "collective.h"
#include "devcomm.h"
#include "xchg.h"

ringlet_result_t rl_run_group(struct ringlet_comm *c, struct ringlet_request *g, rl_mem *mem, rl_run_fn run_one,
                              char *err) {
    /* Device buffers: the transports that move device memory themselves copy on streams of
     * their own, so the user's work before the group is waited for here. */
    if (mem->dev) {
        void *evs[1 + RL_GROUP_MAX_STREAMS] = {g->event};
        for (int i = 0; i < g->nxstream; i++) evs[1 + i] = g->xevent[i];
        for (int i = 0; i <= g->nxstream; i++) {
            ringlet_result_t rc = evs[i] ? rl_devcomm_wait(c, evs[i], "the streams' work before the group", err)
                                         : RINGLET_SUCCESS;
            if (rc) return rc;
        }
    }
    int ns = 0, nr = 0;
    for (int i = 0; i < g->nsub; i++) {
        const rl_subop *o = &g->sub[i];
        if (o->kind == RL_OP_SEND) ns++;
        else if (o->kind == RL_OP_RECV) nr++;
    }
    rl_msg *s = calloc((size_t)ns + 1, sizeof *s), *v = calloc((size_t)nr + 1, sizeof *v);
    if (!s || !v) {
        free(s), free(v);
        return snprintf(err, RL_MSG_MAX, "group #%llu: out of memory", (unsigned long long)g->seq), RINGLET_ERR_SYSTEM;
    }
    ns = nr = 0;
    for (int i = 0; i < g->nsub; i++) {
        const rl_subop *o = &g->sub[i];
        size_t bytes = o->count * ringlet_datatype_size(o->dtype);
        if (o->kind == RL_OP_SEND) s[ns++] = (rl_msg){o->peer, (void *)o->sendbuf, bytes};
        else if (o->kind == RL_OP_RECV) v[nr++] = (rl_msg){o->peer, o->recvbuf, bytes};
    }
    /* Messages to this rank itself that cannot meet are refused before anything runs
     * (the peers hear why: the communicator fails, rl_run_op), not after the collectives. */
    struct ringlet_request pr;
    memset(&pr, 0, sizeof pr);
    pr.comm = c;
    pr.kind = RL_OP_GROUP;
    pr.seq = g->seq;
    pr.count = (size_t)(ns + nr);
    ringlet_result_t rc = rl_xchg_self(c, &pr, mem, s, ns, v, nr, 0, err);
    uint64_t coll = g->coll_first; /* the number of the group's next collective (comm.h) */
    for (int i = 0; i < g->nsub && !rc; i++) {
        const rl_subop *o = &g->sub[i];
        if (o->kind != RL_OP_SEND && o->kind != RL_OP_RECV) {
            /* A collective: as a request of its own, numbered as the group. */
            struct ringlet_request r;
            rl_subop_request(&r, c, o, g->seq);
            r.coll_first = coll ? coll++ : 0;
            /* A barrier moves no data: on host memory whatever the group's, so that every
             * rank takes the same path (the board or messages) whatever its other calls. */
            rl_mem host = {NULL, RINGLET_SUCCESS, "", NULL};
            int bar = o->kind == RL_OP_BARRIER;
            if (bar) r.device = -1;
            rc = run_one(c, &r, bar ? &host : mem, err);
            /* Its device work done before the next reuses the communicator's scratch. */
            if (!rc && mem->dev && !bar) {
                char e[RL_MSG_MAX];
                if ((rc = rl_devcomm_drain(c, e)))
                    snprintf(err, RL_MSG_MAX, "%s #%llu (in a group): %.400s", rl_op_name(o->kind),
                             (unsigned long long)g->seq, e);
            }
        }
    }
    if (!rc && (ns || nr)) rc = rl_run_peers(c, &pr, mem, s, ns, v, nr, err); /* pr names them in errors */
    free(s);
    free(v);
    return rc;
}
