/* The failure monitor on the bootstrap's connections (monitor.c), between bootstrap.c,
 * which makes the connections, and monitor.c, which keeps them. rl_monitor_stop and
 * rl_boot_ready, its uses by the communicator, are in bootstrap.h. */
#ifndef RINGLET_MONITOR_H
#define RINGLET_MONITOR_H

#include "comm.h"

struct rl_monitor;

/* A monitor of nfds connections (rank 0: one per rank, its own -1; others: one, to rank
 * 0), all -1 until the exchange fills rl_monitor_fds; NULL when out of memory. */
struct rl_monitor *rl_monitor_new(int is_root, int nfds);
int *rl_monitor_fds(struct rl_monitor *m);
/* Closes its connections and frees it (its thread not started). */
void rl_monitor_close(struct rl_monitor *m);
/* After a good exchange: c->mon = m and its thread running; else m closed, the reason in
 * err (RL_MSG_MAX). */
ringlet_result_t rl_monitor_start(struct ringlet_comm *c, struct rl_monitor *m, char *err);

#endif
