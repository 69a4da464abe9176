/* The device layer's CUDA backend: the backend logic (backend_ops.inc) over the CUDA
 * runtime (rt_cuda.c) and the kernels of kernels/reduce_cuda.cu. What users run. */
#ifdef RINGLET_CUDA

#define RT (&rl_rt_cuda)
#define BACKEND rl_device_cuda
#define BACKEND_NAME "cuda"
#include "backend_ops.inc"

#else
/* A build without CUDA has no cuda backend (device.c then offers sim and none). */
typedef int rl_no_cuda_backend;
#endif
