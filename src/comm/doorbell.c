#include "doorbell.h"

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include "log.h"
#include "sha256.h"
#include "shmseg.h"

#define DB_MAGIC 0x4c4c4542u /* "BELL" */

typedef struct {
    rl_bell bell; /* first: the owner sleeps on it */
    _Alignas(64) uint32_t magic;
    int32_t rank;
    _Atomic int32_t core; /* 1 + the core the owner last waited on (0: not known) */
    uint8_t tag[32];      /* HMAC(secret, name) */
    rl_board_slot board[2];
} db_page;
#define DB_BYTES sizeof(db_page)

struct rl_doorbell {
    db_page *own;
    char name[RL_BELL_NAME_MAX];
    int lock_fd; /* holds the bell's lock while it lives (shmseg.h) */
    pthread_mutex_t mu;            /* mapping peers */
    _Atomic(db_page *) *peers;     /* per rank, mapped on first use */
    unsigned char *failed;         /* per rank: mapping failed once (warned) */
    db_page **mapped;              /* the peers' pages mapped so far, in the order they were */
    atomic_int nmapped;
};

static void tag_of(const uint8_t secret[32], const char *name, uint8_t out[32]) {
    rl_hmac_sha256(secret, 32, name, strlen(name), out);
}

void rl_doorbell_open(struct ringlet_comm *c) {
    struct rl_doorbell *d = calloc(1, sizeof *d);
    if (!d) return;
    d->peers = calloc((size_t)c->nranks, sizeof *d->peers);
    d->failed = calloc((size_t)c->nranks, 1);
    d->mapped = calloc((size_t)c->nranks, sizeof *d->mapped);
    pthread_mutex_init(&d->mu, NULL);
    int fd = -1, e = d->peers && d->failed && d->mapped ? rl_shmseg_create("bell", DB_BYTES, d->name, &fd) : ENOMEM;
    /* Its pages reserved now: on a full /dev/shm the first touch of a sparse page would
     * be SIGBUS, here or in a peer writing to the board. */
    if (!e) e = posix_fallocate(fd, 0, DB_BYTES);
    void *m = MAP_FAILED;
    if (!e && (m = mmap(NULL, DB_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)) == MAP_FAILED) e = errno;
    if (m == MAP_FAILED) {
        RL_INFO(c->rank, "no shared doorbell (%s): peers of this host will poll", strerror(e));
        if (fd >= 0) shm_unlink(d->name), rl_shmseg_close(fd);
        pthread_mutex_destroy(&d->mu);
        free(d->peers), free(d->failed), free(d->mapped), free(d);
        return;
    }
    d->own = m;
    d->lock_fd = fd;
    d->own->magic = DB_MAGIC;
    d->own->rank = c->rank;
    tag_of(c->secret, d->name, d->own->tag);
    memcpy(c->infos[c->rank].bell_name, d->name, sizeof d->name);
    c->db = d;
    atomic_store(&c->ev, &d->own->bell);
}

/* peer's page, mapped on first use (NULL: none, or not mappable). */
static db_page *peer_page(struct ringlet_comm *c, int peer) {
    struct rl_doorbell *d = c->db;
    if (!d || peer < 0 || peer >= c->nranks) return NULL;
    db_page *p = atomic_load_explicit(&d->peers[peer], memory_order_acquire);
    if (p) return p;
    pthread_mutex_lock(&d->mu);
    p = atomic_load(&d->peers[peer]);
    char name[RL_BELL_NAME_MAX];
    memcpy(name, c->infos[peer].bell_name, sizeof name);
    name[sizeof name - 1] = 0;
    if (!p && !d->failed[peer] && name[0]) {
        int fd = shm_open(name, O_RDWR, 0), open_errno = errno;
        struct stat st;
        /* Smaller than a page of ours: not this job's (a read past its end would fault). */
        int whole = fd >= 0 && fstat(fd, &st) == 0 && st.st_size >= (off_t)DB_BYTES;
        db_page *m = whole ? mmap(NULL, DB_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0) : MAP_FAILED;
        if (fd >= 0) close(fd);
        uint8_t tag[32];
        tag_of(c->secret, name, tag);
        if (m != MAP_FAILED && m->magic == DB_MAGIC && m->rank == peer && !memcmp(m->tag, tag, 32)) {
            p = m;
            atomic_store_explicit(&d->peers[peer], p, memory_order_release);
            int n = atomic_load_explicit(&d->nmapped, memory_order_relaxed);
            d->mapped[n] = p;
            atomic_store_explicit(&d->nmapped, n + 1, memory_order_release);
        } else {
            if (m != MAP_FAILED) munmap(m, DB_BYTES);
            d->failed[peer] = 1;
            if (fd < 0 && open_errno == ENOENT) /* the rank has left (it unlinks its bell): nobody to wake */
                RL_INFO(c->rank, "rank %d's doorbell %s is gone (the rank has left)", peer, name);
            else
                RL_WARN(c->rank, "cannot map rank %d's doorbell %s (%s): waits on it poll instead, and calls through the "
                                 "board fail", peer, name,
                        fd < 0 ? strerror(open_errno) : m == MAP_FAILED && whole ? strerror(errno) : "not this job's");
        }
    }
    pthread_mutex_unlock(&d->mu);
    return p;
}

rl_bell *rl_doorbell_peer(void *comm, int peer) {
    db_page *p = peer_page(comm, peer);
    return p ? &p->bell : NULL;
}

rl_board_slot *rl_doorbell_board(struct ringlet_comm *c, int peer, rl_bell **bell) {
    db_page *p = c->db && peer == c->rank ? c->db->own : peer_page(c, peer);
    *bell = p ? &p->bell : NULL;
    return p ? p->board : NULL;
}

int rl_doorbell_core_shared(struct ringlet_comm *c) {
    struct rl_doorbell *d = c->db;
    int core = sched_getcpu() + 1; /* glibc reads it from rseq: no system call */
    if (!d || core <= 0) return 0;
    if (atomic_load_explicit(&d->own->core, memory_order_relaxed) != core)
        atomic_store_explicit(&d->own->core, core, memory_order_relaxed);
    int n = atomic_load_explicit(&d->nmapped, memory_order_acquire);
    for (int i = 0; i < n; i++)
        if (atomic_load_explicit(&d->mapped[i]->core, memory_order_relaxed) == core) return 1;
    return 0;
}

void rl_doorbell_close(struct ringlet_comm *c) {
    struct rl_doorbell *d = c->db;
    if (!d) return;
    atomic_store(&c->ev, &c->own_bell);
    for (int i = 0; i < c->nranks; i++) {
        db_page *p = atomic_load(&d->peers[i]);
        if (p) munmap(p, DB_BYTES);
    }
    munmap(d->own, DB_BYTES);
    shm_unlink(d->name);
    rl_shmseg_close(d->lock_fd);
    pthread_mutex_destroy(&d->mu);
    free(d->peers), free(d->failed), free(d->mapped), free(d);
    c->db = NULL;
}
