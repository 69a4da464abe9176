/* A rank dies in the middle of a large collective; the survivors must get an error
 * that names the dead rank and the operation, within the deadline, and abort and
 * destroy must return. Run by kill.sh under ringlet-run with RINGLET_TIMEOUT=5.
 *
 *   kill --victim V --coll allreduce|allgather|broadcast [--mib M] [--delay-ms D] [--root R] [--tag X]
 *
 * Every rank starts the non-blocking collective on M MiB of float32 (default 256:
 * allreduce in place on M MiB; allgather into an M MiB recvbuf; broadcast of M MiB
 * from --root, default 0). The victim checks after D ms (default 300) that
 * ringlet_test still says "not done", then sends itself SIGKILL. Each survivor times
 * ringlet_wait from the start of the collective and wants: an error code
 * (RINGLET_ERR_REMOTE or RINGLET_ERR_TIMEOUT), a message (ringlet_comm_last_error)
 * containing "rank V" and the collective's name, and less than 10 s. It prints
 *   survivor R: OK error in X s: <message>
 * (or "survivor R: FAIL ..."), then calls ringlet_comm_abort (must return) and
 * ringlet_comm_destroy, and exits 0 when OK. --victim -1: nobody dies, every rank
 * prints how long the collective took (to choose sizes). --tag is ignored (kill.sh puts a marker
 * there to find leftover processes).
 */
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

#include "ringlet.h"

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void sleep_until(double t) {
    for (;;) {
        double left = t - now_s();
        if (left <= 0) return;
        struct timespec ts = {(time_t)left, (long)((left - (double)(time_t)left) * 1e9)};
        nanosleep(&ts, NULL);
    }
}

int main(int argc, char **argv) {
    int victim = 2, root = 0;
    long mib = 256, delay_ms = 300;
    const char *coll = "allreduce";
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--victim") == 0 && i + 1 < argc)
            victim = atoi(argv[++i]);
        else if (strcmp(argv[i], "--coll") == 0 && i + 1 < argc)
            coll = argv[++i];
        else if (strcmp(argv[i], "--mib") == 0 && i + 1 < argc)
            mib = atol(argv[++i]);
        else if (strcmp(argv[i], "--delay-ms") == 0 && i + 1 < argc)
            delay_ms = atol(argv[++i]);
        else if (strcmp(argv[i], "--root") == 0 && i + 1 < argc)
            root = atoi(argv[++i]);
        else if (strcmp(argv[i], "--tag") == 0 && i + 1 < argc)
            i++;
        else {
            fprintf(stderr, "usage: kill --victim V --coll allreduce|allgather|broadcast [--mib M] [--delay-ms D] "
                            "[--root R]\n");
            return 2;
        }
    }
    if (strcmp(coll, "allreduce") != 0 && strcmp(coll, "allgather") != 0 && strcmp(coll, "broadcast") != 0) {
        fprintf(stderr, "kill: unknown collective %s\n", coll);
        return 2;
    }
    setvbuf(stdout, NULL, _IOLBF, 0);

    ringlet_comm_t comm = NULL;
    ringlet_result_t rc = ringlet_comm_init_env(&comm);
    if (rc != RINGLET_SUCCESS) {
        printf("FAIL: ringlet_comm_init_env returned %d: %s\n", (int)rc, ringlet_comm_last_error(NULL));
        return 1;
    }
    int me = -1, P = 0;
    ringlet_comm_rank(comm, &me);
    ringlet_comm_size(comm, &P);
    if (victim < -1 || victim >= P || root < 0 || root >= P) {
        printf("FAIL: victim %d or root %d out of range for %d ranks\n", victim, root, P);
        return 1;
    }

    const size_t bytes = (size_t)mib << 20, n = bytes / sizeof(float);
    float *buf = malloc(bytes);
    if (!buf) {
        printf("FAIL rank %d: cannot allocate %ld MiB\n", me, mib);
        return 1;
    }
    for (size_t i = 0; i < n; i++) buf[i] = (float)(i % 1024) * 0.5f + (float)me;

    /* every connection up before the clock starts */
    rc = ringlet_barrier(comm, NULL);
    if (rc != RINGLET_SUCCESS) {
        printf("FAIL rank %d: warm-up barrier returned %d: %s\n", me, (int)rc, ringlet_comm_last_error(comm));
        return 1;
    }

    ringlet_request_t req = NULL;
    const double t0 = now_s();
    if (strcmp(coll, "allreduce") == 0) {
        rc = ringlet_iallreduce(buf, buf, n, RINGLET_FLOAT32, RINGLET_SUM, comm, NULL, &req);
    } else if (strcmp(coll, "allgather") == 0) {
        const size_t per = n / (size_t)P;
        rc = ringlet_iallgather(buf + (size_t)me * per, buf, per, RINGLET_FLOAT32, comm, NULL, &req);
    } else {
        rc = ringlet_ibroadcast(buf, buf, n, RINGLET_FLOAT32, root, comm, NULL, &req);
    }
    if (rc != RINGLET_SUCCESS) {
        printf("FAIL rank %d: starting the %s returned %d: %s\n", me, coll, (int)rc, ringlet_comm_last_error(comm));
        return 1;
    }

    if (me == victim) {
        sleep_until(t0 + (double)delay_ms * 1e-3);
        int done = -1;
        rc = ringlet_test(&req, &done);
        if (done != 0 || rc != RINGLET_SUCCESS) {
            printf("FAIL victim %d: the %s was no longer running after %ld ms (done %d, result %d): the test "
                   "proves nothing; use a larger --mib\n",
                   me, coll, delay_ms, done, (int)rc);
            fflush(stdout);
            _exit(3);
        }
        printf("victim %d: %s still running after %.0f ms, SIGKILL\n", me, coll, (now_s() - t0) * 1e3);
        fflush(stdout);
        kill(getpid(), SIGKILL);
        for (;;) pause();
    }

    rc = ringlet_wait(&req);
    const double dt = now_s() - t0;
    if (victim < 0) { /* --victim -1: nobody dies; measures how long the collective takes */
        printf("rank %d: %s of %ld MiB returned %d in %.3f s\n", me, coll, mib, (int)rc, dt);
        ringlet_comm_destroy(comm);
        free(buf);
        return rc == RINGLET_SUCCESS ? 0 : 1;
    }
    const char *msg = ringlet_comm_last_error(comm);
    char want_rank[32];
    snprintf(want_rank, sizeof want_rank, "rank %d", victim);
    int ok = 1;
    char why[256] = "";
    if (rc == RINGLET_SUCCESS) {
        ok = 0;
        snprintf(why, sizeof why, "the %s succeeded although rank %d died", coll, victim);
    } else if (rc != RINGLET_ERR_REMOTE && rc != RINGLET_ERR_TIMEOUT) {
        ok = 0;
        snprintf(why, sizeof why, "result %d (%s), want RINGLET_ERR_REMOTE or RINGLET_ERR_TIMEOUT", (int)rc,
                 ringlet_strerror(rc));
    } else if (!msg || !strstr(msg, want_rank) || !strstr(msg, coll)) {
        ok = 0;
        snprintf(why, sizeof why, "message does not name '%s' and '%s'", want_rank, coll);
    } else if (dt >= 10.0) {
        ok = 0;
        snprintf(why, sizeof why, "took %.2f s, want < 10 s", dt);
    }
    if (req != NULL) {
        ok = 0;
        snprintf(why, sizeof why, "ringlet_wait left *request non-NULL");
    }
    ringlet_result_t async = ringlet_comm_get_async_error(comm);
    if (ok && async == RINGLET_SUCCESS) {
        ok = 0;
        snprintf(why, sizeof why, "ringlet_comm_get_async_error is still success after the failure");
    }
    if (ok)
        printf("survivor %d: OK error in %.2f s: %s\n", me, dt, msg);
    else
        printf("survivor %d: FAIL after %.2f s: %s; code %d (%s), message: %s\n", me, dt, why, (int)rc,
               ringlet_strerror(rc), msg ? msg : "(NULL)");

    double ta = now_s();
    ringlet_result_t arc = ringlet_comm_abort(comm);
    double tb = now_s();
    ringlet_result_t drc = ringlet_comm_destroy(comm);
    double tc = now_s();
    printf("survivor %d: abort returned %d in %.2f s, destroy returned %d in %.2f s\n", me, (int)arc, tb - ta,
           (int)drc, tc - tb);
    free(buf);
    return ok ? 0 : 1;
}
