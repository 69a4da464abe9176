/* Logging to stderr with the rank on every line. RINGLET_DEBUG=NONE|WARN|INFO|TRACE. */
#ifndef RINGLET_LOG_H
#define RINGLET_LOG_H

enum { RL_LOG_NONE = 0, RL_LOG_WARN = 1, RL_LOG_INFO = 2, RL_LOG_TRACE = 3 };
/* RINGLET_DEBUG's values, in level order, in any case; "0" is NONE too. Init allows
 * these (envcheck.c), the log parses them, the README's table lists them. */
#define RL_LOG_LEVELS "NONE,WARN,INFO,TRACE,0"

int rl_log_level(void);
/* rank < 0: not known yet. */
void rl_log(int level, int rank, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

#define RL_LOG(lvl, rank, ...)                                                                                         \
    do {                                                                                                               \
        if (rl_log_level() >= (lvl)) rl_log((lvl), (rank), __VA_ARGS__);                                               \
    } while (0)
#define RL_WARN(rank, ...) RL_LOG(RL_LOG_WARN, rank, __VA_ARGS__)
#define RL_INFO(rank, ...) RL_LOG(RL_LOG_INFO, rank, __VA_ARGS__)
#define RL_TRACE(rank, ...) RL_LOG(RL_LOG_TRACE, rank, __VA_ARGS__)

#endif
