/* Named shared-memory segments of ringlet (/dev/shm/ringlet-<pid>-<kind>-<random>) whose
 * liveness other processes can tell in any PID namespace: the creating process holds an
 * exclusive flock on the segment for as long as it keeps the descriptor open, and the
 * kernel drops the lock when that process dies. A segment nobody holds is a dead job's
 * leftover. (A pid in the name proves nothing across PID namespaces that share
 * /dev/shm.) */
#ifndef RINGLET_BASE_SHMSEG_H
#define RINGLET_BASE_SHMSEG_H

#include <stddef.h>

#define RL_SHMSEG_NAME_MAX 64

/* Creates the segment of `bytes` bytes and locks it: name receives "/ringlet-...", *fd the
 * descriptor that holds the lock (keep it open while the segment lives; close it with
 * rl_shmseg_close after shm_unlink). The descriptor is 10 or above (a program's dup2 onto
 * 0..2 would drop the lock, and another init remove the live segment) and not in a forked
 * child (its copy would hold the lock past this process's death: the segment never
 * removed). Returns 0 or an errno value. */
int rl_shmseg_create(const char *kind, size_t bytes, char name[RL_SHMSEG_NAME_MAX], int *fd);
/* Closes a descriptor rl_shmseg_create returned. */
void rl_shmseg_close(int fd);
/* Unlinks every /dev/shm/ringlet-* segment whose lock nobody holds. */
void rl_shmseg_remove_stale(void);

#endif
