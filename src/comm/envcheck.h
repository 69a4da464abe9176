/* Every RINGLET_* variable the library reads, checked at init (envcheck.c).
 *
 * Variables are read in many places, some only when first needed (a transport when it
 * connects, the device layer at its first use, the trace when it opens); each reader
 * takes its default, with a warning, for a value it cannot use. So that no bad value goes
 * by with only a warning, init checks them all first, against the same rules as their
 * readers, and fails naming the variable, its value and what is allowed. An empty value
 * is the same as an unset one. */
#ifndef RINGLET_ENVCHECK_H
#define RINGLET_ENVCHECK_H

#include "ringlet.h"

/* RINGLET_SUCCESS, or RINGLET_ERR_INVALID_ARGUMENT with "RINGLET_X=value: <what is
 * allowed>" in err (RL_MSG_MAX bytes) for the first bad value. */
ringlet_result_t rl_env_check(char *err);

#endif
