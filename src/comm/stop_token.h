/* ringlet internal: the stop token of ringlet_comm_init_rank_stoppable (include/ringlet.h). */
#ifndef RINGLET_STOP_TOKEN_H
#define RINGLET_STOP_TOKEN_H

#include <stdatomic.h>

#include "ringlet.h"

/* A new token, not fired (NULL: out of memory); ringlet_stop_token_create (api/) says why
 * it fails. */
ringlet_stop_token_t rl_stop_token_new(void);

/* Lets the token's fire reach stop, a communicator's stop flag, while its init runs
 * (NULL: no longer); returns 1 if the token was fired. A NULL token: returns 0. */
int rl_stop_token_attach(ringlet_stop_token_t token, atomic_int *stop);

#endif
