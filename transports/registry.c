/* The transports this build has, by id (see transport.h). */
#include <string.h>

#include "transport.h"

const rl_transport_ops *const rl_transports[RL_TP_MAX] = {
    [RL_TP_TCP] = &rl_transport_tcp,
    [RL_TP_IB] = &rl_transport_ib,
    [RL_TP_SHM] = &rl_transport_shm,
    [RL_TP_CUDA_IPC] = &rl_transport_cuda_ipc,
};

int rl_transport_by_name(const char *name) {
    for (int i = 0; i < RL_TP_MAX; i++)
        if (rl_transports[i] && !strcmp(rl_transports[i]->name, name)) return i;
    return -1;
}
