/* Fuzz target: what a TCP peer sends, through the transport's checks (transports/tcp.h).
 *   byte 0 % 3 = 0: a part header: the length of the message and of the part this
 *                   rank expects (8 bytes each) and its channel (1 byte), then the
 *                   header received;
 *                1: a connection's hello: byte 1 this rank, byte 2 the job's size
 *                   (1..64), byte 3 this rank's sockets per peer (1..16), 64 bytes of
 *                   what earlier hellos said per rank, then the hello;
 *                2: a peer's blob: byte 1 its length's offset from the real one, then
 *                   the blob.
 *   byte 0 & FZ_SIGN: put the right MAC in the hello first (see fuzz.h). */
#include <netinet/in.h>

#include "fuzz.h"
#include "netif.h"
#include "sock.h"
#include "tcp.h"

static void hdr(fz_in *in) {
    uint64_t total = fz_u64(in), part = fz_u64(in);
    unsigned chan = fz_u8(in);
    rl_tcp_hdr got;
    fz_take(in, &got, sizeof got);
    int v = rl_tcp_check_hdr(&got, total, part, chan);
    FZ_CHECK(v == RL_TCP_HDR_OK || v == RL_TCP_HDR_CORRUPT || v == RL_TCP_HDR_LENGTH || v == RL_TCP_HDR_CHANNEL);
    if (v == RL_TCP_HDR_OK)
        FZ_CHECK(got.magic == RL_TCP_MAGIC && got.total == total && got.part == part && got.chan == chan);
}

static void hello(fz_in *in, int sign) {
    int rank = fz_u8(in), nranks = 1 + fz_u8(in) % 64, nsocks = 1 + fz_u8(in) % RL_TCP_MAX_SOCKS;
    int peer_nsocks[64];
    for (int r = 0; r < 64; r++) peer_nsocks[r] = fz_u8(in) % (nsocks + 1);
    rl_tcp_hello h;
    fz_take(in, &h, sizeof h);
    if (sign) rl_tcp_hello_mac(fz_secret, &h, h.mac);
    /* The listener's id: the hello's own (the connection is for this listener), or one
     * byte off (a connection meant for a listener that closed: refused). */
    uint8_t listener[16];
    memcpy(listener, h.listener, sizeof listener);
    int other = fz_u8(in) & 1;
    listener[0] ^= (uint8_t)other;
    int v = rl_tcp_check_hello(fz_secret, listener, &h, rank, nranks, nsocks, peer_nsocks);
    if (other) FZ_CHECK(v != 0);
    if (v != 0) return;
    /* What hello_arrived does with a hello it accepts. */
    FZ_CHECK(h.to == rank && h.from >= 0 && h.from < nranks);
    FZ_CHECK(h.nsocks >= 1 && h.nsocks <= nsocks && h.index >= 0 && h.index < h.nsocks);
    int *pending = malloc(sizeof(int) * (size_t)nranks * (size_t)nsocks);
    FZ_CHECK(pending != NULL);
    pending[(size_t)h.from * (size_t)nsocks + (size_t)h.index] = 3;
    peer_nsocks[h.from] = h.nsocks;
    free(pending);
}

static void blob(fz_in *in) {
    int delta = (int8_t)fz_u8(in);
    size_t len = (size_t)((int)sizeof(rl_tcp_blob) + (delta == 0 || delta > 8 || delta < -8 ? 0 : delta));
    uint8_t *bytes = malloc(len);
    FZ_CHECK(bytes != NULL);
    fz_take(in, bytes, len);
    rl_tcp_blob b;
    if (rl_tcp_parse_blob(bytes, len, &b) == 0) {
        /* What tcp_connect does with it. */
        FZ_CHECK(len == sizeof b && b.nsocks >= 1 && b.nsocks <= RL_TCP_MAX_SOCKS);
        FZ_CHECK(b.addr.ss_family == AF_INET || b.addr.ss_family == AF_INET6);
        FZ_CHECK(rl_sockaddr_len(&b.addr) <= sizeof b.addr);
        char where[96];
        rl_sockaddr_str((struct sockaddr *)&b.addr, where, sizeof where);
    }
    free(bytes);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fz_in in = {data, size};
    uint8_t sel = fz_u8(&in);
    switch ((sel & 0x7f) % 3) {
    case 0: hdr(&in); break;
    case 1: hello(&in, sel & FZ_SIGN); break;
    case 2: blob(&in); break;
    }
    return 0;
}
