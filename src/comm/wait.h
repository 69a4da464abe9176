/* Waiting for completions: every completion (a transport's, an operation's) rings the
 * communicator's bell; a waiter reads the bell's counter, checks for its work, and
 * sleeps until the counter moves. Transports without threads of their own (shared
 * memory) move data when a waiter polls them. */
#ifndef RINGLET_WAIT_H
#define RINGLET_WAIT_H

#include "comm.h"

/* Bits of comm->polled: a connection exists over a transport without threads (shm: a
 * waiter polls it for a while before it sleeps), or over one whose threads do all the
 * work but whose progress takes some sooner (TCP: polled while it says
 * RL_PROGRESS_POLL, parked before the waiter sleeps); and RL_POLLED_TP(id) for each
 * transport with a progress op that has a connection (only those are polled). */
enum { RL_POLLED_ALWAYS = 1, RL_POLLED_ON_DEMAND = 2 };
#define RL_POLLED_TP(id) (4 << (id))

/* Hands what only polling would move (TCP messages the callers move) to the transports'
 * threads: before a waiter sleeps, and after posting a request nobody may wait on soon (an
 * isend or irecv the progress thread posted), so that it completes while no thread polls
 * this communicator. */
void rl_comm_park(struct ringlet_comm *c);
/* After posting a send or receive nobody may wait on soon (an isend or irecv): where a
 * transport without threads of its own (shared memory, cuda_ipc) is in use, the
 * progress thread moves what is posted while no thread of this communicator waits (its
 * owner may block on another communicator first, and a peer's send then on it). */
void rl_comm_watch_posted(struct ringlet_comm *c);
/* Wakes waiters (transport completions, finished operations); arg is the comm. */
void rl_comm_notify(void *comm);
/* The wake-up counter's value: read it before checking for work, then wait with it. */
unsigned rl_comm_gen(struct ringlet_comm *c);
/* Waits until something completes or ms pass (polls threadless transports first,
 * yielding the core between polls after comm->spin_pause rounds: what it waits for may
 * be another thread of this process, the progress thread, that needs the core). */
void rl_comm_wait_event(struct ringlet_comm *c, unsigned gen, int ms);
/* The same for an algorithm waiting on its peers' transfers: what it waits for is another
 * process. When the caller's thread runs the operation itself (rl_comm_set_inline), this
 * host has a core for every local rank and no connection runs over a transport with
 * threads of its own, the poll never yields (comm->peer_pause): a yield can hand the core
 * to another job for a whole time slice. */
void rl_comm_wait_peer(struct ringlet_comm *c, unsigned gen, int ms);
/* Waits until t is done (a transfer that fails fast once the communicator has: the
 * drains after a failure). */
void rl_comm_wait_treq(struct ringlet_comm *c, rl_treq *t);
/* How many times the calling thread's waits have yielded its core between polls (tests). */
unsigned long rl_wait_yields(void);
/* How many times the calling thread's waits on polled transports stopped polling to sleep (tests). */
unsigned long rl_wait_sleeps(void);
/* The same, for what peers publish in place (the board): returns once ready(arg) says it
 * is there, which it asks while polling and once more before sleeping (a peer that
 * publishes rings the bell only when this rank sleeps: rl_bell_ring_sleeper). The
 * transports are not polled meanwhile: a board call is the communicator's only
 * operation under way, and nothing of it is in a transport. */
void rl_comm_wait_peer_for(struct ringlet_comm *c, unsigned gen, int ms, int (*ready)(void *), void *arg);
/* Marks this thread as running an operation for its caller (1) or not (0). */
void rl_comm_set_inline(int on);
/* Drives transports that have no threads of their own: RL_PROGRESS_MOVED if anything
 * moved, | RL_PROGRESS_BUSY if one of them has device work under way that no peer will
 * announce (its completion is only seen by polling again soon). */
int rl_comm_progress(struct ringlet_comm *c);
/* For rl_bell_wait's poll (c: the communicator): rl_comm_progress, non-zero when it moved
 * something or has device work to look at again, so that the caller does not sleep. Peers
 * ring only a sleeper: what they moved before the caller counted itself one is found here. */
int rl_comm_poll_moved(void *c);

#endif
