/* Mismatched collectives under RINGLET_CHECK=1 are an error on every rank, naming both
 * calls, and leave the communicator usable. Rank P-1 (the odd one out) calls something
 * else than the others in each case:
 *   dtype    allreduce float32 vs int32 (the same byte count: garbage without the check)
 *   op       allreduce sum vs max (a different result on each rank without it)
 *   kind     allreduce vs broadcast (a hang until RINGLET_TIMEOUT without it)
 *   count    allreduce of 1000 vs 999 elements
 *   root     broadcast from 0 vs from 1
 *   skip     the odd rank calls an all-reduce where the others call a barrier
 *   p2p      (no mismatch) a send from rank 0 to rank 1, which the others do not call
 *   premul   (no mismatch) a pre-multiplied sum whose op has another number on one rank;
 *            then a pre-multiplied sum vs a plain sum
 *   group    a group of two all-reduces, the second of another count on the odd rank; then
 *            a group of one all-reduce against the odd rank's of two
 * After every case, a correct all-reduce (random integers, checked exactly) on the same
 * communicator. Prints "mismatch: rank R: N checks, F failed" and each message once.
 *
 *   mismatch --abort-on-error N [--count C]
 *       The README's error pattern, which aborts on an error: N rounds, each on a new
 *       communicator (its unique id broadcast over one from the environment), of an
 *       all-reduce of C float32 (default 1M) where rank P-1 passes C-1. The rank that
 *       gets the error aborts (and destroys) at once; rank P-1 does it without a look at
 *       the error, as a program that exits on any error would. Every other rank must
 *       still report the mismatch (RINGLET_ERR_INVALID_USAGE, "mismatched collectives"),
 *       not "rank P-1 failed": the verdict reaches every rank before any rank can act on
 *       it. Prints "mismatch abort: rank R: N rounds, F wrong" and the first round's
 *       message.
 *
 *   mismatch --board CASE
 *       Without RINGLET_CHECK, over shared memory, where small one-shot calls go through
 *       the board (each rank reads its peers' data where they published it): rank P-1
 *       calls something else once, and every rank's call must fail with
 *       RINGLET_ERR_INVALID_USAGE naming the mismatch, not read what the peer's slot held
 *       before (count: allreduce of 12 vs 10 int32, after a correct all-reduce of 12 had
 *       filled the slots; kind: allreduce vs allgather of as many bytes; root: broadcast
 *       from 0 vs from 1). Prints "mismatch board: rank R: N checks, F failed".
 *
 *   mismatch --order p2p N | coll N M [--device]
 *       Without RINGLET_CHECK, at P = 2 (run with the board off): the two ranks call in
 *       another order, with messages of the same lengths, so only what each message
 *       belongs to (its channel) tells them apart. p2p: rank 0 groups an all-reduce of N
 *       int32 with a send of N int32 to rank 1, which receives N int32 from rank 0 and
 *       then calls the all-reduce; coll: rank 0 calls an all-reduce of N int32 then an
 *       all-gather of M, rank 1 the all-gather first. Every call that succeeds must hold
 *       the right data (random integers, checked exactly); each rank's first call that
 *       receives another call's message must fail with RINGLET_ERR_INVALID_USAGE naming
 *       both (before, rank 1's receive returned rank 0's all-reduce input, and the
 *       all-reduces summed a peer's send buffer, as successes). --device: coll on device
 *       buffers (the device layer's backend, RINGLET_DEVICE; the simulated GPU without
 *       one), one device per local rank, the calls on the default stream. Prints
 *       "mismatch order: rank R: N checks, F failed, K named the other call". */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "device.h" /* the device layer: device buffers for --order ... --device */
#include "ringlet.h"

static int g_rank, g_P, g_checks, g_failed;
static ringlet_comm_t g_comm;
#define CHECK(cond, ...)                                                                                               \
    do {                                                                                                               \
        g_checks++;                                                                                                    \
        if (!(cond)) g_failed++, printf("FAIL rank %d: ", g_rank), printf(__VA_ARGS__), printf("\n");                 \
    } while (0)

static void expect_mismatch(const char *cas, ringlet_result_t rc, const char *a, const char *b) {
    const char *m = ringlet_comm_last_error(g_comm);
    CHECK(rc == RINGLET_ERR_INVALID_USAGE, "%s: returned %d (%s): %s", cas, (int)rc, ringlet_strerror(rc), m);
    CHECK(strstr(m, "mismatched collectives") && strstr(m, a) && strstr(m, b), "%s: message \"%s\" lacks \"%s\" / \"%s\"",
          cas, m, a, b);
    if (g_rank == 0) printf("mismatch: %s -> %s\n", cas, m);
}

static void still_works(int k) {
    int32_t x[257];
    for (int i = 0; i < 257; i++) x[i] = (int32_t)((i * 7919 + k * 104729 + g_rank * 31) % 2001) - 1000;
    ringlet_result_t rc = ringlet_allreduce(x, x, 257, RINGLET_INT32, RINGLET_SUM, g_comm, NULL);
    int bad = 0;
    for (int i = 0; i < 257 && !rc; i++) {
        int32_t s = 0;
        for (int r = 0; r < g_P; r++) s += (int32_t)((i * 7919 + k * 104729 + r * 31) % 2001) - 1000;
        bad += x[i] != s;
    }
    CHECK(!rc && !bad, "after case %d: allreduce: %s, %d wrong", k, rc ? ringlet_comm_last_error(g_comm) : "ok", bad);
}

static int abort_on_error(int rounds, size_t count) {
    ringlet_comm_t world;
    if (ringlet_comm_init_env(&world)) return printf("FAIL: %s\n", ringlet_comm_last_error(NULL)), 1;
    ringlet_comm_rank(world, &g_rank);
    ringlet_comm_size(world, &g_P);
    float *x = calloc(count, sizeof *x);
    if (!x) return printf("FAIL: out of memory\n"), 1;
    int odd = g_rank == g_P - 1, wrong = 0;
    for (int k = 0; k < rounds; k++) {
        ringlet_unique_id_t id;
        memset(&id, 0, sizeof id);
        if (g_rank == 0 && ringlet_get_unique_id(&id)) return printf("FAIL: unique id: %s\n", ringlet_comm_last_error(NULL)), 1;
        if (ringlet_broadcast(&id, &id, sizeof id, RINGLET_UINT8, 0, world, NULL))
            return printf("FAIL: broadcast: %s\n", ringlet_comm_last_error(world)), 1;
        if (ringlet_comm_init_rank(&g_comm, g_P, id, g_rank))
            return printf("FAIL: round %d: init: %s\n", k, ringlet_comm_last_error(NULL)), 1;
        ringlet_result_t rc = ringlet_allreduce(x, x, odd ? count - 1 : count, RINGLET_FLOAT32, RINGLET_SUM, g_comm, NULL);
        if (odd) {
            /* As soon as it returns: the others must have the verdict already. */
            ringlet_comm_abort(g_comm);
            ringlet_comm_destroy(g_comm);
        }
        char msg[600];
        snprintf(msg, sizeof msg, "%s", odd ? "(not looked at)" : ringlet_comm_last_error(g_comm));
        if (!odd && (rc != RINGLET_ERR_INVALID_USAGE || !strstr(msg, "mismatched collectives"))) {
            wrong++;
            printf("FAIL rank %d: round %d: the all-reduce returned %d (%s): %s\n", g_rank, k, (int)rc,
                   ringlet_strerror(rc), msg);
        } else if (odd && rc == RINGLET_SUCCESS) {
            wrong++;
            printf("FAIL rank %d: round %d: the mismatched all-reduce succeeded\n", g_rank, k);
        }
        if (k == 0 && !odd) printf("mismatch abort: rank %d: %s: %s\n", g_rank, ringlet_strerror(rc), msg);
        if (!odd) {
            ringlet_comm_abort(g_comm);
            ringlet_comm_destroy(g_comm);
        }
        if (ringlet_barrier(world, NULL)) return printf("FAIL: barrier: %s\n", ringlet_comm_last_error(world)), 1;
    }
    free(x);
    printf("mismatch abort: rank %d: %d rounds, %d wrong\n", g_rank, rounds, wrong);
    ringlet_comm_destroy(world);
    return wrong ? 1 : 0;
}

static int board_case(const char *cas) {
    if (ringlet_comm_init_env(&g_comm)) return printf("FAIL: %s\n", ringlet_comm_last_error(NULL)), 1;
    ringlet_comm_rank(g_comm, &g_rank);
    ringlet_comm_size(g_comm, &g_P);
    int odd = g_rank == g_P - 1;
    int32_t x[12 * 8], y[12 * 8];
    for (int i = 0; i < 12; i++) x[i] = (int32_t)(i * 37 + g_rank * 1009 + 5);
    /* A correct call first: every slot then holds 12 elements of the peer's. */
    ringlet_result_t rc = ringlet_allreduce(x, y, 12, RINGLET_INT32, RINGLET_SUM, g_comm, NULL);
    int bad = 0;
    for (int i = 0; i < 12 && !rc; i++) {
        int32_t want = 0;
        for (int r = 0; r < g_P; r++) want += (int32_t)(i * 37 + r * 1009 + 5);
        bad += y[i] != want;
    }
    CHECK(!rc && !bad, "board %s: the first allreduce: %s, %d wrong", cas, rc ? ringlet_comm_last_error(g_comm) : "ok", bad);
    if (!strcmp(cas, "count"))
        rc = ringlet_allreduce(x, y, odd ? 10 : 12, RINGLET_INT32, RINGLET_SUM, g_comm, NULL);
    else if (!strcmp(cas, "kind"))
        rc = odd ? ringlet_allgather(x, y, 12, RINGLET_INT32, g_comm, NULL)
                 : ringlet_allreduce(x, y, 12, RINGLET_INT32, RINGLET_SUM, g_comm, NULL);
    else if (!strcmp(cas, "root"))
        rc = ringlet_broadcast(x, y, 12, RINGLET_INT32, odd ? 1 : 0, g_comm, NULL);
    else
        return printf("FAIL: --board %s: want count, kind or root\n", cas), 1;
    const char *m = ringlet_comm_last_error(g_comm);
    CHECK(rc == RINGLET_ERR_INVALID_USAGE && strstr(m, "mismatched calls: rank "),
          "board %s: returned %d (%s): %s", cas, (int)rc, ringlet_strerror(rc), rc ? m : "");
    if (g_rank == 0) printf("mismatch board: %s -> %s\n", cas, m);
    printf("mismatch board: rank %d: %d checks, %d failed\n", g_rank, g_checks, g_failed);
    ringlet_comm_abort(g_comm);
    ringlet_comm_destroy(g_comm);
    return g_failed != 0;
}

static int32_t order_value(int rank, int what, size_t i) {
    return (int32_t)((i * 2654435761u + (unsigned)rank * 40503u + (unsigned)what * 977u) % 100003u) - 50000;
}

/* One call's outcome: rc, and (success) whether its output is right; *named counts the
 * failures that name the channel mismatch. */
static void order_outcome(const char *call, ringlet_result_t rc, int wrong, int *named) {
    const char *m = ringlet_comm_last_error(g_comm);
    if (rc == RINGLET_SUCCESS) {
        CHECK(!wrong, "order: %s succeeded with %d wrong elements", call, wrong);
        return;
    }
    if (rc == RINGLET_ERR_INVALID_USAGE && strstr(m, "the peer sent a message of its ") &&
        strstr(m, "two ranks called in another order")) {
        ++*named;
        printf("mismatch order: rank %d: %s -> %s\n", g_rank, call, m);
    } else {
        printf("mismatch order: rank %d: %s failed otherwise: %s: %s\n", g_rank, call, ringlet_strerror(rc), m);
    }
}

/* --device: buffers of bytes on the device, filled from / read back into host ones. */
static const rl_device_ops *g_dev;
static rl_dev_stream_t g_copies;
static void dev_fail(const char *what) {
    printf("FAIL rank %d: %s: %s\n", g_rank, what, rl_dev_error());
    exit(1);
}
static void *dev_twin(size_t bytes) {
    void *p = NULL;
    if (g_dev->mem_alloc(&p, bytes) != RL_DEV_OK) dev_fail("device memory");
    return p;
}
static void dev_copy(void *dst, const void *src, size_t bytes) {
    if (g_dev->memcpy_async(dst, src, bytes, g_copies) != RL_DEV_OK || g_dev->stream_sync(g_copies) != RL_DEV_OK)
        dev_fail("copy");
}

static int order_case(const char *cas, size_t n, size_t m, int device) {
    if (device) {
        int ndev = 0;
        const char *lr = getenv("LOCAL_RANK");
        if (!(g_dev = rl_device()) || g_dev->count(&ndev) != RL_DEV_OK || ndev < 1 ||
            g_dev->set_device((lr ? atoi(lr) : 0) % ndev) != RL_DEV_OK || g_dev->stream_create(&g_copies) != RL_DEV_OK)
            return printf("FAIL: no device: %s%s\n", rl_device_unavailable(), g_dev ? rl_dev_error() : ""), 1;
    }
    if (ringlet_comm_init_env(&g_comm)) return printf("FAIL: %s\n", ringlet_comm_last_error(NULL)), 1;
    ringlet_comm_rank(g_comm, &g_rank);
    ringlet_comm_size(g_comm, &g_P);
    if (g_P != 2) return printf("FAIL: --order runs at P = 2\n"), 1;
    size_t big = n > 2 * m ? n : 2 * m;
    int32_t *x = malloc(big * sizeof *x), *y = malloc(big * sizeof *y), *g = malloc(m * sizeof *g);
    if (!x || !y || !g) return printf("FAIL: out of memory\n"), 1;
    int named = 0, wrong;
    ringlet_result_t rc;
    /* what: 0 the all-reduce's input, 1 the send buffer, 2 the all-gather's input */
    for (size_t i = 0; i < n; i++) x[i] = order_value(g_rank, 0, i);
#define AR_WRONG(buf)                                                                                                  \
    do {                                                                                                               \
        wrong = 0;                                                                                                     \
        for (size_t i = 0; i < n; i++) wrong += (buf)[i] != order_value(0, 0, i) + order_value(1, 0, i);               \
    } while (0)
    if (!strcmp(cas, "p2p")) {
        if (g_rank == 0) {
            for (size_t i = 0; i < n; i++) y[i] = order_value(0, 1, i);
            ringlet_group_start();
            ringlet_allreduce(x, x, n, RINGLET_INT32, RINGLET_SUM, g_comm, NULL);
            ringlet_send(y, n, RINGLET_INT32, 1, g_comm, NULL);
            rc = ringlet_group_end();
            AR_WRONG(x);
            order_outcome("group(allreduce, send)", rc, wrong, &named);
        } else {
            rc = ringlet_recv(y, n, RINGLET_INT32, 0, g_comm, NULL);
            wrong = 0;
            for (size_t i = 0; i < n; i++) wrong += y[i] != order_value(0, 1, i);
            order_outcome("recv", rc, wrong, &named);
            int first = rc;
            rc = ringlet_allreduce(x, x, n, RINGLET_INT32, RINGLET_SUM, g_comm, NULL);
            AR_WRONG(x);
            order_outcome("allreduce", rc, wrong, &named);
            CHECK(first != RINGLET_SUCCESS, "order p2p: rank 1's receive took rank 0's all-reduce message");
        }
    } else if (!strcmp(cas, "coll")) {
        for (size_t i = 0; i < m; i++) g[i] = order_value(g_rank, 2, i);
        /* The calls' buffers: these, or their device twins. */
        int32_t *cx = x, *cy = y, *cg = g;
        if (device) {
            cx = dev_twin(n * sizeof *x), cy = dev_twin(2 * m * sizeof *y), cg = dev_twin(m * sizeof *g);
            dev_copy(cx, x, n * sizeof *x);
            dev_copy(cg, g, m * sizeof *g);
        }
        ringlet_result_t first = RINGLET_SUCCESS;
        for (int k = 0; k < 2; k++) {
            if ((k == 0) == (g_rank == 0)) {
                rc = ringlet_allreduce(cx, cx, n, RINGLET_INT32, RINGLET_SUM, g_comm, NULL);
                if (!rc) rc = ringlet_comm_get_async_error(g_comm);
                if (device) dev_copy(x, cx, n * sizeof *x);
                AR_WRONG(x);
                order_outcome("allreduce", rc, wrong, &named);
            } else {
                rc = ringlet_allgather(cg, cy, m, RINGLET_INT32, g_comm, NULL);
                if (!rc) rc = ringlet_comm_get_async_error(g_comm);
                if (device) dev_copy(y, cy, 2 * m * sizeof *y);
                wrong = 0;
                for (size_t i = 0; i < 2 * m; i++) wrong += y[i] != order_value((int)(i / m), 2, i % m);
                order_outcome("allgather", rc, wrong, &named);
            }
            if (k == 0) first = rc;
        }
        CHECK(first != RINGLET_SUCCESS, "order coll: rank %d's first call took the peer's other call's message", g_rank);
        if (device) g_dev->mem_free(cx), g_dev->mem_free(cy), g_dev->mem_free(cg);
    } else {
        return printf("FAIL: --order %s: want p2p or coll\n", cas), 1;
    }
#undef AR_WRONG
    printf("mismatch order: rank %d: %d checks, %d failed, %d named the other call\n", g_rank, g_checks, g_failed,
           named);
    free(x), free(y), free(g);
    ringlet_comm_abort(g_comm);
    ringlet_comm_destroy(g_comm);
    return g_failed != 0;
}

int main(int argc, char **argv) {
    if (argc > 3 && !strcmp(argv[1], "--order"))
        return order_case(argv[2], (size_t)atol(argv[3]), argc > 4 ? (size_t)atol(argv[4]) : 0,
                          argc > 5 && !strcmp(argv[5], "--device"));
    if (argc > 2 && !strcmp(argv[1], "--board")) return board_case(argv[2]);
    if (argc > 2 && !strcmp(argv[1], "--abort-on-error"))
        return abort_on_error(atoi(argv[2]), argc > 4 && !strcmp(argv[3], "--count") ? (size_t)atol(argv[4]) : 1 << 20);
    if (ringlet_comm_init_env(&g_comm)) return printf("FAIL: %s\n", ringlet_comm_last_error(NULL)), 1;
    ringlet_comm_rank(g_comm, &g_rank);
    ringlet_comm_size(g_comm, &g_P);
    int odd = g_rank == g_P - 1;
    float f[1000];
    for (int i = 0; i < 1000; i++) f[i] = (float)i;
    ringlet_result_t rc;

    rc = ringlet_allreduce(f, f, 1000, odd ? RINGLET_INT32 : RINGLET_FLOAT32, RINGLET_SUM, g_comm, NULL);
    expect_mismatch("dtype", rc, "allreduce(count=1000, float32, sum)", "allreduce(count=1000, int32, sum)");
    still_works(1);
    rc = ringlet_allreduce(f, f, 1000, RINGLET_FLOAT32, odd ? RINGLET_MAX : RINGLET_SUM, g_comm, NULL);
    expect_mismatch("op", rc, "allreduce(count=1000, float32, sum)", "allreduce(count=1000, float32, max)");
    still_works(2);
    rc = odd ? ringlet_broadcast(f, f, 1000, RINGLET_FLOAT32, 0, g_comm, NULL)
             : ringlet_allreduce(f, f, 1000, RINGLET_FLOAT32, RINGLET_SUM, g_comm, NULL);
    expect_mismatch("kind", rc, "allreduce(count=1000, float32, sum)", "broadcast(count=1000, float32, root=0)");
    still_works(3);
    rc = ringlet_allreduce(f, f, odd ? 999 : 1000, RINGLET_FLOAT32, RINGLET_SUM, g_comm, NULL);
    expect_mismatch("count", rc, "allreduce(count=1000, float32, sum)", "allreduce(count=999, float32, sum)");
    still_works(4);
    rc = ringlet_broadcast(f, f, 1000, RINGLET_FLOAT32, odd ? 1 : 0, g_comm, NULL);
    expect_mismatch("root", rc, "broadcast(count=1000, float32, root=0)", "broadcast(count=1000, float32, root=1)");
    still_works(5);
    /* The odd rank adds an operation: from then on it is one ahead, so after the mismatch
     * the others add one too, to be in step again. */
    int32_t y[4] = {1, 2, 3, 4};
    if (odd) {
        rc = ringlet_allreduce(y, y, 4, RINGLET_INT32, RINGLET_SUM, g_comm, NULL);
        expect_mismatch("skip", rc, "barrier()", "allreduce(count=4, int32, sum)");
    } else {
        rc = ringlet_barrier(g_comm, NULL);
        expect_mismatch("skip", rc, "barrier()", "allreduce(count=4, int32, sum)");
    }
    still_works(6);
    /* A send and a receive between ranks 0 and 1 only are not collectives: the next
     * collective is no mismatch on the ranks that took no part (they once counted in the
     * number that the ranks compare, so it failed at P >= 3). */
    if (g_rank < 2 && g_P > 1) {
        int32_t m = g_rank == 0 ? 42 : 0;
        rc = g_rank == 0 ? ringlet_send(&m, 1, RINGLET_INT32, 1, g_comm, NULL)
                         : ringlet_recv(&m, 1, RINGLET_INT32, 0, g_comm, NULL);
        CHECK(!rc && m == 42, "send/recv between ranks 0 and 1: %s", rc ? ringlet_comm_last_error(g_comm) : "wrong value");
    }
    still_works(7);
    /* Pre-multiplied sums are compared as such, not by their op's number, which is each
     * rank's own: the odd rank holds a spare op, so its op has another number (no
     * mismatch); then the odd rank's pre-multiplied sum against the others' plain sum. */
    ringlet_op_t spare = RINGLET_SUM, pm;
    int32_t scale = g_rank + 2;
    if (odd) CHECK(!ringlet_op_create_premul_sum(&spare, &scale, RINGLET_FLOAT32, RINGLET_SCALAR_HOST, g_comm), "spare op");
    CHECK(!ringlet_op_create_premul_sum(&pm, &scale, RINGLET_INT32, RINGLET_SCALAR_HOST, g_comm), "premul op: %s",
          ringlet_comm_last_error(g_comm));
    int32_t z[300];
    for (int i = 0; i < 300; i++) z[i] = (int32_t)((i * 7919 + g_rank * 131) % 2001) - 1000;
    rc = ringlet_allreduce(z, z, 300, RINGLET_INT32, pm, g_comm, NULL);
    int bad = 0;
    for (int i = 0; i < 300 && !rc; i++) {
        int32_t w = 0;
        for (int r = 0; r < g_P; r++) w += (r + 2) * ((int32_t)((i * 7919 + r * 131) % 2001) - 1000);
        bad += z[i] != w;
    }
    CHECK(!rc && !bad, "premul (op numbers differ between ranks): %s, %d wrong", rc ? ringlet_comm_last_error(g_comm) : "ok",
          bad);
    rc = ringlet_allreduce(z, z, 300, RINGLET_INT32, odd ? pm : RINGLET_SUM, g_comm, NULL);
    expect_mismatch("premul", rc, "allreduce(count=300, int32, sum)", "allreduce(count=300, int32, pre-multiplied sum)");
    still_works(8);
    /* Collectives inside a group are compared too, each in its order: two all-reduces,
     * the second of another count on the odd rank (they once ran unchecked: the ring cut
     * its buffer differently on the ranks). The group's end reports it; nothing ran. */
    int32_t g1[64], g2[64], g0[64];
    for (int i = 0; i < 64; i++) g1[i] = g0[i] = (int32_t)(i * 3 + g_rank), g2[i] = 0;
    CHECK(!ringlet_group_start(), "group_start");
    ringlet_allreduce(g1, g1, 64, RINGLET_INT32, RINGLET_SUM, g_comm, NULL);
    ringlet_allreduce(g2, g2, odd ? 63 : 64, RINGLET_INT32, RINGLET_SUM, g_comm, NULL);
    rc = ringlet_group_end();
    expect_mismatch("group", rc, "allreduce(count=64, int32, sum)", "allreduce(count=63, int32, sum)");
    CHECK(!memcmp(g1, g0, sizeof g1), "group: its first all-reduce ran although the group failed its check");
    still_works(9);
    /* The odd rank's group has a second all-reduce the others' lack: found at the first,
     * where the odd rank has one more after it (the others ran theirs against its second
     * comparison, and the communicator failed or hung). */
    CHECK(!ringlet_group_start(), "group_start");
    ringlet_allreduce(g1, g1, 64, RINGLET_INT32, RINGLET_SUM, g_comm, NULL);
    if (odd) ringlet_allreduce(g2, g2, 64, RINGLET_INT32, RINGLET_SUM, g_comm, NULL);
    rc = ringlet_group_end();
    expect_mismatch("group-count", rc, "allreduce(count=64, int32, sum)",
                    "allreduce(count=64, int32, sum) with 1 more collective(s) of its group after it");
    CHECK(!memcmp(g1, g0, sizeof g1), "group-count: an all-reduce ran although the group failed its check");
    still_works(10);
    if (odd) ringlet_op_destroy(spare, g_comm);
    ringlet_op_destroy(pm, g_comm);
    printf("mismatch: rank %d: %d checks, %d failed\n", g_rank, g_checks, g_failed);
    ringlet_comm_destroy(g_comm);
    return g_failed ? 1 : 0;
}
