/* ringlet-run's parts (see ringlet-run.c):
 *   run_options.c  the command line, and finding PROGRAM
 *   run_launch.c   the job's environment (rendezvous port, secret) and starting ranks
 *   run_output.c   forwarding the ranks' output, "[RANK] "-prefixed, and the launcher's own
 *   run_signals.c  the launcher's signals, and signalling the ranks
 *   ringlet-run.c  main: the job, from start to exit status
 */
#ifndef RINGLET_RUN_H
#define RINGLET_RUN_H

#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define PROG "ringlet-run"
#define MAX_RANKS 65536
#define STREAM_BUF 16384       /* longest forwarded line; longer lines are split at this size */
#define OUT_BUF 65536          /* output batching: written once this much is held */
#define OUT_BACKLOG (8u << 20) /* held for a stalled destination: past it, ranks' pipes wait */
#define KILL_DELAY_NS (3 * NS) /* SIGTERM (or a forwarded signal) to SIGKILL */
#define NS 1000000000LL
#define MAX_SECONDS 1e9        /* upper bound for --timeout/--grace */
#define EXIT_USAGE 2
#define EXIT_INTERNAL 1
#define EXIT_TIMEOUT 124
#define EXIT_EXEC 127

/* ---- options (run_options.c) ---- */

struct options {
    long nranks;    /* 0 = not given */
    double timeout; /* seconds; 0 = none */
    double grace;   /* seconds */
    char **argv;    /* PROGRAM ARGS... (NULL-terminated, points into main's argv) */
    bool bind;      /* --bind cores: each rank on its own share of the allowed cores */
};

/* Parses the command line into *o; exits with EXIT_USAGE (a message) or 0 (--help). */
void parse_args(int argc, char **argv, struct options *o);
/* Is PROGRAM something execvp() can start? Looks it up the way execvp does (PATH, or the name itself
 * when it holds a '/'). Returns 0, or an errno value to report. */
int find_program(const char *prog);

/* ---- output (run_output.c) ---- */

/* One of a rank's output pipes. */
struct stream {
    int fd;          /* read end in the parent, -1 once closed */
    bool is_err;     /* forwarded to stderr (else stdout) */
    size_t len;      /* bytes held in buf: an incomplete line */
    bool split;      /* the last piece sent was a full buffer: a newline right after it ends that line */
    size_t plen;     /* prefix length */
    char prefix[24]; /* "[RANK] " */
    char *buf;       /* STREAM_BUF bytes */
};

/* Write everything, coping with EINTR and with an inherited non-blocking descriptor.
 * Returns false when the descriptor is gone (EPIPE, EBADF, ...). */
bool write_all(int fd, const char *p, size_t n);
/* Before any output: how stdout and stderr are written (one queue when they are one file;
 * a terminal through a non-blocking open file of its own). */
void outputs_init(void);
/* The launcher's own messages go to stderr, after any forwarded output already collected. */
__attribute__((format(printf, 1, 2))) void msg(const char *fmt, ...);
bool stream_init(struct stream *s, long r, bool is_err);
/* One read. Returns bytes read, 0 at EOF or error (stream closed), -1 when nothing is there now. */
ssize_t stream_read(struct stream *s);
/* Read what is in the pipe now (a rank that exited has all it wrote there). */
void stream_drain(struct stream *s);
/* Forwards a last line without a newline, and closes the pipe. */
void stream_close(struct stream *s);
/* Writes what stdout and stderr take now, never blocking. */
void flush_outputs(void);
/* More is held for a stalled destination than OUT_BACKLOG: read no more from the ranks. */
bool outputs_backlogged(void);
/* POLLOUT entries (at most 2) for the destinations with output held. */
struct pollfd;
int output_pollfds(struct pollfd *p);
/* At the end: writes everything held, waiting for the destinations as long as they take
 * it (a paused pager), but gives up at a signal (false). */
bool outputs_finish(const sigset_t *wait_mask, volatile sig_atomic_t *sig_count);

/* ---- ranks (run_launch.c) ---- */

struct rank {
    pid_t pid;  /* 0 when not started or reaped */
    pid_t pgid; /* its process group (it leads a session): kept after it is reaped, for what
                 * it started; 0 when not started or once the group is empty */
    struct stream out, err;
};

extern struct rank *ranks;
extern long nranks;

/* MASTER_ADDR, MASTER_PORT, WORLD_SIZE, ... and RINGLET_SECRET, for every rank; false
 * (after a message) when it cannot. */
bool set_common_env(long world);
bool setenv_long(const char *name, long v);
/* Make room for two pipes per rank; the ranks get the original limit back. */
void raise_nofile(long n);
/* --bind cores: splits the cores this launcher may run on among n ranks, rank r taking
 * the r-th share (start_rank then binds it there); with fewer cores than ranks, says so
 * and leaves them unbound. */
void plan_binding(long n);
/* Start rank r. Returns 0 or an errno value. */
int start_rank(long r, char **argv, pid_t launcher);

/* ---- signals (run_signals.c) ---- */

extern volatile sig_atomic_t got_chld;
extern volatile sig_atomic_t got_sig;   /* last SIGINT/SIGTERM/SIGHUP/SIGQUIT received */
extern volatile sig_atomic_t sig_count; /* how many of them */

/* Blocks SIGCHLD, SIGINT, SIGTERM, SIGHUP and SIGQUIT but inside ppoll() with *wait_mask. */
void setup_signals(sigset_t *wait_mask);
/* In a child: the signal state the launcher was started with. */
void restore_signals(void);
/* sig to every rank's process group: a rank's own, and, once it was reaped, what it
 * started that still runs. */
void signal_alive(int sig);
/* Whether a process of some rank's group (a reaped rank's leftover) still runs; drops
 * the groups that are empty. */
bool groups_left(void);
/* Passes on the SIGUSR1, SIGUSR2 and SIGTSTP received since the last call (job loop). */
#define NFWD 3
void forward_signals(void);
const char *sig_name(int sig, char *tmp, size_t tmplen);
/* A wait status as an exit status: the code, or 128 + the signal. */
int status_code(int st);

#endif
