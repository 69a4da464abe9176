#include "log.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

static int g_level = RL_LOG_WARN; /* warnings are rare and worth seeing */
static const char *const level_names[] = {"NONE", "WARN", "INFO", "TRACE"}; /* RL_LOG_LEVELS */
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

static void log_init(void) {
    const char *s = getenv("RINGLET_DEBUG");
    if (!s || !*s) return;
    for (int l = RL_LOG_NONE; l <= RL_LOG_TRACE; l++)
        if (!strcasecmp(s, level_names[l])) {
            g_level = l;
            return;
        }
    if (!strcmp(s, "0")) {
        g_level = RL_LOG_NONE;
        return;
    }
    /* Init refuses such a value first (envcheck.c); this is for a log before any init. */
    g_level = RL_LOG_WARN;
    fprintf(stderr, "ringlet: RINGLET_DEBUG=%s not understood (NONE, WARN, INFO, TRACE or 0); using WARN\n", s);
}

int rl_log_level(void) {
    pthread_once(&g_once, log_init);
    return g_level;
}

void rl_log(int level, int rank, const char *fmt, ...) {
    char line[1024];
    int n;
    if (rank >= 0)
        n = snprintf(line, sizeof line, "ringlet[rank %d pid %d] %s: ", rank, (int)getpid(), level_names[level]);
    else
        n = snprintf(line, sizeof line, "ringlet[pid %d] %s: ", (int)getpid(), level_names[level]);
    va_list ap;
    va_start(ap, fmt);
    if (n > 0 && (size_t)n < sizeof line) vsnprintf(line + n, sizeof line - (size_t)n, fmt, ap);
    va_end(ap);
    /* One write per line so lines of concurrent threads do not interleave. */
    size_t len = strnlen(line, sizeof line - 2);
    line[len++] = '\n';
    fwrite(line, 1, len, stderr);
}
