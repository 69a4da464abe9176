/* A rank's doorbell: the futex word (rl_bell) the communicator sleeps on while it
 * waits, in a small shared-memory object (/dev/shm/ringlet-<pid>-bell-<random>, mode
 * 0600, tagged with an HMAC of the job secret) that processes of its host map to wake
 * it. The transports between ranks of one host (shared memory, CUDA IPC) ring the peer's
 * doorbell when they hand it data or room, through rl_transport_init's peer_bell; so a
 * rank sleeps on one word whatever transport its data comes through. */
#ifndef RINGLET_DOORBELL_H
#define RINGLET_DOORBELL_H

#include "comm.h"

/* Creates this rank's doorbell (before the bootstrap: its name goes out in the rank's
 * info); the communicator then sleeps on it. Without shared memory the communicator
 * keeps its private bell, and peers cannot ring it (they poll). */
void rl_doorbell_open(struct ringlet_comm *c);
/* The doorbell of peer (a rank of this host), mapped on first use; NULL if it has none
 * or it cannot be mapped. comm is the communicator (rl_transport_init's bell_arg). */
rl_bell *rl_doorbell_peer(void *comm, int peer);
/* Unmaps the peers' doorbells and removes this rank's. */
void rl_doorbell_close(struct ringlet_comm *c);

#endif
