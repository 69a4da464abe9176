/* The device layer's front: which backend this process uses, and error messages. */
#include "device.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"

static _Thread_local char t_error[256];

const char *rl_dev_error(void) { return t_error; }

int rl_dev_fail(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(t_error, sizeof t_error, fmt, ap);
    va_end(ap);
    return RL_DEV_ERR;
}

static const rl_device_ops *g_dev;
static char g_why[256];
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

/* A backend whose count works and finds a device, else NULL with the reason. */
static const rl_device_ops *usable(const rl_device_ops *d) {
    int n = 0;
    if (d->count(&n) != RL_DEV_OK) {
        snprintf(g_why, sizeof g_why, "the %s backend cannot run here: %s", d->name, rl_dev_error());
        return NULL;
    }
    if (n < 1) {
        snprintf(g_why, sizeof g_why, "the %s backend sees no device", d->name);
        return NULL;
    }
    return d;
}

static void choose(void) {
    const char *want = getenv("RINGLET_DEVICE");
    if (!want || !*want) want = "auto";
    if (!strcmp(want, "sim")) {
        g_dev = usable(&rl_device_sim);
    } else if (!strcmp(want, "cuda") || !strcmp(want, "auto")) {
#ifdef RINGLET_CUDA
        g_dev = usable(&rl_device_cuda);
#else
        snprintf(g_why, sizeof g_why, "this build has no CUDA support (nvcc was not found at build time)");
#endif
        if (!g_dev && !strcmp(want, "cuda")) RL_WARN(-1, "RINGLET_DEVICE=cuda: %s; device buffers are refused", g_why);
    } else if (!strcmp(want, "none")) {
        snprintf(g_why, sizeof g_why, "RINGLET_DEVICE=none");
    } else {
        snprintf(g_why, sizeof g_why, "RINGLET_DEVICE=%s is not one of auto, cuda, sim, none", want);
        RL_WARN(-1, "%s; device buffers are refused", g_why);
    }
    if (g_dev) g_why[0] = 0;
    else RL_INFO(-1, "no device backend: %s", g_why);
}

const rl_device_ops *rl_device(void) {
    pthread_once(&g_once, choose);
    return g_dev;
}

const char *rl_device_unavailable(void) {
    pthread_once(&g_once, choose);
    return g_why;
}

int rl_dev_ptr_device(const void *p) {
    const rl_device_ops *d = rl_device();
    return d && p ? d->ptr_device(p) : -1;
}
