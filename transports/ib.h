/* The IB transport's connection exchange and chunk header (ib.c), with the checks of
 * what a peer sends: here, free of verbs types, so that tests/fuzz/ib.c runs the code
 * the transport runs (in every build, with or without <infiniband/verbs.h>). */
#ifndef RINGLET_IB_H
#define RINGLET_IB_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include "ringlet.h"

#define RL_IB_MAGIC 0x524c4942u /* "RLIB" */
#define RL_IB_VERSION 3 /* 2: GID type and GRH in the blob, hello and reply; 3: a channel in chunk headers */
#define RL_IB_MAX_QPS 16
#define RL_IB_CHUNK_MAGIC 0x43484b31u

/* What every rank publishes. */
typedef struct rl_ib_blob {
    uint32_t magic, version;
    struct sockaddr_storage addr; /* the handshake listener */
    uint8_t gid[16];
    uint32_t lid, mtu, is_eth, gid_index;
    uint32_t gid_type, grh; /* RL_GID_*; 1: addressed with a GRH (rl_ib_port.grh) */
} rl_ib_blob;

/* Connector -> acceptor. */
typedef struct rl_ib_hello {
    uint32_t magic, version;
    int32_t from, to;
    uint32_t nqps, nslots, slot_size, mtu;
    uint32_t lid, is_eth;
    uint32_t gid_type, grh;
    uint8_t gid[16];
    uint32_t qpn[RL_IB_MAX_QPS];
    uint8_t nonce[16];
    uint8_t mac[32];
} rl_ib_hello;

/* Acceptor -> connector. */
typedef struct rl_ib_reply {
    uint32_t magic, version;
    int32_t from, to;
    int32_t status; /* ringlet_result_t: 0, or why the acceptor refused (msg) */
    uint32_t nqps, mtu, lid, grh;
    uint8_t gid[16];
    uint32_t qpn[RL_IB_MAX_QPS];
    uint64_t fifo_addr;
    uint32_t fifo_rkey, pad;
    uint8_t nonce[16]; /* the hello's */
    char msg[128];
    uint8_t mac[32];
} rl_ib_reply;

/* At the start of every slot. */
typedef struct rl_ib_chunk_hdr {
    uint64_t total; /* the message's length */
    uint64_t off;   /* this chunk's offset in it */
    uint64_t seq;   /* chunk number on the connection */
    uint32_t len;   /* bytes in this chunk */
    uint32_t magic;
    uint32_t chan;  /* the message's channel (rl_treq.chan) */
    uint32_t pad;
} rl_ib_chunk_hdr;

enum {
    RL_IB_OK = 0,
    RL_IB_BAD,
    RL_IB_VERSION_MISMATCH,
    RL_IB_REFUSED,
    RL_IB_NQPS,
    RL_IB_LENGTH,
    RL_IB_PLACE,
    RL_IB_CHANNEL
};

/* A peer's blob of bloblen bytes into *b: RL_IB_OK, RL_IB_BAD (malformed) or
 * RL_IB_VERSION_MISMATCH. */
int rl_ib_parse_blob(const void *blob, size_t bloblen, rl_ib_blob *b);

void rl_ib_hello_mac(const uint8_t secret[32], const rl_ib_hello *h, uint8_t out[32]);
void rl_ib_reply_mac(const uint8_t secret[32], const rl_ib_reply *r, uint8_t out[32]);
/* Acceptor: RL_IB_OK when h is a genuine hello to rank `rank` of a job of nranks ranks,
 * asking for a FIFO this rank agrees to allocate; else RL_IB_BAD. */
int rl_ib_check_hello(const uint8_t secret[32], const rl_ib_hello *h, int rank, int nranks);
/* Connector, on the reply to its hello (nonce, nqps queue pairs) sent from rank peer
 * to rank `rank`: RL_IB_OK, RL_IB_BAD (does not authenticate), RL_IB_REFUSED (the peer
 * refused: *code is its error, never RINGLET_SUCCESS) or RL_IB_NQPS. */
int rl_ib_check_reply(const uint8_t secret[32], const rl_ib_reply *r, int peer, int rank, const uint8_t nonce[16],
                      int nqps, ringlet_result_t *code);
/* Receiver, on the header of chunk number seq landed for a receive of len bytes of
 * channel chan of which off have arrived, slots of slot_size bytes: RL_IB_OK, RL_IB_BAD
 * (corrupt), RL_IB_CHANNEL (a message of another call), RL_IB_LENGTH (of another length)
 * or RL_IB_PLACE (chunk out of place). */
int rl_ib_check_chunk(const rl_ib_chunk_hdr *h, uint64_t seq, size_t len, unsigned chan, size_t off, size_t slot_size);

#endif
