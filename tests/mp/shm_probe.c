/* A rank for tests/mp/shm_stale.sh: init from ringlet-run's environment, then
 *   --hold DIR   write DIR/ready.<rank>, wait for DIR/go (120 s at most), then all-reduce
 *   (none)       all-reduce at once
 * the all-reduce: 1 MiB of int32 over the shared-memory transport (RINGLET_TRANSPORT=shm
 * set by the script), checked exactly; prints "shm_probe: rank R: OK" or a FAIL line. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ringlet.h"

int main(int argc, char **argv) {
    const char *dir = argc > 2 && !strcmp(argv[1], "--hold") ? argv[2] : NULL;
    ringlet_comm_t c;
    if (ringlet_comm_init_env(&c)) return printf("FAIL: %s\n", ringlet_comm_last_error(NULL)), 1;
    int rank, size;
    ringlet_comm_rank(c, &rank);
    ringlet_comm_size(c, &size);
    if (dir) {
        char path[512];
        snprintf(path, sizeof path, "%s/ready.%d", dir, rank);
        FILE *f = fopen(path, "w");
        if (f) fclose(f);
        snprintf(path, sizeof path, "%s/go", dir);
        for (int i = 0; access(path, F_OK) != 0; i++) {
            if (i > 120 * 100) return printf("FAIL rank %d: no %s after 120 s\n", rank, path), 1;
            struct timespec ts = {0, 10 * 1000 * 1000};
            nanosleep(&ts, NULL);
        }
    }
    size_t n = 1 << 18;
    int32_t *x = malloc(n * sizeof *x);
    for (size_t i = 0; i < n; i++) x[i] = (int32_t)((i * 2654435761u) % 1000) * (rank + 1);
    ringlet_result_t rc = ringlet_allreduce(x, x, n, RINGLET_INT32, RINGLET_SUM, c, NULL);
    size_t bad = 0;
    for (size_t i = 0; i < n && !rc; i++) bad += x[i] != (int32_t)((i * 2654435761u) % 1000) * (size * (size + 1) / 2);
    if (rc || bad) printf("FAIL rank %d: allreduce: %s, %zu wrong\n", rank, rc ? ringlet_comm_last_error(c) : "ok", bad);
    else printf("shm_probe: rank %d: OK\n", rank);
    free(x);
    ringlet_comm_destroy(c);
    return rc || bad;
}
