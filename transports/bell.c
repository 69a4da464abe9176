/* Wake-up counters on futexes. A bell may live in private memory (threads of one
 * process) or in a shared mapping (a peer process rings it), so the futex calls are the
 * shared kind.
 *
 * Invariant that makes a wake-up never lost: the ringer bumps gen then reads sleepers;
 * the sleeper bumps sleepers then re-reads gen before sleeping (both sequentially
 * consistent), so at least one of them sees the other. */
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

void rl_bell_wait(rl_bell *b, unsigned seen, int ms) {
    atomic_fetch_add(&b->sleepers, 1);
    if (atomic_load(&b->gen) == seen) {
        struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
        syscall(SYS_futex, (void *)&b->gen, FUTEX_WAIT, seen, &ts, NULL, 0);
    }
    atomic_fetch_sub(&b->sleepers, 1);
}
