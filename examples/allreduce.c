/* The README's example: an in-place float32 all-reduce on every rank.
   Build: cc -O2 allreduce.c $(pkg-config --cflags --libs ringlet); run: ringlet-run -n 4 ./a.out */
#include <ringlet.h>
#include <stdio.h>
#include <stdlib.h>

int main(void) {
    ringlet_comm_t comm;
    /* From the launcher's variables: MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE
       (torchrun, ringlet-run), SLURM_PROCID/SLURM_NTASKS, OMPI_COMM_WORLD_RANK/SIZE. */
    ringlet_result_t rc = ringlet_comm_init_env(&comm);
    if (rc != RINGLET_SUCCESS) { /* the message says where it failed: "init (rank 1 of 4): ..." */
        fprintf(stderr, "%s: %s\n", ringlet_strerror(rc), ringlet_comm_last_error(NULL));
        return 1;
    }
    int rank, size;
    ringlet_comm_rank(comm, &rank);
    ringlet_comm_size(comm, &size);

    size_t n = 1 << 20;
    float *x = malloc(n * sizeof *x);
    for (size_t i = 0; i < n; i++) x[i] = (float)rank;

    /* In place (sendbuf == recvbuf); the last argument is a CUDA stream, NULL for host memory. */
    rc = ringlet_allreduce(x, x, n, RINGLET_FLOAT32, RINGLET_SUM, comm, NULL);
    if (rc != RINGLET_SUCCESS) {
        fprintf(stderr, "rank %d: %s: %s\n", rank, ringlet_strerror(rc), ringlet_comm_last_error(comm));
        ringlet_comm_abort(comm);
    } else if (rank == 0) {
        printf("x[0] = %g (expected %g)\n", x[0], size * (size - 1) / 2.0);
    }
    /* Non-blocking: ringlet_iallreduce(..., &req); ... ringlet_wait(&req); */
    ringlet_comm_destroy(comm);
    free(x);
    return rc != RINGLET_SUCCESS;
}
