/* A rank dies inside a large collective; the survivors must get an error that names the
 * dead rank and the operation, within the deadline, and abort and destroy must return.
 * Run by kill.sh under ringlet-run with RINGLET_TIMEOUT=5.
 *
 *   kill --victim V --coll allreduce|allgather|broadcast --at send:N|recv:N --sync DIR
 *        [--mib M | --kib K] [--root R] [--memory host|device] [--tag X]
 *
 * Nothing here depends on timing. The victim arms the library's fault injection
 * (RINGLET_FAULT_KILL, src/comm/fault.h) for the collective (operation #2, after a warm-up
 * barrier): it SIGKILLs itself just before posting its N-th send (or receive) of that
 * collective, so it provably dies inside it, and every byte of its data past what it
 * had posted provably never left it. kill.sh picks N so that every survivor still needs
 * such bytes (all-reduce, all-gather, the middle of a broadcast chain), or, for the end
 * of a broadcast chain, so that a survivor may rightly finish.
 *
 * Every rank starts the non-blocking collective on M MiB of float32 (default 64:
 * all-reduce in place on M MiB; all-gather into an M MiB recvbuf; broadcast of M MiB
 * from --root, default 0; --kib: K KiB instead) once every rank's warm-up barrier
 * returned, and waits for it.
 * A survivor passes when either
 *   - the wait (or the start, when the death is known by then) fails with
 *     RINGLET_ERR_REMOTE or RINGLET_ERR_TIMEOUT, in less than 10 s, with a message naming
 *     "rank V" and the collective; or
 *   - the wait succeeds (a survivor that already had everything it needed), the result
 *     is correct element by element, and its next call (a barrier) fails naming "rank V".
 * It prints "survivor R: OK error in X s: <message>" (or "survivor R: FAIL ..."). Then it
 * waits until every survivor has reached that point (a file per survivor in DIR, 30 s at
 * most), so that no survivor leaves, and breaks links, while another still waits for its
 * verdict; then ringlet_comm_abort (must return), ringlet_comm_destroy, exit 0 when OK.
 * A victim that comes back from the wait prints "FAIL victim ..." and exits 3.
 * --memory device: the collective runs on device buffers (the device layer's backend),
 * copied from and back to the host buffer around it.
 * --tag is ignored (kill.sh puts a marker there to find leftover processes).
 */
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

#include "device.h"
#include "ringlet.h"

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Element i of rank r's input: halves up to 511.5 (every partial sum exact in float32),
 * taken from the top bits of a 64-bit hash of the whole index, so that no stretch of the
 * buffer repeats and a piece in the wrong place shows. */
static float input(size_t i, int r) {
    return (float)((((uint64_t)i + 1) * 0x9E3779B97F4A7C15ull) >> 54) * 0.5f + (float)r;
}

/* Whether buf holds the collective's result; where not, the first bad index in *bad. */
static int result_ok(const char *coll, const float *buf, size_t n, int P, int root, size_t *bad) {
    for (size_t i = 0; i < n; i++) {
        float want;
        if (strcmp(coll, "allreduce") == 0) {
            /* Small integers and halves: every partial sum is exact in float32. */
            want = 0;
            for (int r = 0; r < P; r++) want += input(i, r);
        } else if (strcmp(coll, "allgather") == 0) {
            size_t per = n / (size_t)P;
            want = input(i % per, (int)(i / per));
        } else {
            want = input(i, root);
        }
        if (buf[i] != want) {
            *bad = i;
            return 0;
        }
    }
    return 1;
}

/* Marks this rank as at `stage` in dir and waits until `count` ranks are. */
static void ranks_meet(const char *dir, const char *stage, int me, int count) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s.%d", dir, stage, me);
    int fd = open(path, O_CREAT | O_WRONLY, 0600);
    if (fd >= 0) close(fd);
    const double until = now_s() + 30.0;
    for (;;) {
        int n = 0;
        for (int r = 0; r < 64; r++) {
            snprintf(path, sizeof path, "%s/%s.%d", dir, stage, r);
            n += access(path, F_OK) == 0;
        }
        if (n >= count) return;
        if (now_s() > until) {
            printf("rank %d: only %d of %d ranks reached %s within 30 s; going on anyway\n", me, n, count, stage);
            return;
        }
        struct timespec ts = {0, 10 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
}

int main(int argc, char **argv) {
    int victim = -1, root = 0;
    long mib = 64, kib = 0;
    const char *coll = NULL, *at = NULL, *sync_dir = NULL;
    int device = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--victim") == 0 && i + 1 < argc)
            victim = atoi(argv[++i]);
        else if (strcmp(argv[i], "--coll") == 0 && i + 1 < argc)
            coll = argv[++i];
        else if (strcmp(argv[i], "--at") == 0 && i + 1 < argc)
            at = argv[++i];
        else if (strcmp(argv[i], "--sync") == 0 && i + 1 < argc)
            sync_dir = argv[++i];
        else if (strcmp(argv[i], "--mib") == 0 && i + 1 < argc)
            mib = atol(argv[++i]);
        else if (strcmp(argv[i], "--kib") == 0 && i + 1 < argc)
            kib = atol(argv[++i]);
        else if (strcmp(argv[i], "--root") == 0 && i + 1 < argc)
            root = atoi(argv[++i]);
        else if (strcmp(argv[i], "--memory") == 0 && i + 1 < argc)
            device = strcmp(argv[++i], "device") == 0;
        else if (strcmp(argv[i], "--tag") == 0 && i + 1 < argc)
            i++;
        else
            coll = NULL, i = argc;
    }
    if (!coll || !at || !sync_dir || mib < 1 || kib < 0 ||
        (strcmp(coll, "allreduce") != 0 && strcmp(coll, "allgather") != 0 && strcmp(coll, "broadcast") != 0) ||
        (strncmp(at, "send:", 5) != 0 && strncmp(at, "recv:", 5) != 0)) {
        fprintf(stderr, "usage: kill --victim V --coll allreduce|allgather|broadcast --at send:N|recv:N --sync DIR "
                        "[--mib M | --kib K] [--root R]\n");
        return 2;
    }
    setvbuf(stdout, NULL, _IOLBF, 0);

    /* The victim arms the fault before init; operation #2 is the collective. */
    const char *rank_env = getenv("RANK");
    if (rank_env && atoi(rank_env) == victim) {
        char spec[64];
        snprintf(spec, sizeof spec, "2:%s", at);
        setenv("RINGLET_FAULT_KILL", spec, 1);
    }

    ringlet_comm_t comm = NULL;
    ringlet_result_t rc = ringlet_comm_init_env(&comm);
    if (rc != RINGLET_SUCCESS) {
        printf("FAIL: ringlet_comm_init_env returned %d: %s\n", (int)rc, ringlet_comm_last_error(NULL));
        return 1;
    }
    int me = -1, P = 0;
    ringlet_comm_rank(comm, &me);
    ringlet_comm_size(comm, &P);
    if (victim < 0 || victim >= P || root < 0 || root >= P || P > 64) {
        printf("FAIL: victim %d or root %d out of range for %d ranks\n", victim, root, P);
        return 1;
    }

    const size_t bytes = kib ? (size_t)kib << 10 : (size_t)mib << 20, n = bytes / sizeof(float), per = n / (size_t)P;
    float *buf = malloc(bytes);
    if (!buf) {
        printf("FAIL rank %d: cannot allocate %zu bytes\n", me, bytes);
        return 1;
    }
    int is_allgather = strcmp(coll, "allgather") == 0;
    for (size_t i = 0; i < n; i++) buf[i] = is_allgather ? 0.0f : input(i, me);
    if (is_allgather)
        for (size_t i = 0; i < per; i++) buf[(size_t)me * per + i] = input(i, me);

    /* Device memory: the collective's buffer is a device twin of buf. */
    const rl_device_ops *D = device ? rl_device() : NULL;
    float *cbuf = buf; /* what the collective gets */
    if (device) {
        void *d = NULL;
        if (!D || D->mem_alloc(&d, bytes) != RL_DEV_OK || D->memcpy_async(d, buf, bytes, NULL) != RL_DEV_OK ||
            D->stream_sync(NULL) != RL_DEV_OK) {
            printf("FAIL rank %d: device memory: %s\n", me, D ? rl_dev_error() : rl_device_unavailable());
            return 1;
        }
        cbuf = d;
    }

    /* Operation #1: every connection up before the collective. Then every rank waits until
     * every rank's barrier has returned: the victim, done with its own barrier first, must
     * not die while another rank still waits for the barrier's last message. */
    rc = ringlet_barrier(comm, NULL);
    if (rc != RINGLET_SUCCESS) {
        printf("FAIL rank %d: warm-up barrier returned %d: %s\n", me, (int)rc, ringlet_comm_last_error(comm));
        return 1;
    }
    ranks_meet(sync_dir, "warm", me, P);

    ringlet_request_t req = NULL;
    const double t0 = now_s();
    if (strcmp(coll, "allreduce") == 0)
        rc = ringlet_iallreduce(cbuf, cbuf, n, RINGLET_FLOAT32, RINGLET_SUM, comm, NULL, &req);
    else if (is_allgather)
        rc = ringlet_iallgather(cbuf + (size_t)me * per, cbuf, per, RINGLET_FLOAT32, comm, NULL, &req);
    else
        rc = ringlet_ibroadcast(cbuf, cbuf, n, RINGLET_FLOAT32, root, comm, NULL, &req);
    /* A survivor that starts it after the death is known gets the error at once: judged
     * as a failed wait is. */
    int started = rc == RINGLET_SUCCESS;
    if (!started && rc != RINGLET_ERR_REMOTE && rc != RINGLET_ERR_TIMEOUT) {
        printf("FAIL rank %d: starting the %s returned %d: %s\n", me, coll, (int)rc, ringlet_comm_last_error(comm));
        return 1;
    }
    if (started) rc = ringlet_wait(&req);
    const double dt = now_s() - t0;
    if (me == victim) {
        printf("FAIL victim %d: the %s returned %d (%s) instead of the fault killing this rank at %s\n", me, coll,
               (int)rc, ringlet_strerror(rc), at);
        return 3;
    }

    char want_rank[32];
    snprintf(want_rank, sizeof want_rank, "rank %d", victim);
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", ringlet_comm_last_error(comm));
    int ok = 1;
    char why[512] = "";
    if (rc == RINGLET_SUCCESS) {
        /* It had every byte it needed before the victim died: the data must be right, and
         * the communicator must still learn of the death. */
        size_t bad = 0;
        size_t len = is_allgather ? per * (size_t)P : n;
        if (device && (D->memcpy_async(buf, cbuf, bytes, NULL) != RL_DEV_OK || D->stream_sync(NULL) != RL_DEV_OK))
            printf("survivor %d: copying the result back: %s\n", me, rl_dev_error());
        if (!result_ok(coll, buf, len, P, root, &bad)) {
            ok = 0;
            snprintf(why, sizeof why, "the %s succeeded with a wrong result: element %zu is %g", coll, bad,
                     (double)buf[bad]);
        } else {
            ringlet_result_t brc = ringlet_barrier(comm, NULL);
            snprintf(msg, sizeof msg, "%s succeeded with a correct result; the next call (barrier) returned %d: %s",
                     coll, (int)brc, ringlet_comm_last_error(comm));
            if (brc != RINGLET_ERR_REMOTE && brc != RINGLET_ERR_TIMEOUT) {
                ok = 0;
                snprintf(why, sizeof why, "the %s succeeded, and the next barrier returned %d (%s), want an error",
                         coll, (int)brc, ringlet_strerror(brc));
            } else if (!strstr(msg, want_rank)) {
                ok = 0;
                snprintf(why, sizeof why, "the barrier after the %s does not name '%s'", coll, want_rank);
            }
        }
    } else if (rc != RINGLET_ERR_REMOTE && rc != RINGLET_ERR_TIMEOUT) {
        ok = 0;
        snprintf(why, sizeof why, "result %d (%s), want RINGLET_ERR_REMOTE or RINGLET_ERR_TIMEOUT", (int)rc,
                 ringlet_strerror(rc));
    } else if (!strstr(msg, want_rank) || !strstr(msg, coll)) {
        ok = 0;
        snprintf(why, sizeof why, "message does not name '%s' and '%s'", want_rank, coll);
    }
    if (ok && dt >= 10.0) {
        ok = 0;
        snprintf(why, sizeof why, "took %.2f s, want < 10 s", dt);
    }
    if (req != NULL) {
        ok = 0;
        snprintf(why, sizeof why, "ringlet_wait left *request non-NULL");
    }
    if (ok && ringlet_comm_get_async_error(comm) == RINGLET_SUCCESS) {
        ok = 0;
        snprintf(why, sizeof why, "ringlet_comm_get_async_error is still success after the failure");
    }
    if (ok)
        printf("survivor %d: OK error in %.2f s: %s\n", me, dt, msg);
    else
        printf("survivor %d: FAIL after %.2f s: %s; code %d (%s), message: %s\n", me, dt, why, (int)rc,
               ringlet_strerror(rc), msg);

    ranks_meet(sync_dir, "done", me, P - 1);
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
