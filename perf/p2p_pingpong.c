/* p2p_pingpong.c - ringlet's blocking send and receive between ranks 0 and 1: a ping-pong,
 * for perf/p2p_compare.sh (beside perf/mpi_pingpong.c, the same loop over MPI).
 *
 * Run: ringlet-run -n 2 [--bind cores] p2p_pingpong [target_s=0.3] size...
 * Per size: 20 untimed round trips, 2 timed for an estimate (rank 0's, sent to rank 1),
 * iters = clamp(target_s / est, 10, 100000) round trips timed; one-way time = half a round
 * trip. Rank 0 sends bytes of one pattern, rank 1 another, and each checks every byte it
 * received after the timed loop (a wrong byte: exit 2). Output (rank 0), one line a size:
 *   bytes one_way_us GBps iters */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ringlet.h"

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static int round_trips(ringlet_comm_t c, int rank, char *out, char *in, size_t n, long k) {
    for (long i = 0; i < k; i++) {
        ringlet_result_t a, b;
        if (rank == 0) a = ringlet_send(out, n, RINGLET_UINT8, 1, c, NULL), b = ringlet_recv(in, n, RINGLET_UINT8, 1, c, NULL);
        else b = ringlet_recv(in, n, RINGLET_UINT8, 0, c, NULL), a = ringlet_send(out, n, RINGLET_UINT8, 0, c, NULL);
        if (a || b) {
            fprintf(stderr, "p2p_pingpong: rank %d: %s\n", rank, ringlet_strerror(a ? a : b));
            return 1;
        }
    }
    return 0;
}

int main(int argc, char **argv) {
    double target = argc > 1 ? atof(argv[1]) : 0.3;
    ringlet_comm_t c;
    if (ringlet_comm_init_env(&c)) return fprintf(stderr, "p2p_pingpong: init failed\n"), 1;
    int rank = 0, size = 0;
    ringlet_comm_rank(c, &rank);
    ringlet_comm_size(c, &size);
    if (size != 2) return fprintf(stderr, "p2p_pingpong: needs 2 ranks, not %d\n", size), 1;
    int rc = 0;
    for (int a = 2; a < argc && !rc; a++) {
        size_t n = strtoull(argv[a], NULL, 0);
        char *out = malloc(n ? n : 1), *in = malloc(n ? n : 1);
        if (!out || !in) return fprintf(stderr, "p2p_pingpong: out of memory\n"), 1;
        for (size_t i = 0; i < n; i++) out[i] = (char)(rank * 101 + i * 7);
        if ((rc = round_trips(c, rank, out, in, n, 20))) break;
        double t0 = now_s();
        if ((rc = round_trips(c, rank, out, in, n, 2))) break;
        double est = (now_s() - t0) / 2;
        long iters = (long)(target / (est > 1e-9 ? est : 1e-9));
        iters = iters < 10 ? 10 : iters > 100000 ? 100000 : iters;
        /* Rank 1 takes rank 0's count: 8 bytes in the way the data goes. */
        if (rank == 0) rc = ringlet_send(&iters, sizeof iters, RINGLET_UINT8, 1, c, NULL);
        else rc = ringlet_recv(&iters, sizeof iters, RINGLET_UINT8, 0, c, NULL);
        if (rc) break;
        t0 = now_s();
        if ((rc = round_trips(c, rank, out, in, n, iters))) break;
        double t = (now_s() - t0) / (double)iters / 2;
        for (size_t i = 0; i < n; i++)
            if (in[i] != (char)((1 - rank) * 101 + i * 7)) {
                fprintf(stderr, "p2p_pingpong: rank %d: byte %zu of %zu wrong\n", rank, i, n);
                rc = 2;
                break;
            }
        if (rank == 0 && !rc) printf("%12zu %12.2f %10.3f %8ld\n", n, t * 1e6, (double)n / t / 1e9, iters), fflush(stdout);
        free(out);
        free(in);
    }
    ringlet_comm_destroy(c);
    return rc;
}
