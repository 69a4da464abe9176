/* Unit test of shared-memory segments' locks (src/base/shmseg.c): a process that made a
 * segment, forked a child and died without removing it leaves the segment removable by the
 * next init (rl_shmseg_remove_stale) while the child lives on: the child holds no copy of
 * the lock (it did, and a crashed rank's segments stayed until its DataLoader workers
 * ended). The lock's descriptor is 10 or above (a program's dup2 onto 0..2 would drop it).
 * Exit status 0 on success. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "shmseg.h"

typedef struct {
    char name[RL_SHMSEG_NAME_MAX];
    int fd, err;
    pid_t child;
} report;

int main(void) {
    int p[2], up[2];
    if (pipe(p) != 0 || pipe(up) != 0) return perror("pipe"), 1;
    pid_t a = fork();
    if (a < 0) return perror("fork"), 1;
    if (a == 0) { /* the rank: makes a segment, forks a worker, dies holding it */
        report r;
        memset(&r, 0, sizeof r);
        r.err = rl_shmseg_create("unittest", 4096, r.name, &r.fd);
        if (!r.err && (r.child = fork()) == 0) { /* the worker: lives on (30 s at most) */
            alarm(30);
            /* past fork's child handlers (where a copy of the lock is closed): say so */
            if (write(up[1], "u", 1) != 1) _exit(4);
            for (;;) pause();
        }
        char u;
        if (r.child > 0 && read(up[0], &u, 1) != 1) _exit(5); /* the worker is up: by construction */
        if (write(p[1], &r, sizeof r) != (ssize_t)sizeof r) _exit(3);
        _exit(0);
    }
    close(p[1]);
    report r;
    ssize_t got = read(p[0], &r, sizeof r);
    waitpid(a, NULL, 0);
    if (got != (ssize_t)sizeof r || r.err) {
        printf("FAIL: no segment made: %s\n", got == (ssize_t)sizeof r ? strerror(r.err) : "no report");
        return 1;
    }
    int failures = 0;
    if (r.fd < 10) {
        printf("FAIL: the lock's descriptor is %d (a program's dup2 onto it would drop the lock)\n", r.fd);
        failures++;
    } else {
        printf("ok:   the lock's descriptor is %d\n", r.fd);
    }
    char path[RL_SHMSEG_NAME_MAX + 16];
    snprintf(path, sizeof path, "/dev/shm%s", r.name);
    rl_shmseg_remove_stale(); /* the rank is dead, its worker alive */
    if (access(path, F_OK) == 0) {
        printf("FAIL: %s stays while the dead rank's forked worker lives (the worker holds the lock)\n", r.name);
        shm_unlink(r.name);
        failures++;
    } else {
        printf("ok:   a dead rank's segment removed while the worker it forked lives on\n");
    }
    if (r.child > 0) kill(r.child, SIGKILL);
    if (failures) return 1;
    printf("test_shmseg: ok\n");
    return 0;
}
