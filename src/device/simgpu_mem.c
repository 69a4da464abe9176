/* The simulated GPU's memory (simgpu.h): device allocations as doubly mapped memfds,
 * pinned host memory, the table that tells them apart, and sharing with another process
 * as CUDA IPC does. Allocations, frees and IPC opens may synchronise the device, as
 * CUDA's may: they wait for every stream, and fail where a flag holds one; an IPC close
 * waits for nothing (sim_ipc_close). */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include "simgpu.h"
#include "util.h"

#define PAGE ((size_t)4096)
#define HDR_MAGIC 0x55504753u    /* "SGPU": the memfd's header page */
#define HANDLE_MAGIC 0x48504753u /* "SGPH": an exported handle */

enum { KIND_DEVICE, KIND_IMPORTED, KIND_PINNED };

typedef struct alloc {
    char *user;   /* the address callers see (PROT_NONE for device memory) */
    char *eng;    /* the engine's read-write view (pinned: = user) */
    size_t bytes; /* as asked: the bound of every range check */
    size_t map;   /* mapped bytes (pages) */
    int fd;       /* memfd (device, imported), -1 (pinned) */
    int kind, device;
    int ctx_device; /* imported: the device whose context mapped it (current at ipc_open) */
    int opens;    /* imported: ipc_open calls not yet closed (CUDA counts them) */
    uint8_t nonce[16];
    struct header *hdr; /* device, imported: the memfd's header page */
} alloc_t;

/* The memfd's first page, mapped by the owner and by every process that imports it. */
#define IMPORTERS 32
struct header {
    uint32_t magic;
    int32_t device;
    uint64_t bytes;
    uint8_t nonce[16];
    /* The processes that have the memory open through IPC (pids, 0: free entry). CUDA
     * calls freeing memory that another process has open undefined; the simulator stops
     * the process that does it (sim_free). */
    int32_t importers[IMPORTERS];
};
_Static_assert(sizeof(struct header) <= 4096, "header larger than its page");

/* What mem_export hands out. */
struct handle {
    uint32_t magic;
    int32_t pid, fd, device;
    uint64_t bytes;
    uint8_t nonce[16];
};
_Static_assert(sizeof(struct handle) <= RL_DEV_HANDLE_BYTES, "handle too large");

/* Allocations sorted by user address. */
static pthread_rwlock_t g_mu = PTHREAD_RWLOCK_INITIALIZER;
static atomic_int g_any; /* an allocation was ever registered (sim_memory_seen) */
static alloc_t **g_tab;
static size_t g_n, g_cap;

static size_t round_page(size_t n) { return n ? (n + PAGE - 1) / PAGE * PAGE : PAGE; }

/* Index of the last allocation whose user address is <= p, or g_n (lock held). */
static size_t find_below(const void *p) {
    size_t lo = 0, hi = g_n;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if ((const char *)g_tab[mid]->user <= (const char *)p) lo = mid + 1;
        else hi = mid;
    }
    return lo ? lo - 1 : g_n;
}

/* The allocation whose mapping contains p (lock held), or NULL. */
static alloc_t *find(const void *p) {
    size_t i = find_below(p);
    if (i == g_n) return NULL;
    alloc_t *a = g_tab[i];
    return (const char *)p < a->user + a->map ? a : NULL;
}

static int insert(alloc_t *a) {
    pthread_rwlock_wrlock(&g_mu);
    if (g_n == g_cap) {
        size_t cap = g_cap ? 2 * g_cap : 64;
        alloc_t **t = realloc(g_tab, cap * sizeof *t);
        if (!t) {
            pthread_rwlock_unlock(&g_mu);
            return -1;
        }
        g_tab = t;
        g_cap = cap;
    }
    size_t i = g_n;
    while (i > 0 && g_tab[i - 1]->user > a->user) {
        g_tab[i] = g_tab[i - 1];
        i--;
    }
    g_tab[i] = a;
    g_n++;
    atomic_store_explicit(&g_any, 1, memory_order_relaxed);
    pthread_rwlock_unlock(&g_mu);
    return 0;
}

int sim_memory_seen(void) { return atomic_load_explicit(&g_any, memory_order_relaxed); }

/* Takes the allocation that starts at p and has the kind out of the table, or NULL.
 * An imported one stays while other opens of its handle are not closed: then *kept = 1
 * (kept may be NULL for the other kinds). */
static alloc_t *take(const void *p, int kind, int *kept) {
    pthread_rwlock_wrlock(&g_mu);
    size_t i = find_below(p);
    alloc_t *a = i < g_n && g_tab[i]->user == p && g_tab[i]->kind == kind ? g_tab[i] : NULL;
    if (kept) *kept = 0;
    if (a && kind == KIND_IMPORTED && a->opens > 1) {
        a->opens--;
        *kept = 1;
    } else if (a) {
        memmove(&g_tab[i], &g_tab[i + 1], (g_n - i - 1) * sizeof *g_tab);
        g_n--;
    }
    pthread_rwlock_unlock(&g_mu);
    return a;
}

/* The mapping device dev's context already made of the allocation with this nonce,
 * counted as one more open; NULL if there is none (CUDA counts opens per context). */
static void *reopen(const uint8_t nonce[16], int dev) {
    void *p = NULL;
    pthread_rwlock_wrlock(&g_mu);
    for (size_t i = 0; i < g_n && !p; i++)
        if (g_tab[i]->kind == KIND_IMPORTED && g_tab[i]->ctx_device == dev &&
            !memcmp(g_tab[i]->nonce, nonce, sizeof g_tab[i]->nonce)) {
            g_tab[i]->opens++;
            p = g_tab[i]->user;
        }
    pthread_rwlock_unlock(&g_mu);
    return p;
}

int sim_translate(const void *p, size_t bytes, void **eng, char *why, size_t whylen) {
    pthread_rwlock_rdlock(&g_mu);
    alloc_t *a = p ? find(p) : NULL;
    int kind = SIM_MEM_PAGEABLE;
    *eng = (void *)p;
    if (a) {
        size_t off = (size_t)((const char *)p - a->user);
        if (off > a->bytes || bytes > a->bytes - off) {
            snprintf(why, whylen, "%zu bytes at +%zu run past the end of a %s allocation of %zu bytes", bytes, off,
                     a->kind == KIND_PINNED ? "pinned" : "device", a->bytes);
            kind = SIM_MEM_BAD;
        } else if (a->kind == KIND_PINNED) {
            kind = SIM_MEM_PINNED;
        } else {
            kind = SIM_MEM_DEVICE;
            *eng = a->eng + off;
        }
    }
    pthread_rwlock_unlock(&g_mu);
    return kind;
}

int sim_peer_denied(const void *p, int dev) {
    pthread_rwlock_rdlock(&g_mu);
    alloc_t *a = find(p);
    int owner = -1;
    if (a && a->kind == KIND_DEVICE && a->device != dev) owner = a->device;
    if (a && a->kind == KIND_IMPORTED && a->ctx_device != dev) owner = a->ctx_device;
    pthread_rwlock_unlock(&g_mu);
    return owner;
}

int sim_pointer_host_mapped(const void *p) {
    pthread_rwlock_rdlock(&g_mu);
    alloc_t *a = find(p);
    int pinned = a && a->kind == KIND_PINNED;
    pthread_rwlock_unlock(&g_mu);
    return pinned;
}

int sim_pointer_device(const void *p) {
    pthread_rwlock_rdlock(&g_mu);
    alloc_t *a = find(p);
    int d = a && a->kind != KIND_PINNED ? a->device : -1;
    pthread_rwlock_unlock(&g_mu);
    return d;
}

/* Maps fd's data (after the header page) twice: no access for callers, read-write for
 * the engine. */
static int map_twice(alloc_t *a, const char *what) {
    a->user = mmap(NULL, a->map, PROT_NONE, MAP_SHARED, a->fd, (off_t)PAGE);
    if (a->user == MAP_FAILED) return a->user = NULL, sim_fail(RL_RT_ERR_MEMORY_ALLOCATION, "%s: mmap: %s", what, strerror(errno));
    a->eng = mmap(NULL, a->map, PROT_READ | PROT_WRITE, MAP_SHARED, a->fd, (off_t)PAGE);
    if (a->eng == MAP_FAILED) {
        int e = errno;
        munmap(a->user, a->map);
        a->user = a->eng = NULL;
        return sim_fail(RL_RT_ERR_MEMORY_ALLOCATION, "%s: mmap: %s", what, strerror(e));
    }
    return RL_RT_SUCCESS;
}

static void unmap(alloc_t *a) {
    if (a->kind == KIND_PINNED) {
        munmap(a->user, a->map);
    } else {
        munmap(a->user, a->map);
        munmap(a->eng, a->map);
        if (a->hdr) munmap(a->hdr, PAGE);
        close(a->fd);
    }
    free(a);
}

static int map_header(alloc_t *a, const char *what) {
    void *h = mmap(NULL, PAGE, PROT_READ | PROT_WRITE, MAP_SHARED, a->fd, 0);
    if (h == MAP_FAILED) return sim_fail(RL_RT_ERR_MEMORY_ALLOCATION, "%s: mmap: %s", what, strerror(errno));
    a->hdr = h;
    return RL_RT_SUCCESS;
}

/* Whether a process still runs (a zombie, exited but not yet reaped, has no mappings). */
static int process_alive(int32_t pid) { return pid > 0 && !rl_process_gone((int)pid); }

/* This process as an importer of the allocation (its first open), or no longer (its last
 * close). An entry of a process that exited without closing is taken over. */
static int add_importer(alloc_t *a) {
    int32_t me = (int32_t)getpid();
    for (int i = 0; i < IMPORTERS; i++) {
        int32_t was = __atomic_load_n(&a->hdr->importers[i], __ATOMIC_ACQUIRE);
        if ((was == 0 || (was != me && !process_alive(was))) &&
            __atomic_compare_exchange_n(&a->hdr->importers[i], &was, me, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
            return RL_RT_SUCCESS;
    }
    return sim_fail(RL_RT_ERR_MAP_FAILED, "ipc_open: more than %d live processes have this memory open", IMPORTERS);
}

static void drop_importer(alloc_t *a) {
    int32_t me = (int32_t)getpid();
    for (int i = 0; i < IMPORTERS; i++) {
        int32_t mine = me;
        if (__atomic_compare_exchange_n(&a->hdr->importers[i], &mine, 0, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) return;
    }
}

/* A live process (not this one) that has the allocation open, or 0. One that exited
 * without closing counts no more: its mappings went with it. */
static int32_t live_importer(const alloc_t *a) {
    for (int i = 0; i < IMPORTERS; i++) {
        int32_t pid = __atomic_load_n(&a->hdr->importers[i], __ATOMIC_ACQUIRE);
        if (pid > 0 && pid != (int32_t)getpid() && process_alive(pid)) return pid;
    }
    return 0;
}

/* A call's start (sim_call_begin): returns the sticky error if there is one. */
#define CALL_BEGIN()                                                                                                   \
    do {                                                                                                               \
        int sticky_ = sim_call_begin();                                                                                \
        if (sticky_) return sticky_;                                                                                   \
    } while (0)

/* A GPU's memory is finite: cudaMalloc past it fails with cudaErrorMemoryAllocation.
 * RINGLET_SIM_MEMORY=N gives each simulated device N bytes in this process (read at each
 * call: a test may give one rank less); unset or 0: as much as the host has. */
#define SIM_MEM_DEVICES 64
static _Atomic size_t g_dev_used[SIM_MEM_DEVICES];
static int reserve_device_memory(int dev, size_t bytes) {
    size_t cap = (size_t)rl_env_int("RINGLET_SIM_MEMORY", 0, 0, 1LL << 50);
    _Atomic size_t *used = &g_dev_used[(unsigned)dev % SIM_MEM_DEVICES];
    size_t u = atomic_load(used);
    do {
        if (cap && (u > cap || bytes > cap - u))
            return sim_fail(RL_RT_ERR_MEMORY_ALLOCATION,
                            "malloc: %zu bytes: out of memory (device %d has %zu of its %zu bytes in use: "
                            "RINGLET_SIM_MEMORY)",
                            bytes, dev, u, cap);
    } while (!atomic_compare_exchange_weak(used, &u, u + bytes));
    return RL_RT_SUCCESS;
}
static void release_device_memory(int dev, size_t bytes) {
    atomic_fetch_sub(&g_dev_used[(unsigned)dev % SIM_MEM_DEVICES], bytes);
}

/* cudaMalloc: may synchronise the device (sim_device_sync). */
int sim_malloc(void **p, size_t bytes) {
    *p = NULL;
    CALL_BEGIN();
    int rc = sim_device_sync("cudaMalloc");
    if (rc) return rc;
    if (bytes == 0) return RL_RT_SUCCESS; /* as cudaMalloc */
    if (bytes > SIZE_MAX - 2 * PAGE) return sim_fail(RL_RT_ERR_MEMORY_ALLOCATION, "malloc: %zu bytes: out of memory", bytes);
    if ((rc = reserve_device_memory(sim_current_device(), bytes))) return rc;
    alloc_t *a = calloc(1, sizeof *a);
    if (!a) {
        release_device_memory(sim_current_device(), bytes);
        return sim_fail(RL_RT_ERR_MEMORY_ALLOCATION, "malloc: out of memory");
    }
    a->kind = KIND_DEVICE;
    a->device = sim_current_device();
    a->bytes = bytes;
    a->map = round_page(bytes);
    a->fd = memfd_create("ringlet-sim-device", MFD_CLOEXEC);
    struct header h = {.magic = HDR_MAGIC, .device = a->device, .bytes = bytes};
    if (a->fd < 0) rc = sim_fail(RL_RT_ERR_MEMORY_ALLOCATION, "malloc: memfd_create: %s", strerror(errno));
    else if (ftruncate(a->fd, (off_t)(PAGE + a->map)) != 0)
        rc = sim_fail(RL_RT_ERR_MEMORY_ALLOCATION, "malloc: %zu bytes: %s", bytes, strerror(errno));
    else if (getrandom(a->nonce, sizeof a->nonce, 0) != (ssize_t)sizeof a->nonce)
        rc = sim_fail(RL_RT_ERR_MEMORY_ALLOCATION, "malloc: getrandom: %s", strerror(errno));
    if (!rc) {
        memcpy(h.nonce, a->nonce, sizeof h.nonce);
        if (pwrite(a->fd, &h, sizeof h, 0) != (ssize_t)sizeof h)
            rc = sim_fail(RL_RT_ERR_MEMORY_ALLOCATION, "malloc: header: %s", strerror(errno));
    }
    if (!rc) rc = map_header(a, "malloc");
    if (!rc) rc = map_twice(a, "malloc");
    /* "The memory is not cleared" (cudaMalloc): not zeros here either, so that reading
     * what nothing wrote gives a wrong result (0xFF bytes: NaN as floats, -1 as integers). */
    if (!rc) memset(a->eng, 0xFF, bytes);
    if (!rc && insert(a) != 0) {
        munmap(a->user, a->map);
        munmap(a->eng, a->map);
        rc = sim_fail(RL_RT_ERR_MEMORY_ALLOCATION, "malloc: out of memory");
    }
    if (rc) {
        if (a->hdr) munmap(a->hdr, PAGE);
        if (a->fd >= 0) close(a->fd);
        release_device_memory(a->device, bytes);
        free(a);
        return rc;
    }
    *p = a->user;
    return RL_RT_SUCCESS;
}

/* cudaFreeHost: CUDA's documentation promises no synchronisation (cudaFree's is stated:
 * the Programming Guide's stream-ordered allocator chapter says cudaMalloc and cudaFree
 * synchronise the GPU across all streams; nothing says it of cudaFreeHost), so work queued
 * or running that still uses the memory would touch freed memory: the simulator stops the
 * process that does it (as ipc_close). A free may synchronise all the same, so it fails
 * where that would hang (a held stream) or is forbidden (a capture). */
static int free_may_sync(void *p, int kind, const char *what) {
    pthread_rwlock_rdlock(&g_mu);
    alloc_t *a = find(p);
    const void *eng = a && a->kind == kind && a->user == p ? a->eng : NULL;
    size_t bytes = eng ? a->bytes : 0;
    pthread_rwlock_unlock(&g_mu);
    int dev = -1;
    if (eng && sim_work_uses(eng, bytes, &dev)) {
        fprintf(stderr, "simulated GPU: %s(%p) in pid %d while work queued on a stream of device %d still uses that "
                        "memory (undefined in CUDA, which does not say that a free waits for it: wait for the work "
                        "first)\n",
                what, p, (int)getpid(), dev);
        abort();
    }
    return sim_device_may_sync(what);
}

/* cudaFree: synchronises the device first. Freeing memory that another live process has
 * open through IPC is undefined in CUDA (cudaIpcOpenMemHandle's documentation: the
 * importer closes it first); the simulator stops the process there, as a sanitizer would. */
int sim_free(void *p) {
    CALL_BEGIN();
    if (!p) return RL_RT_SUCCESS;
    int rc = sim_device_sync("cudaFree"); /* waits for every stream (see free_may_sync) */
    if (rc) return rc;
    alloc_t *a = take(p, KIND_DEVICE, NULL);
    if (!a)
        return sim_fail(RL_RT_ERR_INVALID_DEVICE_POINTER, "free: %p is not the start of a device allocation", p);
    int32_t importer = live_importer(a);
    if (importer) {
        fprintf(stderr, "simulated GPU: cudaFree(%p) in pid %d while pid %d still has the memory open through IPC "
                        "(undefined in CUDA: that process must call cudaIpcCloseMemHandle first)\n",
                p, (int)getpid(), (int)importer);
        abort();
    }
    release_device_memory(a->device, a->bytes);
    unmap(a);
    return RL_RT_SUCCESS;
}

/* cudaHostAlloc (a page-locked allocation: it may synchronise the device). */
int sim_host_alloc(void **p, size_t bytes) {
    *p = NULL;
    CALL_BEGIN();
    int rc = sim_device_sync("cudaHostAlloc");
    if (rc) return rc;
    alloc_t *a = calloc(1, sizeof *a);
    if (!a) return sim_fail(RL_RT_ERR_MEMORY_ALLOCATION, "host_alloc: out of memory");
    a->kind = KIND_PINNED;
    a->device = -1;
    a->fd = -1;
    a->bytes = bytes;
    a->map = round_page(bytes);
    a->user = a->eng = mmap(NULL, a->map, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (a->user == MAP_FAILED) {
        free(a);
        return sim_fail(RL_RT_ERR_MEMORY_ALLOCATION, "host_alloc: %zu bytes: %s", bytes, strerror(errno));
    }
    if (insert(a) != 0) {
        munmap(a->user, a->map);
        free(a);
        return sim_fail(RL_RT_ERR_MEMORY_ALLOCATION, "host_alloc: out of memory");
    }
    *p = a->user;
    return RL_RT_SUCCESS;
}

/* cudaFreeHost: free_may_sync. */
int sim_free_host(void *p) {
    CALL_BEGIN();
    if (!p) return RL_RT_SUCCESS;
    int rc = free_may_sync(p, KIND_PINNED, "cudaFreeHost");
    if (rc) return rc;
    alloc_t *a = take(p, KIND_PINNED, NULL);
    if (!a) return sim_fail(RL_RT_ERR_INVALID_VALUE, "free_host: %p is not the start of a pinned allocation", p);
    unmap(a);
    return RL_RT_SUCCESS;
}

int sim_ipc_get_handle(rl_dev_handle *h, void *p) {
    CALL_BEGIN();
    struct handle x;
    memset(&x, 0, sizeof x);
    pthread_rwlock_rdlock(&g_mu);
    alloc_t *a = find(p);
    int ok = a && a->kind == KIND_DEVICE && a->user == p;
    if (ok) {
        x.magic = HANDLE_MAGIC;
        x.pid = (int32_t)getpid();
        x.fd = a->fd;
        x.device = a->device;
        x.bytes = a->bytes;
        memcpy(x.nonce, a->nonce, sizeof x.nonce);
    }
    pthread_rwlock_unlock(&g_mu);
    if (!ok) return sim_fail(RL_RT_ERR_INVALID_VALUE, "ipc_get_handle: %p is not the start of a device allocation of this process", p);
    memset(h, 0, sizeof *h);
    memcpy(h->bytes, &x, sizeof x);
    return RL_RT_SUCCESS;
}

/* cudaIpcOpenMemHandle: may synchronise the device. */
int sim_ipc_open(void **p, const rl_dev_handle *h) {
    *p = NULL;
    CALL_BEGIN();
    struct handle x;
    memcpy(&x, h->bytes, sizeof x);
    if (x.magic != HANDLE_MAGIC || x.bytes == 0)
        return sim_fail(RL_RT_ERR_INVALID_VALUE, "ipc_open: not a handle of the simulated GPU");
    if (x.pid == (int32_t)getpid())
        return sim_fail(RL_RT_ERR_INVALID_CONTEXT, "ipc_open: the handle is this process's own memory (CUDA opens "
                        "handles of other processes only: invalid device context)");
    /* Testing aid: refuse as CUDA does between containers, or two GPUs without peer access. */
    if (rl_env_int("RINGLET_SIM_IPC_DENY", 0, 0, 1))
        return sim_fail(RL_RT_ERR_MAP_FAILED, "ipc_open: permission denied (RINGLET_SIM_IPC_DENY=1: as if the processes "
                                              "were in two containers)");
    /* The mapping is made in the current device's context; memory of another device
     * needs peer access to it (cudaIpcMemLazyEnablePeerAccess enables it where the two
     * devices can have it; RINGLET_SIM_PEER=0: none can, as GPUs on PCIe without P2P). */
    int cur = sim_current_device();
    if (x.device != cur && !rl_env_int("RINGLET_SIM_PEER", 1, 0, 1))
        return sim_fail(RL_RT_ERR_PEER_UNSUPPORTED, "ipc_open: the memory is on device %d, the current device is %d, "
                                                    "and they cannot access each other (RINGLET_SIM_PEER=0)",
                        (int)x.device, cur);
    int rc = sim_device_sync("cudaIpcOpenMemHandle");
    if (rc) return rc;
    /* CUDA: a handle this context has open already gives the same address again, and
     * counts the open; each needs its own close (the mapping goes with the last). */
    if ((*p = reopen(x.nonce, cur))) return RL_RT_SUCCESS;
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/fd/%d", (int)x.pid, (int)x.fd);
    alloc_t *a = calloc(1, sizeof *a);
    if (!a) return sim_fail(RL_RT_ERR_MEMORY_ALLOCATION, "ipc_open: out of memory");
    a->fd = open(path, O_RDWR | O_CLOEXEC);
    if (a->fd < 0) {
        int e = errno;
        free(a);
        return sim_fail(RL_RT_ERR_MAP_FAILED, "ipc_open: cannot open %s (pid %d's memory): %s", path, (int)x.pid,
                        strerror(e));
    }
    /* The fd number may since hold another file (the memory was freed): the header's
     * nonce says whether it is the allocation the handle names. */
    struct header hd;
    struct stat st;
    if (pread(a->fd, &hd, sizeof hd, 0) != (ssize_t)sizeof hd || hd.magic != HDR_MAGIC ||
        memcmp(hd.nonce, x.nonce, sizeof x.nonce) != 0 || hd.bytes != x.bytes || fstat(a->fd, &st) != 0 ||
        (size_t)st.st_size < PAGE + round_page(x.bytes)) {
        close(a->fd);
        free(a);
        return sim_fail(RL_RT_ERR_MAP_FAILED, "ipc_open: the handle's memory no longer exists (pid %d freed it; fd %d "
                                              "holds something else now)",
                        (int)x.pid, (int)x.fd);
    }
    a->kind = KIND_IMPORTED;
    a->opens = 1;
    a->device = x.device;
    a->ctx_device = cur;
    a->bytes = x.bytes;
    a->map = round_page(x.bytes);
    memcpy(a->nonce, x.nonce, sizeof a->nonce);
    rc = map_header(a, "ipc_open");
    if (!rc) rc = add_importer(a);
    int added = !rc;
    if (!rc) rc = map_twice(a, "ipc_open");
    if (!rc && insert(a) != 0) {
        munmap(a->user, a->map);
        munmap(a->eng, a->map);
        rc = sim_fail(RL_RT_ERR_MEMORY_ALLOCATION, "ipc_open: out of memory");
    }
    if (rc) {
        if (added) drop_importer(a);
        if (a->hdr) munmap(a->hdr, PAGE);
        close(a->fd);
        free(a);
        return rc;
    }
    *p = a->user;
    return RL_RT_SUCCESS;
}

/* cudaIpcCloseMemHandle: unmaps with the last open's close. It is not said to wait for the
 * work that uses the mapping: the simulator waits for nothing, and stops the process where
 * work queued or running still uses what the close would unmap (on a GPU that work would
 * touch unmapped memory), as a sanitizer would. It may synchronise the device: it fails
 * where that would hang (sim_device_may_sync). */
int sim_ipc_close(void *p) {
    CALL_BEGIN();
    pthread_rwlock_rdlock(&g_mu);
    alloc_t *a = find(p);
    int opened_on = a && a->kind == KIND_IMPORTED && a->user == p ? a->ctx_device : -1, cur = sim_current_device();
    int last = opened_on >= 0 && a->opens == 1, dev = -1;
    const void *eng = last ? a->eng : NULL;
    size_t map = last ? a->map : 0;
    pthread_rwlock_unlock(&g_mu);
    /* The mapping belongs to the context that opened it (UCX pushes a context before its
     * close for that reason, openucx/ucx#10618); closing it from another device's context
     * is not said to work, and entering the memory's own device (what the pointer's
     * attributes name) would make a context there besides. */
    if (opened_on >= 0 && opened_on != cur)
        return sim_fail(RL_RT_ERR_INVALID_CONTEXT, "ipc_close: %p was opened in device %d's context, the current "
                                                   "device is %d (close it where it was opened)",
                        p, opened_on, cur);
    if (last && sim_work_uses(eng, map, &dev)) {
        fprintf(stderr, "simulated GPU: cudaIpcCloseMemHandle(%p) in pid %d while work queued on a stream of device %d "
                        "still uses that memory (undefined in CUDA: the work would touch unmapped memory; wait for "
                        "it first)\n",
                p, (int)getpid(), dev);
        abort();
    }
    int rc = sim_device_may_sync("cudaIpcCloseMemHandle");
    if (rc) return rc;
    int kept;
    a = take(p, KIND_IMPORTED, &kept);
    if (!a) return sim_fail(RL_RT_ERR_INVALID_VALUE, "ipc_close: %p is not memory this process opened", p);
    if (!kept) drop_importer(a), unmap(a);
    return RL_RT_SUCCESS;
}
