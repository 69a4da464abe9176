/* Counts beyond 2^31 elements: an in-place int8 sum all-reduce of 2^31 + 5 elements on
 * every rank (about 2 GiB each), every element checked. Values hash the whole index (the
 * top byte of a 64-bit product), so that no stretch of the input repeats and a chunk in
 * the wrong place shows.
 *   large [--memory device]   device: the buffer in device memory (the device layer's
 *                             backend), copied there from pinned memory and back, the
 *                             all-reduce ordered on a stream */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "device.h"
#include "ringlet.h"

/* Element i of rank r's input: the top byte of (i + 1) times a 64-bit odd constant
 * depends on every bit of i (a low byte would repeat every 2^15 elements, far less than
 * a chunk). */
static uint8_t input(size_t i, int r) { return (uint8_t)((((uint64_t)i + 1) * 0x9E3779B97F4A7C15ull >> 56) + (uint64_t)r); }

int main(int argc, char **argv) {
    int device = argc > 2 && !strcmp(argv[1], "--memory") && !strcmp(argv[2], "device");
    const rl_device_ops *D = device ? rl_device() : NULL;
    if (device && !D) {
        printf("SKIP: no device backend: %s\n", rl_device_unavailable());
        return 77;
    }
    ringlet_comm_t c;
    if (ringlet_comm_init_env(&c)) {
        printf("%s\n", ringlet_comm_last_error(NULL));
        return 1;
    }
    int rank, P;
    ringlet_comm_rank(c, &rank);
    ringlet_comm_size(c, &P);
    size_t n = ((size_t)1 << 31) + 5;
    int8_t *x = NULL;
    void *d = NULL;
    rl_dev_stream_t s = NULL;
    if (D) {
        if (D->host_alloc((void **)&x, n) || D->mem_alloc(&d, n) || D->stream_create(&s)) {
            printf("SKIP: no device or pinned memory for %zu bytes: %s\n", n, rl_dev_error());
            return 77;
        }
    } else if (!(x = malloc(n))) {
        printf("SKIP: no memory for %zu bytes\n", n);
        return 77;
    }
    for (size_t i = 0; i < n; i++) x[i] = (int8_t)input(i, rank);
    /* Device: queued on the stream; the all-reduce must wait for it (stream order). */
    if (D && D->memcpy_async(d, x, n, s)) {
        printf("copy to the device: %s\n", rl_dev_error());
        return 1;
    }
    ringlet_result_t rc = D ? ringlet_allreduce(d, d, n, RINGLET_INT8, RINGLET_SUM, c, s) : ringlet_allreduce(x, x, n, RINGLET_INT8, RINGLET_SUM, c, NULL);
    if (rc) {
        printf("allreduce: %s\n", ringlet_comm_last_error(c));
        return 1;
    }
    if (D && (D->memcpy_async(x, d, n, s) || D->stream_sync(s))) {
        printf("copy back: %s\n", rl_dev_error());
        return 1;
    }
    size_t bad = 0, first = 0;
    for (size_t i = 0; i < n; i++) {
        uint8_t want = 0;
        for (int r = 0; r < P; r++) want = (uint8_t)(want + input(i, r));
        if ((uint8_t)x[i] != want && !bad++) first = i;
    }
    printf("rank %d: %zu elements%s, %zu wrong%s", rank, n, D ? " on device memory" : "", bad, bad ? "" : "\n");
    if (bad) printf(" (first at %zu)\n", first);
    ringlet_comm_destroy(c);
    if (D) {
        D->stream_destroy(s);
        D->mem_free(d);
        D->host_free(x);
    } else {
        free(x);
    }
    return bad != 0;
}
