/* Bandwidth of the device reduction kernels (kernels/reduce_cuda.cu) next to the
 * memory-bandwidth floor, a cudaMemcpy device-to-device copy, on buffers of 256 MiB
 * (well past the L2 cache). Bytes count what must cross device memory: a copy reads
 * and writes one buffer (2 x size), a reduction reads two and writes one (3 x size).
 *
 * The rows marked "goal" must reach --min-ratio (default 0.90) of the copy's GB/s:
 * float32, bfloat16 and float16 sum, out of place, 16-byte aligned. The other rows
 * are for information (in place, misaligned head, pointers at different offsets
 * modulo 16, which takes the element-by-element kernel, other types).
 * Every row's result is checked on a sample of elements against the CPU kernels.
 *
 *   gpu_kernels_bench [--mib N] [--reps N] [--min-ratio R]
 *
 * Exit 0 = every goal met, 1 = a goal missed or a wrong result, 77 = no GPU. */
#include <cuda_runtime.h>

extern "C" {
#include "reduce.h"
}
#include "reduce_cuda.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <chrono>
#include <vector>

#define CK(call)                                                                                    \
    do {                                                                                            \
        cudaError_t e_ = (call);                                                                    \
        if (e_ != cudaSuccess) {                                                                    \
            printf("FAIL %s:%d: %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e_));      \
            exit(1);                                                                                \
        }                                                                                           \
    } while (0)

namespace {

__device__ uint32_t hash32(uint64_t i, uint32_t salt) {
    uint64_t z = i * 0x9e3779b97f4a7c15ull + salt;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return static_cast<uint32_t>(z ^ (z >> 31));
}

/* Random finite values of moderate size (never all zeros; no NaN, whose payload
 * the check below could not compare), as raw bits: elem 4: float32 in +-[1, 2);
 * elem 8: float64 in +-[1, 2); elem 2: float16 or bfloat16 in +-[1, 2) (one16 is
 * the bits of 1.0, mask16 picks the sign and mantissa); elem 1: random bytes. */
__global__ void fill_kernel(void *buf, size_t bytes, int elem, uint32_t salt, uint32_t one16, uint32_t mask16) {
    const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
    for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < bytes / 4; i += stride) {
        const uint32_t h = hash32(i, salt);
        uint32_t v;
        if (elem == 4)
            v = 0x3f800000u | (h & 0x807fffffu);
        else if (elem == 2)
            v = (one16 | (h & mask16)) | ((one16 | ((h >> 16) & mask16)) << 16);
        else if (elem == 8)
            v = (i & 1) ? 0x3ff00000u | (h & 0x800fffffu) : h;
        else
            v = h;
        static_cast<uint32_t *>(buf)[i] = v;
    }
}

struct Row {
    const char *name;
    bool goal;
    double bytes, ms, gbs;
    bool ok;
};

double median(std::vector<float> v) {
    std::sort(v.begin(), v.end());
    const size_t n = v.size();
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

} // namespace

int main(int argc, char **argv) {
    setvbuf(stdout, nullptr, _IOLBF, 0);
    size_t mib = 256;
    int reps = 20;
    double min_ratio = 0.90;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--mib") == 0 && i + 1 < argc)
            mib = strtoull(argv[++i], nullptr, 0);
        else if (strcmp(argv[i], "--reps") == 0 && i + 1 < argc)
            reps = atoi(argv[++i]);
        else if (strcmp(argv[i], "--min-ratio") == 0 && i + 1 < argc)
            min_ratio = atof(argv[++i]);
        else {
            fprintf(stderr, "usage: %s [--mib N] [--reps N] [--min-ratio R]\n", argv[0]);
            return 2;
        }
    }
    if (mib == 0 || reps < 1) {
        fprintf(stderr, "--mib and --reps must be positive\n");
        return 2;
    }

    int ndev = 0;
    const cudaError_t e = cudaGetDeviceCount(&ndev);
    if (e != cudaSuccess || ndev == 0) {
        printf("SKIP: no GPU (cudaGetDeviceCount: %s, %d devices)\n", cudaGetErrorString(e), ndev);
        return 77;
    }
    cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, 0));

    const size_t size = mib << 20;
    const size_t slack = 64; /* room for the misaligned rows */
    unsigned char *a, *b, *d;
    CK(cudaMalloc(&a, size + slack));
    CK(cudaMalloc(&b, size + slack));
    CK(cudaMalloc(&d, size + slack));
    cudaStream_t st;
    CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    cudaEvent_t t0, t1;
    CK(cudaEventCreate(&t0));
    CK(cudaEventCreate(&t1));

    /* Times fn() reps times after 3 warm-up runs; the median in ms. */
    auto time_it = [&](auto fn) {
        for (int i = 0; i < 3; i++) CK(static_cast<cudaError_t>(fn()));
        CK(cudaStreamSynchronize(st));
        std::vector<float> ms;
        for (int i = 0; i < reps; i++) {
            CK(cudaEventRecord(t0, st));
            CK(static_cast<cudaError_t>(fn()));
            CK(cudaEventRecord(t1, st));
            CK(cudaEventSynchronize(t1));
            float m = 0;
            CK(cudaEventElapsedTime(&m, t0, t1));
            ms.push_back(m);
        }
        CK(cudaGetLastError());
        return median(ms);
    };
    auto fill = [&](int dt) {
        const int elem = dt == RINGLET_FLOAT32   ? 4
                         : dt == RINGLET_FLOAT64 ? 8
                         : (dt == RINGLET_FLOAT16 || dt == RINGLET_BFLOAT16) ? 2
                                                                              : 1;
        const uint32_t one16 = dt == RINGLET_FLOAT16 ? 0x3c00u : 0x3f80u;
        const uint32_t mask16 = dt == RINGLET_FLOAT16 ? 0x83ffu : 0x807fu;
        const unsigned blocks = static_cast<unsigned>(prop.multiProcessorCount) * 8;
        fill_kernel<<<blocks, 256, 0, st>>>(a, size + slack, elem, 1u, one16, mask16);
        fill_kernel<<<blocks, 256, 0, st>>>(b, size + slack, elem, 2u, one16, mask16);
        CK(cudaGetLastError());
        CK(cudaStreamSynchronize(st));
    };

    std::vector<Row> rows;
    bool wrong = false;

    /* The floor: a device-to-device copy of one buffer. */
    fill(RINGLET_FLOAT32);
    const double copy_ms = time_it([&] { return cudaMemcpyAsync(d, a, size, cudaMemcpyDeviceToDevice, st); });
    rows.push_back({"cudaMemcpy D2D", false, 2.0 * size, copy_ms, 2.0 * size / copy_ms * 1e-6, true});

    struct Case {
        const char *name;
        ringlet_datatype_t dt;
        bool goal, in_place;
        size_t od, oa, ob; /* byte offsets */
    };
    const Case cases[] = {
        {"float32 sum", RINGLET_FLOAT32, true, false, 0, 0, 0},
        {"bfloat16 sum", RINGLET_BFLOAT16, true, false, 0, 0, 0},
        {"float16 sum", RINGLET_FLOAT16, true, false, 0, 0, 0},
        {"float32 sum, in place", RINGLET_FLOAT32, false, true, 0, 0, 0},
        {"bfloat16 sum, in place", RINGLET_BFLOAT16, false, true, 0, 0, 0},
        {"float32 sum, all at +4 B", RINGLET_FLOAT32, false, false, 4, 4, 4},
        {"float32 sum, offsets differ", RINGLET_FLOAT32, false, false, 0, 4, 8},
        {"float32 max", RINGLET_FLOAT32, false, false, 0, 0, 0},
        {"float64 sum", RINGLET_FLOAT64, false, false, 0, 0, 0},
        {"int8 sum", RINGLET_INT8, false, false, 0, 0, 0},
        {"int8 sum, offsets differ", RINGLET_INT8, false, false, 0, 1, 2},
    };
    const size_t sample = 4096;
    for (const Case &c : cases) {
        fill(c.dt);
        const size_t es = c.dt == RINGLET_FLOAT32 ? 4 : c.dt == RINGLET_FLOAT64 ? 8 : c.dt == RINGLET_INT8 ? 1 : 2;
        const size_t n = size / es;
        unsigned char *pa = a + c.oa, *pb = b + c.ob, *pd = c.in_place ? pa : d + c.od;
        const ringlet_op_t op = strstr(c.name, "max") ? RINGLET_MAX : RINGLET_SUM;
        /* The inputs as they are before the timed runs (in place changes a). */
        std::vector<unsigned char> ha(sample * es), hb(sample * es), hd(sample * es), ref(sample * es);
        CK(cudaMemcpy(ha.data(), pa + (n - sample) * es, sample * es, cudaMemcpyDeviceToHost));
        CK(cudaMemcpy(hb.data(), pb + (n - sample) * es, sample * es, cudaMemcpyDeviceToHost));
        const double ms = time_it([&] { return rl_reduce_device(pd, pa, pb, n, c.dt, op, st); });
        /* Check one more run on the last `sample` elements (in place: from the saved a). */
        if (c.in_place) CK(cudaMemcpy(pa + (n - sample) * es, ha.data(), sample * es, cudaMemcpyHostToDevice));
        CK(static_cast<cudaError_t>(rl_reduce_device(pd, pa, pb, n, c.dt, op, st)));
        CK(cudaStreamSynchronize(st));
        CK(cudaMemcpy(hd.data(), pd + (n - sample) * es, sample * es, cudaMemcpyDeviceToHost));
        rl_reduce_host(ref.data(), ha.data(), hb.data(), sample, c.dt, op);
        const bool ok = memcmp(hd.data(), ref.data(), sample * es) == 0;
        if (!ok) wrong = true;
        rows.push_back({c.name, c.goal, 3.0 * size, ms, 3.0 * size / ms * 1e-6, ok});
    }

    /* The latency floor of the small-message goals: an 8-byte device-to-device copy and
     * the host's wait for it, as a round trip from the host (median of 1000). */
    std::vector<float> rt;
    for (int i = 0; i < 1100; i++) {
        auto w0 = std::chrono::steady_clock::now();
        CK(cudaMemcpyAsync(d, a, 8, cudaMemcpyDeviceToDevice, st));
        CK(cudaStreamSynchronize(st));
        auto w1 = std::chrono::steady_clock::now();
        if (i >= 100) rt.push_back(std::chrono::duration<float, std::micro>(w1 - w0).count());
    }
    printf("8-byte cudaMemcpy D2D round trip (enqueue + stream sync, median of 1000): %.2f us\n", median(rt));

    const double floor_gbs = rows[0].gbs;
    printf("\nGPU reduction kernels vs the copy floor: %s, %d SMs, %zu MiB per buffer, median of %d runs\n",
           prop.name, prop.multiProcessorCount, mib, reps);
    printf("bytes = read + written (copy 2 x size, reduction 3 x size); goal rows must reach %.0f%% of the copy\n",
           100 * min_ratio);
    printf("%-30s %14s %10s %10s %8s  %s\n", "what", "bytes", "ms", "GB/s", "vs copy", "result");
    bool missed = false;
    for (const Row &r : rows) {
        const double ratio = r.gbs / floor_gbs;
        const char *result = "";
        if (!r.ok) {
            result = "FAIL (wrong result)";
        } else if (r.goal && ratio < min_ratio) {
            result = "FAIL";
            missed = true;
        } else if (r.goal) {
            result = "PASS";
        } else if (&r != &rows[0]) {
            result = "(info)";
        }
        printf("%-30s %14.0f %10.3f %10.1f %8.3f  %s\n", r.name, r.bytes, r.ms, r.gbs, ratio, result);
    }
    printf("gpu_kernels_bench: %s\n", missed || wrong ? "FAIL" : "PASS");

    CK(cudaEventDestroy(t0));
    CK(cudaEventDestroy(t1));
    CK(cudaStreamDestroy(st));
    CK(cudaFree(a));
    CK(cudaFree(b));
    CK(cudaFree(d));
    return missed || wrong ? 1 : 0;
}
