/* ringlet-run's command line, and finding PROGRAM the way execvp() will. */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "run.h"

static const char usage_line[] =
    "usage: " PROG " -n N [--timeout S] [--grace S] [--bind cores|none] [--] PROGRAM [ARGS...]\n";

static const char help_text[] =
    "Start N local processes of PROGRAM with torchrun's environment and forward their output.\n"
    "\n"
    "options:\n"
    "  -n N, -nN, -np N, --nproc N, --nproc=N   number of ranks (1.." "65536" "), required\n"
    "  --nproc-per-node N, --nproc_per_node N   same as -n (torchrun spelling)\n"
    "  --timeout S, --timeout=S   stop the whole job after S seconds (decimal) and exit 124;\n"
    "                             0 or absent: no timeout\n"
    "  --grace S, --grace=S       after the first rank fails, give the others S seconds (default 0)\n"
    "                             to finish on their own before SIGTERM (SIGKILL 3 s later)\n"
    "  --bind cores|none          cores: split the cores this launcher may use evenly among the ranks,\n"
    "                             rank r on the r-th share (as mpirun binds 2 ranks to a core each), so\n"
    "                             that two ranks never wait on one core while another is free (but a rank\n"
    "                             cannot leave a core another job keeps busy); with more ranks than cores,\n"
    "                             each rank on one core, the cores' loads within one rank, ranks whose\n"
    "                             numbers differ in one bit on different cores where the counts are\n"
    "                             powers of two. none (the default): the scheduler places them\n"
    "  -h, --help                 this text\n"
    "  --                         end of options; the next word is PROGRAM\n"
    "\n"
    "Each rank gets MASTER_ADDR=127.0.0.1, MASTER_PORT (a free port: bound, read and closed, so another\n"
    "process could in rare cases take it before rank 0 listens), RANK, WORLD_SIZE=N, LOCAL_RANK=RANK,\n"
    "LOCAL_WORLD_SIZE=N, GROUP_RANK=0, GROUP_WORLD_SIZE=1, ROLE_RANK, ROLE_WORLD_SIZE, and\n"
    "RINGLET_SECRET (32 random hex digits unless already set and non-empty); unless set,\n"
    "OMP_NUM_THREADS=cores/N (at least 1; N > 1) and PYTHONUNBUFFERED=1. Rank 0 inherits stdin;\n"
    "the other ranks read /dev/null. Output lines are prefixed with \"[RANK] \". Each rank leads a\n"
    "session of its own: signals go to its process group (what it started too). SIGUSR1 and SIGUSR2\n"
    "are passed on to the ranks; SIGTSTP (Ctrl-Z) stops them and the launcher, SIGCONT both. Once the\n"
    "launcher's stdout or stderr is closed by its reader (| head), the ranks' next writes there fail\n"
    "(SIGPIPE); another write error there (a full disk) only drops the output.\n"
    "\n"
    "exit status: 0 when all ranks exit 0; otherwise the first failing rank's status (128+signal when\n"
    "killed by a signal); 124 on --timeout; when the launcher gets SIGINT/SIGTERM/SIGHUP/SIGQUIT, it\n"
    "forwards the signal to the ranks (a second one kills them at once), then dies of it (a shell shows\n"
    "128+signal); a failure, a timeout or a signal also stops what an exited rank left running;\n"
    "2 for bad usage or a PROGRAM that is not found; a rank whose exec fails exits 127.\n";

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

void parse_args(int argc, char **argv, struct options *o)
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
        if (strcmp(a, "-np") == 0 || strcmp(a, "--np") == 0) { /* mpirun's spelling */
            if (i + 1 >= argc)
                usage_error("option %s needs a value", a);
            o->nranks = parse_nranks("-n", argv[++i]);
        } else if (strncmp(a, "-n", 2) == 0 && a[2] != '\0' && a[2] != '-' && a[1] != '-') {
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
        } else if ((v = long_opt_value(argc, argv, &i, "--bind")) != NULL) {
            if (strcmp(v, "cores") != 0 && strcmp(v, "none") != 0)
                usage_error("--bind: '%s' is not 'cores' or 'none'", v);
            o->bind = strcmp(v, "cores") == 0;
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

/* 0 when path is a regular file this process may execute, else an errno value. */
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

int find_program(const char *prog)
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
