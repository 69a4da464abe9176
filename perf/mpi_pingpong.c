/* mpi_pingpong.c - MPI_Send / MPI_Recv between ranks 0 and 1: perf/p2p_pingpong.c's loop over
 * MPI, for perf/p2p_compare.sh. Same sizes, counts, check and output:
 *   mpirun -np 2 mpi_pingpong [target_s=0.3] size...
 *   bytes one_way_us GBps iters */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

static void round_trips(int rank, char *out, char *in, int n, long k) {
    for (long i = 0; i < k; i++) {
        if (rank == 0) {
            MPI_Send(out, n, MPI_BYTE, 1, 0, MPI_COMM_WORLD);
            MPI_Recv(in, n, MPI_BYTE, 1, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        } else {
            MPI_Recv(in, n, MPI_BYTE, 0, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            MPI_Send(out, n, MPI_BYTE, 0, 0, MPI_COMM_WORLD);
        }
    }
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (size != 2) {
        if (rank == 0) fprintf(stderr, "mpi_pingpong: needs 2 ranks, not %d\n", size);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    double target = argc > 1 ? atof(argv[1]) : 0.3;
    int rc = 0;
    for (int a = 2; a < argc && !rc; a++) {
        int n = atoi(argv[a]);
        char *out = malloc(n ? (size_t)n : 1), *in = malloc(n ? (size_t)n : 1);
        for (int i = 0; i < n; i++) out[i] = (char)(rank * 101 + i * 7);
        round_trips(rank, out, in, n, 20);
        double t0 = MPI_Wtime();
        round_trips(rank, out, in, n, 2);
        double est = (MPI_Wtime() - t0) / 2;
        long iters = (long)(target / (est > 1e-9 ? est : 1e-9));
        iters = iters < 10 ? 10 : iters > 100000 ? 100000 : iters;
        MPI_Bcast(&iters, 1, MPI_LONG, 0, MPI_COMM_WORLD);
        t0 = MPI_Wtime();
        round_trips(rank, out, in, n, iters);
        double t = (MPI_Wtime() - t0) / (double)iters / 2;
        for (int i = 0; i < n; i++)
            if (in[i] != (char)((1 - rank) * 101 + i * 7)) {
                fprintf(stderr, "mpi_pingpong: rank %d: byte %d of %d wrong\n", rank, i, n);
                rc = 2;
                break;
            }
        if (rank == 0 && !rc) printf("%12d %12.2f %10.3f %8ld\n", n, t * 1e6, (double)n / t / 1e9, iters), fflush(stdout);
        free(out);
        free(in);
    }
    MPI_Finalize();
    return rc;
}
