/* Fault injection for tests: kill or stop this rank at a point inside an operation
 * chosen by construction, not by timing.
 *
 *   RINGLET_FAULT_KILL=<seq>:send:<n>   SIGKILL just before operation #seq posts its
 *   RINGLET_FAULT_KILL=<seq>:recv:<n>   n-th send (receive), counting from 0
 *   RINGLET_FAULT_STOP=...              the same syntax, SIGSTOP instead: the whole
 *                                       process stops there (a hung peer, or the moment
 *                                       a test cuts its link); after SIGCONT the
 *                                       operation goes on
 *
 * Operation numbers are the communicator's sequence numbers (1 for the first call,
 * as in error messages). Every communicator of the process reads the variable and numbers
 * its own operations from 1 (a split's too). The count of messages is the operation's:
 * one count for sends and one for receives across every exchange it makes (each step of
 * halving or doubling, each phase of hier; with RINGLET_CHECK, its fingerprint exchange
 * first), so the point is reached once: a test sets it for a process with one
 * communicator, without RINGLET_CHECK. With send:1, only the rank's first message of that
 * operation can have left it, so every peer that needs more of its data provably still
 * needs it when it dies. The rank logs a WARN line ("fault injection: ...") first. */
#ifndef RINGLET_FAULT_H
#define RINGLET_FAULT_H

#include <stddef.h>
#include <stdint.h>

enum { RL_FAULT_NONE = 0, RL_FAULT_SEND = 1, RL_FAULT_RECV = 2 };

typedef struct rl_fault {
    int dir;      /* RL_FAULT_*; NONE: no fault asked for */
    uint64_t seq;
    size_t n;
    int sig;      /* SIGKILL or SIGSTOP */
    size_t seen;  /* messages of dir that operation seq posted so far (its runs are the
                   * communicator's one runner's: no two at once) */
} rl_fault;
/* "<seq>:send:<n>" or "<seq>:recv:<n>" (decimal digits only, at most 18; seq >= 1) into
 * f's dir, seq and n: 0, or -1 when s is not that. */
int rl_fault_parse(const char *s, rl_fault *f);

/* Reads RINGLET_FAULT_KILL (or else RINGLET_FAULT_STOP); a malformed value is a warning
 * and no fault. */
void rl_fault_from_env(rl_fault *f);
/* Called before posting message f->n (dir) of operation seq (name for the log line):
 * logs, then SIGKILL (never returns) or SIGSTOP (returns once continued). */
void rl_fault_kill_point(const rl_fault *f, int rank, const char *name, uint64_t seq, int dir);
/* Before posting a message (dir) of operation seq, in any exchange of it: counts it, and
 * at the armed one stops there. Cheap enough for every message: nothing unless a fault
 * is armed for seq. */
static inline void rl_fault_point(rl_fault *f, int rank, const char *name, uint64_t seq, int dir) {
    if (f->dir == dir && f->seq == seq && f->seen++ == f->n) rl_fault_kill_point(f, rank, name, seq, dir);
}

#endif
