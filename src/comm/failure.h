/* Errors and the failed state of a communicator.
 *
 * Argument errors are local: rl_error records a message for ringlet_comm_last_error and
 * returns the code (a sticky CUDA error, which leaves the rank unable to take part, fails
 * the communicator too: rl_comm_fail_lost). A failure (a peer died, a link broke, a deadline passed, abort) is
 * the communicator's: the first one wins, every wait gives up, and every later call
 * returns its code with its message. */
#ifndef RINGLET_FAILURE_H
#define RINGLET_FAILURE_H

#include "comm.h"

/* Records an error message for ringlet_comm_last_error (comm may be NULL) and
 * returns code. */
ringlet_result_t rl_error(struct ringlet_comm *c, ringlet_result_t code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* RINGLET_ERR_INVALID_USAGE, saying so, when this process is a child forked after c was
 * made (c's threads and connections are the parent's: a call would wait for them until
 * its deadline, a destroy join threads that are not there); else RINGLET_SUCCESS. */
ringlet_result_t rl_comm_forked(struct ringlet_comm *c, const char *fn);
/* Fails the communicator (first failure wins): every wait on it gives up and every
 * later call returns code. */
void rl_comm_fail(struct ringlet_comm *c, ringlet_result_t code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* The same for a failure this rank learned of from the monitor (another rank's death,
 * silence, or own failure): not repeated to the other ranks as this rank's own. */
void rl_comm_fail_remote(struct ringlet_comm *c, ringlet_result_t code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* As rl_comm_fail, but not logged: the caller returns the error (an init that failed
 * here, whose peers must hear why). */
void rl_comm_fail_quiet(struct ringlet_comm *c, ringlet_result_t code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* The same for a failure after which this rank can take part no more (a sticky CUDA error:
 * its device context is unusable): the monitor has every other rank fail at once, quoting
 * it, where the others would wait for this rank's part until RINGLET_TIMEOUT. */
void rl_comm_fail_lost(struct ringlet_comm *c, ringlet_result_t code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Whether the communicator failed for a reason of this rank's own (not rl_comm_fail_remote);
 * then its message in msg, and in *lost whether it came through rl_comm_fail_lost. */
int rl_comm_own_failure(struct ringlet_comm *c, char *msg, size_t len, int *lost);
/* The failure that broke the communicator: its code, and (msg not NULL) its message. */
ringlet_result_t rl_comm_failure(struct ringlet_comm *c, char *msg, size_t len);
/* A connection broke or stalled: give the monitor a moment to name the real cause (a
 * peer's death reaches every rank through rank 0 within milliseconds, a silent peer's
 * after RINGLET_TIMEOUT; the broken link may only be a neighbour that aborted because of
 * it, the stalled one a neighbour waiting for the silent peer), then fail with what is
 * known. */
void rl_comm_fail_link(struct ringlet_comm *c, ringlet_result_t code, const char *what);
/* Its first part alone: waits (1 s at most, RINGLET_TIMEOUT where less) until c has
 * failed or been aborted, so that the monitor's cause is known; fails nothing itself.
 * _for: as long as s seconds (a failure that is certain to come). */
void rl_comm_await_cause(struct ringlet_comm *c);
void rl_comm_await_cause_for(struct ringlet_comm *c, double s);
/* An operation failed with code (what: the local view): fails the communicator if it
 * has not failed yet (a broken link or a timeout first gives the monitor a moment to
 * name the real cause), and writes "<op> #seq (count n) failed: <the communicator's
 * cause>" to err (RL_MSG_MAX). Returns the communicator's failure code. */
ringlet_result_t rl_comm_op_failed(struct ringlet_comm *c, const struct ringlet_request *r, ringlet_result_t code,
                                   const char *what, char *err);

#endif
