/* Locked shared-memory segments (shmseg.h). */
#include "shmseg.h"

#include "fork_close.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define PREFIX "ringlet-"

int rl_shmseg_create(const char *kind, size_t bytes, char name[RL_SHMSEG_NAME_MAX], int *fd_out) {
    *fd_out = -1;
    for (int attempt = 0; attempt < 8; attempt++) {
        uint8_t r[8];
        if (getrandom(r, sizeof r, 0) != (ssize_t)sizeof r) { /* a seccomp filter: the clock's */
            struct timespec ts;
            clock_gettime(CLOCK_MONOTONIC, &ts);
            uint64_t v = ((uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec) * 0x9e3779b97f4a7c15ull + (uint64_t)attempt;
            memcpy(r, &v, sizeof r);
        }
        snprintf(name, RL_SHMSEG_NAME_MAX, "/" PREFIX "%d-%s-%02x%02x%02x%02x%02x%02x%02x%02x", (int)getpid(), kind,
                 r[0], r[1], r[2], r[3], r[4], r[5], r[6], r[7]);
        int fd = shm_open(name, O_RDWR | O_CREAT | O_EXCL, 0600);
        if (fd < 0) {
            if (errno == EEXIST) continue;
            return errno;
        }
        /* A remover may have opened it between our open and our lock: it then holds the
         * lock (we fail and retry), or has already unlinked it (the name no longer leads
         * to our file: retry). */
        struct stat mine, named;
        char path[RL_SHMSEG_NAME_MAX + 16];
        snprintf(path, sizeof path, "/dev/shm%s", name);
        if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
            close(fd);
            continue;
        }
        if (fstat(fd, &mine) != 0 || stat(path, &named) != 0) {
            int e = errno;
            if (e != ENOENT) { /* this system's own failure: the segment made is not left behind */
                shm_unlink(name);
                close(fd);
                return e;
            }
            close(fd);
            continue;
        }
        if (mine.st_ino != named.st_ino || mine.st_dev != named.st_dev) {
            close(fd);
            continue;
        }
        /* A size over RLIMIT_FSIZE is SIGXFSZ, which kills the process, before ftruncate
         * could fail with EFBIG: refused here. */
        struct rlimit fsize;
        if (getrlimit(RLIMIT_FSIZE, &fsize) == 0 && fsize.rlim_cur != RLIM_INFINITY && bytes > fsize.rlim_cur) {
            shm_unlink(name);
            close(fd);
            return EFBIG;
        }
        if (ftruncate(fd, (off_t)bytes) != 0) {
            int e = errno;
            shm_unlink(name);
            close(fd);
            return e;
        }
        int high = fcntl(fd, F_DUPFD_CLOEXEC, 10); /* the same open file: the lock goes with it */
        if (high >= 0) close(fd), fd = high;
        rl_fork_close_add(fd);
        *fd_out = fd;
        return 0;
    }
    return EAGAIN;
}

void rl_shmseg_close(int fd) {
    if (fd < 0) return;
    rl_fork_close_remove(fd);
    close(fd);
}

void rl_shmseg_remove_stale(void) {
    DIR *d = opendir("/dev/shm");
    if (!d) return;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (strncmp(e->d_name, PREFIX, strlen(PREFIX)) != 0) continue;
        char n[300];
        snprintf(n, sizeof n, "/%s", e->d_name);
        int fd = shm_open(n, O_RDWR, 0);
        if (fd < 0) continue;
        /* Nobody holds it: its owner is gone. Unlinked while we hold the lock, so that a
         * creator that lost the race sees it and takes another name. */
        if (flock(fd, LOCK_EX | LOCK_NB) == 0) shm_unlink(n);
        close(fd);
    }
    closedir(d);
}
