/* Making and unmaking a communicator's parts (comm.c). The layers above run them in
 * this order (src/api/lifecycle.c):
 *   rl_comm_open, [the progress thread started], rl_comm_open_done;
 *   [the progress thread stopped], rl_comm_teardown, [requests freed], rl_comm_free. */
#ifndef RINGLET_COMM_OPEN_H
#define RINGLET_COMM_OPEN_H

#include "bootstrap.h"
#include "comm.h"

/* Settings, bootstrap (with the monitor), transports, ring order, the ring's connections.
 * A refusal before anything is built (a bad setting, no memory, no interface): *out
 * NULL and the error already reported (rl_error). Otherwise *out is the communicator and
 * the result RINGLET_SUCCESS, or an error with its reason in err (RL_MSG_MAX), for
 * rl_comm_open_done to judge. */
ringlet_result_t rl_comm_open(struct ringlet_comm **out, int nranks, int rank, rl_boot_target *t,
                              ringlet_stop_token_t token, double timeout_s, char *err);
/* The end of init: waits for every rank's connections (rl_boot_ready) when rc is
 * RINGLET_SUCCESS, detaches the stop token, and names a peer's failure as the reason
 * when one explains rc. Returns the result; on an error the caller tears c down. */
ringlet_result_t rl_comm_open_done(struct ringlet_comm *c, ringlet_result_t rc, ringlet_stop_token_t token, char *err);
/* A split communicator (made and open): its RINGLET_TRACE file is named after it (trace.h),
 * not after its parent's ranks. */
void rl_comm_trace_split(struct ringlet_comm *c);
/* Stops threads and closes connections; keeps the struct (an aborted handle must still
 * answer calls with an error until it is destroyed). The progress thread is stopped
 * first, by the caller. clean: a goodbye to the peers (destroy), else none (abort). A call
 * of another thread still inside after RL_ABORT_GRACE_S: the connections and transports
 * stay until a later teardown or rl_comm_free finds none inside. */
void rl_comm_teardown(struct ringlet_comm *c, int clean);
/* Frees what is left, once the requests still linked to c are freed and no call is inside. */
void rl_comm_free(struct ringlet_comm *c);

#endif
