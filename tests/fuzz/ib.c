/* Fuzz target: the IB connection exchange and chunk header, through the transport's
 * checks (transports/ib.h; they need no verbs).
 *   byte 0 % 4 = 0: a peer's blob: byte 1 its length's offset from the real one;
 *                1: a hello as the acceptor reads it: byte 1 this rank, byte 2 the
 *                   job's size (1..64);
 *                2: a reply as the connector reads it: byte 1 the peer, byte 2 this
 *                   rank, byte 3 its queue pairs (1..16);
 *                3: a chunk header: the chunk's number, the receive's length, how
 *                   much of it arrived and the slot size (8 bytes each), its
 *                   channel (1 byte);
 *   then the message. byte 0 & FZ_SIGN: put the right MAC in first (see fuzz.h). */
#include <netinet/in.h>

#include "fuzz.h"
#include "ib.h"
#include "netif.h"

static void blob(fz_in *in) {
    int delta = (int8_t)fz_u8(in);
    size_t len = (size_t)((int)sizeof(rl_ib_blob) + (delta == 0 || delta > 8 || delta < -8 ? 0 : delta));
    uint8_t *bytes = malloc(len);
    FZ_CHECK(bytes != NULL);
    fz_take(in, bytes, len);
    rl_ib_blob b;
    int v = rl_ib_parse_blob(bytes, len, &b);
    FZ_CHECK(v == RL_IB_OK || v == RL_IB_BAD || v == RL_IB_VERSION_MISMATCH);
    if (v == RL_IB_OK) {
        FZ_CHECK(len == sizeof b && b.magic == RL_IB_MAGIC && b.version == RL_IB_VERSION);
        /* ib_connect connects to it. */
        FZ_CHECK(b.addr.ss_family == AF_INET || b.addr.ss_family == AF_INET6);
        char where[96];
        rl_sockaddr_str((struct sockaddr *)&b.addr, where, sizeof where);
    }
    free(bytes);
}

static void hello(fz_in *in, int sign) {
    int rank = fz_u8(in), nranks = 1 + fz_u8(in) % 64;
    rl_ib_hello h;
    fz_take(in, &h, sizeof h);
    if (sign) rl_ib_hello_mac(fz_secret, &h, h.mac);
    if (rl_ib_check_hello(fz_secret, &h, rank, nranks) != RL_IB_OK) return;
    /* What accept_one and conn_create then rely on: the stash index, the queue pairs
     * named, and a FIFO whose size does not overflow. */
    FZ_CHECK(h.from >= 0 && h.from < nranks && h.to == rank);
    FZ_CHECK(h.nqps >= 1 && h.nqps <= RL_IB_MAX_QPS);
    FZ_CHECK(h.nslots >= 2 && h.nslots <= 1024 && h.slot_size >= 64 && h.slot_size % 64 == 0);
    FZ_CHECK(((unsigned __int128)64 + h.slot_size) * h.nslots <= (64u << 20) * 1025ull);
}

static void reply(fz_in *in, int sign) {
    int peer = fz_u8(in), rank = fz_u8(in), nqps = 1 + fz_u8(in) % RL_IB_MAX_QPS;
    rl_ib_reply r;
    fz_take(in, &r, sizeof r);
    if (sign) {
        memcpy(r.nonce, fz_nonce, 16);
        rl_ib_reply_mac(fz_secret, &r, r.mac);
    }
    ringlet_result_t code = RINGLET_SUCCESS;
    int v = rl_ib_check_reply(fz_secret, &r, peer, rank, fz_nonce, nqps, &code);
    FZ_CHECK(v == RL_IB_OK || v == RL_IB_BAD || v == RL_IB_REFUSED || v == RL_IB_NQPS);
    if (v == RL_IB_REFUSED) {
        /* finish_connect fails the connection with this code and the peer's text. */
        FZ_CHECK(code != RINGLET_SUCCESS && code != RINGLET_IN_PROGRESS && code > 0 && code < RINGLET_NUM_RESULTS);
        r.msg[sizeof r.msg - 1] = 0;
        char why[256];
        snprintf(why, sizeof why, "refused: %s", r.msg);
    }
    if (v == RL_IB_OK) FZ_CHECK(r.status == 0 && r.nqps == (uint32_t)nqps && r.from == peer && r.to == rank);
}

static void chunk(fz_in *in) {
    uint64_t seq = fz_u64(in), len = fz_u64(in), off = fz_u64(in), slot = fz_u64(in);
    unsigned chan = fz_u8(in);
    if (off > len) off = len;        /* the receiver's own state */
    slot %= 64u << 20; /* as a hello may ask: 64 bytes to 64 MiB */
    if (slot < 64) slot = 64;
    rl_ib_chunk_hdr h;
    fz_take(in, &h, sizeof h);
    int v = rl_ib_check_chunk(&h, seq, (size_t)len, chan, (size_t)off, (size_t)slot);
    FZ_CHECK(v == RL_IB_OK || v == RL_IB_BAD || v == RL_IB_LENGTH || v == RL_IB_PLACE || v == RL_IB_CHANNEL);
    /* What consume() then copies: h.len bytes of the slot to buf + off. */
    if (v == RL_IB_OK) FZ_CHECK(h.len <= slot && off + h.len <= len && h.seq == seq && h.chan == chan);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fz_in in = {data, size};
    uint8_t sel = fz_u8(&in);
    switch (sel & 3) {
    case 0: blob(&in); break;
    case 1: hello(&in, sel & FZ_SIGN); break;
    case 2: reply(&in, sel & FZ_SIGN); break;
    case 3: chunk(&in); break;
    }
    return 0;
}
