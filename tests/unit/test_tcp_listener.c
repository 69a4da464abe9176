/* Unit test for the TCP transport's listener id (transports/tcp.h, issue 22): a
 * connection meant for one listener never lands on another one, even one that holds the
 * same secret (every communicator made from the environment does) and now has the port.
 *
 * By construction, in one process: two listening contexts A and B of rank 1 of a job of
 * 2, with the same secret, and a context C of rank 0. C connects to B's address with A's
 * blob otherwise (A's listener id): what a peer of an aborted communicator does when the
 * port it connects to was taken by a new communicator's listener. B must refuse it (its
 * accept of rank 0 then times out, after the refusal), and must still accept C's
 * connection made with B's own blob, and carry a message over it. Silent strangers
 * queued on B's listener do not keep its accept past its deadline, nor keep a genuine
 * peer queued behind them waiting (context D, 12 s deadline). A connect out of file
 * descriptors fails as this rank's own error. Exit status 0 on
 * success; each failure is printed. */
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include "tcp.h"
#include "transport.h"
#include "util.h"

static int failures;
static void check(const char *what, int cond) {
    if (!cond) {
        printf("FAIL %s\n", what);
        failures++;
    }
}

static void nop(void *arg) { (void)arg; }

int main(void) {
    const rl_transport_ops *t = rl_transports[RL_TP_TCP];
    uint8_t secret[32];
    memset(secret, 7, sizeof secret);
    struct sockaddr_storage lo;
    memset(&lo, 0, sizeof lo);
    struct sockaddr_in *in4 = (struct sockaddr_in *)&lo;
    in4->sin_family = AF_INET;
    in4->sin_addr.s_addr = htonl(0x7f000001);
    atomic_int stop = 0, failed = 0;
    rl_transport_init ia = {1, 2, &stop, nop, NULL, 0.5, secret, &lo, NULL, NULL, &failed, NULL};
    rl_transport_init ic = ia;
    ic.rank = 0;
    void *A = NULL, *B = NULL, *C = NULL;
    uint8_t blob_a[RL_BLOB_MAX], blob_b[RL_BLOB_MAX], blob_c[RL_BLOB_MAX];
    size_t la = 0, lb = 0, lc = 0;
    char err[RL_ERR_MAX] = "";
    if (t->init(&ia, &A, blob_a, &la, err) || t->init(&ia, &B, blob_b, &lb, err) || t->init(&ic, &C, blob_c, &lc, err)) {
        printf("FAIL tcp init: %s\n", err);
        return 1;
    }
    rl_tcp_blob a, b;
    check("A's blob parses", rl_tcp_parse_blob(blob_a, la, &a) == 0);
    check("B's blob parses", rl_tcp_parse_blob(blob_b, lb, &b) == 0);
    check("two listeners have different ids", memcmp(a.listener, b.listener, sizeof a.listener) != 0);

    /* A's blob with B's address: A's port now belongs to B. */
    rl_tcp_blob stale = a;
    stale.addr = b.addr;
    void *cs = NULL, *bs = NULL;
    check("the stale connect itself succeeds (connect waits for no accept)",
          t->connect(C, 1, &stale, sizeof stale, &cs, err) == RINGLET_SUCCESS);
    double t0 = rl_now();
    ringlet_result_t rc = t->accept(B, 0, &bs, err);
    check("B refuses the connection meant for A's listener (its accept of rank 0 times out)",
          rc == RINGLET_ERR_TIMEOUT && bs == NULL);
    printf("B's accept with only the stale connection: %s after %.2f s: %s\n", rc ? "failed" : "succeeded",
           rl_now() - t0, rc ? err : "(it took the stale connection)");
    if (bs) t->close(bs), bs = NULL;
    if (cs) t->close(cs), cs = NULL;

    /* Silent strangers (a port scanner: connected, never a byte) queued on B's listener:
     * each is refused once its hello is overdue, and B's accept still ends at its own
     * deadline (0.5 s), not 5 s per stranger. */
    int silent[3];
    for (int k = 0; k < 3; k++) {
        silent[k] = socket(b.addr.ss_family, SOCK_STREAM, 0);
        check("a silent stranger connects",
              silent[k] >= 0 && connect(silent[k], (struct sockaddr *)&b.addr, sizeof(struct sockaddr_in)) == 0);
    }
    t0 = rl_now();
    rc = t->accept(B, 0, &bs, err);
    double took = rl_now() - t0;
    printf("B's accept behind 3 silent strangers: %s after %.2f s\n", rc ? err : "succeeded", took);
    check("B's accept behind silent strangers times out", rc == RINGLET_ERR_TIMEOUT && bs == NULL);
    check("... at its deadline, not 5 s per stranger (15 s)", took < 4.0);
    for (int k = 0; k < 3; k++)
        if (silent[k] >= 0) close(silent[k]);
    if (bs) t->close(bs), bs = NULL;

    /* A genuine peer behind silent strangers is accepted at once: the listener reads
     * every waiting hello as it comes (it once gave each stranger in turn 5 s, so three
     * of them outlasted D's 12 s deadline). */
    rl_transport_init id = ia;
    id.timeout_s = 12;
    void *D = NULL, *ds = NULL;
    uint8_t blob_d[RL_BLOB_MAX];
    size_t ld = 0;
    rl_tcp_blob dd;
    if (t->init(&id, &D, blob_d, &ld, err) || rl_tcp_parse_blob(blob_d, ld, &dd) != 0) {
        printf("FAIL tcp init of D: %s\n", err);
        return 1;
    }
    for (int k = 0; k < 3; k++) {
        silent[k] = socket(dd.addr.ss_family, SOCK_STREAM, 0);
        check("a silent stranger connects to D",
              silent[k] >= 0 && connect(silent[k], (struct sockaddr *)&dd.addr, sizeof(struct sockaddr_in)) == 0);
    }
    check("C connects to D behind them", t->connect(C, 1, blob_d, ld, &cs, err) == RINGLET_SUCCESS);
    rc = t->accept(D, 0, &ds, err);
    check("D accepts C behind 3 silent strangers", rc == RINGLET_SUCCESS && ds != NULL);
    if (rc) printf("D's accept: %s\n", err);
    for (int k = 0; k < 3; k++)
        if (silent[k] >= 0) close(silent[k]);
    if (ds) t->close(ds);
    if (cs) t->close(cs), cs = NULL;
    t->fini(D);

    /* The genuine one still works. */
    check("C connects to B with B's blob", t->connect(C, 1, blob_b, lb, &cs, err) == RINGLET_SUCCESS);
    check("B accepts it", t->accept(B, 0, &bs, err) == RINGLET_SUCCESS && bs != NULL);
    if (cs && bs) {
        char out[64] = "through the listener it was meant for", got[64] = "";
        rl_treq s, r;
        memset(&s, 0, sizeof s);
        memset(&r, 0, sizeof r);
        t->irecv(bs, got, sizeof out, NULL, &r);
        t->isend(cs, out, sizeof out, NULL, &s);
        for (double until = rl_now() + 5; (!rl_treq_done(&s) || !rl_treq_done(&r)) && rl_now() < until;) {
            if (t->progress) t->progress(B);
            rl_sleep_ms(1);
        }
        check("the message arrives", rl_treq_done(&r) && atomic_load(&r.status) == RINGLET_SUCCESS && !strcmp(got, out));
    }
    if (bs) t->close(bs);
    if (cs) t->close(cs);

    /* This rank out of descriptors: its connect fails as its own (a system error naming
     * errno), not as the peer's (it said "socket error", a remote error). */
    int lowest = open("/dev/null", O_RDONLY);
    struct rlimit old;
    check("a descriptor to find the lowest free one", lowest >= 0);
    if (lowest >= 0 && getrlimit(RLIMIT_NOFILE, &old) == 0) {
        close(lowest);
        struct rlimit tight = old;
        tight.rlim_cur = (rlim_t)lowest; /* every descriptor from lowest on refused */
        cs = NULL;
        if (setrlimit(RLIMIT_NOFILE, &tight) == 0) {
            rc = t->connect(C, 1, blob_b, lb, &cs, err);
            setrlimit(RLIMIT_NOFILE, &old);
            printf("connect with no descriptor left: %s\n", rc ? err : "succeeded");
            check("out of descriptors: RINGLET_ERR_SYSTEM, saying so",
                  rc == RINGLET_ERR_SYSTEM && cs == NULL && strstr(err, "Too many open files"));
            if (cs) t->close(cs);
        }
        /* ... but an accept whose connection is already here (taken off the listener and
         * filed while polling, as the progress thread does) needs no descriptor: it
         * succeeds out of them (it tried the listener first, and failed as out of them). */
        cs = bs = NULL;
        check("C connects to B again", t->connect(C, 1, blob_b, lb, &cs, err) == RINGLET_SUCCESS);
        for (double until = rl_now() + 5; !t->accept_ready(B, 0) && rl_now() < until;) rl_sleep_ms(1);
        lowest = open("/dev/null", O_RDONLY);
        if (lowest >= 0) close(lowest);
        tight = old;
        tight.rlim_cur = (rlim_t)(lowest >= 0 ? lowest : 0);
        if (lowest >= 0 && setrlimit(RLIMIT_NOFILE, &tight) == 0) {
            rc = t->accept(B, 0, &bs, err);
            setrlimit(RLIMIT_NOFILE, &old);
            printf("accept of a connection already filed, no descriptor left: %s\n", rc ? err : "succeeded");
            check("an accept already filed succeeds out of descriptors", rc == RINGLET_SUCCESS && bs != NULL);
        }
        if (bs) t->close(bs);
        if (cs) t->close(cs);
    }
    t->fini(A);
    t->fini(B);
    t->fini(C);
    if (failures) return 1;
    printf("test_tcp_listener: ok\n");
    return 0;
}
