/* The calling thread's group (ringlet_group_start .. end, api.c), set aside while a call
 * of the library's own runs collectives of its own at once: ringlet_comm_split inside a
 * group exchanges colors and ids over its communicator, which a group would record
 * instead of running. */
#ifndef RINGLET_GROUP_ASIDE_H
#define RINGLET_GROUP_ASIDE_H

/* Leaves the thread outside any group; returns the depth to restore. */
int rl_group_set_aside(void);
void rl_group_restore(int depth);
/* A communicator destroyed inside this thread's open group: its recorded calls are
 * dropped (they hold it) and the group is spoiled (its end runs none of the rest and
 * says why). Returns how many were dropped. Another thread's group cannot be seen. */
struct ringlet_comm;
int rl_group_forget(struct ringlet_comm *c);

#endif
