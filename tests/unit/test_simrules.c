/* CUDA's rules that the simulated GPU holds (src/device/rt.h), each checked through the
 * simulator's runtime (rl_rt_sim) and, where the device layer adds to it, through the
 * backend (rl_device_sim):
 *   last-error  the per-thread last error: "not ready" from a query included, cleared by
 *               get_last_error, not by peek; launches return their own status; the
 *               backend leaves a query's "not ready" cleared
 *   loading     a kernel's first launch waits for an idle device: behind a held stream it
 *               fails (where a GPU deadlocks); load_kernels / device_ready, or
 *               CUDA_MODULE_LOADING=EAGER, load them all first
 *   sync        allocations, frees and IPC opens wait for every stream, and fail while
 *               one is held
 *   destroy     a stream's destroy returns at once, held or not; its queued work still
 *               runs, and a device synchronisation waits for it
 *   devices     the current device per thread; events and launches on another device's
 *               stream refused, copies and waits allowed; a device's primary context made
 *               by set_device or a call that needs one (malloc, a stream) on the current
 *               device, not by get_device; the backend's device_enter / device_leave put a
 *               thread back on its device only where that device has a context
 *   pageable    copies into pageable memory return once done; one from pageable memory to
 *               the device takes the bytes at the call and returns at once, the copy in
 *               stream order; either is refused on a capturing stream
 *   driver-error a failed driver call leaves the thread's last error as it was
 *   launcher    the kernels' launchers refuse misaligned operands, unknown types and ops
 *               (at n 0 too) and a NULL factor: invalid value, nothing queued, no sticky
 *               fault, the thread's last error untouched
 *   fork        a child forked once the GPU was used cannot use it; nor one forked after only
 *               the device count (fork-count, a fresh process)
 *   legacy      the legacy default stream and the blocking streams wait for each other;
 *               non-blocking streams take no part
 *   queues      streams share CUDA_DEVICE_MAX_CONNECTIONS hardware queues (8 unset), and
 *               work queued behind another stream's unmet wait on the same queue does
 *               not run
 *   capture     stream capture (global mode): a capturing stream runs nothing enqueued on
 *               it; synchronising it, querying an event recorded in it, or an allocation
 *               while it captures fails and invalidates the capture (its end fails); a
 *               stream that waits for such an event joins the capture; the legacy stream
 *               asked while a blocking stream captures fails; the device layer's
 *               stream_capturing says so
 *   capture-modes  a thread's capture mode: in global mode (the default) a query,
 *               synchronisation or allocation fails while another thread captures, and
 *               invalidates that capture; in thread-local mode only the thread's own
 *               capture forbids them; in relaxed mode none; the device layer's own calls
 *               run in thread-local mode whatever the thread's
 *   ipc-free    freeing memory that another live process has open through IPC (CUDA:
 *               undefined) stops the process that frees it; an importer that closed every
 *               open of it, or exited, lets the free go; a process's own handle does not
 *               open in it (invalid device context)
 *   ipc-close   closing an IPC mapping waits for nothing: it stops the process where work
 *               queued or running still uses the mapping, and else fails behind a held
 *               stream (it may synchronise)
 *   memops      stream memory operations: a wait as CUDA's GEQ compares; the backend's
 *               hold kind (none by default: sync; RINGLET_STREAM_HOLD=memop|kernel,
 *               memop refused with RINGLET_SIM_MEMOPS=0)
 * And one rule of the device layer's own (device.c):
 *   stuck       after work of ours was noted stuck (rl_dev_note_stuck: queued behind a
 *               kernel of the program's that waits), rl_dev_free_later keeps its frees,
 *               also in a quiet section (made then, they would wait behind the kernel on
 *               CUDA, and the simulator refuses them as a deadlock); the first quiet
 *               section after that work is done makes them
 *   memop-device  a stream memory operation runs on its stream's device, not the current
 *               one: a flag of device 0 written on a stream of device 1 is an illegal address
 *   pinned-devices  a kept free of pinned memory, made by a quiet section of a thread on
 *               another device (one without a context), runs on the device it was given
 *               back on: no context is made on the thread's device
 * Rules whose state is the whole process (loaded kernels, the device count, environment
 * read once) run in child processes.
 *   test_simrules               every rule
 *   test_simrules --child NAME  (internal) one rule in a fresh process
 */
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "device.h"
#include "rt.h"
#include "util.h"

static const rl_rt *R = &rl_rt_sim;
static const rl_device_ops *D = &rl_device_sim;
static int g_fail, g_checks;

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
#define RT_OK(call)                                                                                                    \
    do {                                                                                                               \
        int e_ = (call);                                                                                               \
        CHECK(e_ == RL_RT_SUCCESS, "%s: %d %s (%s)", #call, e_, R->error_string(e_), R->error_detail());               \
    } while (0)
#define DEV_OK(call) CHECK((call) == RL_DEV_OK, "%s: %s", #call, rl_dev_error())

/* Runs /proc/self/exe --child name with one extra environment variable (or none). */
static int run_child(const char *name, const char *var, const char *value) {
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        if (var) setenv(var, value, 1);
        execl("/proc/self/exe", "test_simrules", "--child", name, (char *)NULL);
        _exit(99);
    }
    int st = 0;
    waitpid(pid, &st, 0);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* A pinned flag word, 0. */
static volatile uint64_t *new_flag(void) {
    void *p = NULL;
    RT_OK(R->host_alloc(&p, 64));
    *(volatile uint64_t *)p = 0;
    return p;
}

static void release(volatile uint64_t *flag, uint64_t v) { __atomic_store_n(flag, v, __ATOMIC_RELEASE); }

static int event_done(rl_dev_event_t e) {
    int q = R->event_query(e);
    R->get_last_error();
    return q == RL_RT_SUCCESS;
}

/* ---- last error ---- */

static void rule_last_error(void) {
    RT_OK(R->load_kernels());
    rl_dev_stream_t s;
    rl_dev_event_t e;
    RT_OK(R->stream_create(&s, 0));
    RT_OK(R->event_create(&e));
    volatile uint64_t *flag = new_flag();
    void *a = NULL;
    RT_OK(R->malloc(&a, 4096));
    RT_OK(R->launch_wait_flag(flag, 1, s));
    RT_OK(R->event_record(e, s));
    CHECK(R->event_query(e) == RL_RT_ERR_NOT_READY, "a query behind a held flag is not 'not ready'");
    CHECK(R->peek_at_last_error() == RL_RT_ERR_NOT_READY, "the query left %d as the last error, not 600",
          R->peek_at_last_error());
    CHECK(R->peek_at_last_error() == RL_RT_ERR_NOT_READY, "peek cleared the last error");
    /* A launch reports its own status, whatever the thread held. */
    CHECK(R->launch_reduce(a, a, a, 16, RINGLET_FLOAT32, RINGLET_SUM, s) == RL_RT_SUCCESS,
          "a good launch after a 'not ready' query failed");
    CHECK(R->get_last_error() == RL_RT_ERR_NOT_READY, "get_last_error did not return the query's 'not ready'");
    CHECK(R->get_last_error() == RL_RT_SUCCESS, "get_last_error did not clear it");
    /* A failed call sets it, a successful one leaves it. */
    CHECK(R->set_device(999) == RL_RT_ERR_INVALID_DEVICE, "set_device(999) did not fail with invalid device");
    int dev = -1;
    RT_OK(R->get_device(&dev));
    CHECK(R->peek_at_last_error() == RL_RT_ERR_INVALID_DEVICE, "a successful call changed the last error");
    R->get_last_error();
    /* The backend: a query that finds the event pending leaves the thread's error clean
     * (a caller's launch check would fail on a stale 600), and a reduction after it works. */
    CHECK(D->event_query(e) == RL_DEV_NOT_READY, "the backend's query is not 'not ready'");
    CHECK(R->peek_at_last_error() == RL_RT_SUCCESS,
          "the backend's query left %d as the thread's last error (it must clear 'not ready')",
          R->peek_at_last_error());
    DEV_OK(D->reduce(a, a, a, 16, RINGLET_FLOAT32, RINGLET_SUM, s));
    release(flag, 1);
    RT_OK(R->stream_synchronize(s));
    CHECK(event_done(e), "the event is not done after the sync");
    RT_OK(R->free(a));
    RT_OK(R->event_destroy(e));
    RT_OK(R->stream_destroy(s));
    RT_OK(R->free_host((void *)flag));
}

/* ---- kernel loading (children: the loaded set is the process's) ---- */

/* A held stream, then another kernel's first launch: 0 if it failed as a deadlock. */
static int first_launch_behind_hold(int load_first) {
    if (load_first) RT_OK(R->load_kernels());
    rl_dev_stream_t a, b;
    RT_OK(R->stream_create(&a, 0));
    RT_OK(R->stream_create(&b, 0));
    volatile uint64_t *flag = new_flag();
    void *x = NULL;
    RT_OK(R->malloc(&x, 4096));
    RT_OK(R->stream_wait_value64(a, flag, 1)); /* a memory operation: no kernel to load */
    int e = R->launch_reduce(x, x, x, 16, RINGLET_INT32, RINGLET_MAX, b);
    const char *detail = R->error_detail();
    R->get_last_error();
    release(flag, 1);
    RT_OK(R->stream_synchronize(a));
    RT_OK(R->stream_synchronize(b));
    if (!load_first && getenv("CUDA_MODULE_LOADING") == NULL) {
        CHECK(e == RL_RT_ERR_SIM_DEADLOCK && strstr(detail, "first launch"),
              "a kernel's first launch behind a held stream returned %d (%s), not the deadlock", e, detail);
        /* Once the device is idle it loads. */
        CHECK(R->launch_reduce(x, x, x, 16, RINGLET_INT32, RINGLET_MAX, b) == RL_RT_SUCCESS,
              "the first launch on an idle device failed");
    } else {
        CHECK(e == RL_RT_SUCCESS, "a loaded kernel's launch behind a held stream failed: %d (%s)", e, detail);
    }
    RT_OK(R->stream_synchronize(b));
    RT_OK(R->free(x));
    RT_OK(R->free_host((void *)flag));
    RT_OK(R->stream_destroy(a));
    RT_OK(R->stream_destroy(b));
    return 0;
}

static void rule_loading(void) {
    CHECK(run_child("lazy", NULL, NULL) == 0, "lazy loading: the child failed");
    CHECK(run_child("loaded", NULL, NULL) == 0, "load_kernels first: the child failed");
    CHECK(run_child("eager", "CUDA_MODULE_LOADING", "EAGER") == 0, "CUDA_MODULE_LOADING=EAGER: the child failed");
    CHECK(run_child("ready", NULL, NULL) == 0, "device_ready first: the child failed");
}

static int child_ready(void) {
    /* The backend's device_ready loads every kernel: a first launch behind a hold works. */
    DEV_OK(D->device_ready(0));
    rl_dev_stream_t a, b;
    DEV_OK(D->stream_create(&a));
    DEV_OK(D->stream_create(&b));
    volatile uint64_t *flag = new_flag();
    void *x = NULL;
    RT_OK(R->malloc(&x, 4096));
    DEV_OK(D->wait_flag(flag, 1, a));
    DEV_OK(D->convert(x, RINGLET_FLOAT32, x, RINGLET_BFLOAT16, 16, 0.5, b));
    DEV_OK(D->divide(x, 16, RINGLET_INT8, 3, b));
    release(flag, 1);
    DEV_OK(D->stream_sync(a));
    DEV_OK(D->stream_sync(b));
    RT_OK(R->free(x));
    RT_OK(R->free_host((void *)flag));
    DEV_OK(D->stream_destroy(a));
    DEV_OK(D->stream_destroy(b));
    return 0;
}

/* ---- hardware work queues (children: CUDA_DEVICE_MAX_CONNECTIONS is read once) ---- */

static void rule_queues(void) {
    CHECK(run_child("queues", "CUDA_DEVICE_MAX_CONNECTIONS", "1") == 0, "one hardware queue: the child failed");
    CHECK(run_child("queues", "CUDA_DEVICE_MAX_CONNECTIONS", "2") == 0, "two hardware queues: the child failed");
    CHECK(run_child("queues-default", NULL, NULL) == 0, "the default hardware queues: the child failed");
}

/* Whether e completes within seconds. */
static int event_done_within(rl_dev_event_t e, double seconds) {
    for (int i = 0; i < (int)(seconds * 1000); i++) {
        if (event_done(e)) return 1;
        usleep(1000);
    }
    return event_done(e);
}

/* Streams a and b, made in that order: one queue holds both, two queues one each. On b an
 * event queued before a's flag wait runs; one queued after it waits for the flag where the
 * two share a queue, and not where they do not. */
static int child_queues(void) {
    int nq = atoi(getenv("CUDA_DEVICE_MAX_CONNECTIONS"));
    rl_dev_stream_t a, b;
    rl_dev_event_t before, after;
    RT_OK(R->stream_create(&a, 0));
    RT_OK(R->stream_create(&b, 0));
    RT_OK(R->event_create(&before));
    RT_OK(R->event_create(&after));
    volatile uint64_t *flag = new_flag();
    RT_OK(R->event_record(before, b));
    RT_OK(R->stream_wait_value64(a, flag, 1));
    RT_OK(R->event_record(after, b));
    CHECK(event_done_within(before, 10), "work queued before another stream's wait did not run");
    if (nq == 1) /* by construction it cannot run: a's wait is ahead of it on their queue */
        CHECK(!event_done_within(after, 0.2), "work behind another stream's unmet wait on its queue ran");
    else
        CHECK(event_done_within(after, 10), "work on another queue waited for a's wait");
    release(flag, 1);
    RT_OK(R->stream_synchronize(a));
    RT_OK(R->stream_synchronize(b));
    CHECK(event_done(after), "work behind a met wait did not run");
    RT_OK(R->event_destroy(before));
    RT_OK(R->event_destroy(after));
    RT_OK(R->stream_destroy(a));
    RT_OK(R->stream_destroy(b));
    RT_OK(R->free_host((void *)flag));
    return 0;
}

/* CUDA_DEVICE_MAX_CONNECTIONS unset: 8 queues, as CUDA's default. Of 9 streams made in
 * turn, the first and the ninth share one: work on the ninth queued after the first's
 * unmet wait does not run; on the second it does. */
static int child_queues_default(void) {
    unsetenv("CUDA_DEVICE_MAX_CONNECTIONS");
    rl_dev_stream_t s[9];
    rl_dev_event_t on_second, on_ninth;
    for (int i = 0; i < 9; i++) RT_OK(R->stream_create(&s[i], 0));
    RT_OK(R->event_create(&on_second));
    RT_OK(R->event_create(&on_ninth));
    volatile uint64_t *flag = new_flag();
    RT_OK(R->stream_wait_value64(s[0], flag, 1));
    RT_OK(R->event_record(on_second, s[1]));
    RT_OK(R->event_record(on_ninth, s[8]));
    CHECK(event_done_within(on_second, 10), "work on another of the 8 default queues waited for the first's wait");
    /* by construction it cannot run: the first stream's wait is ahead of it on their queue */
    CHECK(!event_done_within(on_ninth, 0.2), "the ninth stream did not share the first one's queue (8 by default)");
    release(flag, 1);
    for (int i = 0; i < 9; i++) RT_OK(R->stream_synchronize(s[i]));
    CHECK(event_done(on_ninth), "work behind a met wait did not run");
    RT_OK(R->event_destroy(on_second));
    RT_OK(R->event_destroy(on_ninth));
    for (int i = 0; i < 9; i++) RT_OK(R->stream_destroy(s[i]));
    RT_OK(R->free_host((void *)flag));
    return 0;
}

/* A driver call (a stream memory operation) that fails leaves the runtime's last error as
 * it was, and the device layer's failure does not clear it: an error of the program's
 * own, not read yet, is still there for it (cudaGetLastError after its launch). */
static void rule_driver_error(void) {
    rl_dev_stream_t s;
    DEV_OK(D->stream_create(&s));
    void *p = NULL;
    int oom = R->malloc(&p, SIZE_MAX); /* the program's own failure, left unread */
    CHECK(oom == RL_RT_ERR_MEMORY_ALLOCATION, "malloc(SIZE_MAX) returned %d", oom);
    CHECK(D->write_flag(NULL, 1, s) == RL_DEV_ERR, "a flag write to NULL did not fail");
    CHECK(strstr(rl_dev_error(), "cuStreamWriteValue64") != NULL, "the flag write was not a memory operation: %s",
          rl_dev_error());
    int e = R->peek_at_last_error();
    CHECK(e == RL_RT_ERR_MEMORY_ALLOCATION, "after the failed driver call the thread's last error is %d (%s), not "
                                            "the program's own out of memory",
          e, R->error_string(e));
    R->get_last_error();
    /* A runtime call's failure is cleared as before. */
    rl_dev_event_t ev;
    DEV_OK(D->event_create(&ev));
    CHECK(D->event_record(ev, (rl_dev_stream_t)(uintptr_t)0xdead0) == RL_DEV_ERR, "an event record on a bad stream");
    CHECK(R->peek_at_last_error() == RL_RT_SUCCESS, "the device layer left its own runtime failure as the last error");
    DEV_OK(D->event_destroy(ev));
    DEV_OK(D->stream_destroy(s));
}

/* The launchers' refusals (kernels/reduce_cuda.cu): an operand not aligned to its element,
 * an unknown type or op (at any n, 0 included), a NULL scaling factor, a misaligned
 * one-source reduce_many. Each returns invalid value at once, queues nothing (no sticky
 * fault: the device goes on), and leaves the thread's last error as it was (no CUDA call
 * failed; failure_recorded says so). Before, a misaligned operand was queued as a fault
 * that made the device unusable, which the GPU's launchers never do. */
static void rule_launcher(void) {
    RT_OK(R->load_kernels());
    rl_dev_stream_t s;
    RT_OK(R->stream_create(&s, 0));
    uint32_t *x = NULL, *h = NULL;
    RT_OK(R->malloc((void **)&x, 4096));
    RT_OK(R->host_alloc((void **)&h, 4096));
    for (int i = 0; i < 64; i++) h[i] = (uint32_t)(i * 7 + 1);
    RT_OK(R->memcpy_async(x, h, 256, s));
    char *c = (char *)x;
    const void *one[1] = {c + 2}, *two[2] = {x, c + 1};
    /* An error of the program's own, unread, before the refusals. */
    CHECK(R->set_device(999) == RL_RT_ERR_INVALID_DEVICE, "set_device(999) did not fail");
    /* One after another (an initializer's calls run in no set order). */
    const char *what[10];
    int rc[10], k = 0;
#define REFUSED(w, call) (what[k] = (w), rc[k++] = (call))
    REFUSED("reduce, dst misaligned", R->launch_reduce(c + 1, x, x, 16, RINGLET_INT32, RINGLET_SUM, s));
    REFUSED("reduce, b misaligned", R->launch_reduce(x, x, c + 2, 16, RINGLET_FLOAT32, RINGLET_SUM, s));
    REFUSED("reduce, unknown dtype at n 0", R->launch_reduce(x, x, x, 0, (ringlet_datatype_t)99, RINGLET_SUM, s));
    REFUSED("reduce_many, a source misaligned", R->launch_reduce_many(x, two, 2, 16, RINGLET_INT32, RINGLET_MAX, s));
    REFUSED("reduce_many, one misaligned source", R->launch_reduce_many(x, one, 1, 16, RINGLET_INT32, RINGLET_SUM, s));
    REFUSED("scale, src misaligned", R->launch_scale(x, c + 4 + 2, 8, RINGLET_FLOAT64, h, s));
    REFUSED("scale, NULL factor", R->launch_scale(x, x, 16, RINGLET_INT32, NULL, s));
    REFUSED("convert, dst misaligned", R->launch_convert(c + 1, RINGLET_FLOAT16, x, RINGLET_FLOAT32, 16, 1.0, s));
    REFUSED("convert, unknown type at n 0", R->launch_convert(x, RINGLET_INT32, x, RINGLET_FLOAT32, 0, 1.0, s));
    REFUSED("divide, buf misaligned", R->launch_divide(c + 3, 16, RINGLET_INT32, 3, s));
#undef REFUSED
    for (int i = 0; i < k; i++)
        CHECK(rc[i] == RL_RT_ERR_INVALID_VALUE, "launcher, %s: returned %d, not invalid value (1)", what[i], rc[i]);
    CHECK(R->failure_recorded(RL_RT_ERR_INVALID_VALUE) == 0, "launcher: a refusal was recorded as the thread's error");
    int e = R->peek_at_last_error();
    CHECK(e == RL_RT_ERR_INVALID_DEVICE, "launcher: the refusals changed the thread's last error to %d", e);
    R->get_last_error();
    /* Nothing was queued and the device goes on: a good reduction runs, its result right. */
    RT_OK(R->launch_reduce(x, x, x, 64, RINGLET_INT32, RINGLET_SUM, s));
    RT_OK(R->memcpy_async(h, x, 256, s));
    RT_OK(R->stream_synchronize(s));
    int right = 1;
    for (int i = 0; i < 64; i++) right &= h[i] == (uint32_t)(2 * (i * 7 + 1));
    CHECK(right, "launcher: the reduction after the refusals gave a wrong result (something refused had run)");
    CHECK(R->get_last_error() == RL_RT_SUCCESS, "launcher: an error after the good reduction");
    /* A one-source reduce_many is a copy (CUDA's launcher copies: no kernel, none loaded). */
    const void *src1[1] = {x};
    RT_OK(R->launch_reduce_many(x + 64, src1, 1, 64, RINGLET_INT32, RINGLET_MIN, s));
    RT_OK(R->memcpy_async(h, x + 64, 256, s));
    RT_OK(R->stream_synchronize(s));
    right = 1;
    for (int i = 0; i < 64; i++) right &= h[i] == (uint32_t)(2 * (i * 7 + 1));
    CHECK(right, "launcher: a one-source reduce_many did not copy its source");
    RT_OK(R->free(x));
    RT_OK(R->free_host(h));
    RT_OK(R->stream_destroy(s));
}

/* A child forked once CUDA is in use cannot use it: each call fails, saying so (the
 * parent's streams are not in the child: they would never run its work). */
static void rule_fork(void) {
    void *x = NULL;
    rl_dev_stream_t t;
    RT_OK(R->malloc(&x, 4096)); /* the context exists */
    RT_OK(R->stream_create(&t, 0));
    /* The device layer's gate: a hold noted (as a held stream's would be), released only
     * in this process. */
    volatile uint64_t *flag = new_flag();
    rl_dev_hold_note(flag, 1, 0);
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        /* The gate refuses at once (else a quiet section would wait for the parent's hold). */
        int q = rl_dev_quiet_begin(5, "a quiet section"), said = strstr(rl_dev_error(), "forked") != NULL;
        int h = rl_dev_hold_begin(5);
        if (q != RL_DEV_ERR || h != RL_DEV_ERR || !said) _exit(2);
        void *p = NULL;
        rl_dev_stream_t s = NULL;
        int active = -1;
        int a = R->malloc(&p, 4096), b = R->stream_create(&s, 0), c = R->set_device(0);
        int d = R->stream_destroy(t), e = R->primary_ctx_active(0, &active); /* the parent's stream thread is not here */
        const char *why = R->error_detail();
        _exit(a == RL_RT_ERR_INITIALIZATION && b == a && c == a && d == a && e == a && p == NULL && strstr(why, "forked")
                  ? 0
                  : 1);
    }
    int st = 0;
    waitpid(pid, &st, 0);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "CUDA calls in a child forked after CUDA was used did not fail "
                                                 "(status 0x%x)", st);
    RT_OK(R->stream_destroy(t)); /* the parent still can */
    RT_OK(R->free(x));
    release(flag, 1);
    CHECK(rl_dev_holds_active() == 0, "the parent's hold is still noted after its release");
    RT_OK(R->free_host((void *)flag));
}

/* cudaMalloc does not clear the memory: what nothing wrote is not zeros. */
static void rule_uncleared(void) {
    void *d = NULL;
    unsigned char host[256];
    memset(host, 0, sizeof host);
    RT_OK(R->malloc(&d, sizeof host));
    RT_OK(R->memcpy_async(host, d, sizeof host, NULL));
    int zeros = 0;
    for (size_t i = 0; i < sizeof host; i++) zeros += host[i] == 0;
    CHECK(zeros == 0, "a new allocation read as %d zero bytes of %zu (cudaMalloc does not clear it)", zeros, sizeof host);
    RT_OK(R->free(d));
}

/* ---- calls that synchronise the device ---- */

static void rule_sync(void) {
    RT_OK(R->load_kernels());
    rl_dev_stream_t a;
    rl_dev_event_t e;
    RT_OK(R->stream_create(&a, 0));
    RT_OK(R->event_create(&e));
    void *x = NULL, *y = NULL, *p = NULL;
    RT_OK(R->malloc(&x, 1 << 20));
    /* Waits for every stream: queued work is done when the allocation returns. */
    for (int k = 0; k < 100; k++) RT_OK(R->launch_reduce(x, x, x, 1 << 18, RINGLET_INT32, RINGLET_SUM, a));
    RT_OK(R->event_record(e, a));
    RT_OK(R->malloc(&y, 4096));
    CHECK(event_done(e), "cudaMalloc returned before the work queued on another stream was done");
    /* A held stream: each call fails, naming itself, instead of hanging. */
    volatile uint64_t *flag = new_flag();
    void *q = NULL;
    RT_OK(R->host_alloc(&q, 4096)); /* pinned memory no work uses (the flag is: child_free_in_use) */
    RT_OK(R->launch_wait_flag(flag, 1, a));
    struct {
        const char *name;
        int rc;
    } calls[] = {
        {"cudaMalloc", R->malloc(&p, 4096)},
        {"cudaFree", R->free(y)},
        {"cudaHostAlloc", R->host_alloc(&p, 4096)},
        {"cudaFreeHost", R->free_host(q)},
    };
    for (size_t i = 0; i < sizeof calls / sizeof calls[0]; i++) {
        CHECK(calls[i].rc == RL_RT_ERR_SIM_DEADLOCK, "%s behind a held stream returned %d, not the deadlock",
              calls[i].name, calls[i].rc);
        R->get_last_error();
    }
    /* The stream is held, the calls were refused: nothing was freed or allocated. */
    release(flag, 1);
    RT_OK(R->stream_synchronize(a));
    RT_OK(R->free(y));
    RT_OK(R->free(x));
    RT_OK(R->free_host(q));
    RT_OK(R->free_host((void *)flag));
    RT_OK(R->event_destroy(e));
    RT_OK(R->stream_destroy(a));
}

/* ---- a stream's destroy ---- */

typedef struct {
    rl_dev_stream_t s;
    atomic_int done;
} destroy_arg;

static void *destroy_thread(void *arg) {
    destroy_arg *a = arg;
    RT_OK(R->stream_destroy(a->s));
    atomic_store(&a->done, 1);
    return NULL;
}

/* The first byte of device memory x, read through a stream of its own (into pageable
 * memory: no allocation, which would wait for every stream). */
static unsigned char first_byte(const void *x) {
    rl_dev_stream_t b;
    unsigned char v = 0xEE;
    RT_OK(R->stream_create(&b, 0));
    RT_OK(R->memcpy_async(&v, x, 1, b));
    RT_OK(R->stream_synchronize(b));
    RT_OK(R->stream_destroy(b));
    return v;
}

static void rule_destroy(void) {
    RT_OK(R->load_kernels());
    volatile uint64_t *flag = new_flag();
    void *x = NULL;
    RT_OK(R->malloc(&x, 4096));
    rl_dev_stream_t a;
    RT_OK(R->stream_create(&a, 0));
    RT_OK(R->memset_async(x, 0, 4096, a));
    RT_OK(R->stream_synchronize(a));
    RT_OK(R->launch_wait_flag(flag, 1, a));
    RT_OK(R->memset_async(x, 7, 4096, a));
    /* CUDA: the destroy returns at once, with the work still queued. Called on a thread of
     * its own, so that a destroy that waits for the held work is seen (not a hang here). */
    destroy_arg arg = {a, 0};
    pthread_t t;
    pthread_create(&t, NULL, destroy_thread, &arg);
    double until = rl_now() + 30;
    while (!atomic_load(&arg.done) && rl_now() < until) rl_sleep_ms(1);
    CHECK(atomic_load(&arg.done), "stream_destroy of a held stream did not return (in 30 s): it waited for its work");
    CHECK(first_byte(x) == 0, "the held work of a destroyed stream ran before its flag was set");
    /* The handle is gone at the destroy, though its work is not: nothing may name it. */
    rl_dev_event_t e;
    RT_OK(R->event_create(&e));
    int rc1 = R->memset_async(x, 9, 4096, a), rc2 = R->event_record(e, a), rc3 = R->stream_wait_event(a, e);
    CHECK(rc1 == RL_RT_ERR_INVALID_HANDLE && rc2 == rc1 && rc3 == rc1 && strstr(R->error_detail(), "destroyed"),
          "a destroyed stream took work (%d), an event (%d), a wait (%d)", rc1, rc2, rc3);
    R->get_last_error();
    RT_OK(R->event_destroy(e));
    /* Its work is still the device's: a synchronisation (cudaMalloc's) sees the held wait. */
    void *y = NULL;
    CHECK(R->malloc(&y, 64) == RL_RT_ERR_SIM_DEADLOCK, "cudaMalloc did not see the held work of a destroyed stream");
    R->get_last_error();
    release(flag, 1);
    pthread_join(t, NULL);
    /* Its work still runs, and a synchronisation of the device waits for it. */
    RT_OK(R->malloc(&y, 64));
    CHECK(first_byte(x) == 7, "the work queued on a destroyed stream did not run (or the device's "
                               "synchronisation did not wait for it): byte %d", first_byte(x));
    /* Gone now (freed): still refused, and a second destroy too (no stream was made since
     * but first_byte's, destroyed again). */
    rc1 = R->memset_async(x, 9, 4096, a), rc2 = R->stream_destroy(a);
    CHECK(rc1 == RL_RT_ERR_INVALID_HANDLE && rc2 == rc1, "a stream destroyed and gone took work (%d), a second "
                                                         "destroy (%d)", rc1, rc2);
    R->get_last_error();
    RT_OK(R->free(y));
    RT_OK(R->free(x));
    RT_OK(R->free_host((void *)flag));
}

/* ---- current device per thread (child: two devices) ---- */

static void *other_thread(void *arg) {
    int *dev = arg;
    R->get_device(dev); /* a new thread starts on device 0 */
    return NULL;
}

static int context(int dev) {
    int active = -1;
    RT_OK(R->primary_ctx_active(dev, &active));
    return active;
}

/* A thread that never chose a device passes through device 1 (the backend's enter and
 * leave) and allocates there; *arg in: whether device 0 has a context (then the thread
 * goes back to it), out: 0 if all went as it should. */
static void *pass_through(void *arg) {
    int *io = arg, back = *io, saved = -2, cur = -1;
    void *p = NULL;
    *io = 1;
    if (D->device_enter(1, &saved) != RL_DEV_OK || saved != 0) return NULL;
    if (D->mem_alloc(&p, 64) != RL_DEV_OK || D->ptr_device(p) != 1) return NULL;
    D->device_leave(saved);
    if (D->get_device(&cur) != RL_DEV_OK || cur != (back ? 0 : 1)) return NULL;
    if (D->mem_free(p) != RL_DEV_OK) return NULL; /* on device 1 (stays) or 0: either frees */
    *io = 0;
    return NULL;
}

static int child_devices(void) {
    int d0 = -1;
    RT_OK(R->get_device(&d0));
    CHECK(d0 == 0 && !context(0) && !context(1), "a fresh process: device %d, contexts %d %d (want 0, none)", d0,
          context(0), context(1));
    RT_OK(R->set_device(1));
    CHECK(context(1) && !context(0), "set_device(1): contexts on 0 and 1: %d %d, want 0 1", context(0), context(1));
    pthread_t t;
    int io = 0;
    pthread_create(&t, NULL, pass_through, &io);
    pthread_join(t, NULL);
    CHECK(io == 0, "a thread passing through device 1 (device 0 without a context) did not stay there");
    CHECK(!context(0), "a thread that passed through device 1 made a context on device 0");
    RT_OK(R->load_kernels());
    rl_dev_stream_t s1;
    RT_OK(R->stream_create(&s1, 0));
    void *x1 = NULL;
    RT_OK(R->malloc(&x1, 4096));
    CHECK(R->pointer_device(x1) == 1, "memory allocated on device 1 is on device %d", R->pointer_device(x1));
    int seen = -1;
    pthread_create(&t, NULL, other_thread, &seen);
    pthread_join(t, NULL);
    CHECK(seen == 0, "another thread's current device is %d, not 0 (the current device is per thread)", seen);
    CHECK(!context(0), "get_device on a new thread made a context on device 0");
    RT_OK(R->set_device(0));
    io = 1;
    pthread_create(&t, NULL, pass_through, &io);
    pthread_join(t, NULL);
    CHECK(io == 0, "a thread passing through device 1 did not go back to device 0 (which has a context)");
    RT_OK(R->load_kernels());
    rl_dev_event_t e0;
    RT_OK(R->event_create(&e0));
    CHECK(R->event_record(e0, s1) == RL_RT_ERR_INVALID_HANDLE, "an event of device 0 was recorded on a stream of device 1");
    R->get_last_error();
    CHECK(R->launch_reduce(x1, x1, x1, 16, RINGLET_INT32, RINGLET_SUM, s1) == RL_RT_ERR_INVALID_HANDLE,
          "a kernel launched on device 1's stream with device 0 current");
    R->get_last_error();
    RT_OK(R->memset_async(x1, 1, 4096, s1)); /* copies may go to another device's stream */
    rl_dev_stream_t s0;
    RT_OK(R->stream_create(&s0, 0));
    RT_OK(R->event_record(e0, s0));
    RT_OK(R->stream_wait_event(s1, e0)); /* so may waits */
    RT_OK(R->stream_synchronize(s1));
    /* The backend: the device of a stream */
    int dev = -1;
    DEV_OK(D->stream_device(s1, &dev));
    CHECK(dev == 1, "stream_device says %d for a stream of device 1", dev);
    RT_OK(R->event_destroy(e0));
    RT_OK(R->stream_destroy(s0));
    RT_OK(R->set_device(1));
    RT_OK(R->stream_destroy(s1));
    RT_OK(R->free(x1));
    return 0;
}

/* ---- pageable copies and the legacy default stream ---- */

static void rule_pageable(void) {
    rl_dev_stream_t s;
    RT_OK(R->stream_create(&s, 0));
    RT_OK(R->load_kernels());
    const size_t n = 1 << 16;
    int32_t *h = malloc(n * 4), *one = NULL;
    void *x = NULL;
    RT_OK(R->malloc(&x, n * 4));
    RT_OK(R->host_alloc((void **)&one, n * 4));
    for (size_t i = 0; i < n; i++) h[i] = (int32_t)i, one[i] = 1;
    RT_OK(R->memcpy_async(x, h, n * 4, s));
    memset(h, 0, n * 4); /* taken by then */
    for (int k = 0; k < 40; k++) RT_OK(R->launch_reduce(x, x, one, n, RINGLET_INT32, RINGLET_SUM, s));
    RT_OK(R->memcpy_async(h, x, n * 4, s)); /* returns once done: no sync */
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) bad += h[i] != (int32_t)i + 40;
    CHECK(bad == 0, "copies with pageable memory: %zu elements wrong without a sync", bad);
    /* Pageable memory behind a held stream, either way: CUDA "may synchronize with the
     * stream" to stage the copy (to the device), or returns once it is done (to the host),
     * so either may hang there: refused as the deadlock, queueing nothing. */
    volatile uint64_t *flag = new_flag();
    RT_OK(R->stream_wait_value64(s, flag, 1));
    for (size_t i = 0; i < n; i++) h[i] = (int32_t)(7 * i + 3);
    int rc = R->memcpy_async(x, h, n * 4, s);
    CHECK(rc == RL_RT_ERR_SIM_DEADLOCK && strstr(R->error_detail(), "pageable host memory may wait for its stream"),
          "a copy from pageable memory to the device behind a held stream returned %d (%s), not the deadlock", rc,
          R->error_detail());
    R->get_last_error();
    rc = R->memcpy_async(h, x, n * 4, s);
    CHECK(rc == RL_RT_ERR_SIM_DEADLOCK, "a copy to pageable memory behind a held stream returned %d, not the deadlock",
          rc);
    R->get_last_error();
    release(flag, 1);
    RT_OK(R->memcpy_async(x, h, n * 4, s)); /* staged at the call */
    memset(h, 0, n * 4);
    RT_OK(R->stream_synchronize(s));
    RT_OK(R->memcpy_async(h, x, n * 4, s));
    bad = 0;
    for (size_t i = 0; i < n; i++) bad += h[i] != (int32_t)(7 * i + 3);
    CHECK(bad == 0, "a staged copy from pageable memory: %zu elements wrong", bad);
    /* Between pinned host buffers: "fully synchronous with respect to the host", so done
     * at the return (after the stream's earlier work), and the deadlock behind a held
     * stream. */
    int32_t *p2 = NULL;
    RT_OK(R->host_alloc((void **)&p2, n * 4));
    for (size_t i = 0; i < n; i++) p2[i] = -1;
    for (int k = 0; k < 40; k++) RT_OK(R->launch_reduce(x, x, one, n, RINGLET_INT32, RINGLET_SUM, s));
    RT_OK(R->memcpy_async(one, x, n * 4, s)); /* device to pinned: asynchronous */
    RT_OK(R->memcpy_async(p2, one, n * 4, s));
    bad = 0;
    for (size_t i = 0; i < n; i++) bad += p2[i] != (int32_t)(7 * i + 3) + 40;
    CHECK(bad == 0, "a copy between pinned buffers: %zu elements wrong at its return, without a sync", bad);
    RT_OK(R->stream_wait_value64(s, flag, 2));
    rc = R->memcpy_async(p2, one, n * 4, s);
    CHECK(rc == RL_RT_ERR_SIM_DEADLOCK && strstr(R->error_detail(), "between pinned host buffers may wait"),
          "a copy between pinned buffers behind a held stream returned %d (%s), not the deadlock", rc,
          R->error_detail());
    R->get_last_error();
    release(flag, 2);
    RT_OK(R->stream_synchronize(s));
    RT_OK(R->free_host(p2));
    RT_OK(R->free_host((void *)flag));
    RT_OK(R->free(x));
    RT_OK(R->free_host(one));
    RT_OK(R->stream_destroy(s));
    free(h);
}

static void rule_legacy(void) {
    RT_OK(R->load_kernels());
    rl_dev_stream_t blocking, nonblocking;
    RT_OK(R->stream_create(&blocking, 1));
    RT_OK(R->stream_create(&nonblocking, 0));
    rl_dev_event_t e_legacy, e_non, e_blk;
    RT_OK(R->event_create(&e_legacy));
    RT_OK(R->event_create(&e_non));
    RT_OK(R->event_create(&e_blk));
    volatile uint64_t *flag = new_flag();
    /* A blocking stream held: the legacy stream's later work waits, a non-blocking's not. */
    RT_OK(R->stream_wait_value64(blocking, flag, 1));
    RT_OK(R->event_record(e_legacy, RL_RT_STREAM_LEGACY));
    RT_OK(R->event_record(e_non, nonblocking));
    RT_OK(R->stream_synchronize(nonblocking));
    CHECK(event_done(e_non), "a non-blocking stream's event is not done");
    CHECK(!event_done(e_legacy), "the legacy stream ran past a held blocking stream");
    release(flag, 1);
    RT_OK(R->stream_synchronize(RL_RT_STREAM_LEGACY));
    CHECK(event_done(e_legacy), "the legacy stream's event is not done after its sync");
    /* The legacy stream held: a blocking stream's later work waits, a non-blocking's not. */
    RT_OK(R->stream_wait_value64(RL_RT_STREAM_LEGACY, flag, 2));
    RT_OK(R->event_record(e_blk, blocking));
    RT_OK(R->event_record(e_non, nonblocking));
    RT_OK(R->stream_synchronize(nonblocking));
    CHECK(event_done(e_non), "a non-blocking stream's event is not done (it waited for the legacy stream)");
    CHECK(!event_done(e_blk), "a blocking stream ran past the held legacy stream");
    release(flag, 2);
    RT_OK(R->stream_synchronize(blocking));
    CHECK(event_done(e_blk), "the blocking stream's event is not done after its sync");
    RT_OK(R->free_host((void *)flag));
    RT_OK(R->event_destroy(e_legacy));
    RT_OK(R->event_destroy(e_non));
    RT_OK(R->event_destroy(e_blk));
    RT_OK(R->stream_destroy(blocking));
    RT_OK(R->stream_destroy(nonblocking));
}

/* ---- stream capture ---- */

#define RT_IS(call, code)                                                                                              \
    do {                                                                                                               \
        int e_ = (call);                                                                                               \
        CHECK(e_ == (code), "%s: %d (%s), want %d", #call, e_, R->error_detail(), (int)(code));                        \
        R->get_last_error();                                                                                           \
    } while (0)

/* A capture ended by a thread other than the one that began it (CUDA: 908,
 * cudaErrorStreamCaptureWrongThread, unless begun in relaxed mode). */
static void *end_capture_elsewhere(void *s) { return (void *)(intptr_t)R->stream_end_capture(s); }

static void rule_capture(void) {
    RT_OK(R->load_kernels());
    rl_dev_stream_t a, b, blk;
    RT_OK(R->stream_create(&a, 0));
    RT_OK(R->stream_create(&b, 0));
    RT_OK(R->stream_create(&blk, 1));
    rl_dev_event_t e;
    RT_OK(R->event_create(&e));
    const size_t n = 4096;
    void *x = NULL, *p = NULL;
    int32_t *h = NULL;
    RT_OK(R->malloc(&x, n * 4));
    RT_OK(R->host_alloc((void **)&h, n * 4));
    RT_OK(R->memset_async(x, 0x11, n * 4, a));
    RT_OK(R->stream_synchronize(a));
    int yes = -1;

    /* A clean capture: nothing it holds runs, and it ends without error. */
    RT_OK(R->stream_begin_capture(a));
    RT_OK(R->stream_is_capturing(a, &yes));
    CHECK(yes == 1, "a capturing stream says %d", yes);
    RT_OK(R->stream_is_capturing(b, &yes));
    CHECK(yes == 0, "a stream that does not capture says %d", yes);
    DEV_OK(D->stream_capturing(a, &yes));
    CHECK(yes == 1, "the device layer says %d for a capturing stream", yes);
    RT_OK(R->memset_async(x, 0x5a, n * 4, a));
    RT_OK(R->launch_reduce(x, x, x, n, RINGLET_INT32, RINGLET_SUM, a));
    RT_IS(R->stream_begin_capture(a), RL_RT_ERR_ILLEGAL_STATE);
    RT_OK(R->stream_end_capture(a));
    RT_OK(R->stream_is_capturing(a, &yes));
    CHECK(yes == 0, "the stream still captures after its end (%d)", yes);
    RT_OK(R->memcpy_async(h, x, n * 4, a));
    RT_OK(R->stream_synchronize(a));
    size_t ran = 0;
    for (size_t i = 0; i < n; i++) ran += h[i] != 0x11111111;
    CHECK(ran == 0, "work enqueued on a capturing stream ran (%zu elements changed)", ran);
    RT_IS(R->stream_end_capture(a), RL_RT_ERR_ILLEGAL_STATE);
    RT_IS(R->stream_begin_capture(RL_RT_STREAM_LEGACY), RL_RT_ERR_CAPTURE_UNSUPPORTED);
    /* Another thread cannot end this thread's capture; it stays active, and this one ends it. */
    RT_OK(R->stream_begin_capture(a));
    pthread_t other;
    void *other_rc = NULL;
    pthread_create(&other, NULL, end_capture_elsewhere, a);
    pthread_join(other, &other_rc);
    CHECK((intptr_t)other_rc == RL_RT_ERR_CAPTURE_WRONG_THREAD,
          "a capture ended by another thread: %d, not %d (cudaErrorStreamCaptureWrongThread)", (int)(intptr_t)other_rc,
          RL_RT_ERR_CAPTURE_WRONG_THREAD);
    RT_OK(R->stream_is_capturing(a, &yes));
    CHECK(yes == 1, "the capture another thread failed to end is no longer active (%d)", yes);
    RT_OK(R->stream_end_capture(a));

    /* What a capture does not allow fails and invalidates it. */
    struct {
        const char *what;
        int step, code;
    } bad[] = {{"stream_synchronize", 0, RL_RT_ERR_CAPTURE_UNSUPPORTED},
               {"event_query", 1, RL_RT_ERR_CAPTURED_EVENT}, /* cudaErrorCapturedEvent, not 900 */
               {"cudaMalloc", 2, RL_RT_ERR_CAPTURE_UNSUPPORTED},
               {"cudaHostAlloc", 3, RL_RT_ERR_CAPTURE_UNSUPPORTED},
               {"a pageable copy in", 4, RL_RT_ERR_CAPTURE_UNSUPPORTED},
               {"a pageable copy out", 5, RL_RT_ERR_CAPTURE_UNSUPPORTED}};
    int32_t *pg = calloc(n, 4);
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        RT_OK(R->stream_begin_capture(a));
        int rc = -1;
        switch (bad[k].step) {
        case 0: rc = R->stream_synchronize(a); break;
        case 1:
            RT_OK(R->event_record(e, a));
            rc = R->event_query(e);
            break;
        case 2: rc = R->malloc(&p, 4096); break;
        case 3: rc = R->host_alloc(&p, 4096); break;
        case 4: rc = R->memcpy_async(x, pg, n * 4, a); break;
        case 5: rc = R->memcpy_async(pg, x, n * 4, a); break;
        }
        CHECK(rc == bad[k].code, "%s during a capture returned %d, not %d", bad[k].what, rc, bad[k].code);
        R->get_last_error();
        RT_IS(R->stream_end_capture(a), RL_RT_ERR_CAPTURE_INVALIDATED);
    }
    free(pg);
    /* An event recorded outside a capture again is an ordinary one. */
    RT_OK(R->event_record(e, a));
    RT_OK(R->stream_synchronize(a));
    CHECK(event_done(e), "an event recorded after the capture is not done");

    /* A stream that waits for an event recorded in a capture joins it. */
    RT_OK(R->stream_begin_capture(a));
    RT_OK(R->event_record(e, a));
    RT_OK(R->stream_wait_event(b, e));
    RT_OK(R->stream_is_capturing(b, &yes));
    CHECK(yes == 1, "a stream that waited for a captured event does not capture (%d)", yes);
    RT_IS(R->stream_end_capture(b), RL_RT_ERR_CAPTURE_UNMATCHED);
    RT_IS(R->stream_end_capture(a), RL_RT_ERR_CAPTURE_UNJOINED);
    RT_OK(R->stream_is_capturing(b, &yes));
    CHECK(yes == 0, "the joined stream still captures after the capture's end (%d)", yes);

    /* The legacy stream, asked while a blocking stream captures. */
    RT_OK(R->stream_begin_capture(blk));
    RT_IS(R->stream_is_capturing(RL_RT_STREAM_LEGACY, &yes), RL_RT_ERR_CAPTURE_IMPLICIT);
    RT_OK(R->stream_end_capture(blk));
    RT_OK(R->stream_is_capturing(RL_RT_STREAM_LEGACY, &yes));
    CHECK(yes == 0, "the legacy stream says it captures (%d)", yes);

    RT_OK(R->event_record(e, a));
    RT_OK(R->stream_synchronize(a));
    RT_OK(R->event_destroy(e));
    RT_OK(R->free(x));
    RT_OK(R->free_host(h));
    RT_OK(R->stream_destroy(a));
    RT_OK(R->stream_destroy(b));
    RT_OK(R->stream_destroy(blk));
}

/* capture-modes: a thread that holds a capture on its stream open until told to end it. */
typedef struct {
    rl_dev_stream_t s;
    int phase, end_rc; /* phase: 1 capturing, 2 told to end */
    pthread_mutex_t mu;
    pthread_cond_t cv;
} capture_thread;

static void ct_set(capture_thread *k, int phase) {
    pthread_mutex_lock(&k->mu);
    k->phase = phase;
    pthread_cond_broadcast(&k->cv);
    pthread_mutex_unlock(&k->mu);
}

static void ct_wait(capture_thread *k, int phase) {
    pthread_mutex_lock(&k->mu);
    while (k->phase != phase) pthread_cond_wait(&k->cv, &k->mu);
    pthread_mutex_unlock(&k->mu);
}

static void *ct_main(void *arg) {
    capture_thread *k = arg;
    k->end_rc = R->stream_begin_capture(k->s);
    ct_set(k, 1);
    ct_wait(k, 2);
    if (k->end_rc == RL_RT_SUCCESS) k->end_rc = R->stream_end_capture(k->s);
    return NULL;
}

/* Begins a capture on s in another thread; ct_end ends it and returns the end's code. */
static void ct_begin(capture_thread *k, rl_dev_stream_t s, pthread_t *th) {
    k->s = s;
    k->phase = 0;
    pthread_mutex_init(&k->mu, NULL);
    pthread_cond_init(&k->cv, NULL);
    if (pthread_create(th, NULL, ct_main, k) != 0) CHECK(0, "cannot start a thread");
    ct_wait(k, 1);
}

static int ct_end(capture_thread *k, pthread_t th) {
    ct_set(k, 2);
    pthread_join(th, NULL);
    pthread_mutex_destroy(&k->mu);
    pthread_cond_destroy(&k->cv);
    return k->end_rc;
}

static void rule_capture_modes(void) {
    rl_dev_stream_t a, b;
    RT_OK(R->stream_create(&a, 0));
    RT_OK(R->stream_create(&b, 0));
    rl_dev_event_t e;
    RT_OK(R->event_create(&e));
    RT_OK(R->event_record(e, b));
    RT_OK(R->stream_synchronize(b));
    void *p = NULL;
    capture_thread k;
    pthread_t th;
    /* Global mode (this thread's default): another thread's capture forbids the calls,
     * and each failure invalidates that capture. */
    for (int step = 0; step < 3; step++) {
        ct_begin(&k, a, &th);
        int rc = step == 0 ? R->event_query(e) : step == 1 ? R->stream_synchronize(b) : R->malloc(&p, 4096);
        CHECK(rc == RL_RT_ERR_CAPTURE_UNSUPPORTED, "global mode, step %d, during another thread's capture: %d", step, rc);
        R->get_last_error();
        rc = ct_end(&k, th);
        CHECK(rc == RL_RT_ERR_CAPTURE_INVALIDATED, "global mode, step %d: the other thread's capture ended with %d", step,
              rc);
    }
    /* Thread-local and relaxed: another thread's capture is not this thread's business. */
    for (int mode = RL_RT_CAPTURE_THREAD_LOCAL; mode <= RL_RT_CAPTURE_RELAXED; mode++) {
        int old = mode;
        RT_OK(R->thread_exchange_capture_mode(&old));
        CHECK(old == RL_RT_CAPTURE_GLOBAL, "the mode before was %d, not global", old);
        ct_begin(&k, a, &th);
        RT_OK(R->event_query(e));
        RT_OK(R->stream_synchronize(b));
        RT_OK(R->malloc(&p, 4096));
        RT_OK(R->free(p));
        CHECK(ct_end(&k, th) == RL_RT_SUCCESS, "mode %d: the other thread's capture was invalidated", mode);
        /* The thread's own capture: forbids them in thread-local mode, not in relaxed. */
        RT_OK(R->stream_begin_capture(a));
        int rc = R->event_query(e);
        R->get_last_error();
        CHECK(rc == (mode == RL_RT_CAPTURE_RELAXED ? RL_RT_SUCCESS : RL_RT_ERR_CAPTURE_UNSUPPORTED),
              "mode %d, during this thread's own capture: a query returned %d", mode, rc);
        rc = R->stream_end_capture(a);
        R->get_last_error();
        CHECK(rc == (mode == RL_RT_CAPTURE_RELAXED ? RL_RT_SUCCESS : RL_RT_ERR_CAPTURE_INVALIDATED),
              "mode %d: this thread's capture ended with %d", mode, rc);
        int back = RL_RT_CAPTURE_GLOBAL;
        RT_OK(R->thread_exchange_capture_mode(&back));
        CHECK(back == mode, "the mode read back %d, set %d", back, mode);
    }
    int bad = 7;
    RT_IS(R->thread_exchange_capture_mode(&bad), RL_RT_ERR_INVALID_VALUE);
    /* The device layer's own calls, from a thread in global mode, keep out of another
     * thread's capture. */
    ct_begin(&k, a, &th);
    DEV_OK(D->event_query(e));
    DEV_OK(D->stream_sync(b));
    DEV_OK(D->mem_alloc(&p, 4096));
    DEV_OK(D->mem_free(p));
    CHECK(ct_end(&k, th) == RL_RT_SUCCESS, "the device layer's calls invalidated another thread's capture");
    int cur = RL_RT_CAPTURE_GLOBAL;
    RT_OK(R->thread_exchange_capture_mode(&cur));
    CHECK(cur == RL_RT_CAPTURE_GLOBAL, "the device layer left this thread in mode %d", cur);
    RT_OK(R->event_destroy(e));
    RT_OK(R->stream_destroy(a));
    RT_OK(R->stream_destroy(b));
}

/* ---- stream memory operations, and the backend's hold kind ---- */

static void rule_memops(void) {
    rl_dev_stream_t s;
    rl_dev_event_t e;
    RT_OK(R->stream_create(&s, 0));
    RT_OK(R->event_create(&e));
    volatile uint64_t *flag = new_flag();
    RT_OK(R->stream_wait_value64(s, flag, 5));
    RT_OK(R->event_record(e, s));
    release(flag, 4);
    CHECK(!event_done(e), "a wait for 5 passed at 4");
    release(flag, 5);
    RT_OK(R->stream_synchronize(s));
    CHECK(event_done(e), "a wait for 5 did not pass at 5");
    /* GEQ compares cyclically: a word 2^63 or more below the value, here 2 (2^63 - 1 below)
     * and 1, reads as below; 0 would read as above (2^63 - 1 past it). */
    release(flag, 2);
    RT_OK(R->stream_wait_value64(s, flag, (1ull << 63) + 1));
    RT_OK(R->event_record(e, s));
    release(flag, 1);
    CHECK(!event_done(e), "(int64_t)(1 - (2^63 + 1)) >= 0 passed");
    release(flag, (1ull << 63) + 7);
    RT_OK(R->stream_synchronize(s));
    CHECK(event_done(e), "a wait passed no word at or above its value");
    RT_OK(R->stream_write_value64(s, flag, 42));
    RT_OK(R->stream_synchronize(s));
    CHECK(*flag == 42, "write_value64 stored %llu", (unsigned long long)*flag);
    RT_OK(R->free_host((void *)flag));
    RT_OK(R->event_destroy(e));
    RT_OK(R->stream_destroy(s));
    CHECK(run_child("hold", NULL, NULL) == 0, "the default hold kind: child failed");
    CHECK(run_child("hold", "RINGLET_STREAM_HOLD", "memop") == 0, "RINGLET_STREAM_HOLD=memop: child failed");
    CHECK(run_child("hold", "RINGLET_STREAM_HOLD", "kernel") == 0, "RINGLET_STREAM_HOLD=kernel: child failed");
    CHECK(run_child("hold-forced", "RINGLET_SIM_MEMOPS", "0") == 0, "memop forced without them: child failed");
}

/* The hold kind device_ready chooses, and a hold of that kind ordering a stream. */
static int child_hold(void) {
    /* By default no stream is held (sync: backend_ops.inc says why); memop and kernel when
     * asked for. */
    const char *want = getenv("RINGLET_STREAM_HOLD"), *expect = want ? want : "sync";
    DEV_OK(D->device_ready(0));
    CHECK(!strcmp(D->hold_kind(0), expect), "hold kind %s, expected %s", D->hold_kind(0), expect);
    rl_dev_stream_t s;
    rl_dev_event_t e;
    DEV_OK(D->stream_create(&s));
    DEV_OK(D->event_create(&e));
    volatile uint64_t *flag = new_flag();
    DEV_OK(D->wait_flag(flag, 3, s));
    DEV_OK(D->event_record(e, s));
    CHECK(rl_dev_holds_active() == 1, "%d holds noted, not 1", rl_dev_holds_active());
    CHECK(D->event_query(e) == RL_DEV_NOT_READY, "work after a %s hold ran", expect);
    release(flag, 3);
    DEV_OK(D->stream_sync(s));
    CHECK(D->event_query(e) == RL_DEV_OK, "work after a released %s hold did not run", expect);
    CHECK(rl_dev_holds_active() == 0, "a released hold still counts");
    DEV_OK(D->event_destroy(e));
    DEV_OK(D->stream_destroy(s));
    RT_OK(R->free_host((void *)flag));
    return 0;
}

static int child_hold_forced(void) {
    setenv("RINGLET_STREAM_HOLD", "memop", 1);
    CHECK(D->device_ready(0) == RL_DEV_ERR && strstr(rl_dev_error(), "RINGLET_STREAM_HOLD=memop"),
          "memop holds forced on a device without them: %s", rl_dev_error());
    return 0;
}

/* ---- ipc-free ---- */

static void handle_hex(const rl_dev_handle *h, char *out) {
    for (int i = 0; i < RL_DEV_HANDLE_BYTES; i++) sprintf(out + 2 * i, "%02x", h->bytes[i]);
}

static void hex_handle(const char *s, rl_dev_handle *h) {
    memset(h, 0, sizeof *h);
    for (int i = 0; i < RL_DEV_HANDLE_BYTES && s[2 * i] && s[2 * i + 1]; i++) {
        unsigned v = 0;
        sscanf(s + 2 * i, "%2x", &v);
        h->bytes[i] = (unsigned char)v;
    }
}

/* The exporter: allocates, prints its handle, frees when told ('f' on stdin). */
static int child_ipc_export(void) {
    void *d = NULL;
    rl_dev_handle h;
    char hex[2 * RL_DEV_HANDLE_BYTES + 1];
    if (D->mem_alloc(&d, 8192) != RL_DEV_OK || D->mem_export(d, &h) != RL_DEV_OK) return 2;
    handle_hex(&h, hex);
    printf("%s\n", hex);
    fflush(stdout);
    char c = 0;
    if (read(0, &c, 1) != 1 || c != 'f') return 3;
    if (D->mem_free(d) != RL_DEV_OK) return 4;
    printf("freed\n");
    return 0;
}

/* An importer that exits with the memory open. */
static int child_ipc_import_exit(void) {
    rl_dev_handle h;
    void *p = NULL;
    const char *hex = getenv("SIMRULES_HANDLE");
    if (!hex) return 2;
    hex_handle(hex, &h);
    if (D->mem_import(&h, &p) != RL_DEV_OK) return 3;
    _exit(0);
}

/* An importer that closes the memory with a copy from it queued behind a held stream
 * (SIMRULES_CLOSE=held: the close must stop this process), or after the copy ran (=done:
 * the close fails while another stream is held, as a synchronisation would hang, then goes). */
static int child_ipc_close(void) {
    rl_dev_handle h;
    void *p = NULL, *local = NULL;
    const char *hex = getenv("SIMRULES_HANDLE"), *how = getenv("SIMRULES_CLOSE");
    if (!hex || !how) return 2;
    hex_handle(hex, &h);
    if (D->mem_import(&h, &p) != RL_DEV_OK || R->malloc(&local, 4096) != RL_RT_SUCCESS) return 3;
    rl_dev_stream_t a, b;
    volatile uint64_t *flag = new_flag();
    if (R->stream_create(&a, 0) != RL_RT_SUCCESS || R->stream_create(&b, 0) != RL_RT_SUCCESS ||
        R->launch_wait_flag(flag, 1, a) != RL_RT_SUCCESS || R->memcpy_async(local, p, 4096, a) != RL_RT_SUCCESS)
        return 4;
    if (!strcmp(how, "held")) {
        D->mem_unimport(p); /* stops this process */
        return 5;
    }
    release(flag, 1);
    if (R->stream_synchronize(a) != RL_RT_SUCCESS) return 6;
    if (R->launch_wait_flag(flag, 2, b) != RL_RT_SUCCESS) return 7;
    if (R->ipc_close(p) != RL_RT_ERR_SIM_DEADLOCK) return 8;
    R->get_last_error();
    release(flag, 2);
    if (R->stream_synchronize(b) != RL_RT_SUCCESS) return 9;
    if (D->mem_unimport(p) != RL_DEV_OK) return 10;
    printf("closed\n");
    return 0;
}

/* Two devices (RINGLET_SIM_DEVICES=2), the memory of handle SIMRULES_HANDLE on device 0 of
 * another process: CUDA maps it into the context of the device current at the open, and
 * only kernels on that device may touch it; each context counts its own opens; with
 * RINGLET_SIM_PEER=0 (devices without peer access) device 1 cannot open it. Ends with a
 * kernel's fault (sticky), so in a child of its own. */
static void child_ipc_devices(void) {
    rl_dev_handle h;
    const char *hex = getenv("SIMRULES_HANDLE");
    CHECK(hex != NULL, "no SIMRULES_HANDLE");
    if (!hex) return;
    hex_handle(hex, &h);
    void *p1 = NULL, *p1b = NULL, *p0 = NULL, *x1 = NULL, *x0 = NULL;
    rl_dev_stream_t s1, s0;
    RT_OK(R->set_device(1));
    RT_OK(R->load_kernels());
    RT_OK(R->malloc(&x1, 4096));
    RT_OK(R->stream_create(&s1, 0));
    RT_OK(R->ipc_open(&p1, &h));
    RT_OK(R->ipc_open(&p1b, &h));
    CHECK(p1 == p1b, "a second open in device 1's context mapped it again (%p, %p)", p1, p1b);
    RT_OK(R->launch_reduce(x1, p1, p1, 1024, RINGLET_INT32, RINGLET_SUM, s1));
    RT_OK(R->stream_synchronize(s1)); /* the importing device's kernel may touch it */
    RT_OK(R->set_device(0));
    RT_OK(R->load_kernels());
    RT_OK(R->ipc_open(&p0, &h));
    CHECK(p0 != NULL && p0 != p1, "device 0's context got device 1's mapping (%p, %p): CUDA maps per context", p0, p1);
    RT_OK(R->malloc(&x0, 4096));
    RT_OK(R->stream_create(&s0, 0));
    RT_OK(R->launch_reduce(x0, p0, p0, 1024, RINGLET_INT32, RINGLET_SUM, s0));
    RT_OK(R->stream_synchronize(s0));
    RT_OK(R->ipc_close(p0));
    /* Without peer access the memory's device alone can open it. */
    setenv("RINGLET_SIM_PEER", "0", 1);
    RT_OK(R->set_device(1));
    void *q = NULL;
    int rc = R->ipc_open(&q, &h);
    CHECK(rc == RL_RT_ERR_PEER_UNSUPPORTED && q == NULL,
          "RINGLET_SIM_PEER=0: device 1 opened device 0's memory (%d, %p)", rc, q);
    R->get_last_error();
    RT_OK(R->set_device(0));
    RT_OK(R->ipc_open(&q, &h));
    RT_OK(R->ipc_close(q));
    unsetenv("RINGLET_SIM_PEER");
    /* A mapping is closed in the context that opened it: device 1's, not the memory's
     * device 0 (its pointer attributes) nor whatever is current. */
    rc = R->ipc_close(p1b);
    CHECK(rc == RL_RT_ERR_INVALID_CONTEXT, "device 0 closed a mapping device 1's context opened: %d", rc);
    R->get_last_error();
    CHECK(D->ptr_device(p1) == 0, "the mapping's memory is on device 0, not %d", D->ptr_device(p1));
    RT_OK(R->set_device(1));
    void *p1c = NULL;
    DEV_OK(D->mem_import(&h, &p1c));
    CHECK(p1c == p1, "a third open in device 1's context mapped it again (%p, %p)", p1c, p1);
    RT_OK(R->set_device(0));
    CHECK(rl_dev_free_later(p1c, RL_DEV_MEM_IMPORTED) == 1, "the device layer did not close device 1's mapping from "
                                                            "device 0: %s", rl_dev_error());
    int cur = -1;
    RT_OK(R->get_device(&cur));
    CHECK(cur == 0, "closing device 1's mapping left device %d current, not 0", cur);
    /* Device 1's mapping in a kernel of device 0: an illegal address (the last check). */
    RT_OK(R->launch_reduce(x0, p1, p1, 1024, RINGLET_INT32, RINGLET_SUM, s0));
    rc = R->stream_synchronize(s0);
    CHECK(rc == RL_RT_ERR_ILLEGAL_ADDRESS && strstr(R->error_detail(), "mapped in its context"),
          "a kernel on device 0 touched memory mapped in device 1's context: %d (%s)", rc, R->error_detail());
}

/* A child's output (everything it writes to fd until it closes it) into said, then its
 * exit status (-SIGNAL if killed). */
static int child_output(pid_t pid, int fd, char *said, size_t len) {
    size_t n = 0;
    ssize_t r;
    while (n < len - 1 && (r = read(fd, said + n, len - 1 - n)) > 0) n += (size_t)r;
    said[n] = 0;
    int st = 0;
    waitpid(pid, &st, 0);
    return WIFEXITED(st) ? WEXITSTATUS(st) : WIFSIGNALED(st) ? -WTERMSIG(st) : -1000;
}

/* Runs the importer of child_ipc_close on handle h; its status (-SIGNAL if killed), what it said. */
static int run_closer(const rl_dev_handle *h, const char *how, char *said, size_t len) {
    char hex[2 * RL_DEV_HANDLE_BYTES + 1];
    handle_hex(h, hex);
    int out[2];
    if (pipe(out) != 0) return -1000;
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        dup2(out[1], 1), dup2(out[1], 2);
        close(out[0]);
        setenv("SIMRULES_HANDLE", hex, 1);
        setenv("SIMRULES_CLOSE", how, 1);
        execl("/proc/self/exe", "test_simrules", "--child", "ipc-close", (char *)NULL);
        _exit(99);
    }
    close(out[1]);
    int st = child_output(pid, out[0], said, len);
    close(out[0]);
    return st;
}

typedef struct {
    pid_t pid;
    int to, from; /* its stdin, its stdout and stderr */
} exporter_t;

static int exporter_start(exporter_t *x, rl_dev_handle *h) {
    int in[2], out[2];
    if (pipe(in) != 0 || pipe(out) != 0) return -1;
    fflush(stdout);
    x->pid = fork();
    if (x->pid == 0) {
        dup2(in[0], 0), dup2(out[1], 1), dup2(out[1], 2);
        close(in[1]), close(out[0]);
        execl("/proc/self/exe", "test_simrules", "--child", "ipc-export", (char *)NULL);
        _exit(99);
    }
    close(in[0]), close(out[1]);
    x->to = in[1], x->from = out[0];
    char line[2 * RL_DEV_HANDLE_BYTES + 2] = "";
    size_t n = 0;
    while (n < sizeof line - 1 && read(x->from, line + n, 1) == 1 && line[n] != '\n') n++;
    line[n] = 0;
    if (n != 2 * RL_DEV_HANDLE_BYTES) return -1;
    hex_handle(line, h);
    return 0;
}

/* Tells the exporter to free; its exit status (-SIGNAL if killed) and what it printed. */
static int exporter_free(exporter_t *x, char *said, size_t len) {
    char c = 'f';
    ssize_t w = write(x->to, &c, 1);
    (void)w;
    int st = child_output(x->pid, x->from, said, len);
    close(x->to), close(x->from);
    return st;
}

static void rule_ipc_free(void) {
    exporter_t x;
    rl_dev_handle h;
    void *p = NULL, *q = NULL;
    char said[1024];
    /* Opened twice, closed once: still open here; the exporter's free stops it. */
    CHECK(exporter_start(&x, &h) == 0, "the exporter did not start");
    DEV_OK(D->mem_import(&h, &p));
    DEV_OK(D->mem_import(&h, &q));
    CHECK(p == q, "a second open of a handle mapped it again (%p, %p)", p, q);
    DEV_OK(D->mem_unimport(q));
    int st = exporter_free(&x, said, sizeof said);
    CHECK(st == -SIGABRT && strstr(said, "still has the memory open through IPC"),
          "a free while this process has the memory open: exporter status %d, said: %s", st, said);
    DEV_OK(D->mem_unimport(p));
    /* Closed: the free goes. */
    CHECK(exporter_start(&x, &h) == 0, "the exporter did not start");
    DEV_OK(D->mem_import(&h, &p));
    DEV_OK(D->mem_unimport(p));
    st = exporter_free(&x, said, sizeof said);
    CHECK(st == 0 && strstr(said, "freed"), "a free after the importer closed: exporter status %d, said: %s", st, said);
    /* An importer that exited without closing: the free goes (this process survives it). */
    void *d = NULL;
    DEV_OK(D->mem_alloc(&d, 4096));
    DEV_OK(D->mem_export(d, &h));
    /* A handle of this process's own memory does not open here (CUDA: "invalid device
     * context", 201). */
    void *own = NULL;
    int rc = R->ipc_open(&own, &h);
    CHECK(rc == RL_RT_ERR_INVALID_CONTEXT, "opening this process's own handle returned %d, not 201", rc);
    R->get_last_error();
    char hex[2 * RL_DEV_HANDLE_BYTES + 1];
    handle_hex(&h, hex);
    CHECK(run_child("ipc-import-exit", "SIMRULES_HANDLE", hex) == 0, "the importer that exits failed");
    DEV_OK(D->mem_free(d));
}

/* Imported memory on two devices (child_ipc_devices). */
static void rule_ipc_devices(void) {
    exporter_t x;
    rl_dev_handle h;
    char hex[2 * RL_DEV_HANDLE_BYTES + 1], said[1024];
    CHECK(exporter_start(&x, &h) == 0, "the exporter did not start");
    handle_hex(&h, hex);
    setenv("SIMRULES_HANDLE", hex, 1);
    setenv("RINGLET_DEVICE", "sim", 1); /* rl_dev_free_later's device layer */
    CHECK(run_child("ipc-devices", "RINGLET_SIM_DEVICES", "2") == 0, "imported memory on two devices: the child failed");
    unsetenv("RINGLET_DEVICE");
    unsetenv("SIMRULES_HANDLE");
    int st = exporter_free(&x, said, sizeof said);
    CHECK(st == 0, "the exporter's free after its importer exited: status %d, said: %s", st, said);
}

/* A free while work queued behind a held stream still uses the memory. cudaFree waits for
 * every stream (the Programming Guide says so), so behind a held stream it is the deadlock;
 * cudaFreeHost is not said to wait, so a free of the hold's own pinned flag, which the
 * queued wait reads, stops the process. Run as a child; prints "freed: <rc>". */
static int child_free_in_use(int pinned) {
    RT_OK(R->load_kernels());
    rl_dev_stream_t s;
    RT_OK(R->stream_create(&s, 0));
    volatile uint64_t *flag = new_flag();
    void *d = NULL;
    RT_OK(R->malloc(&d, 4096));
    RT_OK(R->launch_wait_flag(flag, 1, s));
    RT_OK(R->launch_reduce(d, d, d, 1024, RINGLET_INT32, RINGLET_SUM, s));
    int rc = pinned ? R->free_host((void *)flag) : R->free(d);
    printf("freed: %d\n", rc);
    return 0;
}

/* Runs child mode name, its output (stdout and stderr) into said; its status (-SIGNAL if killed). */
static int run_child_said(const char *name, char *said, size_t len) {
    int fd[2];
    if (pipe(fd) != 0) return -1000;
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        close(fd[0]);
        dup2(fd[1], 1);
        dup2(fd[1], 2);
        close(fd[1]);
        execl("/proc/self/exe", "test_simrules", "--child", name, (char *)NULL);
        _exit(99);
    }
    close(fd[1]);
    int st = child_output(pid, fd[0], said, len);
    close(fd[0]);
    return st;
}

/* cudaMemcpyAsync: "the memory areas may not overlap" (undefined on a GPU): the simulator
 * stops the process (it moved them as memmove does: right, where a GPU is not). */
static int child_copy_overlap(void) {
    rl_dev_stream_t s;
    RT_OK(R->stream_create(&s, 0));
    void *x = NULL;
    RT_OK(R->malloc(&x, 4096));
    int rc = R->memcpy_async((char *)x + 16, x, 64, s);
    printf("copied: %d\n", rc);
    return 0;
}

/* cudaMemsetAsync takes memory the device reaches: pageable host memory is refused
 * (cudaErrorInvalidValue; it was set, from the stream's thread); pinned memory is not. */
static void rule_memset(void) {
    rl_dev_stream_t s;
    RT_OK(R->stream_create(&s, 0));
    char *h = malloc(256), *p = NULL;
    memset(h, 1, 256);
    int rc = R->memset_async(h, 0, 256, s);
    CHECK(rc == RL_RT_ERR_INVALID_VALUE && h[0] == 1 && strstr(R->error_detail(), "pageable"),
          "memset_async of pageable host memory returned %d (%s), byte 0 now %d", rc, R->error_detail(), h[0]);
    R->get_last_error();
    RT_OK(R->host_alloc((void **)&p, 256));
    RT_OK(R->memset_async(p, 7, 256, s));
    RT_OK(R->stream_synchronize(s));
    CHECK(p[0] == 7 && p[255] == 7, "memset_async of pinned memory: %d %d", p[0], p[255]);
    char said[1024];
    int st = run_child_said("copy-overlap", said, sizeof said);
    CHECK(st == -SIGABRT && strstr(said, "overlap"), "memcpy_async between overlapping ranges: status %d (want SIGABRT), "
          "said: %s", st, said);
    RT_OK(R->free_host(p));
    RT_OK(R->stream_destroy(s));
    free(h);
}

static void rule_free_in_use(void) {
    char said[1024];
    int st = run_child_said("free-in-use-pinned", said, sizeof said);
    CHECK(st == -SIGABRT && strstr(said, "cudaFreeHost") && strstr(said, "still uses that memory"),
          "cudaFreeHost with a queued wait reading the memory: status %d (want SIGABRT), said: %s", st, said);
    st = run_child_said("free-in-use-device", said, sizeof said);
    char want[32];
    snprintf(want, sizeof want, "freed: %d", (int)RL_RT_ERR_SIM_DEADLOCK);
    CHECK(st == 0 && strstr(said, want),
          "cudaFree with queued work behind a held stream: status %d (want the deadlock, 10001), said: %s", st, said);
}

static void rule_ipc_close(void) {
    exporter_t x;
    rl_dev_handle h;
    char said[1024], freed[256];
    CHECK(exporter_start(&x, &h) == 0, "the exporter did not start");
    int st = run_closer(&h, "held", said, sizeof said);
    CHECK(st == -SIGABRT && strstr(said, "still uses that memory"),
          "a close with a copy from the mapping still queued: importer status %d (want SIGABRT), said: %s", st, said);
    st = run_closer(&h, "done", said, sizeof said);
    CHECK(st == 0 && strstr(said, "closed"), "a close after the copy ran: importer status %d, said: %s", st, said);
    st = exporter_free(&x, freed, sizeof freed);
    CHECK(st == 0, "the exporter's free after its importers went: status %d, said: %s", st, freed);
}

/* ---- stuck (the device layer) ---- */

/* In a child whose device layer is the simulator's (RINGLET_DEVICE=sim: rl_device() is
 * what rl_dev_free_later frees with). */
static void child_stuck(void) {
    rl_dev_stream_t s;
    void *p = NULL, *q = NULL;
    DEV_OK(D->device_ready(0));
    volatile uint64_t *flag = new_flag();
    DEV_OK(D->mem_alloc(&p, 4096));
    DEV_OK(D->mem_alloc(&q, 4096));
    DEV_OK(D->stream_create(&s));
    /* The program's own kernel, waiting: no hold of the device layer's is noted. */
    RT_OK(R->launch_wait_flag(flag, 1, s));
    rl_dev_note_stuck(s);
    CHECK(rl_dev_work_stuck(), "work noted stuck behind a waiting kernel is not pending");
    CHECK(rl_dev_free_later(p, RL_DEV_MEM_DEVICE) == 0, "a free behind work noted stuck said it was made");
    CHECK(D->ptr_device(p) == 0, "memory freed behind work noted stuck");
    DEV_OK(rl_dev_quiet_begin(5, "test_simrules' quiet section"));
    CHECK(rl_dev_free_later(q, RL_DEV_MEM_DEVICE) == 0,
          "a free in a quiet section behind work noted stuck said it was made");
    rl_dev_quiet_end();
    CHECK(D->ptr_device(q) == 0, "memory freed in a quiet section behind work noted stuck");
    release(flag, 1);
    DEV_OK(D->stream_sync(s));
    CHECK(D->ptr_device(p) == 0 && D->ptr_device(q) == 0, "kept frees made before a quiet section");
    DEV_OK(rl_dev_quiet_begin(5, "test_simrules' quiet section"));
    rl_dev_quiet_end();
    /* A free refused behind the kernel (not kept) would leave the memory, too. */
    CHECK(D->ptr_device(p) == -1 && D->ptr_device(q) == -1,
          "the frees kept behind stuck work were not made once it was done (%d, %d)", D->ptr_device(p), D->ptr_device(q));
    CHECK(!rl_dev_work_stuck(), "work noted stuck still pending once done");
    void *r = NULL;
    DEV_OK(D->mem_alloc(&r, 4096));
    CHECK(rl_dev_free_later(r, RL_DEV_MEM_DEVICE) == 1 && D->ptr_device(r) == -1,
          "a free with nothing held nor stuck not made at once");
    DEV_OK(D->stream_destroy(s));
    RT_OK(R->free_host((void *)flag));
}

/* (RINGLET_DEVICE=sim, two devices) A process on device 1 only: a free of pinned memory
 * that the device layer kept (a hold section was open) is made by the next quiet section,
 * here one of a thread that never chose a device (it reads as device 0, with no context).
 * The free runs where the memory was given back, on device 1: on the thread's device 0 the
 * runtime would make a context there (GPU memory on a device the process never used). */
static void *quiet_section_thread(void *arg) {
    int *rc = arg;
    *rc = rl_dev_quiet_begin(5, "test_simrules' quiet section");
    if (*rc == RL_DEV_OK) rl_dev_quiet_end();
    return NULL;
}

static void child_pinned_devices(void) {
    RT_OK(R->set_device(1));
    void *p = NULL;
    DEV_OK(D->host_alloc(&p, 4096));
    DEV_OK(rl_dev_hold_begin(5));
    CHECK(rl_dev_free_later(p, RL_DEV_MEM_PINNED) == 0, "a pinned free inside a hold section said it was made");
    rl_dev_hold_end();
    int rc = RL_DEV_ERR, active = -1;
    pthread_t t;
    CHECK(pthread_create(&t, NULL, quiet_section_thread, &rc) == 0, "no thread");
    pthread_join(t, NULL);
    CHECK(rc == RL_DEV_OK, "the quiet section of a new thread: %s", rl_dev_error());
    RT_OK(R->primary_ctx_active(0, &active));
    CHECK(active == 0, "the kept free of pinned memory given back on device 1, made by a thread on device 0, made a "
                       "context on device 0");
}

/* With RINGLET_SIM_ON_DEADLOCK=exit, a call that would hang ends the process (status 70)
 * rather than fail: returns only if it did not. */
static int child_deadlock_exit(void) {
    RT_OK(R->load_kernels());
    rl_dev_stream_t a;
    RT_OK(R->stream_create(&a, 0));
    volatile uint64_t *flag = new_flag();
    RT_OK(R->launch_wait_flag(flag, 1, a));
    void *p = NULL;
    int rc = R->malloc(&p, 4096);
    printf("child deadlock-exit: cudaMalloc behind a held stream returned %d; the process did not end\n", rc);
    return 1;
}

/* (a fresh process) A child forked before the first CUDA call can use CUDA; one forked
 * after the first, even if that was only the device count (it initialises the driver),
 * cannot: its calls fail with the initialisation error. */
static int forked_status(void) {
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        int n = -1, dev = -1;
        int a = R->get_device_count(&n), b = R->get_device(&dev);
        _exit(a == RL_RT_SUCCESS && b == RL_RT_SUCCESS && n >= 1 ? 0
              : a == RL_RT_ERR_INITIALIZATION && b == a && strstr(R->error_detail(), "forked") ? 3
                                                                                                 : 1);
    }
    int st = 0;
    waitpid(pid, &st, 0);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static int child_fork_count(void) {
    int before = forked_status();
    CHECK(before == 0, "a child forked before any CUDA call could not use CUDA (status %d)", before);
    int n = 0;
    RT_OK(R->get_device_count(&n)); /* the driver is initialised: no context, no memory */
    int after = forked_status();
    CHECK(after == 3, "a child forked after cudaGetDeviceCount did not fail with the initialisation error (status %d)",
          after);
    return g_fail ? 1 : 0;
}

/* (RINGLET_SIM_DEVICES=2) A stream memory operation runs in its stream's context, not the
 * current device's (cuStreamWriteValue64): a flag in device 0's memory written on a stream
 * of device 1, device 0 current, is an illegal address there (no peer access), as it would
 * be for a kernel on that stream. */
static int child_memop_device(void) {
    int yes = 0;
    char why[128];
    RT_OK(R->memops_supported(0, &yes, why, sizeof why));
    CHECK(yes, "the simulated device has no stream memory operations: %s", why);
    RT_OK(R->set_device(0));
    void *flag = NULL;
    RT_OK(R->malloc(&flag, 64));
    RT_OK(R->set_device(1));
    rl_dev_stream_t s;
    RT_OK(R->stream_create(&s, 0));
    RT_OK(R->set_device(0));
    int rc = R->stream_write_value64(s, flag, 1);
    if (rc == RL_RT_SUCCESS) rc = R->stream_synchronize(s);
    CHECK(rc == RL_RT_ERR_ILLEGAL_ADDRESS,
          "a flag of device 0 written by a memory operation on a stream of device 1 returned %d, not %d (an illegal "
          "address: the operation runs on the stream's device)",
          rc, RL_RT_ERR_ILLEGAL_ADDRESS);
    return g_fail ? 1 : 0;
}

static int child(const char *name) {
    if (!strcmp(name, "lazy") || !strcmp(name, "eager")) first_launch_behind_hold(0);
    else if (!strcmp(name, "loaded")) first_launch_behind_hold(1);
    else if (!strcmp(name, "ready")) child_ready();
    else if (!strcmp(name, "devices")) child_devices();
    else if (!strcmp(name, "hold")) child_hold();
    else if (!strcmp(name, "hold-forced")) child_hold_forced();
    else if (!strcmp(name, "queues")) child_queues();
    else if (!strcmp(name, "queues-default")) return child_queues_default() || g_fail;
    else if (!strcmp(name, "ipc-export")) return child_ipc_export();
    else if (!strcmp(name, "ipc-import-exit")) return child_ipc_import_exit();
    else if (!strcmp(name, "ipc-close")) return child_ipc_close();
    else if (!strcmp(name, "free-in-use-device")) return child_free_in_use(0);
    else if (!strcmp(name, "free-in-use-pinned")) return child_free_in_use(1);
    else if (!strcmp(name, "copy-overlap")) return child_copy_overlap();
    else if (!strcmp(name, "stuck")) child_stuck();
    else if (!strcmp(name, "deadlock-exit")) return child_deadlock_exit();
    else if (!strcmp(name, "fork-count")) return child_fork_count();
    else if (!strcmp(name, "ipc-devices")) child_ipc_devices();
    else if (!strcmp(name, "pinned-devices")) child_pinned_devices();
    else if (!strcmp(name, "memop-device")) return child_memop_device();
    else return 98;
    if (g_fail) printf("child %s: %d of %d checks failed\n", name, g_fail, g_checks);
    return g_fail ? 1 : 0;
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc > 2 && !strcmp(argv[1], "--child")) return child(argv[2]);
    /* These rules check the refusals themselves (tests/run.sh's default ends the process). */
    setenv("RINGLET_SIM_ON_DEADLOCK", "error", 1);
    rule_last_error();
    rule_driver_error();
    rule_launcher();
    rule_loading();
    rule_sync();
    rule_destroy();
    CHECK(run_child("devices", "RINGLET_SIM_DEVICES", "2") == 0, "current device per thread: the child failed");
    rule_pageable();
    rule_uncleared();
    rule_fork();
    CHECK(run_child("fork-count", NULL, NULL) == 0, "fork after cudaGetDeviceCount: the child failed");
    rule_legacy();
    rule_capture();
    rule_capture_modes();
    rule_memops();
    rule_queues();
    rule_ipc_free();
    rule_ipc_close();
    rule_free_in_use();
    rule_memset();
    rule_ipc_devices();
    CHECK(run_child("stuck", "RINGLET_DEVICE", "sim") == 0, "frees behind work noted stuck: the child failed");
    setenv("RINGLET_DEVICE", "sim", 1); /* rl_dev_free_later's device layer */
    CHECK(run_child("pinned-devices", "RINGLET_SIM_DEVICES", "2") == 0,
          "a kept free of pinned memory made from another device: the child failed");
    unsetenv("RINGLET_DEVICE");
    CHECK(run_child("memop-device", "RINGLET_SIM_DEVICES", "2") == 0,
          "a stream memory operation on another device's stream: the child failed");
    CHECK(run_child("deadlock-exit", "RINGLET_SIM_ON_DEADLOCK", "exit") == 70,
          "RINGLET_SIM_ON_DEADLOCK=exit: a call behind a held stream did not end the process with status 70");
    printf("test_simrules: %d checks, %d failed\n", g_checks, g_fail);
    return g_fail ? 1 : 0;
}
