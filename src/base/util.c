#include "util.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "log.h"

double rl_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void rl_sleep_ms(int ms) {
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

long long rl_env_int(const char *name, long long def, long long lo, long long hi) {
    const char *s = getenv(name);
    if (!s || !*s) return def;
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 0);
    long long mul = 1;
    if (*end == 'k' || *end == 'K') mul = 1LL << 10, end++;
    else if (*end == 'm' || *end == 'M') mul = 1LL << 20, end++;
    else if (*end == 'g' || *end == 'G') mul = 1LL << 30, end++;
    if (errno || end == s || *end || v > hi / mul || v * mul < lo) {
        RL_WARN(-1, "%s=%s is not an integer in [%lld, %lld]; using %lld", name, s, lo, hi, def);
        return def;
    }
    return v * mul;
}

double rl_env_double(const char *name, double def, double lo, double hi) {
    const char *s = getenv(name);
    if (!s || !*s) return def;
    char *end;
    double v = strtod(s, &end);
    if (end == s || *end || !(v >= lo && v <= hi)) {
        RL_WARN(-1, "%s=%s is not a number in [%g, %g]; using %g", name, s, lo, hi, def);
        return def;
    }
    return v;
}

double rl_timeout_s(void) { return rl_env_double("RINGLET_TIMEOUT", 300.0, 0.1, 1e7); }
