/* ringlet-run's output: each line a rank writes goes out whole, with a "[RANK] " prefix,
 * stdout to stdout and stderr to stderr, batched per destination; the launcher's own
 * messages follow what was already collected. */
#include <errno.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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

struct outbuf {
    int fd;
    bool dead; /* the destination is closed: keep draining ranks, drop their output */
    size_t len;
    char data[OUT_BUF];
};

static struct outbuf out_o = {.fd = STDOUT_FILENO};
static struct outbuf out_e = {.fd = STDERR_FILENO};

static void out_flush(struct outbuf *ob)
{
    if (ob->len > 0 && !ob->dead && !write_all(ob->fd, ob->data, ob->len))
        ob->dead = true;
    ob->len = 0;
}

static void out_put(struct outbuf *ob, const char *p, size_t n)
{
    if (ob->len + n > sizeof ob->data)
        out_flush(ob);
    if (n > sizeof ob->data) {
        if (!ob->dead && !write_all(ob->fd, p, n))
            ob->dead = true;
        return;
    }
    memcpy(ob->data + ob->len, p, n);
    ob->len += n;
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
    out_flush(&out_o);
    out_flush(&out_e);
    if (!out_e.dead && !write_all(STDERR_FILENO, line, len))
        out_e.dead = true;
}

/* Emit one line (without its '\n', or a piece of a long one) with the prefix and a '\n'. */
static void emit_line(struct stream *s, const char *p, size_t n)
{
    struct outbuf *ob = s->is_err ? &out_e : &out_o;
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
    out_flush(&out_o);
    out_flush(&out_e);
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
