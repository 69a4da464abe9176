/* The bootstrap's connections after the exchange (bootstrap.c), kept open.
 *
 * End of init: once a rank's ring connections are made it sends READY to rank 0; when
 * every rank has, rank 0 sends GO to all, and only then does init return anywhere. So no
 * rank leaves (destroy, abort, exit) while another still connects to it: a shared-memory
 * connect maps the peer's segment by name, which a rank that left has removed.
 *
 * Monitor: afterwards each rank keeps its socket to rank 0. When one closes without a
 * goodbye, rank 0 tells everybody that rank failed; when rank 0's closes without one,
 * every rank knows rank 0 failed. Failures are thus reported by rank within
 * milliseconds of a process dying, even to ranks that are not its ring neighbours.
 * A peer that is stopped, hung as a whole, or cut off by the network closes nothing, so
 * both ends also send a heartbeat on the socket every min(1 s, RINGLET_TIMEOUT / 4):
 * when rank 0 hears nothing from a rank for RINGLET_TIMEOUT, it tells everybody that
 * rank is unresponsive; a rank that hears nothing from rank 0 for that long says so of
 * rank 0. A stall in a collective starts no earlier than the fault that caused it, and
 * a timed-out call first gives the monitor a moment (failure.h), so every rank names
 * the silent rank, not the neighbour it happened to wait for.
 *
 * Why: a rank whose communicator fails for a reason of its own (a deadline, a refused
 * mapping, an abort) says so to rank 0 (within a poll slice, and at the latest when the
 * communicator is torn down), which tells everybody; when that rank's process then exits,
 * every rank's message that it failed quotes what it said. A rank that can take part no
 * more (a sticky CUDA error: rl_comm_fail_lost) says so with it (MON_WHY_LOST), and every
 * rank fails at once, quoting it: its process may live on, but the others would wait for
 * its part until RINGLET_TIMEOUT.
 */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <unistd.h>

#include "bootstrap.h"
#include "failure.h"
#include "fork_close.h"
#include "log.h"
#include "monitor.h"
#include "sock.h"
#include "util.h"
#include "wait.h"

#define MON_MAGIC 0x324d4c52u    /* "RLM2": frames of 32 bytes (heartbeats count collectives) */

enum { MON_BYE = 1, MON_FAILED = 2, MON_ALIVE = 3, MON_SILENT = 4, MON_READY = 5, MON_GO = 6, MON_WHY = 7, MON_LEFT = 8 };
#define MON_WHY_MAX 360 /* bytes of a failure's reason that travel (MON_WHY: len, then the text) */

struct mon_frame {
    uint32_t magic;
    int32_t type;
    int32_t rank;
    int32_t len; /* MON_WHY: bytes of text after the frame; else 0 */
    /* MON_ALIVE: a rank's to rank 0, the collectives it has called; rank 0's, the fewest any
     * rank had called, by lag_rank (ringlet_comm's colls_called and lag). MON_BYE, MON_LEFT:
     * the collectives the rank that left (destroyed the communicator) had called. */
    uint64_t colls;
    int32_t lag_rank;
    int32_t flags; /* MON_WHY: MON_WHY_LOST or 0 */
};
#define MON_WHY_LOST 1 /* the rank can take part no more: every rank fails */

struct rl_monitor {
    int is_root;
    int *fds;      /* root: per rank (own = -1); others: fds[0] to rank 0 */
    int nfds;
    int *said_bye; /* root: per rank; monitor thread only */
    atomic_int nlive; /* root: ranks neither gone nor said goodbye */
    pthread_t thread;
    atomic_int quit;
    atomic_int leaving; /* this rank is in destroy: closed connections are expected */
    int wake[2];        /* a byte on it ends the monitor's poll at once (stop); -1: none */
    double *heard;      /* per fd: when a frame last came on it (monitor thread only) */
    int *silent;        /* per fd: declared unresponsive (monitor thread only) */
    uint64_t *colls;    /* root: per fd, the collectives that rank had called at its last heartbeat */
    double beat_s, next_beat;
    double frame_s; /* the most the rest of a frame's receive may take: 2 s, or RINGLET_TIMEOUT
                     * where less (0 until rl_monitor_start); sends take half or a quarter */
    /* The end of init (rl_boot_ready): root: ranks whose init is done (MON_READY heard);
     * the others: rank 0 said every init is done (MON_GO heard). */
    atomic_int *ready;  /* root: per rank (set by the monitor thread, read by rl_boot_ready's timeout) */
    atomic_int nready;
    atomic_int go;
    int nranks;
    char **why;  /* per rank: what its communicator's own failure was, as it said (monitor thread) */
    /* per rank: 1 + the collectives it had called when it left cleanly (its destroy: its
     * MON_BYE, or rank 0's MON_LEFT), 0 while it has not (monitor thread) */
    unsigned long long *left;
    int any_left; /* some rank left: the thread then looks at this rank's calls every 5 ms */
    atomic_int departing; /* root: its clean destroy began (it told the others when it left) */
    int why_said; /* this rank's own failure has been said */
    pthread_mutex_t send_mu; /* frames are sent whole: the monitor thread and init both send */
};

/* A frame (with what follows it) to connection i, whole (the monitor thread's heartbeats
 * and init's frames share the socket). */
static rl_io_t mon_send_bytes(struct rl_monitor *m, int i, const void *buf, size_t len, double timeout_s) {
    pthread_mutex_lock(&m->send_mu);
    rl_io_t r = m->fds[i] >= 0 ? rl_sock_send_all(m->fds[i], buf, len, rl_now() + timeout_s, NULL) : RL_IO_ERR;
    pthread_mutex_unlock(&m->send_mu);
    return r;
}

static rl_io_t mon_send(struct rl_monitor *m, int i, int type, int rank, double timeout_s) {
    struct mon_frame f = {.magic = MON_MAGIC, .type = type, .rank = rank};
    return mon_send_bytes(m, i, &f, sizeof f, timeout_s);
}

/* MON_WHY to connection i: rank's failure, text, flags. */
static rl_io_t mon_send_why(struct rl_monitor *m, int i, int rank, const char *text, int flags, double timeout_s) {
    size_t len = strnlen(text, MON_WHY_MAX);
    char buf[sizeof(struct mon_frame) + MON_WHY_MAX];
    struct mon_frame f = {.magic = MON_MAGIC, .type = MON_WHY, .rank = rank, .len = (int32_t)len, .flags = flags};
    memcpy(buf, &f, sizeof f);
    memcpy(buf + sizeof f, text, len);
    return mon_send_bytes(m, i, buf, sizeof f + len, timeout_s);
}

/* Says this rank's own failure, once: to rank 0, or (rank 0) to everybody. */
static void say_why(struct ringlet_comm *c, struct rl_monitor *m) {
    char msg[RL_MSG_MAX];
    if (m->why_said || !atomic_load(&c->failed)) return;
    m->why_said = 1;
    int lost = 0;
    if (!rl_comm_own_failure(c, msg, sizeof msg, &lost)) return;
    for (int i = 0; i < m->nfds; i++) /* rank 0's own entry is -1; the others have rank 0's only */
        if (m->fds[i] >= 0) (void)mon_send_why(m, i, c->rank, msg, lost ? MON_WHY_LOST : 0, m->frame_s / 4);
}

/* How rank r went, for "rank r failed (...)": with what it said when its communicator
 * failed for a reason of its own (it then left, whether it destroyed the communicator,
 * aborted or exited), else as a process that exited or aborted. */
static const char *why_of(const struct rl_monitor *m, int r, char *buf, size_t len) {
    if (r >= 0 && r < m->nranks && m->why && m->why[r])
        snprintf(buf, len, "its communicator failed and it left; before, it said: \"%s\"", m->why[r]);
    else
        snprintf(buf, len, "its process exited or aborted without destroying the communicator");
    return buf;
}

/* A MON_WHY frame's text (f.len bytes) from connection i, about rank r: kept, and (rank 0)
 * passed on to everybody else; with MON_WHY_LOST, c fails. */
static rl_io_t take_why(struct ringlet_comm *c, struct rl_monitor *m, int i, int r, const struct mon_frame *f) {
    char text[MON_WHY_MAX + 1];
    if (f->len < 0 || f->len > MON_WHY_MAX || r < 0 || r >= m->nranks) return RL_IO_ERR;
    rl_io_t io = rl_sock_recv_all(m->fds[i], text, (size_t)f->len, rl_now() + m->frame_s, NULL);
    if (io != RL_IO_OK) return io;
    text[f->len] = 0;
    if (m->why && !m->why[r]) m->why[r] = strdup(text);
    if (m->is_root)
        for (int k = 1; k < m->nfds; k++)
            if (k != i && m->fds[k] >= 0) (void)mon_send_why(m, k, r, text, f->flags, m->frame_s / 4);
    if (f->flags & MON_WHY_LOST)
        rl_comm_fail_remote(c, RINGLET_ERR_REMOTE, "rank %d failed and can take part no more: \"%s\"", r, text);
    return RL_IO_OK;
}

static void *monitor_thread(void *arg);

static void mon_free(struct rl_monitor *m) {
    for (int r = 0; m->why && r < m->nranks; r++) free(m->why[r]);
    free(m->why);
    free(m->left);
    free(m->fds), free(m->said_bye), free(m->heard), free(m->silent), free(m->ready), free(m->colls), free(m);
}

/* Closes the connections and the wake pipe and frees m (its thread is not running). */
static void mon_close(struct rl_monitor *m) {
    for (int i = 0; i < m->nfds; i++)
        if (m->fds[i] >= 0) rl_fork_close_remove(m->fds[i]), close(m->fds[i]);
    if (m->wake[0] >= 0) close(m->wake[0]), close(m->wake[1]);
    pthread_mutex_destroy(&m->send_mu);
    mon_free(m);
}

/* Connection i is gone (monitor thread): closed under the send lock, so that a sender
 * never writes to its number once another socket may have taken it. */
static void mon_drop(struct rl_monitor *m, int i) {
    pthread_mutex_lock(&m->send_mu);
    rl_fork_close_remove(m->fds[i]);
    close(m->fds[i]);
    m->fds[i] = -1;
    pthread_mutex_unlock(&m->send_mu);
}

struct rl_monitor *rl_monitor_new(int is_root, int nfds) {
    struct rl_monitor *m = calloc(1, sizeof *m);
    if (!m) return NULL;
    m->is_root = is_root;
    m->nfds = nfds;
    m->fds = malloc(sizeof(int) * (size_t)m->nfds);
    m->said_bye = calloc((size_t)m->nfds, sizeof(int));
    m->heard = calloc((size_t)m->nfds, sizeof(double));
    m->silent = calloc((size_t)m->nfds, sizeof(int));
    m->ready = calloc((size_t)m->nfds, sizeof(atomic_int));
    m->colls = calloc((size_t)m->nfds, sizeof(uint64_t));
    if (!m->fds || !m->said_bye || !m->heard || !m->silent || !m->ready || !m->colls) {
        mon_free(m);
        return NULL;
    }
    pthread_mutex_init(&m->send_mu, NULL);
    for (int i = 0; i < m->nfds; i++) m->fds[i] = -1;
    if (pipe2(m->wake, O_CLOEXEC | O_NONBLOCK) != 0) m->wake[0] = m->wake[1] = -1;
    return m;
}

int *rl_monitor_fds(struct rl_monitor *m) { return m->fds; }

void rl_monitor_close(struct rl_monitor *m) { mon_close(m); }

ringlet_result_t rl_monitor_start(struct ringlet_comm *c, struct rl_monitor *m, char *err) {
    atomic_store(&m->nlive, m->is_root ? c->nranks - 1 : 0);
    m->nranks = c->nranks;
    m->why = calloc((size_t)c->nranks, sizeof *m->why); /* none: failures go without their reasons */
    m->left = calloc((size_t)c->nranks, sizeof *m->left); /* none: a departure is seen at the deadline */
    m->beat_s = c->timeout_s < 4.0 ? c->timeout_s / 4 : 1.0;
    m->frame_s = c->timeout_s < 2.0 ? c->timeout_s : 2.0;
    m->next_beat = rl_now();
    for (int i = 0; i < m->nfds; i++) m->heard[i] = m->next_beat;
    /* A forked child closes its copies: the peers then hear of this process's end. */
    for (int i = 0; i < m->nfds; i++) rl_fork_close_add(m->fds[i]);
    c->mon = m;
    if (pthread_create(&m->thread, NULL, monitor_thread, c) != 0) {
        c->mon = NULL;
        mon_close(m);
        return snprintf(err, RL_MSG_MAX, "cannot start the monitor thread"), RINGLET_ERR_SYSTEM;
    }
    return RINGLET_SUCCESS;
}

/* ---- monitor ---- */

static void root_peer_gone(struct ringlet_comm *c, struct rl_monitor *m, int r) {
    mon_drop(m, r);
    if (m->said_bye[r]) return;
    atomic_fetch_sub(&m->nlive, 1);
    if (atomic_load(&m->leaving) || m->silent[r]) return; /* silent: everybody knows already */
    /* Rank 0 is leaving (it said so): a rank that goes now most often failed because of
     * that, and its going is not the cause the others should hear. */
    if (atomic_load(&m->departing)) return;
    /* Tell everybody first: once this rank's own calls fail, its user may abort, and
     * the others must have heard the real cause before they see this rank go. */
    for (int i = 1; i < m->nfds; i++)
        if (m->fds[i] >= 0 && mon_send(m, i, MON_FAILED, r, m->frame_s / 2) != RL_IO_OK)
            RL_WARN(0, "monitor: could not tell rank %d that rank %d failed", i, r);
    char why[MON_WHY_MAX + 96];
    rl_comm_fail_remote(c, RINGLET_ERR_REMOTE, "rank %d failed (%s)", r, why_of(m, r, why, sizeof why));
}

/* Ends the monitor thread's poll at once (it then looks at quit and departing). */
static void mon_wake(struct rl_monitor *m) {
    if (m->wake[1] >= 0) {
        char b = 1;
        if (write(m->wake[1], &b, 1) < 0) { /* full or closed: the poll's timeout ends it */
        }
    }
}

/* MON_LEFT to connection i: rank r left (destroyed the communicator) after colls collectives. */
static rl_io_t mon_send_left(struct rl_monitor *m, int i, int r, unsigned long long colls) {
    struct mon_frame f = {.magic = MON_MAGIC, .type = MON_LEFT, .rank = r, .colls = colls};
    return mon_send_bytes(m, i, &f, sizeof f, m->frame_s / 4);
}

/* A rank that left cleanly after k collectives takes part in no later one: this rank, once
 * it has called more, fails at once, naming it (it would wait for its part until the
 * deadline, then name no cause: the one rank whose call was refused, and which then
 * destroyed the communicator, say). */
static void check_left(struct ringlet_comm *c, struct rl_monitor *m) {
    if (!m->left || atomic_load(&m->leaving) || atomic_load(&c->failed)) return;
    unsigned long long mine = atomic_load(&c->colls_called);
    /* The rank that left after the fewest calls: the first collective this rank cannot
     * finish needs it (a later leaver's own call may have failed for want of it, and a
     * group can pass both counts at once). */
    int r = -1;
    for (int q = 0; q < m->nranks; q++)
        if (m->left[q] && mine > m->left[q] - 1 && (r < 0 || m->left[q] < m->left[r])) r = q;
    if (r >= 0)
        rl_comm_fail_remote(c, RINGLET_ERR_REMOTE,
                            "rank %d destroyed the communicator after %llu collective call(s), and left; this "
                            "rank has called %llu: collective #%llu needs rank %d, which will not take part",
                            r, m->left[r] - 1, mine, m->left[r], r);
}

#define SILENT_WHY "stopped, hung, or cut off by the network"

/* Heartbeats to every connection that still counts: a rank's carries the collectives it
 * has called; rank 0's, the rank that had called the fewest (itself included), with its
 * count, which rank 0 also keeps for its own calls. */
static void send_beats(struct ringlet_comm *c, struct rl_monitor *m) {
    struct mon_frame f = {MON_MAGIC, MON_ALIVE, c->rank, 0, atomic_load(&c->colls_called), -1, 0};
    if (m->is_root) {
        f.lag_rank = 0;
        for (int i = 1; i < m->nfds; i++)
            if (m->fds[i] >= 0 && !m->said_bye[i] && m->colls[i] < f.colls) f.colls = m->colls[i], f.lag_rank = i;
        atomic_store(&c->lag, rl_lag_pack(f.lag_rank, f.colls));
    }
    for (int i = 0; i < m->nfds; i++)
        if (m->fds[i] >= 0 && !m->silent[i] && !m->said_bye[i]) (void)mon_send_bytes(m, i, &f, sizeof f, m->frame_s / 4);
}

/* Connections that have been quiet for RINGLET_TIMEOUT: their rank is unresponsive. */
static void check_silence(struct ringlet_comm *c, struct rl_monitor *m) {
    double now = rl_now();
    for (int i = 0; i < m->nfds; i++) {
        if (m->fds[i] < 0 || m->silent[i] || m->said_bye[i] || now - m->heard[i] <= c->timeout_s) continue;
        /* Something waiting on it (this thread was late): the loop reads it first. */
        struct pollfd q = {m->fds[i], POLLIN, 0};
        if (poll(&q, 1, 0) > 0) continue;
        m->silent[i] = 1;
        if (atomic_load(&m->leaving)) continue;
        if (m->is_root) {
            /* Tell everybody first, as for a rank that is gone. */
            for (int k = 1; k < m->nfds; k++)
                if (k != i && m->fds[k] >= 0 && !m->silent[k] && mon_send(m, k, MON_SILENT, i, m->frame_s / 2) != RL_IO_OK)
                    RL_WARN(0, "monitor: could not tell rank %d that rank %d is unresponsive", k, i);
        }
        rl_comm_fail_remote(c, RINGLET_ERR_TIMEOUT,
                            "rank %d is unresponsive: nothing heard from it for %.0f s (RINGLET_TIMEOUT; " SILENT_WHY ")",
                            m->is_root ? i : 0, c->timeout_s);
    }
}

static void *monitor_thread(void *arg) {
    struct ringlet_comm *c = arg;
    struct rl_monitor *m = c->mon;
    struct pollfd *pf = malloc(sizeof *pf * (size_t)(m->nfds + 1));
    int *who = malloc(sizeof(int) * (size_t)m->nfds);
    if (!pf || !who) {
        free(pf), free(who);
        rl_comm_fail(c, RINGLET_ERR_SYSTEM, "monitor: out of memory");
        return NULL;
    }
    while (!atomic_load(&m->quit)) {
        if (m->is_root && atomic_load(&m->departing) == 1) {
            /* This rank's destroy began: the others hear how many collectives it called. */
            atomic_store(&m->departing, 2);
            unsigned long long mine = atomic_load(&c->colls_called);
            for (int k = 1; k < m->nfds; k++)
                if (m->fds[k] >= 0 && !m->said_bye[k]) (void)mon_send_left(m, k, 0, mine);
        }
        if (rl_now() >= m->next_beat) {
            send_beats(c, m);
            m->next_beat = rl_now() + m->beat_s;
        }
        int n = 0;
        for (int i = 0; i < m->nfds; i++)
            if (m->fds[i] >= 0) {
                pf[n] = (struct pollfd){m->fds[i], POLLIN, 0};
                who[n++] = i;
            }
        if (n == 0 && m->wake[0] < 0) {
            rl_sleep_ms(50);
            continue;
        }
        int nw = n;
        if (m->wake[0] >= 0) pf[nw++] = (struct pollfd){m->wake[0], POLLIN, 0};
        int ms = (int)((m->next_beat - rl_now()) * 1000) + 1, most = m->any_left && !atomic_load(&c->failed) ? 5 : 100;
        if (poll(pf, (nfds_t)nw, ms < 1 ? 1 : ms > most ? most : ms) <= 0) {
            check_silence(c, m);
            check_left(c, m);
            continue;
        }
        if (nw > n && pf[n].revents) { /* woken: emptied, else every poll would return at once */
            char b[16];
            while (read(m->wake[0], b, sizeof b) > 0) {
            }
        }
        for (int k = 0; k < n; k++) {
            if (!pf[k].revents) continue;
            int i = who[k];
            struct mon_frame f;
            rl_io_t r = rl_sock_recv_all(m->fds[i], &f, sizeof f, rl_now() + m->frame_s, NULL);
            if (r == RL_IO_OK && f.magic != MON_MAGIC) r = RL_IO_ERR;
            /* rank 0 knows a rank by its connection; the others, by what rank 0 says */
            if (r == RL_IO_OK && f.type == MON_WHY) r = take_why(c, m, i, m->is_root ? i : f.rank, &f);
            if (r == RL_IO_OK) m->heard[i] = rl_now();
            if (r == RL_IO_OK && f.type == MON_ALIVE) {
                if (m->is_root) {
                    m->colls[i] = f.colls;
                } else if (f.lag_rank >= 0 && f.lag_rank < m->nranks) {
                    atomic_store(&c->lag, rl_lag_pack(f.lag_rank, f.colls));
                }
            }
            char why[MON_WHY_MAX + 96];
            if (m->is_root) {
                if (r == RL_IO_OK && f.type == MON_BYE && !m->said_bye[i]) {
                    m->said_bye[i] = 1;
                    atomic_fetch_sub(&m->nlive, 1);
                    if (m->left) m->left[i] = f.colls + 1, m->any_left = 1;
                    for (int k = 1; k < m->nfds; k++) /* the others compare it with their own calls */
                        if (k != i && m->fds[k] >= 0 && !m->said_bye[k]) (void)mon_send_left(m, k, i, f.colls);
                } else if (r == RL_IO_OK && f.type == MON_READY && !atomic_load(&m->ready[i])) {
                    atomic_store(&m->ready[i], 1);
                    atomic_fetch_add(&m->nready, 1);
                    rl_comm_notify(c);
                } else if (r != RL_IO_OK) root_peer_gone(c, m, i);
            } else if (r == RL_IO_OK && f.type == MON_LEFT) {
                if (m->left && f.rank >= 0 && f.rank < m->nranks) m->left[f.rank] = f.colls + 1, m->any_left = 1;
            } else if (r == RL_IO_OK && f.type == MON_GO) {
                atomic_store(&m->go, 1);
                rl_comm_notify(c);
            } else if (r == RL_IO_OK && f.type == MON_FAILED) {
                rl_comm_fail_remote(c, RINGLET_ERR_REMOTE, "rank %d failed (%s)", f.rank,
                                    why_of(m, f.rank, why, sizeof why));
            } else if (r == RL_IO_OK && f.type == MON_SILENT) {
                rl_comm_fail_remote(c, RINGLET_ERR_TIMEOUT,
                                    "rank %d is unresponsive: rank 0 heard nothing from it for %.0f s (RINGLET_TIMEOUT; "
                                    SILENT_WHY ")", f.rank, c->timeout_s);
            } else if (r != RL_IO_OK) {
                mon_drop(m, 0);
                if (atomic_load(&m->leaving)) {
                } else if (m->left && m->left[0]) {
                    /* A rank that left before, with fewer calls, is the likelier cause (rank 0's
                     * own destroy may have followed the failure it made there); of those, the
                     * one with the fewest. One with as many as rank 0 is no likelier. */
                    int first = 0;
                    for (int q = 1; q < m->nranks; q++)
                        if (m->left[q] && m->left[q] < m->left[first]) first = q;
                    if (first)
                        rl_comm_fail_remote(c, RINGLET_ERR_REMOTE,
                                            "rank %d destroyed the communicator after %llu collective call(s), and left; "
                                            "rank 0 left too (after %llu): this rank's connection to the others' monitor "
                                            "is gone", first, m->left[first] - 1, m->left[0] - 1);
                    else
                        rl_comm_fail_remote(c, RINGLET_ERR_REMOTE,
                                            "rank 0 destroyed the communicator (after %llu collective call(s)) and left: "
                                            "this rank's connection to the others' monitor is gone",
                                            m->left[0] - 1);
                } else {
                    rl_comm_fail_remote(c, RINGLET_ERR_REMOTE,
                                        "rank 0 failed (%s)", why_of(m, 0, why, sizeof why));
                }
            }
        }
        check_silence(c, m);
        check_left(c, m);
        if (!atomic_load(&m->leaving)) say_why(c, m);
    }
    free(pf);
    free(who);
    return NULL;
}

void rl_monitor_stop(struct ringlet_comm *c, int clean) {
    struct rl_monitor *m = c->mon;
    if (!m) return;
    if (clean && m->is_root) {
        /* Rank 0 leaves last, so that nobody takes its exit for a failure. It tells the
         * others first how many collectives it called: one that has called more fails at
         * once (check_left), and its teardown then ends this wait. */
        atomic_store(&m->departing, 1); /* the monitor thread says it (it owns the connections) */
        mon_wake(m);
        double deadline = rl_now() + c->timeout_s;
        while (atomic_load(&m->nlive) > 0 && !atomic_load(&c->stop) && !atomic_load(&c->aborted) &&
               rl_now() < deadline)
            rl_sleep_ms(5); /* an abort (a watchdog's, from another thread) ends the wait: it holds close_mu */
    }
    atomic_store(&m->leaving, 1);
    atomic_store(&m->quit, 1);
    mon_wake(m);
    pthread_join(m->thread, NULL);
    if (!clean) say_why(c, m); /* an abort, or a failure the thread had no time to say */
    /* A destroy says goodbye, also of a communicator that a peer's failure or departure
     * failed: else the others would take this rank, which destroyed it, for one that died,
     * and that could hide the cause they should name (the rank that left first). */
    char own[RL_MSG_MAX];
    /* Also after an abort (a program's usual answer to an error): one made before any
     * failure is this rank's own (it said why), one after a peer's is not. */
    int lost = 0, bye = clean || (atomic_load(&c->failed) && !rl_comm_own_failure(c, own, sizeof own, &lost));
    unsigned long long mine = atomic_load(&c->colls_called);
    if (bye && !m->is_root && m->fds[0] >= 0) {
        struct mon_frame f = {.magic = MON_MAGIC, .type = MON_BYE, .rank = c->rank, .colls = mine};
        (void)mon_send_bytes(m, 0, &f, sizeof f, m->frame_s > 0 ? m->frame_s : 2.0);
    } else if (bye && !clean && m->is_root) {
        for (int k = 1; k < m->nfds; k++) /* rank 0 relays no more: it says its own */
            if (m->fds[k] >= 0 && !m->said_bye[k]) (void)mon_send_left(m, k, 0, mine);
    }
    mon_close(m);
    c->mon = NULL;
}

ringlet_result_t rl_boot_ready(struct ringlet_comm *c, char *err) {
    struct rl_monitor *m = c->mon;
    if (!m || c->nranks == 1) return RINGLET_SUCCESS;
    double deadline = rl_now() + c->timeout_s, send_s = c->timeout_s < 10 ? c->timeout_s : 10;
    if (!m->is_root && mon_send(m, 0, MON_READY, c->rank, send_s) != RL_IO_OK) {
        /* Rank 0 is gone: the monitor says so (at once). */
        while (!atomic_load(&c->failed) && !atomic_load(&c->stop) && rl_now() < deadline)
            rl_comm_wait_event(c, rl_comm_gen(c), 20);
        if (!atomic_load(&c->failed))
            return snprintf(err, RL_MSG_MAX, "bootstrap: could not tell rank 0 that this rank's init is done"),
                   RINGLET_ERR_REMOTE;
    }
    for (;;) {
        unsigned gen = rl_comm_gen(c);
        if (atomic_load(&c->failed) || atomic_load(&c->stop)) {
            /* A peer's failure (its message is the communicator's), or a stop token. */
            return snprintf(err, RL_MSG_MAX, "%s",
                            atomic_load(&c->failed) ? "a peer failed while this rank finished its init"
                                                    : "stopped while waiting for the other ranks' inits"),
                   atomic_load(&c->failed) ? RINGLET_ERR_REMOTE : RINGLET_ERR_INVALID_USAGE;
        }
        if (m->is_root ? atomic_load(&m->nready) == c->nranks - 1 : atomic_load(&m->go)) break;
        if (rl_now() >= deadline) {
            if (!m->is_root)
                return snprintf(err, RL_MSG_MAX, "bootstrap: rank 0 did not say within %.0f s (RINGLET_TIMEOUT) that "
                                "every rank's init is done", c->timeout_s), RINGLET_ERR_TIMEOUT;
            /* One read of the flags for the count and the list: a rank may turn ready meanwhile. */
            char list[RL_MSG_MAX / 2] = "";
            int late = 0, n = 0;
            for (int i = 1; i < m->nfds; i++)
                if (!atomic_load(&m->ready[i]) && late++ < 16 && n < (int)sizeof list - 16)
                    n += snprintf(list + n, sizeof list - (size_t)n, " rank %d", i);
            return snprintf(err, RL_MSG_MAX, "bootstrap: %d of %d ranks did not finish their init within %.0f s "
                            "(RINGLET_TIMEOUT):%s", late, c->nranks, c->timeout_s, list),
                   RINGLET_ERR_TIMEOUT;
        }
        rl_comm_wait_event(c, gen, 20);
    }
    if (m->is_root)
        for (int i = 1; i < m->nfds; i++)
            if (mon_send(m, i, MON_GO, 0, send_s) != RL_IO_OK)
                RL_INFO(0, "bootstrap: could not tell rank %d that every init is done (the monitor reports why)", i);
    return RINGLET_SUCCESS;
}
