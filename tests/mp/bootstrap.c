/* Bootstrap paths: init from a unique id handed over through a file, init from the
 * environment, and the error a rank gets when init fails.
 *   bootstrap uid FILE   rank 0 makes the id and writes FILE; the others read it
 *   bootstrap env        init from MASTER_ADDR/MASTER_PORT/RANK/WORLD_SIZE
 *   bootstrap expect-fail TEXT   init must fail and its message must contain TEXT (and its
 *                                code be EXPECT_CODE, a ringlet_result_t, when that is set)
 * After a successful init every rank checks an int64 all-reduce of random data. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ringlet.h"

static int env_int(const char *n) {
    const char *s = getenv(n);
    return s ? atoi(s) : -1;
}

static uint64_t mix(uint64_t x) {
    x ^= x >> 33, x *= 0xff51afd7ed558ccdULL, x ^= x >> 33, x *= 0xc4ceb9fe1a85ec53ULL;
    return x ^ (x >> 33);
}

static int check_allreduce(ringlet_comm_t c, int rank, int P) {
    enum { N = 4099 };
    static int64_t in[N], out[N];
    for (int i = 0; i < N; i++) in[i] = (int64_t)mix((uint64_t)rank * 1000003u + (uint64_t)i);
    ringlet_result_t rc = ringlet_allreduce(in, out, N, RINGLET_INT64, RINGLET_SUM, c, NULL);
    if (rc) {
        printf("allreduce failed: %s\n", ringlet_comm_last_error(c));
        return 1;
    }
    for (int i = 0; i < N; i++) {
        uint64_t want = 0;
        for (int r = 0; r < P; r++) want += mix((uint64_t)r * 1000003u + (uint64_t)i);
        if ((uint64_t)out[i] != want) {
            printf("allreduce wrong at %d\n", i);
            return 1;
        }
    }
    return 0;
}

int main(int argc, char **argv) {
    int rank = env_int("RANK"), P = env_int("WORLD_SIZE");
    if (argc < 2 || rank < 0 || P < 1) {
        fprintf(stderr, "usage: bootstrap uid FILE | env | expect-fail TEXT (with RANK, WORLD_SIZE set)\n");
        return 2;
    }
    ringlet_comm_t c = NULL;
    ringlet_result_t rc;
    if (!strcmp(argv[1], "uid") && argc > 2) {
        ringlet_unique_id_t id;
        if (rank == 0) {
            if ((rc = ringlet_get_unique_id(&id))) {
                printf("get_unique_id: %s\n", ringlet_comm_last_error(NULL));
                return 1;
            }
            char tmp[4096];
            snprintf(tmp, sizeof tmp, "%s.tmp", argv[2]);
            FILE *f = fopen(tmp, "wb");
            if (!f || fwrite(&id, sizeof id, 1, f) != 1 || fclose(f) != 0 || rename(tmp, argv[2]) != 0) {
                perror("writing the id");
                return 1;
            }
        } else {
            FILE *f = NULL;
            for (int i = 0; i < 300 && !(f = fopen(argv[2], "rb")); i++) usleep(100000);
            if (!f || fread(&id, sizeof id, 1, f) != 1) {
                printf("no unique id in %s\n", argv[2]);
                return 1;
            }
            fclose(f);
        }
        rc = ringlet_comm_init_rank(&c, P, id, rank);
    } else {
        rc = ringlet_comm_init_env(&c);
    }
    if (!strcmp(argv[1], "expect-fail")) {
        const char *msg = ringlet_comm_last_error(NULL);
        if (rc == RINGLET_SUCCESS) {
            printf("rank %d: init succeeded but should have failed\n", rank);
            ringlet_comm_destroy(c);
            return 1;
        }
        int ok = argc > 2 && strstr(msg, argv[2]) != NULL;
        int code_ok = !getenv("EXPECT_CODE") || (int)rc == atoi(getenv("EXPECT_CODE"));
        printf("rank %d: init failed as expected (%s): %s%s%s\n", rank, ringlet_strerror(rc), msg,
               ok ? "" : " [message lacks the expected text]", code_ok ? "" : " [not the expected code]");
        ok = ok && code_ok;
        return ok ? 0 : 1;
    }
    if (rc) {
        printf("rank %d: init failed: %s\n", rank, ringlet_comm_last_error(NULL));
        return 1;
    }
    int bad = check_allreduce(c, rank, P);
    ringlet_comm_destroy(c);
    printf("rank %d: %s\n", rank, bad ? "FAILED" : "ok");
    return bad;
}
