/* ringlet-run's signals: SIGCHLD, SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2 and SIGTSTP are
 * blocked except inside ppoll(), where their handlers only note them for the job loop; the
 * ranks get the signal state the launcher was started with. */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>

#include "run.h"

volatile sig_atomic_t got_chld;
volatile sig_atomic_t got_sig;   /* last SIGINT/SIGTERM/SIGHUP/SIGQUIT received */
volatile sig_atomic_t sig_count; /* how many of them */
/* SIGQUIT (Ctrl-\\, which reaches the launcher alone: the ranks are in sessions of their
 * own) too: by default it killed the launcher without stopping the ranks' groups. */
#define NTERM 4
static const int term_sigs[NTERM] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT};
static sigset_t orig_mask;
static bool sig_was_ignored[NTERM];
/* Passed on to the ranks, the job going on: SIGUSR1 and SIGUSR2 (a batch system's warning
 * before the end of its time), and SIGTSTP (Ctrl-Z: the ranks, in sessions of their own,
 * would not see the terminal's). */
static const int fwd_sigs[NFWD] = {SIGUSR1, SIGUSR2, SIGTSTP};
static bool fwd_was_ignored[NFWD];
static volatile sig_atomic_t fwd_count[NFWD];
static int fwd_handled[NFWD];

static void on_signal(int sig)
{
    if (sig == SIGCHLD) {
        got_chld = 1;
        return;
    }
    for (int i = 0; i < NFWD; i++)
        if (sig == fwd_sigs[i]) {
            fwd_count[i]++;
            return;
        }
    got_sig = sig;
    sig_count++;
}

void setup_signals(sigset_t *wait_mask)
{
    sigset_t block;
    sigemptyset(&block);
    sigaddset(&block, SIGCHLD);
    for (size_t i = 0; i < NTERM; i++)
        sigaddset(&block, term_sigs[i]);
    for (int i = 0; i < NFWD; i++)
        sigaddset(&block, fwd_sigs[i]);
    sigprocmask(SIG_BLOCK, &block, &orig_mask);
    *wait_mask = orig_mask; /* signals are delivered only inside ppoll() */
    sigdelset(wait_mask, SIGCHLD);

    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sa.sa_mask = block;
    sa.sa_flags = SA_NOCLDSTOP;
    sigaction(SIGCHLD, &sa, NULL);
    for (size_t i = 0; i < NTERM; i++) {
        struct sigaction old;
        sigaction(term_sigs[i], NULL, &old);
        /* SIGINT/SIGHUP/SIGQUIT ignored on entry (nohup, a background job): leave them so */
        sig_was_ignored[i] = old.sa_handler == SIG_IGN && term_sigs[i] != SIGTERM;
        if (!sig_was_ignored[i]) {
            sigaction(term_sigs[i], &sa, NULL);
            sigdelset(wait_mask, term_sigs[i]);
        }
    }
    for (int i = 0; i < NFWD; i++) {
        struct sigaction old;
        sigaction(fwd_sigs[i], NULL, &old);
        fwd_was_ignored[i] = old.sa_handler == SIG_IGN;
        if (!fwd_was_ignored[i]) {
            sigaction(fwd_sigs[i], &sa, NULL);
            sigdelset(wait_mask, fwd_sigs[i]);
        }
    }
    signal(SIGPIPE, SIG_IGN); /* a closed stdout must not kill the launcher while ranks run */
}

void restore_signals(void)
{
    signal(SIGPIPE, SIG_DFL);
    signal(SIGCHLD, SIG_DFL);
    for (size_t i = 0; i < NTERM; i++)
        signal(term_sigs[i], sig_was_ignored[i] ? SIG_IGN : SIG_DFL);
    for (int i = 0; i < NFWD; i++)
        signal(fwd_sigs[i], fwd_was_ignored[i] ? SIG_IGN : SIG_DFL);
    sigprocmask(SIG_SETMASK, &orig_mask, NULL);
}

const char *sig_name(int sig, char *tmp, size_t tmplen)
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

void signal_alive(int sig)
{
    /* the rank's process group (it leads a session of its own); the rank alone while it
     * has not made it yet, just after the fork; a reaped rank's group while something it
     * started runs there (it stopped with the job only while its rank lived) */
    for (long r = 0; r < nranks; r++) {
        if (ranks[r].pgid <= 0)
            continue;
        if (kill(-ranks[r].pgid, sig) == 0)
            continue;
        if (ranks[r].pid > 0)
            kill(ranks[r].pid, sig);
        else if (errno == ESRCH)
            ranks[r].pgid = 0; /* empty: its id may be another's group from now on */
    }
}

bool groups_left(void)
{
    bool any = false;
    for (long r = 0; r < nranks; r++) {
        if (ranks[r].pgid <= 0)
            continue;
        if (kill(-ranks[r].pgid, 0) == 0)
            any = true;
        else if (errno == ESRCH || errno == EPERM)
            ranks[r].pgid = 0; /* empty, or nothing there the launcher may signal */
    }
    return any;
}

void forward_signals(void)
{
    for (int i = 0; i < NFWD; i++) {
        int c = fwd_count[i];
        if (c == fwd_handled[i])
            continue;
        fwd_handled[i] = c;
        if (fwd_sigs[i] == SIGTSTP) { /* stop the ranks, then the launcher; on SIGCONT, go on together */
            signal_alive(SIGSTOP);
            raise(SIGSTOP);
            signal_alive(SIGCONT);
        } else {
            signal_alive(fwd_sigs[i]);
        }
    }
}

int status_code(int st)
{
    if (WIFEXITED(st))
        return WEXITSTATUS(st);
    if (WIFSIGNALED(st))
        return 128 + WTERMSIG(st);
    return EXIT_INTERNAL;
}
