/* ringlet-run's output: each line a rank writes goes out whole, with a "[RANK] " prefix,
 * stdout to stdout and stderr to stderr (one queue when they are one file), batched per
 * destination and written without blocking; the launcher's own messages follow what was
 * already collected. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "run.h"

bool write_all(int fd, const char *p, size_t n)
{
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w > 0) {
            p += w;
            n -= (size_t)w;
        } else if (w < 0 && errno == EINTR) {
            continue;
        } else if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            struct pollfd pfd = {.fd = fd, .events = POLLOUT};
            (void)poll(&pfd, 1, 1000);
        } else {
            return false;
        }
    }
    return true;
}

/* What waits to go to stdout or stderr. Written only as far as the destination takes it
 * without blocking (poll first, at most PIPE_BUF per write: a pipe that polls writable
 * takes that much whole), so a reader that stalls never stops the launcher from minding
 * its deadlines, signals and ranks; past OUT_BACKLOG the ranks' pipes are left unread
 * (outputs_backlogged), and the ranks wait on them as they would on a full terminal. */
struct outbuf {
    int fd;
    bool dead; /* the destination is closed: keep draining ranks, drop their output */
    bool gone; /* dead because its reader left (EPIPE, POLLERR): the ranks are told */
    bool sock; /* a socket: written with MSG_DONTWAIT */
    size_t len, cap;
    char *data;
};

static struct outbuf out_o = {.fd = STDOUT_FILENO};
static struct outbuf out_e = {.fd = STDERR_FILENO};
/* Where stderr's lines go: out_o when stdout and stderr are one file (2>&1), so that a
 * line written in part (a pipe that took only some) is never cut by the other's lines. */
static struct outbuf *err_dest = &out_e;

/* A terminal polls writable with less room than PIPE_BUF, and a blocking write there
 * would stop the launcher (deadlines, signals) while nobody reads it: it gets an open
 * file of its own, non-blocking (the one shared with the shell stays as it was). A
 * socket is written with MSG_DONTWAIT. */
static void dest_init(struct outbuf *ob, int fd)
{
    struct stat st;
    if (fstat(fd, &st) != 0)
        return;
    ob->sock = S_ISSOCK(st.st_mode);
    if (!isatty(fd))
        return;
    char path[32];
    snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    int own = open(path, O_WRONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
    if (own >= 0)
        ob->fd = own;
}

void outputs_init(void)
{
    struct stat so, se;
    if (fstat(STDOUT_FILENO, &so) == 0 && fstat(STDERR_FILENO, &se) == 0 && so.st_dev == se.st_dev &&
        so.st_ino == se.st_ino)
        err_dest = &out_o;
    dest_init(&out_o, STDOUT_FILENO);
    if (err_dest != &out_o)
        dest_init(&out_e, STDERR_FILENO);
}

/* Writes what the destination takes now; true if anything went. */
static bool out_try(struct outbuf *ob)
{
    size_t off = 0;
    while (off < ob->len && !ob->dead) {
        struct pollfd pfd = {.fd = ob->fd, .events = POLLOUT};
        int pr = poll(&pfd, 1, 0);
        if (pr < 0 && errno == EINTR)
            continue;
        if (pr <= 0)
            break;
        if (pfd.revents & (POLLERR | POLLNVAL)) {
            ob->dead = true;
            ob->gone = (pfd.revents & POLLERR) != 0;
            break;
        }
        size_t n = ob->len - off < PIPE_BUF ? ob->len - off : PIPE_BUF;
        ssize_t w = ob->sock ? send(ob->fd, ob->data + off, n, MSG_DONTWAIT | MSG_NOSIGNAL)
                             : write(ob->fd, ob->data + off, n);
        if (w > 0)
            off += (size_t)w;
        else if (w < 0 && errno == EINTR)
            continue;
        else if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            break;
        else
            ob->dead = true, ob->gone = w < 0 && errno == EPIPE; /* a full disk: dropped, the job goes on */
    }
    if (ob->dead) {
        ob->len = 0;
    } else if (off > 0) {
        memmove(ob->data, ob->data + off, ob->len - off);
        ob->len -= off;
    }
    return off > 0;
}

static void out_put(struct outbuf *ob, const char *p, size_t n)
{
    if (ob->dead || n == 0)
        return;
    if (ob->len + n > ob->cap) {
        size_t cap = ob->cap ? ob->cap : OUT_BUF;
        while (cap < ob->len + n)
            cap *= 2;
        char *d = realloc(ob->data, cap);
        if (d == NULL) { /* out of memory: what does not fit is lost */
            return;
        }
        ob->data = d;
        ob->cap = cap;
    }
    memcpy(ob->data + ob->len, p, n);
    ob->len += n;
    if (ob->len >= OUT_BUF)
        out_try(ob);
}

void msg(const char *fmt, ...)
{
    char line[1024];
    int off = snprintf(line, sizeof line, "%s: ", PROG);
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(line + off, sizeof line - (size_t)off - 1, fmt, ap);
    va_end(ap);
    size_t len = (size_t)off + (n < 0 ? 0 : (size_t)n);
    if (len > sizeof line - 2)
        len = sizeof line - 2;
    line[len++] = '\n';
    out_put(err_dest, line, len);
    flush_outputs();
}

/* Emit one line (without its '\n', or a piece of a long one) with the prefix and a '\n'. */
static void emit_line(struct stream *s, const char *p, size_t n)
{
    struct outbuf *ob = s->is_err ? err_dest : &out_o;
    out_put(ob, s->prefix, s->plen);
    out_put(ob, p, n);
    out_put(ob, "\n", 1);
}

/* Forward the complete lines in s->buf; `from` is where the newly read bytes start (the bytes before it
 * hold no newline). A full buffer without a newline is sent as one piece of a longer line. */
static void forward_lines(struct stream *s, size_t from)
{
    size_t start = 0;
    size_t scan = from;
    if (s->split && s->len > 0) { /* the line of the piece sent whole ends here: not an empty one */
        s->split = false;
        if (s->buf[0] == '\n')
            start = scan = 1;
    }
    while (scan < s->len) {
        char *nl = memchr(s->buf + scan, '\n', s->len - scan);
        if (nl == NULL)
            break;
        size_t end = (size_t)(nl - s->buf);
        emit_line(s, s->buf + start, end - start);
        start = scan = end + 1;
    }
    if (start > 0) {
        memmove(s->buf, s->buf + start, s->len - start);
        s->len -= start;
    }
    if (s->len == STREAM_BUF) {
        emit_line(s, s->buf, s->len);
        s->len = 0;
        s->split = true;
    }
}

void stream_close(struct stream *s)
{
    if (s->fd < 0)
        return;
    if (s->len > 0) { /* a last line without a newline */
        emit_line(s, s->buf, s->len);
        s->len = 0;
    }
    close(s->fd);
    s->fd = -1;
}

ssize_t stream_read(struct stream *s)
{
    if (s->fd < 0)
        return 0;
    if ((s->is_err ? err_dest : &out_o)->gone) {
        /* Nobody reads this output any more (`ringlet-run ... | head`): the rank learns it
         * as it would writing there itself, EPIPE or SIGPIPE at its next write, instead of
         * running on with its output dropped. */
        s->len = 0;
        close(s->fd);
        s->fd = -1;
        return 0;
    }
    ssize_t r;
    do {
        r = read(s->fd, s->buf + s->len, STREAM_BUF - s->len);
    } while (r < 0 && errno == EINTR);
    if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
        return -1;
    if (r <= 0) {
        stream_close(s);
        return 0;
    }
    size_t from = s->len;
    s->len += (size_t)r;
    forward_lines(s, from);
    return r;
}

/* Read what is in the pipe now (a rank that exited has all it wrote there). Bounded, in case a
 * grandchild keeps writing into the same pipe. */
void stream_drain(struct stream *s)
{
    size_t total = 0;
    ssize_t r;
    while (total < (4u << 20) && (r = stream_read(s)) > 0)
        total += (size_t)r;
}

void flush_outputs(void)
{
    out_try(&out_o);
    out_try(&out_e);
}

bool outputs_backlogged(void) { return out_o.len > OUT_BACKLOG || out_e.len > OUT_BACKLOG; }

int output_pollfds(struct pollfd *p)
{
    int n = 0;
    struct outbuf *obs[2] = {&out_o, &out_e};
    for (int k = 0; k < 2; k++)
        if (obs[k]->len > 0 && !obs[k]->dead)
            p[n++] = (struct pollfd){.fd = obs[k]->fd, .events = POLLOUT};
    return n;
}

bool outputs_finish(const sigset_t *wait_mask, volatile sig_atomic_t *sig_count)
{
    int seen = *sig_count;
    for (;;) {
        flush_outputs();
        struct pollfd p[2];
        int n = output_pollfds(p);
        if (n == 0)
            return true;
        if (ppoll(p, (nfds_t)n, NULL, wait_mask) < 0 && errno != EINTR)
            return false;
        if (*sig_count != seen)
            return false;
    }
}

bool stream_init(struct stream *s, long r, bool is_err)
{
    s->fd = -1;
    s->is_err = is_err;
    s->len = 0;
    s->split = false;
    int n = snprintf(s->prefix, sizeof s->prefix, "[%ld] ", r);
    s->plen = (size_t)n;
    s->buf = malloc(STREAM_BUF);
    return s->buf != NULL;
}
