/* TCP's small messages, moved by the posting and waiting threads (transports/tcp.c),
 * mixed with large ones that the socket threads move, on the same connections.
 *
 *   tcp_inline [--rounds N] [--seed S] [--mismatch none|small|large|striped|pieces|order] [--two-comms 0|1|BYTES] [--emfile 0|1|2|3]
 *              [--first-exchange 0|1|2|3|4]
 *
 * Run over RINGLET_TRANSPORT=tcp. Each rank sends to the next rank of the ring and
 * receives from the previous one. A round is a list of messages, the same on every
 * rank (from the seed): sizes from 0 bytes to past a 1 MiB point-to-point piece, mostly
 * small, some just under, at and over 64 KiB (RINGLET_TCP_INLINE_BYTES's default where
 * socket threads have cores; tcp_inline.sh runs both that and no limit). A round posts
 * every receive, then every send, non-blocking, and waits for them in a shuffled order
 * (polling with test for some); so small receives are read by waiters, and (under the
 * 64 KiB limit) a large message posted behind a small receive takes the socket's queue
 * over to its thread.
 * In some rounds the senders sleep a few milliseconds first, so that receivers give up
 * spinning and hand their receives to the threads; other rounds use the blocking calls;
 * between rounds an 8-byte and a 300 KB all-reduce share the connections. Every byte is
 * checked, and the guard bytes after each receive buffer must be untouched.
 *
 * --mismatch (2 ranks): after the rounds, rank 0 sends a message of one length and rank
 * 1 receives another (small: 100 and 200 bytes, under the inline limit; large: 300000
 * and 200000 bytes, the socket thread's way). Rank 1's receive must fail with
 * RINGLET_ERR_INVALID_USAGE saying both lengths and naming rank 0; rank 1 then destroys
 * its communicator, and rank 0's next receive from rank 1 must fail naming rank 1.
 * --mismatch order (2 ranks, 8 sockets per peer): on 8 fresh communicators (splits), after
 * 0..7 one-byte messages, rank 0 sends 4 KiB and then 192 KiB (three parts); rank 1
 * receives 192 KiB first: that receive must fail saying both lengths, whichever socket
 * each message starts on (where the striped message always started on socket 0, it took
 * the sender's next message for its own).
 *
 * --two-comms 1 (2 ranks), before the rounds: rank 0 posts a 64 KiB irecv from rank 1
 * on the world communicator, then joins an all-reduce on a second one (a split) and only
 * then waits for the receive; rank 1 sends those 64 KiB with a blocking send first, then
 * joins the all-reduce. Then the same the other way: rank 0 posts an isend, rank 1 a
 * blocking receive. No thread of rank 0 polls the world communicator meanwhile, so the
 * message must be moved by its socket thread (TCP) or its communicator's progress thread
 * (shared memory): where the socket buffers or the FIFO hold less than the message
 * (tcp_inline.sh runs this in a network namespace whose TCP buffers are 4 KiB, and with
 * --two-comms 4194304 over shared memory, twice the FIFO), a message left for pollers
 * would stall rank 1's call, and both ranks would wait until RINGLET_TIMEOUT.
 * --two-comms N (N > 1): N bytes instead of 64 KiB.
 *
 * --emfile 1 (3 ranks), instead of the rounds: rank 1 lowers its limit of open files to the
 * descriptors it has (and fills the free numbers below it), then receives from rank 2, which it has no receive connection from
 * yet (the ring's are 0 -> 1 -> 2 -> 0): the accept finds no descriptor left. The receive
 * must fail with RINGLET_ERR_SYSTEM saying so and naming rank 2 (not "socket error", nor a
 * wait until the deadline for a rank that did connect). That failure is rank 1's alone and
 * passes: with its descriptors back, a second receive gets rank 2's message, whole, and an
 * all-reduce of the three ranks is right. --emfile 2: the same, but the receive is posted
 * while descriptors remain, so it parks (rank 2 connects only after a second token from
 * rank 1, sent once the descriptors are gone); the accept of the poll that finds rank 2's
 * connection is the one that fails, and only that receive may fail. --emfile 3: the
 * connecting side instead (emfile_connect).
 *
 * --first-exchange 1, instead of the rounds: on a fresh communicator (a split) each time,
 * every rank posts a receive from every other rank, then a send to each (the
 * canonical MPI exchange: irecv, isend, wait). Only ring neighbours are connected at init,
 * so between the others each receive is the first message of its pair: its accept waits
 * for the peer's connection, which the peer makes only with its send, queued behind its
 * own receives. Three passes: the sends at once; after an all-reduce on the world
 * communicator (so the receives are surely being accepted before any send is posted), with
 * 1.5 MiB messages; and blocking sends. A fourth: ranks 2 and 3 send 24 MiB to ranks 0 and
 * 1 with a blocking send before an all-reduce, which ranks 0 and 1 join after posting
 * the receive (their all-reduce must accept the connection meanwhile). Every byte and the
 * guard bytes are checked.
 *
 * --first-exchange 2 (4 ranks): a receive from a rank that never sends (see never_connects).
 * --first-exchange 3 (4 ranks, RINGLET_ALGO=doubling): a collective's accept that waits
 * while a receive is parked (see accept_chain).
 * --first-exchange 4 (4 ranks): a parked receive whose sender only the progress thread's
 * idle poll can take, with the wall clock stepped back after each read (see idle_poll).
 *
 * Prints "tcp_inline: rank R of P: N checks, F failed"; exit 0 iff none failed.
 */
#include <dirent.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "ringlet.h"

#define GUARD 64
#define MAX_MSGS 24

static int g_rank, g_P;
static uint64_t g_seed = 20261125;
static long g_checks, g_failed;

#define CHECK(cond, ...)                                                                                               \
    do {                                                                                                               \
        g_checks++;                                                                                                    \
        if (!(cond)) {                                                                                                 \
            g_failed++;                                                                                                \
            printf("FAIL rank %d: ", g_rank);                                                                          \
            printf(__VA_ARGS__);                                                                                       \
            printf("\n");                                                                                              \
        }                                                                                                              \
    } while (0)

static uint64_t mix(uint64_t x) {
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

/* Byte i of the message msg of round k that rank `from` sends. */
static unsigned char byte_at(int k, int msg, int from, size_t i) {
    uint64_t h = mix(g_seed ^ ((uint64_t)k << 40) ^ ((uint64_t)msg << 32) ^ ((uint64_t)from << 24));
    return (unsigned char)(mix(h + i / 8) >> (8 * (i % 8)));
}

/* Message sizes: mostly small, some at the inline limit's edges, some large. */
static size_t pick_size(uint64_t r) {
    static const size_t edge[] = {0, 1, 8, 24, 4095, 4096, 65535, 65536, 65537, 131072, 300001, (1u << 20) + 3};
    switch (r % 8) {
    case 0: return edge[(r >> 8) % (sizeof edge / sizeof edge[0])];
    case 1: return 65536 + (r >> 8) % 200000; /* over the limit */
    default: return (r >> 8) % 2048;          /* small */
    }
}

/* --first-exchange 4 makes every read of CLOCK_REALTIME in this process, the library's
 * included (this definition is the executable's), an hour ahead of the clock by which the
 * kernel times a wait until a time of it: as if the wall clock were stepped back an hour
 * (by NTP, or settimeofday) right after each read. Set before the communicator (and its
 * threads) exists. */
static int g_realtime_back;
typedef int (*clock_fn)(clockid_t, struct timespec *);
int clock_gettime(clockid_t id, struct timespec *ts) {
    if (!g_realtime_back) { /* the real one (the vDSO's: no system call) */
        static clock_fn real;
        clock_fn f = __atomic_load_n(&real, __ATOMIC_RELAXED);
        if (!f) __atomic_store_n(&real, f = (clock_fn)dlsym(RTLD_NEXT, "clock_gettime"), __ATOMIC_RELAXED);
        if (f) return f(id, ts);
    }
    long r = syscall(SYS_clock_gettime, id, ts);
    if (r == 0 && id == CLOCK_REALTIME && g_realtime_back) ts->tv_sec += 3600;
    return (int)r;
}

static long long clock_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void sleep_ms(int ms) {
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static void check_recv(const unsigned char *buf, size_t n, int k, int msg, int from, const char *how) {
    size_t bad = 0, first = 0;
    for (size_t i = 0; i < n; i++)
        if (buf[i] != byte_at(k, msg, from, i) && !bad++) first = i;
    CHECK(!bad, "round %d message %d (%zu bytes, %s) from rank %d: %zu bytes wrong, the first at %zu", k, msg, n, how,
          from, bad, first);
    int guard_ok = 1;
    for (size_t i = 0; i < GUARD; i++) guard_ok &= buf[n + i] == 0xA5;
    CHECK(guard_ok, "round %d message %d (%zu bytes) from rank %d: written past the end", k, msg, n, from);
}

/* One round: n messages to next, n from prev. */
static void round_run(ringlet_comm_t comm, int k) {
    int next = (g_rank + 1) % g_P, prev = (g_rank + g_P - 1) % g_P;
    uint64_t r = mix(g_seed * 977 + (uint64_t)k);
    int n = 1 + (int)(r % MAX_MSGS), mode = (int)((r >> 8) % 4); /* 0, 1: non-blocking; 2: senders late; 3: blocking */
    size_t len[MAX_MSGS];
    unsigned char *sbuf[MAX_MSGS], *rbuf[MAX_MSGS];
    for (int m = 0; m < n; m++) {
        len[m] = pick_size(mix(r + (uint64_t)m + 1));
        sbuf[m] = malloc(len[m] + 1);
        rbuf[m] = malloc(len[m] + GUARD);
        if (!sbuf[m] || !rbuf[m]) {
            printf("FAIL rank %d: out of memory\n", g_rank);
            exit(1);
        }
        for (size_t i = 0; i < len[m]; i++) sbuf[m][i] = byte_at(k, m, g_rank, i);
        memset(rbuf[m], 0x5A, len[m]);
        memset(rbuf[m] + len[m], 0xA5, GUARD);
    }
    if (mode == 3) {
        /* Blocking, in ring order: even ranks send first (with P = 2 and odd P as well,
         * the last rank breaks the cycle by receiving first). */
        int send_first = g_rank % 2 == 0 && !(g_P % 2 == 1 && g_rank == g_P - 1);
        for (int m = 0; m < n; m++) {
            ringlet_result_t a, b;
            if (send_first) {
                a = ringlet_send(sbuf[m], len[m], RINGLET_UINT8, next, comm, NULL);
                b = ringlet_recv(rbuf[m], len[m], RINGLET_UINT8, prev, comm, NULL);
            } else {
                b = ringlet_recv(rbuf[m], len[m], RINGLET_UINT8, prev, comm, NULL);
                a = ringlet_send(sbuf[m], len[m], RINGLET_UINT8, next, comm, NULL);
            }
            CHECK(!a && !b, "round %d message %d: blocking send/recv: %s", k, m, ringlet_comm_last_error(comm));
            if (!b) check_recv(rbuf[m], len[m], k, m, prev, "blocking");
        }
    } else {
        ringlet_request_t rq[MAX_MSGS], sq[MAX_MSGS];
        for (int m = 0; m < n; m++) {
            ringlet_result_t rc = ringlet_irecv(rbuf[m], len[m], RINGLET_UINT8, prev, comm, NULL, &rq[m]);
            CHECK(!rc, "round %d: irecv %d: %s", k, m, ringlet_comm_last_error(comm));
            if (rc) exit(1);
        }
        if (mode == 2) sleep_ms(2 + (int)(r >> 16) % 5); /* receivers spin out and park */
        for (int m = 0; m < n; m++) {
            ringlet_result_t rc = ringlet_isend(sbuf[m], len[m], RINGLET_UINT8, next, comm, NULL, &sq[m]);
            CHECK(!rc, "round %d: isend %d: %s", k, m, ringlet_comm_last_error(comm));
            if (rc) exit(1);
        }
        /* Receives in a shuffled order; every third one polled with test. */
        int order[MAX_MSGS];
        for (int m = 0; m < n; m++) order[m] = m;
        for (int m = n - 1; m > 0; m--) {
            int j = (int)(mix(r + 1000 + (uint64_t)m) % (uint64_t)(m + 1)), t = order[m];
            order[m] = order[j], order[j] = t;
        }
        for (int i = 0; i < n; i++) {
            int m = order[i];
            ringlet_result_t rc;
            if (i % 3 == 2) {
                int done = 0;
                while (!(rc = ringlet_test(&rq[m], &done)) && !done) {
                }
            } else {
                rc = ringlet_wait(&rq[m]);
            }
            CHECK(!rc, "round %d: receive %d (%zu bytes) from rank %d: %s", k, m, len[m], prev,
                  ringlet_comm_last_error(comm));
            if (!rc) check_recv(rbuf[m], len[m], k, m, prev, mode == 2 ? "late sender" : "non-blocking");
        }
        for (int m = 0; m < n; m++) {
            ringlet_result_t rc = ringlet_wait(&sq[m]);
            CHECK(!rc, "round %d: send %d: %s", k, m, ringlet_comm_last_error(comm));
        }
    }
    for (int m = 0; m < n; m++) free(sbuf[m]), free(rbuf[m]);

    /* Collectives on the same connections: 8 bytes (the latency path), then 300 KB. */
    static const size_t counts[2] = {2, 75001};
    for (int i = 0; i < 2; i++) {
        size_t cnt = counts[i];
        int32_t *in = malloc(cnt * sizeof *in), *out = malloc(cnt * sizeof *out);
        if (!in || !out) exit(1);
        for (size_t j = 0; j < cnt; j++) in[j] = (int32_t)((j * 7 + (size_t)k) % 1000) + g_rank;
        ringlet_result_t rc = ringlet_allreduce(in, out, cnt, RINGLET_INT32, RINGLET_SUM, comm, NULL);
        size_t bad = 0;
        for (size_t j = 0; !rc && j < cnt; j++)
            bad += out[j] != (int32_t)(g_P * ((j * 7 + (size_t)k) % 1000) + g_P * (g_P - 1) / 2);
        CHECK(!rc && !bad, "round %d: all-reduce of %zu int32: %s, %zu wrong", k, cnt,
              rc ? ringlet_comm_last_error(comm) : "ok", bad);
        free(in), free(out);
    }
}

/* --two-comms: a message posted on one communicator (an irecv, then an isend), completed
 * while its owner is busy on another. Rank 0 posts; rank 1 calls the blocking
 * counterpart, then both join an all-reduce on a second communicator, and rank 0 waits
 * for its request only after it. */
static void two_comms(ringlet_comm_t comm, size_t n) {
    ringlet_comm_t other;
    ringlet_result_t rc = ringlet_comm_split(comm, 0, g_rank, &other);
    CHECK(!rc, "split: %s", ringlet_comm_last_error(comm));
    if (rc) return;
    unsigned char *buf = malloc(n + GUARD);
    if (!buf) exit(1);
    for (int dir = 0; dir < 2; dir++) { /* 0: rank 1 sends to rank 0; 1: rank 0 to rank 1 */
        int32_t one = g_rank + 1, sum = 0;
        int sender = dir == 0 ? 1 : 0;
        const char *how = dir == 0 ? "two communicators, irecv" : "two communicators, isend";
        if (g_rank == sender) {
            for (size_t i = 0; i < n; i++) buf[i] = byte_at(-1, dir, sender, i);
        } else {
            memset(buf, 0x5A, n);
            memset(buf + n, 0xA5, GUARD);
        }
        if (g_rank == 0) {
            ringlet_request_t rq;
            rc = dir == 0 ? ringlet_irecv(buf, n, RINGLET_UINT8, 1, comm, NULL, &rq)
                          : ringlet_isend(buf, n, RINGLET_UINT8, 1, comm, NULL, &rq);
            CHECK(!rc, "%s: posting: %s", how, ringlet_comm_last_error(comm));
            if (rc) exit(1);
            rc = ringlet_allreduce(&one, &sum, 1, RINGLET_INT32, RINGLET_SUM, other, NULL);
            CHECK(!rc && sum == 3, "%s: all-reduce on the second communicator: %s, sum %d", how,
                  rc ? ringlet_comm_last_error(other) : "ok", (int)sum);
            rc = ringlet_wait(&rq);
            CHECK(!rc, "%s: the wait: %s", how, ringlet_comm_last_error(comm));
        } else if (g_rank == 1) {
            rc = dir == 0 ? ringlet_send(buf, n, RINGLET_UINT8, 0, comm, NULL)
                          : ringlet_recv(buf, n, RINGLET_UINT8, 0, comm, NULL);
            CHECK(!rc, "%s: the blocking %s: %s", how, dir == 0 ? "send" : "receive", ringlet_comm_last_error(comm));
            rc = ringlet_allreduce(&one, &sum, 1, RINGLET_INT32, RINGLET_SUM, other, NULL);
            CHECK(!rc && sum == 3, "%s: all-reduce on the second communicator: %s, sum %d", how,
                  rc ? ringlet_comm_last_error(other) : "ok", (int)sum);
        }
        if (!rc && g_rank != sender && g_rank < 2) check_recv(buf, n, -1, dir, sender, how);
    }
    free(buf);
    ringlet_comm_destroy(other);
}

/* --first-exchange: every rank posts a receive from every other rank on a
 * fresh communicator, then a send to each: pass 0 at once, pass 1 after an all-reduce on
 * the world communicator (the new one's queue meanwhile holds only the receives), pass 2
 * with blocking sends. Messages of 3000 bytes, and in pass 1 of a piece and a half. */
static void first_exchange(ringlet_comm_t world) {
    for (int pass = 0; pass < 3; pass++) {
        ringlet_comm_t sub;
        ringlet_result_t rc = ringlet_comm_split(world, 0, g_rank, &sub);
        CHECK(!rc, "first exchange %d: split: %s", pass, ringlet_comm_last_error(world));
        if (rc) return;
        size_t n = pass == 1 ? (3u << 20) / 2 + 5 : 3000;
        unsigned char **in = calloc((size_t)g_P, sizeof *in), **out = calloc((size_t)g_P, sizeof *out);
        ringlet_request_t *rq = calloc((size_t)g_P, sizeof *rq), *sq = calloc((size_t)g_P, sizeof *sq);
        if (!in || !out || !rq || !sq) exit(1);
        for (int q = 0; q < g_P; q++) {
            in[q] = malloc(n + GUARD), out[q] = malloc(n);
            if (!in[q] || !out[q]) exit(1);
            memset(in[q], 0x5A, n);
            memset(in[q] + n, 0xA5, GUARD);
            /* message q of round -2 - pass from this rank: the one rank q checks */
            for (size_t i = 0; i < n; i++) out[q][i] = byte_at(-2 - pass, q, g_rank, i);
        }
        for (int k = 1; k < g_P; k++) {
            int q = (g_rank + k) % g_P;
            rc = ringlet_irecv(in[q], n, RINGLET_UINT8, q, sub, NULL, &rq[q]);
            CHECK(!rc, "first exchange %d: irecv from rank %d: %s", pass, q, ringlet_comm_last_error(sub));
        }
        if (pass == 1) {
            int32_t x = g_rank, sum = 0;
            rc = ringlet_allreduce(&x, &sum, 1, RINGLET_INT32, RINGLET_SUM, world, NULL);
            CHECK(!rc && sum == g_P * (g_P - 1) / 2, "first exchange %d: all-reduce on the world: %s, sum %d", pass,
                  rc ? ringlet_comm_last_error(world) : "ok", (int)sum);
        }
        for (int k = 1; k < g_P; k++) {
            int q = (g_rank + g_P - k) % g_P;
            rc = pass == 2 ? ringlet_send(out[q], n, RINGLET_UINT8, q, sub, NULL)
                           : ringlet_isend(out[q], n, RINGLET_UINT8, q, sub, NULL, &sq[q]);
            CHECK(!rc, "first exchange %d: send to rank %d: %s", pass, q, ringlet_comm_last_error(sub));
        }
        for (int q = 0; q < g_P; q++) {
            if (sq[q]) {
                rc = ringlet_wait(&sq[q]);
                CHECK(!rc, "first exchange %d: the send to rank %d: %s", pass, q, ringlet_comm_last_error(sub));
            }
            if (rq[q]) {
                rc = ringlet_wait(&rq[q]);
                CHECK(!rc, "first exchange %d: the receive from rank %d: %s", pass, q, ringlet_comm_last_error(sub));
                if (!rc) check_recv(in[q], n, -2 - pass, g_rank, q, "first exchange");
            }
            free(in[q]), free(out[q]);
        }
        free(in), free(out), free(rq), free(sq);
        ringlet_comm_destroy(sub);
    }
    /* Pass 3: ranks 2 and 3 send 24 MiB (more than the sockets hold) to ranks 0 and 1 with
     * a blocking send, then join an all-reduce; ranks 0 and 1 post the receive, then join
     * the all-reduce, then wait (at 5 ranks, rank 4 joins the all-reduce only). The all-reduce's waits on ranks 0 and 1 must accept the
     * senders' connections, or the sends never end and the all-reduce waits for them. */
    ringlet_comm_t sub;
    ringlet_result_t rc = ringlet_comm_split(world, 0, g_rank, &sub);
    CHECK(!rc, "first exchange 3: split: %s", ringlet_comm_last_error(world));
    if (rc) return;
    size_t n = (24u << 20) + 3, cnt = 65536;
    unsigned char *msg = malloc(n + GUARD);
    int32_t *x = malloc(cnt * sizeof *x), *sum = malloc(cnt * sizeof *sum);
    if (!msg || !x || !sum) exit(1);
    for (size_t j = 0; j < cnt; j++) x[j] = (int32_t)(j % 1000) + g_rank;
    ringlet_request_t rq = NULL;
    unsigned char token = 3;
    /* A token 0 -> 1 -> 2 -> 3 over ring connections, passed on by ranks 0 and 1 behind their
     * receive: ranks 2 and 3 send only once both receives were handled, so both park. */
    if (g_rank < 2) {
        memset(msg, 0x5A, n);
        memset(msg + n, 0xA5, GUARD);
        rc = ringlet_irecv(msg, n, RINGLET_UINT8, g_rank + 2, sub, NULL, &rq);
        CHECK(!rc, "first exchange 3: irecv from rank %d: %s", g_rank + 2, ringlet_comm_last_error(sub));
    }
    if (g_rank > 0 && g_rank < 4) {
        rc = ringlet_recv(&token, 1, RINGLET_UINT8, g_rank - 1, sub, NULL);
        CHECK(!rc, "first exchange 3: the token from rank %d: %s", g_rank - 1, ringlet_comm_last_error(sub));
    }
    if (g_rank < 3) {
        rc = ringlet_send(&token, 1, RINGLET_UINT8, g_rank + 1, sub, NULL);
        CHECK(!rc, "first exchange 3: the token to rank %d: %s", g_rank + 1, ringlet_comm_last_error(sub));
    }
    if (g_rank == 2 || g_rank == 3) {
        for (size_t i = 0; i < n; i++) msg[i] = byte_at(-5, 0, g_rank, i);
        rc = ringlet_send(msg, n, RINGLET_UINT8, g_rank - 2, sub, NULL);
        CHECK(!rc, "first exchange 3: send to rank %d: %s", g_rank - 2, ringlet_comm_last_error(sub));
    }
    rc = ringlet_allreduce(x, sum, cnt, RINGLET_INT32, RINGLET_SUM, sub, NULL);
    size_t bad = 0;
    for (size_t j = 0; j < cnt && !rc; j++) bad += sum[j] != (int32_t)(g_P * (int)(j % 1000) + g_P * (g_P - 1) / 2);
    CHECK(!rc && !bad, "first exchange 3: all-reduce: %s, %zu wrong", rc ? ringlet_comm_last_error(sub) : "ok", bad);
    if (rq) {
        rc = ringlet_wait(&rq);
        CHECK(!rc, "first exchange 3: the receive from rank %d: %s", g_rank + 2, ringlet_comm_last_error(sub));
        if (!rc) check_recv(msg, n, -5, 0, g_rank + 2, "first exchange, a collective meanwhile");
    }
    free(msg), free(x), free(sum);
    ringlet_comm_destroy(sub);
    printf("tcp_inline: rank %d: first exchanges done\n", g_rank);
}

/* --first-exchange 2 (4 ranks): on a communicator with a 4 s deadline (its init must fit
 * in it too, and its monitor calls a rank silent that long unresponsive: no tighter, for
 * TSan's sake), rank 1 receives from rank 3, which sends nothing: the receive waits parked
 * for rank 3's connection, and
 * its wait must fail at the deadline, with RINGLET_ERR_TIMEOUT, naming rank 3 and saying
 * that it never connected. The others wait for rank 1 in an all-reduce on the world
 * communicator (whose deadline is RINGLET_TIMEOUT's), so nobody leaves before. */
static void never_connects(ringlet_comm_t world) {
    ringlet_unique_id_t id;
    ringlet_result_t rc = g_rank == 0 ? ringlet_get_unique_id(&id) : RINGLET_SUCCESS;
    if (!rc) rc = ringlet_broadcast(&id, &id, sizeof id, RINGLET_UINT8, 0, world, NULL);
    ringlet_comm_config_t cfg = RINGLET_COMM_CONFIG_INIT;
    cfg.timeout_s = 4;
    ringlet_comm_t comm = NULL;
    if (!rc) rc = ringlet_comm_init_rank_config(&comm, g_P, id, g_rank, &cfg);
    CHECK(!rc, "a communicator with a 4 s deadline: %s", ringlet_comm_last_error(NULL));
    if (rc) return;
    if (g_rank == 1) {
        unsigned char buf[16];
        ringlet_request_t rq;
        long long t0 = clock_ms();
        rc = ringlet_irecv(buf, sizeof buf, RINGLET_UINT8, 3, comm, NULL, &rq);
        CHECK(!rc, "irecv from rank 3: %s", ringlet_comm_last_error(comm));
        if (!rc) {
            rc = ringlet_wait(&rq);
            const char *m = ringlet_comm_last_error(comm);
            CHECK(rc == RINGLET_ERR_TIMEOUT && strstr(m, "rank 3") && strstr(m, "never connected"),
                  "a receive from rank 3, which never sends: %s: %s", ringlet_strerror(rc), rc ? m : "succeeded");
            printf("tcp_inline: rank 1: after %.1f s: %s\n", (double)(clock_ms() - t0) / 1000, m);
        }
    }
    int32_t x = g_rank, sum = 0;
    rc = ringlet_allreduce(&x, &sum, 1, RINGLET_INT32, RINGLET_SUM, world, NULL);
    CHECK(!rc && sum == 6, "all-reduce on the world after rank 1's receive: %s, sum %d",
          rc ? ringlet_comm_last_error(world) : "ok", (int)sum);
    ringlet_comm_abort(comm);
    ringlet_comm_destroy(comm);
}

/* --first-exchange 4 (4 ranks), with the wall clock stepped back after each read (see
 * clock_gettime):
 * on a fresh communicator (a split: only ring neighbours are connected), rank 0 posts a
 * receive from rank 2, then passes a token to rank 1, which passes it to rank 2 (ring
 * connections both), so that the receive parks before rank 2 connects; then rank 0 waits
 * in an all-reduce on the world communicator. Rank 2, once it has the token, sends 24 MiB
 * (more than the sockets hold) to rank 0 with a blocking send, then joins the all-reduce.
 * Nothing of rank 0's runs on the split meanwhile
 * but its progress thread, which looks for the connection every 10 ms while idle: a poll
 * timed on the wall clock would wait an hour there, and all would wait until the deadline. */
static void idle_poll(ringlet_comm_t world) {
    ringlet_comm_t sub;
    ringlet_result_t rc = ringlet_comm_split(world, 0, g_rank, &sub);
    CHECK(!rc, "idle poll: split: %s", ringlet_comm_last_error(world));
    if (rc) return;
    size_t n = (24u << 20) + 3;
    unsigned char *msg = malloc(n + GUARD), token = 9;
    if (!msg) exit(1);
    ringlet_request_t rq = NULL;
    if (g_rank == 0) {
        memset(msg, 0x5A, n);
        memset(msg + n, 0xA5, GUARD);
        rc = ringlet_irecv(msg, n, RINGLET_UINT8, 2, sub, NULL, &rq);
        if (!rc) rc = ringlet_send(&token, 1, RINGLET_UINT8, 1, sub, NULL);
        CHECK(!rc, "idle poll: irecv from rank 2, the token to rank 1: %s", ringlet_comm_last_error(sub));
    } else if (g_rank == 1) {
        rc = ringlet_recv(&token, 1, RINGLET_UINT8, 0, sub, NULL);
        if (!rc) rc = ringlet_send(&token, 1, RINGLET_UINT8, 2, sub, NULL);
        CHECK(!rc, "idle poll: the token from rank 0 to rank 2: %s", ringlet_comm_last_error(sub));
    } else if (g_rank == 2) {
        rc = ringlet_recv(&token, 1, RINGLET_UINT8, 1, sub, NULL);
        CHECK(!rc, "idle poll: the token from rank 1: %s", ringlet_comm_last_error(sub));
        for (size_t i = 0; i < n; i++) msg[i] = byte_at(-7, 0, 2, i);
        rc = ringlet_send(msg, n, RINGLET_UINT8, 0, sub, NULL);
        CHECK(!rc, "idle poll: send to rank 0: %s", ringlet_comm_last_error(sub));
    }
    int32_t x = 10 + g_rank, sum = 0;
    rc = ringlet_allreduce(&x, &sum, 1, RINGLET_INT32, RINGLET_SUM, world, NULL);
    CHECK(!rc && sum == 46, "idle poll: all-reduce on the world: %s, sum %d (want 46)",
          rc ? ringlet_comm_last_error(world) : "ok", (int)sum);
    if (rq) {
        rc = ringlet_wait(&rq);
        CHECK(!rc, "idle poll: the receive from rank 2: %s", ringlet_comm_last_error(sub));
        if (!rc) check_recv(msg, n, -7, 0, 2, "taken by the idle poll");
    }
    free(msg);
    ringlet_comm_destroy(sub);
    printf("tcp_inline: rank %d: idle poll done\n", g_rank);
}

/* --first-exchange 3 (4 ranks, RINGLET_ALGO=doubling: the all-reduce's first partner is
 * the rank next door, and 1 -> 0 is no ring connection): rank 0 posts a receive from rank
 * 2, then joins an all-reduce, whose accept of rank 1's connection waits; rank 1 waits in
 * a blocking receive from rank 2 first; rank 2 sends 24 MiB (more than the sockets hold)
 * to rank 0, then 100 bytes to rank 1, then joins. So rank 0's accept of rank 1 must take
 * rank 2's connection for the parked receive meanwhile, or all wait until the deadline. */
static void accept_chain(ringlet_comm_t world) {
    size_t n = (24u << 20) + 3, small = 100;
    unsigned char *msg = malloc(n + GUARD);
    if (!msg) exit(1);
    ringlet_request_t rq = NULL;
    ringlet_result_t rc = RINGLET_SUCCESS;
    memset(msg, 0x5A, n);
    memset(msg + n, 0xA5, GUARD);
    unsigned char token = 7;
    /* A token 0 -> 1 -> 2 over ring connections: rank 2 connects to rank 0 only once rank 0's
     * receive was handled (its send of the token queued behind it), so that receive parks. */
    if (g_rank == 0) {
        rc = ringlet_irecv(msg, n, RINGLET_UINT8, 2, world, NULL, &rq);
        if (!rc) rc = ringlet_send(&token, 1, RINGLET_UINT8, 1, world, NULL);
        CHECK(!rc, "chain: irecv from rank 2, the token to rank 1: %s", ringlet_comm_last_error(world));
    } else if (g_rank == 1) {
        rc = ringlet_recv(&token, 1, RINGLET_UINT8, 0, world, NULL);
        if (!rc) rc = ringlet_send(&token, 1, RINGLET_UINT8, 2, world, NULL);
        CHECK(!rc, "chain: the token from rank 0 to rank 2: %s", ringlet_comm_last_error(world));
        memset(msg + small, 0xA5, GUARD);
        rc = ringlet_recv(msg, small, RINGLET_UINT8, 2, world, NULL);
        CHECK(!rc, "chain: receive from rank 2: %s", ringlet_comm_last_error(world));
        if (!rc) check_recv(msg, small, -6, 1, 2, "chain");
    } else if (g_rank == 2) {
        for (size_t i = 0; i < n; i++) msg[i] = byte_at(-6, 0, 2, i);
        rc = ringlet_recv(&token, 1, RINGLET_UINT8, 1, world, NULL);
        CHECK(!rc, "chain: the token from rank 1: %s", ringlet_comm_last_error(world));
        if (!rc) rc = ringlet_send(msg, n, RINGLET_UINT8, 0, world, NULL);
        CHECK(!rc, "chain: send to rank 0: %s", ringlet_comm_last_error(world));
        for (size_t i = 0; i < small; i++) msg[i] = byte_at(-6, 1, 2, i);
        if (!rc) rc = ringlet_send(msg, small, RINGLET_UINT8, 1, world, NULL);
        CHECK(!rc, "chain: send to rank 1: %s", ringlet_comm_last_error(world));
    }
    int32_t x = 10 + g_rank, sum = 0;
    rc = ringlet_allreduce(&x, &sum, 1, RINGLET_INT32, RINGLET_SUM, world, NULL);
    CHECK(!rc && sum == 46, "chain: all-reduce: %s, sum %d", rc ? ringlet_comm_last_error(world) : "ok", (int)sum);
    if (rq) {
        rc = ringlet_wait(&rq);
        CHECK(!rc, "chain: the receive from rank 2: %s", ringlet_comm_last_error(world));
        if (!rc) check_recv(msg, n, -6, 0, 2, "chain");
    }
    free(msg);
    printf("tcp_inline: rank %d: accept chain done\n", g_rank);
}

/* Rank 0 sends slen bytes, rank 1 receives rlen. A message longer than a piece (1 MiB)
 * travels in pieces, the last one shorter than a piece (p2p.h): the mismatch shows in the
 * first piece whose lengths differ, here pslen sent where prlen was expected. fillers >= 0
 * (--mismatch order): that many one-byte messages first, and rank 0 then also sends the
 * rlen bytes that rank 1 expects (after the slen ones). */
static void mismatch(ringlet_comm_t *comm, size_t slen, size_t rlen, size_t pslen, size_t prlen, int fillers) {
    unsigned char *buf = calloc(1, (slen > rlen ? slen : rlen) * 2 + 1);
    if (!buf) exit(1);
    for (int k = 0; k < fillers && g_rank < 2; k++) {
        ringlet_result_t rc = g_rank == 0 ? ringlet_send(buf, 1, RINGLET_UINT8, 1, *comm, NULL)
                                          : ringlet_recv(buf, 1, RINGLET_UINT8, 0, *comm, NULL);
        CHECK(rc == RINGLET_SUCCESS, "filler message %d: %s", k, rc ? ringlet_comm_last_error(*comm) : "ok");
    }
    if (g_rank == 0) {
        ringlet_result_t rc = ringlet_send(buf, slen, RINGLET_UINT8, 1, *comm, NULL);
        /* The bytes may well have left before rank 1 looked: success or an error both do. */
        printf("tcp_inline: rank 0: send of %zu bytes: %s\n", slen, rc ? ringlet_comm_last_error(*comm) : "ok");
        if (!rc && fillers >= 0 && rlen > slen) { /* the message rank 1 receives first */
            rc = ringlet_send(buf, rlen, RINGLET_UINT8, 1, *comm, NULL);
            printf("tcp_inline: rank 0: then a send of %zu bytes: %s\n", rlen, rc ? ringlet_comm_last_error(*comm) : "ok");
        }
        rc = ringlet_recv(buf, 1, RINGLET_UINT8, 1, *comm, NULL);
        const char *m = ringlet_comm_last_error(*comm);
        CHECK(rc != RINGLET_SUCCESS && strstr(m, "rank 1"), "receive from rank 1 after its failure: %s (%s)",
              ringlet_strerror(rc), rc ? m : "succeeded");
        printf("tcp_inline: rank 0: after the mismatch: %s\n", m);
    } else if (g_rank == 1) {
        ringlet_result_t rc = ringlet_recv(buf, rlen, RINGLET_UINT8, 0, *comm, NULL);
        const char *m = ringlet_comm_last_error(*comm);
        char want[128], want_shm[128]; /* TCP's words, or the shared-memory slots' */
        snprintf(want, sizeof want, "sent a message of %zu bytes, this rank expected %zu", pslen, prlen);
        snprintf(want_shm, sizeof want_shm, "the peer sent %zu bytes, the receive was posted for %zu", pslen, prlen);
        CHECK(rc == RINGLET_ERR_INVALID_USAGE && (strstr(m, want) || strstr(m, want_shm)) && strstr(m, "rank 0"),
              "receive of %zu bytes when rank 0 sent %zu: %s: %s", rlen, slen, ringlet_strerror(rc), m);
        printf("tcp_inline: rank 1: mismatch: %s\n", m);
        ringlet_comm_destroy(*comm); /* rank 0 waits for a message that never comes */
        *comm = NULL;
    }
    free(buf);
}

static void mismatch_order(ringlet_comm_t comm) {
    for (int o = 0; o < 8; o++) {
        ringlet_comm_t sub = NULL;
        if (ringlet_comm_split(comm, 0, g_rank, &sub) != RINGLET_SUCCESS) {
            CHECK(0, "split %d: %s", o, ringlet_comm_last_error(comm));
            return;
        }
        mismatch(&sub, 4096, 196608, 4096, 196608, o);
        if (sub) ringlet_comm_destroy(sub);
    }
}

/* The highest descriptor this process has open, or -1. */
static int highest_fd(void) {
    DIR *d = opendir("/proc/self/fd");
    if (!d) return -1;
    int top = -1;
    for (struct dirent *e; (e = readdir(d));) {
        int fd = atoi(e->d_name);
        if (fd > top && fd != dirfd(d)) top = fd;
    }
    closedir(d);
    return top;
}

static void emfile(ringlet_comm_t comm, int parked) {
    enum { N = 100 };
    unsigned char buf[N + GUARD], token = 0;
    for (size_t i = 0; i < N; i++) buf[i] = byte_at(0, 0, 2, i);
    memset(buf + N, 0xA5, GUARD);
    if (g_rank == 2) {
        /* parked: only once rank 1 said (second token) that its receive waits, parked */
        ringlet_result_t rc = RINGLET_SUCCESS;
        for (int k = 0; k < 2 && parked && !rc; k++) rc = ringlet_recv(&token, 1, RINGLET_UINT8, 1, comm, NULL);
        CHECK(rc == RINGLET_SUCCESS, "the tokens from rank 1: %s", rc ? ringlet_comm_last_error(comm) : "ok");
        rc = ringlet_send(buf, N, RINGLET_UINT8, 1, comm, NULL);
        CHECK(rc == RINGLET_SUCCESS, "send to rank 1: %s", rc ? ringlet_comm_last_error(comm) : "ok");
    }
    if (g_rank == 1) {
        ringlet_request_t rq = NULL;
        ringlet_result_t rc = RINGLET_SUCCESS;
        memset(buf, 0, N);
        if (parked) {
            /* The receive first, with descriptors to spare: it parks (rank 2 has not
             * connected). A blocking send behind it, over the ring's connection 1 -> 2 (no
             * descriptor needed), ends only once the receive was handled, so parked. */
            rc = ringlet_irecv(buf, N, RINGLET_UINT8, 2, comm, NULL, &rq);
            if (!rc) rc = ringlet_send(&token, 1, RINGLET_UINT8, 2, comm, NULL);
            CHECK(!rc, "the parked receive and the first token: %s", ringlet_comm_last_error(comm));
            if (rc) return;
        }
        struct rlimit old, cut;
        int top = highest_fd();
        CHECK(top >= 0 && getrlimit(RLIMIT_NOFILE, &old) == 0, "could not read /proc/self/fd or the file limit");
        if (top < 0) return;
        cut = old;
        cut.rlim_cur = (rlim_t)top + 1;
        CHECK(setrlimit(RLIMIT_NOFILE, &cut) == 0, "could not lower the file limit to %d", top + 1);
        /* Descriptors are taken lowest first: fill the free numbers below the limit too. */
        static int holes[4096];
        int nholes = 0;
        while (nholes < 4096 && (holes[nholes] = open("/dev/null", O_RDONLY)) >= 0) nholes++;
        if (parked) rc = ringlet_send(&token, 1, RINGLET_UINT8, 2, comm, NULL); /* rank 2 may connect now */
        else rc = ringlet_irecv(buf, N, RINGLET_UINT8, 2, comm, NULL, &rq);
        if (!rc) rc = ringlet_wait(&rq);
        while (nholes > 0) close(holes[--nholes]);
        setrlimit(RLIMIT_NOFILE, &old);
        const char *m = ringlet_comm_last_error(comm);
        CHECK(rc == RINGLET_ERR_SYSTEM && strstr(m, "accept: Too many open files") && strstr(m, "rank 2"),
              "receive from rank 2 with no descriptor left: %s: %s", ringlet_strerror(rc), rc ? m : "succeeded");
        printf("tcp_inline: rank 1: no descriptor left%s: %s\n", parked ? " (the receive parked)" : "", m);
        /* Nothing was lost: rank 2's connection waits in the listener's backlog. */
        rc = ringlet_recv(buf, N, RINGLET_UINT8, 2, comm, NULL);
        CHECK(rc == RINGLET_SUCCESS, "receive from rank 2 again: %s", rc ? ringlet_comm_last_error(comm) : "ok");
        if (!rc) check_recv(buf, N, 0, 0, 2, "after the descriptors came back");
    }
    int32_t x = 1000 + g_rank, sum = 0;
    ringlet_result_t rc = ringlet_allreduce(&x, &sum, 1, RINGLET_INT32, RINGLET_SUM, comm, NULL);
    CHECK(rc == RINGLET_SUCCESS && sum == 3003, "all-reduce after rank 1's failed receive: %s, sum %d (want 3003)",
          rc ? ringlet_comm_last_error(comm) : "ok", (int)sum);
}

/* --emfile 3 (3 ranks, several sockets per peer): rank 2 leaves itself two free
 * descriptors and sends to rank 1, which it has no connection to yet: its connect makes
 * two sockets, sends their hellos, and fails at the third (RINGLET_ERR_SYSTEM, saying so).
 * With its descriptors back, a second send must reach rank 1 whole: rank 1 must drop the
 * two dead sockets of the failed attempt (it took them with the new ones as the
 * connection, read their end, and the communicator failed: "connection closed by peer"). */
static void emfile_connect(ringlet_comm_t comm) {
    enum { N = 100 };
    unsigned char buf[N + GUARD];
    for (size_t i = 0; i < N; i++) buf[i] = byte_at(0, 0, 2, i);
    memset(buf + N, 0xA5, GUARD);
    if (g_rank == 2) {
        struct rlimit old, cut;
        int top = highest_fd();
        CHECK(top >= 0 && getrlimit(RLIMIT_NOFILE, &old) == 0, "could not read /proc/self/fd or the file limit");
        if (top < 0) return;
        cut = old;
        cut.rlim_cur = (rlim_t)top + 3;
        CHECK(setrlimit(RLIMIT_NOFILE, &cut) == 0, "could not lower the file limit to %d", top + 3);
        static int holes[4096];
        int nholes = 0;
        while (nholes < 4096 && (holes[nholes] = open("/dev/null", O_RDONLY)) >= 0) nholes++;
        for (int k = 0; k < 2 && nholes > 0; k++) close(holes[--nholes]); /* two free, the highest */
        ringlet_result_t rc = ringlet_send(buf, N, RINGLET_UINT8, 1, comm, NULL);
        while (nholes > 0) close(holes[--nholes]);
        setrlimit(RLIMIT_NOFILE, &old);
        const char *m = ringlet_comm_last_error(comm);
        CHECK(rc == RINGLET_ERR_SYSTEM && strstr(m, "Too many open files") && strstr(m, "rank 1"),
              "send to rank 1 with two descriptors left: %s: %s", ringlet_strerror(rc), rc ? m : "succeeded");
        printf("tcp_inline: rank 2: two descriptors left for a connect of 4 sockets: %s\n", m);
        rc = ringlet_send(buf, N, RINGLET_UINT8, 1, comm, NULL);
        CHECK(rc == RINGLET_SUCCESS, "send to rank 1 again: %s", rc ? ringlet_comm_last_error(comm) : "ok");
    }
    if (g_rank == 1) {
        memset(buf, 0, N);
        ringlet_result_t rc = ringlet_recv(buf, N, RINGLET_UINT8, 2, comm, NULL);
        CHECK(rc == RINGLET_SUCCESS, "receive from rank 2, whose first connect failed part-way: %s",
              rc ? ringlet_comm_last_error(comm) : "ok");
        if (!rc) check_recv(buf, N, 0, 0, 2, "after rank 2's second connect");
    }
    int32_t x = 1000 + g_rank, sum = 0;
    ringlet_result_t rc = ringlet_allreduce(&x, &sum, 1, RINGLET_INT32, RINGLET_SUM, comm, NULL);
    CHECK(rc == RINGLET_SUCCESS && sum == 3003, "all-reduce after rank 2's failed connect: %s, sum %d (want 3003)",
          rc ? ringlet_comm_last_error(comm) : "ok", (int)sum);
}

/* RINGLET_TIMEOUT as the ranks read it (300 s unset). */
static double env_timeout(void) {
    const char *te = getenv("RINGLET_TIMEOUT");
    return te ? atof(te) : 300;
}

/* --slow BYTES: rank 0 isends BYTES to rank 1, which irecvs them, over a link slow enough
 * (the script's rate limit) that the transfer takes longer than RINGLET_TIMEOUT while
 * every piece moves well within it: the deadline counts time without progress, so both
 * must succeed. The receive must have taken at least twice RINGLET_TIMEOUT, else the
 * case tested nothing (the rate limit makes it so by construction). */
static void slow_link(ringlet_comm_t comm, size_t n) {
    unsigned char *buf = malloc(n + GUARD);
    if (!buf) {
        CHECK(0, "slow link: out of memory for %zu bytes", n);
        return;
    }
    memset(buf + n, 0xA5, GUARD);
    if (g_rank == 0)
        for (size_t i = 0; i < n; i++) buf[i] = byte_at(-9, 0, 0, i);
    double timeout = env_timeout();
    long long t0 = clock_ms();
    ringlet_request_t req = NULL;
    ringlet_result_t rc = g_rank == 0 ? ringlet_isend(buf, n, RINGLET_UINT8, 1, comm, NULL, &req)
                                      : ringlet_irecv(buf, n, RINGLET_UINT8, 0, comm, NULL, &req);
    if (!rc) rc = ringlet_wait(&req);
    double secs = (double)(clock_ms() - t0) / 1000;
    CHECK(rc == RINGLET_SUCCESS, "slow link: %s of %zu bytes: %s", g_rank ? "irecv" : "isend", n,
          rc ? ringlet_comm_last_error(comm) : "ok");
    if (!rc && g_rank == 1) check_recv(buf, n, -9, 0, 0, "slow link");
    /* The receiver's: the sender's isend may end while socket buffers still hold data. */
    CHECK(rc || g_rank == 0 || secs >= 2 * timeout,
          "slow link: %zu bytes took %.1f s, not 2 x RINGLET_TIMEOUT (%.1f s): the link was not slow, and the case "
          "tested nothing", n, secs, timeout);
    if (!rc) printf("slow link: %zu bytes in %.1f s with RINGLET_TIMEOUT=%.1f\n", n, secs, timeout);
    free(buf);
}

/* --slow-allreduce BYTES: an all-reduce of BYTES of int32 over the same slow link, with
 * the script's RINGLET_ALGO=oneshot: each rank's whole buffer is one message to the other,
 * taking longer than RINGLET_TIMEOUT, and must succeed as the posted send above does
 * (it failed while its bytes were flowing). The sum is checked bit for bit. */
static void slow_allreduce(ringlet_comm_t comm, size_t bytes) {
    size_t n = bytes / 4;
    int32_t *a = malloc(n * 4), *r = malloc(n * 4);
    if (!a || !r) {
        CHECK(0, "slow all-reduce: out of memory for %zu bytes", bytes);
        free(a), free(r);
        return;
    }
    for (size_t i = 0; i < n; i++) a[i] = (int32_t)(byte_at(g_rank, 1, 2, i) * 65537u - (uint32_t)i);
    double timeout = env_timeout();
    long long t0 = clock_ms();
    ringlet_result_t rc = ringlet_allreduce(a, r, n, RINGLET_INT32, RINGLET_SUM, comm, NULL);
    double secs = (double)(clock_ms() - t0) / 1000;
    CHECK(rc == RINGLET_SUCCESS, "slow all-reduce of %zu bytes: %s", bytes, rc ? ringlet_comm_last_error(comm) : "ok");
    size_t bad = n;
    for (size_t i = 0; !rc && i < n && bad == n; i++) {
        uint32_t want = 0; /* unsigned: no overflow to fear */
        for (int q = 0; q < 2; q++) want += byte_at(q, 1, 2, i) * 65537u - (uint32_t)i;
        if ((uint32_t)r[i] != want) bad = i;
    }
    CHECK(rc || bad == n, "slow all-reduce: element %zu is %d, want another sum", bad, bad < n ? r[bad] : 0);
    CHECK(rc || secs >= 2 * timeout,
          "slow all-reduce: %zu bytes took %.1f s, not 2 x RINGLET_TIMEOUT (%.1f s): the link was not slow, and the "
          "case tested nothing", bytes, secs, timeout);
    if (!rc) printf("slow all-reduce: %zu bytes in %.1f s with RINGLET_TIMEOUT=%.1f\n", bytes, secs, timeout);
    free(a), free(r);
}

int main(int argc, char **argv) {
    int rounds = 40, two = 0, emf = 0, first = 0;
    size_t slow = 0, slow_ar = 0;
    const char *mm = "none";
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--rounds")) rounds = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--seed")) g_seed = strtoull(argv[i + 1], NULL, 0);
        else if (!strcmp(argv[i], "--mismatch")) mm = argv[i + 1];
        else if (!strcmp(argv[i], "--two-comms")) two = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--emfile")) emf = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--first-exchange")) first = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--slow")) slow = (size_t)strtoull(argv[i + 1], NULL, 10);
        else if (!strcmp(argv[i], "--slow-allreduce")) slow_ar = (size_t)strtoull(argv[i + 1], NULL, 10);
        else
            return fprintf(stderr, "usage: tcp_inline [--rounds N] [--seed S] [--mismatch none|small|large|striped|pieces|order] "
                                   "[--two-comms 0|1|BYTES] [--emfile 0|1|2|3] [--first-exchange 0|1|2|3|4] [--slow BYTES] "
                                   "[--slow-allreduce BYTES]\n"),
                   2;
    }
    g_realtime_back = first == 4;
    ringlet_comm_t comm;
    if (ringlet_comm_init_env(&comm)) {
        printf("FAIL: %s\n", ringlet_comm_last_error(NULL));
        return 1;
    }
    ringlet_comm_rank(comm, &g_rank);
    ringlet_comm_size(comm, &g_P);
    if (slow && g_P == 2) slow_link(comm, slow);
    else if (slow_ar && g_P == 2) slow_allreduce(comm, slow_ar);
    else if (two && g_P == 2) two_comms(comm, two > 1 ? (size_t)two : 65536);
    if (emf == 3 && g_P == 3) emfile_connect(comm);
    else if (emf && g_P == 3) emfile(comm, emf == 2);
    else if (first == 2 && g_P == 4) never_connects(comm);
    else if (first == 3 && g_P == 4) accept_chain(comm);
    else if (first == 4 && g_P == 4) idle_poll(comm);
    else if (first) first_exchange(comm);
    else if (g_P >= 2)
        for (int k = 0; k < rounds; k++) round_run(comm, k);
    if (g_P == 2 && !strcmp(mm, "small")) mismatch(&comm, 100, 200, 100, 200, -1);
    else if (g_P == 2 && !strcmp(mm, "large")) mismatch(&comm, 300000, 200000, 300000, 200000, -1);
    else if (g_P == 2 && !strcmp(mm, "striped")) mismatch(&comm, 4000, 400000, 4000, 400000, -1);
    else if (g_P == 2 && !strcmp(mm, "order")) mismatch_order(comm);
    /* 2 MiB sent, 1 MiB received: the first pieces match, the receive's last (empty) one
     * meets the send's second full one (it ended well before, and left that piece to the
     * next receive from rank 0) */
    else if (g_P == 2 && !strcmp(mm, "pieces")) mismatch(&comm, 2 << 20, 1 << 20, 1 << 20, 0, -1);
    if (comm) ringlet_comm_destroy(comm);
    printf("tcp_inline: rank %d of %d: %ld checks, %ld failed\n", g_rank, g_P, g_checks, g_failed);
    return g_failed ? 1 : 0;
}
