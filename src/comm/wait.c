#include "wait.h"

#include <limits.h>
#include <sched.h>
#include <time.h>

#include "conn.h"
#include "doorbell.h"
#include "util.h"

int rl_comm_poll_moved(void *c) { return (rl_comm_progress(c) & (RL_PROGRESS_MOVED | RL_PROGRESS_BUSY)) != 0; }

/* What a wait also looks at, besides the transports: ready (may be NULL) says whether
 * what it waits for is there, read in place (the board). */
typedef struct {
    struct ringlet_comm *c;
    int (*ready)(void *);
    void *arg;
} wait_for;

static int poll_for(void *arg) {
    wait_for *w = arg;
    if (!w->ready) return rl_comm_poll_moved(w->c);
    rl_comm_progress(w->c); /* this rank's posted messages still move (wait_polled says why) */
    return w->ready(w->arg);
}

enum { RL_NAP_WAITS = 1024 };

static _Thread_local unsigned long t_yields;

unsigned long rl_wait_yields(void) { return t_yields; }

static _Thread_local unsigned long t_sleeps;

/* This thread runs an operation for its caller, who waits for it (rl_comm_set_inline). */
static _Thread_local int t_inline;

unsigned long rl_wait_sleeps(void) { return t_sleeps; }

/* For a waiter whose peer shares its core: yields to it and returns 1, or returns 0 when
 * this wait should sleep instead. */
static int yield_to_peer(struct ringlet_comm *c) {
    if (atomic_load_explicit(&c->naps, memory_order_relaxed) > 0) {
        atomic_fetch_sub_explicit(&c->naps, 1, memory_order_relaxed);
        return 0;
    }
    double t = rl_now();
    sched_yield();
    t_yields++;
    if (rl_now() - t <= c->spin_s) return 1;
    atomic_store_explicit(&c->naps, RL_NAP_WAITS, memory_order_relaxed);
    return 0;
}

/* pause: polls in a pause loop before the waiter starts yielding its core between polls
 * (UINT_MAX: never); the whole poll lasts at most spin_s either way. */
static void poll_then_sleep(struct ringlet_comm *c, unsigned gen, int ms, unsigned pause, int (*ready)(void *),
                            void *arg) {
    rl_conn_poll_parked_due(c);
    rl_bell *b = atomic_load(&c->ev);
    int polled = atomic_load_explicit(&c->polled, memory_order_relaxed);
    if (polled || ready) {
        /* A peer process answers within microseconds; sleeping and being woken costs
         * more than that, so poll for a while first. Only a threadless transport, or one
         * that says polling moves something now (RL_PROGRESS_POLL), is worth it: the
         * others ring the bell. A TCP poll is a system call itself: no pause rounds then.
         * The clock is read every 64 rounds, from the 64th (most replies come sooner). */
        int always = (polled & RL_POLLED_ALWAYS) || ready;
        /* Where each rank of this host has a core of its own (ringlet-run --bind cores), a
         * yield can only give this core to another job's thread, for its time slice (a CPU
         * hog beside two bound ranks: 2 ms a 4 KiB all-reduce over TCP, 10-30 us without
         * the yields): such a waiter never yields; it polls for alone_spin_s (comm.c says
         * why) where it runs a call for its caller, then sleeps, unless a transport's
         * threads have work too (they run on this core: they get it after spin_s). The
         * progress thread polls spin_s only: the caller's thread may be computing on that
         * core meanwhile (DDP's backward pass beside its buckets' all-reduces). */
        if (!always) pause = 0;
        int never_yield = !always && c->bound_alone;
        double spin_s = never_yield && t_inline ? c->alone_spin_s : c->spin_s;
        /* A peer that last waited on this thread's core cannot answer while this thread
         * spins there (two ranks and a CPU hog on two cores: each wait spun its whole
         * spin_s, 60 us a call): yield at every round then, which hands the core to that
         * peer (2.7 us a call). A yield that kept this thread off the core for longer than
         * spin_s gave the core to a third process (a hog on the same core: 700 us a call):
         * then such waits sleep at once, this one and the next RL_NAP_WAITS (10 us a call). */
        int spin_only = pause == UINT_MAX;
        int shared = spin_only && rl_doorbell_core_shared(c);
        double start = 0;
        int busy = 0;
        for (unsigned n = 0;; n++) {
            if (ready && ready(arg)) return;
            /* Waiting on the board, this rank's posted messages must still move: a peer
             * may wait for one (an isend, then a collective here; a blocking receive of
             * it there) before it marks the board. Their progress is not this wait's. */
            int p = rl_comm_progress(c);
            if (ready) p = 0;
            if ((p & RL_PROGRESS_MOVED) || atomic_load(&b->gen) != gen) return;
            busy |= p & RL_PROGRESS_BUSY;
            if (p & RL_PROGRESS_THREADED) spin_s = c->spin_s;
            if (!always && !(p & (RL_PROGRESS_POLL | RL_PROGRESS_BUSY))) break;
            if (shared) {
                if (!yield_to_peer(c)) break;
            } else if (n < pause || never_yield) {
                rl_cpu_relax();
            } else {
                sched_yield();
                t_yields++;
            }
            if ((n & 63) == 63) {
                double now = rl_now();
                if (start == 0) start = now;
                else if (now > start + spin_s) break;
                if (spin_only && rl_doorbell_core_shared(c)) shared = 1;
            }
        }
        if (busy) {
            /* A transport's device copies finish without a word from anyone: look again
             * soon rather than sleep on the bell. */
            struct timespec ts = {0, 20 * 1000};
            nanosleep(&ts, NULL);
            return;
        }
        t_sleeps++;
        rl_comm_park(c); /* before sleeping: the threads take over what only polling moves */
    }
    wait_for w = {c, ready, arg};
    rl_bell_wait(b, gen, ms, poll_for, &w);
}

/* Counted while in it (npolling) when posted messages are watched: the progress thread
 * leaves them to a waiter then (progress.c's watch_posted). Only then: two atomic
 * read-modify-writes a wait cost an 8-byte all-reduce a few percent; a wait that began
 * before the watch was armed is not counted, and the progress thread may poll beside it,
 * which is safe. */
static void wait_polled(struct ringlet_comm *c, unsigned gen, int ms, unsigned pause, int (*ready)(void *), void *arg) {
    int counted = atomic_load_explicit(&c->posted_watch, memory_order_relaxed);
    if (counted) atomic_fetch_add(&c->npolling, 1);
    poll_then_sleep(c, gen, ms, pause, ready, arg);
    if (counted) atomic_fetch_sub(&c->npolling, 1);
}

void rl_comm_wait_event(struct ringlet_comm *c, unsigned gen, int ms) { wait_polled(c, gen, ms, c->spin_pause, NULL, NULL); }

void rl_comm_set_inline(int on) { t_inline = on; }

void rl_comm_wait_peer_for(struct ringlet_comm *c, unsigned gen, int ms, int (*ready)(void *), void *arg) {
    /* On the progress thread the caller's own threads may want the core; a transport's
     * own threads (TCP, IB) may need it to move what this waits for. */
    int alone = t_inline && !atomic_load_explicit(&c->threaded, memory_order_relaxed);
    wait_polled(c, gen, ms, alone ? c->peer_pause : c->spin_pause, ready, arg);
}

void rl_comm_wait_peer(struct ringlet_comm *c, unsigned gen, int ms) { rl_comm_wait_peer_for(c, gen, ms, NULL, NULL); }

void rl_comm_wait_treq(struct ringlet_comm *c, rl_treq *t) {
    for (;;) {
        unsigned gen = rl_comm_gen(c); /* before the look: a completion after it moves gen */
        if (rl_treq_done(t)) return;
        rl_comm_wait_event(c, gen, 10);
    }
}
