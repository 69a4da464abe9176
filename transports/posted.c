/* The messages posted on a connection (posted.h). */
#include <string.h>

#include "posted.h"

void rl_posted_q_init(rl_posted_q *q, const rl_transport_init *in, const char *over, int peer, int sending) {
    memset(q, 0, sizeof *q);
    q->in = in;
    q->over = over;
    q->peer = peer;
    q->sending = sending;
}

rl_posted *rl_posted_start(rl_treq *req, size_t size, void *buf, size_t len, int map) {
    rl_posted *p = (rl_posted *)req->priv;
    memset(p, 0, size);
    p->req = req;
    p->buf = buf;
    p->len = len;
    p->map = map;
    req->mapped = NULL;
    rl_treq_start(req, len, 1);
    return p;
}

void rl_posted_push(rl_posted_q *q, rl_posted *p) {
    if (q->tail) q->tail->next = p;
    else q->head = p;
    q->tail = p;
}

void rl_posted_pop(rl_posted_q *q) {
    rl_posted *p = q->head;
    q->head = p->next;
    if (!q->head) q->tail = NULL;
    rl_treq_part_done(p->req);
    q->in->notify(q->in->notify_arg);
}

void rl_posted_fail(rl_posted_q *q, ringlet_result_t code, const char *why) {
    while (q->head) {
        rl_treq_fail(q->head->req, code, "%s rank %d over %s: %s", q->sending ? "sending to" : "receiving from", q->peer,
                     q->over, why);
        rl_posted_pop(q);
    }
}
