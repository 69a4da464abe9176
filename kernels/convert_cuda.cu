/* Conversions between the floating types on the device, with a scaling
 * (kernels/convert.h's contract, rl_convert_host's results): from float64 the product is
 * taken in float64, from the others in float32; then one round to the destination type.
 * See reduce_cuda.h for the entry point. */
#include "reduce_cuda.h"

#include <type_traits>

#include "cuda_common.cuh"
#include "fpenv.h"

extern "C" {
#include "convert.h" /* rl_convert_supported */
}

namespace {

using namespace rl_cuda;


/* The product as the destination's Value: a float from a double is rounded to odd (toward
 * zero, the lowest bit set where inexact) when the destination is narrower still, so that
 * its own rounding to nearest even rounds the double once (convert_cpu.c says why). */
template <typename D> __device__ typename D::Value narrow(float v) { return v; }
template <typename D> __device__ typename D::Value narrow(double v) {
    if (std::is_same<typename D::Value, double>::value || sizeof(typename D::Bits) == 4)
        return static_cast<typename D::Value>(v);
    float f = __double2float_rz(v);
    if (f != f || static_cast<double>(f) == v) return f;
    return __uint_as_float(__float_as_uint(f) | 1u);
}

template <typename S, typename D, typename M>
__global__ void convert_kernel(typename D::Bits *dst, const typename S::Bits *src, size_t n, M k) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        M v = static_cast<M>(S::load(src[i])) * k;
        dst[i] = D::store(narrow<D>(v));
    }
}

template <typename S, typename D>
int convert_typed(void *dst, const void *src, size_t n, double scale, const Go &go) {
    using M = typename std::conditional<std::is_same<S, F64>::value, double, float>::type;
    void (*const kernel)(typename D::Bits *, const typename S::Bits *, size_t, M) = convert_kernel<S, D, M>;
    if (go.load) return static_cast<int>(load_kernel(kernel));
    /* Element-aligned operands only (a misaligned load is a sticky fault): refused, as
     * reduce_cuda.cu's launchers refuse them. */
    if (reinterpret_cast<uintptr_t>(dst) % sizeof(typename D::Bits) ||
        reinterpret_cast<uintptr_t>(src) % sizeof(typename S::Bits))
        return cudaErrorInvalidValue;
    size_t blocks = (n + 255) / 256;
    if (blocks > 4096) blocks = 4096;
    typename D::Bits *pd = static_cast<typename D::Bits *>(dst);
    const typename S::Bits *ps = static_cast<const typename S::Bits *>(src);
    /* Narrowed on the host in the default floating-point environment, as rl_convert_host
     * narrows it (fpenv.h): a caller's rounding mode would give another factor. */
    M k;
    if constexpr (std::is_same<M, float>::value) k = rl_fpenv_to_float(scale);
    else k = scale;
    void *args[] = {&pd, &ps, &n, &k};
    const unsigned nb = grid(static_cast<unsigned>(blocks));
    return static_cast<int>(
        cudaLaunchKernel(reinterpret_cast<const void *>(kernel), dim3(nb), dim3(256), args, 0, go.stream));
}

template <typename S>
int convert_from(void *dst, ringlet_datatype_t dt, const void *src, size_t n, double scale, const Go &go) {
    switch (dt) {
    case RINGLET_FLOAT16: return convert_typed<S, F16>(dst, src, n, scale, go);
    case RINGLET_BFLOAT16: return convert_typed<S, BF16>(dst, src, n, scale, go);
    case RINGLET_FLOAT32: return convert_typed<S, F32>(dst, src, n, scale, go);
    case RINGLET_FLOAT64: return convert_typed<S, F64>(dst, src, n, scale, go);
    default: return cudaErrorInvalidValue;
    }
}

int convert_any(void *dst, ringlet_datatype_t dt, const void *src, ringlet_datatype_t st, size_t n, double scale,
                const Go &go) {
    switch (st) {
    case RINGLET_FLOAT16: return convert_from<F16>(dst, dt, src, n, scale, go);
    case RINGLET_BFLOAT16: return convert_from<BF16>(dst, dt, src, n, scale, go);
    case RINGLET_FLOAT32: return convert_from<F32>(dst, dt, src, n, scale, go);
    case RINGLET_FLOAT64: return convert_from<F64>(dst, dt, src, n, scale, go);
    default: return cudaErrorInvalidValue;
    }
}

} // namespace

extern "C" int rl_convert_device(void *dst, ringlet_datatype_t dt, const void *src, ringlet_datatype_t st, size_t n,
                                 double scale, void *stream) {
    if (!rl_convert_supported(dt) || !rl_convert_supported(st)) return cudaErrorInvalidValue; /* at any n, as the simulator */
    if (n == 0) return cudaSuccess;
    return convert_any(dst, dt, src, st, n, scale, launching(stream));
}

/* The conversion kernels loaded (rl_cuda_load_kernels' part for this file). */
extern "C" int rl_cuda_load_convert_kernels(void) {
    static const ringlet_datatype_t floats[] = {RINGLET_FLOAT16, RINGLET_BFLOAT16, RINGLET_FLOAT32, RINGLET_FLOAT64};
    Go go;
    go.stream = nullptr;
    go.load = true;
    int err = 0;
    for (int i = 0; i < 4 && !err; i++)
        for (int j = 0; j < 4 && !err; j++) err = convert_any(nullptr, floats[j], nullptr, floats[i], 0, 1.0, go);
    return err;
}
