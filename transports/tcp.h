/* The TCP transport's wire format (tcp.c), with the checks of what a peer sends: here
 * so that tests/fuzz/tcp.c runs the code the transport runs. */
#ifndef RINGLET_TCP_H
#define RINGLET_TCP_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#define RL_TCP_MAX_SOCKS 16
#define RL_TCP_INLINE_NOLIMIT (1LL << 40) /* RINGLET_TCP_INLINE_BYTES: largest value, and no limit */
#define RL_TCP_MAGIC 0x524c5432u /* "RLT2": the hello and part header of 2026-12-06 (a channel in the header) */

/* Before every part of a message. */
typedef struct rl_tcp_hdr {
    uint64_t total; /* the message's length */
    uint64_t part;  /* this part's length */
    uint32_t magic;
    uint8_t chan; /* the message's channel (rl_treq.chan) */
    uint8_t pad[3];
} rl_tcp_hdr;
/* Bytes a part's header takes on the wire: the header, then zeroes. A multiple of 64, so
 * that the payload keeps the cache-line alignment it has in memory on both ends
 * (loopback hands the sender's pages to the receiver, laid out as the stream: a payload
 * 24 bytes off its buffer's alignment made every 1 MiB message 2.5-5x slower to copy on
 * the AMD machine of the README). */
#define RL_TCP_HDR_WIRE 64

/* First bytes on every socket, from the connecting side. */
typedef struct rl_tcp_hello {
    uint32_t magic;
    int32_t from, to, index, nsocks;
    uint8_t listener[16]; /* the listener it is for: the id in the target's blob */
    uint8_t nonce[16];
    uint8_t mac[32]; /* HMAC(secret, all of the above) */
    uint8_t align[44]; /* zeroes: the data after the hello starts cache-line aligned (RL_TCP_HDR_WIRE) */
} rl_tcp_hello;
_Static_assert(sizeof(rl_tcp_hello) % 64 == 0, "the hello keeps the stream cache-line aligned");

/* What a rank publishes: where it listens, how many sockets it uses per peer, and the
 * listener's random id. A connection meant for a listener that closed and whose port a
 * new one took (another communicator of the process, or of another process of the job,
 * which may hold the same secret: every communicator made from the environment does)
 * carries the old id, and the new listener refuses it. */
typedef struct rl_tcp_blob {
    struct sockaddr_storage addr;
    int32_t nsocks;
    uint8_t listener[16];
} rl_tcp_blob;

enum { RL_TCP_HDR_OK = 0, RL_TCP_HDR_CORRUPT = 1, RL_TCP_HDR_LENGTH = 2, RL_TCP_HDR_CHANNEL = 3 };
/* A received part header against the part the receive expects: RL_TCP_HDR_OK, CORRUPT
 * (not a header), CHANNEL (the peer sent a message of another call) or LENGTH (of
 * another length). */
int rl_tcp_check_hdr(const rl_tcp_hdr *got, uint64_t total, uint64_t part, unsigned chan);

void rl_tcp_hello_mac(const uint8_t secret[32], const rl_tcp_hello *h, uint8_t out[32]);
/* 0 when h is a genuine hello to this listener (its id `listener`), rank `rank` of a job
 * of nranks ranks that uses at most nsocks sockets per peer; peer_nsocks[r] (0: none yet)
 * is what earlier hellos from rank r said. -1 otherwise. */
int rl_tcp_check_hello(const uint8_t secret[32], const uint8_t listener[16], const rl_tcp_hello *h, int rank,
                       int nranks, int nsocks, const int *peer_nsocks);

/* A peer's blob of bloblen bytes into *b: 0, or -1 when malformed. */
int rl_tcp_parse_blob(const void *blob, size_t bloblen, rl_tcp_blob *b);

#endif
