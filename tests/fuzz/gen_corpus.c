/* Writes the seed corpora of the fuzz targets (tests/fuzz/corpus/<target>/), in the
 * input formats their opening comments describe: genuine messages made from the real
 * structs and MAC functions, under fuzz.h's secret and nonces. tests/mp/fuzz.sh builds
 * it as $BUILD/fuzz/gen_corpus; run it with the corpus folder to rewrite the seeds
 * after a wire format changed:  $BUILD/fuzz/gen_corpus tests/fuzz/corpus */
#include <errno.h>
#include <netinet/in.h>
#include <sys/stat.h>

#include "bootstrap.h"
#include "fuzz.h"
#include "ib.h"
#include "sha256.h"
#include "shm.h"
#include "tcp.h"

static const char *root;
static int failed;

/* corpus/<target>/<name> := head (hlen bytes) then body (blen bytes). */
static void seed(const char *target, const char *name, const void *head, size_t hlen, const void *body, size_t blen) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s", root, target);
    if (mkdir(path, 0755) != 0 && errno != EEXIST) failed = 1;
    snprintf(path, sizeof path, "%s/%s/%s", root, target, name);
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(head, 1, hlen, f) != hlen || (blen && fwrite(body, 1, blen, f) != blen)) failed = 1;
    if (f && fclose(f) != 0) failed = 1;
}

static void loopback(struct sockaddr_storage *a, int v6, int port) {
    memset(a, 0, sizeof *a);
    if (v6) {
        struct sockaddr_in6 *s = (struct sockaddr_in6 *)a;
        s->sin6_family = AF_INET6;
        s->sin6_addr = in6addr_loopback;
        s->sin6_port = htons((uint16_t)port);
    } else {
        struct sockaddr_in *s = (struct sockaddr_in *)a;
        s->sin_family = AF_INET;
        s->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        s->sin_port = htons((uint16_t)port);
    }
}

static void env(void) {
    static const struct {
        const char *name;
        uint8_t sel, arg;
        const char *text; /* may hold a NUL: spec, then the name */
        size_t len;
    } s[] = {
        {"int_size", 0, 0, "256K", 4},        {"int_hex", 0, 7, "0x10M", 5},     {"int_neg", 0, 9, "-3G", 3},
        {"dbl", 1, 0, "2.5e1", 5},            {"ifname_list", 2, 0, "eth,ib\0eth0", 11},
        {"ifname_excl", 2, 0, "^=docker0,lo\0lo", 15}, {"hca_port", 3, 1, "mlx5_0:1,=mlx5_1\0mlx5_0", 23},
        {"hca_excl", 3, 2, "^mlx5\0mlx4_0", 12},
    };
    for (size_t i = 0; i < sizeof s / sizeof s[0]; i++) {
        uint8_t head[2] = {s[i].sel, s[i].arg};
        seed("env", s[i].name, head, 2, s[i].text, s[i].len);
    }
}

static void boot_id(void) {
    /* What rl_boot_make_id writes (bootstrap.c's id_layout): magic, family, port,
     * address, scope, secret. */
    uint8_t id[RINGLET_UNIQUE_ID_BYTES] = {0};
    uint32_t magic = 0x31544c52u;
    uint16_t fam = AF_INET, port = 29500;
    memcpy(id, &magic, 4);
    memcpy(id + 4, &fam, 2);
    memcpy(id + 6, &port, 2);
    id[8] = 127, id[11] = 1;
    memcpy(id + 28, fz_secret, 32);
    uint8_t rank = 1;
    seed("boot_id", "ipv4", &rank, 1, id, sizeof id);
    fam = AF_INET6;
    memcpy(id + 4, &fam, 2);
    memset(id + 8, 0, 16);
    id[23] = 1;
    seed("boot_id", "ipv6", &rank, 1, id, sizeof id);
    rank = 0;
    seed("boot_id", "rank0", &rank, 1, id, sizeof id);
}

static void boot_msgs(void) {
    /* A hello from rank 2 of 4, ranks 1 already joined. */
    rl_boot_hello h;
    memset(&h, 0, sizeof h);
    h.magic = RL_BOOT_MAGIC;
    h.rank = 2;
    h.nranks = 4;
    memcpy(h.nonce, fz_nonce, 16);
    h.info.rank = 2;
    h.info.bloblen[0] = sizeof(rl_tcp_blob);
    rl_boot_hello_mac(fz_secret, fz_nonce, &h, h.mac);
    uint8_t head[10] = {0, 3, 0x02}; /* joined: rank 1 */
    seed("boot_msgs", "hello", head, sizeof head, &h, sizeof h);
    head[0] = FZ_SIGN;
    h.rank = 1; /* joined twice */
    seed("boot_msgs", "hello_twice", head, sizeof head, &h, sizeof h);

    /* The table for a job of 2 ranks, and an error text. */
    size_t len = 2 * sizeof(rl_rank_info);
    uint8_t *buf = calloc(1, sizeof(rl_boot_table_head) + len);
    rl_boot_table_head th = {RL_BOOT_MAGIC, 0, {0}};
    uint8_t *payload = buf + sizeof th;
    ((rl_rank_info *)(void *)payload)[1].rank = 1;
    rl_boot_table_mac(fz_secret, fz_nonce, th.status, payload, len, th.mac);
    memcpy(buf, &th, sizeof th);
    uint8_t thead[2] = {1, 1};
    seed("boot_msgs", "table", thead, 2, buf, sizeof th + len);
    char text[RL_MSG_MAX] = "bootstrap: rank 3 says the job has 5 ranks, rank 0 says 4";
    th.status = 1;
    rl_boot_table_mac(fz_secret, fz_nonce, th.status, text, sizeof text, th.mac);
    memcpy(buf, &th, sizeof th);
    memcpy(buf + sizeof th, text, sizeof text);
    seed("boot_msgs", "table_error", thead, 2, buf, sizeof th + sizeof text);
    free(buf);
}

static void tcp(void) {
    uint8_t head[18] = {0};
    uint64_t total = 1 << 20, part = 1 << 18;
    memcpy(head + 1, &total, 8);
    memcpy(head + 9, &part, 8);
    head[17] = 1; /* the channel: an all-reduce's */
    rl_tcp_hdr hd = {total, part, RL_TCP_MAGIC, 1, {0}};
    seed("tcp", "hdr", head, sizeof head, &hd, sizeof hd);

    uint8_t hh[4 + 64] = {1, 1, 4, 4};
    rl_tcp_hello h;
    memset(&h, 0, sizeof h);
    h.magic = RL_TCP_MAGIC;
    h.from = 3, h.to = 1, h.index = 2, h.nsocks = 4;
    memcpy(h.nonce, fz_nonce, 16);
    rl_tcp_hello_mac(fz_secret, &h, h.mac);
    seed("tcp", "hello", hh, sizeof hh, &h, sizeof h);

    rl_tcp_blob b;
    memset(&b, 0, sizeof b);
    loopback(&b.addr, 0, 40000);
    b.nsocks = 4;
    uint8_t bh[2] = {2, 0};
    seed("tcp", "blob4", bh, 2, &b, sizeof b);
    loopback(&b.addr, 1, 40001);
    seed("tcp", "blob6", bh, 2, &b, sizeof b);
}

static void shm(void) {
    static const char name[] = "/ringlet-1234-shm-0011223344556677"; /* shm.c's target */
    rl_shm_seg_hdr h;
    memset(&h, 0, sizeof h);
    h.magic = RL_SHM_MAGIC;
    h.rank = 2, h.nranks = 4, h.pid = 1234;
    h.nslots = 8;
    h.slot_bytes = 256 << 10;
    h.fifo_stride = rl_shm_fifo_stride(h.nslots, h.slot_bytes);
    rl_hmac_sha256(fz_secret, 32, name, strlen(name), h.tag);
    uint8_t head[3] = {0, 2, 3};
    seed("shm", "segment", head, sizeof head, &h, sizeof h);

    uint8_t pc[5 * 8 + 2];
    uint64_t p[5] = {1000, 1000 - 512, 1000, 512, 4096}; /* msg_len, piece, len, off, slot */
    memcpy(pc, p, sizeof p);
    pc[40] = pc[41] = 7; /* the channels, the sender's and the receive's: a send's */
    uint8_t sel = 1;
    seed("shm", "piece", &sel, 1, pc, sizeof pc);
}

static void ib(void) {
    rl_ib_blob b;
    memset(&b, 0, sizeof b);
    b.magic = RL_IB_MAGIC, b.version = RL_IB_VERSION;
    loopback(&b.addr, 0, 40002);
    b.lid = 7, b.mtu = 5, b.is_eth = 1, b.gid_index = 3;
    uint8_t bh[2] = {0, 0};
    seed("ib", "blob", bh, 2, &b, sizeof b);

    rl_ib_hello h;
    memset(&h, 0, sizeof h);
    h.magic = RL_IB_MAGIC, h.version = RL_IB_VERSION;
    h.from = 0, h.to = 1, h.nqps = 2, h.nslots = 8, h.slot_size = 512 << 10, h.mtu = 5;
    h.qpn[0] = 0x101, h.qpn[1] = 0x102;
    memcpy(h.nonce, fz_nonce, 16);
    rl_ib_hello_mac(fz_secret, &h, h.mac);
    uint8_t hh[3] = {1, 1, 2};
    seed("ib", "hello", hh, sizeof hh, &h, sizeof h);

    rl_ib_reply r;
    memset(&r, 0, sizeof r);
    r.magic = RL_IB_MAGIC, r.version = RL_IB_VERSION;
    r.from = 1, r.to = 0, r.nqps = 2, r.mtu = 5;
    r.qpn[0] = 0x201, r.qpn[1] = 0x202;
    r.fifo_addr = 0x7f0000000000ull, r.fifo_rkey = 0x1234;
    memcpy(r.nonce, fz_nonce, 16);
    rl_ib_reply_mac(fz_secret, &r, r.mac);
    uint8_t rh[4] = {2, 1, 0, 1};
    seed("ib", "reply", rh, sizeof rh, &r, sizeof r);
    r.status = RINGLET_ERR_INVALID_USAGE;
    snprintf(r.msg, sizeof r.msg, "ib: rank 1's port is RoCE, this rank's InfiniBand");
    rl_ib_reply_mac(fz_secret, &r, r.mac);
    seed("ib", "reply_refused", rh, sizeof rh, &r, sizeof r);

    uint8_t ch[34] = {3};
    uint64_t c[4] = {5, 3 << 20, 1 << 20, 512 << 10}; /* seq, len, off, slot */
    memcpy(ch + 1, c, sizeof c);
    ch[33] = 7; /* the channel: a send's */
    rl_ib_chunk_hdr k = {3 << 20, 1 << 20, 5, 512 << 10, RL_IB_CHUNK_MAGIC, 7, 0};
    seed("ib", "chunk", ch, sizeof ch, &k, sizeof k);
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: %s CORPUS_DIR (tests/fuzz/corpus)\n", argv[0]);
        return 2;
    }
    root = argv[1];
    if (mkdir(root, 0755) != 0 && errno != EEXIST) return perror(root), 1;
    env();
    boot_id();
    boot_msgs();
    tcp();
    shm();
    ib();
    if (failed) fprintf(stderr, "gen_corpus: could not write every seed under %s\n", root);
    return failed;
}
