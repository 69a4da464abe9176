/* Unit test for rank 0's check of a hello (src/comm/bootstrap.c, rl_boot_check_hello):
 * a hello with the job's secret and a right MAC, but whose rank info claims a transport
 * blob longer than RL_BLOB_MAX, is refused as malformed (1, with a message naming the
 * rank): the peers read the blobs by those lengths (the TCP one is hashed for split
 * communicators). Also: the same hello with sane lengths is accepted (0), a wrong MAC is
 * not this job's (-1). Exit status 0 on success. */
#include <stdio.h>
#include <string.h>

#include "bootstrap.h"

static int failures;
#define CHECK(cond, ...)                                                                                               \
    do {                                                                                                               \
        if (!(cond)) failures++, printf("FAIL " __VA_ARGS__), printf("\n");                                          \
    } while (0)

int main(void) {
    uint8_t secret[32], nonce[16];
    for (int i = 0; i < 32; i++) secret[i] = (uint8_t)(i * 37 + 1);
    for (int i = 0; i < 16; i++) nonce[i] = (uint8_t)(i * 11 + 5);
    int fds[4] = {3, -1, -1, -1}; /* rank 0 itself; ranks 1-3 not joined yet */
    rl_boot_hello h;
    memset(&h, 0, sizeof h);
    h.magic = RL_BOOT_MAGIC;
    h.nranks = 4;
    h.rank = 2;
    for (int i = 0; i < RL_TP_MAX; i++) h.info.bloblen[i] = (uint32_t)(i * 7 % RL_BLOB_MAX);
    char msg[RL_MSG_MAX] = "";

    rl_boot_hello_mac(secret, nonce, &h, h.mac);
    int v = rl_boot_check_hello(secret, nonce, &h, 4, fds, msg, sizeof msg);
    CHECK(v == 0, "a sane hello: verdict %d (%s), want 0", v, msg);

    h.info.bloblen[RL_TP_TCP] = RL_BLOB_MAX + 1;
    rl_boot_hello_mac(secret, nonce, &h, h.mac);
    msg[0] = 0;
    v = rl_boot_check_hello(secret, nonce, &h, 4, fds, msg, sizeof msg);
    CHECK(v == 1 && strstr(msg, "rank 2") && strstr(msg, "malformed"),
          "a blob of %d bytes: verdict %d (%s), want 1 naming rank 2", RL_BLOB_MAX + 1, v, msg);

    h.info.bloblen[RL_TP_TCP] = 0xffffffffu;
    rl_boot_hello_mac(secret, nonce, &h, h.mac);
    v = rl_boot_check_hello(secret, nonce, &h, 4, fds, msg, sizeof msg);
    CHECK(v == 1, "a blob of 2^32-1 bytes: verdict %d, want 1", v);

    h.mac[0] ^= 1;
    v = rl_boot_check_hello(secret, nonce, &h, 4, fds, msg, sizeof msg);
    CHECK(v == -1, "a wrong MAC: verdict %d, want -1", v);

    if (failures) return printf("test_boot_hello: %d failed\n", failures), 1;
    printf("test_boot_hello: passed\n");
    return 0;
}
