/* The device whose context opened each IPC mapping of this process. A mapping belongs to
 * that context: it is closed there (rl_dev ops' mem_unimport), whatever device the thread
 * has current then. The pointer's own attributes name the memory's device, the exporter's,
 * which is the wrong context for the close and, in a process that never used that device,
 * would make a context there. */

#include <pthread.h>
#include <stdlib.h>

#include "device.h"

typedef struct import {
    void *p;
    int dev;
    int opens; /* CUDA counts opens of a handle per context: the same address again */
    struct import *next;
} import_t;

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static import_t *g_imports;

int rl_dev_import_note(void *p, int dev) {
    pthread_mutex_lock(&g_mu);
    import_t *x = g_imports;
    while (x && !(x->p == p && x->dev == dev)) x = x->next;
    if (x) {
        x->opens++;
    } else if ((x = malloc(sizeof *x))) {
        *x = (import_t){p, dev, 1, g_imports};
        g_imports = x;
    }
    pthread_mutex_unlock(&g_mu);
    return x ? 0 : -1;
}

int rl_dev_import_take(void *p) {
    int dev = -1;
    pthread_mutex_lock(&g_mu);
    for (import_t **at = &g_imports; *at; at = &(*at)->next) {
        import_t *x = *at;
        if (x->p != p) continue;
        dev = x->dev;
        if (--x->opens == 0) *at = x->next, free(x);
        break;
    }
    pthread_mutex_unlock(&g_mu);
    return dev;
}
