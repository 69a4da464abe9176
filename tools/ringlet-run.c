/*
 * ringlet-run: start N local ranks of a program, torchrun style.
 *
 *   ringlet-run -n N [--timeout S] [--grace S] [--] PROGRAM [ARGS...]
 *
 * Every rank gets the variables torchrun sets (MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE, LOCAL_RANK,
 * LOCAL_WORLD_SIZE, GROUP_RANK, ...) plus RINGLET_SECRET. Each line a rank writes is forwarded with a
 * "[RANK] " prefix, stdout to stdout and stderr to stderr. The first rank to fail decides the exit status;
 * the others get --grace seconds, then SIGTERM, then SIGKILL 3 s later. No rank outlives the launcher.
 *
 * Standalone: this file does not use libringlet. One thread; pipes and ppoll() in the parent.
 *
 * MASTER_PORT race: the port is a random one below the kernel's ephemeral range (where outgoing
 * connections never take theirs) that binds on 127.0.0.1, and the socket is closed again. Between
 * that close and rank 0's bind, only another listener picking the same random port could take it;
 * rank 0's bootstrap would then fail to listen and the job fail (it never hangs or mixes with the
 * other process, since peers authenticate with RINGLET_SECRET). A retry picks a new port.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define PROG "ringlet-run"
#define MAX_RANKS 65536
#define STREAM_BUF 16384       /* longest forwarded line; longer lines are split at this size */
#define OUT_BUF 65536          /* output batching buffer per destination */
#define KILL_DELAY_NS (3 * NS) /* SIGTERM (or a forwarded signal) to SIGKILL */
#define NS 1000000000LL
#define MAX_SECONDS 1e9        /* upper bound for --timeout/--grace */
#define EXIT_USAGE 2
#define EXIT_INTERNAL 1
#define EXIT_TIMEOUT 124
#define EXIT_EXEC 127

static const char usage_line[] =
    "usage: " PROG " -n N [--timeout S] [--grace S] [--] PROGRAM [ARGS...]\n";

static const char help_text[] =
    "Start N local processes of PROGRAM with torchrun's environment and forward their output.\n"
    "\n"
    "options:\n"
    "  -n N, -nN, --nproc N, --nproc=N   number of ranks (1.." "65536" "), required\n"
    "  --nproc-per-node N, --nproc_per_node N   same as -n (torchrun spelling)\n"
    "  --timeout S, --timeout=S   stop the whole job after S seconds (decimal) and exit 124;\n"
    "                             0 or absent: no timeout\n"
    "  --grace S, --grace=S       after the first rank fails, give the others S seconds (default 0)\n"
    "                             to finish on their own before SIGTERM (SIGKILL 3 s later)\n"
    "  -h, --help                 this text\n"
    "  --                         end of options; the next word is PROGRAM\n"
    "\n"
    "Each rank gets MASTER_ADDR=127.0.0.1, MASTER_PORT (a free port: bound, read and closed, so another\n"
    "process could in rare cases take it before rank 0 listens), RANK, WORLD_SIZE=N, LOCAL_RANK=RANK,\n"
    "LOCAL_WORLD_SIZE=N, GROUP_RANK=0, GROUP_WORLD_SIZE=1, ROLE_RANK, ROLE_WORLD_SIZE, and\n"
    "RINGLET_SECRET (32 random hex digits unless already set and non-empty). Rank 0 inherits stdin;\n"
    "the other ranks read /dev/null. Output lines are prefixed with \"[RANK] \".\n"
    "\n"
    "exit status: 0 when all ranks exit 0; otherwise the first failing rank's status (128+signal when\n"
    "killed by a signal); 124 on --timeout; 128+signal when the launcher gets SIGINT/SIGTERM/SIGHUP (the\n"
    "signal is forwarded to the ranks, a second one kills them at once); 2 for bad usage or a PROGRAM\n"
    "that is not found; a rank whose exec fails exits 127.\n";

/* ------------------------------------------------------------------------------------------------ */
/* small helpers                                                                                    */

static int64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * NS + ts.tv_nsec;
}

/* Write everything, coping with EINTR and with an inherited non-blocking descriptor.
 * Returns false when the descriptor is gone (EPIPE, EBADF, ...). */
static bool write_all(int fd, const char *p, size_t n)
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

/* The launcher's own messages go to stderr, after any forwarded output already collected. */
__attribute__((format(printf, 1, 2))) static void msg(const char *fmt, ...)
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

static const char *sig_name(int sig, char *tmp, size_t tmplen)
{
    static const struct {
        int sig;
        const char *name;
    } names[] = {
        {SIGHUP, "SIGHUP"},   {SIGINT, "SIGINT"},       {SIGQUIT, "SIGQUIT"},     {SIGILL, "SIGILL"},
        {SIGTRAP, "SIGTRAP"}, {SIGABRT, "SIGABRT"},     {SIGBUS, "SIGBUS"},       {SIGFPE, "SIGFPE"},
        {SIGKILL, "SIGKILL"}, {SIGUSR1, "SIGUSR1"},     {SIGSEGV, "SIGSEGV"},     {SIGUSR2, "SIGUSR2"},
        {SIGPIPE, "SIGPIPE"}, {SIGALRM, "SIGALRM"},     {SIGTERM, "SIGTERM"},     {SIGCHLD, "SIGCHLD"},
        {SIGCONT, "SIGCONT"}, {SIGSTOP, "SIGSTOP"},     {SIGTSTP, "SIGTSTP"},     {SIGTTIN, "SIGTTIN"},
        {SIGTTOU, "SIGTTOU"}, {SIGURG, "SIGURG"},       {SIGXCPU, "SIGXCPU"},     {SIGXFSZ, "SIGXFSZ"},
        {SIGVTALRM, "SIGVTALRM"}, {SIGPROF, "SIGPROF"}, {SIGWINCH, "SIGWINCH"},   {SIGSYS, "SIGSYS"},
#ifdef SIGIO
        {SIGIO, "SIGIO"},
#endif
#ifdef SIGPWR
        {SIGPWR, "SIGPWR"},
#endif
#ifdef SIGSTKFLT
        {SIGSTKFLT, "SIGSTKFLT"},
#endif
    };
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (names[i].sig == sig)
            return names[i].name;
    snprintf(tmp, tmplen, "%d", sig);
    return tmp;
}

/* ------------------------------------------------------------------------------------------------ */
/* argument parsing                                                                                 */

struct options {
    long nranks;    /* 0 = not given */
    double timeout; /* seconds; 0 = none */
    double grace;   /* seconds */
    char **argv;    /* PROGRAM ARGS... (NULL-terminated, points into main's argv) */
};

static _Noreturn void usage_error(const char *fmt, ...)
{
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    fprintf(stderr, "%s: %s\n%stry '%s --help' for more\n", PROG, line, usage_line, PROG);
    exit(EXIT_USAGE);
}

static long parse_nranks(const char *opt, const char *s)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (*s == '\0' || *end != '\0' || errno != 0)
        usage_error("%s: '%s' is not a number", opt, s);
    if (v < 1 || v > MAX_RANKS)
        usage_error("%s: number of ranks must be between 1 and %d, got %s", opt, MAX_RANKS, s);
    return v;
}

static double parse_seconds(const char *opt, const char *s)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (*s == '\0' || *end != '\0' || errno != 0 || !isfinite(v))
        usage_error("%s: '%s' is not a number of seconds", opt, s);
    if (v < 0 || v > MAX_SECONDS)
        usage_error("%s: seconds must be between 0 and %.0f, got %s", opt, MAX_SECONDS, s);
    return v;
}

/* Match "--name" (value in the next word) or "--name=value". Returns the value or NULL. */
static const char *long_opt_value(int argc, char **argv, int *i, const char *name)
{
    const char *a = argv[*i];
    size_t n = strlen(name);
    if (strncmp(a, name, n) != 0)
        return NULL;
    if (a[n] == '=')
        return a + n + 1;
    if (a[n] != '\0')
        return NULL;
    if (*i + 1 >= argc)
        usage_error("option %s needs a value", name);
    return argv[++*i];
}

static void parse_args(int argc, char **argv, struct options *o)
{
    memset(o, 0, sizeof *o);
    int i = 1;
    for (; i < argc; i++) {
        const char *a = argv[i];
        const char *v;
        if (strcmp(a, "--") == 0) {
            i++;
            break;
        }
        if (a[0] != '-' || a[1] == '\0')
            break; /* PROGRAM */
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            fputs(usage_line, stdout);
            fputs(help_text, stdout);
            exit(0);
        }
        if (strncmp(a, "-n", 2) == 0 && a[2] != '\0' && a[2] != '-' && a[1] != '-') {
            o->nranks = parse_nranks("-n", a[2] == '=' ? a + 3 : a + 2);
        } else if (strcmp(a, "-n") == 0) {
            if (i + 1 >= argc)
                usage_error("option -n needs a value");
            o->nranks = parse_nranks("-n", argv[++i]);
        } else if ((v = long_opt_value(argc, argv, &i, "--nproc")) != NULL ||
                   (v = long_opt_value(argc, argv, &i, "--nproc-per-node")) != NULL ||
                   (v = long_opt_value(argc, argv, &i, "--nproc_per_node")) != NULL) {
            o->nranks = parse_nranks("-n", v);
        } else if ((v = long_opt_value(argc, argv, &i, "--timeout")) != NULL) {
            o->timeout = parse_seconds("--timeout", v);
        } else if ((v = long_opt_value(argc, argv, &i, "--grace")) != NULL) {
            o->grace = parse_seconds("--grace", v);
        } else {
            usage_error("unknown option '%s'", a);
        }
    }
    if (o->nranks == 0)
        usage_error("missing -n N (number of ranks)");
    if (i >= argc)
        usage_error("missing PROGRAM");
    o->argv = argv + i;
}

/* Is PROGRAM something execvp() can start? Looks it up the way execvp does (PATH, or the name itself
 * when it holds a '/'). Returns 0, or an errno value to report. */
static int check_executable(const char *path)
{
    struct stat st;
    if (stat(path, &st) != 0)
        return errno;
    if (!S_ISREG(st.st_mode))
        return S_ISDIR(st.st_mode) ? EISDIR : EACCES;
    if (access(path, X_OK) != 0)
        return errno;
    return 0;
}

static int find_program(const char *prog)
{
    if (prog[0] == '\0')
        return ENOENT;
    if (strchr(prog, '/') != NULL)
        return check_executable(prog);
    const char *path = getenv("PATH");
    if (path == NULL)
        path = "/bin:/usr/bin"; /* glibc's default for execvp */
    int err = ENOENT;
    size_t plen = strlen(prog);
    const char *p = path;
    for (;;) {
        const char *colon = strchr(p, ':');
        size_t dlen = colon ? (size_t)(colon - p) : strlen(p);
        char *full = malloc(dlen + plen + 3);
        if (full == NULL)
            return ENOMEM;
        if (dlen == 0) /* an empty entry is the current directory */
            snprintf(full, dlen + plen + 3, "./%s", prog);
        else
            snprintf(full, dlen + plen + 3, "%.*s/%s", (int)dlen, p, prog);
        int e = check_executable(full);
        free(full);
        if (e == 0)
            return 0;
        if (e != ENOENT && e != ENOTDIR)
            err = e; /* remember "found but not runnable" over "not there" */
        if (colon == NULL)
            break;
        p = colon + 1;
    }
    return err;
}

/* ------------------------------------------------------------------------------------------------ */
/* environment shared by all ranks                                                                  */

static bool random_bytes(unsigned char *p, size_t n);

/* Can a listener bind this port on 127.0.0.1 (0: any)? Returns the port, or -1. */
static int try_port(int want)
{
    int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (s < 0)
        return -1;
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons((uint16_t)want);
    socklen_t alen = sizeof a;
    int port = -1;
    if (bind(s, (struct sockaddr *)&a, sizeof a) == 0 &&
        getsockname(s, (struct sockaddr *)&a, &alen) == 0)
        port = ntohs(a.sin_port);
    close(s);
    return port;
}

/* A free port below the kernel's ephemeral range: outgoing connections take their local
 * ports from that range, so on a busy host one of them could grab a port the kernel had
 * just handed us for the listener. Falls back to a kernel-chosen port. */
static int free_port(void)
{
    int lo = 32768, hi = 60999;
    FILE *f = fopen("/proc/sys/net/ipv4/ip_local_port_range", "r");
    if (f) {
        if (fscanf(f, "%d %d", &lo, &hi) != 2)
            lo = 32768;
        fclose(f);
    }
    int first = 20000, last = lo - 1;
    for (int i = 0; i < 64 && last > first; i++) {
        unsigned char r[2];
        if (!random_bytes(r, sizeof r))
            break;
        int port = try_port(first + (r[0] << 8 | r[1]) % (last - first + 1));
        if (port > 0)
            return port;
    }
    return try_port(0);
}

static bool random_bytes(unsigned char *p, size_t n)
{
    size_t got = 0;
    while (got < n) {
        ssize_t r = getrandom(p + got, n - got, 0);
        if (r > 0) {
            got += (size_t)r;
        } else if (r < 0 && errno == EINTR) {
            continue;
        } else {
            break;
        }
    }
    if (got == n)
        return true;
    /* very old kernels: fall back to /dev/urandom */
    int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return false;
    while (got < n) {
        ssize_t r = read(fd, p + got, n - got);
        if (r > 0)
            got += (size_t)r;
        else if (!(r < 0 && errno == EINTR))
            break;
    }
    close(fd);
    return got == n;
}

static bool setenv_long(const char *name, long v)
{
    char tmp[32];
    snprintf(tmp, sizeof tmp, "%ld", v);
    return setenv(name, tmp, 1) == 0;
}

static bool set_common_env(long nranks)
{
    int port = free_port();
    if (port <= 0) {
        msg("cannot find a free TCP port on 127.0.0.1: %s", strerror(errno));
        return false;
    }
    const char *sec = getenv("RINGLET_SECRET");
    if (sec == NULL || sec[0] == '\0') {
        unsigned char raw[16];
        char hex[33];
        if (!random_bytes(raw, sizeof raw)) {
            msg("cannot get random bytes for RINGLET_SECRET: %s", strerror(errno));
            return false;
        }
        for (size_t i = 0; i < sizeof raw; i++)
            snprintf(hex + 2 * i, 3, "%02x", raw[i]);
        if (setenv("RINGLET_SECRET", hex, 1) != 0)
            return false;
    }
    return setenv("MASTER_ADDR", "127.0.0.1", 1) == 0 && setenv_long("MASTER_PORT", port) &&
           setenv_long("WORLD_SIZE", nranks) && setenv_long("LOCAL_WORLD_SIZE", nranks) &&
           setenv("GROUP_RANK", "0", 1) == 0 && setenv("GROUP_WORLD_SIZE", "1", 1) == 0 &&
           setenv_long("ROLE_WORLD_SIZE", nranks);
}

/* ------------------------------------------------------------------------------------------------ */
/* ranks and their output                                                                           */

struct stream {
    int fd;          /* read end in the parent, -1 once closed */
    bool is_err;     /* forwarded to stderr (else stdout) */
    size_t len;      /* bytes held in buf: an incomplete line */
    size_t plen;     /* prefix length */
    char prefix[24]; /* "[RANK] " */
    char *buf;       /* STREAM_BUF bytes */
};

struct rank {
    pid_t pid; /* 0 when not started or reaped */
    struct stream out, err;
};

static struct rank *ranks;
static long nranks;

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
    }
}

static void stream_close(struct stream *s)
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

/* One read. Returns bytes read, 0 at EOF or error (stream closed), -1 when nothing is there now. */
static ssize_t stream_read(struct stream *s)
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
static void stream_drain(struct stream *s)
{
    size_t total = 0;
    ssize_t r;
    while (total < (4u << 20) && (r = stream_read(s)) > 0)
        total += (size_t)r;
}

static void flush_outputs(void)
{
    out_flush(&out_o);
    out_flush(&out_e);
}

/* ------------------------------------------------------------------------------------------------ */
/* signals                                                                                          */

static volatile sig_atomic_t got_chld;
static volatile sig_atomic_t got_sig;   /* last SIGINT/SIGTERM/SIGHUP received */
static volatile sig_atomic_t sig_count; /* how many of them */
static const int term_sigs[] = {SIGINT, SIGTERM, SIGHUP};
static sigset_t orig_mask;
static bool sig_was_ignored[3];

static void on_signal(int sig)
{
    if (sig == SIGCHLD) {
        got_chld = 1;
    } else {
        got_sig = sig;
        sig_count++;
    }
}

static void setup_signals(sigset_t *wait_mask)
{
    sigset_t block;
    sigemptyset(&block);
    sigaddset(&block, SIGCHLD);
    for (size_t i = 0; i < 3; i++)
        sigaddset(&block, term_sigs[i]);
    sigprocmask(SIG_BLOCK, &block, &orig_mask);
    *wait_mask = orig_mask; /* signals are delivered only inside ppoll() */
    sigdelset(wait_mask, SIGCHLD);

    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sa.sa_mask = block;
    sa.sa_flags = SA_NOCLDSTOP;
    sigaction(SIGCHLD, &sa, NULL);
    for (size_t i = 0; i < 3; i++) {
        struct sigaction old;
        sigaction(term_sigs[i], NULL, &old);
        /* SIGINT/SIGHUP ignored on entry (nohup, a background job): leave them so */
        sig_was_ignored[i] = old.sa_handler == SIG_IGN && term_sigs[i] != SIGTERM;
        if (!sig_was_ignored[i]) {
            sigaction(term_sigs[i], &sa, NULL);
            sigdelset(wait_mask, term_sigs[i]);
        }
    }
    signal(SIGPIPE, SIG_IGN); /* a closed stdout must not kill the launcher while ranks run */
}

/* ------------------------------------------------------------------------------------------------ */
/* starting ranks                                                                                   */

static struct rlimit orig_nofile;

static _Noreturn void child_exec(long r, int out_w, int err_w, char **argv)
{
    /* back to the signal state the launcher was started with */
    signal(SIGPIPE, SIG_DFL);
    signal(SIGCHLD, SIG_DFL);
    for (size_t i = 0; i < 3; i++)
        signal(term_sigs[i], sig_was_ignored[i] ? SIG_IGN : SIG_DFL);
    sigprocmask(SIG_SETMASK, &orig_mask, NULL);
    setrlimit(RLIMIT_NOFILE, &orig_nofile);

    if (r > 0) {
        int nul = open("/dev/null", O_RDONLY);
        if (nul >= 0 && nul != STDIN_FILENO) {
            dup2(nul, STDIN_FILENO);
            close(nul);
        }
    }
    /* dup2 clears close-on-exec on the copies; every other pipe end is close-on-exec */
    if (dup2(out_w, STDOUT_FILENO) < 0 || dup2(err_w, STDERR_FILENO) < 0)
        _exit(EXIT_EXEC);

    setenv_long("RANK", r);
    setenv_long("LOCAL_RANK", r);
    setenv_long("ROLE_RANK", r);

    execvp(argv[0], argv);
    int e = errno;
    char line[512];
    int n = snprintf(line, sizeof line, "%s: rank %ld: cannot execute '%s': %s\n", PROG, r, argv[0],
                     strerror(e));
    if (n > 0)
        write_all(STDERR_FILENO, line, (size_t)n < sizeof line ? (size_t)n : sizeof line - 1);
    _exit(EXIT_EXEC);
}

static bool stream_init(struct stream *s, long r, bool is_err)
{
    s->fd = -1;
    s->is_err = is_err;
    s->len = 0;
    int n = snprintf(s->prefix, sizeof s->prefix, "[%ld] ", r);
    s->plen = (size_t)n;
    s->buf = malloc(STREAM_BUF);
    return s->buf != NULL;
}

/* Start rank r. Returns 0 or an errno value. */
static int start_rank(long r, char **argv, pid_t launcher)
{
    struct rank *rk = &ranks[r];
    int po[2], pe[2];
    if (pipe2(po, O_CLOEXEC) != 0)
        return errno;
    if (pipe2(pe, O_CLOEXEC) != 0) {
        int e = errno;
        close(po[0]);
        close(po[1]);
        return e;
    }
    pid_t pid = fork();
    if (pid < 0) {
        int e = errno;
        close(po[0]);
        close(po[1]);
        close(pe[0]);
        close(pe[1]);
        return e;
    }
    if (pid == 0) {
        /* no rank outlives the launcher, even when the launcher is killed with SIGKILL */
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != launcher)
            _exit(EXIT_EXEC);
        child_exec(r, po[1], pe[1], argv);
    }
    close(po[1]);
    close(pe[1]);
    fcntl(po[0], F_SETFL, O_NONBLOCK);
    fcntl(pe[0], F_SETFL, O_NONBLOCK);
    rk->out.fd = po[0];
    rk->err.fd = pe[0];
    rk->pid = pid;
    return 0;
}

/* Make room for two pipes per rank; the ranks get the original limit back. */
static void raise_nofile(long n)
{
    getrlimit(RLIMIT_NOFILE, &orig_nofile);
    rlim_t need = (rlim_t)(2 * n + 64);
    if (orig_nofile.rlim_cur != RLIM_INFINITY && orig_nofile.rlim_cur < need) {
        struct rlimit rl = orig_nofile;
        rl.rlim_cur = (rl.rlim_max == RLIM_INFINITY || rl.rlim_max >= need) ? need : rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
}

/* ------------------------------------------------------------------------------------------------ */
/* the job                                                                                          */

enum phase {
    RUNNING,    /* all well so far */
    GRACE,      /* a rank failed; the others may finish on their own until grace_deadline */
    TERMINATING /* SIGTERM (or a forwarded signal) sent; SIGKILL at kill_deadline */
};

static long alive;

static void signal_alive(int sig)
{
    for (long r = 0; r < nranks; r++)
        if (ranks[r].pid > 0)
            kill(ranks[r].pid, sig);
}

static int status_code(int st)
{
    if (WIFEXITED(st))
        return WEXITSTATUS(st);
    if (WIFSIGNALED(st))
        return 128 + WTERMSIG(st);
    return EXIT_INTERNAL;
}

int main(int argc, char **argv)
{
    struct options opt;
    parse_args(argc, argv, &opt);
    int e = find_program(opt.argv[0]);
    if (e != 0) {
        if (e == ENOENT || e == ENOTDIR)
            fprintf(stderr, "%s: %s: program not found%s\n", PROG, opt.argv[0],
                    strchr(opt.argv[0], '/') ? "" : " in PATH");
        else
            fprintf(stderr, "%s: %s: cannot execute: %s\n", PROG, opt.argv[0], strerror(e));
        return EXIT_USAGE;
    }
    nranks = opt.nranks;

    if (!set_common_env(nranks))
        return EXIT_INTERNAL;
    ranks = calloc((size_t)nranks, sizeof *ranks);
    if (ranks == NULL) {
        msg("out of memory");
        return EXIT_INTERNAL;
    }
    for (long r = 0; r < nranks; r++) {
        if (!stream_init(&ranks[r].out, r, false) || !stream_init(&ranks[r].err, r, true)) {
            msg("out of memory");
            return EXIT_INTERNAL;
        }
    }

    sigset_t wait_mask;
    setup_signals(&wait_mask);
    raise_nofile(nranks);

    int64_t t0 = now_ns();
    enum phase phase = RUNNING;
    int exit_code = -1; /* the first failure decides; -1 = none yet */
    int64_t timeout_deadline = opt.timeout > 0 ? t0 + (int64_t)(opt.timeout * (double)NS) : -1;
    int64_t grace_deadline = -1, kill_deadline = -1;
    bool killed = false;
    int sigs_handled = 0;

    pid_t self = getpid();
    for (long r = 0; r < nranks; r++) {
        e = start_rank(r, opt.argv, self);
        if (e != 0) {
            msg("cannot start rank %ld: %s", r, strerror(e));
            exit_code = EXIT_INTERNAL;
            signal_alive(SIGTERM);
            phase = TERMINATING;
            kill_deadline = now_ns() + KILL_DELAY_NS;
            break;
        }
        alive++;
    }

    struct pollfd *pfds = calloc((size_t)(2 * nranks), sizeof *pfds);
    struct stream **pstreams = calloc((size_t)(2 * nranks), sizeof *pstreams);
    if (pfds == NULL || pstreams == NULL) {
        msg("out of memory");
        signal_alive(SIGKILL);
        exit_code = EXIT_INTERNAL;
        phase = TERMINATING;
        killed = true;
    }

    while (alive > 0) {
        /* 1. wait for output, a child, a signal or the next deadline */
        int64_t next = -1;
        if (timeout_deadline >= 0 && phase != TERMINATING)
            next = timeout_deadline;
        if (phase == GRACE && (next < 0 || grace_deadline < next))
            next = grace_deadline;
        if (phase == TERMINATING && !killed && (next < 0 || kill_deadline < next))
            next = kill_deadline;
        struct timespec ts, *tsp = NULL;
        if (next >= 0) {
            int64_t d = next - now_ns();
            if (d < 0)
                d = 0;
            ts.tv_sec = (time_t)(d / NS);
            ts.tv_nsec = (long)(d % NS);
            tsp = &ts;
        }
        nfds_t nfds = 0;
        for (long r = 0; pfds != NULL && r < nranks; r++) {
            struct stream *ss[2] = {&ranks[r].out, &ranks[r].err};
            for (int k = 0; k < 2; k++) {
                if (ss[k]->fd < 0)
                    continue;
                pfds[nfds].fd = ss[k]->fd;
                pfds[nfds].events = POLLIN;
                pfds[nfds].revents = 0;
                pstreams[nfds++] = ss[k];
            }
        }
        int pr = ppoll(pfds, nfds, tsp, &wait_mask);
        if (pr < 0 && errno != EINTR) {
            msg("poll failed: %s", strerror(errno));
            if (exit_code < 0)
                exit_code = EXIT_INTERNAL;
            signal_alive(SIGKILL);
            phase = TERMINATING;
            killed = true;
        }

        /* 2. forward output */
        for (nfds_t i = 0; pr > 0 && i < nfds; i++)
            if (pfds[i].revents != 0)
                stream_read(pstreams[i]);
        flush_outputs();

        /* 3. signals to the launcher: forward, then SIGKILL 3 s later; a second one kills at once */
        int sc = sig_count;
        if (sc != sigs_handled) {
            sigs_handled = sc;
            int sig = got_sig;
            char tmp[16];
            if (phase != TERMINATING) {
                msg("got %s, forwarding it to the ranks", sig_name(sig, tmp, sizeof tmp));
                signal_alive(sig);
                if (exit_code < 0)
                    exit_code = 128 + sig;
                phase = TERMINATING;
                kill_deadline = now_ns() + KILL_DELAY_NS;
            } else if (!killed) {
                msg("got %s again, killing the ranks", sig_name(sig, tmp, sizeof tmp));
                signal_alive(SIGKILL);
                killed = true;
            }
        }

        /* 4. reap ranks */
        if (got_chld) {
            got_chld = 0;
            int st;
            pid_t pid;
            while ((pid = waitpid(-1, &st, WNOHANG)) > 0) {
                long r = 0;
                while (r < nranks && ranks[r].pid != pid)
                    r++;
                if (r == nranks)
                    continue;
                ranks[r].pid = 0;
                alive--;
                /* its output first, then what became of it */
                stream_drain(&ranks[r].out);
                stream_drain(&ranks[r].err);
                flush_outputs();
                if (WIFEXITED(st) && WEXITSTATUS(st) == 0)
                    continue;
                if (phase == TERMINATING)
                    continue; /* stopped by us: not news */
                char tmp[16];
                if (WIFSIGNALED(st))
                    msg("rank %ld killed by signal %s%s", r, sig_name(WTERMSIG(st), tmp, sizeof tmp),
                        WCOREDUMP(st) ? " (core dumped)" : "");
                else
                    msg("rank %ld exited with status %d", r, WEXITSTATUS(st));
                if (exit_code < 0)
                    exit_code = status_code(st);
                if (phase == RUNNING) {
                    phase = GRACE;
                    grace_deadline = now_ns() + (int64_t)(opt.grace * (double)NS);
                }
            }
        }
        if (alive == 0)
            break;

        /* 5. deadlines */
        int64_t t = now_ns();
        if (phase != TERMINATING && timeout_deadline >= 0 && t >= timeout_deadline) {
            msg("timeout after %g s", opt.timeout);
            if (exit_code < 0)
                exit_code = EXIT_TIMEOUT;
            signal_alive(SIGTERM);
            phase = TERMINATING;
            kill_deadline = t + KILL_DELAY_NS;
        }
        if (phase == GRACE && t >= grace_deadline) {
            if (opt.grace > 0)
                msg("grace period of %g s over, stopping %ld rank%s", opt.grace, alive,
                    alive == 1 ? "" : "s");
            signal_alive(SIGTERM);
            phase = TERMINATING;
            kill_deadline = t + KILL_DELAY_NS;
        }
        if (phase == TERMINATING && !killed && t >= kill_deadline) {
            msg("%ld rank%s still running %g s later, sending SIGKILL", alive, alive == 1 ? "" : "s",
                (double)KILL_DELAY_NS / NS);
            signal_alive(SIGKILL);
            killed = true;
        }
    }

    /* All ranks are gone. Whatever they wrote is in the pipes; a grandchild that still holds a pipe
     * does not keep the launcher waiting. */
    for (long r = 0; r < nranks; r++) {
        stream_drain(&ranks[r].out);
        stream_drain(&ranks[r].err);
        stream_close(&ranks[r].out);
        stream_close(&ranks[r].err);
        free(ranks[r].out.buf);
        free(ranks[r].err.buf);
    }
    flush_outputs();
    free(pfds);
    free(pstreams);
    free(ranks);
    return exit_code < 0 ? 0 : exit_code;
}
