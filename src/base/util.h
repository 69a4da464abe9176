/* Small helpers shared by the core: time, environment, deadlines. */
#ifndef RINGLET_UTIL_H
#define RINGLET_UTIL_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

double rl_now(void); /* monotonic seconds */
/* A spin-wait hint to the CPU (x86 pause). */
static inline void rl_cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}
void rl_sleep_ms(int ms);
/* A poll's growing nap: sleeps *us microseconds, then doubles *us, up to 1 ms (short waits
 * are seen soon, long ones cost a wake-up a millisecond). */
void rl_nap_backoff(long *us);
/* Waits on cv (mu held) until signalled or ms milliseconds pass, whichever is first. The
 * time is the monotonic clock's: a step of the wall clock (NTP, settimeofday) neither
 * stretches the wait nor cuts it, as it would with pthread_cond_timedwait's default clock. */
void rl_cond_wait_ms(pthread_cond_t *cv, pthread_mutex_t *mu, long ms);
/* Whether the byte ranges [a, a + alen) and [b, b + blen) share a byte. */
static inline int rl_ranges_overlap(const void *a, size_t alen, const void *b, size_t blen) {
    uintptr_t x = (uintptr_t)a, y = (uintptr_t)b;
    return alen && blen && x < y + blen && y < x + alen;
}
/* Whether the process exited (or was killed): gone, or a zombie not reaped yet (its memory
 * and descriptors are already released). 0 for pid <= 0. */
int rl_process_gone(int pid);
/* This process's PID namespace (the inode of /proc/self/ns/pid), 0 where unknown. */
unsigned long long rl_pid_ns(void);
/* rl_process_gone for a pid another process read in its PID namespace ns (its rl_pid_ns):
 * 0, "not known to be gone", where ns is not this process's namespace, since that pid
 * names another process here or none (two containers sharing /dev/shm and the IPC
 * namespace, not the PID namespace). */
int rl_process_gone_in(int pid, unsigned long long ns);
/* Integer from the environment, def when unset; a value that does not parse or is out
 * of [lo, hi] gives def with a warning. K/M/G suffixes (powers of 1024) accepted. Init
 * refuses such values of every RINGLET_* variable first (src/comm/envcheck.c, with the same
 * bounds), so the warning is only for a value changed after init. */
long long rl_env_int(const char *name, long long def, long long lo, long long hi);
/* A RINGLET_* variable's value (getenv), or where it is unset or empty and NCCL has a
 * variable of the same meaning and values (NCCL_SOCKET_IFNAME for RINGLET_SOCKET_IFNAME,
 * ...: util.c), NCCL's; *from (when not NULL) names the one read. Every reader of those
 * variables reads them through this (rl_env_int, rl_env_double too). */
const char *rl_env_get(const char *name, const char **from);
/* The launcher's local rank of this process (LOCAL_RANK, SLURM_LOCALID,
 * OMPI_COMM_WORLD_LOCAL_RANK or MPI_LOCALRANKID: the first set), -1 when none is (or it is
 * not a number). */
int rl_env_local_rank(void);
double rl_env_double(const char *name, double def, double lo, double hi);
/* The parsers behind them (pure; fuzzed by tests/fuzz/env.c): 0 and *out in [lo, hi],
 * or -1 when s is not an integer (decimal, leading zeros read as decimal, or 0x hex;
 * optional K/M/G suffix; no blanks or '+') or not in [lo, hi]. */
int rl_parse_int(const char *s, long long lo, long long hi, long long *out);
int rl_parse_double(const char *s, double lo, double hi, double *out);
/* The deadline every wait uses: RINGLET_TIMEOUT seconds (default 300). */
double rl_timeout_s(void);
/* How many times this process's line of ancestors forked since the first call (a child
 * of fork() sees one more than its parent did): an object made before a fork notes it, and
 * knows a forked child by the difference. Cheap: no system call. */
unsigned rl_fork_generation(void);

#endif
