/* Conversions between the floating types with a scaling (kernels/convert.h) and the
 * public memory operations (ringlet_convert_async, ringlet_memcpy_async,
 * ringlet_memset_async, ringlet_host_alloc) on host memory and on the simulated GPU's
 * device memory. Random inputs (fixed seed) with the special values mixed in (zeros of
 * both signs, infinities, NaN, subnormals, values that overflow float16); every result is
 * compared bit for bit with a reference built from the scalar conversions of reduce.h.
 * With two simulated devices: buffers of device 1 converted with device 0 current (the
 * kernel must run on device 1: one on device 0 cannot reach them), and refused on a stream
 * of device 0. Last, ringlet_stream_synchronize on a stream whose work does not end (the
 * program's own flag wait): RINGLET_ERR_TIMEOUT at RINGLET_TIMEOUT, not a hang; the
 * program's frees through ringlet meanwhile return (kept: CUDA's would wait behind the
 * work); once the flag is set it synchronises. Pinned memory in stream order
 * (pinned_in_stream_order). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "convert.h"
#include "device.h"
#include "reduce.h"
#include "ringlet.h"
#include "rt.h"

static int g_fail, g_checks;
static uint64_t g_rng = 0x9E3779B97F4A7C15ull;
static uint64_t rnd(void) {
    g_rng ^= g_rng << 13, g_rng ^= g_rng >> 7, g_rng ^= g_rng << 17;
    return g_rng;
}
#define CHECK(cond, ...)                                                                                               \
    do {                                                                                                               \
        g_checks++;                                                                                                    \
        if (!(cond)) {                                                                                                 \
            if (g_fail++ < 20) printf("FAIL %s:%d: ", __FILE__, __LINE__), printf(__VA_ARGS__), printf("\n");        \
        }                                                                                                              \
    } while (0)

static const ringlet_datatype_t T[4] = {RINGLET_FLOAT16, RINGLET_BFLOAT16, RINGLET_FLOAT32, RINGLET_FLOAT64};
static const char *NAME[4] = {"float16", "bfloat16", "float32", "float64"};

/* A random value of type t (bits), specials included. */
static void fill(void *p, ringlet_datatype_t t, size_t n) {
    static const double special[] = {0.0, -0.0, INFINITY, -INFINITY, NAN, 65504.0, 65520.0, 1e-8, -3e-40, 1e300};
    for (size_t i = 0; i < n; i++) {
        double v = rnd() % 16 == 0 ? special[rnd() % 10] : ((double)(int64_t)(rnd() % 2000001) - 1000000) / 997.0;
        if (rnd() % 8 == 0) v *= 1e-6;
        switch (t) {
        case RINGLET_FLOAT16: ((uint16_t *)p)[i] = rl_float_to_half((float)v); break;
        case RINGLET_BFLOAT16: ((uint16_t *)p)[i] = rl_float_to_bf16((float)v); break;
        case RINGLET_FLOAT32: ((float *)p)[i] = (float)v; break;
        default: ((double *)p)[i] = v; break;
        }
    }
}

/* float64 to float16 / bfloat16 rounded once, to nearest even, by search: the two
 * neighbours of v among the finite values (as doubles, exact), the nearer taken, a tie to
 * the even one; past the largest finite value, as IEEE's rounding: infinity from its
 * midpoint with the next power up. Independent of the library's way (rounding to odd). */
static uint16_t once16(double v, int bf) {
    if (v != v) return bf ? 0x7fc0 : 0x7e00;
    uint16_t sign = signbit(v) ? 0x8000 : 0;
    double a = fabs(v);
    uint16_t inf = bf ? 0x7f80 : 0x7c00;
    double maxv = bf ? (double)rl_bf16_to_float(0x7f7f) : 65504.0;
    double ulp_max = bf ? ldexp(1.0, 127 - 7) : 32.0; /* the spacing at the largest finite */
    if (a >= maxv + ulp_max / 2) return sign | inf;
    uint16_t lo = 0, hi = inf; /* the largest bits with value <= a: binary search */
    while (hi - lo > 1) {
        uint16_t mid = (uint16_t)((lo + hi) / 2);
        double m = bf ? (double)rl_bf16_to_float(mid) : (double)rl_half_to_float(mid);
        if (m <= a) lo = mid;
        else hi = mid;
    }
    double vl = bf ? (double)rl_bf16_to_float(lo) : (double)rl_half_to_float(lo);
    if (vl == a || lo + 1 == inf) return sign | lo; /* exact, or between the largest and its midpoint */
    double vh = bf ? (double)rl_bf16_to_float((uint16_t)(lo + 1)) : (double)rl_half_to_float((uint16_t)(lo + 1));
    uint16_t r = a - vl < vh - a ? lo : a - vl > vh - a ? (uint16_t)(lo + 1) : (lo & 1) ? (uint16_t)(lo + 1) : lo;
    return sign | r;
}
static uint16_t half_of_double(double v) { return once16(v, 0); }
static uint16_t bf16_of_double(double v) { return once16(v, 1); }

/* The reference: the header's semantics, element by element. */
static void reference(void *dst, ringlet_datatype_t dt, const void *src, ringlet_datatype_t st, size_t n, double s) {
    for (size_t i = 0; i < n; i++) {
        if (st == RINGLET_FLOAT64) {
            double v = ((const double *)src)[i] * s;
            switch (dt) {
            case RINGLET_FLOAT16: ((uint16_t *)dst)[i] = half_of_double(v); break;
            case RINGLET_BFLOAT16: ((uint16_t *)dst)[i] = bf16_of_double(v); break;
            case RINGLET_FLOAT32: ((float *)dst)[i] = (float)v; break;
            default: ((double *)dst)[i] = v; break;
            }
            continue;
        }
        float v = st == RINGLET_FLOAT16    ? rl_half_to_float(((const uint16_t *)src)[i])
                  : st == RINGLET_BFLOAT16 ? rl_bf16_to_float(((const uint16_t *)src)[i])
                                           : ((const float *)src)[i];
        v *= (float)s;
        switch (dt) {
        case RINGLET_FLOAT16: ((uint16_t *)dst)[i] = rl_float_to_half(v); break;
        case RINGLET_BFLOAT16: ((uint16_t *)dst)[i] = rl_float_to_bf16(v); break;
        case RINGLET_FLOAT32: ((float *)dst)[i] = v; break;
        default: ((double *)dst)[i] = (double)v; break;
        }
    }
}

/* Equal bits, or both NaN (which NaN is not specified). */
static int same(const void *a, const void *b, ringlet_datatype_t t, size_t i) {
    size_t es = ringlet_datatype_size(t);
    if (!memcmp((const char *)a + i * es, (const char *)b + i * es, es)) return 1;
    double x, y;
    switch (t) {
    case RINGLET_FLOAT16: x = rl_half_to_float(((const uint16_t *)a)[i]), y = rl_half_to_float(((const uint16_t *)b)[i]); break;
    case RINGLET_BFLOAT16: x = rl_bf16_to_float(((const uint16_t *)a)[i]), y = rl_bf16_to_float(((const uint16_t *)b)[i]); break;
    case RINGLET_FLOAT32: x = ((const float *)a)[i], y = ((const float *)b)[i]; break;
    default: x = ((const double *)a)[i], y = ((const double *)b)[i]; break;
    }
    return isnan(x) && isnan(y);
}

static void other_device(void *src, void *got, void *want) {
    enum { M = 1031 };
    void *a = NULL, *b = NULL;
    CHECK(ringlet_set_device(1) == RINGLET_SUCCESS, "set_device 1: %s", ringlet_comm_last_error(NULL));
    CHECK(ringlet_mem_alloc(&a, M * 4) == RINGLET_SUCCESS && ringlet_mem_alloc(&b, M * 2) == RINGLET_SUCCESS,
          "device 1 memory: %s", ringlet_comm_last_error(NULL));
    if (!a || !b) return;
    fill(src, RINGLET_FLOAT32, M);
    reference(want, RINGLET_BFLOAT16, src, RINGLET_FLOAT32, M, 0.5);
    CHECK(ringlet_memcpy_async(a, src, M * 4, NULL) == RINGLET_SUCCESS, "copy in");
    CHECK(ringlet_stream_synchronize(NULL) == RINGLET_SUCCESS, "sync");
    ringlet_set_device(0);
    CHECK(ringlet_convert_async(b, RINGLET_BFLOAT16, a, RINGLET_FLOAT32, M, 0.5, NULL) == RINGLET_SUCCESS,
          "convert_async of device 1's memory with device 0 current: %s", ringlet_comm_last_error(NULL));
    int cur = -1;
    CHECK(ringlet_get_device(&cur) == RINGLET_SUCCESS && cur == 0, "the call left device %d current, not 0", cur);
    ringlet_set_device(1);
    memset(got, 0, M * 2);
    CHECK(ringlet_memcpy_async(got, b, M * 2, NULL) == RINGLET_SUCCESS, "copy out");
    CHECK(ringlet_stream_synchronize(NULL) == RINGLET_SUCCESS, "sync on device 1: %s", ringlet_comm_last_error(NULL));
    size_t bad = M;
    for (size_t i = 0; i < M && bad == M; i++)
        if (!same(got, want, RINGLET_BFLOAT16, i)) bad = i;
    CHECK(bad == M, "device 1's conversion: element %zu differs", bad);
    /* A stream of device 0: refused, saying so. */
    ringlet_set_device(0);
    const rl_device_ops *d = rl_device();
    rl_dev_stream_t s0 = NULL;
    CHECK(d && d->stream_create(&s0) == RL_DEV_OK, "a stream of device 0");
    if (s0) {
        /* ringlet_stream_device: s0's device whatever is current; a default stream's, the current one */
        int sd = -1, dd = -1;
        ringlet_set_device(1);
        CHECK(ringlet_stream_device(s0, &sd) == RINGLET_SUCCESS && sd == 0, "stream_device of device 0's stream "
              "with device 1 current: %d", sd);
        CHECK(ringlet_stream_device(RINGLET_STREAM_DEFAULT, &dd) == RINGLET_SUCCESS && dd == 1,
              "stream_device of the default stream with device 1 current: %d", dd);
        ringlet_set_device(0);
        ringlet_result_t rc = ringlet_convert_async(b, RINGLET_BFLOAT16, a, RINGLET_FLOAT32, M, 0.5, s0);
        CHECK(rc == RINGLET_ERR_INVALID_ARGUMENT && strstr(ringlet_comm_last_error(NULL), "stream belongs to device 0"),
              "device 1's buffers on device 0's stream: %d (%s)", (int)rc, ringlet_comm_last_error(NULL));
        d->stream_destroy(s0);
    }
    CHECK(ringlet_stream_synchronize(NULL) == RINGLET_SUCCESS, "nothing went wrong on device 0: %s",
          ringlet_comm_last_error(NULL));
    ringlet_mem_free(a);
    ringlet_mem_free(b);
}

/* See the top: the stream held by a flag wait of the program's own (the runtime's, which
 * ringlet does not know of). A library that synchronises without a deadline hangs here:
 * the alarm ends the test then. */
static void stream_sync_deadline(void) {
    const rl_device_ops *d = rl_device();
    rl_dev_stream_t s = NULL;
    void *flag_mem = NULL, *dev_mem = NULL, *pinned = NULL;
    CHECK(d && d->stream_create(&s) == RL_DEV_OK && d->host_alloc(&flag_mem, 64) == RL_DEV_OK, "stream: %s",
          rl_dev_error());
    CHECK(ringlet_mem_alloc(&dev_mem, 4096) == RINGLET_SUCCESS && ringlet_host_alloc(&pinned, 4096) == RINGLET_SUCCESS,
          "allocations: %s", ringlet_comm_last_error(NULL));
    if (!s || !flag_mem || !dev_mem || !pinned) return;
    volatile uint64_t *flag = flag_mem;
    *flag = 0;
    CHECK(rl_rt_sim.launch_wait_flag(flag, 1, s) == RL_RT_SUCCESS, "the program's flag wait");
    setenv("RINGLET_TIMEOUT", "0.5", 1);
    alarm(60);
    ringlet_result_t rc = ringlet_stream_synchronize(s);
    const char *msg = ringlet_comm_last_error(NULL);
    CHECK(rc == RINGLET_ERR_TIMEOUT && strstr(msg, "RINGLET_TIMEOUT"),
          "stream_synchronize of a stream whose work does not end: %d (%s), want RINGLET_ERR_TIMEOUT", (int)rc, msg);
    CHECK(ringlet_mem_free(dev_mem) == RINGLET_SUCCESS && ringlet_host_free(pinned) == RINGLET_SUCCESS,
          "frees after the timeout: %s", ringlet_comm_last_error(NULL));
    __atomic_store_n(flag, 1, __ATOMIC_RELEASE);
    rc = ringlet_stream_synchronize(s);
    CHECK(rc == RINGLET_SUCCESS, "stream_synchronize once the flag is set: %d (%s)", (int)rc, ringlet_comm_last_error(NULL));
    alarm(0);
    unsetenv("RINGLET_TIMEOUT");
    /* The kept frees are made at the next allocation's quiet section (nothing is stuck now). */
    void *again = NULL;
    CHECK(ringlet_mem_alloc(&again, 64) == RINGLET_SUCCESS && ringlet_mem_free(again) == RINGLET_SUCCESS,
          "an allocation and a free after it: %s", ringlet_comm_last_error(NULL));
    d->stream_destroy(s);
    d->host_free(flag_mem);
}

/* Pinned host memory in stream order: a copy from the device into a pinned buffer is
 * queued behind the program's own flag wait (the runtime's, which ringlet does not know
 * of), so it cannot have landed; a copy, a fill or a conversion of that pinned buffer on
 * the same stream must come after it, as CUDA orders them. ringlet runs those on the host:
 * it must wait for the stream first (here, with the stream held: RINGLET_ERR_TIMEOUT, and
 * nothing written), not read or write the buffer at once (it returned success with the old
 * bytes). Once the flag is set, each runs and sees the device's data (random). Also: an
 * overlapping copy within device memory is refused (the simulator stopped the process). */
static void pinned_in_stream_order(void) {
    enum { N = 1024 };
    const rl_device_ops *d = rl_device();
    rl_dev_stream_t s = NULL;
    void *flag_mem = NULL, *dev = NULL, *pin = NULL;
    float host[N], out[N];
    double wide[N];
    for (int i = 0; i < N; i++) host[i] = (float)(rnd() % 100000) * 0.25f + 1.0f;
    CHECK(d && d->stream_create(&s) == RL_DEV_OK && d->host_alloc(&flag_mem, 64) == RL_DEV_OK, "stream: %s",
          rl_dev_error());
    CHECK(ringlet_mem_alloc(&dev, sizeof host) == RINGLET_SUCCESS && ringlet_host_alloc(&pin, sizeof host) ==
              RINGLET_SUCCESS, "allocations: %s", ringlet_comm_last_error(NULL));
    if (!s || !flag_mem || !dev || !pin) return;
    CHECK(ringlet_memcpy_async(dev, host, sizeof host, s) == RINGLET_SUCCESS && ringlet_stream_synchronize(s) == 0,
          "the device's data");
    CHECK(ringlet_memcpy_async(dev, dev, sizeof host, s) == RINGLET_SUCCESS, "a copy onto itself is allowed");
    CHECK(ringlet_memcpy_async((char *)dev + 4, dev, 64, s) == RINGLET_ERR_INVALID_ARGUMENT &&
              strstr(ringlet_comm_last_error(NULL), "overlap"),
          "an overlapping device copy is refused: %s", ringlet_comm_last_error(NULL));
    volatile uint64_t *flag = flag_mem;
    setenv("RINGLET_TIMEOUT", "0.5", 1);
    alarm(60);
    for (int what = 0; what < 3; what++) {
        static const char *name[3] = {"a copy to pageable memory", "a fill", "a conversion to float64"};
        *flag = 0;
        memset(pin, 0, sizeof host);
        memset(out, 0, sizeof out);
        memset(wide, 0, sizeof wide);
        CHECK(rl_rt_sim.launch_wait_flag(flag, 1, s) == RL_RT_SUCCESS, "the program's flag wait");
        CHECK(ringlet_memcpy_async(pin, dev, sizeof host, s) == RINGLET_SUCCESS, "device to pinned, queued");
        ringlet_result_t rc = what == 0 ? ringlet_memcpy_async(out, pin, sizeof host, s)
                              : what == 1 ? ringlet_memset_async(pin, 0x3f, sizeof host, s)
                                          : ringlet_convert_async(wide, RINGLET_FLOAT64, pin, RINGLET_FLOAT32, N, 1.0, s);
        CHECK(rc == RINGLET_ERR_TIMEOUT, "%s of the pinned buffer behind the held copy: %d (%s), want "
              "RINGLET_ERR_TIMEOUT (it waited for the stream)", name[what], (int)rc,
              rc ? ringlet_comm_last_error(NULL) : "ran at once");
        CHECK(out[N - 1] == 0 && wide[N - 1] == 0, "%s wrote before the stream's work was done", name[what]);
        __atomic_store_n(flag, 1, __ATOMIC_RELEASE);
        rc = what == 0 ? ringlet_memcpy_async(out, pin, sizeof host, s)
             : what == 1 ? ringlet_memset_async(pin, 0x3f, sizeof host, s)
                         : ringlet_convert_async(wide, RINGLET_FLOAT64, pin, RINGLET_FLOAT32, N, 1.0, s);
        CHECK(rc == RINGLET_SUCCESS && ringlet_stream_synchronize(s) == RINGLET_SUCCESS, "%s once the flag is set: %s",
              name[what], ringlet_comm_last_error(NULL));
        int bad = -1;
        for (int i = 0; i < N && bad < 0; i++)
            if (what == 0 ? out[i] != host[i]
                : what == 1 ? ((unsigned char *)pin)[i] != 0x3f
                            : wide[i] != (double)host[i])
                bad = i;
        CHECK(bad < 0, "%s in stream order: element %d differs", name[what], bad);
    }
    alarm(0);
    unsetenv("RINGLET_TIMEOUT");
    ringlet_mem_free(dev);
    ringlet_host_free(pin);
    d->stream_destroy(s);
    d->host_free(flag_mem);
}

int main(void) {
    setenv("RINGLET_DEVICE", "sim", 1);
    setenv("RINGLET_SIM_DEVICES", "2", 1);
    setenv("RINGLET_SIM_JITTER", "50", 1);
    enum { N = 4133 }; /* not a multiple of any vector width */
    void *src = malloc(N * 8), *got = malloc(N * 8), *want = malloc(N * 8), *dsrc = NULL, *ddst = NULL;
    CHECK(ringlet_mem_alloc(&dsrc, N * 8) == RINGLET_SUCCESS && ringlet_mem_alloc(&ddst, N * 8) == RINGLET_SUCCESS,
          "device memory: %s", ringlet_comm_last_error(NULL));
    /* float64 values that float32 rounds to a float16 (bfloat16) tie: rounded once, they go
     * up; rounded through float32 they went to the even neighbour below. */
    const double h_up = 1.0 + ldexp(1.0, -11) + ldexp(1.0, -30), b_up = 1.0 + ldexp(1.0, -8) + ldexp(1.0, -30);
    const double twice[4] = {h_up, -h_up, b_up, -b_up};
    uint16_t h16[4], b16[4];
    rl_convert_host(h16, RINGLET_FLOAT16, twice, RINGLET_FLOAT64, 2, 1.0);
    rl_convert_host(b16, RINGLET_BFLOAT16, twice + 2, RINGLET_FLOAT64, 2, 1.0);
    CHECK(h16[0] == 0x3c01 && h16[1] == 0xbc01, "float64 1 + 2^-11 + 2^-30 to float16: 0x%04x 0x%04x, want 0x3c01 0xbc01",
          h16[0], h16[1]);
    CHECK(b16[0] == 0x3f81 && b16[1] == 0xbf81, "float64 1 + 2^-8 + 2^-30 to bfloat16: 0x%04x 0x%04x, want 0x3f81 0xbf81",
          b16[0], b16[1]);
    CHECK(half_of_double(h_up) == 0x3c01 && bf16_of_double(b_up) == 0x3f81, "the reference's own rounding");
    static const double scales[] = {1.0, 0.25, 1.0 / 3.0, -8.0};
    for (int a = 0; a < 4; a++)
        for (int b = 0; b < 4; b++)
            for (int k = 0; k < 4; k++) {
                ringlet_datatype_t st = T[a], dt = T[b];
                double s = scales[k];
                fill(src, st, N);
                reference(want, dt, src, st, N, s);
                /* host, through the kernel and through the public call */
                memset(got, 0xA5, N * 8);
                rl_convert_host(got, dt, src, st, N, s);
                size_t bad = N;
                for (size_t i = 0; i < N && bad == N; i++)
                    if (!same(got, want, dt, i)) bad = i;
                CHECK(bad == N, "host %s -> %s x %g: element %zu differs", NAME[a], NAME[b], s, bad);
                memset(got, 0xA5, N * 8);
                CHECK(ringlet_convert_async(got, dt, src, st, N, s, NULL) == RINGLET_SUCCESS, "convert_async (host)");
                CHECK(!memcmp(got, want, N * ringlet_datatype_size(dt)) || bad != N, "public host call differs");
                /* device memory on the simulated GPU: queued on the default stream */
                if (!dsrc) continue;
                size_t sb = N * ringlet_datatype_size(st), db = N * ringlet_datatype_size(dt);
                CHECK(ringlet_memcpy_async(dsrc, src, sb, NULL) == RINGLET_SUCCESS, "copy in");
                CHECK(ringlet_memset_async(ddst, 0x5A, db, NULL) == RINGLET_SUCCESS, "memset");
                CHECK(ringlet_convert_async(ddst, dt, dsrc, st, N, s, NULL) == RINGLET_SUCCESS, "convert_async (device): %s",
                      ringlet_comm_last_error(NULL));
                memset(got, 0, N * 8);
                CHECK(ringlet_memcpy_async(got, ddst, db, NULL) == RINGLET_SUCCESS, "copy out");
                CHECK(ringlet_stream_synchronize(NULL) == RINGLET_SUCCESS, "sync");
                bad = N;
                for (size_t i = 0; i < N && bad == N; i++)
                    if (!same(got, want, dt, i)) bad = i;
                CHECK(bad == N, "device %s -> %s x %g: element %zu differs", NAME[a], NAME[b], s, bad);
            }
    /* In place, same type: dst == src. */
    fill(src, RINGLET_FLOAT32, N);
    reference(want, RINGLET_FLOAT32, src, RINGLET_FLOAT32, N, 0.5);
    rl_convert_host(src, RINGLET_FLOAT32, src, RINGLET_FLOAT32, N, 0.5);
    CHECK(!memcmp(src, want, N * 4), "in place differs");
    /* Refusals: integer types; NULL pointers. */
    CHECK(ringlet_convert_async(got, RINGLET_INT32, src, RINGLET_FLOAT32, N, 1.0, NULL) == RINGLET_ERR_INVALID_ARGUMENT,
          "an integer type is refused");
    CHECK(ringlet_memcpy_async(NULL, src, 8, NULL) == RINGLET_ERR_INVALID_ARGUMENT, "NULL dst is refused");
    /* a count whose bytes pass PTRDIFF_MAX (the ranges would wrap; the host would run off
     * the buffers) */
    CHECK(ringlet_convert_async(got, RINGLET_FLOAT16, src, RINGLET_FLOAT32, SIZE_MAX / 2, 1.0, NULL) ==
                  RINGLET_ERR_INVALID_ARGUMENT &&
              strstr(ringlet_comm_last_error(NULL), "too large"),
          "a count of SIZE_MAX / 2 is refused: %s", ringlet_comm_last_error(NULL));
    /* Pinned host memory: written by a device copy, read by the host after a sync. */
    void *pin = NULL;
    CHECK(ringlet_host_alloc(&pin, 64) == RINGLET_SUCCESS && pin, "host_alloc: %s", ringlet_comm_last_error(NULL));
    if (pin && dsrc) {
        uint64_t v = 0x0123456789abcdefull, w = 0;
        CHECK(ringlet_memcpy_async(dsrc, &v, 8, NULL) == RINGLET_SUCCESS, "copy");
        CHECK(ringlet_memcpy_async(pin, dsrc, 8, NULL) == RINGLET_SUCCESS, "copy to pinned");
        CHECK(ringlet_stream_synchronize(NULL) == RINGLET_SUCCESS, "sync");
        memcpy(&w, pin, 8);
        CHECK(w == v, "pinned memory holds %llx", (unsigned long long)w);
    }
    ringlet_host_free(pin);
    stream_sync_deadline();
    pinned_in_stream_order();
    if (dsrc) other_device(src, got, want);
    ringlet_mem_free(dsrc);
    ringlet_mem_free(ddst);
    free(src), free(got), free(want);
    printf("test_convert: %d checks, %d failed\n", g_checks, g_fail);
    return g_fail ? 1 : 0;
}
