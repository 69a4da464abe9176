/* Fuzz target: the shared-memory segment header a sender maps from its peer, and the
 * slot headers it writes, through the transport's checks (transports/shm.h, and the
 * slot FIFO's, transports/slot_fifo.h, which cuda_ipc's control records go through too).
 *   byte 0 & 1 = 0: a segment header: byte 1 the peer's rank, byte 2 the job's size
 *                   (1..64), then the header;
 *                1: a slot header: its message length and piece length, then the
 *                   receive's length, how much of it arrived and the slot size
 *                   (8 bytes each), then the header's channel and the receive's
 *                   (1 byte each), through the receiver's peek at a FIFO of one slot.
 *   byte 0 & FZ_SIGN: put this job's tag into the header first (see fuzz.h). */
#include "fuzz.h"
#include "sha256.h"
#include "shm.h"
#include "slot_fifo.h"

/* The segment's name; its tag is HMAC(secret, name). */
static const char seg_name[] = "/ringlet-1234-shm-0011223344556677";

static void segment(fz_in *in, int sign) {
    int peer = fz_u8(in), nranks = 1 + fz_u8(in) % 64;
    rl_shm_seg_hdr h;
    fz_take(in, &h, sizeof h);
    uint8_t tag[32];
    rl_hmac_sha256(fz_secret, 32, seg_name, strlen(seg_name), tag);
    if (sign) memcpy(h.tag, tag, 32);
    if (rl_shm_check_owner(&h, peer, tag) != 0) return;
    FZ_CHECK(h.magic == RL_SHM_MAGIC && h.rank == peer);
    rl_shm_geom g;
    if (rl_shm_check_layout(&h, nranks, &g) != 0) return;
    /* What shm_connect and the sender then rely on: the FIFO's slots fit in the stride
     * it maps, and this rank's FIFO lies within a segment the size of a file. */
    typedef unsigned __int128 u128;
    u128 need = RL_SHM_FIFO_HDR + (u128)g.nslots * (RL_SHM_SLOT_HDR + (u128)g.slot_bytes);
    FZ_CHECK(g.nslots > 0 && g.slot_bytes > 0);
    FZ_CHECK(need <= g.fifo_stride);
    FZ_CHECK(RL_SHM_PAGE + (u128)nranks * g.fifo_stride <= (u128)INT64_MAX);
}

static void piece(fz_in *in) {
    uint64_t msg_len = fz_u64(in), piece = fz_u64(in), len = fz_u64(in), off = fz_u64(in), slot = fz_u64(in);
    unsigned chan_got = fz_u8(in), chan = fz_u8(in);
    if (off > len) off = len; /* the receiver's own state */
    if (slot) {
        /* The receiver's peek at the record as the sender published it. */
        static rl_fifo_ctl ctl;
        static rl_fifo_rec rec;
        unsigned char state[1] = {0};
        rl_fifo f;
        memset(&ctl, 0, sizeof ctl);
        memset(&rec, 0, sizeof rec);
        rl_fifo_init(&f, &ctl, &rec, sizeof rec, 1, slot, state);
        rl_fifo_publish(&f, 0, msg_len, piece, chan_got);
        uint64_t got = 0;
        char why[160];
        int v = rl_fifo_peek(&f, (size_t)len, chan, (size_t)off, &got, why, sizeof why);
        FZ_CHECK(v == 1 || v == -1);
        if (v == 1) FZ_CHECK(chan_got == chan && got == piece && atomic_load(&ctl.mismatch) == 0);
        int want = chan_got != chan ? RL_FIFO_REFUSED_CHANNEL : RL_FIFO_REFUSED_LENGTH;
        if (v == -1) FZ_CHECK(atomic_load(&ctl.mismatch) == want && why[0] != 0);
        if (v == 1 && rl_fifo_check_piece(msg_len, piece, (size_t)len, (size_t)off, slot) != 0) FZ_CHECK(0);
    }
    if (rl_fifo_check_piece(msg_len, piece, (size_t)len, (size_t)off, slot) != 0) return;
    /* What progress_recv then copies: piece bytes of the slot to buf + off. */
    FZ_CHECK(msg_len == len && piece <= slot && off + piece <= len && off + piece >= off);
    FZ_CHECK(off == len || piece > 0); /* every piece moves the receive on */
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fz_in in = {data, size};
    uint8_t sel = fz_u8(&in);
    if (sel & 1) piece(&in);
    else segment(&in, sel & FZ_SIGN);
    return 0;
}
