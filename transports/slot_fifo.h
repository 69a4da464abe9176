/* The slot FIFO: a ring of nslots slots from one sender process to one receiver process,
 * as the shared-memory transport (shm.c: slots in shared host memory) and the CUDA IPC
 * transport (cuda_ipc.c: slots in the sender's GPU memory) both run it. This is only who
 * may use which slot when; where the slot bytes live, and how they are copied, is the
 * transport's.
 *
 * Both processes map the control block (rl_fifo_ctl) and one record per slot
 * (rl_fifo_rec) in shared host memory. A message is cut into pieces of at most one slot
 * (a message of 0 bytes is one empty piece), each recording the message's length and
 * channel (rl_treq.chan), so a receive posted with another fails on both ends. Piece p
 * goes to slot p % nslots:
 *   - the sender takes the slot once p - tail < nslots (it reads tail, acquire, only when
 *     its cached copy says the ring is full), fills it, then publishes the piece: the
 *     record's lengths, then seq = p + 1 (release);
 *   - the receiver polls the record's seq (acquire) for p + 1, takes the piece (copies
 *     it out, or lends the slot), and hands slots back in order: tail (release) moves over
 *     the slots it is done with, never past one still being copied out or lent.
 * The receiver owns tail and mismatch; each side owns its own side flag.
 *
 * The hot calls are inline: the library's functions are not hidden, so a call into
 * another file would go through the PLT on every piece.
 */
#ifndef RINGLET_SLOT_FIFO_H
#define RINGLET_SLOT_FIFO_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "ringlet.h"

/* A side of the FIFO (rl_fifo_ctl.sender, .receiver). */
enum { RL_FIFO_NONE = 0, RL_FIFO_OPEN = 1, RL_FIFO_CLOSED = 2 };

/* Why the receiver refused the sender (rl_fifo_ctl.mismatch; 0: it did not): a receive of
 * another length, or of another channel; the sender's slots, which it could not map
 * (cuda_ipc): their count or size differs from its own, or the mapping failed. */
enum { RL_FIFO_REFUSED_LENGTH = 1, RL_FIFO_REFUSED_SLOTS = 2, RL_FIFO_REFUSED_MAP = 3, RL_FIFO_REFUSED_CHANNEL = 4 };

/* In shared host memory, at the start of the transport's own control block. */
typedef struct rl_fifo_ctl {
    _Alignas(64) atomic_ullong tail; /* receiver: pieces whose slots the sender may reuse */
    _Alignas(64) atomic_int sender;  /* RL_FIFO_*: OPEN once the sender's fields are written */
    atomic_int receiver;
    atomic_int mismatch; /* RL_FIFO_REFUSED_*: the receiver refused the sender, which fails too */
} rl_fifo_ctl;

/* One slot's record, in shared host memory (shm: the slot's own header, so that a small
 * message shares its cache line; cuda_ipc: an array in the control block). */
typedef struct rl_fifo_rec {
    atomic_ullong seq; /* piece position + 1 once the piece is in the slot */
    uint64_t msg_len, piece;
    uint32_t chan, pad_;
} rl_fifo_rec;

/* What the receiver does with a slot it took. */
enum { RL_FIFO_FREE = 0, RL_FIFO_COPYING = 1, RL_FIFO_LENT = 2, RL_FIFO_DONE = 3 };

/* One end's view: the shared parts, and the indices it keeps for itself. */
typedef struct rl_fifo {
    rl_fifo_ctl *ctl;
    char *recs;        /* slot 0's record */
    size_t rec_stride; /* bytes from one slot's record to the next */
    uint32_t nslots;
    uint64_t slot_bytes;
    /* sender */
    uint64_t head;      /* pieces given a slot so far */
    uint64_t tail_seen; /* the last tail read */
    /* receiver */
    uint64_t rpos;        /* pieces taken so far */
    uint64_t rtail;       /* the tail it published */
    unsigned char *state; /* [nslots] RL_FIFO_*: the slots taken and not handed back */
} rl_fifo;

/* An end over ctl and the records at recs (rec_stride apart); state: the receiver's
 * nslots bytes of zeros (NULL for the sender). */
void rl_fifo_init(rl_fifo *f, rl_fifo_ctl *ctl, void *recs, size_t rec_stride, uint32_t nslots, uint64_t slot_bytes,
                  unsigned char *state);

static inline uint32_t rl_fifo_slot(const rl_fifo *f, uint64_t pos) { return (uint32_t)(pos % f->nslots); }

static inline rl_fifo_rec *rl_fifo_rec_at(const rl_fifo *f, uint64_t pos) {
    return (rl_fifo_rec *)(f->recs + (size_t)rl_fifo_slot(f, pos) * f->rec_stride);
}

/* Pieces of a message of len bytes (0 bytes: one), and the one at off. */
static inline uint32_t rl_fifo_npieces(size_t len, uint64_t slot_bytes) {
    return len ? (uint32_t)((len + slot_bytes - 1) / slot_bytes) : 1;
}
static inline size_t rl_fifo_piece_len(const rl_fifo *f, size_t len, size_t off) {
    return len - off < f->slot_bytes ? len - off : (size_t)f->slot_bytes;
}

/* ---- sender ---- */

/* Why nothing more may be sent (the receiver refused this sender, or closed), with the
 * result code in *code; NULL while the FIFO is usable. */
const char *rl_fifo_refused(const rl_fifo *f, ringlet_result_t *code);

/* Whether piece head has a free slot (the receiver handed it back). */
static inline int rl_fifo_room(rl_fifo *f) {
    if (f->head - f->tail_seen >= f->nslots)
        f->tail_seen = atomic_load_explicit(&f->ctl->tail, memory_order_acquire);
    return f->head - f->tail_seen < f->nslots;
}

/* Piece pos is in its slot: the receiver may take it. */
static inline void rl_fifo_publish(rl_fifo *f, uint64_t pos, uint64_t msg_len, uint64_t piece, unsigned chan) {
    rl_fifo_rec *r = rl_fifo_rec_at(f, pos);
    r->msg_len = msg_len;
    r->piece = piece;
    r->chan = chan;
    atomic_store_explicit(&r->seq, pos + 1, memory_order_release);
}

/* ---- receiver ---- */

/* Marks the FIFO failed for the sender, and writes why into why (n bytes): the peer sent
 * msg_len bytes where the receive was posted for len, or (chan_got != chan) a message of
 * another channel. */
void rl_fifo_mismatch(rl_fifo *f, uint64_t msg_len, size_t len, unsigned chan_got, unsigned chan, char *why, size_t n);

/* A piece's record (the message's length, the piece's, as the sender wrote them) against
 * the receive posted for len bytes of which off have arrived, slots of slot_bytes: 0 when
 * the piece belongs there, which is exactly the length the sender cuts (a short or empty
 * piece would leave a lent slot behind, or the receive never ending); tests/fuzz/shm.c
 * runs this on arbitrary records. */
static inline int rl_fifo_check_piece(uint64_t msg_len, uint64_t piece, size_t len, size_t off, uint64_t slot_bytes) {
    if (msg_len != len || off > len || slot_bytes == 0) return -1;
    uint64_t want = len - off < slot_bytes ? len - off : slot_bytes;
    return piece == want ? 0 : -1;
}

/* Piece rpos for a receive of len bytes of channel chan of which off have arrived: 1
 * when it is published and fits (its length in *piece), 0 while it is not published, -1
 * when it does not fit (rl_fifo_mismatch done: why says so). */
static inline int rl_fifo_peek(rl_fifo *f, size_t len, unsigned chan, size_t off, uint64_t *piece, char *why,
                               size_t n) {
    const rl_fifo_rec *r = rl_fifo_rec_at(f, f->rpos);
    if (atomic_load_explicit(&r->seq, memory_order_acquire) != f->rpos + 1) return 0;
    /* once each (volatile: the compiler may not read them again after the check): the
     * sender's memory */
    uint64_t msg_len = *(const volatile uint64_t *)&r->msg_len, p = *(const volatile uint64_t *)&r->piece;
    uint32_t got = *(const volatile uint32_t *)&r->chan;
    if (got != chan || rl_fifo_check_piece(msg_len, p, len, off, f->slot_bytes) != 0) {
        rl_fifo_mismatch(f, msg_len, len, got, chan, why, n);
        return -1;
    }
    *piece = p;
    return 1;
}

/* Takes piece rpos (peeked), its slot now in state (RL_FIFO_DONE when copied out
 * already); returns its slot. */
static inline uint32_t rl_fifo_take(rl_fifo *f, int state) {
    uint32_t s = rl_fifo_slot(f, f->rpos++);
    f->state[s] = (unsigned char)state;
    return s;
}

/* Hands the sender back every slot it may reuse, in order; 1 when tail moved (ring the
 * sender). */
static inline int rl_fifo_hand_back(rl_fifo *f) {
    uint64_t t = f->rtail;
    while (t < f->rpos && f->state[rl_fifo_slot(f, t)] == RL_FIFO_DONE) f->state[rl_fifo_slot(f, t++)] = RL_FIFO_FREE;
    if (t == f->rtail) return 0;
    f->rtail = t;
    atomic_store_explicit(&f->ctl->tail, t, memory_order_release);
    return 1;
}

/* The slot lent from piece (rl_fifo_take's) is free again: rl_fifo_hand_back. */
static inline int rl_fifo_release(rl_fifo *f, uint32_t slot) {
    f->state[slot] = RL_FIFO_DONE;
    return rl_fifo_hand_back(f);
}

/* The sender closed without publishing piece rpos: a receive waiting for it fails. */
int rl_fifo_sender_gone(const rl_fifo *f);

/* ---- both ---- */

/* The sender's claim on ctl, which one sender connection holds for the job's life:
 * 0, or -1 when another took it. */
int rl_fifo_claim(rl_fifo_ctl *ctl);
/* This end (the sender's when sending) closes; the transport then rings the peer. */
void rl_fifo_close(rl_fifo_ctl *ctl, int sending);

#endif
