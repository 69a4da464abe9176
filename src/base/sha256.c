/* ringlet: SHA-256 per FIPS 180-4, HMAC per RFC 2104, plus small helpers.
 * Written from the specifications; portable C11, no endianness assumptions. */
#include "sha256.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <unistd.h>
#if defined(__linux__)
#include <sys/syscall.h>
#endif

/* FIPS 180-4 4.2.2: first 32 bits of the fractional parts of the cube roots of the
 * first 64 primes. */
static const uint32_t K[64] = {
    0x428a2f98u, 0x71374491u, 0xb5c0fbcfu, 0xe9b5dba5u, 0x3956c25bu, 0x59f111f1u, 0x923f82a4u, 0xab1c5ed5u,
    0xd807aa98u, 0x12835b01u, 0x243185beu, 0x550c7dc3u, 0x72be5d74u, 0x80deb1feu, 0x9bdc06a7u, 0xc19bf174u,
    0xe49b69c1u, 0xefbe4786u, 0x0fc19dc6u, 0x240ca1ccu, 0x2de92c6fu, 0x4a7484aau, 0x5cb0a9dcu, 0x76f988dau,
    0x983e5152u, 0xa831c66du, 0xb00327c8u, 0xbf597fc7u, 0xc6e00bf3u, 0xd5a79147u, 0x06ca6351u, 0x14292967u,
    0x27b70a85u, 0x2e1b2138u, 0x4d2c6dfcu, 0x53380d13u, 0x650a7354u, 0x766a0abbu, 0x81c2c92eu, 0x92722c85u,
    0xa2bfe8a1u, 0xa81a664bu, 0xc24b8b70u, 0xc76c51a3u, 0xd192e819u, 0xd6990624u, 0xf40e3585u, 0x106aa070u,
    0x19a4c116u, 0x1e376c08u, 0x2748774cu, 0x34b0bcb5u, 0x391c0cb3u, 0x4ed8aa4au, 0x5b9cca4fu, 0x682e6ff3u,
    0x748f82eeu, 0x78a5636fu, 0x84c87814u, 0x8cc70208u, 0x90befffau, 0xa4506cebu, 0xbef9a3f7u, 0xc67178f2u,
};

/* FIPS 180-4 5.3.3: first 32 bits of the fractional parts of the square roots of the
 * first 8 primes. */
static const uint32_t H0[8] = {
    0x6a09e667u, 0xbb67ae85u, 0x3c6ef372u, 0xa54ff53au, 0x510e527fu, 0x9b05688cu, 0x1f83d9abu, 0x5be0cd19u,
};

static inline uint32_t rotr(uint32_t x, unsigned n) { return (x >> n) | (x << (32u - n)); }
static inline uint32_t ch(uint32_t x, uint32_t y, uint32_t z) { return (x & y) ^ (~x & z); }
static inline uint32_t maj(uint32_t x, uint32_t y, uint32_t z) { return (x & y) ^ (x & z) ^ (y & z); }
static inline uint32_t bsig0(uint32_t x) { return rotr(x, 2) ^ rotr(x, 13) ^ rotr(x, 22); }
static inline uint32_t bsig1(uint32_t x) { return rotr(x, 6) ^ rotr(x, 11) ^ rotr(x, 25); }
static inline uint32_t ssig0(uint32_t x) { return rotr(x, 7) ^ rotr(x, 18) ^ (x >> 3); }
static inline uint32_t ssig1(uint32_t x) { return rotr(x, 17) ^ rotr(x, 19) ^ (x >> 10); }

static inline uint32_t load_be32(const uint8_t *p)
{
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | (uint32_t)p[3];
}

static inline void store_be32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24);
    p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
}

/* FIPS 180-4 6.2.2: process one 512-bit block. */
static void compress(uint32_t h[8], const uint8_t block[64])
{
    uint32_t w[64];
    for (int t = 0; t < 16; t++)
        w[t] = load_be32(block + 4 * t);
    for (int t = 16; t < 64; t++)
        w[t] = ssig1(w[t - 2]) + w[t - 7] + ssig0(w[t - 15]) + w[t - 16];

    uint32_t a = h[0], b = h[1], c = h[2], d = h[3];
    uint32_t e = h[4], f = h[5], g = h[6], hh = h[7];
    for (int t = 0; t < 64; t++) {
        uint32_t t1 = hh + bsig1(e) + ch(e, f, g) + K[t] + w[t];
        uint32_t t2 = bsig0(a) + maj(a, b, c);
        hh = g;
        g = f;
        f = e;
        e = d + t1;
        d = c;
        c = b;
        b = a;
        a = t1 + t2;
    }
    h[0] += a;
    h[1] += b;
    h[2] += c;
    h[3] += d;
    h[4] += e;
    h[5] += f;
    h[6] += g;
    h[7] += hh;
}

void rl_secure_zero(void *p, size_t n)
{
    volatile uint8_t *v = (volatile uint8_t *)p;
    while (n--)
        *v++ = 0;
}

void rl_sha256_init(rl_sha256_ctx *ctx)
{
    memcpy(ctx->h, H0, sizeof H0);
    ctx->nbytes = 0;
    ctx->buflen = 0;
    memset(ctx->buf, 0, sizeof ctx->buf);
}

void rl_sha256_update(rl_sha256_ctx *ctx, const void *data, size_t len)
{
    const uint8_t *p = (const uint8_t *)data;
    if (len == 0)
        return;
    ctx->nbytes += (uint64_t)len;
    if (ctx->buflen > 0) {
        size_t take = 64 - ctx->buflen;
        if (take > len)
            take = len;
        memcpy(ctx->buf + ctx->buflen, p, take);
        ctx->buflen += take;
        p += take;
        len -= take;
        if (ctx->buflen < 64)
            return;
        compress(ctx->h, ctx->buf);
        ctx->buflen = 0;
    }
    while (len >= 64) {
        compress(ctx->h, p);
        p += 64;
        len -= 64;
    }
    if (len > 0) {
        memcpy(ctx->buf, p, len);
        ctx->buflen = len;
    }
}

void rl_sha256_final(rl_sha256_ctx *ctx, uint8_t out[32])
{
    /* FIPS 180-4 5.1.1: append 0x80, zeros to 56 mod 64, then the 64-bit
     * big-endian bit length. */
    uint64_t bits = ctx->nbytes << 3;
    size_t n = ctx->buflen;
    ctx->buf[n++] = 0x80;
    if (n > 56) {
        memset(ctx->buf + n, 0, 64 - n);
        compress(ctx->h, ctx->buf);
        n = 0;
    }
    memset(ctx->buf + n, 0, 56 - n);
    store_be32(ctx->buf + 56, (uint32_t)(bits >> 32));
    store_be32(ctx->buf + 60, (uint32_t)bits);
    compress(ctx->h, ctx->buf);
    for (int i = 0; i < 8; i++)
        store_be32(out + 4 * i, ctx->h[i]);
    rl_secure_zero(ctx, sizeof *ctx);
}

void rl_sha256(const void *data, size_t len, uint8_t out[32])
{
    rl_sha256_ctx ctx;
    rl_sha256_init(&ctx);
    rl_sha256_update(&ctx, data, len);
    rl_sha256_final(&ctx, out);
}

/* RFC 2104: H(K ^ opad || H(K ^ ipad || text)), B = 64, ipad = 0x36, opad = 0x5c. */
void rl_hmac_sha256_init(rl_hmac_sha256_ctx *ctx, const void *key, size_t keylen)
{
    uint8_t k[64];
    uint8_t pad[64];
    memset(k, 0, sizeof k);
    if (keylen > 64)
        rl_sha256(key, keylen, k);
    else if (keylen > 0)
        memcpy(k, key, keylen);

    for (int i = 0; i < 64; i++)
        pad[i] = (uint8_t)(k[i] ^ 0x36u);
    rl_sha256_init(&ctx->inner);
    rl_sha256_update(&ctx->inner, pad, sizeof pad);

    for (int i = 0; i < 64; i++)
        pad[i] = (uint8_t)(k[i] ^ 0x5cu);
    rl_sha256_init(&ctx->outer);
    rl_sha256_update(&ctx->outer, pad, sizeof pad);

    rl_secure_zero(k, sizeof k);
    rl_secure_zero(pad, sizeof pad);
}

void rl_hmac_sha256_update(rl_hmac_sha256_ctx *ctx, const void *msg, size_t msglen)
{
    rl_sha256_update(&ctx->inner, msg, msglen);
}

void rl_hmac_sha256_final(rl_hmac_sha256_ctx *ctx, uint8_t out[32])
{
    uint8_t ih[32];
    rl_sha256_final(&ctx->inner, ih);
    rl_sha256_update(&ctx->outer, ih, sizeof ih);
    rl_sha256_final(&ctx->outer, out);
    rl_secure_zero(ih, sizeof ih);
    rl_secure_zero(ctx, sizeof *ctx);
}

void rl_hmac_sha256(const void *key, size_t keylen, const void *msg, size_t msglen, uint8_t out[32])
{
    rl_hmac_sha256_ctx ctx;
    rl_hmac_sha256_init(&ctx, key, keylen);
    rl_hmac_sha256_update(&ctx, msg, msglen);
    rl_hmac_sha256_final(&ctx, out);
}

int rl_ct_equal(const void *a, const void *b, size_t n)
{
    const volatile uint8_t *x = (const volatile uint8_t *)a;
    const volatile uint8_t *y = (const volatile uint8_t *)b;
    uint8_t diff = 0;
    for (size_t i = 0; i < n; i++)
        diff |= (uint8_t)(x[i] ^ y[i]);
    /* 1 when diff == 0, else 0, without a data-dependent branch. */
    return (int)(1u & (((unsigned)diff - 1u) >> 8));
}

static int urandom_bytes(uint8_t *p, size_t n)
{
    int fd;
    do {
        fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
    } while (fd < 0 && errno == EINTR);
    if (fd < 0)
        return -1;
    while (n > 0) {
        ssize_t r = read(fd, p, n);
        if (r < 0) {
            if (errno == EINTR)
                continue;
            int e = errno;
            close(fd);
            errno = e;
            return -1;
        }
        if (r == 0) {
            close(fd);
            errno = EIO;
            return -1;
        }
        p += (size_t)r;
        n -= (size_t)r;
    }
    close(fd);
    return 0;
}

int rl_random_bytes(void *buf, size_t n)
{
    uint8_t *p = (uint8_t *)buf;
    if (n == 0)
        return 0;
    if (p == NULL) {
        errno = EINVAL;
        return -1;
    }
#if defined(__linux__) && defined(SYS_getrandom)
    /* The raw syscall avoids depending on glibc >= 2.25 for getrandom(). Flags 0:
     * the urandom pool, blocking only until it is first initialised. */
    while (n > 0) {
        long r = syscall(SYS_getrandom, p, n, 0u);
        if (r < 0) {
            if (errno == EINTR)
                continue;
            if (errno == ENOSYS || errno == EPERM || errno == EACCES)
                return urandom_bytes(p, n); /* old kernel or seccomp filter */
            return -1;
        }
        p += (size_t)r;
        n -= (size_t)r;
    }
    return 0;
#else
    return urandom_bytes(p, n);
#endif
}
