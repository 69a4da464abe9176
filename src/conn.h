/* Connections to peers, made on first use, over the transport chosen per pair. */
#ifndef RINGLET_CONN_H
#define RINGLET_CONN_H

#include "comm.h"

/* The transport for the pair (this rank, peer): the forced one, else shared memory on
 * one host, IB between hosts that both have it, TCP otherwise. Both ends compute the
 * same answer from the bootstrap table. */
ringlet_result_t rl_conn_pick_transport(struct ringlet_comm *c, int peer, int *tp, char *err);
/* The send (receive) connection to peer, made now if it does not exist yet (by the
 * progress thread, or by whoever runs an operation). */
ringlet_result_t rl_comm_send_conn(struct ringlet_comm *c, int peer, rl_conn **conn, char *err);
ringlet_result_t rl_comm_recv_conn(struct ringlet_comm *c, int peer, rl_conn **conn, char *err);
/* Closes every connection (teardown). */
void rl_conn_close_all(struct ringlet_comm *c);

#endif
