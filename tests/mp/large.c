/* Counts beyond 2^31 elements: an in-place int8 sum all-reduce of 2^31 + 5 elements on
 * every rank (about 2 GiB each), every element checked. Values depend on the index so a
 * chunk in the wrong place shows. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "ringlet.h"

int main(void) {
    ringlet_comm_t c;
    if (ringlet_comm_init_env(&c)) {
        printf("init: %s\n", ringlet_comm_last_error(NULL));
        return 1;
    }
    int rank, P;
    ringlet_comm_rank(c, &rank);
    ringlet_comm_size(c, &P);
    size_t n = ((size_t)1 << 31) + 5;
    int8_t *x = malloc(n);
    if (!x) {
        printf("SKIP: no memory for %zu bytes\n", n);
        return 77;
    }
    for (size_t i = 0; i < n; i++) x[i] = (int8_t)((i * 2654435761u >> 7) + (size_t)rank);
    ringlet_result_t rc = ringlet_allreduce(x, x, n, RINGLET_INT8, RINGLET_SUM, c, NULL);
    if (rc) {
        printf("allreduce: %s\n", ringlet_comm_last_error(c));
        return 1;
    }
    size_t bad = 0, first = 0;
    for (size_t i = 0; i < n; i++) {
        uint8_t want = 0;
        for (int r = 0; r < P; r++) want = (uint8_t)(want + (uint8_t)((i * 2654435761u >> 7) + (size_t)r));
        if ((uint8_t)x[i] != want && !bad++) first = i;
    }
    printf("rank %d: %zu elements, %zu wrong%s", rank, n, bad, bad ? "" : "\n");
    if (bad) printf(" (first at %zu)\n", first);
    ringlet_comm_destroy(c);
    free(x);
    return bad != 0;
}
