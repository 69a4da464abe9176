/* mpi_latency.c - MPI_Allreduce(float32, MPI_SUM) of small sizes, for perf/compare's
 * latency rows (the peer driver in ../shared/peers starts at 4 KiB).
 *
 * Build: mpicc -O2 -o mpi_latency perf/mpi_latency.c
 * Run:   mpirun -np N [mca options] mpi_latency [target_s=0.2] [bytes,bytes,...=8]
 *
 * Per size, as ../shared/peers/mpi_allreduce_bench.c does it: 1 untimed call, 2 timed
 * calls for an estimate (max over ranks), iters = clamp(target_s / est, 10, 1000000);
 * barrier; timed loop; time = max over ranks / iters. Out-of-place. Then one checked
 * call: rank r sends r + (i % 7), every element must be n(n-1)/2 + n(i % 7).
 * Output (rank 0), the driver's columns: bytes time_us algbw_GBps busbw_GBps iters check
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, n;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    double target = argc > 1 ? atof(argv[1]) : 0.2;
    if (target <= 0) target = 0.2;
    const char *list = argc > 2 ? argv[2] : "8";

    if (rank == 0) {
        printf("# mpi_latency ranks=%d target_s=%.2f float32 sum out-of-place\n", n, target);
        printf("%12s %12s %12s %12s %8s %6s\n", "bytes", "time_us", "algbw_GBps", "busbw_GBps", "iters", "check");
    }
    int allok = 1;
    for (const char *p = list; *p;) {
        char *end;
        size_t bytes = strtoull(p, &end, 10);
        p = *end ? end + 1 : end;
        int cnt = (int)(bytes / sizeof(float));
        if (cnt < 1) continue;
        float *sb = malloc((size_t)cnt * sizeof *sb), *rb = malloc((size_t)cnt * sizeof *rb);
        if (!sb || !rb) MPI_Abort(MPI_COMM_WORLD, 1);
        for (int i = 0; i < cnt; i++) sb[i] = (float)(rank + i % 7);

        MPI_Allreduce(sb, rb, cnt, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        MPI_Barrier(MPI_COMM_WORLD);
        double t0 = MPI_Wtime();
        for (int w = 0; w < 2; w++) MPI_Allreduce(sb, rb, cnt, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        double est = (MPI_Wtime() - t0) / 2;
        MPI_Allreduce(MPI_IN_PLACE, &est, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
        long iters = (long)(target / (est > 1e-9 ? est : 1e-9));
        if (iters < 10) iters = 10;
        if (iters > 1000000) iters = 1000000;
        MPI_Bcast(&iters, 1, MPI_LONG, 0, MPI_COMM_WORLD);

        MPI_Barrier(MPI_COMM_WORLD);
        t0 = MPI_Wtime();
        for (long it = 0; it < iters; it++) MPI_Allreduce(sb, rb, cnt, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        double el = MPI_Wtime() - t0;
        MPI_Allreduce(MPI_IN_PLACE, &el, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);

        memset(rb, 0xff, (size_t)cnt * sizeof *rb);
        MPI_Allreduce(sb, rb, cnt, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        int ok = 1;
        for (int i = 0; i < cnt; i++)
            if (rb[i] != (float)(n * (n - 1) / 2 + n * (i % 7))) ok = 0;
        MPI_Allreduce(MPI_IN_PLACE, &ok, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
        allok &= ok;

        double t = el / iters, alg = (double)cnt * sizeof(float) / t / 1e9;
        if (rank == 0)
            printf("%12zu %12.2f %12.4f %12.4f %8ld %6s\n", (size_t)cnt * sizeof(float), t * 1e6, alg,
                   alg * 2.0 * (n - 1) / n, iters, ok ? "OK" : "FAIL");
        fflush(stdout);
        free(sb);
        free(rb);
    }
    MPI_Finalize();
    return allok ? 0 : 2;
}
