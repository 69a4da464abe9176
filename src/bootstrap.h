/* Bootstrap (bootstrap.c): every rank's info to every rank, authenticated, through
 * rank 0; the connections then stay open as a failure monitor. */
#ifndef RINGLET_BOOTSTRAP_H
#define RINGLET_BOOTSTRAP_H

#include "comm.h"

typedef struct rl_boot_target {
    struct sockaddr_storage addr; /* where rank 0 listens */
    uint8_t secret[32];
    int listen_fd;                /* rank 0: the listener already open (unique id), or -1 */
} rl_boot_target;
ringlet_result_t rl_boot_make_id(ringlet_unique_id_t *id, char *err);
ringlet_result_t rl_boot_parse_id(const ringlet_unique_id_t *id, int rank, rl_boot_target *t, char *err);
ringlet_result_t rl_boot_target_from_env(rl_boot_target *t, int *rank, int *nranks, int *local_rank, char *err);
/* Every rank's info to every rank, authenticated; leaves the monitor running. */
ringlet_result_t rl_boot_exchange(struct ringlet_comm *c, rl_boot_target *t, char *err);
/* Clean (destroy: says goodbye, rank 0 waits for the others) or not (abort). */
void rl_monitor_stop(struct ringlet_comm *c, int clean);

#endif
