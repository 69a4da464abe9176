/* The board: a one-shot exchange between the ranks of one host without messages. Each
 * rank writes what it would send to every peer into a slot of its own shared page (the
 * doorbell's, doorbell.h) and marks it with the call's number; the peers read it there,
 * in place. Two slots per rank, used in turn: a rank writes slot n % 2 for call n only
 * after every rank has marked call n - 1, which each does only once it has finished
 * reading call n - 2 (every rank waits for every rank in every call), so nobody still
 * reads what is overwritten, and no call needs a second round to free its slot.
 *
 * For an 8-byte all-reduce that is one cache line written and one read per peer, where a
 * message costs a request, a FIFO slot, its lock and a release per peer. */
#ifndef RINGLET_BOARD_H
#define RINGLET_BOARD_H

#include "comm.h"

/* The most ranks a board call serves (the one-shot path's own limit). */
#define RL_BOARD_MAX_RANKS 65

/* One peer's part this rank needs: bytes at off in what peer published, copied into buf,
 * or (buf NULL) read in place at data until this rank's next board call. */
typedef struct rl_board_read {
    int peer;
    void *buf;
    size_t off, bytes;
    const void *data; /* out */
} rl_board_read;

/* Whether a call publishing pub_bytes goes through the board (the same answer on every
 * rank: comm->board_bytes, board_device and board_host are; device buffers also need that
 * no pair of ranks could use cuda_ipc, so that every pair's device transport is shared
 * memory, and host buffers that device buffers could take it too, or that every rank has
 * cuda_ipc, where host and device buffers may not meet in one call). */
int rl_board_fits(struct ringlet_comm *c, int device, size_t pub_bytes);
/* Publishes pub_bytes of pub, waits for every rank's part of this call (deadline and
 * failure as the one-shot exchange's), and fills reads[0..n). nsend: the messages the
 * call would have sent (for the fault points of tests, which count them). */
ringlet_result_t rl_board_exchange(struct ringlet_comm *c, const struct ringlet_request *r, const void *pub,
                                   size_t pub_bytes, int nsend, rl_board_read *reads, int n, char *err);

#endif
