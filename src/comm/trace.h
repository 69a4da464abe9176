/* RINGLET_TRACE=file.json: a Chrome-trace (Perfetto "JSON trace event" format) timeline
 * of every collective and of every chunk's send, receive and reduce on this rank.
 *
 * Events are kept in memory and written when the communicator is destroyed (or
 * aborted). Each rank writes its own file: a "%r" in the name is replaced by the rank;
 * without one, rank r of a job with more than one rank writes "<name>.rank<r>.json"
 * (".json" moved to the end); a split communicator adds its own tag
 * (rl_trace_name_comm). perf/trace_merge.py joins the ranks' files into one
 * timeline (pid = rank), which lines up because every rank uses CLOCK_MONOTONIC.
 *
 * Lanes (tid): 0 the operation, 1 sends, 2 receives, 3 reductions. All functions are
 * thread-safe and do nothing on a NULL trace; rl_trace_close must not run concurrently
 * with an rl_trace_span on the same trace. A communicator writes its trace once its calls
 * have left (teardown, at abort or destroy) and frees it only when it is freed itself:
 * a call that outlives the abort's grace may still record, into a trace already written.
 *
 * "ts" and "dur" are written in microseconds (3 decimals); otherData holds rank, nranks,
 * version, host and the wall-clock offset (for perf/trace_merge.py --align realtime).
 * RINGLET_TRACE_MAX (default 1000000) caps the spans kept per rank; later ones are
 * counted and reported (otherData.dropped, an instant event, a warning). A file that
 * cannot be written gives one warning (RL_WARN) and no file; it never stops the job.
 */
#ifndef RINGLET_TRACE_H
#define RINGLET_TRACE_H

/* The most RINGLET_TRACE_MAX may be: ~6 GB of records, far past any sensible trace. */
#define RL_TRACE_MAX_LIMIT 100000000LL

#include <stddef.h>
#include <stdint.h>

enum { RL_LANE_OP = 0, RL_LANE_SEND = 1, RL_LANE_RECV = 2, RL_LANE_REDUCE = 3 };

typedef struct rl_trace rl_trace;

/* NULL when RINGLET_TRACE is unset or empty (tracing off). */
rl_trace *rl_trace_open(int rank, int nranks);
/* A split communicator's trace, after its bootstrap: tag is the same on every rank of the
 * communicator and (all but surely) differs between communicators. It writes
 * "<name>.comm<tag>.rank<r>.json" (a "%r" becomes "<r>.comm<tag>"), not its parent's names
 * (its rank 0 wrote over its parent's rank 0). */
void rl_trace_name_comm(rl_trace *t, uint32_t tag);
/* One complete event ("ph":"X") from t0 to t1 (seconds of rl_now(), the monotonic clock).
 * op: the collective's name; seq: its sequence number; chunk: the chunk index, or -1 for
 * the whole operation; bytes: payload; peer: the other rank, or -1. name and op are
 * copied (NULL name: "?"; NULL op: no "op" argument); chunk/peer of -1 are left out of
 * the args. t1 < t0 gives a duration of 0; a t0 that is not finite is ignored. */
void rl_trace_span(rl_trace *t, int lane, const char *name, double t0, double t1, const char *op, uint64_t seq,
                   long long chunk, size_t bytes, int peer);
/* Writes the file, once: spans recorded later are not kept. */
void rl_trace_write(rl_trace *t);
/* Writes the file (unless written) and frees the trace. */
void rl_trace_close(rl_trace *t);

#endif
