/* The IB transport on its own (transports/ib.c through transport.h), two ranks in
 * one process: rank 0's and rank 1's contexts on the same RDMA device. Run by
 * tests/mp/ib.sh inside the Soft-RoCE VM. Uses internal symbols of libringlet.so
 * (the transport table), not the public API.
 *
 *   ib_transport [--addr IPV4]    (default: $RDMAVM_IP, else 127.0.0.1)
 *
 * Cases: RINGLET_IB_HCA parsing; messages of 0, 1, odd and multi-slot sizes up to
 * 4 MiB + 3 posted before the peer accepted the connection and before the receives;
 * 2000 small messages through a window (credits wrap many times round the FIFO);
 * a send from a registered buffer (zero-copy source); a length mismatch (an error
 * naming both lengths, never truncation); a channel mismatch (another call's message
 * of the same length: an error naming both calls); the receiver closing while a send waits,
 * the sender closing while a receive waits; a receiver that never posts (no
 * credits: error within RINGLET_TIMEOUT); the stop flag; a handshake with another
 * job secret (refused). Prints "ok: ..." per case, "SKIP: ..." and exit 77 when the
 * transport cannot initialise (no RDMA device), exit 1 on a failure.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "transport.h"

int rl_ib_hca_match(const char *spec, const char *dev, int port);

static const rl_transport_ops *T;
static int fails;
static atomic_int notified;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void on_notify(void *arg) {
    (void)arg;
    atomic_fetch_add(&notified, 1);
}

#define CHECK(cond, ...)                                                                                               \
    do {                                                                                                               \
        if (!(cond)) {                                                                                                 \
            printf("FAIL %s:%d: ", __func__, __LINE__);                                                               \
            printf(__VA_ARGS__);                                                                                       \
            printf("\n");                                                                                              \
            fails++;                                                                                                   \
        }                                                                                                              \
    } while (0)

typedef struct {
    void *ctx;
    atomic_int stop;
    uint8_t secret[32];
    struct sockaddr_storage addr;
    int rank;
    double timeout;
} node_t;

static int node_init(node_t *n, int rank, const char *ip, const uint8_t *secret, double timeout, void *blob,
                     size_t *bloblen, char *err) {
    memset(n, 0, sizeof *n);
    n->rank = rank;
    n->timeout = timeout;
    memcpy(n->secret, secret, 32);
    struct sockaddr_in *a = (struct sockaddr_in *)&n->addr;
    a->sin_family = AF_INET;
    inet_pton(AF_INET, ip, &a->sin_addr);
    atomic_store(&n->stop, 0);
    rl_transport_init in = {rank, 2, &n->stop, on_notify, NULL, timeout, n->secret, &n->addr, NULL, NULL, NULL, NULL};
    return T->init(&in, &n->ctx, blob, bloblen, err) == RINGLET_SUCCESS ? 0 : -1;
}

static int wait_done(rl_treq *t, double secs) {
    double end = now_s() + secs;
    while (!rl_treq_done(t)) {
        if (now_s() > end) return 0;
        usleep(200);
    }
    return 1;
}

static void fill(unsigned char *p, size_t n, unsigned seed) {
    uint32_t x = seed * 2654435761u + 1;
    for (size_t i = 0; i < n; i++) {
        x = x * 1664525u + 1013904223u;
        p[i] = (unsigned char)(x >> 24);
    }
}

static void test_hca(void) {
    struct {
        const char *spec, *dev;
        int port, want;
    } c[] = {
        {NULL, "mlx5_0", 1, 1},          {"", "mlx5_0", 1, 1},           {"mlx5", "mlx5_0", 1, 1},
        {"mlx5", "mlx4_0", 1, 0},        {"=mlx5", "mlx5_0", 1, 0},      {"=mlx5_0", "mlx5_0", 2, 1},
        {"mlx5_0:1", "mlx5_0", 1, 1},    {"mlx5_0:1", "mlx5_0", 2, 0},   {"mlx5_0:1,mlx5_1", "mlx5_1", 2, 1},
        {"^mlx5_0", "mlx5_0", 1, 0},     {"^mlx5_0", "mlx5_1", 1, 1},    {"^=mlx5_0", "mlx5_1", 1, 1},
        {"^=mlx5_0", "mlx5_0", 1, 0},    {"^mlx5_0:1", "mlx5_0", 2, 1},  {"^mlx5_0:1", "mlx5_0", 1, 0},
        {"rxe", "rxe0", 1, 1},           {"^", "rxe0", 1, 1},            {"mlx5_0:x", "mlx5_0", 1, 0},
        {",,rxe0,", "rxe0", 1, 1},       {"=rxe0:1", "rxe0", 1, 1},
    };
    int bad = 0;
    for (size_t i = 0; i < sizeof c / sizeof c[0]; i++) {
        int got = rl_ib_hca_match(c[i].spec, c[i].dev, c[i].port);
        CHECK(got == c[i].want, "RINGLET_IB_HCA=%s on %s:%d: got %d, want %d", c[i].spec ? c[i].spec : "(unset)",
              c[i].dev, c[i].port, got, c[i].want);
        bad += got != c[i].want;
    }
    if (!bad) printf("ok: RINGLET_IB_HCA matching (%zu cases)\n", sizeof c / sizeof c[0]);
}

/* A connected pair of directions: a (rank 0) sends on s, b (rank 1) receives on r. */
typedef struct {
    void *s, *r;
} link_t;

static node_t A, B;
static unsigned char blobA[RL_BLOB_MAX], blobB[RL_BLOB_MAX];
static size_t lenA, lenB;

static int link_open(link_t *l, int post_first, rl_treq *pre, const void *buf, size_t len) {
    char err[RL_ERR_MAX] = "";
    l->s = l->r = NULL;
    if (T->connect(A.ctx, 1, blobB, lenB, &l->s, err) != RINGLET_SUCCESS) {
        printf("FAIL: connect: %s\n", err);
        fails++;
        return -1;
    }
    /* A send posted while the connection is still pending. */
    if (post_first) T->isend(l->s, buf, len, NULL, pre);
    if (T->accept(B.ctx, 0, &l->r, err) != RINGLET_SUCCESS) {
        printf("FAIL: accept: %s\n", err);
        fails++;
        T->close(l->s);
        return -1;
    }
    return 0;
}

static void link_close(link_t *l) {
    if (l->s) T->close(l->s);
    if (l->r) T->close(l->r);
    l->s = l->r = NULL;
}

static rl_treq sreq[64], rreq[64];

static void test_sizes(void) {
    const size_t sizes[] = {0,      1,      7,      4095,   4096,   131073, 524287,
                            524288, 524289, 3 * 524288 + 17, (4u << 20) + 3, 5, 0};
    const int n = (int)(sizeof sizes / sizeof sizes[0]);
    unsigned char *src[16], *dst[16];
    for (int i = 0; i < n; i++) {
        src[i] = malloc(sizes[i] + 1);
        dst[i] = malloc(sizes[i] + 64);
        fill(src[i], sizes[i], (unsigned)i + 1);
        memset(dst[i], 0xA5, sizes[i] + 64);
    }
    link_t l;
    if (link_open(&l, 1, &sreq[0], src[0], sizes[0]) != 0) return;
    for (int i = 1; i < n; i++) T->isend(l.s, src[i], sizes[i], NULL, &sreq[i]);
    for (int i = 0; i < n; i++) T->irecv(l.r, dst[i], sizes[i], NULL, &rreq[i]);
    int bad = 0;
    for (int i = 0; i < n; i++) {
        int ok = wait_done(&rreq[i], 20) && wait_done(&sreq[i], 20);
        CHECK(ok, "message %d (%zu bytes) not done in 20 s", i, sizes[i]);
        if (!ok) {
            bad++;
            break;
        }
        CHECK(atomic_load(&sreq[i].status) == 0, "send %d failed: %s", i, sreq[i].err);
        CHECK(atomic_load(&rreq[i].status) == 0, "receive %d failed: %s", i, rreq[i].err);
        CHECK(memcmp(src[i], dst[i], sizes[i]) == 0, "message %d (%zu bytes): data differs", i, sizes[i]);
        int guard = 1;
        for (int g = 0; g < 64; g++) guard &= dst[i][sizes[i] + (size_t)g] == 0xA5;
        CHECK(guard, "message %d: written past its end", i);
        bad += atomic_load(&sreq[i].status) || atomic_load(&rreq[i].status) || memcmp(src[i], dst[i], sizes[i]) || !guard;
    }
    link_close(&l);
    for (int i = 0; i < n; i++) free(src[i]), free(dst[i]);
    if (!bad) printf("ok: %d messages of 0 B to 4 MiB + 3, sent before accept and before the receives\n", n);
}

static void test_window(void) {
    enum { N = 2000, W = 32, SZ = 100 };
    static unsigned char src[W][SZ], dst[W][SZ];
    link_t l;
    if (link_open(&l, 0, NULL, NULL, 0) != 0) return;
    int bad = 0;
    size_t ps = 0, pr = 0, ds = 0, dr = 0;
    double end = now_s() + 60;
    while ((ds < N || dr < N) && now_s() < end && !bad) {
        while (pr < N && pr - dr < W) {
            memset(dst[pr % W], 0, SZ);
            T->irecv(l.r, dst[pr % W], SZ - (pr % 3), NULL, &rreq[pr % W]);
            pr++;
        }
        while (ps < N && ps - ds < W) {
            fill(src[ps % W], SZ, (unsigned)ps);
            T->isend(l.s, src[ps % W], SZ - (ps % 3), NULL, &sreq[ps % W]);
            ps++;
        }
        while (dr < pr && rl_treq_done(&rreq[dr % W])) {
            CHECK(atomic_load(&rreq[dr % W].status) == 0, "receive %zu: %s", dr, rreq[dr % W].err);
            unsigned char want[SZ];
            fill(want, SZ, (unsigned)dr);
            if (atomic_load(&rreq[dr % W].status) || memcmp(want, dst[dr % W], SZ - (dr % 3))) bad++;
            dr++;
        }
        while (ds < ps && rl_treq_done(&sreq[ds % W])) {
            if (atomic_load(&sreq[ds % W].status)) bad++;
            ds++;
        }
        usleep(50);
    }
    CHECK(ds == N && dr == N && !bad, "window test: %zu sent, %zu received, %d bad", ds, dr, bad);
    /* drain what is still posted before the requests go away */
    for (size_t i = dr; i < pr; i++) wait_done(&rreq[i % W], 5);
    link_close(&l);
    for (size_t i = ds; i < ps; i++) wait_done(&sreq[i % W], 5);
    if (ds == N && dr == N && !bad) printf("ok: %d messages through a window of %d\n", N, W);
}

static void test_registered(void) {
    size_t n = (1u << 20) + 77;
    unsigned char *src = malloc(n), *dst = malloc(2 * n);
    fill(src, n, 99);
    memset(dst, 0, 2 * n);
    void *mr = NULL, *mr2 = NULL;
    char err[RL_ERR_MAX] = "";
    if (T->reg_mr(A.ctx, src, n, &mr, err) != RINGLET_SUCCESS) {
        printf("FAIL: reg_mr: %s\n", err);
        fails++;
        free(src), free(dst);
        return;
    }
    if (T->reg_mr(B.ctx, dst, 2 * n, &mr2, err) != RINGLET_SUCCESS) {
        printf("FAIL: reg_mr: %s\n", err);
        fails++;
    }
    link_t l;
    if (link_open(&l, 0, NULL, NULL, 0) == 0) {
        T->irecv(l.r, dst, n, mr2, &rreq[0]);
        T->isend(l.s, src, n, mr, &sreq[0]);
        T->isend(l.s, src + 1, n - 1, mr, &sreq[1]); /* inside the registration, unaligned */
        T->irecv(l.r, dst + n, n - 1, mr2, &rreq[1]);
        int ok = wait_done(&sreq[0], 20) && wait_done(&rreq[0], 20);
        CHECK(ok && !atomic_load(&rreq[0].status) && !atomic_load(&sreq[0].status) && !memcmp(src, dst, n),
              "registered send: %s %s", sreq[0].err, rreq[0].err);
        ok = ok && wait_done(&sreq[1], 20) && wait_done(&rreq[1], 20);
        CHECK(ok && !atomic_load(&rreq[1].status) && !memcmp(src + 1, dst + n, n - 1), "registered send 2: %s",
              rreq[1].err);
        if (ok && !memcmp(src, dst, n) && !memcmp(src + 1, dst + n, n - 1)) printf("ok: sends from a registered buffer (zero-copy source)\n");
        link_close(&l);
    }
    T->dereg_mr(A.ctx, mr);
    if (mr2) T->dereg_mr(B.ctx, mr2);
    free(src), free(dst);
}

static void test_mismatch(void) {
    static unsigned char src[300], dst[300];
    link_t l;
    if (link_open(&l, 0, NULL, NULL, 0) != 0) return;
    T->isend(l.s, src, 100, NULL, &sreq[0]);
    T->irecv(l.r, dst, 200, NULL, &rreq[0]);
    int ok = wait_done(&rreq[0], 10);
    CHECK(ok, "mismatched receive not done");
    CHECK(atomic_load(&rreq[0].status) == RINGLET_ERR_INVALID_USAGE, "mismatch: status %d (%s)",
          atomic_load(&rreq[0].status), rreq[0].err);
    CHECK(strstr(rreq[0].err, "100") && strstr(rreq[0].err, "200") && strstr(rreq[0].err, "rank 0"),
          "mismatch message: %s", rreq[0].err);
    wait_done(&sreq[0], 10);
    /* The sender hears of it: its next send fails. */
    double t0 = now_s();
    int told = 0;
    while (!told && now_s() - t0 < 5) {
        T->isend(l.s, src, 10, NULL, &sreq[1]);
        wait_done(&sreq[1], 5);
        told = atomic_load(&sreq[1].status) != 0;
        if (!told) usleep(10000);
    }
    CHECK(told && strstr(sreq[1].err, "rank 1"), "the sender was not told of the mismatch: %s", sreq[1].err);
    link_close(&l);
    if (ok && told) printf("ok: length mismatch: \"%s\"; sender: \"%s\"\n", rreq[0].err, sreq[1].err);

    /* The same length, another channel (the ranks called in another order): an error
     * naming both, not the other call's bytes. */
    if (link_open(&l, 0, NULL, NULL, 0) != 0) return;
    memset(src, 0x5a, sizeof src);
    memset(dst, 0, sizeof dst);
    sreq[0].chan = rl_op_chan(RL_OP_ALLREDUCE);
    rreq[0].chan = rl_op_chan(RL_OP_RECV);
    T->isend(l.s, src, 100, NULL, &sreq[0]);
    T->irecv(l.r, dst, 100, NULL, &rreq[0]);
    ok = wait_done(&rreq[0], 10);
    CHECK(ok && atomic_load(&rreq[0].status) == RINGLET_ERR_INVALID_USAGE && strstr(rreq[0].err, "its allreduce") &&
              strstr(rreq[0].err, "its send, recv") && dst[0] == 0,
          "channel mismatch: done %d status %d (%s), first byte %d", ok, atomic_load(&rreq[0].status), rreq[0].err,
          dst[0]);
    wait_done(&sreq[0], 10);
    sreq[0].chan = rreq[0].chan = 0; /* the other cases post plain requests */
    t0 = now_s();
    told = 0;
    while (!told && now_s() - t0 < 5) {
        T->isend(l.s, src, 10, NULL, &sreq[1]);
        wait_done(&sreq[1], 5);
        told = atomic_load(&sreq[1].status) != 0;
        if (!told) usleep(10000);
    }
    CHECK(told && strstr(sreq[1].err, "another call"), "the sender was not told of the channel mismatch: %s",
          sreq[1].err);
    link_close(&l);
    if (ok && told) printf("ok: channel mismatch: \"%s\"; sender: \"%s\"\n", rreq[0].err, sreq[1].err);
}

static void test_close(void) {
    static unsigned char buf[1 << 20];
    link_t l;
    /* The receiver goes away while sends wait for credits. */
    if (link_open(&l, 0, NULL, NULL, 0) != 0) return;
    for (int i = 0; i < 40; i++) T->isend(l.s, buf, sizeof buf, NULL, &sreq[i]);
    usleep(100000);
    T->close(l.r);
    l.r = NULL;
    double t0 = now_s();
    int ok = wait_done(&sreq[39], 10);
    double dt = now_s() - t0;
    CHECK(ok && atomic_load(&sreq[39].status) == RINGLET_ERR_REMOTE && strstr(sreq[39].err, "rank 1"),
          "send after the receiver closed: done %d status %d (%s)", ok, atomic_load(&sreq[39].status), sreq[39].err);
    for (int i = 0; i < 40; i++) wait_done(&sreq[i], 5);
    link_close(&l);
    if (ok) printf("ok: receiver closed: send failed in %.2f s: \"%s\"\n", dt, sreq[39].err);
    /* The sender goes away while a receive waits. */
    if (link_open(&l, 0, NULL, NULL, 0) != 0) return;
    T->irecv(l.r, buf, 1000, NULL, &rreq[0]);
    usleep(100000);
    T->close(l.s);
    l.s = NULL;
    t0 = now_s();
    ok = wait_done(&rreq[0], 10);
    dt = now_s() - t0;
    CHECK(ok && atomic_load(&rreq[0].status) == RINGLET_ERR_REMOTE && strstr(rreq[0].err, "rank 0"),
          "receive after the sender closed: done %d status %d (%s)", ok, atomic_load(&rreq[0].status), rreq[0].err);
    link_close(&l);
    if (ok) printf("ok: sender closed: receive failed in %.2f s: \"%s\"\n", dt, rreq[0].err);
}

static void test_stop(void) {
    static unsigned char buf[1000];
    link_t l;
    if (link_open(&l, 0, NULL, NULL, 0) != 0) return;
    T->irecv(l.r, buf, sizeof buf, NULL, &rreq[0]);
    usleep(50000);
    double t0 = now_s();
    atomic_store(&B.stop, 1);
    int ok = wait_done(&rreq[0], 5);
    double dt = now_s() - t0;
    /* within the wait's bound (5 s), well short of any deadline (none is near: the stop alone
     * ends it); no tighter, in an emulated VM on a loaded host */
    CHECK(ok && atomic_load(&rreq[0].status) != 0 && dt < 4.0, "stop: done %d after %.2f s (%s)", ok, dt, rreq[0].err);
    T->irecv(l.r, buf, sizeof buf, NULL, &rreq[1]);
    CHECK(rl_treq_done(&rreq[1]) && atomic_load(&rreq[1].status) != 0, "a receive posted after stop did not fail");
    atomic_store(&B.stop, 0);
    link_close(&l);
    if (ok) printf("ok: stop flag: receive failed in %.2f s: \"%s\"\n", dt, rreq[0].err);
}

/* A receiver that never posts: the sender runs out of credits, then times out. */
static void test_no_credits(const char *ip) {
    node_t C, D;
    unsigned char bc[RL_BLOB_MAX], bd[RL_BLOB_MAX];
    size_t lc, ld;
    char err[RL_ERR_MAX];
    uint8_t secret[32];
    memset(secret, 7, 32);
    if (node_init(&C, 0, ip, secret, 1.0, bc, &lc, err) || node_init(&D, 1, ip, secret, 1.0, bd, &ld, err)) {
        printf("FAIL: init: %s\n", err);
        fails++;
        return;
    }
    void *s = NULL, *r = NULL;
    static unsigned char buf[64 << 10];
    if (T->connect(C.ctx, 1, bd, ld, &s, err) || T->accept(D.ctx, 0, &r, err)) {
        printf("FAIL: connect/accept: %s\n", err);
        fails++;
    } else {
        for (int i = 0; i < 64; i++) T->isend(s, buf, sizeof buf, NULL, &sreq[i]);
        double t0 = now_s();
        int ok = wait_done(&sreq[63], 10);
        double dt = now_s() - t0;
        /* at its 1 s deadline, with room for an emulated VM's slowness (not never) */
        CHECK(ok && atomic_load(&sreq[63].status) == RINGLET_ERR_TIMEOUT && strstr(sreq[63].err, "rank 1") && dt < 8,
              "no credits: done %d after %.2f s, status %d (%s)", ok, dt, atomic_load(&sreq[63].status), sreq[63].err);
        for (int i = 0; i < 64; i++) wait_done(&sreq[i], 5);
        if (ok) printf("ok: no credits: send failed in %.2f s: \"%s\"\n", dt, sreq[63].err);
    }
    if (s) T->close(s);
    if (r) T->close(r);
    T->fini(C.ctx);
    T->fini(D.ctx);
}

/* A connector with another job secret is refused; the genuine rank still gets in. */
static void test_stranger(const char *ip) {
    node_t E;
    unsigned char be[RL_BLOB_MAX];
    size_t le;
    char err[RL_ERR_MAX];
    uint8_t secret[32];
    memset(secret, 0x5c, 32);
    if (node_init(&E, 0, ip, secret, 5.0, be, &le, err)) {
        printf("FAIL: init: %s\n", err);
        fails++;
        return;
    }
    void *s = NULL;
    static unsigned char buf[100], in[100];
    if (T->connect(E.ctx, 1, blobB, lenB, &s, err)) {
        printf("FAIL: stranger connect: %s\n", err);
        fails++;
    } else {
        T->isend(s, buf, sizeof buf, NULL, &sreq[0]);
        /* B accepts from rank 0: the stranger's hello is refused; the genuine one gets in. */
        link_t l;
        if (link_open(&l, 0, NULL, NULL, 0) == 0) {
            T->irecv(l.r, in, 10, NULL, &rreq[1]);
            T->isend(l.s, buf, 10, NULL, &sreq[1]);
            int ok = wait_done(&rreq[1], 10) && !atomic_load(&rreq[1].status);
            CHECK(ok, "genuine rank after a stranger: %s", rreq[1].err);
            wait_done(&sreq[1], 5);
            link_close(&l);
        }
        int ok = wait_done(&sreq[0], 10);
        CHECK(ok && atomic_load(&sreq[0].status) != 0, "stranger's send: done %d status %d", ok,
              atomic_load(&sreq[0].status));
        if (ok) printf("ok: another job secret is refused: \"%s\"\n", sreq[0].err);
        T->close(s);
    }
    T->fini(E.ctx);
}

int main(int argc, char **argv) {
    const char *ip = getenv("RDMAVM_IP");
    if (!ip || !*ip) ip = "127.0.0.1";
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--addr") && i + 1 < argc) ip = argv[++i];
    setvbuf(stdout, NULL, _IOLBF, 0);
    test_hca();
    T = rl_transports[rl_transport_by_name("ib")];
    if (!T) {
        printf("SKIP: this build has no IB transport\n");
        return 77;
    }
    uint8_t secret[32];
    for (int i = 0; i < 32; i++) secret[i] = (uint8_t)(i * 37 + 11);
    char err[RL_ERR_MAX] = "";
    if (node_init(&A, 0, ip, secret, 5.0, blobA, &lenA, err) != 0) {
        printf("SKIP: the IB transport does not initialise here: %s\n", err);
        return fails ? 1 : 77;
    }
    if (node_init(&B, 1, ip, secret, 5.0, blobB, &lenB, err) != 0) {
        printf("FAIL: second context: %s\n", err);
        return 1;
    }
    double t0 = now_s();
    test_sizes();
    test_window();
    test_registered();
    test_mismatch();
    test_close();
    test_stop();
    test_stranger(ip);
    test_no_credits(ip);
    T->fini(A.ctx);
    T->fini(B.ctx);
    printf("ib_transport: %s (%.1f s)\n", fails ? "FAILED" : "all passed", now_s() - t0);
    return fails ? 1 : 0;
}
