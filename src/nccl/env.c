/* NCCL's environment variables that mean the same as ringlet's: a program or launch
 * script written for NCCL sets NCCL_SOCKET_IFNAME, NCCL_IB_HCA, ... and expects them to
 * hold. Each is copied to ringlet's name before the layer's first init, unless ringlet's
 * own is set (it wins). Names whose meaning or range differ are left out: NCCL_ALGO,
 * NCCL_PROTO, NCCL_BUFFSIZE, NCCL_SOCKET_NTHREADS x NCCL_NSOCKS_PERTHREAD (ringlet counts
 * sockets per peer), NCCL_IB_QPS_PER_CONNECTION (NCCL allows up to 128, ringlet 16).
 *
 * setenv, not a table the core reads: the layer is built on ringlet.h alone. It runs once,
 * at the first ncclGetUniqueId or init, where a program that sets these (os.environ in
 * Python, before init_process_group) has set them. */
#include <pthread.h>
#include <stdlib.h>

#include "shim.h"

static const struct {
    const char *nccl, *ours;
} g_same[] = {
    {"NCCL_SOCKET_IFNAME", "RINGLET_SOCKET_IFNAME"}, /* same syntax: prefixes, =exact, ^exclude */
    {"NCCL_IB_HCA", "RINGLET_IB_HCA"},               /* same syntax */
    {"NCCL_IB_DISABLE", "RINGLET_IB_DISABLE"},
    {"NCCL_SHM_DISABLE", "RINGLET_SHM_DISABLE"},
    {"NCCL_P2P_DISABLE", "RINGLET_CUDA_IPC_DISABLE"}, /* NCCL's P2P inside a host is ringlet's cuda_ipc */
    {"NCCL_IB_GID_INDEX", "RINGLET_IB_GID_INDEX"},
    {"NCCL_IB_TIMEOUT", "RINGLET_IB_TIMEOUT"},
    {"NCCL_IB_RETRY_CNT", "RINGLET_IB_RETRY_CNT"},
    {"NCCL_IB_SL", "RINGLET_IB_SL"},
    {"NCCL_IB_TC", "RINGLET_IB_TC"},
};

static pthread_once_t g_once = PTHREAD_ONCE_INIT;

static void import_names(void) {
    for (size_t i = 0; i < sizeof g_same / sizeof g_same[0]; i++) {
        const char *v = getenv(g_same[i].nccl);
        if (!v) continue;
        const char *mine = getenv(g_same[i].ours);
        if (mine) {
            shim_info("%s=%s is not used: %s=%s is set, and wins", g_same[i].nccl, v, g_same[i].ours, mine);
            continue;
        }
        if (setenv(g_same[i].ours, v, 0) != 0) {
            shim_info("%s=%s is not used: setting %s failed (out of memory)", g_same[i].nccl, v, g_same[i].ours);
            continue;
        }
        shim_info("%s=%s taken as %s", g_same[i].nccl, v,
                  g_same[i].ours);
    }
}

void shim_env_import(void) { pthread_once(&g_once, import_names); }
