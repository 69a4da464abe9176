/* Communicators that come and go beside live ones (issue 22): an abort, a destroy or an
 * init of one communicator must leave every other communicator of the process untouched.
 *
 *   churn --cycles N [--slots S] [--memory host|device] [--seed X]
 *       Every rank holds a world communicator (ringlet_comm_init_env) and S slots that
 *       communicators fill and leave. Each cycle draws one action from a schedule that is
 *       the same on every rank (the seed comes from rank 0 over the world):
 *         init     an empty slot: the new communicator's rank 0 makes a unique id and a
 *                  broadcast over the world or over another live slot hands it out; its
 *                  ranks are the world's, rotated by a random shift;
 *         brief    the same, then a destroy at once, with no call in between (a rank whose
 *                  init returned leaves while a slower one may still connect to it);
 *         coll     a collective (all-reduce, broadcast, all-gather, reduce-scatter or
 *                  barrier; count 0 to 20000 int32, so both the one-shot path and the
 *                  ring run) on the world or a live slot, every element checked;
 *         destroy  a live slot, on every rank;
 *         abort    a live slot, after every rank's calls on it have returned (a barrier
 *                  on the world): either every rank aborts it (each after its own random
 *                  delay of up to 2 ms, then going straight on to the next cycle), or one
 *                  rank aborts it and the others wait for their copy to fail, naming that
 *                  rank, then abort or destroy theirs. An aborted handle is destroyed at
 *                  once or some cycles later.
 *       Before about a third of the actions a non-blocking collective starts on another
 *       live communicator (the world or a slot); it is waited for and checked after the
 *       action, so inits, destroys and aborts happen while it runs.
 *       Any failure but the expected one (the aborted communicator's own copies) fails
 *       the test at once, naming the cycle, the action and the message.
 *   churn --scenario N
 *       The loop of issue 22 as a user writes it: rank 0 makes a unique id, a broadcast
 *       over the world hands it out, every rank inits a second communicator and runs one
 *       all-reduce on it (checked), an all-reduce over the world says it succeeded
 *       everywhere, every rank aborts the second communicator, a barrier on the world.
 * Prints "churn: rank R: OK ..." or FAIL lines; exit 0 iff all passed.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ringlet.h"

#define MAX_SLOTS 8
#define MAX_COUNT 20000
#define MAX_ZOMBIES 16

static int g_rank, g_P, g_device;
static int g_cycle;
static const char *g_action = "start";
static ringlet_comm_t g_world;

#define FAIL(...)                                                                                                      \
    do {                                                                                                               \
        printf("FAIL rank %d cycle %d (%s): ", g_rank, g_cycle, g_action);                                             \
        printf(__VA_ARGS__);                                                                                           \
        printf("\n");                                                                                                  \
        fflush(stdout);                                                                                                \
        exit(1);                                                                                                       \
    } while (0)

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* xorshift64*: the schedule (same on every rank) and this rank's own draws. */
static uint64_t next(uint64_t *s) {
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    return *s * 2685821657736338717ull;
}
static int pick(uint64_t *s, int n) { return (int)(next(s) % (uint64_t)n); }

/* A slot: a communicator of every rank, ranks rotated by shift. */
typedef struct {
    ringlet_comm_t c;
    int shift, id; /* id: the how-manieth communicator (for messages) */
} slot_t;
static slot_t g_slot[MAX_SLOTS];
static int g_nslots = 3;
static ringlet_comm_t g_zombie[MAX_ZOMBIES]; /* aborted, not yet destroyed */
static int g_nzombies;

static int my_rank(int shift) { return (g_rank + shift) % g_P; }

/* Element i of comm rank r's contribution to operation tag. */
static int32_t val(uint32_t tag, int r, size_t i) {
    return (int32_t)(((uint32_t)i * 2654435761u + tag * 40503u + (uint32_t)r * 97u) % 1999u) - 999;
}

/* Buffers: host memory, or device memory with a host copy. */
static void *buf_alloc(size_t bytes) {
    void *p = NULL;
    if (bytes == 0) bytes = 4;
    if (g_device) {
        if (ringlet_mem_alloc(&p, bytes)) FAIL("ringlet_mem_alloc: %s", ringlet_comm_last_error(NULL));
    } else if (!(p = malloc(bytes))) {
        FAIL("out of memory");
    }
    return p;
}
static void buf_free(void *p) {
    if (g_device) ringlet_mem_free(p);
    else free(p);
}
static void to_buf(void *dst, const void *host, size_t bytes) {
    if (!bytes) return;
    if (!g_device) return (void)memcpy(dst, host, bytes);
    if (ringlet_memcpy_async(dst, host, bytes, RINGLET_STREAM_DEFAULT) || ringlet_stream_synchronize(RINGLET_STREAM_DEFAULT))
        FAIL("copy to the device: %s", ringlet_comm_last_error(NULL));
}
static void from_buf(void *host, const void *src, size_t bytes) {
    if (!bytes) return;
    if (!g_device) return (void)memcpy(host, src, bytes);
    if (ringlet_memcpy_async(host, src, bytes, RINGLET_STREAM_DEFAULT) || ringlet_stream_synchronize(RINGLET_STREAM_DEFAULT))
        FAIL("copy from the device: %s", ringlet_comm_last_error(NULL));
}

/* One collective, blocking or started (req), and its check. */
enum { K_ALLREDUCE, K_BROADCAST, K_ALLGATHER, K_REDUCE_SCATTER, K_BARRIER, K_NUM };
static const char *const kname[] = {"allreduce", "broadcast", "allgather", "reduce_scatter", "barrier"};
typedef struct {
    ringlet_comm_t c;
    const char *where; /* "world" or "slot N (comm #id)" */
    char where_buf[48];
    int kind, root, shift;
    size_t count;
    uint32_t tag;
    void *send, *recv;
    size_t send_n, recv_n; /* elements */
    ringlet_request_t req;
} coll_t;

static void coll_start(coll_t *o, int blocking) {
    int me = my_rank(o->shift), P = g_P;
    size_t n = o->count;
    o->send_n = o->kind == K_REDUCE_SCATTER ? n * (size_t)P : n;
    o->recv_n = o->kind == K_ALLGATHER ? n * (size_t)P : n;
    int32_t *h = malloc((o->send_n + 1) * sizeof *h);
    if (!h) FAIL("out of memory");
    for (size_t i = 0; i < o->send_n; i++) h[i] = val(o->tag, me, i);
    o->send = buf_alloc(o->send_n * 4);
    o->recv = buf_alloc(o->recv_n * 4);
    to_buf(o->send, h, o->send_n * 4);
    free(h);
    ringlet_request_t *rq = blocking ? NULL : &o->req;
    ringlet_result_t rc;
    switch (o->kind) {
    case K_ALLREDUCE:
        rc = rq ? ringlet_iallreduce(o->send, o->recv, n, RINGLET_INT32, RINGLET_SUM, o->c, NULL, rq)
                : ringlet_allreduce(o->send, o->recv, n, RINGLET_INT32, RINGLET_SUM, o->c, NULL);
        break;
    case K_BROADCAST:
        rc = rq ? ringlet_ibroadcast(o->send, o->recv, n, RINGLET_INT32, o->root, o->c, NULL, rq)
                : ringlet_broadcast(o->send, o->recv, n, RINGLET_INT32, o->root, o->c, NULL);
        break;
    case K_ALLGATHER:
        rc = rq ? ringlet_iallgather(o->send, o->recv, n, RINGLET_INT32, o->c, NULL, rq)
                : ringlet_allgather(o->send, o->recv, n, RINGLET_INT32, o->c, NULL);
        break;
    case K_REDUCE_SCATTER:
        rc = rq ? ringlet_ireduce_scatter(o->send, o->recv, n, RINGLET_INT32, RINGLET_SUM, o->c, NULL, rq)
                : ringlet_reduce_scatter(o->send, o->recv, n, RINGLET_INT32, RINGLET_SUM, o->c, NULL);
        break;
    default:
        rc = rq ? ringlet_ibarrier(o->c, NULL, rq) : ringlet_barrier(o->c, NULL);
        break;
    }
    if (rc)
        FAIL("%s %s(count %zu) on %s: %s: %s", blocking ? "blocking" : "non-blocking", kname[o->kind], n, o->where,
             ringlet_strerror(rc), ringlet_comm_last_error(o->c));
}

static void coll_finish(coll_t *o, int blocking) {
    if (!blocking) {
        ringlet_result_t rc = ringlet_wait(&o->req);
        if (rc)
            FAIL("waiting for %s(count %zu) on %s: %s: %s", kname[o->kind], o->count, o->where, ringlet_strerror(rc),
                 ringlet_comm_last_error(o->c));
    }
    int me = my_rank(o->shift), P = g_P;
    size_t n = o->count;
    int32_t *h = malloc((o->recv_n + 1) * sizeof *h);
    if (!h) FAIL("out of memory");
    from_buf(h, o->recv, o->recv_n * 4);
    size_t bad = 0, first = 0;
    for (size_t i = 0; i < o->recv_n && o->kind != K_BARRIER; i++) {
        int32_t want = 0;
        if (o->kind == K_ALLREDUCE)
            for (int r = 0; r < P; r++) want += val(o->tag, r, i);
        else if (o->kind == K_BROADCAST)
            want = val(o->tag, o->root, i);
        else if (o->kind == K_ALLGATHER)
            want = val(o->tag, (int)(i / n), i % n);
        else
            for (int r = 0; r < P; r++) want += val(o->tag, r, (size_t)me * n + i);
        if (h[i] != want && !bad++) first = i;
    }
    free(h);
    buf_free(o->send);
    buf_free(o->recv);
    if (bad) FAIL("%s(count %zu) on %s: %zu of %zu elements wrong, the first at %zu", kname[o->kind], n, o->where, bad,
                  o->recv_n, first);
}

/* A collective on the world (slot -1) or a slot, drawn from the schedule. */
static void coll_draw(coll_t *o, uint64_t *sched, int slot) {
    memset(o, 0, sizeof *o);
    if (slot < 0) {
        o->c = g_world;
        o->where = "world";
    } else {
        o->c = g_slot[slot].c;
        o->shift = g_slot[slot].shift;
        snprintf(o->where_buf, sizeof o->where_buf, "slot %d (communicator #%d)", slot, g_slot[slot].id);
        o->where = o->where_buf;
    }
    o->kind = pick(sched, K_NUM);
    o->root = pick(sched, g_P);
    int sz = pick(sched, 4);
    o->count = sz == 0 ? (size_t)pick(sched, 3) : sz == 1 ? (size_t)pick(sched, 300) : (size_t)pick(sched, MAX_COUNT);
    o->tag = (uint32_t)next(sched);
}

static void world_barrier(const char *why) {
    ringlet_result_t rc = ringlet_barrier(g_world, NULL);
    if (rc) FAIL("barrier on the world (%s): %s: %s", why, ringlet_strerror(rc), ringlet_comm_last_error(g_world));
}

/* Live slots other than `not`: how many, and the k-th. */
static int live_slot(int not, int k) {
    for (int i = 0; i < g_nslots; i++)
        if (g_slot[i].c && i != not && k-- == 0) return i;
    return -1;
}
static int nlive(int not) {
    int n = 0;
    for (int i = 0; i < g_nslots; i++) n += g_slot[i].c && i != not;
    return n;
}

static void zombie_add(ringlet_comm_t c) {
    if (g_nzombies == MAX_ZOMBIES) {
        ringlet_comm_destroy(g_zombie[0]);
        memmove(g_zombie, g_zombie + 1, sizeof g_zombie[0] * (MAX_ZOMBIES - 1));
        g_nzombies--;
    }
    g_zombie[g_nzombies++] = c;
}

static long st_init, st_brief, st_destroy, st_abort_all, st_abort_one, st_coll, st_overlap;
static int g_comm_ids;

static void do_init(uint64_t *sched, int slot) {
    g_action = "init";
    int shift = pick(sched, g_P);
    /* The carrier of the id: the world or another live slot. */
    int m = nlive(slot), carrier = m && pick(sched, 2) ? live_slot(slot, pick(sched, m)) : -1;
    ringlet_comm_t cc = carrier < 0 ? g_world : g_slot[carrier].c;
    int cshift = carrier < 0 ? 0 : g_slot[carrier].shift;
    /* The new communicator's rank 0 is world rank (P - shift) % P; its rank in the carrier: */
    int maker = (g_P - shift) % g_P, root = (maker + cshift) % g_P;
    ringlet_unique_id_t id;
    memset(&id, 0, sizeof id);
    if (g_rank == maker && ringlet_get_unique_id(&id)) FAIL("get_unique_id: %s", ringlet_comm_last_error(NULL));
    ringlet_result_t rc = ringlet_broadcast(&id, &id, sizeof id, RINGLET_UINT8, root, cc, NULL);
    if (rc)
        FAIL("broadcast of the unique id over %s: %s: %s", carrier < 0 ? "the world" : "a slot", ringlet_strerror(rc),
             ringlet_comm_last_error(cc));
    ringlet_comm_t c;
    rc = ringlet_comm_init_rank(&c, g_P, id, my_rank(shift));
    if (rc) FAIL("init of slot %d: %s: %s", slot, ringlet_strerror(rc), ringlet_comm_last_error(NULL));
    g_slot[slot] = (slot_t){c, shift, ++g_comm_ids};
    st_init++;
}

static void do_abort(uint64_t *sched, uint64_t *mine, int slot) {
    g_action = "abort";
    slot_t s = g_slot[slot];
    g_slot[slot].c = NULL;
    /* Every rank's calls on it have returned (this rank's last message may still be on
     * its way when its own call returns). */
    world_barrier("before an abort");
    int one = pick(sched, 3) == 0, victim = pick(sched, g_P), later = pick(sched, 2);
    if (!one || g_rank == victim) {
        if (!one) {
            int us = pick(mine, 2000);
            if (us > 1000) usleep((useconds_t)(us - 1000));
        }
        ringlet_comm_abort(s.c);
        if (later) zombie_add(s.c);
        else ringlet_comm_destroy(s.c);
        if (one) st_abort_one++;
        else st_abort_all++;
        return;
    }
    /* One rank aborted: this rank's copy fails, naming it (its rank in the slot). */
    double until = now() + 30;
    ringlet_result_t rc;
    while ((rc = ringlet_comm_get_async_error(s.c)) == RINGLET_SUCCESS && now() < until) usleep(200);
    /* A call on a failed communicator returns at once with the failure's message. */
    ringlet_result_t rc2 = rc ? ringlet_barrier(s.c, NULL) : RINGLET_SUCCESS;
    const char *msg = ringlet_comm_last_error(s.c);
    if (rc && rc2 != rc) FAIL("slot %d: its copy failed (%s), but a call on it returned %d", slot, ringlet_strerror(rc), (int)rc2);
    int vrank = (victim + s.shift) % g_P; /* its rank in the slot */
    if (rc == RINGLET_SUCCESS)
        FAIL("slot %d: rank %d (world rank %d) aborted it, but this rank's copy still works after 30 s", slot, vrank,
             victim);
    char want[32];
    snprintf(want, sizeof want, "rank %d failed", vrank);
    if (!strstr(msg, want)) FAIL("slot %d: rank %d aborted it; this rank's copy failed with \"%s\"", slot, vrank, msg);
    if (pick(mine, 2)) ringlet_comm_abort(s.c);
    ringlet_comm_destroy(s.c);
    st_abort_one++;
}

static int churn(int cycles, uint64_t seed) {
    uint64_t sched = seed * 0x9E3779B97F4A7C15ull + 1, mine = sched ^ (uint64_t)(g_rank + 1) * 0xD1B54A32D192ED03ull;
    for (g_cycle = 0; g_cycle < cycles; g_cycle++) {
        /* Maybe a collective under way on another communicator during the action. */
        int empty = -1, nl = nlive(-1);
        for (int i = 0; i < g_nslots && empty < 0; i++)
            if (!g_slot[i].c && pick(&sched, 2)) empty = i;
        int act = pick(&sched, 10), slot;
        /* init 2, brief 1, coll 4, destroy 1, abort 2 of 10; what cannot be done becomes a
         * collective */
        if (act < 2 && empty >= 0) act = 0, slot = empty;
        else if (act == 2 && empty >= 0) act = 4, slot = empty;
        else if (act >= 8 && nl) act = 3, slot = live_slot(-1, pick(&sched, nl));
        else if (act == 7 && nl) act = 2, slot = live_slot(-1, pick(&sched, nl));
        else act = 1, slot = nl && pick(&sched, 3) ? live_slot(-1, pick(&sched, nl)) : -1;
        coll_t bg;
        int overlap = pick(&sched, 3) == 0;
        if (overlap) {
            int m = nlive(slot), other = m && pick(&sched, 2) ? live_slot(slot, pick(&sched, m)) : -1;
            if (act == 1 && slot < 0 && other < 0) overlap = 0; /* the world is the action's own */
            else {
                g_action = "start of a non-blocking collective";
                coll_draw(&bg, &sched, other);
                coll_start(&bg, 0);
                st_overlap++;
            }
        }
        if (act == 0) {
            do_init(&sched, slot);
        } else if (act == 4) {
            /* Init and destroy at once, without a call in between: a rank whose init is done
             * leaves while the others may still be connecting to it. */
            do_init(&sched, slot);
            g_action = "destroy right after init";
            ringlet_result_t rc = ringlet_comm_destroy(g_slot[slot].c);
            g_slot[slot].c = NULL;
            if (rc) FAIL("destroy of slot %d: %s", slot, ringlet_comm_last_error(NULL));
            st_brief++;
        } else if (act == 1) {
            g_action = "collective";
            coll_t o;
            coll_draw(&o, &sched, slot);
            coll_start(&o, 1);
            coll_finish(&o, 1);
            st_coll++;
        } else if (act == 2) {
            g_action = "destroy";
            ringlet_result_t rc = ringlet_comm_destroy(g_slot[slot].c);
            g_slot[slot].c = NULL;
            if (rc) FAIL("destroy of slot %d: %s", slot, ringlet_comm_last_error(NULL));
            st_destroy++;
        } else {
            do_abort(&sched, &mine, slot);
        }
        if (overlap) {
            g_action = "end of a non-blocking collective";
            coll_finish(&bg, 0);
        }
        if (pick(&sched, 4) == 0 && g_nzombies) { /* drawn on every rank: the schedule stays the same */
            ringlet_comm_destroy(g_zombie[0]);
            memmove(g_zombie, g_zombie + 1, sizeof g_zombie[0] * (size_t)(g_nzombies - 1));
            g_nzombies--;
        }
    }
    g_action = "end";
    for (int i = 0; i < g_nslots; i++)
        if (g_slot[i].c && ringlet_comm_destroy(g_slot[i].c)) FAIL("destroy: %s", ringlet_comm_last_error(NULL));
    while (g_nzombies) ringlet_comm_destroy(g_zombie[--g_nzombies]);
    return 0;
}

/* The loop of issue 22, as a user writes it. */
static int scenario(int cycles) {
    for (g_cycle = 0; g_cycle < cycles; g_cycle++) {
        ringlet_unique_id_t id;
        memset(&id, 0, sizeof id);
        g_action = "unique id";
        if (g_rank == 0 && ringlet_get_unique_id(&id)) FAIL("get_unique_id: %s", ringlet_comm_last_error(NULL));
        ringlet_result_t rc = ringlet_broadcast(&id, &id, sizeof id, RINGLET_UINT8, 0, g_world, NULL);
        if (rc) FAIL("broadcast of the id over the world: %s", ringlet_comm_last_error(g_world));
        g_action = "init";
        ringlet_comm_t c;
        if (ringlet_comm_init_rank(&c, g_P, id, g_rank)) FAIL("%s", ringlet_comm_last_error(NULL));
        g_action = "all-reduce on the new communicator";
        coll_t o = {.c = c, .where = "the new communicator", .kind = K_ALLREDUCE, .count = 1024, .tag = (uint32_t)g_cycle};
        coll_start(&o, 1);
        coll_finish(&o, 1);
        g_action = "all-reduce on the world";
        int32_t ok = 1;
        rc = ringlet_allreduce(&ok, &ok, 1, RINGLET_INT32, RINGLET_MIN, g_world, NULL);
        if (rc || ok != 1) FAIL("all-reduce over the world: %s", rc ? ringlet_comm_last_error(g_world) : "a rank failed");
        g_action = "abort";
        ringlet_comm_abort(c);
        ringlet_comm_destroy(c);
        g_action = "barrier on the world";
        world_barrier("after the abort");
    }
    return 0;
}

int main(int argc, char **argv) {
    int cycles = 200, scen = 0;
    const char *memory = "host";
    uint64_t seed = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--cycles") && i + 1 < argc) cycles = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--scenario") && i + 1 < argc) scen = 1, cycles = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--slots") && i + 1 < argc) g_nslots = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--memory") && i + 1 < argc) memory = argv[++i];
        else if (!strcmp(argv[i], "--seed") && i + 1 < argc) seed = strtoull(argv[++i], NULL, 10);
        else return fprintf(stderr, "usage: churn --cycles N [--slots S] [--memory host|device] [--seed X] | --scenario N\n"), 2;
    }
    if (g_nslots < 1 || g_nslots > MAX_SLOTS) return fprintf(stderr, "churn: --slots is 1..%d\n", MAX_SLOTS), 2;
    g_device = !strcmp(memory, "device");
    if (g_device) {
        int n = 0;
        if (ringlet_device_count(&n) || n < 1)
            return printf("FAIL: --memory device, but no device (set RINGLET_DEVICE=sim)\n"), 1;
    }
    double t0 = now();
    if (ringlet_comm_init_env(&g_world)) return printf("FAIL: %s\n", ringlet_comm_last_error(NULL)), 1;
    ringlet_comm_rank(g_world, &g_rank);
    ringlet_comm_size(g_world, &g_P);
    if (!seed) seed = (uint64_t)time(NULL) ^ (uint64_t)getpid() << 16;
    if (ringlet_broadcast(&seed, &seed, 1, RINGLET_UINT64, 0, g_world, NULL))
        return printf("FAIL: broadcast of the seed: %s\n", ringlet_comm_last_error(g_world)), 1;
    if (scen) {
        scenario(cycles);
        printf("churn: rank %d: OK %d cycles of the scenario in %.1f s\n", g_rank, cycles, now() - t0);
    } else {
        if (g_rank == 0) printf("churn: seed %llu\n", (unsigned long long)seed);
        fflush(stdout);
        churn(cycles, seed);
        printf("churn: rank %d: OK %d cycles (%s memory) in %.1f s: %ld inits (%ld destroyed at once), %ld destroys, "
               "%ld aborts by every rank, %ld by one rank, %ld collectives, %ld actions beside a non-blocking "
               "collective\n",
               g_rank, cycles, memory, now() - t0, st_init, st_brief, st_destroy, st_abort_all, st_abort_one, st_coll,
               st_overlap);
    }
    g_action = "destroy of the world";
    if (ringlet_comm_destroy(g_world)) FAIL("destroy of the world: %s", ringlet_comm_last_error(NULL));
    return 0;
}
