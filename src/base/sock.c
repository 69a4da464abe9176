#include "sock.h"

#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "util.h"

#define SLICE_MS 100 /* how often a blocked step looks at its stop flag */

const char *rl_io_str(rl_io_t r) {
    switch (r) {
    case RL_IO_OK: return "ok";
    case RL_IO_EOF: return "connection closed by peer";
    case RL_IO_ERR: return "socket error";
    case RL_IO_TIMEOUT: return "timed out";
    case RL_IO_STOPPED: return "stopped";
    }
    return "?";
}

int rl_sock_set_nonblock(int fd) {
    int fl = fcntl(fd, F_GETFL);
    if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0) return -errno;
    return 0;
}

socklen_t rl_sockaddr_len(const struct sockaddr_storage *a) {
    return a->ss_family == AF_INET6 ? sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in);
}

int rl_sockaddr_port(const struct sockaddr_storage *a) {
    if (a->ss_family == AF_INET6) return ntohs(((const struct sockaddr_in6 *)a)->sin6_port);
    return ntohs(((const struct sockaddr_in *)a)->sin_port);
}

void rl_sockaddr_set_port(struct sockaddr_storage *a, int port) {
    if (a->ss_family == AF_INET6) ((struct sockaddr_in6 *)a)->sin6_port = htons((uint16_t)port);
    else ((struct sockaddr_in *)a)->sin_port = htons((uint16_t)port);
}

/* A number of a /proc/sys file: the field-th (from 0) of its numbers; 0 if unreadable. */
static long sysctl_field(const char *path, int field) {
    FILE *f = fopen(path, "re");
    long v = 0;
    if (!f) return 0;
    for (int i = 0; i <= field; i++)
        if (fscanf(f, "%ld", &v) != 1) v = 0;
    fclose(f);
    return v;
}

long rl_sock_autotune_max(int rcv) {
    return sysctl_field(rcv ? "/proc/sys/net/ipv4/tcp_rmem" : "/proc/sys/net/ipv4/tcp_wmem", 2);
}

int rl_sock_buf_fixed(long bufsize, long autotune_max, long core_max) {
    /* Linux grows a buffer it sizes itself up to tcp_[rw]mem's maximum; a size set on the
     * socket stops that for good, and is clamped to net.core.[rw]mem_max (then doubled)
     * unless forced. So a size is set only above what the kernel would reach anyway. */
    if (bufsize <= 0 || (autotune_max > 0 && bufsize <= autotune_max)) return 0;
    return 1 + (core_max > 0 && bufsize > core_max && autotune_max > 0 && 2 * core_max < autotune_max);
}

void rl_sock_tune(int fd, int bufsize) {
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if (bufsize > 0) {
        static const int opts[2] = {SO_SNDBUF, SO_RCVBUF}, forced[2] = {SO_SNDBUFFORCE, SO_RCVBUFFORCE};
        static const char *const core[2] = {"/proc/sys/net/core/wmem_max", "/proc/sys/net/core/rmem_max"};
        for (int i = 0; i < 2; i++) {
            int how = rl_sock_buf_fixed(bufsize, rl_sock_autotune_max(i), sysctl_field(core[i], 0));
            /* 1: set (forced where allowed); 2: only a forced set helps (a plain one would
             * be clamped below what autotuning reaches) */
            if (how && setsockopt(fd, SOL_SOCKET, forced[i], &bufsize, sizeof bufsize) != 0 && how == 1)
                setsockopt(fd, SOL_SOCKET, opts[i], &bufsize, sizeof bufsize);
        }
    }
    rl_sock_set_nonblock(fd);
}

int rl_sock_listen(struct sockaddr_storage *addr, socklen_t *len, int *fd) {
    int s = socket(addr->ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (s < 0) return -errno;
    int one = 1, zero = 0;
    setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    /* IPv6's any address takes IPv4 connections too, whatever net.ipv6.bindv6only says */
    if (addr->ss_family == AF_INET6 &&
        IN6_IS_ADDR_UNSPECIFIED(&((const struct sockaddr_in6 *)addr)->sin6_addr))
        setsockopt(s, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero);
    if (bind(s, (struct sockaddr *)addr, rl_sockaddr_len(addr)) < 0 || listen(s, 1024) < 0) {
        int e = -errno;
        close(s);
        return e;
    }
    *len = sizeof *addr;
    getsockname(s, (struct sockaddr *)addr, len);
    rl_sock_set_nonblock(s);
    *fd = s;
    return 0;
}

static int slice(double deadline) {
    double left = deadline - rl_now();
    if (left <= 0) return 0;
    return left * 1000 < SLICE_MS ? (int)(left * 1000) + 1 : SLICE_MS;
}

static int stopped(const atomic_int *stop) { return stop && atomic_load(stop); }

/* Whether s is connected to itself: a connect to a port of this host where nothing listens
 * yet can draw that very port as its source (a port in the ephemeral range), and TCP's
 * simultaneous open then succeeds. The peer would never answer. */
static int connected_to_itself(int s) {
    struct sockaddr_storage a, b;
    socklen_t la = sizeof a, lb = sizeof b;
    if (getsockname(s, (struct sockaddr *)&a, &la) != 0 || getpeername(s, (struct sockaddr *)&b, &lb) != 0) return 0;
    return la == lb && memcmp(&a, &b, la) == 0;
}

rl_io_t rl_sock_connect(const struct sockaddr_storage *addr, socklen_t len, double deadline, const atomic_int *stop,
                        int *fd) {
    int backoff = 2; /* ms, doubling to 512: a listener that comes up soon is met soon */
    for (;;) {
        if (stopped(stop)) return RL_IO_STOPPED;
        if (rl_now() >= deadline) return RL_IO_TIMEOUT;
        int s = socket(addr->ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        if (s < 0) {
            *fd = -errno;
            return RL_IO_ERR;
        }
        int r = connect(s, (const struct sockaddr *)addr, len);
        if (r < 0 && errno == EINPROGRESS) {
            struct pollfd p = {s, POLLOUT, 0};
            /* a signal (a profiler's timer) interrupts the poll, not the connect: poll again;
             * taken for a timeout, each one restarted the connect, and a link slower than the
             * signals never connected */
            while (((r = poll(&p, 1, slice(deadline))) == 0 || (r < 0 && errno == EINTR)) && rl_now() < deadline &&
                   !stopped(stop)) {
            }
            if (r > 0) {
                int err = 0;
                socklen_t el = sizeof err;
                getsockopt(s, SOL_SOCKET, SO_ERROR, &err, &el);
                r = err ? -1 : 0;
                errno = err;
            } else if (r < 0 && errno != EINTR) {
                r = -1; /* poll's own failure (no memory): errno says why, not retried as a timeout */
            } else {
                r = -1;
                errno = ETIMEDOUT;
            }
        }
        if (r == 0 && connected_to_itself(s)) {
            r = -1;
            errno = ECONNREFUSED; /* nobody listens there yet: retried */
        }
        if (r == 0) {
            *fd = s;
            return RL_IO_OK;
        }
        int e = errno;
        close(s);
        /* The network's or the peer's state (retried until the deadline); anything else is
         * this process's own (descriptors, ports, permissions). */
        int network = e == ECONNREFUSED || e == ETIMEDOUT || e == EHOSTUNREACH || e == ENETUNREACH || e == ECONNRESET ||
                      e == EAGAIN || e == EINTR || e == ENETDOWN || e == EHOSTDOWN || e == EPROTO ||
                      e == ECONNABORTED || e == ENONET;
        if (!network) {
            *fd = -e;
            return RL_IO_ERR;
        }
        /* The listener may not be up yet: retry until the deadline. */
        double left = deadline - rl_now();
        if (left <= 0) return RL_IO_TIMEOUT;
        int wait_ms = left * 1000 < backoff ? (int)(left * 1000) + 1 : backoff;
        for (int slept = 0; slept < wait_ms && !stopped(stop); slept += 100) /* a stop is seen within 100 ms */
            rl_sleep_ms(wait_ms - slept < 100 ? wait_ms - slept : 100);
        if (backoff < 512) backoff *= 2;
    }
}

rl_io_t rl_sock_accept_now(int lfd, int *fd) {
    for (;;) {
        int s = accept4(lfd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (s >= 0) {
            *fd = s;
            return RL_IO_OK;
        }
        /* Linux hands a pending connection's network error to accept: taken as "try again"
         * (accept(2)), as the connection is gone; what is left (out of descriptors or
         * memory) is this rank's own. */
        int e = errno;
        if (e == EAGAIN || e == EWOULDBLOCK) return RL_IO_TIMEOUT;
        int again = e == EINTR || e == ECONNABORTED || e == ENETDOWN || e == EPROTO || e == ENOPROTOOPT ||
                    e == EHOSTDOWN || e == ENONET || e == EHOSTUNREACH || e == EOPNOTSUPP || e == ENETUNREACH;
        if (!again) {
            *fd = -e;
            return RL_IO_ERR;
        }
    }
}

rl_io_t rl_sock_accept(int lfd, double deadline, const atomic_int *stop, int *fd) {
    for (;;) {
        /* The deadline first: a stream of strangers, each taken off the backlog and
         * refused, must not keep the caller past it. */
        if (stopped(stop)) return RL_IO_STOPPED;
        if (rl_now() >= deadline) return RL_IO_TIMEOUT;
        rl_io_t r = rl_sock_accept_now(lfd, fd);
        if (r != RL_IO_TIMEOUT) return r;
        struct pollfd p = {lfd, POLLIN, 0};
        poll(&p, 1, slice(deadline));
    }
}

static rl_io_t io_all(int fd, char *buf, size_t len, int is_send, double deadline, const atomic_int *stop) {
    while (len > 0) {
        ssize_t n = is_send ? send(fd, buf, len, MSG_NOSIGNAL) : recv(fd, buf, len, 0);
        if (n > 0) {
            buf += n;
            len -= (size_t)n;
            continue;
        }
        if (n == 0 && !is_send) return RL_IO_EOF;
        if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
            return (errno == ECONNRESET || errno == EPIPE) ? RL_IO_EOF : RL_IO_ERR;
        if (stopped(stop)) return RL_IO_STOPPED;
        if (rl_now() >= deadline) return RL_IO_TIMEOUT;
        struct pollfd p = {fd, is_send ? POLLOUT : POLLIN, 0};
        poll(&p, 1, slice(deadline));
    }
    return RL_IO_OK;
}

rl_io_t rl_sock_send_all(int fd, const void *buf, size_t len, double deadline, const atomic_int *stop) {
    return io_all(fd, (char *)buf, len, 1, deadline, stop);
}

rl_io_t rl_sock_recv_all(int fd, void *buf, size_t len, double deadline, const atomic_int *stop) {
    return io_all(fd, buf, len, 0, deadline, stop);
}
