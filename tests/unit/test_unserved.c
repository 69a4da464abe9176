/* Unit test for device memory that no backend serves (src/device/unserved.c): a program
 * whose own CUDA runs while ringlet's backend cannot (here RINGLET_DEVICE=none, and the
 * program's device memory made by the simulated GPU directly, as its own runtime would
 * make it). Every call on such a pointer must fail with RINGLET_ERR_CUDA, naming the
 * buffer and why there is no backend, instead of the host reading it (the simulated
 * memory has no access for the host: a fault, as a GPU's would be). Calls on host memory
 * still work, their results checked. Exit status 0 on success.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "device.h"
#include "ringlet.h"
#include "simgpu.h"

static int failures;

#define CHECK(cond, ...)                                                                                               \
    do {                                                                                                               \
        if (!(cond)) failures++, printf("FAIL " __VA_ARGS__), printf("\n"), fflush(stdout);                            \
    } while (0)

/* The call failed as it must: RINGLET_ERR_CUDA, its message naming what and the reason. */
static void refused(ringlet_result_t rc, const char *msg, const char *call, const char *what) {
    CHECK(rc == RINGLET_ERR_CUDA, "%s: returned %d (%s), want RINGLET_ERR_CUDA", call, (int)rc, ringlet_strerror(rc));
    CHECK(msg && strstr(msg, what) && strstr(msg, "no device backend") && strstr(msg, "RINGLET_DEVICE=none"),
          "%s: the message does not say %s and why: %s", call, what, msg ? msg : "(none)");
}

int main(void) {
    setenv("RINGLET_DEVICE", "none", 1);
    setenv("RINGLET_TRANSPORT", "shm", 1);
    enum { N = 1000 };
    void *dev = NULL;
    if (sim_malloc(&dev, N * sizeof(float)) != 0 || !dev) return printf("FAIL sim_malloc\n"), 1;
    CHECK(!rl_device(), "RINGLET_DEVICE=none, yet a backend runs");

    ringlet_unique_id_t id;
    ringlet_comm_t c;
    if (ringlet_get_unique_id(&id) || ringlet_comm_init_rank(&c, 1, id, 0)) return printf("FAIL init\n"), 1;

    float *in = malloc(N * sizeof *in), *out = malloc(N * sizeof *out);
    if (!in || !out) return 1;
    srand(7);
    for (int i = 0; i < N; i++) in[i] = (float)(rand() % 2001 - 1000) / 8.0f;

    /* host memory still works: one rank's sum is its input, bit for bit */
    ringlet_result_t rc = ringlet_allreduce(in, out, N, RINGLET_FLOAT32, RINGLET_SUM, c, NULL);
    CHECK(!rc && !memcmp(in, out, N * sizeof *in), "all-reduce on host memory: %s", ringlet_strerror(rc));

    rc = ringlet_allreduce(dev, out, N, RINGLET_FLOAT32, RINGLET_SUM, c, NULL);
    refused(rc, ringlet_comm_last_error(c), "all-reduce from device memory", "sendbuf");
    rc = ringlet_allreduce(in, dev, N, RINGLET_FLOAT32, RINGLET_SUM, c, NULL);
    refused(rc, ringlet_comm_last_error(c), "all-reduce into device memory", "recvbuf");
    rc = ringlet_broadcast(dev, dev, N, RINGLET_FLOAT32, 0, c, NULL);
    refused(rc, ringlet_comm_last_error(c), "broadcast in place", "sendbuf");
    ringlet_request_t rq = NULL;
    rc = ringlet_iallreduce(dev, dev, N, RINGLET_FLOAT32, RINGLET_MAX, c, NULL, &rq);
    if (!rc && rq) rc = ringlet_wait(&rq);
    refused(rc, ringlet_comm_last_error(c), "non-blocking all-reduce", "sendbuf");
    rc = ringlet_allgather(dev, out, N, RINGLET_FLOAT32, c, NULL);
    refused(rc, ringlet_comm_last_error(c), "all-gather", "sendbuf");

    rc = ringlet_memcpy_async(out, dev, 64, NULL);
    refused(rc, ringlet_comm_last_error(NULL), "memcpy_async from device memory", "is device memory");
    rc = ringlet_memcpy_async(dev, in, 64, NULL);
    refused(rc, ringlet_comm_last_error(NULL), "memcpy_async to device memory", "is device memory");
    rc = ringlet_memset_async(dev, 0, 64, NULL);
    refused(rc, ringlet_comm_last_error(NULL), "memset_async", "is device memory");
    rc = ringlet_convert_async(dev, RINGLET_FLOAT16, in, RINGLET_FLOAT32, 16, 1.0, NULL);
    refused(rc, ringlet_comm_last_error(NULL), "convert_async", "is device memory");

    /* and host memory after them */
    memset(out, 0, N * sizeof *out);
    rc = ringlet_memcpy_async(out, in, N * sizeof *in, NULL);
    CHECK(!rc && !memcmp(in, out, N * sizeof *in), "memcpy_async on host memory: %s", ringlet_strerror(rc));
    rc = ringlet_allreduce(in, out, N, RINGLET_FLOAT32, RINGLET_MAX, c, NULL);
    CHECK(!rc && !memcmp(in, out, N * sizeof *in), "all-reduce on host memory after the refusals: %s",
          ringlet_strerror(rc));

    ringlet_comm_destroy(c);
    sim_free(dev);
    free(in), free(out);
    if (failures) return printf("test_unserved: %d failed\n", failures), 1;
    printf("test_unserved: passed\n");
    return 0;
}
