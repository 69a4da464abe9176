/* Bootstrap: rank 0 gathers every rank's info and hands the table out; the
 * connections stay open afterwards as a failure monitor.
 *
 * Handshake (all messages fixed size):
 *   rank 0 -> rank r : challenge  {magic, nonce0}
 *   rank r -> rank 0 : hello      {magic, rank, nranks, nonce_r, info, mac}
 *                      mac = HMAC(secret, "hello" nonce0 rank nranks nonce_r info)
 *   rank 0 -> rank r : table      {magic, status, mac, P infos | error text}
 *                      mac = HMAC(secret, "table" nonce_r status payload)
 * So rank 0 knows r holds the secret and r knows rank 0 does. A connection that does
 * not complete the hello in time, or whose mac is wrong, is closed and logged; the job
 * goes on. A rank that never shows up fails init on every rank, naming it.
 *
 * Afterwards the connections carry the end of init and the failure monitor (monitor.c).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <unistd.h>

#include "bootstrap.h"
#include "log.h"
#include "monitor.h"
#include "netif.h"
#include "sha256.h"
#include "sock.h"
#include "util.h"

#define ID_MAGIC 0x31544c52u     /* "RLT1" */
#define HELLO_WAIT_S 5.0         /* a genuine rank sends its hello at once */

/* ---- unique id ---- */

struct id_layout {
    uint32_t magic;
    uint16_t family;
    uint16_t port; /* host order */
    uint8_t addr[16];
    uint32_t scope;
    uint8_t secret[32];
};
_Static_assert(sizeof(struct id_layout) <= RINGLET_UNIQUE_ID_BYTES, "unique id too small");

/* Listeners opened by ringlet_get_unique_id in this process, for rank 0's init. */
static pthread_mutex_t g_ids_mu = PTHREAD_MUTEX_INITIALIZER;
static struct {
    int fd;
    int port;
    uint8_t secret[32];
} g_ids[64];
static int g_nids;

static ringlet_result_t pick_interface(struct sockaddr_storage *addr, char *name, size_t namelen, char *err) {
    const char *var;
    const char *spec = rl_env_get("RINGLET_SOCKET_IFNAME", &var);
    struct rl_netif nif[16];
    int n = rl_netif_list(spec, nif, 16);
    if (n <= 0) {
        snprintf(err, RL_MSG_MAX, "no usable network interface%s%s%s%s", spec ? " matches " : "", spec ? var : "",
                 spec ? "=" : "", spec ? spec : "");
        if (n < 0) snprintf(err + strlen(err), RL_MSG_MAX - strlen(err), " (getifaddrs failed)");
        return RINGLET_ERR_SYSTEM;
    }
    *addr = nif[0].addr;
    snprintf(name, namelen, "%s", nif[0].name);
    return RINGLET_SUCCESS;
}

ringlet_result_t rl_boot_make_id(ringlet_unique_id_t *id, char *err) {
    struct sockaddr_storage addr;
    char name[64];
    ringlet_result_t rc = pick_interface(&addr, name, sizeof name, err);
    if (rc) return rc;
    rl_sockaddr_set_port(&addr, 0);
    socklen_t len;
    int fd;
    int e = rl_sock_listen(&addr, &len, &fd);
    if (e < 0) return snprintf(err, RL_MSG_MAX, "cannot listen on %s: %s", name, strerror(-e)), RINGLET_ERR_SYSTEM;
    struct id_layout l;
    memset(&l, 0, sizeof l);
    l.magic = ID_MAGIC;
    l.family = addr.ss_family;
    l.port = (uint16_t)rl_sockaddr_port(&addr);
    if (addr.ss_family == AF_INET6) {
        memcpy(l.addr, &((struct sockaddr_in6 *)&addr)->sin6_addr, 16);
        l.scope = ((struct sockaddr_in6 *)&addr)->sin6_scope_id;
    } else {
        memcpy(l.addr, &((struct sockaddr_in *)&addr)->sin_addr, 4);
    }
    if (rl_random_bytes(l.secret, sizeof l.secret) != 0) {
        close(fd);
        return snprintf(err, RL_MSG_MAX, "no random bytes for the job secret"), RINGLET_ERR_SYSTEM;
    }
    pthread_mutex_lock(&g_ids_mu);
    if (g_nids == (int)(sizeof g_ids / sizeof g_ids[0])) {
        pthread_mutex_unlock(&g_ids_mu);
        close(fd);
        return snprintf(err, RL_MSG_MAX, "too many unique ids not yet used by an init"), RINGLET_ERR_INVALID_USAGE;
    }
    g_ids[g_nids].fd = fd;
    g_ids[g_nids].port = l.port;
    memcpy(g_ids[g_nids].secret, l.secret, 32);
    g_nids++;
    pthread_mutex_unlock(&g_ids_mu);
    memset(id, 0, sizeof *id);
    memcpy(id->internal, &l, sizeof l);
    return RINGLET_SUCCESS;
}

int rl_boot_release_id(const ringlet_unique_id_t *id) {
    struct id_layout l;
    memcpy(&l, id->internal, sizeof l);
    int fd = -1;
    pthread_mutex_lock(&g_ids_mu);
    for (int i = 0; l.magic == ID_MAGIC && i < g_nids; i++)
        if (g_ids[i].port == l.port && rl_ct_equal(g_ids[i].secret, l.secret, 32)) {
            fd = g_ids[i].fd;
            g_ids[i] = g_ids[--g_nids];
            break;
        }
    pthread_mutex_unlock(&g_ids_mu);
    if (fd >= 0) close(fd);
    return fd >= 0;
}

ringlet_result_t rl_boot_parse_id(const ringlet_unique_id_t *id, int rank, rl_boot_target *t, char *err) {
    struct id_layout l;
    memcpy(&l, id->internal, sizeof l);
    if (l.magic != ID_MAGIC || (l.family != AF_INET && l.family != AF_INET6) || l.port == 0)
        return snprintf(err, RL_MSG_MAX, "id: not a ringlet unique id (bad magic, family or port)"),
               RINGLET_ERR_INVALID_ARGUMENT;
    memset(t, 0, sizeof *t);
    struct sockaddr_storage *a = &t->addr[0];
    t->naddr = 1;
    a->ss_family = l.family;
    if (l.family == AF_INET6) {
        memcpy(&((struct sockaddr_in6 *)a)->sin6_addr, l.addr, 16);
        ((struct sockaddr_in6 *)a)->sin6_scope_id = l.scope;
    } else {
        memcpy(&((struct sockaddr_in *)a)->sin_addr, l.addr, 4);
    }
    rl_sockaddr_set_port(a, l.port);
    memcpy(t->secret, l.secret, 32);
    t->listen_fd = -1;
    if (rank == 0) {
        pthread_mutex_lock(&g_ids_mu);
        for (int i = 0; i < g_nids; i++)
            if (g_ids[i].port == l.port && rl_ct_equal(g_ids[i].secret, l.secret, 32)) {
                t->listen_fd = g_ids[i].fd;
                g_ids[i] = g_ids[--g_nids];
                break;
            }
        pthread_mutex_unlock(&g_ids_mu);
        if (t->listen_fd < 0)
            return snprintf(err, RL_MSG_MAX,
                            "id: rank 0 must be the process that called ringlet_get_unique_id for this unique id "
                            "(and may use it for one init only)"),
                   RINGLET_ERR_INVALID_USAGE;
    }
    return RINGLET_SUCCESS;
}

static int env_int(const char *name, int *out) {
    const char *s = getenv(name);
    if (!s || !*s) return 0;
    char *end;
    long v = strtol(s, &end, 10);
    if (*end || v < 0 || v > 1 << 24) return -1;
    *out = (int)v;
    return 1;
}

ringlet_result_t rl_boot_target_from_env(rl_boot_target *t, int *rank, int *nranks, int *local_rank, char *err) {
    static const char *rank_vars[] = {"RANK", "SLURM_PROCID", "OMPI_COMM_WORLD_RANK", "PMI_RANK"};
    static const char *size_vars[] = {"WORLD_SIZE", "SLURM_NTASKS", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE"};
    int found = -1;
    for (int i = 0; i < 4 && found < 0; i++) {
        const char *bad = env_int(rank_vars[i], rank) < 0 ? rank_vars[i] : env_int(size_vars[i], nranks) < 0 ? size_vars[i] : NULL;
        if (bad)
            return snprintf(err, RL_MSG_MAX, "%s=%.64s is not a number from 0 to %d", bad, getenv(bad), 1 << 24),
                   RINGLET_ERR_INVALID_ARGUMENT;
        if (getenv(rank_vars[i]) && *getenv(rank_vars[i]) && getenv(size_vars[i]) && *getenv(size_vars[i])) found = i;
    }
    if (found < 0)
        return snprintf(err, RL_MSG_MAX,
                        "no rank and world size (set RANK and WORLD_SIZE as torchrun does, or run under srun or "
                        "mpirun)"),
               RINGLET_ERR_INVALID_ARGUMENT;
    if (*nranks < 1)
        return snprintf(err, RL_MSG_MAX, "%s=%d: the world size must be at least 1", size_vars[found], *nranks),
               RINGLET_ERR_INVALID_ARGUMENT;
    if (*rank >= *nranks)
        return snprintf(err, RL_MSG_MAX, "%s=%d is out of range for %s=%d: ranks run from 0 to %d", rank_vars[found],
                        *rank, size_vars[found], *nranks, *nranks - 1),
               RINGLET_ERR_INVALID_ARGUMENT;
    *local_rank = rl_env_local_rank();
    const char *host = getenv("MASTER_ADDR");
    const char *port = getenv("MASTER_PORT");
    if (!host || !*host || !port || !*port)
        return snprintf(err, RL_MSG_MAX, "MASTER_ADDR and MASTER_PORT must say where rank 0 listens (%s is not set)",
                        !host || !*host ? "MASTER_ADDR" : "MASTER_PORT"),
               RINGLET_ERR_INVALID_ARGUMENT;
    int p;
    if (env_int("MASTER_PORT", &p) != 1 || p < 1 || p > 65535)
        return snprintf(err, RL_MSG_MAX, "MASTER_PORT=%.64s is not a port (1 to 65535)", port),
               RINGLET_ERR_INVALID_ARGUMENT;
    /* Under torchrun, MASTER_PORT is torch's own store: use the next port. */
    int bp; /* checked at init (envcheck.h): 1 to 65535 */
    int own_port = env_int("RINGLET_BOOTSTRAP_PORT", &bp) == 1 && bp > 0 && bp < 65536;
    if (getenv("TORCHELASTIC_RUN_ID") && p++ == 65535 && !own_port)
        return snprintf(err, RL_MSG_MAX, "MASTER_PORT=65535 under torchrun: ringlet's rank 0 listens on MASTER_PORT + 1, "
                                         "which is no port (set RINGLET_BOOTSTRAP_PORT, or a lower MASTER_PORT)"),
               RINGLET_ERR_INVALID_ARGUMENT;
    if (own_port) p = bp;
    struct addrinfo hints, *res = NULL;
    memset(&hints, 0, sizeof hints);
    hints.ai_socktype = SOCK_STREAM;
    int gai = getaddrinfo(host, NULL, &hints, &res);
    if (gai != 0 || !res)
        return snprintf(err, RL_MSG_MAX, "MASTER_ADDR=%s does not resolve: %s", host, gai_strerror(gai)),
               RINGLET_ERR_SYSTEM;
    memset(t, 0, sizeof *t);
    int any6 = 0;
    for (struct addrinfo *ai = res; ai && t->naddr < RL_BOOT_NADDR; ai = ai->ai_next) {
        if ((ai->ai_family != AF_INET && ai->ai_family != AF_INET6) || ai->ai_addrlen > sizeof t->addr[0]) continue;
        struct sockaddr_storage a;
        memset(&a, 0, sizeof a);
        memcpy(&a, ai->ai_addr, ai->ai_addrlen);
        rl_sockaddr_set_port(&a, p);
        int dup = 0;
        for (int i = 0; i < t->naddr; i++) dup |= !memcmp(&t->addr[i], &a, sizeof a);
        if (dup) continue;
        t->addr[t->naddr++] = a;
        any6 |= a.ss_family == AF_INET6;
    }
    freeaddrinfo(res);
    if (t->naddr == 0)
        return snprintf(err, RL_MSG_MAX, "MASTER_ADDR=%s resolves to no IPv4 or IPv6 address", host),
               RINGLET_ERR_SYSTEM;
    t->listen_fd = -1;
    /* The job secret: all ranks must agree. Without one, peers are still checked
     * against an all-zero key (protects against garbage, not against a deliberate
     * stranger); ringlet-run always sets one. */
    const char *sec = getenv("RINGLET_SECRET");
    if (sec && *sec) rl_sha256(sec, strlen(sec), t->secret);
    else memset(t->secret, 0, 32);
    if (*rank == 0) {
        /* Rank 0 listens on every address of the host at that port: IPv6 and IPv4 both
         * (a dual-stack socket) where MASTER_ADDR has an IPv6 address and the host has
         * IPv6, so that a rank whose resolver put either first reaches it. */
        struct sockaddr_storage any;
        socklen_t len;
        int e = -EAFNOSUPPORT;
        for (int fam = any6 ? 6 : 4; fam >= 4 && e < 0; fam -= 2) {
            memset(&any, 0, sizeof any);
            any.ss_family = fam == 6 ? AF_INET6 : AF_INET;
            rl_sockaddr_set_port(&any, p);
            e = rl_sock_listen(&any, &len, &t->listen_fd);
            if (e == -EADDRINUSE) break; /* the port's, in either family */
        }
        if (e < 0)
            return snprintf(err, RL_MSG_MAX, "rank 0 cannot listen on port %d: %s", p, strerror(-e)),
                   RINGLET_ERR_SYSTEM;
    }
    return RINGLET_SUCCESS;
}

/* ---- exchange ---- */


void rl_boot_hello_mac(const uint8_t secret[32], const uint8_t nonce0[16], const rl_boot_hello *h, uint8_t out[32]) {
    rl_hmac_sha256_ctx m;
    rl_hmac_sha256_init(&m, secret, 32);
    rl_hmac_sha256_update(&m, "hello", 5);
    rl_hmac_sha256_update(&m, nonce0, 16);
    rl_hmac_sha256_update(&m, h, offsetof(rl_boot_hello, mac));
    rl_hmac_sha256_final(&m, out);
}

void rl_boot_table_mac(const uint8_t secret[32], const uint8_t nonce[16], int32_t status, const void *payload,
                       size_t len, uint8_t out[32]) {
    rl_hmac_sha256_ctx m;
    rl_hmac_sha256_init(&m, secret, 32);
    rl_hmac_sha256_update(&m, "table", 5);
    rl_hmac_sha256_update(&m, nonce, 16);
    rl_hmac_sha256_update(&m, &status, sizeof status);
    rl_hmac_sha256_update(&m, payload, len);
    rl_hmac_sha256_final(&m, out);
}

int rl_boot_check_hello(const uint8_t secret[32], const uint8_t nonce0[16], const rl_boot_hello *h, int nranks,
                        const int *fds, char *msg, size_t msglen) {
    uint8_t mac[32];
    rl_boot_hello_mac(secret, nonce0, h, mac);
    if (h->magic != RL_BOOT_MAGIC || !rl_ct_equal(mac, h->mac, 32)) return -1;
    /* Authenticated: from here on, a mismatch is the job's mistake. */
    if (h->nranks != nranks || h->rank <= 0 || h->rank >= nranks || fds[h->rank] >= 0) {
        snprintf(msg, msglen,
                 h->nranks != nranks ? "bootstrap: rank %d says the job has %d ranks, rank 0 says %d (the world size, "
                                       "WORLD_SIZE or init's nranks, must be the same on every rank)"
                                     : "bootstrap: rank %d joined twice or is out of range (job of %d ranks; rank 0 has %d)",
                 h->rank, h->nranks, nranks);
        return 1;
    }
    /* What the peers will read of it by its lengths (a transport's blob, the TCP one
     * hashed for split communicators) stays inside it */
    for (int i = 0; i < RL_TP_MAX; i++)
        if (h->info.bloblen[i] > RL_BLOB_MAX) {
            snprintf(msg, msglen, "bootstrap: rank %d's connection details are malformed (transport %d: %u bytes, at "
                     "most %d)", h->rank, i, (unsigned)h->info.bloblen[i], (int)RL_BLOB_MAX);
            return 1;
        }
    return 0;
}

size_t rl_boot_table_len(const rl_boot_table_head *th, int nranks) {
    return th->status == 0 ? sizeof(rl_rank_info) * (size_t)nranks : RL_MSG_MAX;
}

ringlet_result_t rl_boot_check_table(const uint8_t secret[32], const uint8_t nonce[16], const rl_boot_table_head *th,
                                     const void *payload, size_t len, char *err) {
    uint8_t mac[32];
    rl_boot_table_mac(secret, nonce, th->status, payload, len, mac);
    if (!rl_ct_equal(mac, th->mac, 32))
        return snprintf(err, RL_MSG_MAX, "bootstrap: rank 0's table did not authenticate (bad MAC)"), RINGLET_ERR_REMOTE;
    if (th->status != 0) {
        /* Rank 0's error text; it need not end with a NUL. Its verdict (authenticated) is
         * the job's as much as rank 0's where this rank does not fit the job or some rank
         * never joined by the deadline: that code; else rank 0's failure is remote here. */
        size_t n = strnlen(payload, len < RL_MSG_MAX ? len : RL_MSG_MAX - 1);
        snprintf(err, RL_MSG_MAX, "%.*s", (int)n, (const char *)payload);
        return th->status == RINGLET_ERR_INVALID_USAGE || th->status == RINGLET_ERR_TIMEOUT
                   ? (ringlet_result_t)th->status
                   : RINGLET_ERR_REMOTE;
    }
    return RINGLET_SUCCESS;
}

/* Rank 0: sends the table (or an error) to every joined rank, and the error also to
 * fds[0] when set: a rank that authenticated but does not fit the job (its hello's
 * nonce in nonces[0]), which must hear why rather than see its connection closed. */
static void root_reply(struct ringlet_comm *c, const uint8_t *secret, int *fds, uint8_t (*nonces)[16], int32_t status,
                       const void *payload, size_t len, double deadline) {
    for (int r = 0; r < c->nranks; r++) {
        if (fds[r] < 0) continue;
        rl_boot_table_head h = {RL_BOOT_MAGIC, status, {0}};
        rl_boot_table_mac(secret, nonces[r], status, payload, len, h.mac);
        if (rl_sock_send_all(fds[r], &h, sizeof h, deadline, NULL) != RL_IO_OK ||
            rl_sock_send_all(fds[r], payload, len, deadline, NULL) != RL_IO_OK)
            RL_WARN(0, "bootstrap: could not send the table to rank %d", r);
    }
}

/* A connection rank 0 took and challenged, whose hello has not all arrived. */
typedef struct {
    int fd;
    double challenged; /* taken (and sent its challenge) */
    double until; /* its hello's deadline */
    size_t got;   /* bytes of the hello so far */
    uint8_t nonce[16];
    rl_boot_hello h;
} pending_t;

static void refuse(pending_t *p, const char *why) {
    RL_WARN(0, "bootstrap: refused a connection that did not authenticate (%s)", why);
    close(p->fd);
    p->fd = -1;
}

/* Rank 0: takes connections until every rank joined. Each one gets a challenge and 5 s
 * for its hello, all at once (poll): a stranger that connects and says nothing (or
 * several, or a slow one) holds up no rank, nor uses up the deadline. At most
 * PENDING_MAX wait at a time; more stay in the listening socket's backlog. While they
 * do, a connection whose hello has not all come EVICT_S after its challenge makes way (a
 * genuine rank's hello, one write, comes within a round trip; one that was slower is told
 * to connect again, RL_BOOT_BUSY): 300 silent strangers held up the job 47 s, 32 every
 * 5 s. Counted from the challenge, not from the last byte: a stranger sending a byte now
 * and then would keep its place. */
#define PENDING_MAX 32
#define EVICT_S 0.25

/* The connection challenged first, if EVICT_S ago by now; else -1, and *at when the
 * first will have been (unchanged when none can). */
static int evictable(const pending_t *pend, int npend, double now, double *at) {
    int best = -1;
    char b;
    for (int i = 0; i < npend; i++) /* bytes not read yet: a hello's, read next round (closed, it would be lost) */
        if ((best < 0 || pend[i].challenged < pend[best].challenged) &&
            recv(pend[i].fd, &b, 1, MSG_PEEK | MSG_DONTWAIT) < 0)
            best = i;
    if (best < 0) return -1;
    if (now >= pend[best].challenged + EVICT_S) return best;
    if (pend[best].challenged + EVICT_S < *at) *at = pend[best].challenged + EVICT_S;
    return -1;
}

/* Lets pending connection p go for others: it is told to connect again (RL_BOOT_BUSY), at
 * once or not at all (a fresh connection's buffer takes it). */
static void evict(pending_t *p) {
    rl_boot_table_head busy = {RL_BOOT_BUSY, 0, {0}};
    (void)!send(p->fd, &busy, sizeof busy, MSG_DONTWAIT | MSG_NOSIGNAL);
    RL_INFO(0, "bootstrap: let a connection whose hello had not come %.2f s after its challenge go: others wait",
            EVICT_S);
    close(p->fd);
    p->fd = -1;
}
static ringlet_result_t root_gather(struct ringlet_comm *c, rl_boot_target *t, int *fds, char *err) {
    int P = c->nranks, joined = 1, npend = 0;
    double deadline = rl_now() + c->timeout_s;
    uint8_t(*nonces)[16] = calloc((size_t)P, 16);
    pending_t *pend = calloc(PENDING_MAX, sizeof *pend);
    if (!nonces || !pend) return free(nonces), free(pend), snprintf(err, RL_MSG_MAX, "out of memory"), RINGLET_ERR_SYSTEM;
    ringlet_result_t rc = RINGLET_SUCCESS;
    char msg[RL_MSG_MAX] = "";
    while (joined < P && !rc) {
        double now = rl_now();
        if (atomic_load(&c->stop)) {
            snprintf(msg, sizeof msg, "bootstrap: rank 0 stopped its init (aborted or failed)");
            rc = RINGLET_ERR_REMOTE;
            break;
        }
        if (now >= deadline) {
            int n = snprintf(msg, sizeof msg, "bootstrap: %d of %d ranks never joined within %.0f s:", P - joined, P,
                             c->timeout_s);
            for (int i = 1, shown = 0; i < P && n < (int)sizeof msg - 16; i++)
                if (fds[i] < 0 && shown++ < 16) n += snprintf(msg + n, sizeof msg - (size_t)n, " rank %d", i);
            rc = RINGLET_ERR_TIMEOUT;
            break;
        }
        double wake = deadline;
        for (int i = 0; i < npend; i++) {
            if (now >= pend[i].until) {
                refuse(&pend[i], rl_io_str(RL_IO_TIMEOUT));
                pend[i--] = pend[--npend];
                continue;
            }
            if (pend[i].until < wake) wake = pend[i].until;
        }
        /* full: the listener is looked at once a connection may make way */
        double evict_at = wake;
        int room = npend < PENDING_MAX || evictable(pend, npend, now, &evict_at) >= 0;
        if (evict_at < wake) wake = evict_at;
        struct pollfd pf[1 + PENDING_MAX];
        pf[0] = (struct pollfd){t->listen_fd, room ? POLLIN : 0, 0};
        for (int i = 0; i < npend; i++) pf[1 + i] = (struct pollfd){pend[i].fd, POLLIN, 0};
        /* 100 ms at most: the stop flag is looked at; bounded as a double (a deadline past 24
         * days overflowed an int: poll then waited for ever, the stop token unheard) */
        double wait_ms = (wake - now) * 1000;
        poll(pf, (nfds_t)(1 + npend), wait_ms >= 100 ? 100 : (int)wait_ms + 1);
        /* hellos arriving */
        for (int i = npend - 1; i >= 0 && !rc; i--) {
            if (!pf[1 + i].revents) continue;
            pending_t *q = &pend[i];
            ssize_t n = recv(q->fd, (char *)&q->h + q->got, sizeof q->h - q->got, MSG_DONTWAIT);
            if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) continue;
            if (n <= 0) {
                refuse(q, rl_io_str(n == 0 || errno == ECONNRESET ? RL_IO_EOF : RL_IO_ERR));
                pend[i] = pend[--npend];
                continue;
            }
            q->got += (size_t)n;
            if (q->got < sizeof q->h) continue;
            int verdict = rl_boot_check_hello(t->secret, q->nonce, &q->h, P, fds, msg, sizeof msg);
            if (verdict < 0) {
                refuse(q, "wrong secret or not a ringlet rank");
            } else if (verdict > 0) { /* authenticated, but not this job's: fatal */
                fds[0] = q->fd; /* so the reply reaches it too */
                memcpy(nonces[0], q->h.nonce, 16);
                rc = RINGLET_ERR_INVALID_USAGE;
            } else {
                q->h.info.rank = q->h.rank;
                c->infos[q->h.rank] = q->h.info;
                memcpy(nonces[q->h.rank], q->h.nonce, 16);
                fds[q->h.rank] = q->fd;
                joined++;
            }
            pend[i] = pend[--npend];
        }
        /* new connections: challenged at once */
        while (!rc && pf[0].revents && joined < P) {
            if (npend == PENDING_MAX) {
                double at = deadline;
                int v = evictable(pend, npend, rl_now(), &at);
                if (v < 0) break;
                evict(&pend[v]);
                pend[v] = pend[--npend];
            }
            int fd;
            rl_io_t r = rl_sock_accept_now(t->listen_fd, &fd);
            if (r == RL_IO_TIMEOUT) break;
            if (r == RL_IO_ERR) { /* out of descriptors or memory: nobody is late, rank 0 cannot take them */
                snprintf(msg, sizeof msg, "bootstrap: rank 0 could not take a rank's connection (accept: %s), %d of %d "
                         "ranks had joined", strerror(-fd), joined, P);
                rc = RINGLET_ERR_SYSTEM;
                break;
            }
            rl_sock_tune(fd, 0); /* TCP_NODELAY: small frames go at once (the table's head and payload, frames) */
            pending_t *q = &pend[npend];
            q->fd = fd;
            q->got = 0;
            q->challenged = rl_now();
            q->until = q->challenged + HELLO_WAIT_S;
            if (q->until > deadline) q->until = deadline;
            rl_boot_challenge ch = {RL_BOOT_MAGIC, {0}};
            /* no fresh nonce (no randomness to be had): a recorded hello would pass */
            int fresh = rl_random_bytes(ch.nonce, 16) == 0;
            memcpy(q->nonce, ch.nonce, 16);
            /* a fresh connection's buffer takes these 20 bytes at once */
            r = fresh ? rl_sock_send_all(fd, &ch, sizeof ch, q->until, &c->stop) : RL_IO_OK;
            if (!fresh) { /* it would be so for every connection: the init fails, saying why */
                refuse(q, "no random nonce for its challenge");
                snprintf(msg, sizeof msg, "bootstrap: rank 0 has no random nonce for its challenges (getrandom and "
                         "/dev/urandom failed), %d of %d ranks had joined", joined, P);
                rc = RINGLET_ERR_SYSTEM;
                break;
            }
            if (r != RL_IO_OK) refuse(q, rl_io_str(r));
            else npend++;
        }
    }
    for (int i = 0; i < npend; i++) refuse(&pend[i], "the init ended before its hello");
    free(pend);
    double reply_deadline = rl_now() + 10.0;
    if (rc == RINGLET_SUCCESS) {
        root_reply(c, t->secret, fds, nonces, 0, c->infos, sizeof(rl_rank_info) * (size_t)P, reply_deadline);
    } else {
        /* The status is the error's code: a rank that does not fit the job is the
         * caller's mistake (invalid usage) on every rank, not a remote failure. */
        root_reply(c, t->secret, fds, nonces, (int32_t)rc, msg, sizeof msg, reply_deadline);
        if (fds[0] >= 0) close(fds[0]), fds[0] = -1;
        snprintf(err, RL_MSG_MAX, "%s", msg);
    }
    free(nonces);
    return rc;
}

/* Connects to rank 0 at one of t's addresses. With several, each is tried in turn for a
 * slice (1 s, then 2 s), from the one that answered last (*at): one that refuses or
 * stays silent (rank 0 not up yet, or an address that does not reach it) costs its slice,
 * not the deadline. One this host cannot use at all (RL_IO_ERR: its family off, no
 * descriptors) is left out; RL_IO_ERR once none is left. */
static rl_io_t connect_rank0(const rl_boot_target *t, int *at, double deadline, const atomic_int *stop, int *fd) {
    if (t->naddr == 1) return rl_sock_connect(&t->addr[0], rl_sockaddr_len(&t->addr[0]), deadline, stop, fd);
    int usable[RL_BOOT_NADDR], left = t->naddr;
    for (int i = 0; i < t->naddr; i++) usable[i] = 1;
    /* short slices: with a dead address in the list, a rank 0 that comes up late is met
     * within 2 s per address */
    for (double slice = 1.0;; slice = 2.0) {
        for (int k = 0; k < t->naddr; k++) {
            int i = (*at + k) % t->naddr;
            if (!usable[i]) continue;
            double until = rl_now() + slice;
            rl_io_t r = rl_sock_connect(&t->addr[i], rl_sockaddr_len(&t->addr[i]), until < deadline ? until : deadline,
                                        stop, fd);
            if (r == RL_IO_OK) *at = i;
            if (r == RL_IO_OK || r == RL_IO_STOPPED) return r;
            if (r == RL_IO_ERR && (usable[i] = 0, --left == 0)) return r;
            if (rl_now() >= deadline) return RL_IO_TIMEOUT;
        }
    }
}

static ringlet_result_t client_join(struct ringlet_comm *c, rl_boot_target *t, int *fd_out, char *err) {
    double deadline = rl_now() + c->timeout_s;
    char where[RL_BOOT_NADDR * 52];
    size_t wl = 0;
    for (int i = 0; i < t->naddr && wl + 52 < sizeof where; i++) {
        if (i) wl += (size_t)snprintf(where + wl, sizeof where - wl, " or ");
        rl_sockaddr_str((struct sockaddr *)&t->addr[i], where + wl, sizeof where - wl);
        wl += strlen(where + wl);
    }
    int at = 0; /* the address that answered last */
    for (;;) {
        int fd;
        rl_io_t r = connect_rank0(t, &at, deadline, &c->stop, &fd);
        if (r != RL_IO_OK)
            return snprintf(err, RL_MSG_MAX, "bootstrap: cannot reach rank 0 at %s: %s", where,
                            r == RL_IO_ERR ? strerror(-fd) : rl_io_str(r)),
                   r == RL_IO_TIMEOUT ? RINGLET_ERR_TIMEOUT : RINGLET_ERR_SYSTEM;
        rl_sock_tune(fd, 0);
        rl_boot_challenge ch;
        r = rl_sock_recv_all(fd, &ch, sizeof ch, deadline, &c->stop);
        if (r != RL_IO_OK || ch.magic != RL_BOOT_MAGIC) {
            /* Rank 0 may have refused us while busy, or it is not ringlet: retry. */
            close(fd);
            if (r == RL_IO_STOPPED) return snprintf(err, RL_MSG_MAX, "bootstrap: stopped"), RINGLET_ERR_REMOTE;
            if (rl_now() >= deadline)
                return snprintf(err, RL_MSG_MAX, "bootstrap: rank 0 at %s did not answer", where), RINGLET_ERR_TIMEOUT;
            rl_sleep_ms(100);
            continue;
        }
        rl_boot_hello h;
        memset(&h, 0, sizeof h);
        h.magic = RL_BOOT_MAGIC;
        h.rank = c->rank;
        h.nranks = c->nranks;
        if (rl_random_bytes(h.nonce, 16) != 0) { /* rank 0's table would be bound to no fresh nonce */
            close(fd);
            return snprintf(err, RL_MSG_MAX, "bootstrap: no random nonce for the hello (getrandom and /dev/urandom "
                            "failed)"), RINGLET_ERR_SYSTEM;
        }
        h.info = c->infos[c->rank];
        rl_boot_hello_mac(t->secret, ch.nonce, &h, h.mac);
        rl_boot_table_head th;
        r = rl_sock_send_all(fd, &h, sizeof h, deadline, &c->stop);
        if (r == RL_IO_OK) r = rl_sock_recv_all(fd, &th, sizeof th, deadline + 10.0, &c->stop);
        if (r == RL_IO_OK && th.magic == RL_BOOT_BUSY) { /* let go for others: again */
            close(fd);
            if (rl_now() >= deadline)
                return snprintf(err, RL_MSG_MAX, "bootstrap: rank 0 at %s was busy with other connections until the "
                                "deadline (RINGLET_TIMEOUT)", where), RINGLET_ERR_TIMEOUT;
            rl_sleep_ms(20);
            continue;
        }
        if (r == RL_IO_TIMEOUT) { /* rank 0 took the hello: it waits for the other ranks */
            close(fd);
            return snprintf(err, RL_MSG_MAX, "bootstrap: rank 0 at %.300s took this rank's hello but sent no table by the "
                            "deadline (RINGLET_TIMEOUT, + 10 s): it waits for all %d ranks to join (are they all "
                            "started?)", where, c->nranks),
                   RINGLET_ERR_TIMEOUT;
        }
        if (r == RL_IO_STOPPED) return close(fd), snprintf(err, RL_MSG_MAX, "bootstrap: stopped"), RINGLET_ERR_REMOTE;
        if (r != RL_IO_OK || th.magic != RL_BOOT_MAGIC) {
            close(fd);
            return snprintf(err, RL_MSG_MAX,
                            "bootstrap: no table from rank 0 (%s): rank 0 refused this rank (is RINGLET_SECRET the same "
                            "on every rank?) or failed",
                            rl_io_str(r)),
                   RINGLET_ERR_REMOTE;
        }
        size_t len = rl_boot_table_len(&th, c->nranks);
        char *payload = malloc(len);
        if (!payload) return close(fd), snprintf(err, RL_MSG_MAX, "out of memory"), RINGLET_ERR_SYSTEM;
        r = rl_sock_recv_all(fd, payload, len, deadline + 10.0, &c->stop);
        ringlet_result_t rc = RINGLET_ERR_REMOTE;
        if (r != RL_IO_OK)
            snprintf(err, RL_MSG_MAX, "bootstrap: rank 0's table did not arrive whole (%s): rank 0 failed or closed "
                     "the connection", rl_io_str(r));
        else
            rc = rl_boot_check_table(t->secret, h.nonce, &th, payload, len, err);
        if (rc != RINGLET_SUCCESS) {
            free(payload);
            close(fd);
            return rc;
        }
        memcpy(c->infos, payload, len);
        free(payload);
        *fd_out = fd;
        return RINGLET_SUCCESS;
    }
}

ringlet_result_t rl_boot_exchange(struct ringlet_comm *c, rl_boot_target *t, char *err) {
    int root = c->rank == 0;
    struct rl_monitor *m = rl_monitor_new(root, root ? c->nranks : 1);
    if (!m) {
        if (root) close(t->listen_fd), t->listen_fd = -1; /* the caller leaves it to this function */
        return snprintf(err, RL_MSG_MAX, "out of memory"), RINGLET_ERR_SYSTEM;
    }
    int *fds = rl_monitor_fds(m);
    ringlet_result_t rc;
    if (root) {
        rc = root_gather(c, t, fds, err);
        close(t->listen_fd);
        t->listen_fd = -1;
    } else {
        rc = client_join(c, t, &fds[0], err);
    }
    if (rc != RINGLET_SUCCESS) {
        rl_monitor_close(m);
        return rc;
    }
    return rl_monitor_start(c, m, err);
}
