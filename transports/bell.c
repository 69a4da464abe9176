/* Wake-up counters on futexes. A bell may live in private memory (threads of one
 * process) or in a shared mapping (a peer process rings it), so the futex calls are the
 * shared kind.
 *
 * Invariant that makes a wake-up never lost: the ringer bumps gen (or, for a peer's
 * data, publishes it) then reads sleepers; the sleeper bumps sleepers then re-reads gen
 * (and polls for the data) before sleeping, all sequentially consistent, so at least
 * one of them sees the other. */
#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "transport.h"

void rl_bell_ring(rl_bell *b) {
    atomic_fetch_add(&b->gen, 1);
    if (atomic_load(&b->sleepers)) syscall(SYS_futex, (void *)&b->gen, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
}

/* The ringer published its data before this fence; a sleeper counts itself before it
 * polls. Either the ringer sees the sleeper, or the sleeper's poll sees the data. */
void rl_bell_ring_sleeper(rl_bell *b) {
    atomic_thread_fence(memory_order_seq_cst);
    if (atomic_load(&b->sleepers)) rl_bell_ring(b);
}

void rl_bell_wait(rl_bell *b, unsigned seen, int ms, int (*poll)(void *), void *arg) {
    atomic_fetch_add(&b->sleepers, 1);
    /* the pair of rl_bell_ring_sleeper's: the count before the poll's loads, which are
     * acquire only (not ordered after a store by themselves on every ARM) */
    atomic_thread_fence(memory_order_seq_cst);
    if (atomic_load(&b->gen) == seen && !(poll && poll(arg))) {
        struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
        syscall(SYS_futex, (void *)&b->gen, FUTEX_WAIT, seen, &ts, NULL, 0);
    }
    atomic_fetch_sub(&b->sleepers, 1);
}
