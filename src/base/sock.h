/* TCP socket helpers with deadlines: every blocking step polls in short slices and
 * gives up at the deadline or when *stop becomes non-zero. Used by the bootstrap and
 * the TCP transport. */
#ifndef RINGLET_SOCK_H
#define RINGLET_SOCK_H

#include <stdatomic.h>
#include <stddef.h>
#include <sys/socket.h>

typedef enum { RL_IO_OK = 0, RL_IO_EOF, RL_IO_ERR, RL_IO_TIMEOUT, RL_IO_STOPPED } rl_io_t;

const char *rl_io_str(rl_io_t r);
/* Listening socket bound to addr (port 0 = any free port; IPv6's any address is dual-stack,
 * taking IPv4 too); *fd, and the bound address back in *addr. 0 or -errno. */
int rl_sock_listen(struct sockaddr_storage *addr, socklen_t *len, int *fd);
/* Connects, retrying refused/unreachable attempts every 2-512 ms until the deadline (and a
 * socket that connected to itself, as one to a port of this host nobody listens on can).
 * RL_IO_ERR is this process's own failure (out of descriptors or ports, no route allowed),
 * with the errno in *fd as -errno. */
rl_io_t rl_sock_connect(const struct sockaddr_storage *addr, socklen_t len, double deadline, const atomic_int *stop,
                        int *fd);
/* Accepts one connection; RL_IO_TIMEOUT at the deadline (checked before each accept:
 * connections still queued then are left). RL_IO_ERR is this process's own failure (out
 * of descriptors or memory), with accept's errno in *fd as -errno. */
rl_io_t rl_sock_accept(int lfd, double deadline, const atomic_int *stop, int *fd);
/* The same without waiting: RL_IO_TIMEOUT when no connection is pending. */
rl_io_t rl_sock_accept_now(int lfd, int *fd);
/* Whole buffer, on a non-blocking socket. */
rl_io_t rl_sock_send_all(int fd, const void *buf, size_t len, double deadline, const atomic_int *stop);
rl_io_t rl_sock_recv_all(int fd, void *buf, size_t len, double deadline, const atomic_int *stop);
/* Non-blocking, TCP_NODELAY, and (bufsize > 0) buffers of bufsize where the kernel's own
 * sizing would not reach that many bytes (rl_sock_buf_fixed). */
void rl_sock_tune(int fd, int bufsize);
/* How rl_sock_tune treats a wish for bufsize bytes of socket buffer, given the kernel's
 * autotuning maximum (tcp_[rw]mem's third number) and net.core.[rw]mem_max (0: unknown):
 * 0 leaves the kernel's sizing (it reaches bufsize itself: a set size would stop its
 * growth and cap the window), 1 sets it (forced where allowed), 2 sets it only forced
 * (a plain set would be clamped below what autotuning reaches). */
int rl_sock_buf_fixed(long bufsize, long autotune_max, long core_max);
/* The kernel's autotuning maximum for a TCP socket's receive (rcv) or send buffer:
 * tcp_rmem's or tcp_wmem's third number; 0 when unreadable. */
long rl_sock_autotune_max(int rcv);
int rl_sock_set_nonblock(int fd);
/* Port of a bound or connected address. */
int rl_sockaddr_port(const struct sockaddr_storage *a);
void rl_sockaddr_set_port(struct sockaddr_storage *a, int port);
socklen_t rl_sockaddr_len(const struct sockaddr_storage *a);

#endif
