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
 * Standalone: it does not use libringlet. One thread; pipes and ppoll() in the parent. This file
 * runs the job; run.h lists the others.
 *
 * MASTER_PORT race: the port is a random one below the kernel's ephemeral range (where outgoing
 * connections never take theirs) that binds on 127.0.0.1, and the socket is closed again. Between
 * that close and rank 0's bind, only another listener picking the same random port could take it;
 * rank 0's bootstrap would then fail to listen and the job fail (it never hangs or mixes with the
 * other process, since peers authenticate with RINGLET_SECRET). A retry picks a new port.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "run.h"

/* ------------------------------------------------------------------------------------------------ */
/* the job                                                                                          */

enum phase {
    RUNNING,    /* all well so far */
    GRACE,      /* a rank failed; the others may finish on their own until grace_deadline */
    TERMINATING /* SIGTERM (or a forwarded signal) sent; SIGKILL at kill_deadline */
};

static long alive;

static int64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * NS + ts.tv_nsec;
}

int main(int argc, char **argv)
{
    struct options opt;
    /* Descriptors 0-2 open (on /dev/null where the launcher was started without them): else
     * a pipe made for a rank could be numbered 1, and its dup2 onto 1 would leave it
     * close-on-exec, the rank without its stdout. */
    for (int fd = 0; fd <= 2; fd++)
        if (fcntl(fd, F_GETFD) < 0 && open("/dev/null", O_RDWR) != fd)
            return EXIT_INTERNAL;
    parse_args(argc, argv, &opt);
    outputs_init();
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
    /* What a rank started and left behind is the launcher's child from then on: reaped here
     * at once, so a group whose processes ended is seen empty (a zombie still counts as a
     * member, and some init processes reap late). */
    prctl(PR_SET_CHILD_SUBREAPER, 1);
    raise_nofile(nranks);
    if (opt.bind)
        plan_binding(nranks);

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

    /* the ranks' pipes, and stdout and stderr while output waits for them */
    struct pollfd *pfds = calloc((size_t)(2 * nranks + 2), sizeof *pfds);
    struct stream **pstreams = calloc((size_t)(2 * nranks + 2), sizeof *pstreams);
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
        /* A stalled reader of our output: the ranks' pipes wait until it takes some. */
        bool backlog = outputs_backlogged();
        for (long r = 0; pfds != NULL && !backlog && r < nranks; r++) {
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
        if (pfds != NULL) {
            int no = output_pollfds(pfds + nfds);
            for (int k = 0; k < no; k++)
                pstreams[nfds++] = NULL;
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
            if (pfds[i].revents != 0 && pstreams[i] != NULL)
                stream_read(pstreams[i]);
        flush_outputs();

        /* 3. signals to the launcher: SIGUSR1/2 and SIGTSTP passed on; SIGINT/TERM/HUP/QUIT forwarded,
         * then SIGKILL 3 s later, and a second one kills at once */
        forward_signals();
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
                /* a group empties only as its last process is reaped (here: its parent is
                 * the launcher, or gone and the launcher its subreaper): its id is dropped
                 * at once, before another group may take the number */
                groups_left();
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

    /* All ranks are gone. A job that failed, timed out or was stopped stops what its ranks
     * started too, as it does while they live: SIGTERM to the groups where something still
     * runs (the loop's SIGTERM may have come before some rank left, or never), then SIGKILL
     * to what is left KILL_DELAY_NS later. */
    if ((exit_code > 0 || phase == TERMINATING) && groups_left()) {
        signal_alive(SIGTERM);
        int64_t until = now_ns() + KILL_DELAY_NS;
        int seen = sig_count;
        /* signals are taken in the wait, as in the job loop: another one kills at once */
        while (groups_left() && now_ns() < until && sig_count == seen) {
            struct timespec pause = {0, 20 * 1000 * 1000};
            (void)ppoll(NULL, 0, &pause, &wait_mask);
            int st;
            while (waitpid(-1, &st, WNOHANG) > 0) { /* the leftovers (this is their subreaper) */
            }
        }
        if (groups_left()) {
            msg("what the ranks started still runs %g s after SIGTERM: sending SIGKILL", (double)KILL_DELAY_NS / NS);
            signal_alive(SIGKILL);
        }
    }

    /* Whatever they wrote is in the pipes; a grandchild that still holds a pipe does not keep
     * the launcher waiting. */
    for (long r = 0; r < nranks; r++) {
        stream_drain(&ranks[r].out);
        stream_drain(&ranks[r].err);
        stream_close(&ranks[r].out);
        stream_close(&ranks[r].err);
        free(ranks[r].out.buf);
        free(ranks[r].err.buf);
    }
    /* As long as the readers take it (a paused pager), but not past a signal. */
    if (!outputs_finish(&wait_mask, &sig_count) && exit_code < 0 && got_sig != 0)
        exit_code = 128 + got_sig;
    free(pfds);
    free(pstreams);
    free(ranks);
    int sig = got_sig;
    if (sig != 0 && exit_code == 128 + sig) {
        /* Ended by SIGINT, SIGTERM, SIGHUP or SIGQUIT: die of it, as a shell expects of a program it
         * interrupted (a shell loop of ringlet-run stops at Ctrl-C); its status reads 128 + sig. */
        signal(sig, SIG_DFL);
        sigset_t one;
        sigemptyset(&one);
        sigaddset(&one, sig);
        sigprocmask(SIG_UNBLOCK, &one, NULL);
        raise(sig);
    }
    return exit_code < 0 ? 0 : exit_code;
}
