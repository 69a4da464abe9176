/* The messages posted on one connection of a transport without threads of its own (shm,
 * cuda_ipc), in posting order. Each lives in its request's private bytes and starts with
 * an rl_posted (the transport's own fields follow); whoever progresses the connection
 * moves the first ones and pops each when it is done. The caller holds the lock that
 * guards the connection's queue for every call but rl_posted_start.
 */
#ifndef RINGLET_POSTED_H
#define RINGLET_POSTED_H

#include <stddef.h>
#include <stdint.h>

#include "transport.h"

typedef struct rl_posted {
    struct rl_posted *next;
    rl_treq *req;
    char *buf;
    size_t len, off; /* off: the bytes moved (or whose move started) so far */
    int map;         /* irecv_map: lend the slot instead of copying */
    uint32_t lent;   /* map: the slot lent */
} rl_posted;

typedef struct rl_posted_q {
    rl_posted *head, *tail;
    const rl_transport_init *in; /* whom a finished message notifies */
    const char *over;            /* the transport, in messages: "over shared memory" */
    int peer, sending;
} rl_posted_q;

/* A queue for the connection to (sending) or from peer. */
void rl_posted_q_init(rl_posted_q *q, const rl_transport_init *in, const char *over, int peer, int sending);

/* Starts req for len bytes at buf (map: irecv_map); its first size bytes of private
 * memory, the transport's op, are zeroed first. Returns the op's rl_posted. */
rl_posted *rl_posted_start(rl_treq *req, size_t size, void *buf, size_t len, int map);
void rl_posted_push(rl_posted_q *q, rl_posted *p);
/* The first message is done: pops it and notifies. */
void rl_posted_pop(rl_posted_q *q);
/* Fails and pops every message: "sending to rank 3 over shared memory: why". */
void rl_posted_fail(rl_posted_q *q, ringlet_result_t code, const char *why);

#endif
