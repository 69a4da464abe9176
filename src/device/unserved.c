/* Device memory that no backend of this process serves (device.h, rl_dev_unserved_pair).
 *
 * A program can run CUDA of its own while ringlet's backend cannot: ringlet's runtime,
 * linked statically, needs a newer driver than the program's (cudaErrorInsufficientDriver
 * there, while PyTorch works), RINGLET_DEVICE=none, or a build without CUDA. Its tensors
 * then reach ringlet as pointers no backend knows, and taken for host memory the host
 * would read them and fault. The driver the program loaded knows them: asked through
 * cuPointerGetAttributes, found in the already loaded libcuda.so.1 (a program that never
 * loaded it has no device memory). Its answer costs a driver call, so it is asked only
 * while no backend runs, and only once a driver is loaded: looked for at every
 * communicator's init (rl_dev_unserved_look), at the first call, and again at most every
 * 100 ms (the clock read every 64 calls) until found: the program may start CUDA after
 * its first calls. A look is a dlopen that finds nothing: 14 us here, too dear for every
 * call (an 8-byte all-reduce over shared memory takes 0.4 us; a clock read per call cost
 * it 0.04 us).
 */
#include <dlfcn.h>
#include <stdatomic.h>
#include <stdint.h>
#include <time.h>

#include "device.h"
#include "simgpu.h"

/* cuda.h's values: the driver's ABI, checked against the header where it is at hand. */
enum { ATTR_MEMORY_TYPE = 2, ATTR_IS_MANAGED = 8, MEMORYTYPE_DEVICE = 2 };
#ifdef RINGLET_CUDA
#include <cuda.h>
_Static_assert((int)ATTR_MEMORY_TYPE == (int)CU_POINTER_ATTRIBUTE_MEMORY_TYPE &&
                   (int)ATTR_IS_MANAGED == (int)CU_POINTER_ATTRIBUTE_IS_MANAGED &&
                   (int)MEMORYTYPE_DEVICE == (int)CU_MEMORYTYPE_DEVICE,
               "cuda.h's pointer attributes");
#endif

/* CUresult cuPointerGetAttributes(unsigned int, CUpointer_attribute *, void **, CUdeviceptr) */
typedef int (*ptr_attrs_fn)(unsigned int, int *, void **, unsigned long long);

enum { CLOCK_EVERY = 64, RELOOK_NS = 100000000 }; /* a clock read every 64 calls, a look every 100 ms */

static _Atomic(ptr_attrs_fn) g_attrs;
/* Calls counted for all threads by a load and a store, no read-modify-write (a count lost
 * between threads only moves the next clock read; a thread-local count cost a call into
 * the dynamic loader's TLS lookup, 0.02 us of an 8-byte all-reduce) */
static atomic_uint g_calls;
static atomic_llong g_next_look_ns; /* CLOCK_MONOTONIC_COARSE; 0: look at the next clock read */

static ptr_attrs_fn look(void) {
    ptr_attrs_fn f = NULL;
    void *h = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD); /* kept open: the program's own */
    if (h) f = (ptr_attrs_fn)dlsym(h, "cuPointerGetAttributes");
    if (f) atomic_store_explicit(&g_attrs, f, memory_order_release);
    return f;
}

static ptr_attrs_fn driver(void) {
    ptr_attrs_fn f = atomic_load_explicit(&g_attrs, memory_order_acquire);
    if (f) return f;
    unsigned n = atomic_load_explicit(&g_calls, memory_order_relaxed);
    atomic_store_explicit(&g_calls, n + 1, memory_order_relaxed);
    if (n % CLOCK_EVERY) return NULL;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
    long long now = ts.tv_sec * 1000000000LL + ts.tv_nsec;
    if (now < atomic_load_explicit(&g_next_look_ns, memory_order_relaxed)) return NULL;
    atomic_store_explicit(&g_next_look_ns, now + RELOOK_NS, memory_order_relaxed);
    return look();
}

void rl_dev_unserved_look(void) {
    if (!rl_device() && !atomic_load_explicit(&g_attrs, memory_order_acquire)) look();
}

/* p's verdict, with f the driver's call (NULL: none loaded) and sim whether simulated
 * memory was ever made. */
static int unserved(const void *p, ptr_attrs_fn f, int sim) {
    if (!p) return 0;
    if (sim && sim_pointer_device(p) >= 0) return 1;
    if (!f) return 0;
    /* The plural form succeeds on memory the driver does not know (type 0); the singular
     * fails there, and on a driver that was never initialised. */
    unsigned int type = 0, managed = 0;
    int what[2] = {ATTR_MEMORY_TYPE, ATTR_IS_MANAGED};
    void *into[2] = {&type, &managed};
    /* managed memory is host-accessible: the host path reads it as CUDA allows */
    return f(2, what, into, (unsigned long long)(uintptr_t)p) == 0 && type == MEMORYTYPE_DEVICE && !managed;
}

int rl_dev_unserved_pair(const void *a, const void *b) {
    if (rl_device() || (!a && !b)) return 0;
    ptr_attrs_fn f = driver(); /* once for both: the per-call cost is paid once */
    int sim = sim_memory_seen();
    if (!f && !sim) return 0;
    return unserved(a, f, sim) ? 1 : unserved(b, f, sim) ? 2 : 0;
}
