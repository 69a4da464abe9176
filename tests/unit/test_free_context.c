/* Unit test: the program's frees through ringlet (ringlet_mem_free, ringlet_host_free) from
 * a thread that never chose a device, over the simulated GPU with two devices. Memory of
 * device 1, allocated with device 1 current, freed from such a thread (a collector's or a
 * pool's, which reads as device 0) must be freed on device 1 (device memory) or on a device
 * whose context exists (pinned memory): freed on the thread's device 0, the runtime made a
 * context there, GPU memory on a device the program never used. The frees must still free
 * (a second free of the same pointer is refused). Exit status 0 on success. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include "device.h"
#include "ringlet.h"

static void *g_dev, *g_pin;
static ringlet_result_t g_rc[4];

static void *free_both(void *arg) {
    (void)arg;
    g_rc[0] = ringlet_mem_free(g_dev);
    g_rc[1] = ringlet_host_free(g_pin);
    g_rc[2] = ringlet_mem_free(g_dev);  /* twice: refused */
    g_rc[3] = ringlet_host_free(g_pin); /* twice: refused */
    return NULL;
}

int main(void) {
    setenv("RINGLET_DEVICE", "sim", 1);
    setenv("RINGLET_SIM_DEVICES", "2", 1);
    int failures = 0, active0 = -1;
    const rl_device_ops *d = rl_device();
    if (!d) {
        printf("FAIL: no simulated device backend: %s\n", rl_device_unavailable());
        return 1;
    }
    if (ringlet_set_device(1) || ringlet_mem_alloc(&g_dev, 4096) || ringlet_host_alloc(&g_pin, 4096)) {
        printf("FAIL: allocations on device 1: %s\n", ringlet_comm_last_error(NULL));
        return 1;
    }
    d->context_active(0, &active0);
    printf("%s: device 0 has no context before the frees (%d)\n", active0 == 0 ? "ok" : "FAIL", active0);
    failures += active0 != 0;
    pthread_t t;
    pthread_create(&t, NULL, free_both, NULL);
    pthread_join(t, NULL);
    int ok = g_rc[0] == RINGLET_SUCCESS && g_rc[1] == RINGLET_SUCCESS;
    printf("%s: the frees from a thread that never chose a device: %d %d\n", ok ? "ok" : "FAIL", (int)g_rc[0],
           (int)g_rc[1]);
    failures += !ok;
    ok = g_rc[2] != RINGLET_SUCCESS && g_rc[3] != RINGLET_SUCCESS;
    printf("%s: freeing them again is refused: %d %d\n", ok ? "ok" : "FAIL", (int)g_rc[2], (int)g_rc[3]);
    failures += !ok;
    d->context_active(0, &active0);
    printf("%s: device 0 still has no context after them (%d)\n", active0 == 0 ? "ok" : "FAIL", active0);
    failures += active0 != 0;
    return failures != 0;
}
