/* The device layer's simulated backend (RINGLET_DEVICE=sim): the same backend logic as
 * the CUDA backend's (backend_ops.inc), over the simulated GPU's runtime (simgpu_*.c), so
 * that what runs on a GPU runs in CI first, under CUDA's rules. */
#define RT (&rl_rt_sim)
#define BACKEND rl_device_sim
#define BACKEND_NAME "sim"
#include "backend_ops.inc"
