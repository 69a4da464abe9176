/* A transport's listener with the connections taken off it while their hello (the first
 * message, of a fixed size) arrives: every one read as its bytes come, none waited on
 * alone, so that a stranger that connects and stays silent (a port scanner) costs the
 * genuine peers nothing: it holds one of RL_GATE_MAX places for RL_GATE_HELLO_S, then is
 * closed. With every place taken, further connections wait in the listener's backlog.
 * One thread at a time (the transport's caller serialises its accepts). */
#ifndef RINGLET_HELLO_GATE_H
#define RINGLET_HELLO_GATE_H

#include <stddef.h>

#include "sock.h"

#define RL_GATE_MAX 32
#define RL_GATE_HELLO_S 5.0

typedef struct rl_gate {
    int lfd;
    size_t len; /* of a hello */
    int n;      /* waiting: w[0..n) */
    struct {
        int fd;
        size_t got;
        double until;
    } w[RL_GATE_MAX];
    unsigned char *bufs; /* RL_GATE_MAX hellos: w[i]'s bytes at i * len */
} rl_gate;

/* A whole hello arrived on fd (accepted, non-blocking): the callee keeps fd or closes it. */
typedef void (*rl_gate_fn)(void *arg, int fd, const void *hello);

/* 0, or -1 out of memory. */
int rl_gate_init(rl_gate *g, int lfd, size_t hello_len);
/* Without waiting: reads what has come of each waiting hello, takes the connections
 * pending on the listener (and reads theirs), hands each whole hello to fn, and closes
 * (with a warning naming tp and rank) those that ended or stayed silent past
 * RL_GATE_HELLO_S. RL_IO_OK, or RL_IO_ERR with accept's errno in *err_no (this process
 * out of descriptors or memory): the hellos were read all the same, so a caller looks at
 * what it waits for before it takes the error as its own. */
rl_io_t rl_gate_step(rl_gate *g, rl_gate_fn fn, void *arg, const char *tp, int rank, int *err_no);
/* Waits for the listener or a waiting connection to have something, at most 100 ms and
 * never past until or the nearest hello's deadline. */
void rl_gate_wait(const rl_gate *g, double until);
/* Closes the connections still waiting (not the listener). */
void rl_gate_fini(rl_gate *g);

#endif
