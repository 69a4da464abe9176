/* The simulated GPU (src/device/simgpu*.c) keeps the rules a GPU enforces: device memory
 * is out of the host's reach, streams run asynchronously and in order, events and flags
 * order work, kernels compute what the CPU kernels compute, faults are sticky, exported
 * memory is the same bytes in another process (a handle opened twice there is one mapping,
 * counted), and freed memory cannot be imported.
 * Random inputs (a fixed seed), exact checks. Some checks run in child processes: a
 * crash, and a sticky error, end the process that meets them.
 *   test_simgpu                  the whole test
 *   test_simgpu --child ...      (internal) the second process of a check
 */
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "device.h"
#include "reduce.h"

static const rl_device_ops *D = &rl_device_sim;
static int g_fail, g_checks;
static uint64_t g_rng = 0x243F6A8885A308D3ull;

static uint64_t rnd(void) {
    g_rng ^= g_rng << 13, g_rng ^= g_rng >> 7, g_rng ^= g_rng << 17;
    return g_rng;
}

#define CHECK(cond, ...)                                                                                               \
    do {                                                                                                               \
        g_checks++;                                                                                                    \
        if (!(cond)) {                                                                                                 \
            g_fail++;                                                                                                  \
            printf("FAIL %s:%d: ", __FILE__, __LINE__);                                                                \
            printf(__VA_ARGS__);                                                                                       \
            printf("\n");                                                                                              \
        }                                                                                                              \
    } while (0)
#define OK(call) CHECK((call) == RL_DEV_OK, "%s: %s", #call, rl_dev_error())

static void fill_random(void *p, size_t n) {
    unsigned char *b = p;
    for (size_t i = 0; i < n; i++) b[i] = (unsigned char)rnd();
}

/* Runs /proc/self/exe --child args...; its exit status (-1: killed). */
static int run_child(const char *what, const char *arg) {
    pid_t pid = fork();
    if (pid == 0) {
        execl("/proc/self/exe", "test_simgpu", "--child", what, arg, (char *)NULL);
        _exit(99);
    }
    int st = 0;
    waitpid(pid, &st, 0);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static void to_hex(const rl_dev_handle *h, char *out) {
    for (int i = 0; i < RL_DEV_HANDLE_BYTES; i++) sprintf(out + 2 * i, "%02x", h->bytes[i]);
}

static void from_hex(const char *s, rl_dev_handle *h) {
    memset(h, 0, sizeof *h);
    for (int i = 0; i < RL_DEV_HANDLE_BYTES && s[2 * i] && s[2 * i + 1]; i++) {
        unsigned v;
        sscanf(s + 2 * i, "%2x", &v);
        h->bytes[i] = (unsigned char)v;
    }
}

/* Byte i of the pattern with seed k. */
static unsigned char pat(size_t i, unsigned k) { return (unsigned char)(i * 31u + k * 7u + (i >> 8)); }

#define SHARED_BYTES 100003

static int child(int argc, char **argv) {
    if (argc < 4) return 98;
    const char *what = argv[2];
    if (!strcmp(what, "import")) {
        rl_dev_handle h;
        from_hex(argv[3], &h);
        void *d;
        if (D->mem_import(&h, &d) != RL_DEV_OK) {
            printf("child: import failed: %s\n", rl_dev_error());
            return 1;
        }
        unsigned char *buf = malloc(SHARED_BYTES);
        if (D->memcpy_async(buf, d, SHARED_BYTES, NULL) != RL_DEV_OK || D->stream_sync(NULL) != RL_DEV_OK) return 2;
        for (size_t i = 0; i < SHARED_BYTES; i++)
            if (buf[i] != pat(i, 1)) {
                printf("child: byte %zu of the imported memory is %u, want %u\n", i, buf[i], pat(i, 1));
                return 3;
            }
        /* As CUDA: the handle opened again is the same address, counted; the mapping stays
         * until the last close, and a close more than the opens is refused. */
        void *again = NULL;
        if (D->mem_import(&h, &again) != RL_DEV_OK || again != d) {
            printf("child: importing the handle again gave %p (%s), want %p\n", again, rl_dev_error(), d);
            return 6;
        }
        if (D->mem_unimport(again) != RL_DEV_OK) return 7;
        for (size_t i = 0; i < SHARED_BYTES; i++) buf[i] = pat(i, 2);
        if (D->memcpy_async(d, buf, SHARED_BYTES, NULL) != RL_DEV_OK || D->stream_sync(NULL) != RL_DEV_OK) {
            printf("child: the first open's mapping went with the second's close: %s\n", rl_dev_error());
            return 4;
        }
        if (D->mem_unimport(d) != RL_DEV_OK) return 5;
        if (D->mem_unimport(d) == RL_DEV_OK) {
            printf("child: a third close of a handle opened twice succeeded\n");
            return 8;
        }
        free(buf);
        return 0;
    }
    if (!strcmp(what, "stale")) {
        rl_dev_handle h;
        from_hex(argv[3], &h);
        void *d = NULL;
        int rc = D->mem_import(&h, &d);
        printf("child: importing a freed allocation's handle: %s\n", rc == RL_DEV_OK ? "mapped!" : rl_dev_error());
        return rc == RL_DEV_OK ? 1 : 0;
    }
    if (!strcmp(what, "sticky")) {
        /* A kernel on pageable memory faults when it runs; afterwards every call fails. */
        static float host[64];
        void *d;
        if (D->mem_alloc(&d, sizeof host) != RL_DEV_OK) return 2;
        if (D->reduce(d, d, host, 64, RINGLET_FLOAT32, RINGLET_SUM, NULL) != RL_DEV_OK) return 3; /* enqueued */
        int rc = D->stream_sync(NULL);
        printf("child: stream_sync after the faulting kernel: %s\n", rc == RL_DEV_OK ? "ok!" : rl_dev_error());
        if (rc == RL_DEV_OK || !strstr(rl_dev_error(), "illegal memory access")) return 4;
        void *e;
        if (D->mem_alloc(&e, 64) == RL_DEV_OK) return 5;
        rl_dev_event_t ev;
        if (D->event_create(&ev) == RL_DEV_OK) return 6;
        return 0;
    }
    return 97;
}

static void test_segv(void) {
    /* A host read of device memory crashes, whatever sanitizer the build has: the child
     * installs its own SIGSEGV handler (sanitizers let a program do that) that exits 42. */
    void *d;
    OK(D->mem_alloc(&d, 4096));
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = _exit; /* _exit(SIGSEGV) */
        sigaction(SIGSEGV, &sa, NULL);
        volatile unsigned char *p = d;
        unsigned char v = p[0];
        _exit(v == 0 ? 3 : 4); /* read without a crash: the simulator failed its job */
    }
    int st = 0;
    waitpid(pid, &st, 0);
    int crashed = (WIFEXITED(st) && WEXITSTATUS(st) == SIGSEGV) || (WIFSIGNALED(st) && WTERMSIG(st) == SIGSEGV);
    CHECK(crashed, "a host read of device memory did not crash (status 0x%x)", st);
    OK(D->mem_free(d));
}

static void test_copies(void) {
    const size_t n = 300007;
    unsigned char *a = malloc(n), *b = malloc(n), *pin;
    void *d1, *d2;
    OK(D->mem_alloc(&d1, n));
    OK(D->mem_alloc(&d2, n));
    OK(D->host_alloc((void **)&pin, n));
    rl_dev_stream_t s;
    OK(D->stream_create(&s));
    CHECK(D->ptr_device(d1) == 0 && D->ptr_device((char *)d2 + n - 1) == 0, "ptr_device of device memory");
    CHECK(D->ptr_device(pin) == -1 && D->ptr_device(a) == -1, "ptr_device of host memory");
    fill_random(a, n);
    /* pageable -> device (odd offset) -> device -> pinned -> pageable */
    OK(D->memcpy_async((char *)d1 + 3, a, n - 3, s));
    OK(D->memcpy_async(d2, d1, n, s));
    OK(D->memcpy_async(pin, (char *)d2 + 3, n - 3, s));
    OK(D->stream_sync(s));
    CHECK(!memcmp(pin, a, n - 3), "pageable -> device -> device -> pinned changed the bytes");
    memset(b, 0, n);
    OK(D->memset_async(d1, 0x5a, n, s));
    OK(D->memcpy_async(b, d1, n, s));
    OK(D->stream_sync(s));
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) bad += b[i] != 0x5a;
    CHECK(bad == 0, "memset: %zu bytes wrong", bad);
    /* past the end: refused at once, as cudaMemcpyAsync refuses it */
    CHECK(D->memcpy_async((char *)d1 + 1, a, n, s) == RL_DEV_ERR && strstr(rl_dev_error(), "past the end"),
          "a copy past a device allocation's end was accepted (%s)", rl_dev_error());
    CHECK(D->memcpy_async(b, pin + 8, n, s) == RL_DEV_ERR, "a copy past a pinned allocation's end was accepted");
    OK(D->stream_destroy(s));
    OK(D->mem_free(d1));
    OK(D->mem_free(d2));
    OK(D->host_free(pin));
    CHECK(D->mem_free(a) == RL_DEV_ERR, "mem_free of host memory was accepted");
    free(a);
    free(b);
}

static void test_kernels(void) {
    const ringlet_datatype_t dts[] = {RINGLET_INT8, RINGLET_UINT32, RINGLET_INT64, RINGLET_FLOAT16, RINGLET_FLOAT32,
                                      RINGLET_FLOAT64, RINGLET_BFLOAT16};
    const size_t n = 10007;
    rl_dev_stream_t s;
    OK(D->stream_create(&s));
    for (size_t t = 0; t < sizeof dts / sizeof dts[0]; t++) {
        for (int op = 0; op < RINGLET_NUM_OPS; op++) {
            size_t es = ringlet_datatype_size(dts[t]), bytes = n * es;
            unsigned char *x = malloc(bytes), *y = malloc(bytes), *want = malloc(bytes), *got = malloc(bytes), *pin;
            fill_random(x, bytes);
            fill_random(y, bytes);
            if (dts[t] == RINGLET_FLOAT16 || dts[t] == RINGLET_FLOAT32 || dts[t] == RINGLET_FLOAT64 || dts[t] == RINGLET_BFLOAT16) {
                /* finite values: random bits would be NaNs, whose payloads are unspecified */
                for (size_t i = 0; i < n; i++) {
                    double v = (double)(rnd() % 2001) / 100.0 - 10.0;
                    if (dts[t] == RINGLET_FLOAT32) ((float *)x)[i] = (float)v, ((float *)y)[i] = (float)(v * 0.37);
                    else if (dts[t] == RINGLET_FLOAT64) ((double *)x)[i] = v, ((double *)y)[i] = v * 0.37;
                    else if (dts[t] == RINGLET_FLOAT16)
                        ((uint16_t *)x)[i] = rl_float_to_half((float)v), ((uint16_t *)y)[i] = rl_float_to_half((float)(v * 0.37));
                    else
                        ((uint16_t *)x)[i] = rl_float_to_bf16((float)v), ((uint16_t *)y)[i] = rl_float_to_bf16((float)(v * 0.37));
                }
            }
            rl_reduce_host(want, x, y, n, dts[t], (ringlet_op_t)op);
            if (op == RINGLET_AVG) rl_divide_host(want, n, dts[t], 3);
            void *dx, *dy;
            OK(D->mem_alloc(&dx, bytes));
            OK(D->mem_alloc(&dy, bytes));
            OK(D->host_alloc((void **)&pin, bytes));
            memcpy(pin, y, bytes);
            OK(D->memcpy_async(dx, x, bytes, s));
            OK(D->memcpy_async(dy, y, bytes, s));
            /* reduce_many over (device x, pinned y, device y) into a fresh buffer */
            {
                void *dz;
                unsigned char *want3 = malloc(bytes);
                const void *hs[3] = {x, y, y};
                rl_reduce_host_many(want3, hs, 3, n, dts[t], (ringlet_op_t)op);
                OK(D->mem_alloc(&dz, bytes));
                OK(D->memcpy_async(dx, x, bytes, s));
                OK(D->memcpy_async(dy, y, bytes, s));
                const void *ds[3] = {dx, pin, dy};
                OK(D->reduce_many(dz, ds, 3, n, dts[t], (ringlet_op_t)op, s));
                OK(D->memcpy_async(got, dz, bytes, s));
                OK(D->stream_sync(s));
                CHECK(!memcmp(got, want3, bytes), "reduce_many dtype %d op %d differs from rl_reduce_host_many", dts[t], op);
                OK(D->mem_free(dz));
                free(want3);
            }
            /* dst aliasing a; b pinned on even ops, device memory on odd ones */
            OK(D->reduce(dx, dx, op % 2 ? dy : (void *)pin, n, dts[t], (ringlet_op_t)op, s));
            if (op == RINGLET_AVG) OK(D->divide(dx, n, dts[t], 3, s));
            OK(D->memcpy_async(got, dx, bytes, s));
            OK(D->stream_sync(s));
            CHECK(!memcmp(got, want, bytes), "reduce dtype %d op %d differs from rl_reduce_host", dts[t], op);
            OK(D->mem_free(dx));
            OK(D->mem_free(dy));
            OK(D->host_free(pin));
            free(x), free(y), free(want), free(got);
        }
    }
    OK(D->stream_destroy(s));
}

static void test_order(void) {
    /* 200 dependent kernels on one stream under jitter: x += 1 each time. */
    const size_t n = 4099;
    int64_t *h = malloc(n * 8), *one;
    void *dx;
    rl_dev_stream_t a, b;
    OK(D->stream_create(&a));
    OK(D->stream_create(&b));
    OK(D->mem_alloc(&dx, n * 8));
    OK(D->host_alloc((void **)&one, n * 8));
    for (size_t i = 0; i < n; i++) h[i] = (int64_t)i, one[i] = 1;
    OK(D->memcpy_async(dx, h, n * 8, a));
    for (int k = 0; k < 200; k++) OK(D->reduce(dx, dx, one, n, RINGLET_INT64, RINGLET_SUM, a));
    /* stream b waits for a's event, then reads */
    rl_dev_event_t e;
    OK(D->event_create(&e));
    OK(D->event_record(e, a));
    OK(D->stream_wait_event(b, e));
    memset(h, 0, n * 8);
    OK(D->memcpy_async(h, dx, n * 8, b));
    OK(D->stream_sync(b));
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) bad += h[i] != (int64_t)i + 200;
    CHECK(bad == 0, "200 dependent kernels then a copy on another stream after its event: %zu elements wrong", bad);
    CHECK(D->event_query(e) == RL_DEV_OK, "event not done after the stream that waited on it synchronised");

    /* A flag holds the stream: by construction nothing after it has run. The copy goes
     * to pinned memory (a copy into pageable memory would block until the stream got
     * there, as on CUDA). */
    volatile uint64_t *flag;
    int64_t *hp;
    OK(D->host_alloc((void **)&flag, 64));
    OK(D->host_alloc((void **)&hp, n * 8));
    memcpy(hp, h, n * 8);
    *flag = 0;
    OK(D->wait_flag(flag, 1, a));
    OK(D->memset_async(dx, 0, n * 8, a));
    OK(D->memcpy_async(hp, dx, n * 8, a));
    OK(D->write_flag(flag + 1, 77, a));
    OK(D->event_record(e, a));
    CHECK(D->event_query(e) == RL_DEV_NOT_READY, "an event behind a held flag is done");
    CHECK(hp[5] == 205, "a copy behind a held flag ran");
    __atomic_store_n(flag, 1, __ATOMIC_RELEASE);
    OK(D->stream_sync(a));
    CHECK(D->event_query(e) == RL_DEV_OK, "event not done after sync");
    CHECK(hp[5] == 0 && __atomic_load_n(flag + 1, __ATOMIC_ACQUIRE) == 77, "work after the released flag did not run");
    OK(D->event_destroy(e));
    OK(D->host_free(hp));

    /* A copy from pageable memory takes the bytes at the call, one into pageable memory
     * returns once done, the stream's earlier work first (as cudaMemcpyAsync does with
     * pageable memory): no sync anywhere below, the copies on one stream. */
    for (size_t i = 0; i < n; i++) h[i] = (int64_t)(i ^ 0x55);
    OK(D->memcpy_async(dx, h, n * 8, a));
    memset(h, 0, n * 8); /* the copy took the bytes before this */
    for (int k = 0; k < 50; k++) OK(D->reduce(dx, dx, one, n, RINGLET_INT64, RINGLET_SUM, a));
    OK(D->memcpy_async(h, dx, n * 8, a));
    bad = 0;
    for (size_t i = 0; i < n; i++) bad += h[i] != (int64_t)(i ^ 0x55) + 50;
    CHECK(bad == 0, "pageable copies: %zu elements wrong without a sync (a copy into pageable memory returns once done)", bad);

    /* mem_free waits for work queued on the memory */
    for (size_t i = 0; i < n; i++) h[i] = -1;
    int64_t *src = malloc(n * 8);
    for (size_t i = 0; i < n; i++) src[i] = (int64_t)(i * 3);
    OK(D->memcpy_async(dx, src, n * 8, b));
    OK(D->memcpy_async(h, dx, n * 8, b));
    OK(D->mem_free(dx));
    bad = 0;
    for (size_t i = 0; i < n; i++) bad += h[i] != (int64_t)(i * 3);
    CHECK(bad == 0, "mem_free returned before the copies queued on the memory ran (%zu wrong)", bad);
    OK(D->stream_destroy(a));
    OK(D->stream_destroy(b));
    OK(D->host_free((void *)flag));
    OK(D->host_free(one));
    free(h);
    free(src);
}

static void test_ipc(void) {
    void *d;
    unsigned char *buf = malloc(SHARED_BYTES);
    OK(D->mem_alloc(&d, SHARED_BYTES));
    for (size_t i = 0; i < SHARED_BYTES; i++) buf[i] = pat(i, 1);
    OK(D->memcpy_async(d, buf, SHARED_BYTES, NULL));
    OK(D->stream_sync(NULL));
    rl_dev_handle h;
    OK(D->mem_export(d, &h));
    char hex[2 * RL_DEV_HANDLE_BYTES + 1];
    to_hex(&h, hex);
    int rc = run_child("import", hex);
    CHECK(rc == 0, "the importing process failed (status %d)", rc);
    OK(D->memcpy_async(buf, d, SHARED_BYTES, NULL));
    OK(D->stream_sync(NULL));
    size_t bad = 0;
    for (size_t i = 0; i < SHARED_BYTES; i++) bad += buf[i] != pat(i, 2);
    CHECK(bad == 0, "the other process's writes to the shared memory are not here (%zu bytes differ)", bad);
    /* Freed, and its fd number reused by a new allocation: the old handle must not map it. */
    OK(D->mem_free(d));
    void *d2;
    OK(D->mem_alloc(&d2, SHARED_BYTES));
    rc = run_child("stale", hex);
    CHECK(rc == 0, "a handle of freed memory was imported (status %d)", rc);
    OK(D->mem_free(d2));
    free(buf);
}

int main(int argc, char **argv) {
    if (argc > 1 && !strcmp(argv[1], "--child")) return child(argc, argv);
    setvbuf(stdout, NULL, _IOLBF, 0);
    setenv("RINGLET_SIM_JITTER", "100", 1); /* read at the first stream: every stream jitters */
    test_segv();
    test_copies();
    test_kernels();
    test_order();
    test_ipc();
    int rc = run_child("sticky", "-");
    CHECK(rc == 0, "the sticky-error process failed (status %d)", rc);
    printf("test_simgpu: %d checks, %d failed\n", g_checks, g_fail);
    return g_fail ? 1 : 0;
}
