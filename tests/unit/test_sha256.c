/* Unit test for src/base/sha256.c: FIPS 180-4 / NIST SHA-256 examples, RFC 4231 HMAC-SHA256
 * test cases 1-4, 6, 7, incremental-vs-one-shot consistency, rl_ct_equal and
 * rl_random_bytes. Exit status 0 on success; each failure is printed. */
#include "sha256.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int failures;

static void to_hex(const uint8_t *d, size_t n, char *out)
{
    static const char hx[] = "0123456789abcdef";
    for (size_t i = 0; i < n; i++) {
        out[2 * i] = hx[d[i] >> 4];
        out[2 * i + 1] = hx[d[i] & 15];
    }
    out[2 * n] = '\0';
}

static void check_digest(const char *what, const uint8_t got[32], const char *want_hex)
{
    char hex[65];
    to_hex(got, 32, hex);
    if (strcmp(hex, want_hex) != 0) {
        printf("FAIL %s\n  got  %s\n  want %s\n", what, hex, want_hex);
        failures++;
    }
}

static void check(const char *what, int cond)
{
    if (!cond) {
        printf("FAIL %s\n", what);
        failures++;
    }
}

/* Hashes msg one-shot, then incrementally in pieces of every size 1..130, and checks
 * each against want. */
static void check_sha(const char *what, const void *msg, size_t len, const char *want)
{
    uint8_t d[32];
    char name[128];
    rl_sha256(msg, len, d);
    snprintf(name, sizeof name, "sha256 %s (one-shot)", what);
    check_digest(name, d, want);

    const uint8_t *p = msg;
    for (size_t step = 1; step <= 130 && step <= len + 1; step++) {
        rl_sha256_ctx c;
        rl_sha256_init(&c);
        for (size_t off = 0; off < len; off += step)
            rl_sha256_update(&c, p + off, len - off < step ? len - off : step);
        rl_sha256_final(&c, d);
        snprintf(name, sizeof name, "sha256 %s (pieces of %zu)", what, step);
        char hex[65];
        to_hex(d, 32, hex);
        if (strcmp(hex, want) != 0) {
            check_digest(name, d, want);
            break; /* one report per message is enough */
        }
    }
}

static void test_sha256(void)
{
    check_sha("\"\"", "", 0, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    check_sha("NULL,0", NULL, 0, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    check_sha("\"abc\"", "abc", 3, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");

    const char *m448 = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
    check_sha("448-bit", m448, strlen(m448), "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");

    const char *m896 = "abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmn"
                       "hijklmnoijklmnopjklmnopqklmnopqrlmnopqrsmnopqrstnopqrstu";
    check_sha("896-bit", m896, strlen(m896), "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1");

    /* One million 'a': one-shot, and fed 1000 bytes at a time. */
    size_t n = 1000000;
    char *a = malloc(n);
    if (!a) {
        printf("FAIL malloc\n");
        failures++;
        return;
    }
    memset(a, 'a', n);
    const char *want_a = "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0";
    uint8_t d[32];
    rl_sha256(a, n, d);
    check_digest("sha256 million 'a' (one-shot)", d, want_a);
    rl_sha256_ctx c;
    rl_sha256_init(&c);
    for (size_t i = 0; i < 1000; i++)
        rl_sha256_update(&c, a + i * 1000, 1000);
    rl_sha256_final(&c, d);
    check_digest("sha256 million 'a' (1000 x 1000)", d, want_a);
    free(a);

    /* Padding edge cases: lengths 55, 56, 63, 64 (one vs two final blocks). */
    static const struct {
        size_t len;
        const char *want;
    } edges[] = {
        {55, "9f4390f8d30c2dd92ec9f095b65e2b9ae9b0a925a5258e241c9f1e910f734318"},
        {56, "b35439a4ac6f0948b6d6f9e3c6af0f5f590ce20f1bde7090ef7970686ec6738a"},
        {63, "7d3e74a05d7db15bce4ad9ec0658ea98e3f06eeecf16b4c6fff2da457ddc2f34"},
        {64, "ffe054fe7ae0cb6dc65c3af9b61d5209f439851db43d0ba5997337df154668eb"},
    };
    char buf[64];
    memset(buf, 'a', sizeof buf);
    for (size_t i = 0; i < sizeof edges / sizeof edges[0]; i++) {
        char what[32];
        snprintf(what, sizeof what, "%zu x 'a'", edges[i].len);
        check_sha(what, buf, edges[i].len, edges[i].want);
    }
}

static void check_hmac(const char *what, const uint8_t *key, size_t keylen, const void *msg, size_t msglen,
                       const char *want)
{
    uint8_t d[32];
    char name[96];
    rl_hmac_sha256(key, keylen, msg, msglen, d);
    snprintf(name, sizeof name, "hmac %s (one-shot)", what);
    check_digest(name, d, want);

    /* Incremental, in two pieces at every split point. */
    const uint8_t *p = msg;
    for (size_t cut = 0; cut <= msglen; cut++) {
        rl_hmac_sha256_ctx c;
        rl_hmac_sha256_init(&c, key, keylen);
        rl_hmac_sha256_update(&c, p, cut);
        rl_hmac_sha256_update(&c, p ? p + cut : NULL, msglen - cut);
        rl_hmac_sha256_final(&c, d);
        char hex[65];
        to_hex(d, 32, hex);
        if (strcmp(hex, want) != 0) {
            snprintf(name, sizeof name, "hmac %s (split at %zu)", what, cut);
            check_digest(name, d, want);
            break;
        }
    }
}

static void test_hmac(void)
{
    uint8_t key[131];

    /* RFC 4231 4.2, test case 1 */
    memset(key, 0x0b, 20);
    check_hmac("rfc4231 #1", key, 20, "Hi There", 8,
               "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7");

    /* 4.3, test case 2: key shorter than the output */
    const char *m2 = "what do ya want for nothing?";
    check_hmac("rfc4231 #2", (const uint8_t *)"Jefe", 4, m2, strlen(m2),
               "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");

    /* 4.4, test case 3 */
    uint8_t data[50];
    memset(key, 0xaa, 20);
    memset(data, 0xdd, sizeof data);
    check_hmac("rfc4231 #3", key, 20, data, sizeof data,
               "773ea91e36800e46854db8ebd09181a72959098b3ef8c122d9635514ced565fe");

    /* 4.5, test case 4 */
    for (int i = 0; i < 25; i++)
        key[i] = (uint8_t)(i + 1);
    memset(data, 0xcd, sizeof data);
    check_hmac("rfc4231 #4", key, 25, data, sizeof data,
               "82558a389a443c0ea4cc819899f2083a85f0faa3e578f8077a2e3ff46729665b");

    /* 4.7, test case 6: key longer than the block size */
    memset(key, 0xaa, 131);
    const char *m6 = "Test Using Larger Than Block-Size Key - Hash Key First";
    check_hmac("rfc4231 #6", key, 131, m6, strlen(m6),
               "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54");

    /* 4.8, test case 7: key and data longer than the block size */
    const char *m7 = "This is a test using a larger than block-size key and a larger than block-size data. "
                     "The key needs to be hashed before being used by the HMAC algorithm.";
    check_hmac("rfc4231 #7", key, 131, m7, strlen(m7),
               "9b09ffa71b942fcb27635fbcd5b0e944bfdc63644f0713938a7f51535c3a35e2");

    /* Empty key and message (NULL pointers with zero lengths are allowed). */
    check_hmac("empty key, empty msg", NULL, 0, NULL, 0,
               "b613679a0814d9ec772f95d778c35fc5ff1697c493715653c6c712144292c5ad");

    /* A keyed context may be copied to MAC several messages under one key. */
    rl_hmac_sha256_ctx base, c;
    uint8_t d[32];
    rl_hmac_sha256_init(&base, "Jefe", 4);
    c = base;
    rl_hmac_sha256_update(&c, m2, strlen(m2));
    rl_hmac_sha256_final(&c, d);
    check_digest("hmac copied context", d, "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
}

static void test_ct_equal(void)
{
    uint8_t a[40], b[40];
    for (int i = 0; i < 40; i++)
        a[i] = b[i] = (uint8_t)(i * 7);
    check("ct_equal equal", rl_ct_equal(a, b, sizeof a) == 1);
    check("ct_equal n=0", rl_ct_equal(a, b, 0) == 1);
    for (int i = 0; i < 40; i++) {
        for (int bit = 0; bit < 8; bit++) {
            b[i] ^= (uint8_t)(1u << bit);
            if (rl_ct_equal(a, b, sizeof a) != 0) {
                printf("FAIL ct_equal differs at byte %d bit %d\n", i, bit);
                failures++;
            }
            b[i] ^= (uint8_t)(1u << bit);
        }
    }
    b[39] ^= 0xff;
    check("ct_equal prefix", rl_ct_equal(a, b, 39) == 1);
}

static void test_random(void)
{
    uint8_t x[64], y[64];
    memset(x, 0, sizeof x);
    memset(y, 0, sizeof y);
    check("random_bytes x", rl_random_bytes(x, sizeof x) == 0);
    check("random_bytes y", rl_random_bytes(y, sizeof y) == 0);
    check("random_bytes differ", !rl_ct_equal(x, y, sizeof x));
    static const uint8_t zero[64];
    check("random_bytes nonzero", !rl_ct_equal(x, zero, sizeof x));
    check("random_bytes n=0", rl_random_bytes(NULL, 0) == 0);

    /* A large request (more than one getrandom chunk). */
    size_t n = 1 << 20;
    uint8_t *big = calloc(1, n);
    check("random_bytes big alloc", big != NULL);
    if (big) {
        check("random_bytes big", rl_random_bytes(big, n) == 0);
        check("random_bytes big tail nonzero", !rl_ct_equal(big + n - 64, zero, 64));
        free(big);
    }
}

int main(void)
{
    test_sha256();
    test_hmac();
    test_ct_equal();
    test_random();
    if (failures) {
        printf("test_sha256: %d failure(s)\n", failures);
        return 1;
    }
    printf("test_sha256: ok\n");
    return 0;
}
