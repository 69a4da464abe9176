/* A rank's doorbell: the futex word (rl_bell) the communicator sleeps on while it
 * waits, in a small shared-memory object (/dev/shm/ringlet-<pid>-bell-<random>, mode
 * 0600, tagged with an HMAC of the job secret) that processes of its host map to wake
 * it. The transports between ranks of one host (shared memory, CUDA IPC) ring the peer's
 * doorbell when they hand it data or room, through rl_transport_init's peer_bell; so a
 * rank sleeps on one word whatever transport its data comes through.
 *
 * The same object holds the rank's board: two slots where it publishes what a small
 * one-shot collective sends to every rank, for the peers of its host to read in place
 * (oneshot.c, board.c). */
#ifndef RINGLET_DOORBELL_H
#define RINGLET_DOORBELL_H

#include "comm.h"

/* The most one rank publishes on the board for one call. */
#define RL_BOARD_BYTES (16u << 10)
/* A board slot: call seq's data once seq reads seq (release/acquire). */
typedef struct rl_board_slot {
    _Alignas(64) _Atomic uint64_t seq;
    /* What the call is, written before seq: each reader compares it with its own call, so
     * that ranks whose calls differ (a count, a kind, a root) fail instead of reading what
     * the slot held before (board.c). */
    uint64_t bytes;
    int32_t kind, root;
    unsigned char data[RL_BOARD_BYTES];
} rl_board_slot;

/* Creates this rank's doorbell (before the bootstrap: its name goes out in the rank's
 * info); the communicator then sleeps on it. Without shared memory the communicator
 * keeps its private bell, and peers cannot ring it (they poll). */
void rl_doorbell_open(struct ringlet_comm *c);
/* The doorbell of peer (a rank of this host), mapped on first use; NULL if it has none
 * or it cannot be mapped. comm is the communicator (rl_transport_init's bell_arg). */
rl_bell *rl_doorbell_peer(void *comm, int peer);
/* The two board slots of peer (this rank's own for c->rank), mapped on first use, and
 * in *bell its doorbell; NULL (both) if it has none or they cannot be mapped. */
rl_board_slot *rl_doorbell_board(struct ringlet_comm *c, int peer, rl_bell **bell);
/* Records in this rank's doorbell the core the calling thread runs on, and says whether a
 * peer of this host (one whose doorbell this rank mapped) last recorded the same core
 * while it waited: then that peer cannot run while this thread spins there. 0 without a
 * doorbell. */
int rl_doorbell_core_shared(struct ringlet_comm *c);
/* Unmaps the peers' doorbells and removes this rank's. */
void rl_doorbell_close(struct ringlet_comm *c);

#endif
