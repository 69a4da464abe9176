/* Descriptors a forked child closes at once (pthread_atfork), so that it does not hold the
 * parent's end of a connection whose closing tells the peers the parent is gone: the
 * monitor's connections (monitor.c). A child that keeps them (a worker pool forked without
 * exec) would leave the peers to notice a killed parent only by its silence, after
 * RINGLET_TIMEOUT, instead of within milliseconds. Never more than RL_FORK_CLOSE_MAX at
 * once; past that a descriptor is not listed (the child keeps it, as before). */
#ifndef RINGLET_FORK_CLOSE_H
#define RINGLET_FORK_CLOSE_H

#define RL_FORK_CLOSE_MAX 4096

/* Lists fd. */
void rl_fork_close_add(int fd);
/* Unlists fd: call it before closing fd (its number may then be reused by anyone). */
void rl_fork_close_remove(int fd);

#endif
