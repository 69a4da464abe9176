/* Unit test for rl_sock_connect (src/base/sock.c) against a socket connected to itself.
 * A connect to a port of this host where nothing listens yet can draw that very port as
 * its source port (one in the ephemeral range: a MASTER_PORT chosen there), and TCP's
 * simultaneous open then succeeds: the caller would wait for an answer until its deadline.
 * Here the state is made by construction: this executable's connect binds the socket to
 * the destination first, which makes every attempt meet itself. rl_sock_connect must not
 * return such a socket; it retries until its deadline (RL_IO_TIMEOUT). Then, with a
 * listener on the port and connect left alone, it connects (RL_IO_OK) to the listener.
 * Exit status 0 on success. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "sock.h"
#include "util.h"

static int g_meet_itself;

/* The library's connect calls land here (this definition is the executable's). */
int connect(int fd, const struct sockaddr *addr, socklen_t len) {
    if (g_meet_itself) {
        int one = 1;
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        bind(fd, addr, len); /* may fail (the port's last self-connection in TIME_WAIT): refused then */
    }
    return (int)syscall(SYS_connect, fd, addr, len);
}

int main(void) {
    int failures = 0;
    /* A free port of the loopback: bound, read, closed. */
    struct sockaddr_storage ss;
    memset(&ss, 0, sizeof ss);
    struct sockaddr_in *in = (struct sockaddr_in *)&ss;
    in->sin_family = AF_INET;
    in->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof *in;
    int probe = socket(AF_INET, SOCK_STREAM, 0);
    if (probe < 0 || bind(probe, (struct sockaddr *)in, len) != 0 || getsockname(probe, (struct sockaddr *)in, &len) != 0) {
        perror("a free port");
        return 1;
    }
    close(probe);

    g_meet_itself = 1;
    int fd = -1;
    double t0 = rl_now();
    rl_io_t r = rl_sock_connect(&ss, sizeof *in, rl_now() + 0.5, NULL, &fd);
    g_meet_itself = 0;
    printf("connect to port %d, every attempt meeting itself: %s after %.2f s\n", ntohs(in->sin_port), rl_io_str(r),
           rl_now() - t0);
    if (r == RL_IO_OK) {
        printf("FAIL rl_sock_connect returned a socket connected to itself\n");
        failures++;
        close(fd);
    } else if (r != RL_IO_TIMEOUT) {
        printf("FAIL rl_sock_connect gave %s, not a timeout\n", rl_io_str(r));
        failures++;
    }

    /* The same port with a listener: a genuine connection. */
    int lfd = -1;
    socklen_t ll = sizeof *in;
    struct sockaddr_storage la = ss;
    if (rl_sock_listen(&la, &ll, &lfd) != 0) {
        printf("FAIL listen on port %d\n", ntohs(in->sin_port));
        return 1;
    }
    r = rl_sock_connect(&la, ll, rl_now() + 30, NULL, &fd);
    if (r != RL_IO_OK) {
        printf("FAIL connect to a listener: %s\n", rl_io_str(r));
        failures++;
    } else {
        close(fd);
    }
    close(lfd);
    printf(failures ? "test_sock_self: %d failed\n" : "test_sock_self: all passed\n", failures);
    return failures ? 1 : 0;
}
