/* ringlet: SHA-256 (FIPS 180-4), HMAC-SHA256 (RFC 2104), constant-time compare and
 * OS randomness. Used by the bootstrap to authenticate peers with the job secret.
 *
 * All functions are thread-safe (no global state). Contexts may be copied by value
 * (e.g. to MAC several messages under one key, set up a keyed context once and copy it).
 */
#ifndef RL_SHA256_H
#define RL_SHA256_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define RL_SHA256_DIGEST_LEN 32
#define RL_SHA256_BLOCK_LEN 64

/* Incremental SHA-256. init, any number of update calls (data may be NULL when
 * len == 0), then final, which writes the digest and wipes the context. */
typedef struct rl_sha256_ctx {
    uint32_t h[8];      /* chaining state */
    uint64_t nbytes;    /* total message length so far, in bytes */
    uint8_t buf[64];    /* partial block */
    size_t buflen;      /* bytes used in buf (0..63) */
} rl_sha256_ctx;

void rl_sha256_init(rl_sha256_ctx *ctx);
void rl_sha256_update(rl_sha256_ctx *ctx, const void *data, size_t len);
void rl_sha256_final(rl_sha256_ctx *ctx, uint8_t out[32]);

/* One-shot SHA-256 of data[0..len). */
void rl_sha256(const void *data, size_t len, uint8_t out[32]);

/* Incremental HMAC-SHA256. Keys longer than 64 bytes are hashed first (RFC 2104);
 * key may be NULL when keylen == 0. final writes the 32-byte tag and wipes the context. */
typedef struct rl_hmac_sha256_ctx {
    rl_sha256_ctx inner; /* keyed with K ^ ipad, then fed the message */
    rl_sha256_ctx outer; /* keyed with K ^ opad */
} rl_hmac_sha256_ctx;

void rl_hmac_sha256_init(rl_hmac_sha256_ctx *ctx, const void *key, size_t keylen);
void rl_hmac_sha256_update(rl_hmac_sha256_ctx *ctx, const void *msg, size_t msglen);
void rl_hmac_sha256_final(rl_hmac_sha256_ctx *ctx, uint8_t out[32]);

/* One-shot HMAC-SHA256. */
void rl_hmac_sha256(const void *key, size_t keylen, const void *msg, size_t msglen, uint8_t out[32]);

/* Compares n bytes in time that depends only on n. Returns 1 if equal, 0 if not
 * (1 when n == 0). Use it for every MAC / secret comparison. */
int rl_ct_equal(const void *a, const void *b, size_t n);

/* Fills buf with n bytes from the kernel CSPRNG: getrandom(2), falling back to
 * /dev/urandom where the syscall is missing or blocked. Returns 0 on success,
 * -1 on failure (errno set); on failure buf contents are unspecified. */
int rl_random_bytes(void *buf, size_t n);

/* Zeroes n bytes in a way the compiler may not elide (for keys and pads). */
void rl_secure_zero(void *p, size_t n);

#ifdef __cplusplus
}
#endif

#endif /* RL_SHA256_H */
