/* All-to-all, gather and scatter: each rank exchanges a block with every rank that
 * needs one, all at once (xchg.h), and copies its own block locally.
 *   all-to-all  block q of sendbuf goes to rank q, which puts it at block (this rank)
 *   gather      every rank's sendbuf goes to the root, at block (rank) of its recvbuf
 *   scatter     block q of the root's sendbuf goes to rank q's recvbuf
 * In place (all-to-all: sendbuf == recvbuf; gather: the root's sendbuf is its own block of
 * recvbuf; scatter: the root's recvbuf is its own block of sendbuf): an all-to-all copies
 * sendbuf to scratch first, the others need nothing. */
#include <stdio.h>
#include <stdlib.h>

#include "collective.h"
#include "devcomm.h"
#include "xchg.h"

static char *scratch_copy(struct ringlet_comm *c, rl_mem *mem, const void *src, size_t bytes, char *err) {
    char e[RL_MSG_MAX] = "";
    char *w = mem->dev ? rl_devcomm_scratch(c, bytes, e) : rl_comm_temp(c, bytes);
    if (!w) {
        snprintf(err, RL_MSG_MAX, "out of memory for %zu bytes of scratch%s%.300s", bytes, *e ? ": " : "", e);
        return NULL;
    }
    rl_mem_copy(mem, w, src, bytes);
    return w;
}

ringlet_result_t rl_run_spread(struct ringlet_comm *c, struct ringlet_request *r, rl_mem *mem, char *err) {
    int P = c->nranks, me = c->rank;
    size_t blk = r->count * ringlet_datatype_size(r->dtype);
    rl_msg *s = calloc((size_t)P, sizeof *s), *v = calloc((size_t)P, sizeof *v);
    if (!s || !v) {
        free(s), free(v);
        return snprintf(err, RL_MSG_MAX, "%s: out of memory", rl_op_name(r->kind)), RINGLET_ERR_SYSTEM;
    }
    int ns = 0, nr = 0;
    const char *send = r->sendbuf;
    char *recv = r->recvbuf;
    ringlet_result_t rc = RINGLET_SUCCESS;
    switch (r->kind) {
    case RL_OP_ALLTOALL:
        if (send == recv && blk && P > 1 && !(send = scratch_copy(c, mem, recv, blk * (size_t)P, err))) {
            rc = RINGLET_ERR_SYSTEM;
            break;
        }
        rl_mem_copy(mem, recv + (size_t)me * blk, send + (size_t)me * blk, blk);
        for (int q = 0; q < P; q++) {
            if (q == me) continue;
            s[ns++] = (rl_msg){q, (void *)(send + (size_t)q * blk), blk};
            v[nr++] = (rl_msg){q, recv + (size_t)q * blk, blk};
        }
        break;
    case RL_OP_GATHER:
        if (me == r->root) {
            rl_mem_copy(mem, recv + (size_t)me * blk, send, blk);
            for (int q = 0; q < P; q++)
                if (q != me) v[nr++] = (rl_msg){q, recv + (size_t)q * blk, blk};
        } else {
            s[ns++] = (rl_msg){r->root, (void *)send, blk};
        }
        break;
    case RL_OP_SCATTER:
        if (me == r->root) {
            rl_mem_copy(mem, recv, send + (size_t)me * blk, blk);
            for (int q = 0; q < P; q++)
                if (q != me) s[ns++] = (rl_msg){q, (void *)(send + (size_t)q * blk), blk};
        } else {
            v[nr++] = (rl_msg){r->root, recv, blk};
        }
        break;
    default:
        rc = RINGLET_ERR_INTERNAL;
        snprintf(err, RL_MSG_MAX, "internal: %s is not an exchange with every rank", rl_op_name(r->kind));
        break;
    }
    /* The local copies (scratch, own block) are done before the exchange reads or writes. */
    if (!rc) rc = rl_mem_fence(c, mem, err);
    if (!rc) rc = rl_run_peers(c, r, mem, s, ns, v, nr, err);
    free(s);
    free(v);
    return rc;
}
