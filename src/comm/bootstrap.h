/* Bootstrap (bootstrap.c): every rank's info to every rank, authenticated, through
 * rank 0; the connections then stay open as a failure monitor. */
#ifndef RINGLET_BOOTSTRAP_H
#define RINGLET_BOOTSTRAP_H

#include "comm.h"

#define RL_BOOT_NADDR 8 /* the most addresses of MASTER_ADDR tried */

typedef struct rl_boot_target {
    /* where rank 0 listens: every address MASTER_ADDR resolves to (the ranks' resolvers may
     * order them differently, and some may not reach rank 0), or the unique id's one */
    struct sockaddr_storage addr[RL_BOOT_NADDR];
    int naddr;
    uint8_t secret[32];
    int listen_fd;                /* rank 0: the listener already open (unique id), or -1 */
} rl_boot_target;
ringlet_result_t rl_boot_make_id(ringlet_unique_id_t *id, char *err);
/* Closes the listener of an id this process made and no init took; 1 if there was one. */
int rl_boot_release_id(const ringlet_unique_id_t *id);
ringlet_result_t rl_boot_parse_id(const ringlet_unique_id_t *id, int rank, rl_boot_target *t, char *err);
ringlet_result_t rl_boot_target_from_env(rl_boot_target *t, int *rank, int *nranks, int *local_rank, char *err);
/* Every rank's info to every rank, authenticated; leaves the monitor running. */
ringlet_result_t rl_boot_exchange(struct ringlet_comm *c, rl_boot_target *t, char *err);
/* The end of init, after this rank's ring connections are made: returns once every
 * rank has got that far (each tells rank 0, which then tells everybody), so that no rank
 * leaves (a destroy, an abort, an exit) while another still connects to it. Fails when a
 * peer fails meanwhile, the communicator's stop flag is set (a stop token), or after
 * RINGLET_TIMEOUT. */
/* (monitor.c) */
ringlet_result_t rl_boot_ready(struct ringlet_comm *c, char *err);
/* (monitor.c) Clean (destroy: says goodbye, rank 0 waits for the others) or not (abort). */
void rl_monitor_stop(struct ringlet_comm *c, int clean);

/* ---- the handshake on the wire (protocol: bootstrap.c's opening comment) ----
 * Here with the checks of what arrives, so that tests/fuzz/ runs the code that
 * rl_boot_exchange runs. */
#define RL_BOOT_MAGIC 0x31424c52u /* "RLB1" */
/* In place of a table head: rank 0 let this connection go for others waiting (it had said
 * nothing yet): the rank connects again. Not authenticated: a forged one costs a retry. */
#define RL_BOOT_BUSY 0x59534252u /* "RBSY" */

typedef struct rl_boot_challenge {
    uint32_t magic;
    uint8_t nonce[16];
} rl_boot_challenge;

typedef struct rl_boot_hello {
    uint32_t magic;
    int32_t rank, nranks;
    uint8_t nonce[16];
    rl_rank_info info;
    uint8_t mac[32];
} rl_boot_hello;

typedef struct rl_boot_table_head {
    uint32_t magic;
    int32_t status; /* 0: the table follows; else an error text of RL_MSG_MAX bytes (status: rank 0's error code) */
    uint8_t mac[32];
} rl_boot_table_head;

void rl_boot_hello_mac(const uint8_t secret[32], const uint8_t nonce0[16], const rl_boot_hello *h, uint8_t out[32]);
void rl_boot_table_mac(const uint8_t secret[32], const uint8_t nonce[16], int32_t status, const void *payload,
                       size_t len, uint8_t out[32]);
/* Rank 0, on a hello answering its challenge nonce0: -1 when it does not authenticate
 * (that connection is closed, the job goes on); 1 when it does but does not fit this
 * job of nranks ranks (fds[r] >= 0: rank r has joined already), fatal, the reason in
 * msg; 0 when it is rank h->rank's genuine hello. */
int rl_boot_check_hello(const uint8_t secret[32], const uint8_t nonce0[16], const rl_boot_hello *h, int nranks,
                        const int *fds, char *msg, size_t msglen);
/* Any other rank: the payload bytes that follow this table head (rank 0's table of
 * nranks infos, or its error text). */
size_t rl_boot_table_len(const rl_boot_table_head *th, int nranks);
/* Then, the payload in: RINGLET_SUCCESS when it authenticates (hello nonce `nonce`)
 * and is the table; else the reason (rank 0's error text, or that the table did not
 * authenticate) in err (RL_MSG_MAX bytes) and RINGLET_ERR_REMOTE, or rank 0's own code
 * where it authenticated and is the job's (RINGLET_ERR_INVALID_USAGE: this rank does not
 * fit the job; RINGLET_ERR_TIMEOUT: some rank never joined). */
ringlet_result_t rl_boot_check_table(const uint8_t secret[32], const uint8_t nonce[16], const rl_boot_table_head *th,
                                     const void *payload, size_t len, char *err);

#endif
