/* GPU test for the device reduction kernels (kernels/reduce_cuda.cu, interface in
 * kernels/reduce_cuda.h), against the CPU kernels (kernels/reduce_cpu.c) applied to
 * the same inputs:
 *
 *   - rl_reduce_device: every dtype x op (avg too), sizes 0, 1, 7, 8, 33, 4099 and
 *     --max-n (default 1000003), layouts that take every path of the kernel: all
 *     16-byte aligned, equally misaligned (scalar head, vector bulk, scalar tail),
 *     misaligned differently (element-by-element kernel), dst == a, dst == b,
 *     dst == a == b, a == b; random data with the special values mixed in (zeros of
 *     both signs, infinities, NaNs, subnormals, integer extremes); the result must
 *     equal rl_reduce_host's bit for bit (a NaN only has to be a NaN: payloads are
 *     unspecified); poisoned guard bytes around every buffer must stay untouched,
 *     and inputs that are not dst must be left unchanged;
 *   - rl_divide_device: every dtype, the same sizes, divisors 0, 1, -5 (no-ops), 2,
 *     3, 7, 64, 200, 1000003, against rl_divide_host;
 *   - argument handling: n == 0 with NULL pointers, unknown dtype / op (at n == 0 too),
 *     misaligned pointers, a NULL scalar: refused, as the simulated GPU refuses them;
 *   - rl_stream_wait_flag: a stream stays blocked while the mapped flag is below the
 *     value, is released once the host raises it (within a timeout), and work queued
 *     after the wait runs only then.
 *   - rl_scale_device: every dtype, random inputs and scalars (special values among them),
 *     the sizes above up to 65537, in place and out of place, aligned and misaligned,
 *     against rl_scale_host (kernels/reduce_cpu.c) bit for bit, guards untouched;
 *   - rl_convert_device: every pair of the floating types, scales 1, 0.5, 3, 1/3, 1e-3,
 *     2^-20 and a random one, random inputs with special values, the same sizes, against
 *     rl_convert_host (kernels/convert_cpu.c) bit for bit (a NaN only has to be a NaN),
 *     guards untouched;
 *   - rl_stream_write_flag: into device memory, and into host-mapped pinned memory behind
 *     a held stream: not written while the stream is held, written once it is released,
 *     and then the work queued before it (a copy into pinned memory) is complete and
 *     visible; values above 2^32;
 *   - the per-thread last error: after a cudaEventQuery that found an event not ready
 *     (cudaErrorNotReady, which CUDA also leaves as the thread's last error), a launch of
 *     rl_reduce_device on the same thread must return 0: the launchers report their own
 *     launch's status (cudaLaunchKernel's), not cudaGetLastError(), which would give back
 *     that 600 (issue 21, rule a). The test's own polls (cudaStreamQuery) clear the
 *     not-ready error they leave, as PyTorch does, so that this case alone shows it;
 *   - rl_cuda_load_kernels: loads every kernel (returns 0), after which a first launch
 *     behind a held stream works (rule b: lazy loading could wait for the held stream);
 *   - reduce, divide, many, scale and convert again at 4099 and 65537 elements with the
 *     grid capped at 1 and at 3 blocks (rl_cuda_test_grid_cap): the second unrolled group
 *     and the grid-stride steps, which a full grid (about 270k threads on an H200) takes
 *     only above the quick tier's --max-n.
 *
 *   test_kernels [--seed N] [--max-n N]      (RINGLET_TEST_SEED also sets the seed)
 *
 * Exit 0 = passed, 1 = failed, 77 = skipped (no GPU). */
#include <cuda_runtime.h>

extern "C" {
#include "convert.h"
#include "reduce.h"
}
#include "reduce_cuda.h"

#include <chrono>
#include <cmath>
#include <cinttypes>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <thread>
#include <vector>

namespace {

int failures;
long checks;

__attribute__((format(printf, 1, 2))) void fail(const char *fmt, ...) {
    failures++;
    if (failures > 60) {
        if (failures == 61) printf("FAIL ... (further failures not printed)\n");
        return;
    }
    va_list ap;
    va_start(ap, fmt);
    printf("FAIL ");
    vprintf(fmt, ap);
    printf("\n");
    va_end(ap);
    fflush(stdout);
}

/* A CUDA call that must succeed; a failure here ends the test (the context may be
 * broken). */
#define CK(call)                                                                                    \
    do {                                                                                            \
        cudaError_t e_ = (call);                                                                    \
        if (e_ != cudaSuccess) {                                                                    \
            printf("FAIL %s:%d: %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e_));      \
            exit(1);                                                                                \
        }                                                                                           \
    } while (0)

/* ---- random numbers: splitmix64 ---- */
uint64_t rng_state;
uint64_t rnd() {
    uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

const char *dt_name(int dt) {
    static const char *names[] = {"int8",   "uint8",   "int32",   "uint32",  "int64",
                                  "uint64", "float16", "float32", "float64", "bfloat16"};
    return dt >= 0 && dt < RINGLET_NUM_DATATYPES ? names[dt] : "?";
}
const char *op_name(int op) {
    static const char *names[] = {"sum", "prod", "max", "min", "avg"};
    return op >= 0 && op < RINGLET_NUM_OPS ? names[op] : "?";
}

size_t elem_size(int dt) {
    static const size_t sizes[] = {1, 1, 4, 4, 8, 8, 2, 4, 8, 2};
    return sizes[dt];
}

bool is_float(int dt) {
    return dt == RINGLET_FLOAT16 || dt == RINGLET_BFLOAT16 || dt == RINGLET_FLOAT32 || dt == RINGLET_FLOAT64;
}

/* Element i of a buffer of dtype dt, as raw bits. */
uint64_t get_bits(const void *p, size_t i, size_t es) {
    uint64_t v = 0;
    memcpy(&v, static_cast<const char *>(p) + i * es, es); /* little endian */
    return v;
}
void put_bits(void *p, size_t i, size_t es, uint64_t v) { memcpy(static_cast<char *>(p) + i * es, &v, es); }

bool is_nan(int dt, uint64_t b) {
    switch (dt) {
    case RINGLET_FLOAT16: return (b & 0x7c00u) == 0x7c00u && (b & 0x03ffu) != 0;
    case RINGLET_BFLOAT16: return (b & 0x7f80u) == 0x7f80u && (b & 0x007fu) != 0;
    case RINGLET_FLOAT32: return (b & 0x7f800000u) == 0x7f800000u && (b & 0x007fffffu) != 0;
    case RINGLET_FLOAT64:
        return (b & 0x7ff0000000000000ull) == 0x7ff0000000000000ull && (b & 0x000fffffffffffffull) != 0;
    default: return false;
    }
}

/* One random element of dtype dt: 1/8 special values, 3/8 moderate values (sums
 * and products that round rather than overflow), the rest random bits. */
uint64_t random_element(int dt) {
    const uint64_t r = rnd(), sel = r & 7, bits = rnd();
    switch (dt) {
    case RINGLET_FLOAT16: {
        static const uint16_t sp[] = {0x0000, 0x8000, 0x7c00, 0xfc00, 0x7e00, 0x7d01, 0xfe13, 0x0001,
                                      0x03ff, 0x0400, 0x7bff, 0xfbff, 0x3c00, 0xbc00, 0x8001};
        if (sel == 0) return sp[(r >> 8) % (sizeof sp / sizeof sp[0])];
        if (sel <= 3) return (bits & 0x83ffu) | (((10 + (r >> 8) % 11) & 0x1f) << 10); /* 2^-5 .. 2^5 */
        return bits & 0xffffu;
    }
    case RINGLET_BFLOAT16: {
        static const uint16_t sp[] = {0x0000, 0x8000, 0x7f80, 0xff80, 0x7fc0, 0x7f81, 0xffc1, 0x0001,
                                      0x007f, 0x0080, 0x7f7f, 0xff7f, 0x3f80, 0xbf80, 0x8001};
        if (sel == 0) return sp[(r >> 8) % (sizeof sp / sizeof sp[0])];
        if (sel <= 3) return (bits & 0x807fu) | (((120 + (r >> 8) % 15) & 0xff) << 7);
        return bits & 0xffffu;
    }
    case RINGLET_FLOAT32: {
        static const uint32_t sp[] = {0x00000000u, 0x80000000u, 0x7f800000u, 0xff800000u, 0x7fc00000u,
                                      0x7f800001u, 0xffc12345u, 0x00000001u, 0x007fffffu, 0x00800000u,
                                      0x7f7fffffu, 0xff7fffffu, 0x3f800000u, 0xbf800000u, 0x80000001u};
        if (sel == 0) return sp[(r >> 8) % (sizeof sp / sizeof sp[0])];
        if (sel <= 3) return (bits & 0x807fffffu) | (((107 + (r >> 8) % 41) & 0xff) << 23);
        return bits & 0xffffffffu;
    }
    case RINGLET_FLOAT64: {
        static const uint64_t sp[] = {0, 0x8000000000000000ull, 0x7ff0000000000000ull, 0xfff0000000000000ull,
                                      0x7ff8000000000000ull, 0x7ff0000000000001ull, 0xfff8000000abcdefull, 1,
                                      0x000fffffffffffffull, 0x0010000000000000ull, 0x7fefffffffffffffull,
                                      0xffefffffffffffffull, 0x3ff0000000000000ull, 0xbff0000000000000ull,
                                      0x8000000000000001ull};
        if (sel == 0) return sp[(r >> 8) % (sizeof sp / sizeof sp[0])];
        if (sel <= 3) return (bits & 0x800fffffffffffffull) | ((uint64_t)((1003 + (r >> 8) % 41) & 0x7ff) << 52);
        return bits;
    }
    default: {
        const size_t es = elem_size(dt);
        const uint64_t mask = es == 8 ? ~0ull : (1ull << (8 * es)) - 1;
        const uint64_t top = 1ull << (8 * es - 1);
        const uint64_t sp[] = {0, 1, mask /* -1 */, top /* signed min */, top - 1 /* signed max */, 2, mask - 1};
        if (sel == 0) return sp[(r >> 8) % (sizeof sp / sizeof sp[0])] & mask;
        if (sel <= 2) return ((r >> 8) % 7 + 0) & mask; /* small: products that do not always wrap to 0 */
        return bits & mask;
    }
    }
}

void fill_random(std::vector<unsigned char> &buf, size_t n, int dt) {
    const size_t es = elem_size(dt);
    buf.resize(n * es + 1);
    for (size_t i = 0; i < n; i++) put_bits(buf.data(), i, es, random_element(dt));
}

const unsigned char kPoison = 0xa5;
const size_t kGuard = 256;          /* bytes checked on each side of a buffer */
const size_t kMaxOffsetElems = 16;  /* element offsets used below stay under this */

/* Three device regions (dst, a, b), each with room for max_n elements of 8 bytes
 * at an element offset, guard bytes on both sides. */
struct Arena {
    unsigned char *base = nullptr;
    size_t region = 0;
    void init(size_t max_n) {
        region = ((kGuard + (max_n + kMaxOffsetElems) * 8 + kGuard) + 4095) & ~size_t(4095);
        CK(cudaMalloc(&base, 3 * region));
    }
    unsigned char *at(int r, size_t off_bytes) const { return base + r * region + kGuard + off_bytes; }
};

/* Copies back [p - kGuard, p + bytes + kGuard) and checks that the guards hold the
 * poison and the inside equals want (want == NULL: the inside is not checked). */
bool check_window(const unsigned char *p, size_t bytes, const unsigned char *want, const char *what,
                  const char *ctx) {
    std::vector<unsigned char> w(bytes + 2 * kGuard);
    CK(cudaMemcpy(w.data(), p - kGuard, w.size(), cudaMemcpyDeviceToHost));
    checks++;
    for (size_t i = 0; i < kGuard; i++) {
        if (w[i] != kPoison) {
            fail("%s: byte %zd before %s written", ctx, static_cast<ptrdiff_t>(kGuard - i), what);
            return false;
        }
        if (w[kGuard + bytes + i] != kPoison) {
            fail("%s: byte %zu after %s written", ctx, i, what);
            return false;
        }
    }
    if (want && memcmp(w.data() + kGuard, want, bytes) != 0) {
        fail("%s: %s changed", ctx, what);
        return false;
    }
    return true;
}

/* got against ref, element by element: bit-exact, or both NaN for float types. */
bool compare(const unsigned char *got, const unsigned char *ref, const unsigned char *a, const unsigned char *b,
             size_t n, int dt, const char *ctx, size_t a_es = 0 /* a's element size when not dt's */) {
    const size_t es = elem_size(dt);
    if (a_es == 0) a_es = es;
    checks++;
    if (memcmp(got, ref, n * es) == 0) return true;
    int shown = 0;
    bool ok = true;
    for (size_t i = 0; i < n; i++) {
        const uint64_t g = get_bits(got, i, es), r = get_bits(ref, i, es);
        if (g == r || (is_float(dt) && is_nan(dt, g) && is_nan(dt, r))) continue;
        ok = false;
        if (shown++ < 4) {
            if (b)
                fail("%s: [%zu] a=0x%" PRIx64 " b=0x%" PRIx64 ": got 0x%" PRIx64 ", want 0x%" PRIx64, ctx, i,
                     get_bits(a, i, es), get_bits(b, i, es), g, r);
            else
                fail("%s: [%zu] x=0x%" PRIx64 ": got 0x%" PRIx64 ", want 0x%" PRIx64, ctx, i, get_bits(a, i, a_es),
                     g, r);
        }
    }
    return ok;
}

enum Alias { APART, DST_IS_A, DST_IS_B, ALL_SAME, A_IS_B };
struct Layout {
    const char *name;
    Alias alias;
    int od, oa, ob; /* element offsets of dst, a, b (-1: random, the same for all three) */
};
const Layout kLayouts[] = {
    {"aligned", APART, 0, 0, 0},
    {"misaligned-1", APART, 1, 1, 1},
    {"misaligned-3", APART, 3, 3, 3},
    {"misaligned-rand", APART, -1, -1, -1},
    {"offsets-differ", APART, 0, 1, 2},
    {"dst-offset-differs", APART, 2, 0, 0},
    {"dst==a", DST_IS_A, 1, 1, 1},
    {"dst==a,b-offset-differs", DST_IS_A, 0, 0, 3},
    {"dst==b", DST_IS_B, 0, 0, 0},
    {"dst==a==b", ALL_SAME, 3, 3, 3},
    {"a==b", A_IS_B, 0, 5, 5},
};

void test_reduce(const Arena &ar, const std::vector<size_t> &sizes, cudaStream_t stream) {
    std::vector<unsigned char> A, B, R, G;
    for (int dt = 0; dt < RINGLET_NUM_DATATYPES; dt++) {
        const size_t es = elem_size(dt);
        const int before = failures;
        for (int op = 0; op < RINGLET_NUM_OPS; op++) {
            for (size_t n : sizes) {
                fill_random(A, n, dt);
                fill_random(B, n, dt);
                /* Equal pairs (and zeros of both signs) for min / max. */
                for (size_t i = 0; i < n; i++)
                    if (rnd() % 16 == 0) put_bits(B.data(), i, es, get_bits(A.data(), i, es));
                for (const Layout &L : kLayouts) {
                    const int r = static_cast<int>(rnd() % kMaxOffsetElems);
                    const size_t od = L.od < 0 ? r : L.od, oa = L.oa < 0 ? r : L.oa, ob = L.ob < 0 ? r : L.ob;
                    unsigned char *pd = ar.at(0, od * es), *pa = ar.at(1, oa * es), *pb = ar.at(2, ob * es);
                    const unsigned char *ha = A.data(), *hb = B.data();
                    switch (L.alias) {
                    case APART: break;
                    case DST_IS_A: pd = pa; break;
                    case DST_IS_B: pd = pb; break;
                    case ALL_SAME: pd = pb = pa; hb = ha; break;
                    case A_IS_B: pb = pa; hb = ha; break;
                    }
                    char ctx[160];
                    snprintf(ctx, sizeof ctx, "reduce %s %s n=%zu %s", dt_name(dt), op_name(op), n, L.name);

                    CK(cudaMemsetAsync(ar.base, kPoison, 3 * ar.region, stream));
                    CK(cudaMemcpyAsync(pa, ha, n * es, cudaMemcpyHostToDevice, stream));
                    if (pb != pa) CK(cudaMemcpyAsync(pb, hb, n * es, cudaMemcpyHostToDevice, stream));
                    /* The legacy default stream for one layout, the test's stream otherwise. */
                    cudaStream_t s = L.alias == APART && L.od == 0 ? nullptr : stream;
                    if (s == nullptr) CK(cudaStreamSynchronize(stream));
                    const int rc = rl_reduce_device(pd, pa, pb, n, static_cast<ringlet_datatype_t>(dt),
                                                    static_cast<ringlet_op_t>(op), s);
                    const cudaError_t sync = cudaStreamSynchronize(s);
                    checks++;
                    if (rc != 0 || sync != cudaSuccess) {
                        fail("%s: rl_reduce_device returned %d (%s), synchronize: %s", ctx, rc,
                             cudaGetErrorString(static_cast<cudaError_t>(rc)), cudaGetErrorString(sync));
                        if (sync != cudaSuccess) exit(1);
                        continue;
                    }
                    R.assign(n * es + 1, 0);
                    rl_reduce_host(R.data(), ha, hb, n, static_cast<ringlet_datatype_t>(dt),
                                   static_cast<ringlet_op_t>(op));
                    G.assign(n * es + 1, 0);
                    CK(cudaMemcpy(G.data(), pd, n * es, cudaMemcpyDeviceToHost));
                    compare(G.data(), R.data(), ha, hb, n, dt, ctx);
                    check_window(pd, n * es, nullptr, "dst", ctx);
                    if (pa != pd) check_window(pa, n * es, ha, "a", ctx);
                    if (pb != pd && pb != pa) check_window(pb, n * es, hb, "b", ctx);
                }
            }
        }
        printf("%-5s rl_reduce_device %-9s x %d ops x %zu sizes x %zu layouts\n", failures == before ? "ok" : "FAIL",
               dt_name(dt), RINGLET_NUM_OPS, sizes.size(), sizeof kLayouts / sizeof kLayouts[0]);
        fflush(stdout);
    }
}

void test_divide(const Arena &ar, const std::vector<size_t> &sizes, cudaStream_t stream) {
    static const int divisors[] = {0, 1, -5, 2, 3, 7, 64, 200, 1000003};
    static const size_t offsets[] = {0, 1, 3};
    std::vector<unsigned char> X, R, G;
    for (int dt = 0; dt < RINGLET_NUM_DATATYPES; dt++) {
        const size_t es = elem_size(dt);
        const int before = failures;
        for (size_t n : sizes)
            for (int d : divisors)
                for (size_t off : offsets) {
                    fill_random(X, n, dt);
                    char ctx[160];
                    snprintf(ctx, sizeof ctx, "divide %s n=%zu by %d offset %zu", dt_name(dt), n, d, off);
                    unsigned char *p = ar.at(0, off * es);
                    CK(cudaMemsetAsync(ar.base, kPoison, ar.region, stream));
                    CK(cudaMemcpyAsync(p, X.data(), n * es, cudaMemcpyHostToDevice, stream));
                    const int rc = rl_divide_device(p, n, static_cast<ringlet_datatype_t>(dt), d, stream);
                    const cudaError_t sync = cudaStreamSynchronize(stream);
                    checks++;
                    if (rc != 0 || sync != cudaSuccess) {
                        fail("%s: rl_divide_device returned %d, synchronize: %s", ctx, rc, cudaGetErrorString(sync));
                        if (sync != cudaSuccess) exit(1);
                        continue;
                    }
                    R.assign(X.begin(), X.end());
                    rl_divide_host(R.data(), n, static_cast<ringlet_datatype_t>(dt), d);
                    G.assign(n * es + 1, 0);
                    CK(cudaMemcpy(G.data(), p, n * es, cudaMemcpyDeviceToHost));
                    compare(G.data(), R.data(), X.data(), nullptr, n, dt, ctx);
                    check_window(p, n * es, nullptr, "buf", ctx);
                }
        printf("%-5s rl_divide_device %-9s x %zu sizes x %zu divisors x %zu offsets\n",
               failures == before ? "ok" : "FAIL", dt_name(dt), sizes.size(), sizeof divisors / sizeof divisors[0],
               sizeof offsets / sizeof offsets[0]);
        fflush(stdout);
    }
}

void test_arguments(const Arena &ar, cudaStream_t stream) {
    const int before = failures;
    checks++;
    if (rl_reduce_device(nullptr, nullptr, nullptr, 0, RINGLET_FLOAT32, RINGLET_SUM, stream) != 0)
        fail("rl_reduce_device with n == 0 and NULL pointers did not return 0");
    if (rl_divide_device(nullptr, 0, RINGLET_FLOAT32, 4, stream) != 0)
        fail("rl_divide_device with n == 0 and NULL buffer did not return 0");
    CK(cudaMemsetAsync(ar.base, kPoison, ar.region, stream));
    unsigned char *p = ar.at(0, 0);
    if (rl_reduce_device(p, p, p, 16, static_cast<ringlet_datatype_t>(RINGLET_NUM_DATATYPES), RINGLET_SUM, stream) == 0)
        fail("rl_reduce_device with an unknown dtype returned 0");
    if (rl_reduce_device(p, p, p, 16, RINGLET_INT32, static_cast<ringlet_op_t>(RINGLET_NUM_OPS), stream) == 0)
        fail("rl_reduce_device with an unknown op returned 0");
    if (rl_divide_device(p, 16, static_cast<ringlet_datatype_t>(-1), 3, stream) == 0)
        fail("rl_divide_device with an unknown dtype returned 0");
    if (rl_reduce_device(p + 1, p, p, 16, RINGLET_INT32, RINGLET_SUM, stream) == 0)
        fail("rl_reduce_device with a pointer not aligned to the element size returned 0");
    /* As the simulated GPU refuses them (tests/unit/test_simrules.c, rule launcher). */
    if (rl_reduce_device(p, p, p, 0, static_cast<ringlet_datatype_t>(99), RINGLET_SUM, stream) == 0)
        fail("rl_reduce_device with an unknown dtype and n == 0 returned 0");
    if (rl_scale_device(p, p, 16, RINGLET_INT32, nullptr, stream) == 0)
        fail("rl_scale_device with a NULL scalar returned 0");
    const void *one[1] = {p + 2};
    if (rl_reduce_device_many(p, one, 1, 16, RINGLET_INT32, RINGLET_SUM, stream) == 0)
        fail("rl_reduce_device_many with one misaligned source returned 0");
    if (rl_convert_device(p, RINGLET_INT32, p, RINGLET_FLOAT32, 0, 1.0, stream) == 0)
        fail("rl_convert_device to int32 with n == 0 returned 0");
    CK(cudaStreamSynchronize(stream));
    CK(cudaGetLastError());
    check_window(p, 0, nullptr, "buffer", "arguments: refused calls");
    std::vector<unsigned char> w(64);
    CK(cudaMemcpy(w.data(), p, w.size(), cudaMemcpyDeviceToHost));
    for (unsigned char c : w)
        if (c != kPoison) {
            fail("arguments: a refused call wrote to its buffer");
            break;
        }
    printf("%-5s argument handling (n == 0 with NULL, unknown dtype / op, misaligned pointer)\n",
           failures == before ? "ok" : "FAIL");
}

/* cudaStreamQuery, clearing the thread's last error when it says "not ready": CUDA leaves
 * cudaErrorNotReady as the calling thread's last error, and the kernels' launchers would
 * report it as theirs (see test_not_ready_then_launch). Code that polls clears it, as
 * PyTorch does after each such query. */
cudaError_t query_stream(cudaStream_t s) {
    const cudaError_t q = cudaStreamQuery(s);
    if (q == cudaErrorNotReady) (void)cudaGetLastError();
    return q;
}

/* Polls the stream until it is done or the time is up; true when done. */
bool stream_done_within(cudaStream_t s, double seconds) {
    const auto t0 = std::chrono::steady_clock::now();
    for (;;) {
        const cudaError_t q = query_stream(s);
        if (q == cudaSuccess) return true;
        if (q != cudaErrorNotReady) {
            fail("wait_flag: cudaStreamQuery: %s", cudaGetErrorString(q));
            return false;
        }
        if (std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() > seconds) return false;
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
}

void test_wait_flag() {
    const int before = failures;
    uint64_t *hflag = nullptr, *dflag = nullptr;
    int *hdone = nullptr, *dval = nullptr;
    CK(cudaHostAlloc(&hflag, sizeof *hflag, cudaHostAllocMapped));
    CK(cudaHostGetDevicePointer(&dflag, hflag, 0));
    CK(cudaHostAlloc(&hdone, sizeof *hdone, cudaHostAllocDefault));
    CK(cudaMalloc(&dval, sizeof *dval));
    cudaStream_t s;
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));

    struct Case {
        uint64_t start, below, release, value;
    };
    /* start: the flag before the wait; below: a raise that must not release it;
     * release: the value that must. start >= value: the wait returns at once. */
    const Case cases[] = {
        {0, 3, 5, 5},
        {10, 99, 1ull << 40, 100},
        {0xfffffffffffffff0ull, 0xfffffffffffffffeull, 0xffffffffffffffffull, 0xffffffffffffffffull},
        {9, 0, 0, 6},
    };
    for (const Case &c : cases) {
        char ctx[96];
        snprintf(ctx, sizeof ctx, "wait_flag(value %" PRIu64 ", flag %" PRIu64 ")", c.value, c.start);
        __atomic_store_n(hflag, c.start, __ATOMIC_SEQ_CST);
        *hdone = 0;
        CK(cudaMemset(dval, 0, sizeof *dval));
        const int rc = rl_stream_wait_flag(dflag, c.value, s);
        checks++;
        if (rc != 0) {
            fail("%s: returned %d (%s)", ctx, rc, cudaGetErrorString(static_cast<cudaError_t>(rc)));
            continue;
        }
        /* Work queued behind the wait. */
        CK(cudaMemsetAsync(dval, 0x01, sizeof *dval, s));
        CK(cudaMemcpyAsync(hdone, dval, sizeof *dval, cudaMemcpyDeviceToHost, s));
        if (c.start < c.value) {
            std::this_thread::sleep_for(std::chrono::milliseconds(100));
            if (query_stream(s) != cudaErrorNotReady || *(volatile int *)hdone != 0)
                fail("%s: the stream ran on before the flag was raised", ctx);
            __atomic_store_n(hflag, c.below, __ATOMIC_SEQ_CST);
            std::this_thread::sleep_for(std::chrono::milliseconds(100));
            if (query_stream(s) != cudaErrorNotReady || *(volatile int *)hdone != 0)
                fail("%s: the stream ran on with the flag at %" PRIu64, ctx, c.below);
            __atomic_store_n(hflag, c.release, __ATOMIC_SEQ_CST);
        }
        if (!stream_done_within(s, 10.0)) {
            fail("%s: the stream was not released within 10 s of the flag reaching %" PRIu64, ctx,
                 c.start < c.value ? c.release : c.start);
            __atomic_store_n(hflag, ~0ull, __ATOMIC_SEQ_CST); /* let the kernel go before leaving */
            if (!stream_done_within(s, 10.0)) {
                printf("FAIL wait_flag: the stream is stuck; giving up\n");
                exit(1);
            }
        }
        CK(cudaStreamSynchronize(s));
        if (*hdone != 0x01010101) fail("%s: the work queued after the wait did not run (0x%x)", ctx, *hdone);
    }
    CK(cudaGetLastError());
    CK(cudaStreamDestroy(s));
    CK(cudaFree(dval));
    CK(cudaFreeHost(hdone));
    CK(cudaFreeHost(hflag));
    printf("%-5s rl_stream_wait_flag (blocks below the value, releases at or above it, orders later work)\n",
           failures == before ? "ok" : "FAIL");
}

} // namespace

/* rl_reduce_device_many against rl_reduce_host_many, bit for bit (NaN payloads aside):
 * every dtype x op, 1 to 8 sources, dst a source or not. */
void test_many(cudaStream_t stream) {
    const size_t lens[] = {1, 7, 4099, 65537};
    for (int dt = 0; dt < RINGLET_NUM_DATATYPES; dt++)
        for (int op = 0; op < RINGLET_NUM_OPS; op++)
            for (size_t li = 0; li < sizeof lens / sizeof lens[0]; li++) {
                const size_t n = lens[li], es = elem_size(dt), bytes = n * es;
                const int nsrc = 1 + static_cast<int>(rnd() % 8), alias = static_cast<int>(rnd() % (nsrc + 1)) - 1;
                std::vector<std::vector<unsigned char>> h(nsrc);
                std::vector<void *> d(nsrc);
                const void *hp[8];
                for (int k = 0; k < nsrc; k++) {
                    fill_random(h[k], n, dt);
                    hp[k] = h[k].data();
                    CK(cudaMalloc(&d[k], bytes));
                    CK(cudaMemcpy(d[k], h[k].data(), bytes, cudaMemcpyHostToDevice));
                }
                std::vector<unsigned char> want(bytes + 1), got(bytes + 1);
                rl_reduce_host_many(want.data(), hp, nsrc, n, static_cast<ringlet_datatype_t>(dt),
                                    static_cast<ringlet_op_t>(op));
                void *dst = nullptr;
                if (alias >= 0) dst = d[alias];
                else CK(cudaMalloc(&dst, bytes));
                const int rc = rl_reduce_device_many(dst, const_cast<const void *const *>(d.data()), nsrc, n,
                                                     static_cast<ringlet_datatype_t>(dt), static_cast<ringlet_op_t>(op),
                                                     stream);
                checks++;
                if (rc != 0) fail("reduce_many %s %s n=%zu: launch returned %d", dt_name(dt), op_name(op), n, rc);
                CK(cudaStreamSynchronize(stream));
                CK(cudaMemcpy(got.data(), dst, bytes, cudaMemcpyDeviceToHost));
                for (size_t e = 0; e < n; e++) {
                    const uint64_t w = get_bits(want.data(), e, es), g = get_bits(got.data(), e, es);
                    checks++;
                    if (w != g && !(is_nan(dt, w) && is_nan(dt, g))) {
                        fail("reduce_many %s %s n=%zu nsrc=%d alias=%d: element %zu is 0x%llx, the CPU's 0x%llx",
                             dt_name(dt), op_name(op), n, nsrc, alias, e, (unsigned long long)g,
                             (unsigned long long)w);
                        break;
                    }
                }
                if (alias < 0) CK(cudaFree(dst));
                for (int k = 0; k < nsrc; k++) CK(cudaFree(d[k]));
            }
}

namespace {

/* rl_scale_device against rl_scale_host, bit for bit (NaN payloads aside): every dtype,
 * random inputs, a random scalar per size plus special ones, in place and out of place. */
void test_scale(const Arena &ar, const std::vector<size_t> &sizes, cudaStream_t stream) {
    struct Layout {
        const char *name;
        size_t od, os; /* element offsets of dst and src */
        bool inplace;
    };
    static const Layout layouts[] = {
        {"aligned", 0, 0, false}, {"misaligned-1", 1, 1, false}, {"offsets-differ", 0, 3, false},
        {"in-place", 0, 0, true}, {"in-place-misaligned", 5, 5, true},
    };
    std::vector<unsigned char> X, R, G;
    for (int dt = 0; dt < RINGLET_NUM_DATATYPES; dt++) {
        const size_t es = elem_size(dt);
        const int before = failures;
        int ncases = 0;
        for (size_t n : sizes) {
            if (n > 65537) continue; /* the scaling has one code path; keep the CPU's share small */
            /* scalars: three random ones (a special value, NaN or inf among them, one time in eight), 0, 1, 2 */
            std::vector<uint64_t> scalars = {random_element(dt), random_element(dt), random_element(dt)};
            scalars.push_back(0);
            switch (dt) {
            case RINGLET_FLOAT16: scalars.push_back(0x3c00); scalars.push_back(0x4000); break;
            case RINGLET_BFLOAT16: scalars.push_back(0x3f80); scalars.push_back(0x4000); break;
            case RINGLET_FLOAT32: scalars.push_back(0x3f800000u); scalars.push_back(0x40000000u); break;
            case RINGLET_FLOAT64:
                scalars.push_back(0x3ff0000000000000ull);
                scalars.push_back(0x4000000000000000ull);
                break;
            default: scalars.push_back(1); scalars.push_back(2); break;
            }
            for (uint64_t kbits : scalars)
                for (const Layout &L : layouts) {
                    ncases++;
                    fill_random(X, n, dt);
                    unsigned char scalar[8];
                    put_bits(scalar, 0, es, kbits);
                    char ctx[160];
                    snprintf(ctx, sizeof ctx, "scale %s n=%zu by 0x%" PRIx64 " %s", dt_name(dt), n, kbits, L.name);
                    unsigned char *ps = ar.at(1, L.os * es), *pd = L.inplace ? ps : ar.at(0, L.od * es);
                    CK(cudaMemsetAsync(ar.base, kPoison, 2 * ar.region, stream));
                    CK(cudaMemcpyAsync(ps, X.data(), n * es, cudaMemcpyHostToDevice, stream));
                    const int rc = rl_scale_device(pd, ps, n, static_cast<ringlet_datatype_t>(dt), scalar, stream);
                    const cudaError_t sync = cudaStreamSynchronize(stream);
                    checks++;
                    if (rc != 0 || sync != cudaSuccess) {
                        fail("%s: rl_scale_device returned %d, synchronize: %s", ctx, rc, cudaGetErrorString(sync));
                        if (sync != cudaSuccess) exit(1);
                        continue;
                    }
                    R.assign(n * es + 1, 0);
                    rl_scale_host(R.data(), X.data(), n, static_cast<ringlet_datatype_t>(dt), scalar);
                    G.assign(n * es + 1, 0);
                    CK(cudaMemcpy(G.data(), pd, n * es, cudaMemcpyDeviceToHost));
                    compare(G.data(), R.data(), X.data(), nullptr, n, dt, ctx);
                    check_window(pd, n * es, nullptr, "dst", ctx);
                    if (!L.inplace) check_window(ps, n * es, X.data(), "src", ctx);
                }
        }
        printf("%-5s rl_scale_device %-9s x %d cases (sizes, scalars, layouts)\n", failures == before ? "ok" : "FAIL",
               dt_name(dt), ncases);
        fflush(stdout);
    }
}

/* rl_convert_device against rl_convert_host, bit for bit (a NaN only has to be a NaN): every
 * pair of the floating types, several scales, in place when the sizes match. */
void test_convert(const Arena &ar, const std::vector<size_t> &sizes, cudaStream_t stream) {
    static const int types[] = {RINGLET_FLOAT16, RINGLET_BFLOAT16, RINGLET_FLOAT32, RINGLET_FLOAT64};
    std::vector<unsigned char> X, R, G;
    for (int st : types)
        for (int dt : types) {
            const size_t ses = elem_size(st), des = elem_size(dt);
            const int before = failures;
            int ncases = 0;
            const double rs = std::ldexp(static_cast<double>(rnd() % 1000 + 1), -static_cast<int>(rnd() % 20));
            const double scales[] = {1.0, 0.5, 3.0, 1.0 / 3.0, 1e-3, std::ldexp(1.0, -20), rs};
            for (size_t n : sizes) {
                if (n > 65537) continue;
                for (double scale : scales)
                    for (int variant = 0; variant < 3; variant++) {
                        /* 0: aligned, 1: misaligned (1 element in, 3 out), 2: in place (same size only) */
                        if (variant == 2 && ses != des) continue;
                        ncases++;
                        fill_random(X, n, st);
                        char ctx[160];
                        snprintf(ctx, sizeof ctx, "convert %s -> %s n=%zu scale %.17g%s", dt_name(st), dt_name(dt), n,
                                 scale, variant == 1 ? " misaligned" : variant == 2 ? " in place" : "");
                        unsigned char *ps = ar.at(1, variant == 1 ? ses : 0);
                        unsigned char *pd = variant == 2 ? ps : ar.at(0, variant == 1 ? 3 * des : 0);
                        CK(cudaMemsetAsync(ar.base, kPoison, 2 * ar.region, stream));
                        CK(cudaMemcpyAsync(ps, X.data(), n * ses, cudaMemcpyHostToDevice, stream));
                        const int rc = rl_convert_device(pd, static_cast<ringlet_datatype_t>(dt), ps,
                                                         static_cast<ringlet_datatype_t>(st), n, scale, stream);
                        const cudaError_t sync = cudaStreamSynchronize(stream);
                        checks++;
                        if (rc != 0 || sync != cudaSuccess) {
                            fail("%s: rl_convert_device returned %d, synchronize: %s", ctx, rc,
                                 cudaGetErrorString(sync));
                            if (sync != cudaSuccess) exit(1);
                            continue;
                        }
                        R.assign(n * des + 1, 0);
                        rl_convert_host(R.data(), static_cast<ringlet_datatype_t>(dt), X.data(),
                                        static_cast<ringlet_datatype_t>(st), n, scale);
                        G.assign(n * des + 1, 0);
                        CK(cudaMemcpy(G.data(), pd, n * des, cudaMemcpyDeviceToHost));
                        compare(G.data(), R.data(), X.data(), nullptr, n, dt, ctx, ses);
                        check_window(pd, n * des, nullptr, "dst", ctx);
                        if (variant != 2) check_window(ps, n * ses, X.data(), "src", ctx);
                    }
            }
            printf("%-5s rl_convert_device %-8s -> %-8s x %d cases (sizes, scales, layouts)\n",
                   failures == before ? "ok" : "FAIL", dt_name(st), dt_name(dt), ncases);
            fflush(stdout);
        }
}

/* Spins until the host-mapped flag reaches the value or the time is up; true when reached. */
bool host_flag_within(volatile uint64_t *flag, uint64_t value, double seconds) {
    const auto t0 = std::chrono::steady_clock::now();
    while (__atomic_load_n(flag, __ATOMIC_ACQUIRE) != value) {
        if (std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() > seconds) return false;
        std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
    return true;
}

/* rl_stream_write_flag: into device memory; into host-mapped pinned memory behind a held
 * stream (not before the release, then with the earlier work complete and visible). */
void test_write_flag() {
    const int before = failures;
    const uint64_t values[] = {1, 0xfffffffful + 7, 0x8000000000000001ull};
    uint64_t *hgate = nullptr, *dgate = nullptr, *hflag = nullptr, *dflag_mapped = nullptr, *dflag = nullptr;
    const size_t payload = 16u << 20; /* 16 MiB copied to pinned memory before the flag */
    unsigned char *hpay = nullptr, *dpay = nullptr;
    CK(cudaHostAlloc(&hgate, sizeof *hgate, cudaHostAllocMapped));
    CK(cudaHostGetDevicePointer(&dgate, hgate, 0));
    CK(cudaHostAlloc(&hflag, sizeof *hflag, cudaHostAllocMapped));
    CK(cudaHostGetDevicePointer(&dflag_mapped, hflag, 0));
    CK(cudaMalloc(&dflag, sizeof *dflag));
    CK(cudaHostAlloc(&hpay, payload, cudaHostAllocDefault));
    CK(cudaMalloc(&dpay, payload));
    cudaStream_t s;
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));

    /* Device memory first: the kernel's first launch then finds no stream held (a first launch
     * may load the kernel, which can wait for the device to go idle: issue 21, rule b). The
     * value lands, all 64 bits. */
    for (uint64_t v : values) {
        uint64_t got = 0;
        CK(cudaMemsetAsync(dflag, 0, sizeof *dflag, s));
        const int rc = rl_stream_write_flag(dflag, v, s);
        checks++;
        if (rc != 0) fail("write_flag(device memory, %" PRIu64 "): returned %d", v, rc);
        CK(cudaMemcpyAsync(&got, dflag, sizeof got, cudaMemcpyDeviceToHost, s));
        CK(cudaStreamSynchronize(s));
        checks++;
        if (rc == 0 && got != v) fail("write_flag(device memory): 0x%" PRIx64 " written, 0x%" PRIx64 " read", v, got);
    }

    /* host-mapped memory behind a held stream, after a copy into pinned memory */
    unsigned char pattern = 0x11;
    for (uint64_t v : values) {
        pattern = static_cast<unsigned char>(pattern + 0x22);
        __atomic_store_n(hflag, 0, __ATOMIC_SEQ_CST);
        __atomic_store_n(hgate, 0, __ATOMIC_SEQ_CST);
        memset(hpay, 0, payload);
        CK(cudaMemsetAsync(dpay, pattern, payload, s));
        int rc = rl_stream_wait_flag(dgate, 1, s); /* hold the stream */
        checks++;
        if (rc != 0) {
            fail("write_flag: rl_stream_wait_flag returned %d", rc);
            break;
        }
        CK(cudaMemcpyAsync(hpay, dpay, payload, cudaMemcpyDeviceToHost, s));
        rc = rl_stream_write_flag(dflag_mapped, v, s);
        checks++;
        if (rc != 0) {
            fail("write_flag(mapped, %" PRIu64 "): returned %d", v, rc);
            __atomic_store_n(hgate, 1, __ATOMIC_SEQ_CST);
            CK(cudaStreamSynchronize(s));
            continue;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
        checks++;
        if (__atomic_load_n(hflag, __ATOMIC_ACQUIRE) != 0) fail("write_flag(mapped): written while the stream was held");
        __atomic_store_n(hgate, 1, __ATOMIC_SEQ_CST); /* release */
        checks++;
        if (!host_flag_within(hflag, v, 10.0)) {
            fail("write_flag(mapped): 0x%" PRIx64 " not seen within 10 s of the release (flag 0x%" PRIx64 ")", v,
                 __atomic_load_n(hflag, __ATOMIC_ACQUIRE));
        } else {
            /* the copy queued before the flag must be complete now, before any synchronisation */
            size_t bad = payload;
            for (size_t i = 0; i < payload; i += 4093)
                if (reinterpret_cast<volatile unsigned char *>(hpay)[i] != pattern) {
                    bad = i;
                    break;
                }
            if (reinterpret_cast<volatile unsigned char *>(hpay)[payload - 1] != pattern) bad = payload - 1;
            checks++;
            if (bad != payload)
                fail("write_flag(mapped): flag seen, but byte %zu of the copy queued before it is 0x%02x, not 0x%02x",
                     bad, hpay[bad], pattern);
        }
        if (!stream_done_within(s, 10.0)) {
            printf("FAIL write_flag: the stream is stuck; giving up\n");
            exit(1);
        }
    }
    CK(cudaGetLastError());
    CK(cudaStreamDestroy(s));
    CK(cudaFree(dpay));
    CK(cudaFreeHost(hpay));
    CK(cudaFree(dflag));
    CK(cudaFreeHost(hflag));
    CK(cudaFreeHost(hgate));
    printf("%-5s rl_stream_write_flag (device memory; mapped memory: held back with its stream, then after the "
           "earlier copy)\n",
           failures == before ? "ok" : "FAIL");
}

/* The per-thread last error (issue 21, rule a). cudaEventQuery on an event that is not done
 * returns cudaErrorNotReady and leaves it as the calling thread's last error. A kernel launcher
 * that returns cudaGetLastError() then reports 600 for a launch that worked. ringlet polls events
 * from the threads that launch its reductions, so every launcher must report only its own
 * launch's error (they do: cudaLaunchKernel's own status). */
void test_not_ready_then_launch(const Arena &ar, cudaStream_t stream) {
    const int before = failures;
    uint64_t *hgate = nullptr, *dgate = nullptr;
    CK(cudaHostAlloc(&hgate, sizeof *hgate, cudaHostAllocMapped));
    CK(cudaHostGetDevicePointer(&dgate, hgate, 0));
    __atomic_store_n(hgate, 0, __ATOMIC_SEQ_CST);
    cudaStream_t held;
    CK(cudaStreamCreateWithFlags(&held, cudaStreamNonBlocking));
    cudaEvent_t ev;
    CK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
    unsigned char *p = ar.at(0, 0);
    /* The same launch once with no stream held, so that the one below is not the kernel's first
     * (a first launch may load the kernel, which can wait for the spinning kernel: rule b). */
    (void)cudaGetLastError(); /* start clean */
    CK(cudaMemsetAsync(p, 0, 4099 * sizeof(float), stream));
    checks++;
    if (rl_reduce_device(p, p, p, 4099, RINGLET_FLOAT32, RINGLET_SUM, stream) != 0)
        fail("not-ready: the warm-up rl_reduce_device failed");
    CK(cudaStreamSynchronize(stream));
    const int wrc = rl_stream_wait_flag(dgate, 1, held);
    CK(cudaEventRecord(ev, held));
    const cudaError_t q = cudaEventQuery(ev);
    checks++;
    if (wrc != 0 || q != cudaErrorNotReady) {
        fail("not-ready: setup: rl_stream_wait_flag returned %d, cudaEventQuery %s (wanted cudaErrorNotReady)", wrc,
             cudaGetErrorString(q));
    } else {
        const int rc = rl_reduce_device(p, p, p, 4099, RINGLET_FLOAT32, RINGLET_SUM, stream);
        checks++;
        if (rc != 0)
            fail("not-ready: rl_reduce_device returned %d (%s) after a cudaEventQuery that found an event not ready "
                 "on this thread: the launcher reports the thread's last error, not its own launch's (issue 21 "
                 "rule a)",
                 rc, cudaGetErrorString(static_cast<cudaError_t>(rc)));
    }
    __atomic_store_n(hgate, 1, __ATOMIC_SEQ_CST);
    if (!stream_done_within(held, 10.0)) {
        printf("FAIL not-ready: the held stream is stuck; giving up\n");
        exit(1);
    }
    CK(cudaStreamSynchronize(stream));
    (void)cudaGetLastError(); /* leave no error behind for the cases that follow */
    CK(cudaEventDestroy(ev));
    CK(cudaStreamDestroy(held));
    CK(cudaFreeHost(hgate));
    printf("%-5s last error: rl_reduce_device returns 0 after a cudaEventQuery found an event not ready\n",
           failures == before ? "ok" : "FAIL");
}

/* rl_cuda_load_kernels (issue 21, rule b): every kernel loaded; then a kernel's launch behind a
 * held stream (a flag wait on another stream) goes through and runs once the flag is set. The
 * kernel picked (int8 min, 16-byte groups) is launched nowhere else in this program before. */
void test_load_kernels(const Arena &ar, cudaStream_t stream) {
    const int before = failures;
    checks++;
    const int lrc = rl_cuda_load_kernels();
    if (lrc != 0) fail("rl_cuda_load_kernels returned %d (%s)", lrc, cudaGetErrorString(static_cast<cudaError_t>(lrc)));
    uint64_t *hgate = nullptr, *dgate = nullptr;
    CK(cudaHostAlloc(&hgate, sizeof *hgate, cudaHostAllocMapped));
    CK(cudaHostGetDevicePointer(&dgate, hgate, 0));
    __atomic_store_n(hgate, 0, __ATOMIC_SEQ_CST);
    cudaStream_t held;
    CK(cudaStreamCreateWithFlags(&held, cudaStreamNonBlocking));
    unsigned char *p = ar.at(0, 0);
    checks++;
    if (rl_stream_wait_flag(dgate, 1, held) != 0) fail("load: rl_stream_wait_flag failed");
    const int rc = rl_reduce_device(p, p, p, 4096, RINGLET_INT8, RINGLET_MIN, stream);
    checks++;
    if (rc != 0) fail("load: a launch behind a held stream returned %d", rc);
    checks++;
    if (!stream_done_within(stream, 10.0)) fail("load: a loaded kernel did not run while another stream was held");
    __atomic_store_n(hgate, 1, __ATOMIC_SEQ_CST);
    if (!stream_done_within(held, 10.0)) {
        printf("FAIL load: the held stream is stuck; giving up\n");
        exit(1);
    }
    CK(cudaStreamDestroy(held));
    CK(cudaFreeHost(hgate));
    printf("%-5s rl_cuda_load_kernels, then a launch behind a held stream\n", failures == before ? "ok" : "FAIL");
}

} // namespace

int main(int argc, char **argv) {
    setvbuf(stdout, nullptr, _IOLBF, 0);
    uint64_t seed = static_cast<uint64_t>(time(nullptr));
    const char *env_seed = getenv("RINGLET_TEST_SEED");
    if (env_seed && *env_seed) seed = strtoull(env_seed, nullptr, 0);
    size_t max_n = 1000003;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--seed") == 0 && i + 1 < argc)
            seed = strtoull(argv[++i], nullptr, 0);
        else if (strcmp(argv[i], "--max-n") == 0 && i + 1 < argc)
            max_n = strtoull(argv[++i], nullptr, 0);
        else {
            fprintf(stderr, "usage: %s [--seed N] [--max-n N]\n", argv[0]);
            return 2;
        }
    }

    int ndev = 0;
    const cudaError_t e = cudaGetDeviceCount(&ndev);
    if (e != cudaSuccess || ndev == 0) {
        printf("SKIP: no GPU (cudaGetDeviceCount: %s, %d devices)\n", cudaGetErrorString(e), ndev);
        return 77;
    }
    cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, 0));
    printf("device 0: %s, compute capability %d.%d, %d multiprocessors; seed %" PRIu64 " (RINGLET_TEST_SEED), "
           "max n %zu, CPU kernels: %s\n",
           prop.name, prop.major, prop.minor, prop.multiProcessorCount, seed, max_n, rl_reduce_host_isa());
    rng_state = seed;

    std::vector<size_t> sizes = {0, 1, 7, 8, 33, 4099};
    if (max_n > 4099) sizes.push_back(max_n);
    Arena ar;
    ar.init(max_n > 4099 ? max_n : 4099);
    cudaStream_t stream;
    CK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));

    test_load_kernels(ar, stream); /* first: its launch must be that kernel's first in the process */
    test_arguments(ar, stream);
    test_reduce(ar, sizes, stream);
    test_divide(ar, sizes, stream);
    test_many(stream);
    test_scale(ar, sizes, stream);
    test_convert(ar, sizes, stream);
    /* The same at small sizes on grids of 1 and 3 blocks (rl_cuda_test_grid_cap): a
     * thread then takes its second unrolled group and the grid-stride steps, which a full
     * grid reaches only above the quick tier's sizes. */
    for (unsigned cap : {1u, 3u}) {
        rl_cuda_test_grid_cap(cap);
        printf("grid capped at %u blocks:\n", cap);
        std::vector<size_t> small = {4099};
        if (max_n >= 65537) small.push_back(65537);
        test_reduce(ar, small, stream);
        test_divide(ar, small, stream);
        test_many(stream);
        test_scale(ar, small, stream);
        test_convert(ar, small, stream);
    }
    rl_cuda_test_grid_cap(0);
    test_wait_flag();
    test_write_flag();
    test_not_ready_then_launch(ar, stream);

    CK(cudaStreamDestroy(stream));
    CK(cudaFree(ar.base));
    printf("test_kernels: %ld checks, %d failures (seed %" PRIu64 ")\n", checks, failures, seed);
    return failures ? 1 : 0;
}
