/* What the CUDA kernel files (reduce_cuda.cu, convert_cuda.cu) share: the launch
 * parameters, how a launcher launches or only loads its kernel (Go), and how each data
 * type is stored and computed on. Included by .cu files only, inside no namespace. */
#ifndef RINGLET_KERNELS_CUDA_COMMON_CUH
#define RINGLET_KERNELS_CUDA_COMMON_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace rl_cuda {

constexpr int kThreads = 256; /* threads per block */
constexpr int kUnroll = 2;    /* 16-byte groups of each input in flight per thread */
constexpr int kVecBytes = 16;

/* rl_cuda_test_grid_cap's value (0: none), defined in reduce_cuda.cu; grid() applies it
 * to a launcher's block count. */
extern unsigned g_test_grid_cap;

inline unsigned grid(unsigned blocks) {
    const unsigned cap = __atomic_load_n(&g_test_grid_cap, __ATOMIC_RELAXED);
    return cap && blocks > cap ? cap : blocks;
}

/* Where a launcher's kernel goes: launched on stream, or only loaded (load). */
struct Go {
    cudaStream_t stream;
    bool load;
};

/* Loads kernel into the current context (what its first launch would do under lazy
 * loading, which can wait for the whole device). */
template <typename K>
cudaError_t load_kernel(K *kernel) {
    cudaFuncAttributes attr;
    return cudaFuncGetAttributes(&attr, reinterpret_cast<const void *>(kernel));
}

/* ------------------------------------------------------------------------------
 * 1. Data types
 * ------------------------------------------------------------------------------ */

/* Integers are computed in their own type. Signed sum / prod never get here: they
 * run on the unsigned type of the same width (section 5), as on the CPU, so no
 * signed overflow happens anywhere. */
template <typename B, typename V>
struct IntType {
    using Bits = B;
    using Value = V;
    static __device__ __forceinline__ V load(B x) { return static_cast<V>(x); }
    static __device__ __forceinline__ B store(V v) { return static_cast<B>(v); }
};
using I8 = IntType<uint8_t, int8_t>;
using U8 = IntType<uint8_t, uint8_t>;
using I32 = IntType<uint32_t, int32_t>;
using U32 = IntType<uint32_t, uint32_t>;
using I64 = IntType<unsigned long long, long long>;
using U64 = IntType<unsigned long long, unsigned long long>;

struct F32 {
    using Bits = uint32_t;
    using Value = float;
    static __device__ __forceinline__ float load(uint32_t x) { return __uint_as_float(x); }
    static __device__ __forceinline__ uint32_t store(float v) { return __float_as_uint(v); }
};
struct F64 {
    using Bits = unsigned long long;
    using Value = double;
    static __device__ __forceinline__ double load(unsigned long long x) {
        return __longlong_as_double(static_cast<long long>(x));
    }
    static __device__ __forceinline__ unsigned long long store(double v) {
        return static_cast<unsigned long long>(__double_as_longlong(v));
    }
};
/* float16 / bfloat16: to float32 exactly, back with one round to nearest even
 * (overflow to inf, subnormal results rounded like any other). */
struct F16 {
    using Bits = unsigned short;
    using Value = float;
    static __device__ __forceinline__ float load(unsigned short x) { return __half2float(__ushort_as_half(x)); }
    static __device__ __forceinline__ unsigned short store(float v) { return __half_as_ushort(__float2half_rn(v)); }
};
struct BF16 {
    using Bits = unsigned short;
    using Value = float;
    static __device__ __forceinline__ float load(unsigned short x) {
        return __bfloat162float(__ushort_as_bfloat16(x));
    }
    static __device__ __forceinline__ unsigned short store(float v) {
        return __bfloat16_as_ushort(__float2bfloat16_rn(v));
    }
};


/* A launcher's Go for a launch on stream. */
inline Go launching(void *stream) {
    Go go;
    go.stream = static_cast<cudaStream_t>(stream);
    go.load = false;
    return go;
}

} // namespace rl_cuda

#endif
