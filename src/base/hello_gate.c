#include "hello_gate.h"

#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "log.h"
#include "util.h"

int rl_gate_init(rl_gate *g, int lfd, size_t hello_len) {
    memset(g, 0, sizeof *g);
    g->lfd = lfd;
    g->len = hello_len;
    g->bufs = malloc(RL_GATE_MAX * hello_len);
    return g->bufs ? 0 : -1;
}

/* Drops waiting connection i (the last one takes its place). */
static void drop(rl_gate *g, int i) {
    g->n--;
    if (i != g->n) {
        g->w[i] = g->w[g->n];
        memcpy(g->bufs + (size_t)i * g->len, g->bufs + (size_t)g->n * g->len, g->w[i].got);
    }
}

/* Takes the connections pending on the listener while places are free. */
static rl_io_t take_pending(rl_gate *g, int *err_no) {
    while (g->n < RL_GATE_MAX) {
        int fd;
        rl_io_t r = rl_sock_accept_now(g->lfd, &fd);
        if (r == RL_IO_TIMEOUT) break;
        if (r != RL_IO_OK) {
            *err_no = -fd;
            return r;
        }
        g->w[g->n].fd = fd;
        g->w[g->n].got = 0;
        g->w[g->n].until = rl_now() + RL_GATE_HELLO_S;
        g->n++;
    }
    return RL_IO_OK;
}

/* Reads what has come of every waiting hello: hands on the whole ones, closes the dead. */
static void read_hellos(rl_gate *g, rl_gate_fn fn, void *arg, const char *tp, int rank) {
    double now = rl_now();
    for (int i = 0; i < g->n;) {
        unsigned char *buf = g->bufs + (size_t)i * g->len;
        int fd = g->w[i].fd;
        const char *why = NULL;
        ssize_t k = -1;
        while (g->w[i].got < g->len && (k = recv(fd, buf + g->w[i].got, g->len - g->w[i].got, MSG_DONTWAIT)) > 0)
            g->w[i].got += (size_t)k;
        if (g->w[i].got == g->len) {
            /* copied out first: dropping i moves the last waiter's bytes into its place */
            unsigned char hello[g->len];
            memcpy(hello, buf, g->len);
            drop(g, i);
            fn(arg, fd, hello);
            continue;
        }
        if (k == 0) why = "closed before its hello";
        else if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) why = strerror(errno);
        else if (now >= g->w[i].until) why = "no hello within 5 s";
        if (why) {
            RL_WARN(rank, "%s: refused a connection that did not authenticate (%s)", tp, why);
            close(fd);
            drop(g, i);
            continue;
        }
        i++;
    }
}

rl_io_t rl_gate_step(rl_gate *g, rl_gate_fn fn, void *arg, const char *tp, int rank, int *err_no) {
    *err_no = 0;
    /* The hellos already taken first: an accept that fails (out of descriptors: accept
     * takes one before it looks) must not keep a peer waiting here from its filing. */
    read_hellos(g, fn, arg, tp, rank);
    rl_io_t r = take_pending(g, err_no);
    read_hellos(g, fn, arg, tp, rank);
    return r;
}

void rl_gate_wait(const rl_gate *g, double until) {
    struct pollfd p[RL_GATE_MAX + 1];
    int n = 0;
    double now = rl_now(), end = until;
    if (g->n < RL_GATE_MAX) p[n++] = (struct pollfd){g->lfd, POLLIN, 0};
    for (int i = 0; i < g->n; i++) {
        p[n++] = (struct pollfd){g->w[i].fd, POLLIN, 0};
        if (g->w[i].until < end) end = g->w[i].until;
    }
    double ms = (end - now) * 1000;
    if (ms > 100) ms = 100;
    if (ms < 0) ms = 0;
    poll(p, (nfds_t)n, (int)ms + (ms > 0));
}

void rl_gate_fini(rl_gate *g) {
    for (int i = 0; i < g->n; i++) close(g->w[i].fd);
    g->n = 0;
    free(g->bufs);
    g->bufs = NULL;
}
