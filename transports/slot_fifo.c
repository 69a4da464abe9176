/* The slot FIFO's calls off the hot path (slot_fifo.h). */
#include <stdio.h>
#include <string.h>

#include "slot_fifo.h"
#include "transport.h"

void rl_fifo_init(rl_fifo *f, rl_fifo_ctl *ctl, void *recs, size_t rec_stride, uint32_t nslots, uint64_t slot_bytes,
                  unsigned char *state) {
    memset(f, 0, sizeof *f);
    f->ctl = ctl;
    f->recs = recs;
    f->rec_stride = rec_stride;
    f->nslots = nslots;
    f->slot_bytes = slot_bytes;
    f->state = state;
}

const char *rl_fifo_refused(const rl_fifo *f, ringlet_result_t *code) {
    switch (atomic_load(&f->ctl->mismatch)) {
    case 0: break;
    case RL_FIFO_REFUSED_SLOTS:
        *code = RINGLET_ERR_INVALID_USAGE;
        return "the receiver's cuda_ipc slots differ from this rank's in count or size (RINGLET_CUDA_IPC_NSLOTS / "
               "_SLOT_SIZE must be the same on every rank)";
    case RL_FIFO_REFUSED_MAP: /* the receiver's failure, not this rank's device's */
        *code = RINGLET_ERR_REMOTE;
        return "the receiver could not map this rank's cuda_ipc slots (its error says why)";
    case RL_FIFO_REFUSED_CHANNEL:
        *code = RINGLET_ERR_INVALID_USAGE;
        return "the receiver posted this message's receive for another call (the two ranks called in another order)";
    default:
        *code = RINGLET_ERR_INVALID_USAGE;
        return "the receiver posted a receive of another length";
    }
    if (atomic_load(&f->ctl->receiver) == RL_FIFO_CLOSED) {
        *code = RINGLET_ERR_REMOTE;
        return "the peer closed the connection";
    }
    return NULL;
}

void rl_fifo_mismatch(rl_fifo *f, uint64_t msg_len, size_t len, unsigned chan_got, unsigned chan, char *why, size_t n) {
    if (chan_got != chan) {
        atomic_store(&f->ctl->mismatch, RL_FIFO_REFUSED_CHANNEL);
        snprintf(why, n, RL_CHAN_MISMATCH_FMT, rl_chan_name(chan_got), rl_chan_name(chan));
        return;
    }
    atomic_store(&f->ctl->mismatch, RL_FIFO_REFUSED_LENGTH);
    snprintf(why, n, "length mismatch: the peer sent %llu bytes, the receive was posted for %zu",
             (unsigned long long)msg_len, len);
}

int rl_fifo_sender_gone(const rl_fifo *f) {
    return atomic_load(&f->ctl->sender) == RL_FIFO_CLOSED &&
           atomic_load(&rl_fifo_rec_at(f, f->rpos)->seq) != f->rpos + 1;
}

int rl_fifo_claim(rl_fifo_ctl *ctl) {
    int none = RL_FIFO_NONE;
    return atomic_compare_exchange_strong(&ctl->sender, &none, RL_FIFO_OPEN) ? 0 : -1;
}

void rl_fifo_close(rl_fifo_ctl *ctl, int sending) { atomic_store(sending ? &ctl->sender : &ctl->receiver, RL_FIFO_CLOSED); }
