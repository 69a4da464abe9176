/* Names and sizes of data types, reduction ops and result codes: what every layer that
 * prints or sizes a buffer needs (ringlet_datatype_size and ringlet_strerror are public,
 * in ringlet.h, and defined in names.c). */
#ifndef RINGLET_NAMES_H
#define RINGLET_NAMES_H

#include "ringlet.h"

/* "float32", "sum", ...; "?" for a value out of range. */
const char *rl_dtype_name(ringlet_datatype_t d);
const char *rl_redop_name(ringlet_op_t op);

#endif
