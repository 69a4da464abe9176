/* Stream semantics on device buffers (NCCL's): a call with a stream returns at once and
 * is ordered on the stream; it sees the work queued on the stream before it, the work
 * queued after it sees its result, its failure reaches ringlet_comm_get_async_error,
 * and abort lets go of the stream. Run by stream.sh at P = 2 through ringlet-run, on the
 * device layer's backend (RINGLET_DEVICE=sim in CI, cuda on a GPU).
 *
 *   stream --case order|abort|async|devices|fresh|host|probe-device|pidns|probe-order|legacy|legacy-devices|capture
 *          |capture-other|capture-self|sticky|per-thread|pending-copies|failed-copies
 *          |abort-copies|queue-full|two-threads|user-stuck [--count N]
 *
 * order: rank 0 holds its own stream with a flag of its own (wait_flag), then queues on
 *   it the copy of its input to the device, the all-reduce, the copy of the result back,
 *   and an event. While the flag holds the stream nothing can have run, by construction:
 *   the event must not be done and the host result buffer must still hold its marker.
 *   Then rank 0 releases the flag: the result must be right, which it is if the library
 *   waited for the input copy (queued before the call, and held back until the release)
 *   and held the copy back (queued after the call) until the result was in place. A
 *   correct library passes whatever the timing; a library that misses the wait reads
 *   stale input only if it gets there before the release, so rank 0 keeps the flag for
 *   20 ms first (that makes such a bug show; it changes nothing for a correct library).
 *   Rank 1 takes part with a stream of its own (no holding). Repeated with blocking and
 *   non-blocking forms, and an all-gather and a broadcast, each made once on free streams
 *   first: a first call may allocate, which it must not do while a stream is held (the
 *   caller's own hold too: the call would wait for it, and fail at RINGLET_TIMEOUT).
 * abort: rank 0 queues an all-reduce on its stream and a copy after it; rank 1 never
 *   calls it (it waits at a file-system rendezvous). Rank 0 aborts: the stream must go on
 *   (its event done within 30 s), and ringlet_comm_get_async_error must report an error.
 * async: rank 1 exits (without destroying its communicator) after the warm-up; rank 0
 *   queues an all-reduce on its stream: the stream goes on (released when the call
 *   failed) and ringlet_comm_get_async_error names rank 1 within RINGLET_TIMEOUT.
 * devices: (two devices, RINGLET_SIM_DEVICES=2) buffers and stream on device 1, the
 *   calling thread's current device 0: the call makes its event and hold on the stream's
 *   device (CUDA refuses an event or a kernel on another device's stream), the progress
 *   thread works on device 1, and the caller's current device is still 0 afterwards. Then
 *   device 1's buffers with a stream of device 0: refused at the call.
 * fresh: (two devices) the process uses device 1 only (chosen before init); the calls come
 *   from a thread that never chose a device (it reads as device 0, where nothing was
 *   made), on device buffers, then on host buffers with the stream, and the communicator
 *   is destroyed from such a thread (ringlet_memset_async, memcpy_async and
 *   stream_synchronize on the stream too): the results must be right, and afterwards device 0
 *   must have no context (a call that put the thread "back" on device 0, or a CUDA call
 *   made there, makes one: GPU memory on a device the process never used).
 * host: the process never chooses a device and uses host buffers only (a CPU job on a GPU
 *   machine, as with Gloo): all-reduces, an all-gather and a broadcast, checked bit for bit,
 *   then the destroy; afterwards no device may have a context (each is GPU memory, hundreds
 *   of MB on a GPU, that a job on host buffers has no use for; cuda_ipc's probe allocation
 *   at init made one on device 0).
 * probe-device: rank 0 makes a context on device 0 before init (it chooses the device and
 *   allocates there), then passes buffers of the last device, which rank 1 chooses after
 *   init: checked all-reduces on device buffers; stream.sh checks that both ranks went over
 *   cuda_ipc. With two devices that cannot access each other (RINGLET_SIM_PEER=0), a probe
 *   made on the init thread's device judged the wrong pair: rank 1 could not map rank 0's
 *   device-0 probe, while rank 0 could map rank 1's, so the pair was allowed one way only
 *   and failed, where both ranks' buffers are on one device.
 * pidns: see pidns_case.
 * probe-order: two communicators (the world, X, and a split of it, Y), both made before
 *   either rank chose a device, so that each makes its cuda_ipc probe at its first device
 *   buffers. Rank 0 starts an all-reduce on X on a thread of its own, then (once rank 1 says
 *   it is at Y) one on Y; rank 1 runs Y, then X. Rank 0's X waits for rank 1's X probe
 *   until rank 1 is done with Y: it must not wait in a quiet section, which would keep rank
 *   0's Y from making its own probe, and rank 1's Y waits for that one (both calls then
 *   failed at RINGLET_TIMEOUT). Checked all-reduces, on device buffers and streams. Then
 *   two more such communicators in one group each rank (X then Y on rank 0, Y then X on
 *   rank 1): the group prepares one communicator after the other, each waiting for its
 *   peers' probes, so it must make every communicator's probe before it waits for any.
 * legacy: all-reduces on RINGLET_STREAM_DEFAULT (CUDA's legacy default stream, which
 *   waits for every blocking stream, and they for it): the library's own streams must not
 *   be blocking ones, or they would wait for the legacy stream it holds.
 * legacy-devices: (two devices) buffers on device 1, all-reduces on RINGLET_STREAM_DEFAULT
 *   called with device 0 current: the default stream is taken on the buffers' device (as
 *   NCCL takes stream 0 on its communicator's), so the call waits for device 1's default
 *   stream and holds it. Two free rounds, then (streams held, rank 0) one where a flag of
 *   rank 0's own closes device 1's default stream before the input copy; rank 0 then
 *   synchronises device 0's default stream, which a library that took it for the call held
 *   until its all-reduce was done, by then without the input: after the flag opens, the
 *   result must be right.
 * capture: an all-reduce on a stream that is capturing a CUDA graph is refused with
 *   RINGLET_ERR_INVALID_USAGE, before it touches the stream: the capture still ends
 *   cleanly (an event recorded in it, or a wait for one, would have invalidated it or
 *   pulled ringlet's own stream in), and the communicator works on that stream after.
 * capture-other: another thread of the process captures a CUDA graph (global mode, as
 *   torch.cuda.graph does) on a stream of its own from before the calls until after them;
 *   the calling thread, in global mode too, runs checked all-reduces on a stream of its
 *   own. ringlet's calls on it and on its progress thread must keep out of the capture: a
 *   query, synchronisation, allocation or kernel load in global mode fails (capture
 *   unsupported) and invalidates it. The results must be right and the capture must end
 *   cleanly.
 * capture-self: the calling thread itself captures a CUDA graph (global mode) on a stream
 *   of its own while it calls an all-reduce on another stream, not capturing, after a
 *   warm-up: in the default sync mode the call waits for its operation, and its queries
 *   of ringlet's events must not fail on (and invalidate) the thread's own capture, which
 *   thread-local mode still forbids them. The result must be exact and the capture must
 *   end cleanly.
 * sticky: (simulated GPU) rank 0's own kernel faults on a pageable operand (a sticky error:
 *   its context is unusable), then both ranks call an all-reduce: rank 0's fails at its
 *   entry with RINGLET_ERR_CUDA and fails the communicator; rank 1's must fail with
 *   RINGLET_ERR_REMOTE naming rank 0 and the CUDA error, at once (RINGLET_TIMEOUT=120; rank
 *   0 stays until rank 1 is done, so neither its exit nor the deadline can be the cause).
 * per-thread: all-reduces on cudaStreamPerThread, the handle 0x2 (each thread's own default
 *   stream), from the main thread and from a second one at once, each checked: the handle
 *   must be taken as the calling thread's stream (the user's, on the user's thread).
 * pending-copies: (simulated GPU, over cuda_ipc, or shm staging through host memory) rank
 *   1's copies out of rank 0's slots (its staging slots) are still queued when its
 *   communicator fails and is destroyed, by construction: rank 1
 *   runs with one hardware work queue (CUDA_DEVICE_MAX_CONNECTIONS=1), and a spinning
 *   kernel of the program's own (the runtime's flag wait, which the device layer does not
 *   know of) heads it before rank 1 receives (device buffer, no stream: nothing of the call
 *   waits on the device before its copies). The receive times out with its copies queued
 *   (stream.sh checks ringlet's warning that it left their slots, and that the error says
 *   the receive waits on this rank's device), and the destroy must neither unmap nor free
 *   the slots those copies use, nor free anything behind the program's kernel (the
 *   simulator stops a process whose cudaIpcCloseMemHandle unmaps memory that queued work
 *   uses, and refuses a free behind a held stream as a deadlock: stream.sh fails on that
 *   message); after the program's kernel ends, the copies run and the device synchronises
 *   cleanly. Before the destroy rank 1 also gives back memory of its own through ringlet
 *   (ringlet_mem_free, ringlet_host_free: a free waits for the whole device on CUDA): they
 *   must return, the memory kept until the stuck work is done. Rank 0 runs with a queue per
 *   stream, sends once rank 1's kernel is queued, and waits for rank 1 to finish.
 * failed-copies: pending-copies on pinned host buffers forced over cuda_ipc (the device copies
 *   the call queued are then its only device work), and a thread of rank 1's ends the program's kernel once the
 *   communicator reports its failure (50 ms after it sees it): the receive must return only
 *   after that, its copies done. A failed call hands its buffer back, and a copy of ringlet's
 *   still queued would write it later: into memory the program reuses at once (PyTorch's
 *   caching allocator gives a freed tensor's memory to the next). By construction the
 *   copies cannot run before the release; a library that returns without waiting for them
 *   returns before it (the 50 ms make that show; they change nothing for a correct one).
 * abort-copies: as pending-copies (one hardware queue held by the program's kernel; device
 *   buffers, or pinned host buffers where RINGLET_TRANSPORT=cuda_ipc), a small message rank
 *   1 receives on a thread of its own: its copies cannot run. Once rank 0's send is done
 *   (and 50 ms more, for rank 1 to take the data: that makes the case bite, nothing else),
 *   rank 1 aborts the communicator. The abort must return with the copies still queued
 *   (it waits for nothing; stream.sh runs the case with RINGLET_TIMEOUT=600, so an abort
 *   that waits for them outlasts the run's limit), and the receive must fail; then rank 1
 *   ends its kernel, and the copies run.
 * queue-full: (simulated GPU, streams held, RINGLET_SIM_QUEUE_DEPTH=6: a stream queues at most
 *   6 operations, and a call that queues on a full one blocks until one ends, as on a GPU)
 *   rank 0 queues 12 all-reduces on one stream; rank 1 joins them only once rank 0 has
 *   queued two, so rank 0's stream is full of holds before any of them can be released and
 *   its third call blocks in the runtime. The operations ahead of it must still run and
 *   release the stream: a library that blocks there under a lock its progress thread needs
 *   to run or finish them hangs for ever on a GPU (the simulator reports it as a deadlock
 *   once the stream has not moved for 30 s). Every result is checked, exactly.
 * two-threads: (streams held) two threads of each rank make 200 all-reduces each on one
 *   stream of the process at once. A call's hold on the stream (a wait for the flag to
 *   reach its number) must come after the events of the calls numbered before it: one
 *   queued first waits for a call that waits for its event, until RINGLET_TIMEOUT. Every
 *   result is checked, exactly (the inputs are the same for every call: which call of the
 *   peer's a call meets does not matter).
 * user-stuck: (simulated GPU, streams not held) rank 1's stream is held by a kernel of the
 *   program's own (the runtime's flag wait) when it calls an all-reduce of host buffers on
 *   it (no device work of ringlet's then waits behind the kernel, which would be noted): the call
 *   fails at RINGLET_TIMEOUT (its stream's work before it never ends), and then a
 *   ringlet_mem_free of rank 1's must return: CUDA's free would wait behind that kernel (the
 *   simulator stops the process as a deadlock), so ringlet keeps the memory for later. Then
 *   the kernel ends.
 * Prints "stream: rank R: OK <case>" or "FAIL ..."; exit 0 when OK.
 */
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "device.h"
#include "ringlet.h"
#include "rt.h"

static int g_rank = -1;
static int g_dev; /* this rank's device */
static const rl_device_ops *D;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

#define FAIL(...)                                                                                                      \
    do {                                                                                                               \
        printf("FAIL rank %d: ", g_rank);                                                                              \
        printf(__VA_ARGS__);                                                                                           \
        printf("\n");                                                                                                  \
        exit(1);                                                                                                       \
    } while (0)

#define DEV(call)                                                                                                      \
    do {                                                                                                               \
        if ((call) != RL_DEV_OK) FAIL("%s: %s", #call, rl_dev_error());                                                \
    } while (0)

/* Waits for the event, at most s seconds; 1 when done. */
static int event_done_within(rl_dev_event_t e, double s) {
    double until = now_s() + s;
    for (;;) {
        int q = D->event_query(e);
        if (q == RL_DEV_OK) return 1;
        if (q != RL_DEV_NOT_READY) FAIL("event_query: %s", rl_dev_error());
        if (now_s() > until) return 0;
        struct timespec ts = {0, 1000 * 1000};
        nanosleep(&ts, NULL);
    }
}

static uint32_t input(int rank, size_t i) { return (uint32_t)(i * 2654435761u) ^ (uint32_t)(rank * 40503u + 7); }

static void file_wait(const char *path, double s) {
    double until = now_s() + s;
    while (access(path, F_OK) != 0 && now_s() < until) {
        struct timespec ts = {0, 5 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
}

static void file_touch(const char *path) {
    FILE *f = fopen(path, "w");
    if (f) fclose(f);
}

static const char *const g_names[] = {"allreduce", "iallreduce", "allgather", "broadcast"};

/* out[0, out_n) must be round kind's result at P ranks of n elements each. */
static void check_result(int kind, int P, size_t n, const uint32_t *out, size_t out_n, const char *when) {
    size_t bad = 0, first = 0;
    for (size_t i = 0; i < out_n; i++) {
        uint32_t want;
        if (kind <= 1) {
            want = 0;
            for (int r = 0; r < P; r++) want += input(r, i);
        } else if (kind == 2) {
            want = input((int)(i / n), i % n);
        } else {
            want = input(1, i);
        }
        if (out[i] != want && bad++ == 0) first = i;
    }
    if (bad)
        FAIL("%s: %zu of %zu elements wrong, first at %zu: got 0x%08x %s", g_names[kind], bad, out_n, first, out[first],
             when);
}

/* One held-stream round: kind 0 all-reduce (blocking form), 1 all-reduce (i-form),
 * 2 all-gather, 3 broadcast from rank 1. held: rank 0 holds its stream (else a warm-up
 * round: a call may allocate device memory the first time, which must not happen while
 * a stream is held, the caller's own hold included, so rank 0 holds only calls that
 * were made once before). */
static void order_round(ringlet_comm_t comm, int P, int kind, size_t n, int held) {
    const char *const *names = g_names;
    size_t out_n = kind == 2 ? n * (size_t)P : n;
    uint32_t *in, *out; /* pinned: copies on a held stream must not synchronise (pageable ones may) */
    void *din, *dout, *flag_mem;
    DEV(D->host_alloc((void **)&in, n * 4));
    DEV(D->host_alloc((void **)&out, out_n * 4));
    for (size_t i = 0; i < n; i++) in[i] = input(g_rank, i);
    for (size_t i = 0; i < out_n; i++) out[i] = 0xdeadbeefu; /* the marker */
    DEV(D->mem_alloc(&din, n * 4));
    DEV(D->mem_alloc(&dout, out_n * 4));
    DEV(D->memset_async(din, 0, n * 4, NULL));
    DEV(D->memset_async(dout, 0, out_n * 4, NULL));
    DEV(D->stream_sync(NULL));
    DEV(D->host_alloc(&flag_mem, 64));
    volatile uint64_t *flag = flag_mem;
    *flag = 0;
    rl_dev_stream_t s;
    rl_dev_event_t done;
    DEV(D->stream_create(&s));
    DEV(D->event_create(&done));
    /* Streams not held (RINGLET_STREAM_HOLD=sync): the call returns once its result is in
     * place, so the held round checks that instead (a hold of the caller's own would keep
     * the call from ever returning). */
    int sync = held && !strcmp(D->hold_kind(g_dev), "sync");
    int hold = held && g_rank == 0 && !sync;
    if (hold) DEV(D->wait_flag(flag, 1, s)); /* nothing after this runs until the flag is 1 */
    DEV(D->memcpy_async(din, in, n * 4, s));
    ringlet_result_t rc = RINGLET_SUCCESS;
    ringlet_request_t req = NULL;
    switch (kind) {
    case 0: rc = ringlet_allreduce(din, dout, n, RINGLET_UINT32, RINGLET_SUM, comm, s); break;
    case 1: rc = ringlet_iallreduce(din, dout, n, RINGLET_UINT32, RINGLET_SUM, comm, s, &req); break;
    case 2: rc = ringlet_allgather(din, dout, n, RINGLET_UINT32, comm, s); break;
    default: rc = ringlet_broadcast(din, dout, n, RINGLET_UINT32, 1, comm, s); break;
    }
    if (rc != RINGLET_SUCCESS) FAIL("%s on a stream returned %d: %s", names[kind], (int)rc, ringlet_comm_last_error(comm));
    if (sync) {
        /* Read on another stream, not after the call on s: the result must be there now. */
        rl_dev_stream_t s2;
        DEV(D->stream_create(&s2));
        DEV(D->memcpy_async(out, dout, out_n * 4, s2));
        DEV(D->stream_sync(s2));
        DEV(D->stream_destroy(s2));
        if (req) {
            int d = -1;
            if (ringlet_test(&req, &d) != RINGLET_SUCCESS || d != 1)
                FAIL("%s: not done (%d) when the call returned, with streams not held (sync)", names[kind], d);
        }
        check_result(kind, P, n, out, out_n, "when the call returned, with streams not held (sync)");
        for (size_t i = 0; i < out_n; i++) out[i] = 0xdeadbeefu;
    }
    DEV(D->memcpy_async(out, dout, out_n * 4, s));
    DEV(D->event_record(done, s));
    if (hold) {
        /* By construction nothing queued after the flag wait ran: the call returned
         * while its input copy was still queued. */
        if (D->event_query(done) != RL_DEV_NOT_READY) FAIL("%s: the held stream's event is done", names[kind]);
        if (out[0] != 0xdeadbeefu) FAIL("%s: the result copy ran while the stream was held", names[kind]);
        if (req) {
            int d = -1;
            if (ringlet_test(&req, &d) != RINGLET_SUCCESS || d != 0)
                FAIL("%s: ringlet_test says done (%d) while the stream holding its input is held", names[kind], d);
        }
        struct timespec hold = {0, 20 * 1000 * 1000};
        nanosleep(&hold, NULL);
        __atomic_store_n(flag, 1, __ATOMIC_RELEASE);
    }
    if (req && ringlet_wait(&req) != RINGLET_SUCCESS) FAIL("%s: wait: %s", names[kind], ringlet_comm_last_error(comm));
    if (!event_done_within(done, 60)) FAIL("%s: the stream did not finish within 60 s", names[kind]);
    check_result(kind, P, n, out, out_n,
                 "(the library did not wait for the stream's copy before the call, or did not hold the copy after it)");
    /* The peer may be done first and destroy its communicator while this rank still
     * finishes the call: that is no failure. */
    if (ringlet_comm_get_async_error(comm) != RINGLET_SUCCESS)
        FAIL("%s: the stream call failed: %s", names[kind], ringlet_comm_last_error(comm));
    printf("stream: rank %d: %s on a %s stream: %zu elements right\n", g_rank, names[kind],
           hold ? "held" : sync ? "sync" : "free", out_n);
    DEV(D->event_destroy(done));
    DEV(D->stream_destroy(s));
    DEV(D->mem_free(din));
    DEV(D->mem_free(dout));
    DEV(D->host_free(flag_mem));
    DEV(D->host_free(in));
    DEV(D->host_free(out));
}

/* An all-reduce of n elements on device buffers of the current device, on stream s (made
 * by the caller) from a thread whose current device is then `calling`; checked. */
static void checked_allreduce(ringlet_comm_t comm, int P, size_t n, rl_dev_stream_t s, int calling, const char *what) {
    uint32_t *in, *out;
    void *din, *dout;
    DEV(D->host_alloc((void **)&in, n * 4));
    DEV(D->host_alloc((void **)&out, n * 4));
    DEV(D->mem_alloc(&din, n * 4));
    DEV(D->mem_alloc(&dout, n * 4));
    for (size_t i = 0; i < n; i++) in[i] = input(g_rank, i), out[i] = 0xdeadbeefu;
    int own = -1;
    DEV(D->get_device(&own));
    for (int round = 0; round < 2; round++) { /* the first call prepares, the second only queues */
        DEV(D->memcpy_async(din, in, n * 4, s));
        DEV(D->set_device(calling));
        if (ringlet_allreduce(din, dout, n, RINGLET_UINT32, RINGLET_SUM, comm, s) != RINGLET_SUCCESS)
            FAIL("%s: allreduce: %s", what, ringlet_comm_last_error(comm));
        int cur = -1;
        DEV(D->get_device(&cur));
        if (cur != calling) FAIL("%s: the call changed the thread's current device from %d to %d", what, calling, cur);
        DEV(D->set_device(own));
        DEV(D->memcpy_async(out, dout, n * 4, s));
        DEV(D->stream_sync(s));
        if (ringlet_comm_get_async_error(comm) != RINGLET_SUCCESS) FAIL("%s: %s", what, ringlet_comm_last_error(comm));
        for (size_t i = 0; i < n; i++) {
            uint32_t want = 0;
            for (int r = 0; r < P; r++) want += input(r, i);
            if (out[i] != want) FAIL("%s: element %zu is 0x%08x, want 0x%08x", what, i, out[i], want);
        }
    }
    DEV(D->mem_free(din));
    DEV(D->mem_free(dout));
    DEV(D->host_free(in));
    DEV(D->host_free(out));
}

/* legacy-devices: one round on device 1's buffers, called on RINGLET_STREAM_DEFAULT with
 * device 0 current; gated (rank 0, streams held): device 1's default stream closed by a
 * flag of this rank's own before the input copy. */
static void legacy_devices_round(ringlet_comm_t comm, int P, size_t n, int gated, uint32_t k) {
    rl_dev_stream_t def = (rl_dev_stream_t)RINGLET_STREAM_DEFAULT;
    uint32_t *in, *out;
    void *din, *dout, *flag_mem;
    rl_dev_event_t done;
    DEV(D->set_device(1));
    DEV(D->host_alloc((void **)&in, n * 4));
    DEV(D->host_alloc((void **)&out, n * 4));
    DEV(D->host_alloc(&flag_mem, 64));
    volatile uint64_t *flag = flag_mem;
    *flag = 0;
    for (size_t i = 0; i < n; i++) in[i] = input(g_rank, i) + k, out[i] = 0xdeadbeefu;
    DEV(D->mem_alloc(&din, n * 4));
    DEV(D->mem_alloc(&dout, n * 4));
    DEV(D->memset_async(din, 0, n * 4, def));
    DEV(D->memset_async(dout, 0, n * 4, def));
    DEV(D->stream_sync(def));
    DEV(D->event_create(&done));
    if (gated) DEV(D->wait_flag(flag, 1, def)); /* device 1's default stream: nothing runs until the flag is 1 */
    DEV(D->memcpy_async(din, in, n * 4, def));
    DEV(D->set_device(0));
    if (ringlet_allreduce(din, dout, n, RINGLET_UINT32, RINGLET_SUM, comm, def) != RINGLET_SUCCESS)
        FAIL("legacy-devices: allreduce: %s", ringlet_comm_last_error(comm));
    int cur = -1;
    DEV(D->get_device(&cur));
    if (cur != 0) FAIL("legacy-devices: the call changed the thread's current device from 0 to %d", cur);
    DEV(D->set_device(1));
    DEV(D->memcpy_async(out, dout, n * 4, def));
    DEV(D->event_record(done, def));
    if (gated) {
        /* A library that took device 0's default stream for the call held that one until
         * its all-reduce was done: past this wait, it ran without the input copy. */
        DEV(D->set_device(0));
        DEV(D->stream_sync(def));
        DEV(D->set_device(1));
        if (D->event_query(done) != RL_DEV_NOT_READY) FAIL("legacy-devices: device 1's default stream ran past the flag");
        __atomic_store_n(flag, 1, __ATOMIC_RELEASE);
    }
    if (!event_done_within(done, 60)) FAIL("legacy-devices: device 1's default stream did not finish within 60 s");
    for (size_t i = 0; i < n; i++) {
        uint32_t want = 0;
        for (int r = 0; r < P; r++) want += input(r, i) + k;
        if (out[i] != want)
            FAIL("legacy-devices%s: element %zu is 0x%08x, want 0x%08x (the call did not wait for device 1's default "
                 "stream, or did not hold it)", gated ? " (gated)" : "", i, out[i], want);
    }
    DEV(D->event_destroy(done));
    DEV(D->mem_free(din));
    DEV(D->mem_free(dout));
    DEV(D->host_free(flag_mem));
    DEV(D->host_free(in));
    DEV(D->host_free(out));
    DEV(D->set_device(0));
}

/* capture-other: a thread that holds a capture open until told to end it. */
typedef struct {
    rl_dev_stream_t t;
    int phase; /* 1 capturing (or -1: the begin failed), 2 told to end it */
    int end_rc;
    char err[512];
    pthread_mutex_t mu;
    pthread_cond_t cv;
} capturer;

static void capturer_set(capturer *k, int phase) {
    pthread_mutex_lock(&k->mu);
    k->phase = phase;
    pthread_cond_broadcast(&k->cv);
    pthread_mutex_unlock(&k->mu);
}

static void capturer_wait(capturer *k, int phase) {
    pthread_mutex_lock(&k->mu);
    while (k->phase != phase && k->phase >= 0) pthread_cond_wait(&k->cv, &k->mu);
    pthread_mutex_unlock(&k->mu);
}

static void *capturer_main(void *arg) {
    capturer *k = arg;
    if (D->set_device(g_dev) != RL_DEV_OK || D->stream_begin_capture(k->t) != RL_DEV_OK) {
        snprintf(k->err, sizeof k->err, "%s", rl_dev_error());
        capturer_set(k, -1);
        return NULL;
    }
    capturer_set(k, 1);
    capturer_wait(k, 2);
    k->end_rc = D->stream_end_capture(k->t);
    if (k->end_rc != RL_DEV_OK) snprintf(k->err, sizeof k->err, "%s", rl_dev_error());
    return NULL;
}

static void capture_other_case(ringlet_comm_t comm, int P, size_t n) {
    /* This thread stays in global mode, the default: ringlet's calls on it (the first
     * prepares the device side: kernels loaded, memory allocated) and this test's own
     * device calls, all through the device layer, switch to thread-local mode themselves. */
    capturer k = {.phase = 0};
    pthread_mutex_init(&k.mu, NULL);
    pthread_cond_init(&k.cv, NULL);
    rl_dev_stream_t s;
    DEV(D->stream_create(&s));
    DEV(D->stream_create(&k.t));
    pthread_t th;
    if (pthread_create(&th, NULL, capturer_main, &k) != 0) FAIL("cannot start the capturing thread");
    capturer_wait(&k, 1);
    if (k.phase < 0) FAIL("the capture did not begin: %s", k.err);
    /* The first call prepares the communicator's device side (allocations), the second
     * only queues: both while the other thread's capture is open. */
    checked_allreduce(comm, P, n, s, g_dev, "all-reduces while another thread captures");
    capturer_set(&k, 2);
    pthread_join(th, NULL);
    if (k.end_rc != RL_DEV_OK) FAIL("the other thread's capture did not end cleanly: %s", k.err);
    DEV(D->stream_destroy(k.t));
    DEV(D->stream_destroy(s));
    pthread_mutex_destroy(&k.mu);
    pthread_cond_destroy(&k.cv);
}

/* capture-self: this thread captures stream t (global mode, the default) while it calls
 * an all-reduce on another stream s, which is not capturing: the call (on a stream not
 * held, it waits for its operation) must keep out of this thread's own capture, as
 * NCCL's does. Nothing here queries or synchronises while the capture is open. */
static void capture_self_case(ringlet_comm_t comm, int P, size_t n) {
    rl_dev_stream_t s, t;
    uint32_t *in, *out;
    void *din, *dout;
    DEV(D->stream_create(&s));
    DEV(D->stream_create(&t));
    /* the first calls prepare the device side (allocations, which the capture forbids) */
    checked_allreduce(comm, P, n, s, g_dev, "capture-self: before the capture");
    DEV(D->host_alloc((void **)&in, n * 4));
    DEV(D->host_alloc((void **)&out, n * 4));
    DEV(D->mem_alloc(&din, n * 4));
    DEV(D->mem_alloc(&dout, n * 4));
    for (size_t i = 0; i < n; i++) in[i] = input(g_rank, i), out[i] = 0xdeadbeefu;
    DEV(D->memcpy_async(din, in, n * 4, s));
    DEV(D->memset_async(dout, 0, n * 4, s));
    DEV(D->stream_begin_capture(t));
    ringlet_result_t rc = ringlet_allreduce(din, dout, n, RINGLET_UINT32, RINGLET_SUM, comm, s);
    char msg[512];
    snprintf(msg, sizeof msg, "%s", rc != RINGLET_SUCCESS ? ringlet_comm_last_error(comm) : "");
    int end = D->stream_end_capture(t);
    if (rc != RINGLET_SUCCESS) FAIL("capture-self: the all-reduce during this thread's capture: %s", msg);
    if (end != RL_DEV_OK) FAIL("capture-self: this thread's capture did not end cleanly: %s", rl_dev_error());
    DEV(D->memcpy_async(out, dout, n * 4, s));
    DEV(D->stream_sync(s));
    if (ringlet_comm_get_async_error(comm) != RINGLET_SUCCESS) FAIL("capture-self: %s", ringlet_comm_last_error(comm));
    for (size_t i = 0; i < n; i++) {
        uint32_t want = 0;
        for (int r = 0; r < P; r++) want += input(r, i);
        if (out[i] != want) FAIL("capture-self: element %zu is 0x%08x, want 0x%08x", i, out[i], want);
    }
    checked_allreduce(comm, P, n, s, g_dev, "capture-self: after the capture");
    DEV(D->mem_free(din));
    DEV(D->mem_free(dout));
    DEV(D->host_free(in));
    DEV(D->host_free(out));
    DEV(D->stream_destroy(t));
    DEV(D->stream_destroy(s));
}

/* sticky: rank 0's context takes a sticky error (its own kernel faults on a pageable
 * operand), then both ranks call an all-reduce. Rank 0's call fails at its entry; rank 1's
 * must fail at once, naming rank 0 and the CUDA error (RINGLET_TIMEOUT is large: a failure
 * at the deadline outlasts the run, and would not know the cause). Rank 0 stays until rank
 * 1 is done (file rendezvous): its exit cannot be what rank 1 hears. */
static void sticky_case(ringlet_comm_t comm, int P, size_t n, const char *dir) {
    rl_dev_stream_t s;
    void *din, *dout;
    char done[600];
    snprintf(done, sizeof done, "%s/sticky-done", dir);
    DEV(D->stream_create(&s));
    checked_allreduce(comm, P, n, s, g_dev, "sticky: before the fault");
    DEV(D->mem_alloc(&din, n * 4));
    DEV(D->mem_alloc(&dout, n * 4));
    DEV(D->memset_async(din, 0, n * 4, s));
    DEV(D->stream_sync(s));
    if (g_rank == 0) {
        static uint32_t pageable[1024]; /* a kernel cannot reach it: the fault is sticky */
        (void)D->reduce(dout, pageable, pageable, 1024, RINGLET_UINT32, RINGLET_SUM, s);
        if (D->stream_sync(s) == RL_DEV_OK) FAIL("sticky: a kernel on pageable memory did not fault");
        if (!strstr(rl_dev_error(), "illegal memory access")) FAIL("sticky: the fault: %s", rl_dev_error());
    }
    ringlet_result_t rc = ringlet_allreduce(din, dout, n, RINGLET_UINT32, RINGLET_SUM, comm, s);
    char msg[600];
    snprintf(msg, sizeof msg, "%s", ringlet_comm_last_error(comm));
    if (g_rank == 0) {
        if (rc != RINGLET_ERR_CUDA || !strstr(msg, "illegal memory access"))
            FAIL("sticky: rank 0's all-reduce returned %d (%s), want %d naming the CUDA error", (int)rc, msg,
                 (int)RINGLET_ERR_CUDA);
        if (ringlet_comm_get_async_error(comm) != RINGLET_ERR_CUDA)
            FAIL("sticky: rank 0's communicator is not failed: %d", (int)ringlet_comm_get_async_error(comm));
        file_wait(done, 150);
        if (access(done, F_OK) != 0) FAIL("sticky: rank 1 did not finish its call");
    } else {
        if (rc != RINGLET_ERR_REMOTE || !strstr(msg, "rank 0") || !strstr(msg, "illegal memory access"))
            FAIL("sticky: rank 1's all-reduce returned %d (%s), want %d naming rank 0 and its CUDA error", (int)rc, msg,
                 (int)RINGLET_ERR_REMOTE);
        file_touch(done);
    }
    ringlet_comm_destroy(comm); /* fails (the communicator did): it must return */
    printf("stream: rank %d: OK sticky: %s\n", g_rank, msg);
}

/* per-thread: a second thread's checked all-reduces on its own per-thread stream. */
typedef struct {
    ringlet_comm_t comm;
    int P;
    size_t n;
} per_thread_arg;

#define STREAM_PER_THREAD ((rl_dev_stream_t)2) /* cudaStreamPerThread */

static void *per_thread_main(void *arg) {
    per_thread_arg *a = arg;
    DEV(D->set_device(g_dev));
    checked_allreduce(a->comm, a->P, a->n, STREAM_PER_THREAD, g_dev, "cudaStreamPerThread, second thread");
    return NULL;
}

/* fresh: one call from a new thread. */
typedef struct {
    ringlet_comm_t comm;
    void *din, *dout;
    size_t n;
    rl_dev_stream_t s;
    ringlet_result_t rc;
} fresh_call;

static void *fresh_thread(void *arg) {
    fresh_call *f = arg;
    f->rc = ringlet_allreduce(f->din, f->dout, f->n, RINGLET_UINT32, RINGLET_SUM, f->comm, f->s);
    return NULL;
}

/* fresh: the public memory calls on device 1's buffers and stream, from a new thread. */
static void *fresh_memops_thread(void *arg) {
    fresh_call *f = arg;
    f->rc = ringlet_memset_async(f->dout, 0x5A, f->n * 4, f->s);
    if (!f->rc) f->rc = ringlet_memcpy_async(f->din, f->dout, f->n * 4, f->s);
    if (!f->rc) f->rc = ringlet_stream_synchronize(f->s);
    return NULL;
}

static void fresh_case(ringlet_comm_t comm, int P, size_t n) {
    uint32_t *in, *out;
    fresh_call f = {.comm = comm, .n = n};
    DEV(D->stream_create(&f.s));
    DEV(D->host_alloc((void **)&in, n * 4));
    DEV(D->host_alloc((void **)&out, n * 4));
    DEV(D->mem_alloc(&f.din, n * 4));
    DEV(D->mem_alloc(&f.dout, n * 4));
    void *dscratch;
    DEV(D->mem_alloc(&dscratch, 4));
    /* Host buffers with the stream (the call waits for the stream's work before it, and
     * the stream for the call), from a new thread: nothing of it runs on device 0. First:
     * the progress thread has not yet been on device 1 for a device call. */
    uint32_t *hin = malloc(n * 4), *hout = malloc(n * 4);
    if (!hin || !hout) FAIL("fresh: out of memory");
    for (size_t i = 0; i < n; i++) hin[i] = input(g_rank, i), hout[i] = 0xdeadbeefu;
    fresh_call h = f;
    h.din = hin, h.dout = hout;
    DEV(D->memset_async(dscratch, 0, 4, f.s)); /* work on the stream before the call */
    pthread_t th;
    if (pthread_create(&th, NULL, fresh_thread, &h) != 0) FAIL("fresh: cannot start a thread");
    pthread_join(th, NULL);
    if (h.rc != RINGLET_SUCCESS) FAIL("fresh: host all-reduce with a stream from a new thread: %s",
                                      ringlet_comm_last_error(comm));
    DEV(D->stream_sync(f.s));
    if (ringlet_comm_get_async_error(comm) != RINGLET_SUCCESS) FAIL("fresh: %s", ringlet_comm_last_error(comm));
    for (size_t i = 0; i < n; i++) {
        uint32_t want = 0;
        for (int r = 0; r < P; r++) want += input(r, i);
        if (hout[i] != want) FAIL("fresh: host buffers: element %zu is 0x%08x, want 0x%08x", i, hout[i], want);
    }
    free(hin);
    free(hout);
    DEV(D->mem_free(dscratch));
    for (size_t i = 0; i < n; i++) in[i] = input(g_rank, i), out[i] = 0xdeadbeefu;
    for (int round = 0; round < 2; round++) { /* the first call prepares, the second only queues */
        DEV(D->memcpy_async(f.din, in, n * 4, f.s));
        pthread_t t;
        pthread_create(&t, NULL, fresh_thread, &f);
        pthread_join(t, NULL);
        if (f.rc != RINGLET_SUCCESS) FAIL("fresh: allreduce from a new thread: %s", ringlet_comm_last_error(comm));
        DEV(D->memcpy_async(out, f.dout, n * 4, f.s));
        DEV(D->stream_sync(f.s));
        if (ringlet_comm_get_async_error(comm) != RINGLET_SUCCESS) FAIL("fresh: %s", ringlet_comm_last_error(comm));
        for (size_t i = 0; i < n; i++) {
            uint32_t want = 0;
            for (int r = 0; r < P; r++) want += input(r, i);
            if (out[i] != want) FAIL("fresh: element %zu is 0x%08x, want 0x%08x", i, out[i], want);
        }
    }
    /* ringlet_memset_async, memcpy_async (device to pinned host) and stream_synchronize on
     * the stream, from a new thread: they run on device 1 too. */
    fresh_call m = f;
    m.dout = f.dout, m.din = out;
    pthread_t tm;
    if (pthread_create(&tm, NULL, fresh_memops_thread, &m) != 0) FAIL("fresh: cannot start a thread");
    pthread_join(tm, NULL);
    if (m.rc != RINGLET_SUCCESS) FAIL("fresh: memset, memcpy and synchronize from a new thread: %s",
                                      ringlet_comm_last_error(NULL));
    for (size_t i = 0; i < n; i++)
        if (out[i] != 0x5A5A5A5Au) FAIL("fresh: after memset and memcpy element %zu is 0x%08x", i, out[i]);
    DEV(D->mem_free(f.din));
    DEV(D->mem_free(f.dout));
    DEV(D->host_free(in));
    DEV(D->host_free(out));
    DEV(D->stream_destroy(f.s));
}

/* fresh: the communicator destroyed from a new thread (on device 0, where nothing was made). */
typedef struct {
    ringlet_comm_t comm;
    ringlet_result_t rc;
} fresh_destroy;

/* probe-order: a checked all-reduce on a communicator from a thread of its own. */
typedef struct {
    ringlet_comm_t comm;
    int P, dev;
    size_t n;
} probe_call;

static void *probe_thread(void *arg) {
    probe_call *p = arg;
    DEV(D->set_device(p->dev));
    rl_dev_stream_t s;
    DEV(D->stream_create(&s));
    checked_allreduce(p->comm, p->P, p->n, s, p->dev, "probe-order: X from a thread of rank 0's");
    DEV(D->stream_destroy(s));
    return NULL;
}

static void probe_group(ringlet_comm_t a, ringlet_comm_t b, int P, size_t n, int dev);

/* pidns: rank 1 runs in a PID namespace of its own (stream.sh starts it through unshare),
 * as in a container that shares /dev/shm and the IPC namespace but not the PIDs: rank 0's
 * pid names another process there, or none. Rank 1 calls an all-reduce on device buffers,
 * rank 0 makes no device call, so its cuda_ipc probe is never made: rank 1 must wait for it
 * until RINGLET_TIMEOUT and say so, not take rank 0 for gone (its pid looked gone from rank
 * 1's namespace: "ended before it made its device memory probe" at once, which failed
 * every first device call that found a peer's probe not made yet). */
static void pidns_case(ringlet_comm_t comm, size_t n, const char *dir) {
    char done[4096];
    snprintf(done, sizeof done, "%s/pidns-done", dir);
    if (g_rank == 1) {
        void *d = NULL;
        DEV(D->set_device(0));
        DEV(D->mem_alloc(&d, n * 4));
        ringlet_result_t rc = ringlet_allreduce(d, d, n, RINGLET_UINT32, RINGLET_SUM, comm, NULL);
        const char *m = ringlet_comm_last_error(comm);
        if (rc == RINGLET_SUCCESS) FAIL("pidns: an all-reduce on device buffers succeeded without rank 0's");
        if (!strstr(m, "made no device memory probe within RINGLET_TIMEOUT"))
            FAIL("pidns: rank 1's all-reduce failed, but not waiting for rank 0's probe: %s", m);
        DEV(D->mem_free(d));
        file_touch(done);
    } else {
        /* Outside any call until rank 1's has ended: a barrier entered now would reach its
         * own deadline (the same RINGLET_TIMEOUT) first whenever rank 1 came to its call
         * later (a slow start, under the thread sanitizer), and fail rank 1's call for it. */
        file_wait(done, 60);
    }
    /* Ends either way: done, or failed with rank 1's communicator. */
    (void)ringlet_barrier(comm, NULL);
    ringlet_comm_abort(comm);
    ringlet_comm_destroy(comm);
}

static void probe_order_case(ringlet_comm_t x, int P, size_t n, const char *dir, int dev) {
    ringlet_comm_t y, x2, y2; /* all made before this process chose a device */
    if (ringlet_comm_split(x, 0, g_rank, &y) != RINGLET_SUCCESS || ringlet_comm_split(x, 0, g_rank, &x2) != RINGLET_SUCCESS ||
        ringlet_comm_split(x, 0, g_rank, &y2) != RINGLET_SUCCESS)
        FAIL("probe-order: split: %s", ringlet_comm_last_error(x));
    char path[4096];
    snprintf(path, sizeof path, "%s/rank1-at-y", dir);
    probe_call px = {x, P, dev, n};
    rl_dev_stream_t s;
    if (g_rank == 0) {
        pthread_t t;
        if (pthread_create(&t, NULL, probe_thread, &px) != 0) FAIL("probe-order: cannot start a thread");
        file_wait(path, 60);
        DEV(D->set_device(dev));
        DEV(D->stream_create(&s));
        checked_allreduce(y, P, n, s, dev, "probe-order: Y on rank 0's main thread");
        pthread_join(t, NULL);
    } else {
        DEV(D->set_device(dev));
        DEV(D->stream_create(&s));
        file_touch(path);
        checked_allreduce(y, P, n, s, dev, "probe-order: Y, first on rank 1");
        checked_allreduce(x, P, n, s, dev, "probe-order: X, second on rank 1");
    }
    DEV(D->stream_destroy(s));
    if (g_rank == 0) probe_group(x2, y2, P, n, dev);
    else probe_group(y2, x2, P, n, dev);
    if (ringlet_comm_destroy(y2) != RINGLET_SUCCESS || ringlet_comm_destroy(x2) != RINGLET_SUCCESS)
        FAIL("probe-order: destroy the group's communicators");
    if (ringlet_comm_destroy(y) != RINGLET_SUCCESS) FAIL("probe-order: destroy Y");
    if (ringlet_comm_destroy(x) != RINGLET_SUCCESS) FAIL("probe-order: destroy X");
}

/* probe-order's group: two all-reduces, on communicators a and b in that order, in one group. */
static void probe_group(ringlet_comm_t a, ringlet_comm_t b, int P, size_t n, int dev) {
    uint32_t *in, *out;
    void *din, *da, *db;
    rl_dev_stream_t s;
    DEV(D->stream_create(&s));
    DEV(D->host_alloc((void **)&in, n * 4));
    DEV(D->host_alloc((void **)&out, n * 4 * 2));
    DEV(D->mem_alloc(&din, n * 4));
    DEV(D->mem_alloc(&da, n * 4));
    DEV(D->mem_alloc(&db, n * 4));
    for (size_t i = 0; i < n; i++) in[i] = input(g_rank, i);
    DEV(D->memcpy_async(din, in, n * 4, s));
    if (ringlet_group_start() != RINGLET_SUCCESS) FAIL("probe-order: group_start");
    if (ringlet_allreduce(din, da, n, RINGLET_UINT32, RINGLET_SUM, a, s) != RINGLET_SUCCESS ||
        ringlet_allreduce(din, db, n, RINGLET_UINT32, RINGLET_SUM, b, s) != RINGLET_SUCCESS)
        FAIL("probe-order: a grouped all-reduce: %s", ringlet_comm_last_error(NULL));
    if (ringlet_group_end() != RINGLET_SUCCESS) FAIL("probe-order: group_end: %s", ringlet_comm_last_error(NULL));
    DEV(D->memcpy_async(out, da, n * 4, s));
    DEV(D->memcpy_async(out + n, db, n * 4, s));
    DEV(D->stream_sync(s));
    if (ringlet_comm_get_async_error(a) != RINGLET_SUCCESS || ringlet_comm_get_async_error(b) != RINGLET_SUCCESS)
        FAIL("probe-order: the group failed: %s / %s", ringlet_comm_last_error(a), ringlet_comm_last_error(b));
    for (size_t i = 0; i < 2 * n; i++) {
        uint32_t want = 0;
        for (int r = 0; r < P; r++) want += input(r, i % n);
        if (out[i] != want) FAIL("probe-order: group: element %zu is 0x%08x, want 0x%08x", i, out[i], want);
    }
    (void)dev;
    DEV(D->mem_free(din));
    DEV(D->mem_free(da));
    DEV(D->mem_free(db));
    DEV(D->host_free(in));
    DEV(D->host_free(out));
    DEV(D->stream_destroy(s));
}

/* empty-in-group: a group on device buffers that starts with a send and a receive of 0
 * elements with NULL buffers (torch's empty CUDA tensor) and a barrier, then exchanges n
 * elements: the group runs (its calls without buffers take the group's device memory; it
 * was refused, on one rank alone, as a mix of host and device), the data exact. */
static void empty_in_group_case(ringlet_comm_t comm, size_t n) {
    int peer = 1 - g_rank;
    uint32_t *in, *out;
    void *din, *dout;
    rl_dev_stream_t s;
    DEV(D->stream_create(&s));
    DEV(D->host_alloc((void **)&in, n * 4));
    DEV(D->host_alloc((void **)&out, n * 4));
    DEV(D->mem_alloc(&din, n * 4));
    DEV(D->mem_alloc(&dout, n * 4));
    for (size_t i = 0; i < n; i++) in[i] = input(g_rank, i);
    DEV(D->memcpy_async(din, in, n * 4, s));
    if (ringlet_group_start() != RINGLET_SUCCESS) FAIL("empty-in-group: group_start");
    if (ringlet_send(NULL, 0, RINGLET_UINT32, peer, comm, s) || ringlet_recv(NULL, 0, RINGLET_UINT32, peer, comm, s) ||
        ringlet_barrier(comm, s) || ringlet_send(din, n, RINGLET_UINT32, peer, comm, s) ||
        ringlet_recv(dout, n, RINGLET_UINT32, peer, comm, s))
        FAIL("empty-in-group: a call in the group: %s", ringlet_comm_last_error(comm));
    if (ringlet_group_end() != RINGLET_SUCCESS) FAIL("empty-in-group: group_end: %s", ringlet_comm_last_error(NULL));
    DEV(D->memcpy_async(out, dout, n * 4, s));
    DEV(D->stream_sync(s));
    if (ringlet_comm_get_async_error(comm) != RINGLET_SUCCESS)
        FAIL("empty-in-group: the group failed: %s", ringlet_comm_last_error(comm));
    for (size_t i = 0; i < n; i++)
        if (out[i] != input(peer, i)) FAIL("empty-in-group: element %zu is 0x%08x, want 0x%08x", i, out[i], input(peer, i));
    /* A zero-element receive in a group of its own (no call there has a buffer: it takes
     * its stream's device) against a group with device buffers that sends it: they meet. */
    DEV(D->memset_async(dout, 0, n * 4, s));
    if (g_rank == 1 && ringlet_recv(dout, n, RINGLET_UINT32, 0, comm, s) != RINGLET_SUCCESS)
        FAIL("empty-in-group: the receive before the second group: %s", ringlet_comm_last_error(comm));
    if (ringlet_group_start() != RINGLET_SUCCESS) FAIL("empty-in-group: group_start (2)");
    ringlet_result_t rc = g_rank == 0 ? ringlet_send(din, n, RINGLET_UINT32, 1, comm, s)
                                      : ringlet_recv(NULL, 0, RINGLET_UINT32, 0, comm, s);
    if (!rc && g_rank == 0) rc = ringlet_send(NULL, 0, RINGLET_UINT32, 1, comm, s);
    if (rc) FAIL("empty-in-group: a call in the second group: %s", ringlet_comm_last_error(comm));
    if (ringlet_group_end() != RINGLET_SUCCESS) FAIL("empty-in-group: group_end (2): %s", ringlet_comm_last_error(NULL));
    DEV(D->memcpy_async(out, dout, n * 4, s));
    DEV(D->stream_sync(s));
    if (ringlet_comm_get_async_error(comm) != RINGLET_SUCCESS)
        FAIL("empty-in-group: the second group failed: %s", ringlet_comm_last_error(comm));
    for (size_t i = 0; i < n && g_rank == 1; i++)
        if (out[i] != input(0, i)) FAIL("empty-in-group (2): element %zu is 0x%08x, want 0x%08x", i, out[i], input(0, i));
    DEV(D->mem_free(din));
    DEV(D->mem_free(dout));
    DEV(D->host_free(in));
    DEV(D->host_free(out));
    DEV(D->stream_destroy(s));
}

/* host: all-reduces (blocking and not), an all-gather and a broadcast on host buffers. */
static void host_case(ringlet_comm_t comm, int P, size_t n) {
    uint32_t *in = malloc(n * 4), *out = malloc(n * 4 * (size_t)P);
    if (!in || !out) FAIL("host: out of memory");
    for (size_t i = 0; i < n; i++) in[i] = input(g_rank, i);
    for (int kind = 0; kind < 4; kind++) {
        ringlet_result_t rc = RINGLET_SUCCESS;
        size_t out_n = n;
        memset(out, 0xA5, n * 4 * (size_t)P);
        if (kind == 0) {
            rc = ringlet_allreduce(in, out, n, RINGLET_UINT32, RINGLET_SUM, comm, NULL);
        } else if (kind == 1) {
            ringlet_request_t req;
            rc = ringlet_iallreduce(in, out, n, RINGLET_UINT32, RINGLET_SUM, comm, NULL, &req);
            if (rc == RINGLET_SUCCESS) rc = ringlet_wait(&req);
        } else if (kind == 2) {
            rc = ringlet_allgather(in, out, n, RINGLET_UINT32, comm, NULL);
            out_n = n * (size_t)P;
        } else {
            rc = ringlet_broadcast(in, out, n, RINGLET_UINT32, 1, comm, NULL);
        }
        if (rc != RINGLET_SUCCESS) FAIL("host: %s: %s", g_names[kind], ringlet_comm_last_error(comm));
        check_result(kind, P, n, out, out_n, "host buffers");
    }
    free(in);
    free(out);
}

static void *destroy_thread(void *arg) {
    fresh_destroy *f = arg;
    f->rc = ringlet_comm_destroy(f->comm);
    return NULL;
}

/* Both ranks: one all-reduce on device buffers with a stream, so that the device
 * connections exist (a first call waits for its peers to make theirs, within
 * RINGLET_TIMEOUT) and a later call only queues. */
static void device_warmup(ringlet_comm_t comm, const char *dir) {
    void *d;
    rl_dev_stream_t s;
    DEV(D->mem_alloc(&d, 16));
    DEV(D->stream_create(&s));
    DEV(D->memset_async(d, 0, 16, s));
    if (ringlet_allreduce(d, d, 4, RINGLET_UINT32, RINGLET_SUM, comm, s) != RINGLET_SUCCESS)
        FAIL("warm-up all-reduce on a stream: %s", ringlet_comm_last_error(comm));
    DEV(D->stream_sync(s));
    if (ringlet_comm_get_async_error(comm) != RINGLET_SUCCESS) FAIL("warm-up all-reduce: %s", ringlet_comm_last_error(comm));
    DEV(D->stream_destroy(s));
    DEV(D->mem_free(d));
    /* Both ranks past their check before either goes on (rank 0 may abort next). */
    char path[4096];
    snprintf(path, sizeof path, "%s/warmed.%d", dir, g_rank);
    file_touch(path);
    snprintf(path, sizeof path, "%s/warmed.%d", dir, 1 - g_rank);
    file_wait(path, 60);
}

/* queue-full: see the header. QF_CALLS all-reduces of QF_COUNT uint32 each, on one stream,
 * into buffers of their own; rank 0 makes two, says so, then the rest, while rank 1 joins
 * only once told: rank 0's stream fills (RINGLET_SIM_QUEUE_DEPTH=6) behind waits that only
 * the progress thread's later operations release. */
#define QF_CALLS 12
#define QF_COUNT 1031
static void queue_full_case(ringlet_comm_t comm, int P, const char *dir) {
    if (!strcmp(D->hold_kind(g_dev), "sync")) FAIL("queue-full needs held streams (RINGLET_STREAM_HOLD=memop|kernel)");
    device_warmup(comm, dir);
    uint32_t *host;
    void *din[QF_CALLS], *dout[QF_CALLS];
    rl_dev_stream_t s;
    DEV(D->host_alloc((void **)&host, QF_COUNT * 4));
    DEV(D->stream_create(&s));
    for (int k = 0; k < QF_CALLS; k++) {
        for (size_t i = 0; i < QF_COUNT; i++) host[i] = input(g_rank, i + (size_t)k * QF_COUNT);
        DEV(D->mem_alloc(&din[k], QF_COUNT * 4));
        DEV(D->mem_alloc(&dout[k], QF_COUNT * 4));
        DEV(D->memset_async(dout[k], 0xff, QF_COUNT * 4, s));
        DEV(D->memcpy_async(din[k], host, QF_COUNT * 4, s));
        DEV(D->stream_sync(s)); /* host is refilled next round */
    }
    /* One all-reduce of this size first, on a free stream: a call may allocate the first
     * time, which it must not do once the stream is held. */
    if (ringlet_allreduce(din[0], dout[0], QF_COUNT, RINGLET_UINT32, RINGLET_SUM, comm, s) != RINGLET_SUCCESS)
        FAIL("queue-full: first all-reduce: %s", ringlet_comm_last_error(comm));
    DEV(D->stream_sync(s));
    char path[4096];
    snprintf(path, sizeof path, "%s/queued", dir);
    if (g_rank == 1) file_wait(path, 60);
    for (int k = 0; k < QF_CALLS; k++) {
        if (g_rank == 0 && k == 2) file_touch(path);
        if (ringlet_allreduce(din[k], dout[k], QF_COUNT, RINGLET_UINT32, RINGLET_SUM, comm, s) != RINGLET_SUCCESS)
            FAIL("queue-full: all-reduce %d: %s", k, ringlet_comm_last_error(comm));
    }
    DEV(D->stream_sync(s));
    if (ringlet_comm_get_async_error(comm) != RINGLET_SUCCESS) FAIL("queue-full: %s", ringlet_comm_last_error(comm));
    for (int k = 0; k < QF_CALLS; k++) {
        DEV(D->memcpy_async(host, dout[k], QF_COUNT * 4, s));
        DEV(D->stream_sync(s));
        for (size_t i = 0; i < QF_COUNT; i++) {
            uint32_t want = 0;
            for (int r = 0; r < P; r++) want += input(r, i + (size_t)k * QF_COUNT);
            if (host[i] != want) FAIL("queue-full: all-reduce %d: element %zu is 0x%08x, want 0x%08x", k, i, host[i], want);
        }
        DEV(D->mem_free(din[k]));
        DEV(D->mem_free(dout[k]));
    }
    DEV(D->stream_destroy(s));
    DEV(D->host_free(host));
}

/* two-threads: see the top. Each thread's calls use the same input (the same on every
 * rank), so that which call of the peer's each meets does not matter. */
#define TT_CALLS 200
#define TT_COUNT 257
typedef struct {
    ringlet_comm_t comm;
    rl_dev_stream_t s;
    void *din;
    void *dout[TT_CALLS];
} two_threads_arg;

static void *two_threads_main(void *arg) {
    two_threads_arg *a = arg;
    DEV(D->set_device(g_dev));
    for (int k = 0; k < TT_CALLS; k++)
        if (ringlet_allreduce(a->din, a->dout[k], TT_COUNT, RINGLET_UINT32, RINGLET_SUM, a->comm, a->s) != RINGLET_SUCCESS)
            FAIL("two-threads: all-reduce %d: %s", k, ringlet_comm_last_error(a->comm));
    return NULL;
}

static void two_threads_case(ringlet_comm_t comm, int P, const char *dir) {
    device_warmup(comm, dir);
    uint32_t *host;
    rl_dev_stream_t s;
    void *din;
    DEV(D->host_alloc((void **)&host, TT_COUNT * 4));
    DEV(D->stream_create(&s));
    DEV(D->mem_alloc(&din, TT_COUNT * 4));
    for (size_t i = 0; i < TT_COUNT; i++) host[i] = input(g_rank, i);
    DEV(D->memcpy_async(din, host, TT_COUNT * 4, s));
    two_threads_arg a[2];
    for (int t = 0; t < 2; t++) {
        a[t].comm = comm, a[t].s = s, a[t].din = din;
        for (int k = 0; k < TT_CALLS; k++) {
            DEV(D->mem_alloc(&a[t].dout[k], TT_COUNT * 4));
            DEV(D->memset_async(a[t].dout[k], 0xff, TT_COUNT * 4, s));
        }
    }
    /* One call of this size first, alone: a call may allocate the first time, which it must
     * not do once the stream is held. */
    if (ringlet_allreduce(din, a[0].dout[0], TT_COUNT, RINGLET_UINT32, RINGLET_SUM, comm, s) != RINGLET_SUCCESS)
        FAIL("two-threads: first all-reduce: %s", ringlet_comm_last_error(comm));
    DEV(D->stream_sync(s));
    pthread_t th[2];
    for (int t = 0; t < 2; t++)
        if (pthread_create(&th[t], NULL, two_threads_main, &a[t]) != 0) FAIL("cannot start a thread");
    for (int t = 0; t < 2; t++) pthread_join(th[t], NULL);
    DEV(D->stream_sync(s));
    if (ringlet_comm_get_async_error(comm) != RINGLET_SUCCESS) FAIL("two-threads: %s", ringlet_comm_last_error(comm));
    for (int t = 0; t < 2; t++)
        for (int k = 0; k < TT_CALLS; k++) {
            DEV(D->memcpy_async(host, a[t].dout[k], TT_COUNT * 4, s));
            DEV(D->stream_sync(s));
            char when[64];
            snprintf(when, sizeof when, "(two-threads: thread %d's call %d)", t, k);
            check_result(0, P, TT_COUNT, host, TT_COUNT, when);
            DEV(D->mem_free(a[t].dout[k]));
        }
    DEV(D->mem_free(din));
    DEV(D->stream_destroy(s));
    DEV(D->host_free(host));
}

/* user-stuck: see the top. */
static void user_stuck_case(ringlet_comm_t comm, size_t n, const char *dir) {
    if (D != &rl_device_sim) {
        printf("stream: rank %d: OK user-stuck: skipped (the simulated GPU's rule)\n", g_rank);
        return;
    }
    device_warmup(comm, dir);
    /* Host buffers with the stream: the progress thread waits for the stream's work before
     * the call, and nothing of ringlet's own waits on the device. */
    void *din = calloc(n, 4), *dout = calloc(n, 4), *own = NULL, *flag_mem;
    rl_dev_stream_t s;
    if (!din || !dout) FAIL("user-stuck: out of memory");
    DEV(D->host_alloc(&flag_mem, 64));
    DEV(D->stream_create(&s));
    if (ringlet_mem_alloc(&own, 4096) != RINGLET_SUCCESS) FAIL("user-stuck: %s", ringlet_comm_last_error(NULL));
    /* once on a free stream: the call's preparation (allocations) done before the hold */
    if (ringlet_allreduce(din, dout, n, RINGLET_UINT32, RINGLET_SUM, comm, s) != RINGLET_SUCCESS)
        FAIL("user-stuck: first all-reduce: %s", ringlet_comm_last_error(comm));
    DEV(D->stream_sync(s));
    volatile uint64_t *flag = flag_mem;
    *flag = 0;
    if (g_rank == 1 && rl_rt_sim.launch_wait_flag(flag, 1, s) != RL_RT_SUCCESS)
        FAIL("the program's own flag wait: %s", rl_rt_sim.error_detail());
    ringlet_result_t rc = ringlet_allreduce(din, dout, n, RINGLET_UINT32, RINGLET_SUM, comm, s);
    char why[1024];
    snprintf(why, sizeof why, "%s", ringlet_comm_last_error(comm));
    if (rc == RINGLET_SUCCESS) FAIL("user-stuck: the all-reduce succeeded");
    /* CUDA's free would wait for the program's kernel: ringlet keeps it for later. */
    if (g_rank == 1 && ringlet_mem_free(own) != RINGLET_SUCCESS)
        FAIL("user-stuck: freeing after the failure: %s", ringlet_comm_last_error(NULL));
    __atomic_store_n(flag, 1, __ATOMIC_RELEASE);
    DEV(D->stream_sync(s));
    ringlet_comm_destroy(comm);
    if (g_rank == 0) ringlet_mem_free(own);
    printf("stream: rank %d: OK user-stuck: the all-reduce failed (%d: %.300s)%s\n", g_rank, (int)rc, why,
           g_rank == 1 ? ", and a free after it returned" : "");
    DEV(D->stream_destroy(s));
    free(din);
    free(dout);
    DEV(D->host_free(flag_mem));
}

/* pending-copies, failed-copies and abort-copies: n uint32 on device memory, or pinned host
 * memory (filled with this rank's input), a flag for the program's own kernel, two streams,
 * and a warm-up send/receive over them (the connections made, nothing held). */
static void copies_setup(ringlet_comm_t comm, size_t n, int pinned, void **d, rl_dev_stream_t *s,
                         rl_dev_stream_t *spin, volatile uint64_t **flag) {
    if (pinned) {
        DEV(D->host_alloc(d, n * 4));
        for (size_t i = 0; i < n; i++) ((uint32_t *)*d)[i] = input(g_rank, i);
    } else {
        DEV(D->mem_alloc(d, n * 4));
    }
    DEV(D->host_alloc((void **)flag, 64)); /* allocations before any hold */
    **flag = 0;
    DEV(D->stream_create(s));
    DEV(D->stream_create(spin));
    ringlet_result_t rc = g_rank == 0 ? ringlet_send(*d, n, RINGLET_UINT32, 1, comm, *s)
                                      : ringlet_recv(*d, n, RINGLET_UINT32, 0, comm, *s);
    if (rc != RINGLET_SUCCESS) FAIL("warm-up send/receive: %s", ringlet_comm_last_error(comm));
    DEV(D->stream_sync(*s));
    if (ringlet_comm_get_async_error(comm) != RINGLET_SUCCESS)
        FAIL("warm-up send/receive: %s", ringlet_comm_last_error(comm));
}

/* failed-copies: ends the program's kernel 50 ms after the communicator reports its
 * failure, and says so in released. */
typedef struct {
    ringlet_comm_t comm;
    volatile uint64_t *flag;
    atomic_int released;
} releaser_arg;

static void *releaser_main(void *p) {
    releaser_arg *a = p;
    for (double until = now_s() + 120; ringlet_comm_get_async_error(a->comm) == RINGLET_SUCCESS && now_s() < until;) {
        struct timespec ts = {0, 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    struct timespec ts = {0, 50 * 1000 * 1000};
    nanosleep(&ts, NULL);
    atomic_store(&a->released, 1);
    __atomic_store_n(a->flag, 1, __ATOMIC_RELEASE);
    return NULL;
}

/* pending-copies and failed-copies (see the top): n uint32 from rank 0 to rank 1 over
 * cuda_ipc or shm; release: failed-copies. */
static void pending_copies_case(ringlet_comm_t comm, size_t n, const char *dir, int release) {
    const char *cas = release ? "failed-copies" : "pending-copies";
    if (D != &rl_device_sim) {
        printf("stream: rank %d: OK %s: skipped (the simulated GPU's rule; a GPU would not stop the "
               "process)\n",
               g_rank, cas);
        ringlet_comm_destroy(comm);
        return;
    }
    const rl_rt *R = &rl_rt_sim;
    void *d;
    rl_dev_stream_t s, spin;
    volatile uint64_t *flag;
    /* failed-copies: pinned host buffers over cuda_ipc (RINGLET_TRANSPORT=cuda_ipc): its
     * device copies are the call's only device work (no staging of the communicator's to
     * drain, which would wait behind the kernel too), and asynchronous (into pageable
     * memory a copy returns only once done, as CUDA's). */
    copies_setup(comm, n, release, &d, &s, &spin, &flag);
    char held[4096], finished[4096];
    snprintf(held, sizeof held, "%s/held", dir);
    snprintf(finished, sizeof finished, "%s/finished", dir);
    if (g_rank == 0) {
        file_wait(held, 60);
        /* Fails in time (rank 1 never takes the data), or finishes: either is fine here. */
        ringlet_send(d, n, RINGLET_UINT32, 1, comm, s);
        file_wait(finished, 120);
        ringlet_comm_abort(comm);
        ringlet_comm_destroy(comm);
        printf("stream: rank 0: OK %s (the sending side)\n", cas);
        return;
    }
    /* Memory the program gives back after the failure, while its kernel still spins. */
    void *own_dev = NULL, *own_pinned = NULL;
    if (!release && (ringlet_mem_alloc(&own_dev, 4096) != RINGLET_SUCCESS ||
                     ringlet_host_alloc(&own_pinned, 4096) != RINGLET_SUCCESS))
        FAIL("pending-copies: allocating: %s", ringlet_comm_last_error(NULL));
    /* The program's own kernel spins on the one hardware queue: the device work queued
     * after it (the receive's copies) does not start until the flag is set. */
    if (R->launch_wait_flag(flag, 1, spin) != RL_RT_SUCCESS) FAIL("the program's own flag wait: %s", R->error_detail());
    releaser_arg rel = {comm, flag, 0};
    pthread_t th;
    if (release && pthread_create(&th, NULL, releaser_main, &rel) != 0) FAIL("cannot start a thread");
    file_touch(held);
    /* Without a stream: nothing of the call waits on the device before its copies. */
    ringlet_result_t a = ringlet_recv(d, n, RINGLET_UINT32, 0, comm, NULL);
    int released = atomic_load(&rel.released);
    char why[1024];
    snprintf(why, sizeof why, "%s", ringlet_comm_last_error(comm));
    if (a == RINGLET_SUCCESS) FAIL("the receive whose copies cannot run succeeded");
    if (release) {
        pthread_join(th, NULL);
        if (!released)
            FAIL("failed-copies: the receive failed (%d: %.300s) and returned before its device copies into the buffer "
                 "could run (the kernel they wait behind was still running): the buffer was handed back with "
                 "ringlet's copies still to write it",
                 (int)a, why);
    }
    /* Frees of the program's through ringlet after its device work timed out: CUDA's would
     * wait behind the kernel (the simulator refuses that as a deadlock); ringlet keeps them
     * for later. */
    if (!release && (ringlet_mem_free(own_dev) != RINGLET_SUCCESS || ringlet_host_free(own_pinned) != RINGLET_SUCCESS))
        FAIL("pending-copies: freeing after the failure: %s", ringlet_comm_last_error(NULL));
    ringlet_comm_destroy(comm); /* with the copies still queued behind the program's kernel */
    __atomic_store_n(flag, 1, __ATOMIC_RELEASE);
    DEV(D->stream_sync(spin));
    DEV(D->stream_sync(s));
    /* The queued copies ran, reading slots that were still mapped: nothing faulted. */
    void *probe;
    DEV(D->mem_alloc(&probe, 64)); /* waits for every stream; fails after a fault */
    DEV(D->mem_free(probe));
    file_touch(finished);
    if (release)
        printf("stream: rank 1: OK failed-copies: the receive failed (%d: %.300s) once its queued copies had run\n",
               (int)a, why);
    else
        printf("stream: rank 1: OK pending-copies: the receive failed (%d: %.300s), the destroy left the slots of its "
               "queued copies mapped, and they ran after\n",
               (int)a, why);
    DEV(D->stream_destroy(spin));
    DEV(D->stream_destroy(s));
    if (release) DEV(D->host_free(d));
    else DEV(D->mem_free(d));
    DEV(D->host_free((void *)flag));
}

typedef struct {
    ringlet_comm_t comm;
    void *buf;
    size_t n;
    ringlet_result_t rc;
} recv_arg;

static void *recv_main(void *p) {
    recv_arg *a = p;
    a->rc = ringlet_recv(a->buf, a->n, RINGLET_UINT32, 0, a->comm, NULL);
    return NULL;
}

/* abort-copies (see the top). */
static void abort_copies_case(ringlet_comm_t comm, const char *dir) {
    if (D != &rl_device_sim) {
        printf("stream: rank %d: OK abort-copies: skipped (one hardware queue held: the simulated GPU's)\n", g_rank);
        ringlet_comm_destroy(comm);
        return;
    }
    enum { N = 4099 }; /* small: it fits the slots or staging whole, so the send ends */
    const char *tr = getenv("RINGLET_TRANSPORT");
    int pinned = tr && !strcmp(tr, "cuda_ipc");
    void *d;
    rl_dev_stream_t s, spin;
    volatile uint64_t *flag;
    copies_setup(comm, N, pinned, &d, &s, &spin, &flag);
    char held[4096], sent[4096], finished[4096];
    snprintf(held, sizeof held, "%s/held", dir);
    snprintf(sent, sizeof sent, "%s/sent", dir);
    snprintf(finished, sizeof finished, "%s/finished", dir);
    if (g_rank == 0) {
        file_wait(held, 60);
        if (ringlet_send(d, N, RINGLET_UINT32, 1, comm, NULL) != RINGLET_SUCCESS)
            FAIL("the send: %s", ringlet_comm_last_error(comm));
        file_touch(sent);
        file_wait(finished, 120);
        ringlet_comm_destroy(comm);
    } else {
        if (rl_rt_sim.launch_wait_flag(flag, 1, spin) != RL_RT_SUCCESS)
            FAIL("the program's own flag wait: %s", rl_rt_sim.error_detail());
        recv_arg a = {comm, d, N, RINGLET_SUCCESS};
        pthread_t th;
        if (pthread_create(&th, NULL, recv_main, &a) != 0) FAIL("cannot start a thread");
        file_touch(held);
        file_wait(sent, 60);
        struct timespec ts = {0, 50 * 1000 * 1000};
        nanosleep(&ts, NULL);
        ringlet_comm_abort(comm); /* with the receive's copies queued behind the kernel */
        __atomic_store_n(flag, 1, __ATOMIC_RELEASE);
        pthread_join(th, NULL);
        if (a.rc == RINGLET_SUCCESS) FAIL("abort-copies: the receive succeeded, though its communicator was aborted");
        DEV(D->stream_sync(spin));
        ringlet_comm_destroy(comm);
        file_touch(finished);
    }
    DEV(D->stream_sync(s));
    printf("stream: rank %d: OK abort-copies: the abort returned with the receive's copies queued\n", g_rank);
    DEV(D->stream_destroy(spin));
    DEV(D->stream_destroy(s));
    if (pinned) DEV(D->host_free(d));
    else DEV(D->mem_free(d));
    DEV(D->host_free((void *)flag));
}

int main(int argc, char **argv) {
    const char *cas = "order", *dir = ".";
    size_t n = 300007;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--case") && i + 1 < argc) cas = argv[++i];
        else if (!strcmp(argv[i], "--count") && i + 1 < argc) n = strtoull(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--dir") && i + 1 < argc) dir = argv[++i];
        else {
            fprintf(stderr, "usage: stream --case order|abort|async|devices|fresh|host|probe-device|pidns|probe-order|legacy"
                            "|legacy-devices|capture|capture-other|capture-self|sticky|per-thread|pending-copies|failed-copies|abort-copies|empty-in-group"
                            "|queue-full|two-threads|user-stuck "
                            "[--count N] "
                            "[--dir D]\n");
            return 2;
        }
    }
    setvbuf(stdout, NULL, _IOLBF, 0);
    int failed_copies = !strcmp(cas, "failed-copies"), abort_copies = !strcmp(cas, "abort-copies");
    int pending = failed_copies || abort_copies || !strcmp(cas, "pending-copies");
    if (pending && getenv("RANK") && !strcmp(getenv("RANK"), "0")) {
        /* Only rank 1 shares one hardware queue (rank 0's copies must run). */
        unsetenv("CUDA_DEVICE_MAX_CONNECTIONS");
    }
    D = rl_device();
    if (!D) {
        printf("SKIP: no device backend: %s\n", rl_device_unavailable());
        return 77;
    }
    int fresh = !strcmp(cas, "fresh");
    if (fresh) DEV(D->set_device(1)); /* this process uses device 1 only, from init on */
    const char *env_rank = getenv("RANK");
    int probe_device = !strcmp(cas, "probe-device");
    if (probe_device && env_rank && !strcmp(env_rank, "0")) { /* a context on device 0 at init */
        void *p = NULL;
        DEV(D->set_device(0));
        DEV(D->mem_alloc(&p, 4096));
        DEV(D->mem_free(p));
    }
    ringlet_comm_t comm;
    if (ringlet_comm_init_env(&comm) != RINGLET_SUCCESS) FAIL("%s", ringlet_comm_last_error(NULL));
    int P;
    ringlet_comm_rank(comm, &g_rank);
    ringlet_comm_size(comm, &P);
    if (P != 2) FAIL("run with 2 ranks");
    int ndev = 1;
    DEV(D->count(&ndev));
    if (!strcmp(cas, "pidns")) {
        pidns_case(comm, n, dir);
        printf("stream: rank %d: OK pidns\n", g_rank);
        return 0;
    }
    if (!strcmp(cas, "probe-order")) {
        probe_order_case(comm, P, n, dir, g_rank % ndev);
        printf("stream: rank %d: OK probe-order\n", g_rank);
        return 0;
    }
    if (!strcmp(cas, "host")) {
        host_case(comm, P, n);
        if (ringlet_comm_destroy(comm) != RINGLET_SUCCESS) FAIL("destroy");
        for (int d = 0; d < ndev; d++) {
            int active = -1;
            DEV(D->context_active(d, &active));
            if (active) FAIL("host: device %d has a context, but this process used host buffers only", d);
        }
        printf("stream: rank %d: OK host: host buffers only, no context on any of %d devices\n", g_rank, ndev);
        return 0;
    }
    g_dev = fresh ? 1 : probe_device ? ndev - 1 : g_rank % ndev;
    DEV(D->set_device(g_dev));
    if (ringlet_barrier(comm, NULL) != RINGLET_SUCCESS) FAIL("warm-up barrier: %s", ringlet_comm_last_error(comm));
    char path[4096];

    if (!strcmp(cas, "empty-in-group")) {
        empty_in_group_case(comm, n);
        if (ringlet_comm_destroy(comm) != RINGLET_SUCCESS) FAIL("destroy");
        printf("stream: rank %d: OK empty-in-group\n", g_rank);
        return 0;
    }
    if (!strcmp(cas, "user-stuck")) {
        user_stuck_case(comm, n, dir);
        return 0;
    }
    if (!strcmp(cas, "two-threads")) {
        two_threads_case(comm, P, dir);
        if (ringlet_comm_destroy(comm) != RINGLET_SUCCESS) FAIL("destroy");
        printf("stream: rank %d: OK two-threads: %d all-reduces from each of two threads on one stream, each exact\n",
               g_rank, TT_CALLS);
        return 0;
    }
    if (!strcmp(cas, "queue-full")) {
        queue_full_case(comm, P, dir);
        if (ringlet_comm_destroy(comm) != RINGLET_SUCCESS) FAIL("destroy");
        printf("stream: rank %d: OK queue-full: %d all-reduces on one stream whose queue filled, each exact\n", g_rank,
               QF_CALLS);
        return 0;
    }
    if (!strcmp(cas, "order")) {
        for (int kind = 0; kind < 4; kind++) order_round(comm, P, kind, n, 0);
        for (int kind = 0; kind < 4; kind++) order_round(comm, P, kind, n, 1);
        if (ringlet_comm_destroy(comm) != RINGLET_SUCCESS) FAIL("destroy");
        printf("stream: rank %d: OK order\n", g_rank);
        return 0;
    }

    if (!strcmp(cas, "abort")) {
        device_warmup(comm, dir);
        snprintf(path, sizeof path, "%s/aborted", dir);
        if (g_rank == 1) {
            /* Never joins the all-reduce: waits until rank 0 has aborted, then aborts too. */
            file_wait(path, 60);
            ringlet_comm_abort(comm);
            ringlet_comm_destroy(comm);
            printf("stream: rank 1: OK abort (the idle side)\n");
            return 0;
        }
        void *d;
        uint32_t *host;
        rl_dev_stream_t s;
        rl_dev_event_t done;
        DEV(D->host_alloc((void **)&host, 16));
        DEV(D->mem_alloc(&d, 16));
        DEV(D->stream_create(&s));
        DEV(D->event_create(&done));
        /* On the simulated GPU the program's own work ahead of the call keeps the stream
         * from reaching the call's wait until after the abort (a flag wait the library does
         * not know of): the communicator's flag must outlive that wait, which reads it. */
        volatile uint64_t *own = NULL;
        ringlet_request_t ahead = NULL;
        static uint32_t hv[4];
        if (D == &rl_device_sim) {
            DEV(D->host_alloc((void **)&own, 64));
            *own = 0;
            if (rl_rt_sim.launch_wait_flag(own, 1, s) != RL_RT_SUCCESS)
                FAIL("the program's own flag wait: %s", rl_rt_sim.error_detail());
            /* An operation ahead that rank 1 never joins: the stream call is never begun
             * (nothing of it on the library's streams), so only its wait on the program's
             * stream reads the flag after the abort. */
            if (ringlet_iallreduce(hv, hv, 4, RINGLET_UINT32, RINGLET_SUM, comm, NULL, &ahead) != RINGLET_SUCCESS)
                FAIL("the all-reduce ahead: %s", ringlet_comm_last_error(comm));
        }
        DEV(D->memcpy_async(d, host, 16, s));
        if (ringlet_allreduce(d, d, 4, RINGLET_UINT32, RINGLET_SUM, comm, s) != RINGLET_SUCCESS)
            FAIL("allreduce on a stream: %s", ringlet_comm_last_error(comm));
        DEV(D->memcpy_async(host, d, 16, s)); /* pinned: queued behind the held call, not waited for */
        DEV(D->event_record(done, s));
        if (D->event_query(done) == RL_DEV_OK) FAIL("the stream went on although rank 1 never joined");
        double t0 = now_s();
        if (ringlet_comm_abort(comm) != RINGLET_SUCCESS) FAIL("abort");
        double ta = now_s() - t0;
        file_touch(path);
        if (own) __atomic_store_n(own, 1, __ATOMIC_RELEASE);
        if (ahead && ringlet_wait(&ahead) == RINGLET_SUCCESS) FAIL("the all-reduce ahead succeeded without rank 1");
        if (!event_done_within(done, 30)) FAIL("the stream is still held 30 s after abort");
        ringlet_result_t a = ringlet_comm_get_async_error(comm);
        if (a == RINGLET_SUCCESS) FAIL("get_async_error is success after an abort with a stream call pending");
        ringlet_comm_destroy(comm);
        DEV(D->event_destroy(done));
        DEV(D->stream_destroy(s));
        DEV(D->mem_free(d));
        DEV(D->host_free(host));
        if (own) DEV(D->host_free((void *)own));
        printf("stream: rank 0: OK abort: returned in %.2f s, the stream went on, async error %d (%s)\n", ta, (int)a,
               ringlet_strerror(a));
        return 0;
    }

    if (!strcmp(cas, "async")) {
        device_warmup(comm, dir);
        snprintf(path, sizeof path, "%s/warm", dir);
        if (g_rank == 1) {
            /* Leaves only once rank 0's warm-up barrier has returned: this rank's last
             * message of it may still be on its way when its own barrier returns. */
            file_wait(path, 60);
            printf("stream: rank 1: OK async (leaving without destroy)\n");
            fflush(stdout);
            _exit(0);
        }
        file_touch(path);
        void *d;
        uint32_t host[4] = {1, 2, 3, 4};
        rl_dev_stream_t s;
        rl_dev_event_t done;
        DEV(D->mem_alloc(&d, sizeof host));
        DEV(D->stream_create(&s));
        DEV(D->event_create(&done));
        DEV(D->memcpy_async(d, host, sizeof host, s));
        double t0 = now_s();
        ringlet_result_t rc = ringlet_allreduce(d, d, 4, RINGLET_UINT32, RINGLET_SUM, comm, s);
        /* The call may return the failure at once (the monitor already heard), or queue. */
        DEV(D->event_record(done, s));
        if (!event_done_within(done, 60)) FAIL("the stream is still held 60 s after rank 1 left");
        ringlet_result_t a = ringlet_comm_get_async_error(comm);
        for (double until = now_s() + 60; a == RINGLET_SUCCESS && now_s() < until; a = ringlet_comm_get_async_error(comm)) {
            struct timespec ts = {0, 10 * 1000 * 1000};
            nanosleep(&ts, NULL);
        }
        const char *msg = ringlet_comm_last_error(comm);
        if (a == RINGLET_SUCCESS) FAIL("get_async_error is still success 60 s after rank 1 left (call returned %d)", (int)rc);
        if (!strstr(msg, "rank 1")) FAIL("the error does not name rank 1: %s", msg);
        printf("stream: rank 0: OK async: error %d (%s) after %.2f s: %s\n", (int)a, ringlet_strerror(a), now_s() - t0, msg);
        ringlet_comm_abort(comm);
        ringlet_comm_destroy(comm);
        DEV(D->event_destroy(done));
        DEV(D->stream_destroy(s));
        DEV(D->mem_free(d));
        return 0;
    }
    if (probe_device) {
        rl_dev_stream_t s;
        DEV(D->stream_create(&s));
        checked_allreduce(comm, P, n, s, g_dev, "both ranks' buffers on the last device, rank 0 at init on device 0");
        DEV(D->stream_destroy(s));
        if (ringlet_comm_destroy(comm) != RINGLET_SUCCESS) FAIL("destroy");
        printf("stream: rank %d: OK probe-device (device %d of %d)\n", g_rank, g_dev, ndev);
        return 0;
    }
    if (!strcmp(cas, "devices")) {
        if (ndev < 2) FAIL("the devices case needs two devices (RINGLET_SIM_DEVICES=2), %d here", ndev);
        DEV(D->set_device(1));
        rl_dev_stream_t s;
        DEV(D->stream_create(&s));
        checked_allreduce(comm, P, n, s, 0, "a stream of device 1 called from device 0");
        DEV(D->stream_destroy(s));
        /* Device 1's buffers with a stream of device 0: refused at the call, by both ranks
         * (nothing is exchanged), and the communicator still works. */
        DEV(D->set_device(0));
        DEV(D->stream_create(&s));
        DEV(D->set_device(1));
        void *d1;
        DEV(D->mem_alloc(&d1, 64));
        ringlet_result_t rc = ringlet_allreduce(d1, d1, 16, RINGLET_UINT32, RINGLET_SUM, comm, s);
        if (rc != RINGLET_ERR_INVALID_ARGUMENT || !strstr(ringlet_comm_last_error(comm), "the stream is of device 0"))
            FAIL("devices: device 1's buffers with a stream of device 0: %d (%s), want a refusal", (int)rc,
                 ringlet_comm_last_error(comm));
        DEV(D->mem_free(d1));
        DEV(D->stream_destroy(s));
        DEV(D->stream_create(&s));
        checked_allreduce(comm, P, n, s, 0, "device 1's stream after a refused call");
        DEV(D->stream_destroy(s));
        if (ringlet_comm_destroy(comm) != RINGLET_SUCCESS) FAIL("destroy");
        printf("stream: rank %d: OK devices: device 1's stream and buffers, called with device 0 current\n", g_rank);
        return 0;
    }

    if (fresh) {
        if (ndev < 2) FAIL("the fresh case needs two devices (RINGLET_SIM_DEVICES=2), %d here", ndev);
        fresh_case(comm, P, n);
        fresh_destroy fd = {comm, RINGLET_ERR_INTERNAL};
        pthread_t t;
        if (pthread_create(&t, NULL, destroy_thread, &fd) != 0) FAIL("fresh: cannot start a thread");
        pthread_join(t, NULL);
        if (fd.rc != RINGLET_SUCCESS) FAIL("destroy from a new thread");
        int active = -1;
        DEV(D->context_active(0, &active));
        if (active) FAIL("fresh: device 0 has a context, but this process used device 1 only");
        printf("stream: rank %d: OK fresh: calls from a thread that never chose a device, no context on device 0\n",
               g_rank);
        return 0;
    }

    if (!strcmp(cas, "capture")) {
        rl_dev_stream_t s;
        void *din, *dout;
        DEV(D->stream_create(&s));
        DEV(D->mem_alloc(&din, n * 4)); /* before the capture: an allocation during it fails */
        DEV(D->mem_alloc(&dout, n * 4));
        DEV(D->stream_begin_capture(s));
        int yes = 0;
        DEV(D->stream_capturing(s, &yes));
        if (!yes) FAIL("the stream does not say it is capturing");
        ringlet_result_t rc = ringlet_allreduce(din, dout, n, RINGLET_UINT32, RINGLET_SUM, comm, s);
        const char *msg = ringlet_comm_last_error(comm);
        if (rc != RINGLET_ERR_INVALID_USAGE || !strstr(msg, "capturing a CUDA graph"))
            FAIL("an all-reduce on a capturing stream returned %d (%s), want %d naming the capture",
                 (int)rc, msg, (int)RINGLET_ERR_INVALID_USAGE);
        if (D->stream_end_capture(s) != RL_DEV_OK) FAIL("the capture did not end cleanly: %s", rl_dev_error());
        char refused[512];
        snprintf(refused, sizeof refused, "%s", msg);
        DEV(D->mem_free(din));
        DEV(D->mem_free(dout));
        checked_allreduce(comm, P, n, s, g_rank % ndev, "the stream after its capture");
        DEV(D->stream_destroy(s));
        if (ringlet_comm_destroy(comm) != RINGLET_SUCCESS) FAIL("destroy");
        printf("stream: rank %d: OK capture: refused (%s), the capture ended cleanly, then all-reduces on the stream "
               "as before\n",
               g_rank, refused);
        return 0;
    }

    if (!strcmp(cas, "capture-other")) {
        capture_other_case(comm, P, n);
        if (ringlet_comm_destroy(comm) != RINGLET_SUCCESS) FAIL("destroy");
        printf("stream: rank %d: OK capture-other: all-reduces right while another thread captured, and its capture "
               "ended cleanly\n",
               g_rank);
        return 0;
    }

    if (!strcmp(cas, "capture-self")) {
        capture_self_case(comm, P, n);
        if (ringlet_comm_destroy(comm) != RINGLET_SUCCESS) FAIL("destroy");
        printf("stream: rank %d: OK capture-self: an exact all-reduce on another stream while this thread captured, "
               "and its capture ended cleanly\n",
               g_rank);
        return 0;
    }

    if (!strcmp(cas, "sticky")) {
        sticky_case(comm, P, n, dir);
        return 0;
    }

    if (!strcmp(cas, "per-thread")) {
        /* Two communicators, one per thread (calls of one communicator from two threads at
         * once are not ordered the same on both ranks). */
        ringlet_comm_t second;
        if (ringlet_comm_split(comm, 0, g_rank, &second) != RINGLET_SUCCESS) FAIL("split: %s", ringlet_comm_last_error(comm));
        per_thread_arg a = {second, P, n};
        pthread_t th;
        if (pthread_create(&th, NULL, per_thread_main, &a) != 0) FAIL("cannot start a thread");
        checked_allreduce(comm, P, n, STREAM_PER_THREAD, g_dev, "cudaStreamPerThread, main thread");
        pthread_join(th, NULL);
        if (ringlet_comm_destroy(second) != RINGLET_SUCCESS) FAIL("destroy");
        if (ringlet_comm_destroy(comm) != RINGLET_SUCCESS) FAIL("destroy");
        printf("stream: rank %d: OK per-thread: all-reduces on cudaStreamPerThread from two threads at once\n", g_rank);
        return 0;
    }

    if (abort_copies) {
        abort_copies_case(comm, dir);
        return 0;
    }
    if (pending) {
        pending_copies_case(comm, n, dir, failed_copies);
        return 0;
    }

    if (!strcmp(cas, "legacy-devices")) {
        if (ndev < 2) FAIL("the legacy-devices case needs two devices (RINGLET_SIM_DEVICES=2), %d here", ndev);
        int held = 0;
        for (uint32_t k = 0; k < 3; k++) {
            held = strcmp(D->hold_kind(1), "sync") != 0; /* chosen once device 1 is ready: after round 0 */
            legacy_devices_round(comm, P, n, k == 2 && held && g_rank == 0, k);
        }
        if (ringlet_comm_destroy(comm) != RINGLET_SUCCESS) FAIL("destroy");
        printf("stream: rank %d: OK legacy-devices: device 1's default stream, called with device 0 current%s\n", g_rank,
               held && g_rank == 0 ? " (held behind a flag)" : "");
        return 0;
    }
    if (!strcmp(cas, "legacy")) {
        checked_allreduce(comm, P, n, (rl_dev_stream_t)RINGLET_STREAM_DEFAULT, g_rank % ndev, "the legacy stream");
        if (ringlet_comm_destroy(comm) != RINGLET_SUCCESS) FAIL("destroy");
        printf("stream: rank %d: OK legacy: all-reduces ordered on the legacy default stream\n", g_rank);
        return 0;
    }
    FAIL("unknown case %s", cas);
}
