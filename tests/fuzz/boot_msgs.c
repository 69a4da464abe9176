/* Fuzz target: the bootstrap handshake's messages, through the checks rl_boot_exchange
 * runs on them (bootstrap.h).
 *   byte 0 & 1 = 0: a hello as rank 0 receives it: byte 1 the job's size (1..64),
 *                   bytes 2-9 which ranks joined already, then the hello;
 *                1: rank 0's table (or error) as another rank receives it: byte 1 the
 *                   job's size (1..8: the table grows with it), then the table head
 *                   and the payload.
 *   byte 0 & FZ_SIGN: put the right MAC in first (see fuzz.h). */
#include "bootstrap.h"
#include "fuzz.h"

static void hello(fz_in *in, int sign) {
    int P = 1 + fz_u8(in) % 64;
    uint64_t joined = fz_u64(in);
    int fds[64];
    for (int r = 0; r < P; r++) fds[r] = (joined >> r) & 1 ? 100 + r : -1;
    rl_boot_hello h;
    fz_take(in, &h, sizeof h);
    if (sign) rl_boot_hello_mac(fz_secret, fz_nonce, &h, h.mac);
    char msg[RL_MSG_MAX] = "";
    int v = rl_boot_check_hello(fz_secret, fz_nonce, &h, P, fds, msg, sizeof msg);
    FZ_CHECK(v >= -1 && v <= 1);
    if (v == 1) FZ_CHECK(msg[0] && strnlen(msg, sizeof msg) < sizeof msg);
    if (v != 0) return;
    /* What root_gather does with a hello it accepts. */
    FZ_CHECK(h.nranks == P && h.rank > 0 && h.rank < P && fds[h.rank] < 0);
    for (int i = 0; i < RL_TP_MAX; i++) FZ_CHECK(h.info.bloblen[i] <= RL_BLOB_MAX); /* read by these lengths */
    rl_rank_info *infos = calloc((size_t)P, sizeof *infos);
    uint8_t(*nonces)[16] = calloc((size_t)P, 16);
    FZ_CHECK(infos && nonces);
    h.info.rank = h.rank;
    infos[h.rank] = h.info;
    memcpy(nonces[h.rank], h.nonce, 16);
    free(infos);
    free(nonces);
}

static void table(fz_in *in, int sign) {
    int P = 1 + fz_u8(in) % 8;
    rl_boot_table_head th;
    fz_take(in, &th, sizeof th);
    size_t len = rl_boot_table_len(&th, P);
    FZ_CHECK(len == (th.status == 0 ? sizeof(rl_rank_info) * (size_t)P : (size_t)RL_MSG_MAX));
    char *payload = malloc(len);
    FZ_CHECK(payload != NULL);
    fz_take(in, payload, len);
    if (sign) rl_boot_table_mac(fz_secret, fz_nonce, th.status, payload, len, th.mac);
    char err[RL_MSG_MAX];
    memset(err, 'x', sizeof err);
    ringlet_result_t rc = rl_boot_check_table(fz_secret, fz_nonce, &th, payload, len, err);
    if (rc == RINGLET_SUCCESS) {
        /* What client_join does with the table. */
        FZ_CHECK(th.status == 0);
        rl_rank_info *infos = calloc((size_t)P, sizeof *infos);
        FZ_CHECK(infos != NULL);
        memcpy(infos, payload, len);
        free(infos);
    } else {
        /* rank 0's authenticated verdict keeps its code where it is the job's (does not fit,
         * timed out); a table that does not authenticate is remote, whatever it says */
        int verdict = rc == (ringlet_result_t)th.status && (rc == RINGLET_ERR_INVALID_USAGE || rc == RINGLET_ERR_TIMEOUT);
        FZ_CHECK((rc == RINGLET_ERR_REMOTE || (sign && verdict)) && strnlen(err, sizeof err) < sizeof err);
    }
    free(payload);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fz_in in = {data, size};
    uint8_t sel = fz_u8(&in);
    if (sel & 1) table(&in, sel & FZ_SIGN);
    else hello(&in, sel & FZ_SIGN);
    return 0;
}
