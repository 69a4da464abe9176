/* ringlet-run's ranks: the environment they share (torchrun's variables, a rendezvous
 * port, a job secret), and starting each one with its own variables and output pipes. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include "run.h"

static bool random_bytes(unsigned char *p, size_t n);

/* Can a listener bind this port on every address (0: any), as rank 0's does? Returns the
 * port, or -1. */
static int try_port(int want)
{
    int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (s < 0)
        return -1;
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_ANY); /* a port taken on another address fails rank 0's bind */
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

bool setenv_long(const char *name, long v)
{
    char tmp[32];
    snprintf(tmp, sizeof tmp, "%ld", v);
    return setenv(name, tmp, 1) == 0;
}

bool set_common_env(long world)
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
    /* Unless the user set them, as torchrun does for OpenMP: the ranks share the cores
     * rather than each starting a thread per core; and Python's output is unbuffered, since
     * the ranks write into pipes (fully buffered: late, and lost when a rank is killed). */
    cpu_set_t allowed;
    long cpus = sched_getaffinity(0, sizeof allowed, &allowed) == 0 ? CPU_COUNT(&allowed) : 1;
    if (world > 1 && !getenv("OMP_NUM_THREADS") && !setenv_long("OMP_NUM_THREADS", cpus / world > 1 ? cpus / world : 1))
        return false;
    if (setenv("PYTHONUNBUFFERED", "1", 0) != 0)
        return false;
    return setenv("MASTER_ADDR", "127.0.0.1", 1) == 0 && setenv_long("MASTER_PORT", port) &&
           setenv_long("WORLD_SIZE", world) && setenv_long("LOCAL_WORLD_SIZE", world) &&
           setenv("GROUP_RANK", "0", 1) == 0 && setenv("GROUP_WORLD_SIZE", "1", 1) == 0 &&
           setenv_long("ROLE_WORLD_SIZE", world);
}

struct rank *ranks;
long nranks;

static struct rlimit orig_nofile;

/* --bind cores: the allowed cores, in order, and how many ranks share them (0: unbound) */
static int bind_cpus[CPU_SETSIZE];
static long bind_ncpus, bind_nranks;

void plan_binding(long n)
{
    cpu_set_t allowed;
    if (sched_getaffinity(0, sizeof allowed, &allowed) != 0) {
        msg("--bind cores: cannot read this process's cores (%s): ranks left unbound", strerror(errno));
        return;
    }
    bind_ncpus = 0;
    for (int c = 0; c < CPU_SETSIZE; c++)
        if (CPU_ISSET(c, &allowed))
            bind_cpus[bind_ncpus++] = c;
    bind_nranks = n;
}

/* With more ranks than cores, the core (of C allowed) of rank r: (r + popcount(r / C)) mod C.
 * Each block of C ranks covers every core once, so the cores' loads differ by at most one,
 * and the next block is shifted by one more for each bit set in its number. So ranks whose
 * numbers differ in one bit, the partners of recursive doubling and halving, never share a
 * core where P and C are powers of two (4 ranks on 2 cores: {0, 3} and {1, 2}), and ring
 * neighbours in a block do not either. Left unbound, the scheduler moves them: 4 ranks over
 * TCP on 2 cores took 31-53 us a 4 KiB all-reduce, bound this way 31-35. */
static long shared_core(long r, long C)
{
    return (r + __builtin_popcountl((unsigned long)(r / C))) % C;
}

/* Rank r of bind_nranks on cores [r * n / N, (r + 1) * n / N) of the n allowed, or, with
 * more ranks than cores, on the one core shared_core gives it. */
static void bind_rank(long r)
{
    if (bind_nranks == 0)
        return;
    cpu_set_t s;
    CPU_ZERO(&s);
    if (bind_nranks > bind_ncpus)
        CPU_SET(bind_cpus[shared_core(r, bind_ncpus)], &s);
    for (long i = r * bind_ncpus / bind_nranks; bind_nranks <= bind_ncpus && i < (r + 1) * bind_ncpus / bind_nranks; i++)
        CPU_SET(bind_cpus[i], &s);
    if (sched_setaffinity(0, sizeof s, &s) != 0) {
        char line[160];
        int n = snprintf(line, sizeof line, "%s: rank %ld: cannot bind to its cores: %s\n", PROG, r, strerror(errno));
        if (n > 0)
            write_all(STDERR_FILENO, line, (size_t)n < sizeof line ? (size_t)n : sizeof line - 1);
    }
}

static _Noreturn void child_exec(long r, int out_w, int err_w, char **argv)
{
    restore_signals();
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
    bind_rank(r);

    execvp(argv[0], argv);
    int e = errno;
    char line[512];
    int n = snprintf(line, sizeof line, "%s: rank %ld: cannot execute '%s': %s\n", PROG, r, argv[0],
                     strerror(e));
    if (n > 0)
        write_all(STDERR_FILENO, line, (size_t)n < sizeof line ? (size_t)n : sizeof line - 1);
    _exit(EXIT_EXEC);
}

int start_rank(long r, char **argv, pid_t launcher)
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
        /* A session of its own: the launcher's signals go to the rank's process group, so
         * what the rank started (a script's python) stops with it; the terminal's Ctrl-C
         * reaches the ranks once, through the launcher; and rank 0, with no controlling
         * terminal, still reads the terminal on stdin (a background group would stop). */
        setsid();
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
    rk->pgid = pid; /* its setsid() makes it so; until then kill(-pgid) finds no group */
    return 0;
}

void raise_nofile(long n)
{
    getrlimit(RLIMIT_NOFILE, &orig_nofile);
    rlim_t need = (rlim_t)(2 * n + 64);
    if (orig_nofile.rlim_cur != RLIM_INFINITY && orig_nofile.rlim_cur < need) {
        struct rlimit rl = orig_nofile;
        rl.rlim_cur = (rl.rlim_max == RLIM_INFINITY || rl.rlim_max >= need) ? need : rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
}
