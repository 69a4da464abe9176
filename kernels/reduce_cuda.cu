/* Reduction kernels for device (CUDA) buffers: see reduce_cuda.h for the interface
 * and reduce.h for the contract, which is the CPU kernels' (kernels/reduce_cpu.c),
 * bit for bit (NaN payloads aside).
 *
 * How the code is laid out
 *
 *   1. data types (cuda_common.cuh): how an element is stored (Bits) and what it is
 *      computed on (Value); float16 / bfloat16 compute in float32 and round once, to
 *      nearest even, through cuda_fp16.h / cuda_bf16.h;
 *   2. the operations (sum, prod, min, max; divide for avg's last step);
 *   3. one kernel template for every (type, op): dst[i] = f(a[i], b[i]) or
 *      buf[i] = f(buf[i]);
 *   4. launch: alignment, vector width, grid size;
 *   5. the C entry points, which map (dtype, op) onto the templates;
 *   6. rl_stream_wait_flag, rl_stream_write_flag; rl_reduce_device_many (many sources, one launch);
 *   7. rl_cuda_load_kernels: every kernel above (and convert_cuda.cu's) loaded at once.
 *
 * Launching
 *
 *   Every launch goes through cudaLaunchKernel and returns what it returned: the status
 *   of that launch only. cudaGetLastError would also return an error an earlier call
 *   left on the thread (cudaErrorNotReady from an event query, for one) and fail a
 *   launch that went well. The same code path, with Go::load set, loads a kernel
 *   instead of launching it (cudaFuncGetAttributes), so that rl_cuda_load_kernels loads
 *   exactly the kernels the launchers can pick.
 *
 * Vectorisation
 *
 *   When dst, a and b sit at the same offset modulo 16 bytes (always the case for
 *   cudaMalloc'd buffers at equal element offsets), the range splits into a head
 *   of fewer than 16 / sizeof(T) elements up to the first 16-byte boundary, a
 *   bulk of 16-byte groups loaded and stored as uint4, and a tail of fewer than
 *   16 / sizeof(T) elements. Head and tail are done element by element by the
 *   first threads of block 0; the bulk by a grid-stride loop over all threads,
 *   each with kUnroll groups of both inputs loaded before the first is used.
 *   When the offsets differ, the same kernel runs with one element per "group".
 *
 * Grid size
 *
 *   At most multiprocessors x (blocks of the kernel resident per multiprocessor):
 *   the GPU filled once, every thread then strides through the bulk; fewer blocks
 *   when there are fewer groups than that many threads. The multiprocessor count
 *   (cudaDeviceGetAttribute) and each kernel's full grid are cached per device.
 *
 * Aliasing: dst may be a or b exactly. Every element is read and written by the
 * same thread, loads before stores, so no pointer is __restrict__ and nothing is
 * read through the non-coherent path.
 */
#include "reduce_cuda.h"

extern "C" {
#include "reduce.h" /* the host's half / bfloat16 conversions, for a scalar */
}

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "cuda_common.cuh"

namespace {

using namespace rl_cuda;

/* ------------------------------------------------------------------------------
 * 2. Operations
 * ------------------------------------------------------------------------------ */

/* fmin / fmax semantics as the CPU kernels define them: a NaN operand is ignored
 * (NaN only when both are), -0 < +0; for equal operands the bitwise OR (min) / AND
 * (max) picks -0 / +0 out of a pair of zeros and is the value itself otherwise. */
__device__ __forceinline__ uint32_t bits_of(float x) { return __float_as_uint(x); }
__device__ __forceinline__ unsigned long long bits_of(double x) {
    return static_cast<unsigned long long>(__double_as_longlong(x));
}
__device__ __forceinline__ float from_bits(uint32_t u) { return __uint_as_float(u); }
__device__ __forceinline__ double from_bits(unsigned long long u) {
    return __longlong_as_double(static_cast<long long>(u));
}
template <typename V>
__device__ __forceinline__ V min_number(V a, V b) {
    V r = a < b ? a : b;
    r = b != b ? a : r;
    return a == b ? from_bits(bits_of(a) | bits_of(b)) : r;
}
template <typename V>
__device__ __forceinline__ V max_number(V a, V b) {
    V r = a > b ? a : b;
    r = b != b ? a : r;
    return a == b ? from_bits(bits_of(a) & bits_of(b)) : r;
}

/* uint8 operands promote to int; the cast back narrows modulo 2^8 (255 * 255 fits
 * an int). Wider unsigned types wrap by themselves. */
struct OpSum {
    template <typename V>
    __device__ __forceinline__ V operator()(V a, V b) const { return static_cast<V>(a + b); }
};
struct OpProd {
    template <typename V>
    __device__ __forceinline__ V operator()(V a, V b) const { return static_cast<V>(a * b); }
};
struct OpMin {
    template <typename V>
    __device__ __forceinline__ V operator()(V a, V b) const {
        if constexpr (std::is_floating_point<V>::value)
            return min_number(a, b);
        else
            return b < a ? b : a;
    }
};
struct OpMax {
    template <typename V>
    __device__ __forceinline__ V operator()(V a, V b) const {
        if constexpr (std::is_floating_point<V>::value)
            return max_number(a, b);
        else
            return a < b ? b : a;
    }
};
/* x / divisor (divisor >= 2). Integers: C division, truncating toward zero, in int
 * or unsigned for the narrow types (the divisor may not fit an 8-bit type) and in
 * the type for 64-bit ones. Floats: x / (float)divisor or x / (double)divisor,
 * correctly rounded (nvcc's default -prec-div=true). */
struct OpDivide {
    int divisor;
    template <typename V>
    __device__ __forceinline__ V operator()(V x) const {
        if constexpr (std::is_floating_point<V>::value) {
            return x / static_cast<V>(divisor);
        } else {
            using Wide = typename std::conditional<
                (sizeof(V) < 8), typename std::conditional<std::is_signed<V>::value, int, unsigned>::type, V>::type;
            return static_cast<V>(static_cast<Wide>(x) / static_cast<Wide>(divisor));
        }
    }
};

/* x * scale (the pre-multiplied sum), in the type's compute type: the unsigned twin for
 * integers (wrapping), float32 for the 16-bit floats (rounded once when stored). */
template <typename V>
struct OpScale {
    V k;
    __device__ __forceinline__ V operator()(V x) const { return static_cast<V>(x * k); }
};

/* ------------------------------------------------------------------------------
 * 3. The kernel
 * ------------------------------------------------------------------------------ */

/* A group of elements moved by one load / store: 16 bytes (uint4), or one element. */
template <typename Bits, int Bytes>
union Pack {
    static constexpr int kCount = Bytes / static_cast<int>(sizeof(Bits));
    using Raw = typename std::conditional<Bytes == kVecBytes, uint4, Bits>::type;
    static_assert(sizeof(Raw) == Bytes, "a group is one load");
    Raw raw;
    Bits e[kCount];
};

/* Where the elements are: [0, head) one by one, then ngroups groups, then tail
 * elements one by one. head and tail are below one group's element count. */
struct Span {
    size_t head;
    size_t ngroups;
    size_t tail;
};

template <typename D, bool Unary, typename F>
__device__ __forceinline__ typename D::Bits apply(F f, typename D::Bits x, typename D::Bits y) {
    if constexpr (Unary) {
        (void)y;
        return D::store(f(D::load(x)));
    } else {
        return D::store(f(D::load(x), D::load(y)));
    }
}

/* dst[i] = f(a[i], b[i]), or dst[i] = f(a[i]) when Unary (b unused). */
template <typename D, int Bytes, bool Unary, typename F>
__global__ void __launch_bounds__(kThreads)
    map_kernel(typename D::Bits *dst, const typename D::Bits *a, const typename D::Bits *b, Span s, F f) {
    using Bits = typename D::Bits;
    using P = Pack<Bits, Bytes>;
    constexpr int kCount = P::kCount;

    const size_t tid = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;

    if (tid < s.head) dst[tid] = apply<D, Unary>(f, a[tid], Unary ? Bits() : b[tid]);
    if (tid < s.tail) {
        const size_t i = s.head + s.ngroups * kCount + tid;
        dst[i] = apply<D, Unary>(f, a[i], Unary ? Bits() : b[i]);
    }

    const typename P::Raw *ga = reinterpret_cast<const typename P::Raw *>(a + s.head);
    const typename P::Raw *gb = reinterpret_cast<const typename P::Raw *>(b + s.head);
    typename P::Raw *gd = reinterpret_cast<typename P::Raw *>(dst + s.head);
    for (size_t g = tid; g < s.ngroups; g += kUnroll * stride) {
        P x[kUnroll], y[kUnroll];
#pragma unroll
        for (int u = 0; u < kUnroll; u++) {
            const size_t j = g + u * stride;
            if (j < s.ngroups) {
                x[u].raw = ga[j];
                if constexpr (!Unary) y[u].raw = gb[j];
            }
        }
#pragma unroll
        for (int u = 0; u < kUnroll; u++) {
            const size_t j = g + u * stride;
            if (j < s.ngroups) {
#pragma unroll
                for (int k = 0; k < kCount; k++) {
                    if constexpr (Unary)
                        x[u].e[k] = apply<D, true>(f, x[u].e[k], Bits());
                    else
                        x[u].e[k] = apply<D, false>(f, x[u].e[k], y[u].e[k]);
                }
                gd[j] = x[u].raw;
            }
        }
    }
}

/* ------------------------------------------------------------------------------
 * 4. Launch
 * ------------------------------------------------------------------------------ */

/* Grid size: the blocks that fill the device once, multiprocessors x blocks of this
 * kernel resident per multiprocessor (from its register use; 2048 / kThreads when
 * registers do not limit it). Both are read once per device and cached: the
 * multiprocessor count here, the product per kernel in launch_span. Racing first
 * calls store the same values. */
constexpr int kMaxCachedDevices = 64;
std::atomic<int> g_sm_count[kMaxCachedDevices];

cudaError_t sm_count(int dev, int *count) {
    const bool cacheable = dev >= 0 && dev < kMaxCachedDevices;
    if (cacheable && (*count = g_sm_count[dev].load(std::memory_order_relaxed)) > 0) return cudaSuccess;
    const cudaError_t err = cudaDeviceGetAttribute(count, cudaDevAttrMultiProcessorCount, dev);
    if (err != cudaSuccess) return err;
    if (*count < 1) *count = 1;
    if (cacheable) g_sm_count[dev].store(*count, std::memory_order_relaxed);
    return cudaSuccess;
}

template <typename D, int Bytes, bool Unary, typename F>
int launch_span(void *dst, const void *a, const void *b, Span s, F f, const Go &go) {
    using Bits = typename D::Bits;
    void (*const kernel)(Bits *, const Bits *, const Bits *, Span, F) = map_kernel<D, Bytes, Unary, F>;
    if (go.load) return static_cast<int>(load_kernel(kernel));
    static std::atomic<int> full_grid[kMaxCachedDevices]; /* per device, for this kernel */

    int dev = 0;
    cudaError_t err = cudaGetDevice(&dev);
    if (err != cudaSuccess) return static_cast<int>(err);
    const bool cacheable = dev >= 0 && dev < kMaxCachedDevices;
    int cap = cacheable ? full_grid[dev].load(std::memory_order_relaxed) : 0;
    if (cap <= 0) {
        int sms = 0, per_sm = 0;
        err = sm_count(dev, &sms);
        if (err == cudaSuccess) err = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kThreads, 0);
        if (err != cudaSuccess) return static_cast<int>(err);
        cap = sms * (per_sm > 0 ? per_sm : 1);
        if (cacheable) full_grid[dev].store(cap, std::memory_order_relaxed);
    }

    size_t work = s.ngroups; /* one group (or head / tail element) per thread */
    if (s.head > work) work = s.head;
    if (s.tail > work) work = s.tail;
    const size_t wanted = (work + kThreads - 1) / kThreads;
    const unsigned blocks = static_cast<unsigned>(wanted < static_cast<size_t>(cap) ? wanted : static_cast<size_t>(cap));
    Bits *pd = static_cast<Bits *>(dst);
    const Bits *pa = static_cast<const Bits *>(a), *pb = static_cast<const Bits *>(b);
    void *args[] = {&pd, &pa, &pb, &s, &f};
    return static_cast<int>(cudaLaunchKernel(reinterpret_cast<const void *>(kernel), dim3(grid(blocks)), dim3(kThreads),
                                             args, 0, go.stream));
}

/* dst[i] = f(a[i], b[i]) (or f(a[i]) when Unary; b is then ignored) for i < n. */
template <typename D, bool Unary, typename F>
int launch(void *dst, const void *a, const void *b, size_t n, F f, const Go &go) {
    using Bits = typename D::Bits;
    constexpr size_t kSize = sizeof(Bits);
    if (go.load) {
        /* Both widths: which one a call takes depends on its pointers. */
        Span none = {0, 0, 0};
        int err = launch_span<D, kVecBytes, Unary>(dst, a, b, none, f, go);
        return err ? err : launch_span<D, static_cast<int>(kSize), Unary>(dst, a, b, none, f, go);
    }
    if (n == 0) return cudaSuccess;
    const uintptr_t pd = reinterpret_cast<uintptr_t>(dst), pa = reinterpret_cast<uintptr_t>(a);
    const uintptr_t pb = Unary ? pd : reinterpret_cast<uintptr_t>(b);
    if (((pd | pa | pb) % kSize) != 0) return cudaErrorInvalidValue; /* reduce.h requires element alignment */
    const uintptr_t off = pd % kVecBytes;
    if (pa % kVecBytes == off && pb % kVecBytes == off) {
        constexpr size_t kCount = kVecBytes / kSize;
        Span s;
        s.head = off ? (kVecBytes - off) / kSize : 0;
        if (s.head > n) s.head = n;
        s.ngroups = (n - s.head) / kCount;
        s.tail = n - s.head - s.ngroups * kCount;
        return launch_span<D, kVecBytes, Unary>(dst, a, b, s, f, go);
    }
    /* Offsets differ modulo 16: element by element (still coalesced). */
    Span s = {0, n, 0};
    return launch_span<D, static_cast<int>(kSize), Unary>(dst, a, b, s, f, go);
}

/* ------------------------------------------------------------------------------
 * 5. Dispatch
 * ------------------------------------------------------------------------------ */

/* Wrap: the type sum and prod run on (the unsigned twin for signed integers). */
template <typename D, typename Wrap>
int reduce_typed(void *dst, const void *a, const void *b, size_t n, ringlet_op_t op, const Go &go) {
    switch (op) {
    case RINGLET_SUM:
    case RINGLET_AVG: return launch<Wrap, false>(dst, a, b, n, OpSum(), go);
    case RINGLET_PROD: return launch<Wrap, false>(dst, a, b, n, OpProd(), go);
    case RINGLET_MAX: return launch<D, false>(dst, a, b, n, OpMax(), go);
    case RINGLET_MIN: return launch<D, false>(dst, a, b, n, OpMin(), go);
    default: return cudaErrorInvalidValue;
    }
}

template <typename D>
int divide_typed(void *buf, size_t n, int divisor, const Go &go) {
    OpDivide f;
    f.divisor = divisor;
    return launch<D, true>(buf, buf, buf, n, f, go); /* b: never read */
}

/* A storage value read on the host (a scalar given by its bits). */
template <typename D>
typename D::Value host_load(typename D::Bits b) {
    if constexpr (std::is_same<D, F16>::value) {
        return rl_half_to_float(b);
    } else if constexpr (std::is_same<D, BF16>::value) {
        return rl_bf16_to_float(b);
    } else if constexpr (std::is_same<D, F32>::value || std::is_same<D, F64>::value) {
        typename D::Value v;
        memcpy(&v, &b, sizeof v);
        return v;
    } else {
        return static_cast<typename D::Value>(b);
    }
}

/* dst[i] = src[i] * k, k one element of D's storage type given by its bits. */
template <typename D>
int scale_typed(void *dst, const void *src, size_t n, const void *scalar, const Go &go) {
    using Bits = typename D::Bits;
    Bits kb = Bits();
    if (scalar) memcpy(&kb, scalar, sizeof kb);
    OpScale<typename D::Value> f;
    f.k = host_load<D>(kb);
    return launch<D, true>(dst, src, src, n, f, go); /* b: never read */
}

/* Many sources: dst[i] = s0[i] op s1[i] op ... (left to right, rounded after each step,
 * as that many pairwise calls round). Element by element, one thread per element, every
 * source read before dst[i] is written, so dst may be any source. For the small messages
 * of the one-shot path (one launch instead of nsrc - 1), so no vector loads. */
constexpr int kMaxSources = 64;
template <typename D>
struct Sources {
    const typename D::Bits *p[kMaxSources];
    int n;
};

template <typename D, typename F>
__global__ void __launch_bounds__(kThreads) many_kernel(typename D::Bits *dst, Sources<D> src, size_t n, F f) {
    const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
    for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
        typename D::Bits acc = src.p[0][i];
        for (int k = 1; k < src.n; k++) acc = apply<D, false>(f, acc, src.p[k][i]);
        dst[i] = acc;
    }
}

template <typename D, typename F>
int launch_many(void *dst, const void *const *srcs, int nsrc, size_t n, F f, const Go &go) {
    using Bits = typename D::Bits;
    if (go.load) return static_cast<int>(load_kernel(many_kernel<D, F>));
    Sources<D> src;
    src.n = nsrc;
    for (int k = 0; k < nsrc; k++) {
        if (reinterpret_cast<uintptr_t>(srcs[k]) % sizeof(Bits)) return cudaErrorInvalidValue;
        src.p[k] = static_cast<const Bits *>(srcs[k]);
    }
    if (reinterpret_cast<uintptr_t>(dst) % sizeof(Bits)) return cudaErrorInvalidValue;
    int dev = 0, sms = 1;
    cudaError_t err = cudaGetDevice(&dev);
    if (err == cudaSuccess) err = sm_count(dev, &sms);
    if (err != cudaSuccess) return static_cast<int>(err);
    const size_t wanted = (n + kThreads - 1) / kThreads, cap = static_cast<size_t>(sms) * 4;
    const unsigned blocks = static_cast<unsigned>(wanted < cap ? wanted : cap);
    Bits *pd = static_cast<Bits *>(dst);
    void *args[] = {&pd, &src, &n, &f};
    return static_cast<int>(cudaLaunchKernel(reinterpret_cast<const void *>(many_kernel<D, F>), dim3(grid(blocks)),
                                             dim3(kThreads), args, 0, go.stream));
}

template <typename D, typename Wrap>
int reduce_many_typed(void *dst, const void *const *srcs, int nsrc, size_t n, ringlet_op_t op, const Go &go) {
    switch (op) {
    case RINGLET_SUM:
    case RINGLET_AVG: return launch_many<Wrap>(dst, srcs, nsrc, n, OpSum(), go);
    case RINGLET_PROD: return launch_many<Wrap>(dst, srcs, nsrc, n, OpProd(), go);
    case RINGLET_MAX: return launch_many<D>(dst, srcs, nsrc, n, OpMax(), go);
    case RINGLET_MIN: return launch_many<D>(dst, srcs, nsrc, n, OpMin(), go);
    default: return cudaErrorInvalidValue;
    }
}

/* ------------------------------------------------------------------------------
 * 6. Waiting on a host flag
 * ------------------------------------------------------------------------------ */

/* One thread polls the mapped host word (each volatile load crosses the bus), with
 * an exponential back-off from 64 ns to about 8 us between polls. The system-scope
 * fence after the loop orders the host's writes that came before the flag before
 * whatever the stream runs next. */
__global__ void wait_flag_kernel(volatile const uint64_t *flag, uint64_t value) {
    unsigned ns = 64;
    while (*flag < value) {
        __nanosleep(ns);
        if (ns < 8192) ns *= 2;
    }
    __threadfence_system();
}

/* Stores value into *flag once the stream's earlier work is done: the fence first makes
 * that work's writes visible system-wide (to the host, to a peer's mapping), then the
 * flag says so. */
__global__ void write_flag_kernel(volatile uint64_t *flag, uint64_t value) {
    __threadfence_system();
    *flag = value;
    __threadfence_system();
}

/* ------------------------------------------------------------------------------
 * The entry points' dispatch: (dtype, op) onto the templates, launched or loaded.
 * ------------------------------------------------------------------------------ */

int reduce_any(void *dst, const void *a, const void *b, size_t n, ringlet_datatype_t dt, ringlet_op_t op, const Go &go) {
    switch (dt) {
    case RINGLET_INT8: return reduce_typed<I8, U8>(dst, a, b, n, op, go);
    case RINGLET_UINT8: return reduce_typed<U8, U8>(dst, a, b, n, op, go);
    case RINGLET_INT32: return reduce_typed<I32, U32>(dst, a, b, n, op, go);
    case RINGLET_UINT32: return reduce_typed<U32, U32>(dst, a, b, n, op, go);
    case RINGLET_INT64: return reduce_typed<I64, U64>(dst, a, b, n, op, go);
    case RINGLET_UINT64: return reduce_typed<U64, U64>(dst, a, b, n, op, go);
    case RINGLET_FLOAT16: return reduce_typed<F16, F16>(dst, a, b, n, op, go);
    case RINGLET_FLOAT32: return reduce_typed<F32, F32>(dst, a, b, n, op, go);
    case RINGLET_FLOAT64: return reduce_typed<F64, F64>(dst, a, b, n, op, go);
    case RINGLET_BFLOAT16: return reduce_typed<BF16, BF16>(dst, a, b, n, op, go);
    default: return cudaErrorInvalidValue;
    }
}

int divide_any(void *buf, size_t n, ringlet_datatype_t dt, int divisor, const Go &go) {
    switch (dt) {
    case RINGLET_INT8: return divide_typed<I8>(buf, n, divisor, go);
    case RINGLET_UINT8: return divide_typed<U8>(buf, n, divisor, go);
    case RINGLET_INT32: return divide_typed<I32>(buf, n, divisor, go);
    case RINGLET_UINT32: return divide_typed<U32>(buf, n, divisor, go);
    case RINGLET_INT64: return divide_typed<I64>(buf, n, divisor, go);
    case RINGLET_UINT64: return divide_typed<U64>(buf, n, divisor, go);
    case RINGLET_FLOAT16: return divide_typed<F16>(buf, n, divisor, go);
    case RINGLET_FLOAT32: return divide_typed<F32>(buf, n, divisor, go);
    case RINGLET_FLOAT64: return divide_typed<F64>(buf, n, divisor, go);
    case RINGLET_BFLOAT16: return divide_typed<BF16>(buf, n, divisor, go);
    default: return cudaErrorInvalidValue;
    }
}

int reduce_many_any(void *dst, const void *const *srcs, int nsrc, size_t n, ringlet_datatype_t dt, ringlet_op_t op,
                    const Go &go) {
    switch (dt) {
    case RINGLET_INT8: return reduce_many_typed<I8, U8>(dst, srcs, nsrc, n, op, go);
    case RINGLET_UINT8: return reduce_many_typed<U8, U8>(dst, srcs, nsrc, n, op, go);
    case RINGLET_INT32: return reduce_many_typed<I32, U32>(dst, srcs, nsrc, n, op, go);
    case RINGLET_UINT32: return reduce_many_typed<U32, U32>(dst, srcs, nsrc, n, op, go);
    case RINGLET_INT64: return reduce_many_typed<I64, U64>(dst, srcs, nsrc, n, op, go);
    case RINGLET_UINT64: return reduce_many_typed<U64, U64>(dst, srcs, nsrc, n, op, go);
    case RINGLET_FLOAT16: return reduce_many_typed<F16, F16>(dst, srcs, nsrc, n, op, go);
    case RINGLET_FLOAT32: return reduce_many_typed<F32, F32>(dst, srcs, nsrc, n, op, go);
    case RINGLET_FLOAT64: return reduce_many_typed<F64, F64>(dst, srcs, nsrc, n, op, go);
    case RINGLET_BFLOAT16: return reduce_many_typed<BF16, BF16>(dst, srcs, nsrc, n, op, go);
    default: return cudaErrorInvalidValue;
    }
}

int scale_any(void *dst, const void *src, size_t n, ringlet_datatype_t dt, const void *scalar, const Go &go) {
    switch (dt) {
    case RINGLET_INT8:
    case RINGLET_UINT8: return scale_typed<U8>(dst, src, n, scalar, go);
    case RINGLET_INT32:
    case RINGLET_UINT32: return scale_typed<U32>(dst, src, n, scalar, go);
    case RINGLET_INT64:
    case RINGLET_UINT64: return scale_typed<U64>(dst, src, n, scalar, go);
    case RINGLET_FLOAT16: return scale_typed<F16>(dst, src, n, scalar, go);
    case RINGLET_FLOAT32: return scale_typed<F32>(dst, src, n, scalar, go);
    case RINGLET_FLOAT64: return scale_typed<F64>(dst, src, n, scalar, go);
    case RINGLET_BFLOAT16: return scale_typed<BF16>(dst, src, n, scalar, go);
    default: return cudaErrorInvalidValue;
    }
}

} // namespace

unsigned rl_cuda::g_test_grid_cap;

extern "C" void rl_cuda_test_grid_cap(unsigned blocks) {
    __atomic_store_n(&rl_cuda::g_test_grid_cap, blocks, __ATOMIC_RELAXED);
}

/* The entry points refuse an unknown type or op (or scalar, source count) at any n, as
 * the simulated GPU does; n == 0 then launches nothing. */
static bool known(ringlet_datatype_t dt, ringlet_op_t op) {
    return (unsigned)dt < RINGLET_NUM_DATATYPES && (unsigned)op < RINGLET_NUM_OPS;
}

extern "C" int rl_reduce_device(void *dst, const void *a, const void *b, size_t n, ringlet_datatype_t dt,
                                ringlet_op_t op, void *stream) {
    if (!known(dt, op)) return cudaErrorInvalidValue;
    if (n == 0) return cudaSuccess;
    return reduce_any(dst, a, b, n, dt, op, launching(stream));
}

extern "C" int rl_divide_device(void *buf, size_t n, ringlet_datatype_t dt, int divisor, void *stream) {
    if (!known(dt, RINGLET_SUM)) return cudaErrorInvalidValue;
    if (n == 0 || divisor <= 1) return cudaSuccess;
    return divide_any(buf, n, dt, divisor, launching(stream));
}

extern "C" int rl_stream_wait_flag(volatile const uint64_t *flag, uint64_t value, void *stream) {
    if (flag == nullptr) return cudaErrorInvalidValue;
    void *args[] = {&flag, &value};
    return static_cast<int>(cudaLaunchKernel(reinterpret_cast<const void *>(wait_flag_kernel), dim3(1), dim3(1), args,
                                             0, static_cast<cudaStream_t>(stream)));
}

extern "C" int rl_stream_write_flag(volatile uint64_t *flag, uint64_t value, void *stream) {
    if (flag == nullptr) return cudaErrorInvalidValue;
    void *args[] = {&flag, &value};
    return static_cast<int>(cudaLaunchKernel(reinterpret_cast<const void *>(write_flag_kernel), dim3(1), dim3(1), args,
                                             0, static_cast<cudaStream_t>(stream)));
}

extern "C" int rl_reduce_device_many(void *dst, const void *const *srcs, int nsrc, size_t n, ringlet_datatype_t dt,
                                     ringlet_op_t op, void *stream) {
    if (!known(dt, op) || nsrc < 1 || nsrc > kMaxSources) return cudaErrorInvalidValue;
    if (n == 0) return cudaSuccess;
    static const size_t sizes[RINGLET_NUM_DATATYPES] = {1, 1, 4, 4, 8, 8, 2, 4, 8, 2};
    if (nsrc == 1) {
        if (reinterpret_cast<uintptr_t>(dst) % sizes[dt] || reinterpret_cast<uintptr_t>(srcs[0]) % sizes[dt])
            return cudaErrorInvalidValue; /* as the kernel's launcher refuses it */
        return dst == srcs[0] ? cudaSuccess
                              : static_cast<int>(cudaMemcpyAsync(dst, srcs[0], n * sizes[dt], cudaMemcpyDefault,
                                                                 static_cast<cudaStream_t>(stream)));
    }
    return reduce_many_any(dst, srcs, nsrc, n, dt, op, launching(stream));
}

extern "C" int rl_scale_device(void *dst, const void *src, size_t n, ringlet_datatype_t dt, const void *scalar,
                               void *stream) {
    if (!known(dt, RINGLET_SUM) || !scalar) return cudaErrorInvalidValue;
    if (n == 0) return cudaSuccess;
    return scale_any(dst, src, n, dt, scalar, launching(stream));
}

/* ------------------------------------------------------------------------------
 * 7. Every kernel loaded at once
 * ------------------------------------------------------------------------------ */

extern "C" int rl_cuda_load_kernels(void) {
    Go go;
    go.stream = nullptr;
    go.load = true;
    int err = static_cast<int>(load_kernel(wait_flag_kernel));
    if (!err) err = static_cast<int>(load_kernel(write_flag_kernel));
    for (int t = 0; t < RINGLET_NUM_DATATYPES && !err; t++) {
        const ringlet_datatype_t dt = static_cast<ringlet_datatype_t>(t);
        /* avg launches sum's kernel */
        for (int o = 0; o < RINGLET_NUM_OPS && !err; o++) {
            err = reduce_any(nullptr, nullptr, nullptr, 0, dt, static_cast<ringlet_op_t>(o), go);
            if (!err) err = reduce_many_any(nullptr, nullptr, 2, 0, dt, static_cast<ringlet_op_t>(o), go);
        }
        if (!err) err = divide_any(nullptr, 0, dt, 2, go);
        if (!err) err = scale_any(nullptr, nullptr, 0, dt, nullptr, go);
    }
    if (!err) err = rl_cuda_load_convert_kernels();
    return err;
}
