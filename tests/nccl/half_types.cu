/* A CUDA program written the way programs for NCCL are (nccl-tests among them): it includes
 * nccl.h and nothing of CUDA's, and uses half and __nv_bfloat16 in host and device code,
 * which it gets through nccl.h (NCCL's header includes cuda_runtime.h, cuda_fp16.h and
 * cuda_bf16.h; ringlet's must too). tests/mp/nccl_cuda_header.sh builds it with nvcc against
 * ringlet's src/nccl/nccl.h, links it to ringlet's libnccl.so.2 and runs it.
 *
 * The run needs no GPU: one rank on host buffers (ringlet accepts them) all-reduces,
 * broadcasts and all-gathers float16 and bfloat16 values made with the host conversions of
 * cuda_fp16.h / cuda_bf16.h, and checks them bit for bit (one rank: the result is the
 * input). The kernels below only have to compile (device code using both types).
 * Prints "half_types: N checks, F failed"; exit 0 when none failed. */
#include "nccl.h"

#include <stdio.h>
#include <string.h>

/* Device code with both types: compiled (nvcc builds every kernel of the file), not run. */
__global__ void scale_half(half *x, int n, float k) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = __float2half(__half2float(x[i]) * k);
}
__global__ void scale_bf16(__nv_bfloat16 *x, int n, float k) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = __float2bfloat16(__bfloat162float(x[i]) * k);
}

static long g_checks, g_failed;
#define OK(call)                                                                                                       \
    do {                                                                                                               \
        ncclResult_t r_ = (call);                                                                                      \
        g_checks++;                                                                                                    \
        if (r_ != ncclSuccess) {                                                                                       \
            g_failed++;                                                                                                \
            printf("FAIL line %d: %s returned %d: %s\n", __LINE__, #call, (int)r_, ncclGetLastError(NULL));         \
        }                                                                                                              \
    } while (0)

enum { N = 1031 };

/* Values made on the host with the headers' conversions: -8 .. 8 in steps of 1/64. */
template <typename T>
static void fill(T *x, int n, T (*from_float)(float)) {
    for (int i = 0; i < n; i++) x[i] = from_float((float)((i * 37) % 1025 - 512) / 64.0f);
}
static half h_from(float f) { return __float2half(f); }
static __nv_bfloat16 b_from(float f) { return __float2bfloat16(f); }

template <typename T>
static void check_same(const char *what, const T *got, const T *want, int n) {
    g_checks++;
    if (memcmp(got, want, (size_t)n * sizeof(T)) != 0) {
        g_failed++;
        printf("FAIL %s: result differs from the input (one rank)\n", what);
    }
}

template <typename T>
static void run_type(ncclComm_t comm, ncclDataType_t dt, const char *name, T (*from_float)(float)) {
    static_assert(sizeof(T) == 2, "16-bit types");
    T in[N], out[N];
    fill(in, N, from_float);
    char what[64];
    const ncclRedOp_t ops[] = {ncclSum, ncclMax, ncclAvg};
    for (ncclRedOp_t op : ops) {
        memset(out, 0, sizeof out);
        OK(ncclAllReduce(in, out, N, dt, op, comm, NULL));
        snprintf(what, sizeof what, "ncclAllReduce %s op %d", name, (int)op);
        check_same(what, out, in, N);
    }
    memset(out, 0, sizeof out);
    OK(ncclBroadcast(in, out, N, dt, 0, comm, NULL));
    snprintf(what, sizeof what, "ncclBroadcast %s", name);
    check_same(what, out, in, N);
    memset(out, 0, sizeof out);
    OK(ncclAllGather(in, out, N, dt, comm, NULL));
    snprintf(what, sizeof what, "ncclAllGather %s", name);
    check_same(what, out, in, N);
}

int main(void) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    int version = 0;
    OK(ncclGetVersion(&version));
    ncclUniqueId id;
    OK(ncclGetUniqueId(&id));
    ncclComm_t comm = NULL;
    OK(ncclCommInitRank(&comm, 1, id, 0));
    if (comm == NULL) {
        printf("FAIL: no communicator\nhalf_types: %ld checks, %ld failed\n", g_checks, g_failed + 1);
        return 1;
    }
    int nranks = 0;
    OK(ncclCommCount(comm, &nranks));
    g_checks++;
    if (nranks != 1) g_failed++, printf("FAIL ncclCommCount: %d, expected 1\n", nranks);
    run_type<half>(comm, ncclFloat16, "half", h_from);
    run_type<__nv_bfloat16>(comm, ncclBfloat16, "__nv_bfloat16", b_from);
    OK(ncclCommDestroy(comm));
    printf("half_types: NCCL version code %d; %ld checks, %ld failed\n", version, g_checks, g_failed);
    return g_failed ? 1 : 0;
}
