/* Stop tokens: how another thread stops an init that waits for its peers. The token
 * reaches the communicator's own stop flag, which every wait of init already polls (in
 * slices of at most 100 ms), so a fired token ends init as a failure would. */
#include "stop_token.h"

#include <pthread.h>
#include <stdlib.h>

#include "util.h"

struct ringlet_stop_token {
    pthread_mutex_t mu;
    int fired;
    atomic_int *stop; /* the stop flag of the communicator whose init runs, else NULL */
};

ringlet_stop_token_t rl_stop_token_new(void) {
    struct ringlet_stop_token *t = calloc(1, sizeof *t);
    if (t) pthread_mutex_init(&t->mu, NULL);
    return t;
}

void ringlet_stop_token_fire(ringlet_stop_token_t t) {
    if (!t) return;
    pthread_mutex_lock(&t->mu);
    t->fired = 1;
    if (t->stop) atomic_store(t->stop, 1);
    pthread_mutex_unlock(&t->mu);
}

void ringlet_stop_token_destroy(ringlet_stop_token_t t) {
    if (!t) return;
    pthread_mutex_destroy(&t->mu);
    free(t);
}

int rl_stop_token_attach(ringlet_stop_token_t t, atomic_int *stop) {
    if (!t) return 0;
    pthread_mutex_lock(&t->mu);
    t->stop = stop;
    if (stop && t->fired) atomic_store(stop, 1);
    int fired = t->fired;
    pthread_mutex_unlock(&t->mu);
    return fired;
}
