/* tcp_raw.c - the ring's bytes over plain loopback TCP, for perf/compare's "tcp-raw"
 * row: N processes in a ring, each streaming to the next over one TCP connection the
 * bytes a ring all-reduce of B bytes sends per rank (2(N-1)/N x B), while receiving as
 * many from the previous one. No reduction, no steps, no waiting for data to come
 * round: one non-blocking send and receive loop per rank (poll() when neither moves).
 * Its busbw is what the kernel's TCP path moves for a ring when nothing else is done:
 * a reference, not a hard bound (more sockets or larger socket buffers can move more).
 *
 * Build: cc -O2 -o tcp_raw perf/tcp_raw.c
 * Run:   tcp_raw N [target_s=0.2] [max_bytes=256M]   (forks its N ranks itself)
 *
 * Ranks are bound as ringlet-run --bind cores binds ringlet's: rank r on core r when the
 * machine has at least N cores (as mpirun binds its), else on core (r + popcount(r / C))
 * mod C of the C online cores (since 2026-11-28; unbound before). Sizes 4 KiB, 64 KiB, 1 MiB,
 * 16 MiB, 64 MiB, 256 MiB (the peer drivers' list) up to max_bytes. Per size, as the
 * peer drivers do: 1 untimed call, 2 timed for an estimate (rank 0's), iters =
 * clamp(target_s / est, 3, 100000) sent round the ring, a token round the ring, the
 * timed loop; time = rank 0's / iters (the ranks are coupled by the ring's flow). Each
 * rank checks every byte it received at the end of each size (rank r sends bytes of
 * r * 37 + offset); a wrong byte fails the rank, and rank 0's check column says FAIL
 * when any rank failed. Output (rank 0), the peer drivers' columns:
 *   bytes time_us algbw_GBps busbw_GBps iters check */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAXN 64

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static void die(int rank, const char *what) {
    fprintf(stderr, "tcp_raw: rank %d: %s: %s\n", rank, what, strerror(errno));
    exit(2);
}

/* Sends n bytes to next (from src, wrapping round its len bytes) while receiving n
 * bytes from prev into dst (wrapping likewise). */
static void stream(int rank, int next, int prev, const char *src, char *dst, size_t len, size_t n) {
    size_t sent = 0, got = 0;
    while (sent < n || got < n) {
        int moved = 0;
        if (sent < n) {
            size_t o = sent % len, k = len - o < n - sent ? len - o : n - sent;
            ssize_t m = send(next, src + o, k, MSG_DONTWAIT | MSG_NOSIGNAL);
            if (m > 0) sent += (size_t)m, moved = 1;
            else if (m < 0 && errno != EAGAIN && errno != EINTR) die(rank, "send");
        }
        if (got < n) {
            size_t o = got % len, k = len - o < n - got ? len - o : n - got;
            ssize_t m = recv(prev, dst + o, k, MSG_DONTWAIT);
            if (m > 0) got += (size_t)m, moved = 1;
            else if (m == 0) errno = ECONNRESET, die(rank, "recv (peer closed)");
            else if (errno != EAGAIN && errno != EINTR) die(rank, "recv");
        }
        if (!moved) {
            struct pollfd pf[2] = {{next, sent < n ? POLLOUT : 0, 0}, {prev, got < n ? POLLIN : 0, 0}};
            if (poll(pf, 2, 60000) == 0) errno = ETIMEDOUT, die(rank, "poll (60 s without progress)");
        }
    }
}

/* The byte rank sends at offset i of its stream. */
static char pattern(int rank, size_t i) { return (char)(rank * 37 + (int)(i % 251)); }

static void fill(char *b, size_t len, int rank) {
    for (size_t i = 0; i < len; i++) b[i] = pattern(rank, i);
}

static int check(const char *b, size_t len, int from) {
    for (size_t i = 0; i < len; i++)
        if (b[i] != pattern(from, i)) return 0;
    return 1;
}

/* Binds the calling process as ringlet-run --bind cores binds rank r of n (cores 0..C-1
 * taken as the allowed ones). */
static void pin(int r, int n) {
    long C = sysconf(_SC_NPROCESSORS_ONLN);
    if (C < 1) return;
    cpu_set_t cs;
    CPU_ZERO(&cs);
    CPU_SET(C >= n ? r : (int)((r + __builtin_popcountl((unsigned long)(r / C))) % C), &cs);
    sched_setaffinity(0, sizeof cs, &cs);
}

/* A token passed round the ring from rank 0, which also lines the ranks up before a
 * timed loop: rank 0's v, or with and_ok, the logical and of every rank's v. */
static long ring_pass(int rank, int next, int prev, long v, int and_ok) {
    long mine = v;
    if (rank != 0 && recv(prev, &v, sizeof v, MSG_WAITALL) != (ssize_t)sizeof v) die(rank, "token recv");
    if (rank != 0 && and_ok) v = v && mine;
    if (send(next, &v, sizeof v, MSG_NOSIGNAL) != (ssize_t)sizeof v) die(rank, "token send");
    if (rank == 0 && recv(prev, &v, sizeof v, MSG_WAITALL) != (ssize_t)sizeof v) die(rank, "token recv");
    return v;
}

static int run_rank(int rank, int n, const int *lfd, double target, size_t maxb) {
    int next, prev, one = 1;
    /* connect to the next rank's listener (queued by its backlog), then accept prev's */
    struct sockaddr_in a;
    socklen_t al = sizeof a;
    if (getsockname(lfd[(rank + 1) % n], (struct sockaddr *)&a, &al)) die(rank, "getsockname");
    if ((next = socket(AF_INET, SOCK_STREAM, 0)) < 0 || connect(next, (struct sockaddr *)&a, sizeof a))
        die(rank, "connect");
    if ((prev = accept(lfd[rank], NULL, NULL)) < 0) die(rank, "accept");
    for (int i = 0; i < n; i++) close(lfd[i]);
    setsockopt(next, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    setsockopt(prev, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);

    static const size_t sizes[] = {4096, 65536, 1u << 20, 16u << 20, 64u << 20, 256u << 20};
    char *src = malloc(maxb), *dst = malloc(maxb);
    if (!src || !dst) die(rank, "malloc");
    fill(src, maxb, rank);
    int ok = 1;
    if (rank == 0) {
        printf("# tcp_raw ranks=%d target_s=%.2f: ring streams of 2(n-1)/n x bytes per rank, no reduction\n", n, target);
        printf("%12s %12s %12s %12s %8s %6s\n", "bytes", "time_us", "algbw_GBps", "busbw_GBps", "iters", "check");
    }
    for (size_t s = 0; s < sizeof sizes / sizeof *sizes && sizes[s] <= maxb; s++) {
        size_t b = sizes[s], per = b / (size_t)n * 2 * (size_t)(n - 1);
        stream(rank, next, prev, src, dst, b, per);
        double t0 = now_s();
        for (int w = 0; w < 2; w++) stream(rank, next, prev, src, dst, b, per);
        double est = (now_s() - t0) / 2;
        long iters = (long)(target / (est > 1e-9 ? est : 1e-9));
        iters = ring_pass(rank, next, prev, iters < 3 ? 3 : iters > 100000 ? 100000 : iters, 0);
        ring_pass(rank, next, prev, 0, 0);
        t0 = now_s();
        for (long it = 0; it < iters; it++) stream(rank, next, prev, src, dst, b, per);
        double t = (now_s() - t0) / (double)iters;
        memset(dst, 0, b);
        stream(rank, next, prev, src, dst, b, b);
        int mine = check(dst, b, (rank + n - 1) % n);
        if (!mine) fprintf(stderr, "tcp_raw: rank %d: wrong bytes from rank %d at %zu B\n", rank, (rank + n - 1) % n, b);
        ok &= mine;
        long all = ring_pass(rank, next, prev, mine, 1); /* rank 0: did every rank's check pass */
        if (rank == 0)
            printf("%12zu %12.2f %12.4f %12.4f %8ld %6s\n", b, t * 1e6, (double)b / t / 1e9,
                   (double)b / t / 1e9 * 2.0 * (n - 1) / n, iters, all ? "OK" : "FAIL");
        fflush(stdout);
    }
    free(src);
    free(dst);
    close(next);
    close(prev);
    return ok ? 0 : 1;
}

int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 2;
    double target = argc > 2 ? atof(argv[2]) : 0.2;
    size_t maxb = argc > 3 ? strtoull(argv[3], NULL, 10) : 256u << 20;
    if (n < 2 || n > MAXN || target <= 0 || maxb < 4096) {
        fprintf(stderr, "usage: tcp_raw N(2..%d) [target_s > 0] [max_bytes >= 4096]\n", MAXN);
        return 2;
    }
    int lfd[MAXN];
    for (int r = 0; r < n; r++) {
        struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
        if ((lfd[r] = socket(AF_INET, SOCK_STREAM, 0)) < 0 || bind(lfd[r], (struct sockaddr *)&a, sizeof a) ||
            listen(lfd[r], 4))
            die(-1, "listen");
    }
    pid_t pid[MAXN];
    for (int r = 1; r < n; r++) {
        if ((pid[r] = fork()) < 0) die(-1, "fork");
        if (pid[r] == 0) {
            pin(r, n);
            _exit(run_rank(r, n, lfd, target, maxb));
        }
    }
    pin(0, n);
    int rc = run_rank(0, n, lfd, target, maxb);
    for (int r = 1; r < n; r++) {
        int st;
        if (waitpid(pid[r], &st, 0) != pid[r] || !WIFEXITED(st) || WEXITSTATUS(st) != 0) rc = 1;
    }
    return rc;
}
