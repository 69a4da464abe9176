/* Shared by the fuzz targets (tests/fuzz/<target>.c, built and run by tests/mp/fuzz.sh) and
 * the seed generator (gen_corpus.c).
 *
 * Every target reads its input as a stream: a first byte that picks what to parse
 * (and flags), a few bytes of context (the job's size, this rank, ...), then the bytes
 * a peer would send, zero-padded when the input is short. FZ_SIGN in the first byte
 * asks the target to put the right MAC (under FZ_SECRET) into the message before the
 * check, so that the fuzzer reaches what lies behind the authentication too: it
 * cannot forge an HMAC itself. */
#ifndef RINGLET_FUZZ_H
#define RINGLET_FUZZ_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FZ_SIGN 0x80u /* in the first byte: sign the message */

/* A property the code under test must keep; a violation is a finding. */
#define FZ_CHECK(cond)                                                                      \
    do {                                                                                    \
        if (!(cond)) {                                                                      \
            fprintf(stderr, "fuzz: property violated: %s (%s:%d)\n", #cond, __FILE__, __LINE__); \
            abort();                                                                        \
        }                                                                                   \
    } while (0)

/* The job secret and the nonces of the fuzzed exchanges. */
static const uint8_t fz_secret[32] = {0x5a, 0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88, 0x99, 0xaa,
                                      0xbb, 0xcc, 0xdd, 0xee, 0xf0, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06,
                                      0x07, 0x08, 0x09, 0x0a, 0x0b, 0x0c, 0x0d, 0x0e, 0x0f, 0x10};
static const uint8_t fz_nonce[16] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};

typedef struct fz_in {
    const uint8_t *p;
    size_t n;
} fz_in;

/* n bytes into dst, zeros past the end of the input. */
static inline void fz_take(fz_in *in, void *dst, size_t n) {
    size_t k = in->n < n ? in->n : n;
    memcpy(dst, in->p, k);
    memset((char *)dst + k, 0, n - k);
    in->p += k;
    in->n -= k;
}

static inline uint8_t fz_u8(fz_in *in) {
    uint8_t v;
    fz_take(in, &v, 1);
    return v;
}

static inline uint64_t fz_u64(fz_in *in) {
    uint64_t v;
    fz_take(in, &v, sizeof v);
    return v;
}

/* The rest of the input as a NUL-terminated string (malloc'ed); a NUL in the input
 * ends it early, as it would in an environment variable. */
static inline char *fz_str(fz_in *in) {
    char *s = malloc(in->n + 1);
    if (!s) abort();
    memcpy(s, in->p, in->n);
    s[in->n] = 0;
    in->p += in->n;
    in->n = 0;
    return s;
}

#endif
