/* The IB transport's progress thread (see ib.c): it polls every connection's completion
 * queue and moves it on, checks deadlines and *stop, handles async events, and sleeps in
 * poll() on the completion channel, the async-event fd and the handshake sockets. */
#include <poll.h>
#include <pthread.h>
#include <stdlib.h>
#include <unistd.h>

#include "ib.h"
#include "ib_conn.h"
#include "log.h"
#include "util.h"

#ifdef RL_HAVE_VERBS

static int conn_listed(struct ib_ctx *x, struct ib_conn *c) {
    for (struct ib_conn *p = x->conns; p; p = p->next)
        if (p == c) return 1;
    return 0;
}

/* x->mu held. */
static int sweep(struct ib_ctx *x) {
    int work = 0;
    double now = rl_now();
    int stop = atomic_load(x->in.stop);
    for (struct ib_conn *c = x->conns; c; c = c->next) {
        pthread_mutex_lock(&c->mu);
        work += rl_ib_drain_cq(c);
        if (stop && c->state != ST_BROKEN)
            rl_ib_conn_break(c, RINGLET_ERR_REMOTE, "%s rank %d: stopped (communicator failed or aborted)", rl_ib_dir_str(c),
                       c->peer);
        if (c->state != ST_BROKEN && c->wait_since > 0 && now - c->wait_since > x->in.timeout_s) {
            if (c->state == ST_PENDING)
                rl_ib_conn_break(c, RINGLET_ERR_TIMEOUT,
                           "send to rank %d: rank %d has not accepted the IB connection within %.0f s (RINGLET_TIMEOUT)",
                           c->peer, c->peer, x->in.timeout_s);
            else
                rl_ib_conn_break(c, RINGLET_ERR_TIMEOUT,
                           "send to rank %d: rank %d returned no credits for %.0f s: it stopped receiving "
                           "(RINGLET_TIMEOUT)",
                           c->peer, c->peer, x->in.timeout_s);
        }
        pthread_mutex_unlock(&c->mu);
    }
    return work;
}

/* The device failed: every connection with it (x->mu held). */
static void break_all(struct ib_ctx *x, const char *why) {
    for (struct ib_conn *p = x->conns; p; p = p->next) {
        pthread_mutex_lock(&p->mu);
        rl_ib_conn_break(p, RINGLET_ERR_SYSTEM, "%s rank %d: %s: %s", rl_ib_dir_str(p), p->peer, x->port.dev, why);
        pthread_mutex_unlock(&p->mu);
    }
}

static void async_events(struct ib_ctx *x) {
    struct ibv_async_event ev;
    while (x->v->get_async_event(x->port.ctx, &ev) == 0) {
        struct ib_conn *c = NULL;
        switch (ev.event_type) {
        case IBV_EVENT_QP_FATAL:
        case IBV_EVENT_QP_REQ_ERR:
        case IBV_EVENT_QP_ACCESS_ERR:
        case IBV_EVENT_PATH_MIG_ERR: c = ev.element.qp ? ev.element.qp->qp_context : NULL; break;
        case IBV_EVENT_CQ_ERR: c = ev.element.cq ? ev.element.cq->cq_context : NULL; break;
        case IBV_EVENT_PORT_ERR:
        case IBV_EVENT_DEVICE_FATAL:
            /* a port event covers its port only: another port's is not this rank's */
            if (ev.event_type == IBV_EVENT_PORT_ERR && ev.element.port_num != x->port.port) break;
            RL_WARN(x->in.rank, "ib: %s on %s port %d", x->v->event_type_str(ev.event_type), x->port.dev, x->port.port);
            if (ev.event_type == IBV_EVENT_DEVICE_FATAL) break_all(x, "device fatal error");
            break;
        case IBV_EVENT_LID_CHANGE:
        case IBV_EVENT_GID_CHANGE:
        case IBV_EVENT_CLIENT_REREGISTER:
        case IBV_EVENT_SM_CHANGE:
            /* connections made from now on still use the address published at init (the
             * device's events cover its every port: this one's only) */
            if (ev.element.port_num != x->port.port) break;
            RL_WARN(x->in.rank, "ib: %s on %s port %d: connections not made yet may fail (the address this rank "
                    "published at init may be stale)", x->v->event_type_str(ev.event_type), x->port.dev, x->port.port);
            break;
        case IBV_EVENT_PORT_ACTIVE:
            if (ev.element.port_num != x->port.port) break;
            RL_INFO(x->in.rank, "ib: %s port %d is active again", x->port.dev, x->port.port);
            break;
        default: break;
        }
        if (c && conn_listed(x, c)) {
            pthread_mutex_lock(&c->mu);
            if (!(c->peer_closed && !c->is_send))
                rl_ib_conn_break(c, RINGLET_ERR_REMOTE, "%s rank %d: queue pair error: %s", rl_ib_dir_str(c), c->peer,
                           x->v->event_type_str(ev.event_type));
            pthread_mutex_unlock(&c->mu);
        }
        x->v->ack_async_event(&ev);
    }
}

void rl_ib_wake(struct ib_ctx *x) {
    char b = 1;
    ssize_t r = write(x->wake[1], &b, 1); /* full: a wake is already pending */
    (void)r;
}

void *rl_ib_progress_main(void *arg) {
    struct ib_ctx *x = arg;
    struct pollfd *pfd = NULL;
    struct ib_conn **pconn = NULL;
    size_t cap = 0;
    pthread_mutex_lock(&x->mu);
    while (!x->quit) {
        int work = sweep(x);
        if (!work && x->spin_s > 0) {
            double until = rl_now() + x->spin_s;
            while (!work && !x->quit && rl_now() < until) {
                pthread_mutex_unlock(&x->mu);
                pthread_mutex_lock(&x->mu);
                work = sweep(x);
            }
        }
        if (!work) {
            /* Arm, then look once more: a completion between the sweep and the arming
             * would otherwise sleep until the next one. */
            for (struct ib_conn *c = x->conns; c; c = c->next)
                if (c->cq) ibv_req_notify_cq(c->cq, 0);
            work = sweep(x);
        }
        if (work) {
            pthread_mutex_unlock(&x->mu); /* let connect/accept/close in */
            pthread_mutex_lock(&x->mu);
            continue;
        }
        size_t n = 3;
        for (struct ib_conn *c = x->conns; c; c = c->next) n += c->fd >= 0;
        if (n > cap) {
            struct pollfd *np = realloc(pfd, n * sizeof *pfd);
            if (np) pfd = np;
            struct ib_conn **nc = realloc(pconn, n * sizeof *pconn);
            if (nc) pconn = nc;
            if (np && nc) cap = n;
            else n = cap; /* out of memory: watch fewer sockets this round */
        }
        size_t i = 0;
        if (cap >= 3) {
            /* poll skips a negative fd */
            pfd[i++] = (struct pollfd){x->ch_dead ? -1 : x->ch->fd, POLLIN, 0};
            pfd[i++] = (struct pollfd){x->async_dead ? -1 : x->port.ctx->async_fd, POLLIN, 0};
            pfd[i++] = (struct pollfd){x->wake[0], POLLIN, 0};
            for (struct ib_conn *c = x->conns; c && i < n; c = c->next)
                if (c->fd >= 0) {
                    pconn[i] = c;
                    pfd[i++] = (struct pollfd){c->fd, POLLIN, 0};
                }
        }
        pthread_mutex_unlock(&x->mu);
        if (i) poll(pfd, (nfds_t)i, 100);
        else rl_sleep_ms(10);
        pthread_mutex_lock(&x->mu);
        if (x->quit) break;
        struct ibv_cq *cq;
        void *cqctx;
        while (x->v->get_cq_event(x->ch, &cq, &cqctx) == 0) x->v->ack_cq_events(cq, 1);
        if (i >= 2 && pfd[1].revents) async_events(x);
        /* After a device's disassociation (reset, removal) the kernel makes both event fds
         * report POLLERR at every poll and fail every read: watched still, they would spin
         * this thread until the communicator is freed. */
        if (i >= 2 && (pfd[0].revents & (POLLERR | POLLHUP | POLLNVAL))) x->ch_dead = 1;
        if (i >= 2 && (pfd[1].revents & (POLLERR | POLLHUP | POLLNVAL)) && !x->async_dead) {
            x->async_dead = 1;
            RL_WARN(x->in.rank, "ib: %s: the device's event queue closed (the device was reset or removed)",
                    x->port.dev);
            break_all(x, "the device was reset or removed");
        }
        if (i >= 3 && pfd[2].revents) {
            char buf[64];
            while (read(x->wake[0], buf, sizeof buf) > 0) {
            }
        }
        for (size_t j = 3; j < i; j++) {
            if (!pfd[j].revents) continue;
            struct ib_conn *c = pconn[j];
            if (!conn_listed(x, c)) continue;
            pthread_mutex_lock(&c->mu);
            if (c->fd == pfd[j].fd) rl_ib_on_socket(c);
            pthread_mutex_unlock(&c->mu);
        }
    }
    pthread_mutex_unlock(&x->mu);
    free(pfd);
    free(pconn);
    return NULL;
}

#endif /* RL_HAVE_VERBS */
