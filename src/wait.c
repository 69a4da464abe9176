#include "wait.h"

#include <sched.h>
#include <time.h>

#include "util.h"

void rl_comm_notify(void *arg) {
    struct ringlet_comm *c = arg;
    rl_bell_ring(atomic_load(&c->ev));
}

unsigned rl_comm_gen(struct ringlet_comm *c) { return atomic_load(&atomic_load(&c->ev)->gen); }

int rl_comm_progress(struct ringlet_comm *c) {
    if (!atomic_load_explicit(&c->polled, memory_order_relaxed)) return 0;
    int moved = 0;
    for (int i = 0; i < RL_TP_MAX; i++)
        if (c->tctx[i] && rl_transports[i]->progress) moved |= rl_transports[i]->progress(c->tctx[i]);
    return moved;
}

/* For rl_bell_wait: anything to do now (moved, or device work to poll) means no sleep. */
static int comm_poll(void *c) { return rl_comm_progress(c) != 0; }

void rl_comm_wait_event(struct ringlet_comm *c, unsigned gen, int ms) {
    rl_bell *b = atomic_load(&c->ev);
    if (atomic_load_explicit(&c->polled, memory_order_relaxed)) {
        /* A peer process answers within microseconds; sleeping and being woken costs
         * more than that, so poll for a while first (yielding: ranks may share cores). */
        double until = 0;
        int busy = 0;
        for (unsigned n = 0;; n++) {
            int p = rl_comm_progress(c);
            if ((p & RL_PROGRESS_MOVED) || atomic_load(&b->gen) != gen) return;
            busy |= p & RL_PROGRESS_BUSY;
            /* The first rounds in a pause loop (a reply often comes within a
             * microsecond, and a yield is a system call), then yield the core; the
             * clock is read only every 64 rounds. */
            if (n < c->spin_pause) {
                rl_cpu_relax();
                continue;
            }
            sched_yield();
            if (n % 64 == 0) {
                double now = rl_now();
                if (until == 0) until = now + c->spin_s;
                else if (now > until) break;
            }
        }
        if (busy) {
            /* A transport's device copies finish without a word from anyone: look again
             * soon rather than sleep on the bell. */
            struct timespec ts = {0, 20 * 1000};
            nanosleep(&ts, NULL);
            return;
        }
    }
    rl_bell_wait(b, gen, ms, comm_poll, c);
}
