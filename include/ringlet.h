/* ringlet: collective communication without NCCL.
 *
 * The one public header. C11, C ABI, no CUDA types: a CUDA stream is passed as an
 * opaque `void *stream` (NULL = host buffers: a blocking call runs on the caller's thread
 * when the communicator is idle (RINGLET_INLINE=0: never), else on its progress thread, and
 * returns when the result is in place; a non-blocking one on the progress thread, but a host
 * send or receive is posted on the caller's thread when the communicator is idle). A call with
 * a stream starts after the stream's earlier work and returns once its operation is done;
 * with RINGLET_STREAM_HOLD=memop|kernel it returns at once and the stream waits for it
 * (README.md, "Holding streams").
 *
 * Values of ringlet_result_t, ringlet_datatype_t and ringlet_op_t equal NCCL's so
 * that the NCCL compatibility layer stays a thin cast.
 */
#ifndef RINGLET_H
#define RINGLET_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define RINGLET_VERSION_MAJOR 0
#define RINGLET_VERSION_MINOR 1
#define RINGLET_VERSION_PATCH 0

/* Result codes: one to one with NCCL's ncclResult_t, plus a timeout. The message
 * of the last error (ringlet_comm_last_error) names the argument, peer or operation. */
typedef enum {
    RINGLET_SUCCESS = 0,
    RINGLET_ERR_CUDA = 1,             /* a CUDA call failed */
    RINGLET_ERR_SYSTEM = 2,           /* a system call failed (socket, memory, ...) */
    RINGLET_ERR_INTERNAL = 3,         /* a bug in ringlet */
    RINGLET_ERR_INVALID_ARGUMENT = 4, /* null pointer, bad dtype/op, rank out of range, size overflow */
    RINGLET_ERR_INVALID_USAGE = 5,    /* a call the communicator's state does not allow (aborted, a forked
                                         child's) */
    RINGLET_ERR_REMOTE = 6,           /* a peer failed or closed its connection (later calls on a failed
                                         communicator return the code it failed with) */
    RINGLET_IN_PROGRESS = 7,          /* a non-blocking operation is not finished yet */
    RINGLET_ERR_TIMEOUT = 8,          /* a deadline (RINGLET_TIMEOUT) passed */
    RINGLET_NUM_RESULTS = 9
} ringlet_result_t;

typedef enum {
    RINGLET_INT8 = 0,
    RINGLET_UINT8 = 1,
    RINGLET_INT32 = 2,
    RINGLET_UINT32 = 3,
    RINGLET_INT64 = 4,
    RINGLET_UINT64 = 5,
    RINGLET_FLOAT16 = 6,
    RINGLET_FLOAT32 = 7,
    RINGLET_FLOAT64 = 8,
    RINGLET_BFLOAT16 = 9,
    RINGLET_NUM_DATATYPES = 10
} ringlet_datatype_t;

/* Integer sum and prod wrap modulo 2^bits (two's complement); integer avg is the
 * wrapped sum divided by the number of ranks, truncated toward zero. */
typedef enum {
    RINGLET_SUM = 0,
    RINGLET_PROD = 1,
    RINGLET_MAX = 2,
    RINGLET_MIN = 3,
    RINGLET_AVG = 4,
    RINGLET_NUM_OPS = 5
} ringlet_op_t;

#define RINGLET_UNIQUE_ID_BYTES 128
typedef struct {
    char internal[RINGLET_UNIQUE_ID_BYTES];
} ringlet_unique_id_t;

typedef struct ringlet_comm *ringlet_comm_t;
typedef struct ringlet_request *ringlet_request_t;

/* As a stream argument: the device's default stream (CUDA's legacy default stream, which
 * NCCL programs mean by a stream of 0). Without a device backend: no stream (blocking).
 * For a communication call, this handle and CUDA's per-thread default stream handle (0x2)
 * name that stream of the call's device, whatever device is current (as NCCL takes stream 0
 * on its communicator's device): the buffers' device, or the communicator's for host buffers.
 * Any other stream on device buffers must be of the buffers' device, else
 * RINGLET_ERR_INVALID_ARGUMENT. */
#define RINGLET_STREAM_DEFAULT ((void *)1)

/* ---- errors ---- */
const char *ringlet_strerror(ringlet_result_t result);
/* Message of the last error on this communicator (never NULL; "" when none). With a
 * NULL comm: the calling thread's last error, for calls that have no communicator
 * yet (init, unique id). */
const char *ringlet_comm_last_error(ringlet_comm_t comm);
size_t ringlet_datatype_size(ringlet_datatype_t datatype); /* 0 for an unknown type */
const char *ringlet_version(void);

/* ---- communicators ---- */
/* Rank 0 of the job calls this and hands the id to every rank (through MPI, a file,
 * ...). The process that made the id must be the one that calls init as rank 0: it
 * already listens on the id's address. The id carries a random job secret. */
ringlet_result_t ringlet_get_unique_id(ringlet_unique_id_t *id);
/* Gives back an id of ringlet_get_unique_id that no init will use: its listening socket is
 * closed (a process holds at most 64 ids that no init has used yet). An id this process did
 * not make, or one an init has taken, is left alone (success). */
ringlet_result_t ringlet_unique_id_release(const ringlet_unique_id_t *id);
ringlet_result_t ringlet_comm_init_rank(ringlet_comm_t *comm, int nranks, ringlet_unique_id_t id, int rank);
/* From the launcher's environment: torchrun's MASTER_ADDR, MASTER_PORT, RANK,
 * WORLD_SIZE, LOCAL_RANK; Slurm's SLURM_PROCID/SLURM_NTASKS; Open MPI's
 * OMPI_COMM_WORLD_RANK/OMPI_COMM_WORLD_SIZE. The secret comes from RINGLET_SECRET. */
ringlet_result_t ringlet_comm_init_env(ringlet_comm_t *comm);
/* An init that another thread can stop (a watchdog's deadline, an abort while peers are
 * still missing): once ringlet_stop_token_fire(token) is called, from any thread, the
 * init waiting with that token returns RINGLET_ERR_INVALID_USAGE ("aborted while it
 * ran") within about 100 ms; its peers' inits then fail too. Firing after init returned
 * has no effect (abort the communicator instead). A token serves one init at a time and
 * stays fired; ringlet_comm_init_rank is this with token NULL. */
typedef struct ringlet_stop_token *ringlet_stop_token_t;
ringlet_result_t ringlet_stop_token_create(ringlet_stop_token_t *token);
void ringlet_stop_token_fire(ringlet_stop_token_t token);
void ringlet_stop_token_destroy(ringlet_stop_token_t token);
ringlet_result_t ringlet_comm_init_rank_stoppable(ringlet_comm_t *comm, int nranks, ringlet_unique_id_t id, int rank,
                                                  ringlet_stop_token_t token);
/* Per-communicator settings for ringlet_comm_init_rank_config. Set struct_size to
 * sizeof(ringlet_comm_config_t) (fields added later go at the end; a library reads only
 * the fields the caller's size covers) and leave what you do not set at 0:
 *   timeout_s   the deadline of every wait on this communicator, its init included, in
 *               seconds (0.1 to 1e7), as RINGLET_TIMEOUT is for the others; 0: RINGLET_TIMEOUT.
 * A communicator split from it keeps its deadline. (Frameworks use it for their own
 * per-group timeout, e.g. the timeout of torch's init_process_group and new_group.) */
typedef struct {
    size_t struct_size;
    double timeout_s;
} ringlet_comm_config_t;
#define RINGLET_COMM_CONFIG_INIT {sizeof(ringlet_comm_config_t), 0.0}
/* ringlet_comm_init_rank with settings (config NULL: the defaults, as init_rank). */
ringlet_result_t ringlet_comm_init_rank_config(ringlet_comm_t *comm, int nranks, ringlet_unique_id_t id, int rank,
                                               const ringlet_comm_config_t *config);
/* Collective clean shutdown: frees everything, including requests never completed
 * by test/wait (their transfers are stopped; they may not be used afterwards). Rank 0
 * waits (within the deadline) for the others' destroy so that no rank mistakes a clean
 * exit for a failure. A call of another thread still inside (one that an abort ended,
 * leaving) is waited for before anything is freed, as is an abort under way; past the
 * deadline destroy returns RINGLET_ERR_TIMEOUT and leaves the memory allocated rather than
 * free it under that call (a later destroy waits again, and frees it once they left). */
ringlet_result_t ringlet_comm_destroy(ringlet_comm_t comm);
/* Stops every operation at once, closes every connection, frees every resource but the
 * handle itself, which answers later calls with an error until ringlet_comm_destroy
 * frees it (destroy after abort waits for no peer, only for this process's calls still
 * leaving). Always returns, from any thread, also while another thread waits in a call
 * on comm (that call then returns an error; any thread may destroy comm at once: the
 * destroy waits for the abort's teardown and for the calls to leave). Peers see this
 * rank as failed. */
ringlet_result_t ringlet_comm_abort(ringlet_comm_t comm);
ringlet_result_t ringlet_comm_rank(ringlet_comm_t comm, int *rank);
ringlet_result_t ringlet_comm_size(ringlet_comm_t comm, int *size);
ringlet_result_t ringlet_comm_local_rank(ringlet_comm_t comm, int *local_rank);
ringlet_result_t ringlet_comm_local_size(ringlet_comm_t comm, int *local_size);
/* RINGLET_SUCCESS while the communicator works; the error that broke it otherwise
 * (a failed peer, a timeout, an abort), and then ringlet_comm_last_error says why (the
 * failed call's own message where it came first, else the cause). */
ringlet_result_t ringlet_comm_get_async_error(ringlet_comm_t comm);
/* The device the communicator's device buffers are on: the device of its first call on
 * device memory, else the calling thread's current device at init (a split's: its
 * parent's device); -1 without a device backend. */
ringlet_result_t ringlet_comm_device(ringlet_comm_t comm, int *device);
/* Waits (within the deadline) until every operation issued on the communicator so far
 * is done, non-blocking sends and receives not yet waited for included (their requests
 * stay the caller's, to wait or test); their errors are the communicator's
 * (get_async_error). */
ringlet_result_t ringlet_comm_finalize(ringlet_comm_t comm);

/* Splits comm: ranks that pass the same color form a new communicator, ordered by key
 * (ties: by rank in comm). Collective over comm: every rank calls it. A rank that passes
 * RINGLET_SPLIT_NOCOLOR gets *newcomm = NULL. The new communicator has comm's deadline
 * and comm's device (ringlet_comm_device), whatever the caller's current device.
 * Inside a group it runs at the call, before the group's recorded calls. A collective
 * over comm to its end: if comm fails while it runs (any of its ranks, also one of
 * another color, or an abort), the split fails with comm's error, the new communicators'
 * inits included (a member that died would otherwise hold the others till the deadline).
 * A rank that passes a NULL newcomm or a negative color other than RINGLET_SPLIT_NOCOLOR
 * still takes part in the first exchange, and every rank's split then fails with
 * RINGLET_ERR_INVALID_ARGUMENT naming that rank (comm stays usable). A layer above that
 * finds a rank's own arguments wrong (the NCCL layer's config) passes RINGLET_SPLIT_REFUSE
 * as its color for the same collective refusal, rather than leave the others waiting. */
#define RINGLET_SPLIT_NOCOLOR (-1)
#define RINGLET_SPLIT_REFUSE (-2147483647 - 1) /* INT_MIN: a color no caller means */
ringlet_result_t ringlet_comm_split(ringlet_comm_t comm, int color, int key, ringlet_comm_t *newcomm);

/* Device memory through the device backend (the current device), for callers that have
 * no CUDA of their own (the NCCL layer's ncclMemAlloc). */
ringlet_result_t ringlet_mem_alloc(void **ptr, size_t bytes);
ringlet_result_t ringlet_mem_free(void *ptr);
/* The device whose memory ptr points into (the device backend's, the program's own
 * cudaMalloc'd included), or -1 for host memory, pinned or not, and without a backend. */
ringlet_result_t ringlet_mem_device(const void *ptr, int *device);
/* The device a stream belongs to (a default stream, NULL or RINGLET_STREAM_DEFAULT or
 * CUDA's per-thread handle 0x2: the calling thread's current device's), as
 * cudaStreamGetDevice; -1 without a device backend. */
ringlet_result_t ringlet_stream_device(void *stream, int *device);
/* The device backend's devices (0 without one) and the calling thread's current device
 * (as cudaGetDeviceCount and cudaSetDevice). A communicator's device (ringlet_comm_device)
 * is the one current when it is created until a call on device memory says otherwise, so
 * several communicators of one process can each have their own. */
ringlet_result_t ringlet_device_count(int *count);
ringlet_result_t ringlet_set_device(int device);
ringlet_result_t ringlet_get_device(int *device); /* -1 without a device backend */
/* Passing through a device, as a library does around a call: ringlet_device_enter makes
 * device current and says in *saved what ringlet_device_leave gives back (-1: nothing
 * changed). The leave gives a device back only where it has a context: a thread that
 * never chose one reads as device 0, and choosing that again would make a context there
 * (GPU memory on a device the process never used), so such a thread stays on device. */
ringlet_result_t ringlet_device_enter(int device, int *saved);
void ringlet_device_leave(int saved);

/* ---- memory operations, for callers with no CUDA of their own (the DDP layer, Python) ----
 * Where either pointer is device memory they are queued on stream (NULL or
 * RINGLET_STREAM_DEFAULT: the default stream) and return at once; on host memory they run
 * now, on pinned memory (ringlet_host_alloc) once the stream's work queued before is done
 * (as CUDA orders them; within RINGLET_TIMEOUT, else RINGLET_ERR_TIMEOUT and nothing
 * done). A copy within device memory whose ranges overlap is RINGLET_ERR_INVALID_ARGUMENT
 * (undefined in CUDA). They run on the stream's device, whatever device is current, which
 * they leave as it was (the default stream is the current device's, as in CUDA). ringlet_convert_async: dst[i] = src[i] * scale converted to dst_type, between
 * float16, bfloat16, float32 and float64 (from float64 computed in float64, else in
 * float32; rounded to nearest even; float16/bfloat16 widen exactly). Its kernel runs on the
 * device of the buffers' memory (on the default stream: that device's, whatever device is
 * current); overlapping buffers (but the same buffer of one element size, converted
 * in place), buffers of two devices, a stream of another device, a buffer not aligned
 * to its element size, or device memory with pageable host memory (the kernel reaches
 * only pinned host memory: ringlet_host_alloc; refused also where HMM or ATS would let
 * it through) are RINGLET_ERR_INVALID_ARGUMENT. */
ringlet_result_t ringlet_memcpy_async(void *dst, const void *src, size_t bytes, void *stream);
ringlet_result_t ringlet_memset_async(void *dst, int value, size_t bytes, void *stream);
ringlet_result_t ringlet_convert_async(void *dst, ringlet_datatype_t dst_type, const void *src,
                                       ringlet_datatype_t src_type, size_t count, double scale, void *stream);
/* Waits until the stream's work is done (nothing to wait for without a device backend),
 * on the stream's device (the default stream: the current device's), RINGLET_TIMEOUT at
 * most: then RINGLET_ERR_TIMEOUT, and ringlet's frees (ringlet_mem_free's too) are kept
 * until that work is done, since a free waits for the whole device. */
ringlet_result_t ringlet_stream_synchronize(void *stream);
/* Pinned host memory (plain memory without a device backend): device work reads and
 * writes it directly, and copies to and from it are asynchronous. As with cudaFreeHost,
 * nothing promises that ringlet_host_free waits for device work still using the buffer:
 * synchronise its streams first. */
ringlet_result_t ringlet_host_alloc(void **ptr, size_t bytes);
ringlet_result_t ringlet_host_free(void *ptr);

/* ---- groups ----
 * Calls between ringlet_group_start and ringlet_group_end (of this thread; groups nest)
 * are checked and recorded, not run: group_end runs them, per communicator as one
 * operation. Its sends and receives with all peers go at once, so ranks that send to each
 * other (an all-to-all made of sends and receives) never wait for each other; its
 * collectives run first, in the order they were called, then its sends and receives (a
 * peer that receives one of them with a plain call before it joins a collective of the
 * same group gets that collective's first message to it instead, where the collective
 * sends it one over that connection (messages between two ranks, collectives' included,
 * match in the order sent): an error (RINGLET_ERR_INVALID_USAGE: each message carries its
 * channel, collective or send/receive, and a receive that meets the other's fails); else it
 * waits until the deadline. Such a peer must group its calls alike, or use
 * another communicator for its sends and receives, as the torch backend does). group_end returns once every call is
 * done (with RINGLET_STREAM_HOLD=memop|kernel: once every call with a stream is queued on
 * it and every call without one is done; its first error). The
 * non-blocking forms are refused inside a group. Calls of one group on one communicator
 * use one kind of memory (host, or one device; calls without buffers, a count of 0 with
 * NULL pointers or a barrier, take that of the group's first call with one). A
 * collective or send/receive refused for
 * its arguments inside a group (its error returned at the call) spoils the group, as
 * NCCL's: group_end then runs none of its calls and returns that error (the other ranks'
 * calls find no partner here). A non-blocking form, refused there, spoils nothing. */
ringlet_result_t ringlet_group_start(void);
ringlet_result_t ringlet_group_end(void);
/* Ends the innermost level of this thread's group without running anything: at the
 * outermost level the calls recorded are dropped (none of them ran; the buffers are as
 * they were); at an inner level nothing is dropped (the calls recorded since its start
 * run at the outermost group_end with the others, *ndropped 0). *ndropped (may be NULL) gets how many were dropped. Without a group_start
 * before it: RINGLET_ERR_INVALID_USAGE. */
ringlet_result_t ringlet_group_cancel(int *ndropped);

/* ---- pre-multiplied sum ----
 * A reduction op for comm: each rank's input is multiplied by its own scalar (one element
 * of datatype), then summed; it works where RINGLET_SUM does, on calls of that datatype.
 * The scalar lives on the host (read now) or in device memory (read by each call); memory
 * of a device given as a host scalar (managed memory too: pass RINGLET_SCALAR_DEVICE for it)
 * is refused with RINGLET_ERR_INVALID_ARGUMENT; so is a call with a device scalar on host
 * buffers (count > 0). A call
 * takes the op as it is when made: the op may be destroyed as soon as the call returns,
 * also inside a group, before group_end runs the call (a device scalar is read when the
 * call runs: its memory must stay until then, on its stream when the call has one). */
typedef enum { RINGLET_SCALAR_DEVICE = 0, RINGLET_SCALAR_HOST = 1 } ringlet_scalar_residence_t;
ringlet_result_t ringlet_op_create_premul_sum(ringlet_op_t *op, const void *scalar, ringlet_datatype_t datatype,
                                              ringlet_scalar_residence_t residence, ringlet_comm_t comm);
ringlet_result_t ringlet_op_destroy(ringlet_op_t op, ringlet_comm_t comm);

/* ---- collectives (blocking on host buffers) ----
 * sendbuf == recvbuf is the in-place form (each call below says where it differs); buffers
 * that overlap otherwise are RINGLET_ERR_INVALID_ARGUMENT. Counts are in elements. The
 * buffers of a reduction (allreduce, reduce, reduce_scatter) are aligned to their element
 * size, else RINGLET_ERR_INVALID_ARGUMENT; the other calls take any alignment. */
ringlet_result_t ringlet_allreduce(const void *sendbuf, void *recvbuf, size_t count, ringlet_datatype_t datatype,
                                   ringlet_op_t op, ringlet_comm_t comm, void *stream);
/* root's sendbuf goes to every rank's recvbuf (root's recvbuf too). sendbuf is read on root
 * only: elsewhere it is ignored (never read nor checked; may be NULL). */
ringlet_result_t ringlet_broadcast(const void *sendbuf, void *recvbuf, size_t count, ringlet_datatype_t datatype,
                                   int root, ringlet_comm_t comm, void *stream);
/* recvbuf is written on root only (elsewhere ignored: never written nor checked; may be NULL). */
ringlet_result_t ringlet_reduce(const void *sendbuf, void *recvbuf, size_t count, ringlet_datatype_t datatype,
                                ringlet_op_t op, int root, ringlet_comm_t comm, void *stream);
/* recvbuf holds nranks * sendcount elements, rank r's block at r * sendcount. In place
 * when sendbuf == recvbuf + rank * sendcount elements. */
ringlet_result_t ringlet_allgather(const void *sendbuf, void *recvbuf, size_t sendcount, ringlet_datatype_t datatype,
                                   ringlet_comm_t comm, void *stream);
/* sendbuf holds nranks * recvcount elements; rank r receives the reduction of block r.
 * In place when recvbuf == sendbuf + rank * recvcount elements. */
ringlet_result_t ringlet_reduce_scatter(const void *sendbuf, void *recvbuf, size_t recvcount,
                                        ringlet_datatype_t datatype, ringlet_op_t op, ringlet_comm_t comm,
                                        void *stream);
ringlet_result_t ringlet_barrier(ringlet_comm_t comm, void *stream);
/* Point to point. Messages between two ranks arrive in the order they were sent;
 * a size in bytes that differs from the matching call's is an error (the datatypes are
 * not compared: 4 float32 match 16 uint8): the receive fails, naming both sizes, and its
 * communicator fails; a send that had completed already (a small one is sent at once)
 * returned success, and the sender learns of it from the receiver's failure, as of any
 * failed peer's. */
ringlet_result_t ringlet_send(const void *sendbuf, size_t count, ringlet_datatype_t datatype, int peer,
                              ringlet_comm_t comm, void *stream);
ringlet_result_t ringlet_recv(void *recvbuf, size_t count, ringlet_datatype_t datatype, int peer,
                              ringlet_comm_t comm, void *stream);
/* Block q (count elements) of sendbuf goes to rank q, which receives it as block (this
 * rank) of recvbuf; both hold nranks * count elements. In place when sendbuf == recvbuf. */
ringlet_result_t ringlet_alltoall(const void *sendbuf, void *recvbuf, size_t count, ringlet_datatype_t datatype,
                                  ringlet_comm_t comm, void *stream);
/* Every rank's sendbuf (count elements) to the root's recvbuf (nranks * count, rank r's
 * at block r; recvbuf is ignored elsewhere, and may be NULL). In place when the root's sendbuf is its
 * own block of recvbuf. */
ringlet_result_t ringlet_gather(const void *sendbuf, void *recvbuf, size_t count, ringlet_datatype_t datatype,
                                int root, ringlet_comm_t comm, void *stream);
/* Block r of the root's sendbuf (nranks * count elements; ignored elsewhere, may be NULL) to rank r's
 * recvbuf. In place when the root's recvbuf is its own block of sendbuf. */
ringlet_result_t ringlet_scatter(const void *sendbuf, void *recvbuf, size_t count, ringlet_datatype_t datatype,
                                 int root, ringlet_comm_t comm, void *stream);

/* ---- non-blocking forms ----
 * Each returns at once with a request; the buffers must stay untouched until
 * ringlet_test reports done or ringlet_wait returns. Operations on one communicator
 * run in the order they were issued. test/wait free the request when they report
 * completion (success or error); *request is then set to NULL. */
ringlet_result_t ringlet_iallreduce(const void *sendbuf, void *recvbuf, size_t count, ringlet_datatype_t datatype,
                                    ringlet_op_t op, ringlet_comm_t comm, void *stream, ringlet_request_t *request);
ringlet_result_t ringlet_ibroadcast(const void *sendbuf, void *recvbuf, size_t count, ringlet_datatype_t datatype,
                                    int root, ringlet_comm_t comm, void *stream, ringlet_request_t *request);
ringlet_result_t ringlet_ireduce(const void *sendbuf, void *recvbuf, size_t count, ringlet_datatype_t datatype,
                                 ringlet_op_t op, int root, ringlet_comm_t comm, void *stream,
                                 ringlet_request_t *request);
ringlet_result_t ringlet_iallgather(const void *sendbuf, void *recvbuf, size_t sendcount,
                                    ringlet_datatype_t datatype, ringlet_comm_t comm, void *stream,
                                    ringlet_request_t *request);
ringlet_result_t ringlet_ireduce_scatter(const void *sendbuf, void *recvbuf, size_t recvcount,
                                         ringlet_datatype_t datatype, ringlet_op_t op, ringlet_comm_t comm,
                                         void *stream, ringlet_request_t *request);
ringlet_result_t ringlet_ibarrier(ringlet_comm_t comm, void *stream, ringlet_request_t *request);
ringlet_result_t ringlet_isend(const void *sendbuf, size_t count, ringlet_datatype_t datatype, int peer,
                               ringlet_comm_t comm, void *stream, ringlet_request_t *request);
ringlet_result_t ringlet_irecv(void *recvbuf, size_t count, ringlet_datatype_t datatype, int peer,
                               ringlet_comm_t comm, void *stream, ringlet_request_t *request);
ringlet_result_t ringlet_ialltoall(const void *sendbuf, void *recvbuf, size_t count, ringlet_datatype_t datatype,
                                   ringlet_comm_t comm, void *stream, ringlet_request_t *request);
ringlet_result_t ringlet_igather(const void *sendbuf, void *recvbuf, size_t count, ringlet_datatype_t datatype,
                                 int root, ringlet_comm_t comm, void *stream, ringlet_request_t *request);
ringlet_result_t ringlet_iscatter(const void *sendbuf, void *recvbuf, size_t count, ringlet_datatype_t datatype,
                                  int root, ringlet_comm_t comm, void *stream, ringlet_request_t *request);
/* *done = 1 and the operation's result when finished (the request is freed);
 * *done = 0 and RINGLET_SUCCESS while it runs. */
ringlet_result_t ringlet_test(ringlet_request_t *request, int *done);
/* Waits (within the deadline) and returns the operation's result; frees the request. */
ringlet_result_t ringlet_wait(ringlet_request_t *request);

#ifdef __cplusplus
}
#endif
#endif /* RINGLET_H */
