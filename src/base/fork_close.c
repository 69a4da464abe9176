#include "fork_close.h"

#include <pthread.h>
#include <stdatomic.h>
#include <unistd.h>

/* fd + 1 in each used slot, 0 in a free one. Lock-free: the child's handler runs with
 * only the forking thread alive, and a lock another thread held at the fork stays held. */
static atomic_int g_slots[RL_FORK_CLOSE_MAX];
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

static void in_child(void) {
    for (int i = 0; i < RL_FORK_CLOSE_MAX; i++) {
        int v = atomic_exchange_explicit(&g_slots[i], 0, memory_order_relaxed);
        if (v > 0) close(v - 1);
    }
}

static void install(void) { pthread_atfork(NULL, NULL, in_child); }

void rl_fork_close_add(int fd) {
    if (fd < 0) return;
    pthread_once(&g_once, install);
    for (int i = 0; i < RL_FORK_CLOSE_MAX; i++) {
        int free_slot = 0;
        if (atomic_compare_exchange_strong(&g_slots[i], &free_slot, fd + 1)) return;
    }
}

void rl_fork_close_remove(int fd) {
    if (fd < 0) return;
    for (int i = 0; i < RL_FORK_CLOSE_MAX; i++) {
        int mine = fd + 1;
        if (atomic_compare_exchange_strong(&g_slots[i], &mine, 0)) return;
    }
}
