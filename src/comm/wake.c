/* Waking waiters and handing work to the transports: what connections (conn.c), failures
 * and waits (wait.c) all need, kept apart so that none of them calls back into another
 * through it. Declared in wait.h. */
#include "wait.h"

void rl_comm_notify(void *arg) {
    struct ringlet_comm *c = arg;
    rl_bell_ring(atomic_load(&c->ev));
}

unsigned rl_comm_gen(struct ringlet_comm *c) { return atomic_load(&atomic_load(&c->ev)->gen); }

int rl_comm_progress(struct ringlet_comm *c) {
    int polled = atomic_load_explicit(&c->polled, memory_order_relaxed);
    if (!polled) return 0;
    int moved = 0;
    for (int i = 0; i < RL_TP_MAX; i++)
        if ((polled & RL_POLLED_TP(i)) && c->tctx[i]) moved |= rl_transports[i]->progress(c->tctx[i]);
    return moved;
}

void rl_comm_park(struct ringlet_comm *c) {
    int polled = atomic_load_explicit(&c->polled, memory_order_relaxed);
    if (!(polled & RL_POLLED_ON_DEMAND)) return;
    for (int i = 0; i < RL_TP_MAX; i++)
        if ((polled & RL_POLLED_TP(i)) && c->tctx[i] && rl_transports[i]->park) rl_transports[i]->park(c->tctx[i]);
}

void rl_comm_watch_posted(struct ringlet_comm *c) {
    if (!(atomic_load_explicit(&c->polled, memory_order_relaxed) & RL_POLLED_ALWAYS)) return;
    if (atomic_exchange(&c->posted_watch, 1)) return; /* armed already */
    pthread_mutex_lock(&c->q_mu);
    pthread_cond_signal(&c->q_cv);
    pthread_mutex_unlock(&c->q_mu);
}
