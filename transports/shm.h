/* The shared-memory transport's segment layout (shm.c), with the checks of what a peer
 * wrote there: here so that tests/fuzz/shm.c runs the code the transport runs. */
#ifndef RINGLET_SHM_H
#define RINGLET_SHM_H

#include <stddef.h>
#include <stdint.h>

#define RL_SHM_MAGIC 0x524c5332u /* "RLS2": the layout of 2026-12-06 (a channel in every slot's record) */
/* The segment header's page; FIFOs follow, each a whole number of these. 64 KiB, the
 * largest page Linux uses (arm64 and ppc64le kernels may have 64 KiB pages): a sender maps
 * the receiver's FIFO at its offset, and mmap takes only offsets on a page boundary. */
#define RL_SHM_PAGE 65536u
#define RL_SHM_FIFO_HDR 256u     /* at the start of every FIFO */
#define RL_SHM_SLOT_HDR 32u      /* at the start of every slot */
/* The geometry init writes (RINGLET_SHM_SLOT_SIZE, RINGLET_SHM_NSLOTS). */
#define RL_SHM_SLOT_MIN 4096u
#define RL_SHM_SLOT_MAX (64u << 20)
#define RL_SHM_NSLOTS_MIN 2u
#define RL_SHM_NSLOTS_MAX 1024u

/* At the start of every rank's segment. */
typedef struct rl_shm_seg_hdr {
    uint32_t magic;
    int32_t rank, nranks, pid;
    uint32_t nslots, pad;
    uint64_t slot_bytes, fifo_stride;
    uint8_t tag[32]; /* HMAC(secret, name): the segment belongs to this job */
} rl_shm_seg_hdr;

/* A FIFO's shape, as a sender learns it from the receiver's header. */
typedef struct rl_shm_geom {
    uint32_t nslots;
    uint64_t slot_bytes, fifo_stride;
} rl_shm_geom;

/* Bytes a FIFO of that shape takes, rounded up to pages (the stride init writes). */
uint64_t rl_shm_fifo_stride(uint32_t nslots, uint64_t slot_bytes);

/* The header h (in memory the peer can write while we read) is rank peer's of this
 * job (tag: HMAC(secret, the segment's name)): 0, else -1. */
int rl_shm_check_owner(const rl_shm_seg_hdr *h, int peer, const uint8_t tag[32]);
/* Reads h once and, when its FIFOs fit a job of nranks ranks, fills *g: 0, else -1. */
int rl_shm_check_layout(const rl_shm_seg_hdr *h, int nranks, rl_shm_geom *g);

/* A slot's header is the slot FIFO's record, checked by rl_fifo_check_piece (slot_fifo.h). */

#endif
