#include "fault.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "log.h"

/* Digits only (no sign, no blank), at most 18 of them: *v and the first byte after. */
static const char *digits(const char *s, unsigned long long *v) {
    const char *p = s;
    *v = 0;
    while (*p >= '0' && *p <= '9' && p - s < 18) *v = *v * 10 + (unsigned long long)(*p++ - '0');
    return p > s && !(*p >= '0' && *p <= '9') ? p : NULL;
}

int rl_fault_parse(const char *s, rl_fault *f) {
    unsigned long long seq, n;
    const char *p = digits(s, &seq);
    if (!p || seq == 0 || *p != ':') return -1;
    int dir = !strncmp(p + 1, "send:", 5) ? RL_FAULT_SEND : !strncmp(p + 1, "recv:", 5) ? RL_FAULT_RECV : 0;
    if (!dir || !(p = digits(p + 6, &n)) || *p) return -1;
    f->dir = dir;
    f->seq = seq;
    f->n = (size_t)n;
    return 0;
}

/* Parses one variable's value into f; returns 1 when it armed a fault. */
static int parse(rl_fault *f, const char *var, int sig) {
    const char *s = getenv(var);
    if (!s || !*s) return 0;
    if (rl_fault_parse(s, f) != 0) {
        RL_WARN(-1, "%s=%s is not <seq>:send:<n> or <seq>:recv:<n>; no fault injected", var, s);
        memset(f, 0, sizeof *f);
        return 0;
    }
    f->sig = sig;
    return 1;
}

void rl_fault_from_env(rl_fault *f) {
    memset(f, 0, sizeof *f);
    if (parse(f, "RINGLET_FAULT_KILL", SIGKILL)) {
        if (getenv("RINGLET_FAULT_STOP") && *getenv("RINGLET_FAULT_STOP"))
            RL_WARN(-1, "RINGLET_FAULT_KILL and RINGLET_FAULT_STOP both set: RINGLET_FAULT_STOP ignored");
        return;
    }
    parse(f, "RINGLET_FAULT_STOP", SIGSTOP);
}

void rl_fault_kill_point(const rl_fault *f, int rank, const char *name, uint64_t seq, int dir) {
    /* Logged whatever RINGLET_DEBUG says: the test looks for this line. */
    rl_log(RL_LOG_WARN, rank, "fault injection: %s in %s #%llu before posting %s %zu",
           f->sig == SIGSTOP ? "SIGSTOP" : "SIGKILL", name, (unsigned long long)seq,
           dir == RL_FAULT_SEND ? "send" : "receive", f->n);
    if (f->sig == SIGSTOP) {
        /* Every thread stops here; after SIGCONT the operation goes on where it was. */
        kill(getpid(), SIGSTOP);
        return;
    }
    kill(getpid(), SIGKILL);
    for (;;) pause();
}
