/* ringlet's NCCL-compatible API: a program written for NCCL builds against this header
 * and runs on libnccl.so.2 from ringlet (build/lib, or $PREFIX/lib/ringlet-nccl once
 * installed). Names, enum values and struct layouts are NCCL's (ABI-compatible with
 * NCCL 2.28's header); the version reported is the one whose API ringlet provides in
 * full. Differences from NCCL are in README.md ("NCCL API"):
 *   - host pointers are accepted as buffers (on host memory a call returns when its
 *     result is in place; in a group, at ncclGroupEnd);
 *   - several ranks may share one GPU;
 *   - the float8 types are moved as bytes; their reductions are refused
 *     (ncclInvalidArgument);
 *   - a call on a stream that is capturing a CUDA graph is refused (ncclInvalidUsage)
 *     before it touches the stream;
 *   - ncclCommShrink, ncclCommRevoke and the window registration return
 *     ncclInvalidUsage with a message saying so;
 *   - ncclGroupSimulateEnd ends the group, running nothing, with no estimate
 *     (estimatedTime NCCL_UNDEF_FLOAT);
 *   - of NCCL 2.28's device API (declared below, host side only), the team queries answer
 *     and the rest return ncclInvalidUsage.
 * With CUDA's headers on the include path it includes cuda_runtime.h, cuda_fp16.h and
 * cuda_bf16.h, as NCCL's does; without them (or with RINGLET_NCCL_NO_CUDA_HEADERS defined),
 * cudaStream_t is declared here (the same type as CUDA's: a pointer to struct CUstream_st). */
#ifndef NCCL_H_
#define NCCL_H_

#if defined(__has_include) && !defined(RINGLET_NCCL_NO_CUDA_HEADERS)
#if __has_include(<cuda_runtime.h>)
#include <cuda_runtime.h>
/* As NCCL's header does: programs written for NCCL use half and __nv_bfloat16 (nccl-tests
 * does) having included nccl.h alone. */
#include <cuda_fp16.h>
#if CUDART_VERSION >= 11000 /* bfloat16 came with CUDA 11 */
#include <cuda_bf16.h>
#endif
#define RINGLET_NCCL_CUDA_HEADERS 1
#endif
#endif
#ifndef RINGLET_NCCL_CUDA_HEADERS
typedef struct CUstream_st *cudaStream_t;
#endif

#include <limits.h>
#include <stddef.h>

#define NCCL_MAJOR 2
#define NCCL_MINOR 19
#define NCCL_PATCH 3
#define NCCL_SUFFIX "-ringlet"
/* Codes before 2.9 were X*1000+Y*100+Z; since then X*10000+Y*100+Z. */
#define NCCL_VERSION(X, Y, Z) (((X) <= 2 && (Y) <= 8) ? (X) * 1000 + (Y) * 100 + (Z) : (X) * 10000 + (Y) * 100 + (Z))
#define NCCL_VERSION_CODE NCCL_VERSION(NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH)

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ncclComm *ncclComm_t;
typedef struct ncclWindow_vidmem *ncclWindow_t;
#define NCCL_COMM_NULL NULL

#define NCCL_UNIQUE_ID_BYTES 128
typedef struct {
    char internal[NCCL_UNIQUE_ID_BYTES];
} ncclUniqueId;

typedef enum {
    ncclSuccess = 0,
    ncclUnhandledCudaError = 1,
    ncclSystemError = 2,
    ncclInternalError = 3,
    ncclInvalidArgument = 4,
    ncclInvalidUsage = 5,
    ncclRemoteError = 6, /* also: a deadline passed (RINGLET_TIMEOUT) */
    ncclInProgress = 7,
    ncclNumResults = 8
} ncclResult_t;

#define NCCL_CONFIG_UNDEF_INT INT_MIN
#define NCCL_CONFIG_UNDEF_PTR NULL
#define NCCL_SPLIT_NOCOLOR -1
#define NCCL_UNDEF_FLOAT -1.0f
#define NCCL_WIN_DEFAULT 0x00
#define NCCL_WIN_COLL_SYMMETRIC 0x01
#define NCCL_WIN_REQUIRED_ALIGNMENT 4096
#define NCCL_CTA_POLICY_DEFAULT 0x00
#define NCCL_CTA_POLICY_EFFICIENCY 0x01
#define NCCL_CTA_POLICY_ZERO 0x02
#define NCCL_SHRINK_DEFAULT 0x00
#define NCCL_SHRINK_ABORT 0x01
#define NCCL_REVOKE_DEFAULT 0x00

/* Communicator options. ringlet reads only the fields that `size` covers, so a config
 * from an older header works; it acts on `blocking` (0: init and calls return
 * ncclInProgress, see ncclCommGetAsyncError) and accepts the others, which tune NCCL's
 * own kernels and have no meaning here. */
typedef struct ncclConfig_v22800 {
    size_t size;
    unsigned int magic;
    unsigned int version;
    int blocking;
    int cgaClusterSize;
    int minCTAs;
    int maxCTAs;
    const char *netName;
    int splitShare;
    int trafficClass;
    const char *commName;
    int collnetEnable;
    int CTAPolicy;
    int shrinkShare;
    int nvlsCTAs;
    int nChannelsPerNetPeer;
    int nvlinkCentricSched;
} ncclConfig_t;

#define NCCL_CONFIG_INITIALIZER                                                                                        \
    {                                                                                                                  \
        sizeof(ncclConfig_t), 0xcafebeef, NCCL_VERSION(NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH), NCCL_CONFIG_UNDEF_INT,      \
            NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_PTR,                \
            NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_PTR, NCCL_CONFIG_UNDEF_INT,                \
            NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT,                \
            NCCL_CONFIG_UNDEF_INT                                                                                      \
    }

typedef struct ncclSimInfo_v22200 {
    size_t size;
    unsigned int magic;
    unsigned int version;
    float estimatedTime;
} ncclSimInfo_t;
#define NCCL_SIM_INFO_INITIALIZER                                                                                      \
    { sizeof(ncclSimInfo_t), 0x74685283, NCCL_VERSION(NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH), NCCL_UNDEF_FLOAT }

typedef enum { ncclNumOps_dummy = 5 } ncclRedOp_dummy_t;
typedef enum {
    ncclSum = 0,
    ncclProd = 1,
    ncclMax = 2,
    ncclMin = 3,
    ncclAvg = 4,
    ncclNumOps = 5, /* ops from ncclRedOpCreatePreMulSum come after these */
    ncclMaxRedOp = 0x7fffffff >> (32 - 8 * sizeof(ncclRedOp_dummy_t))
} ncclRedOp_t;

typedef enum {
    ncclInt8 = 0,
    ncclChar = 0,
    ncclUint8 = 1,
    ncclInt32 = 2,
    ncclInt = 2,
    ncclUint32 = 3,
    ncclInt64 = 4,
    ncclUint64 = 5,
    ncclFloat16 = 6,
    ncclHalf = 6,
    ncclFloat32 = 7,
    ncclFloat = 7,
    ncclFloat64 = 8,
    ncclDouble = 8,
    ncclBfloat16 = 9,
    ncclFloat8e4m3 = 10, /* moved as bytes by ringlet; its reductions are refused */
    ncclFloat8e5m2 = 11, /* moved as bytes by ringlet; its reductions are refused */
    ncclNumTypes = 12
} ncclDataType_t;

typedef enum { ncclScalarDevice = 0, ncclScalarHostImmediate = 1 } ncclScalarResidence_t;

/* Every function has a pnccl twin (the profiling interface's names). */
#define RINGLET_NCCL_FN(ret, name, args) ret nccl##name args; ret pnccl##name args

RINGLET_NCCL_FN(ncclResult_t, MemAlloc, (void **ptr, size_t size));
RINGLET_NCCL_FN(ncclResult_t, MemFree, (void *ptr));
RINGLET_NCCL_FN(ncclResult_t, GetVersion, (int *version));
RINGLET_NCCL_FN(ncclResult_t, GetUniqueId, (ncclUniqueId * uniqueId));
RINGLET_NCCL_FN(ncclResult_t, CommInitRankConfig,
                (ncclComm_t * comm, int nranks, ncclUniqueId commId, int rank, ncclConfig_t *config));
RINGLET_NCCL_FN(ncclResult_t, CommInitRank, (ncclComm_t * comm, int nranks, ncclUniqueId commId, int rank));
RINGLET_NCCL_FN(ncclResult_t, CommInitAll, (ncclComm_t * comm, int ndev, const int *devlist));
RINGLET_NCCL_FN(ncclResult_t, CommInitRankScalable,
                (ncclComm_t * newcomm, int nranks, int myrank, int nId, ncclUniqueId *commIds, ncclConfig_t *config));
RINGLET_NCCL_FN(ncclResult_t, CommFinalize, (ncclComm_t comm));
RINGLET_NCCL_FN(ncclResult_t, CommDestroy, (ncclComm_t comm));
RINGLET_NCCL_FN(ncclResult_t, CommAbort, (ncclComm_t comm));
RINGLET_NCCL_FN(ncclResult_t, CommRevoke, (ncclComm_t comm, int revokeFlags));
RINGLET_NCCL_FN(ncclResult_t, CommSplit, (ncclComm_t comm, int color, int key, ncclComm_t *newcomm, ncclConfig_t *config));
RINGLET_NCCL_FN(ncclResult_t, CommShrink,
                (ncclComm_t comm, int *excludeRanksList, int excludeRanksCount, ncclComm_t *newcomm,
                 ncclConfig_t *config, int shrinkFlags));
RINGLET_NCCL_FN(const char *, GetErrorString, (ncclResult_t result));
RINGLET_NCCL_FN(const char *, GetLastError, (ncclComm_t comm));
RINGLET_NCCL_FN(void, ResetDebugInit, (void));
RINGLET_NCCL_FN(ncclResult_t, CommGetAsyncError, (ncclComm_t comm, ncclResult_t *asyncError));
RINGLET_NCCL_FN(ncclResult_t, CommCount, (const ncclComm_t comm, int *count));
RINGLET_NCCL_FN(ncclResult_t, CommCuDevice, (const ncclComm_t comm, int *device));
RINGLET_NCCL_FN(ncclResult_t, CommUserRank, (const ncclComm_t comm, int *rank));
RINGLET_NCCL_FN(ncclResult_t, CommRegister, (const ncclComm_t comm, void *buff, size_t size, void **handle));
RINGLET_NCCL_FN(ncclResult_t, CommDeregister, (const ncclComm_t comm, void *handle));
RINGLET_NCCL_FN(ncclResult_t, CommWindowRegister,
                (ncclComm_t comm, void *buff, size_t size, ncclWindow_t *win, int winFlags));
RINGLET_NCCL_FN(ncclResult_t, CommWindowDeregister, (ncclComm_t comm, ncclWindow_t win));
RINGLET_NCCL_FN(ncclResult_t, RedOpCreatePreMulSum,
                (ncclRedOp_t * op, void *scalar, ncclDataType_t datatype, ncclScalarResidence_t residence,
                 ncclComm_t comm));
RINGLET_NCCL_FN(ncclResult_t, RedOpDestroy, (ncclRedOp_t op, ncclComm_t comm));
RINGLET_NCCL_FN(ncclResult_t, Reduce,
                (const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype, ncclRedOp_t op,
                 int root, ncclComm_t comm, cudaStream_t stream));
RINGLET_NCCL_FN(ncclResult_t, Bcast,
                (void *buff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm, cudaStream_t stream));
RINGLET_NCCL_FN(ncclResult_t, Broadcast,
                (const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype, int root,
                 ncclComm_t comm, cudaStream_t stream));
RINGLET_NCCL_FN(ncclResult_t, AllReduce,
                (const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype, ncclRedOp_t op,
                 ncclComm_t comm, cudaStream_t stream));
RINGLET_NCCL_FN(ncclResult_t, ReduceScatter,
                (const void *sendbuff, void *recvbuff, size_t recvcount, ncclDataType_t datatype, ncclRedOp_t op,
                 ncclComm_t comm, cudaStream_t stream));
RINGLET_NCCL_FN(ncclResult_t, AllGather,
                (const void *sendbuff, void *recvbuff, size_t sendcount, ncclDataType_t datatype, ncclComm_t comm,
                 cudaStream_t stream));
RINGLET_NCCL_FN(ncclResult_t, AlltoAll,
                (const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype, ncclComm_t comm,
                 cudaStream_t stream));
RINGLET_NCCL_FN(ncclResult_t, Gather,
                (const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype, int root,
                 ncclComm_t comm, cudaStream_t stream));
RINGLET_NCCL_FN(ncclResult_t, Scatter,
                (const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype, int root,
                 ncclComm_t comm, cudaStream_t stream));
RINGLET_NCCL_FN(ncclResult_t, Send,
                (const void *sendbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,
                 cudaStream_t stream));
RINGLET_NCCL_FN(ncclResult_t, Recv,
                (void *recvbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,
                 cudaStream_t stream));
RINGLET_NCCL_FN(ncclResult_t, GroupStart, (void));
RINGLET_NCCL_FN(ncclResult_t, GroupEnd, (void));
RINGLET_NCCL_FN(ncclResult_t, GroupSimulateEnd, (ncclSimInfo_t * simInfo));

/* The host side of NCCL 2.28's device API, which NCCL declares in its nccl_device headers,
 * not in nccl.h. ringlet has no device API (README.md, "NCCL API"): the team queries answer
 * (the LSA team is the rank alone), the rest answer ncclInvalidUsage. Declared here for
 * programs built on this header alone; left out where NCCL's device headers are in use or
 * can be included (CUDA's include folder has them, and RINGLET_NCCL_NO_CUDA_HEADERS is not
 * defined), as they declare the same calls and define struct ncclTeam themselves. */
#if defined(__has_include) && !defined(RINGLET_NCCL_NO_CUDA_HEADERS)
#if __has_include(<nccl_device/core.h>)
#define RINGLET_NCCL_DEVICE_HEADERS 1
#endif
#endif
#if !defined(RINGLET_NCCL_DEVICE_HEADERS) && !defined(_NCCL_DEVICE_CORE_H_)
/* A team: nRanks ranks, the caller at rank, each stride world ranks from the next. */
typedef struct ncclTeam {
    int nRanks, rank, stride;
} ncclTeam_t;
/* Opaque here: ringlet makes none of them and reads none. */
typedef struct ncclDevComm ncclDevComm_t;
typedef struct ncclDevCommRequirements ncclDevCommRequirements_t;
typedef struct ncclDevResourceRequirements ncclDevResourceRequirements_t;
typedef struct ncclLsaBarrierHandle ncclLsaBarrierHandle_t;
typedef struct ncclGinBarrierHandle ncclGinBarrierHandle_t;
typedef struct ncclLLA2AHandle ncclLLA2AHandle_t;

RINGLET_NCCL_FN(ncclResult_t, DevCommCreate,
                (ncclComm_t comm, const ncclDevCommRequirements_t *reqs, ncclDevComm_t *outDevComm));
RINGLET_NCCL_FN(ncclResult_t, DevCommDestroy, (ncclComm_t comm, const ncclDevComm_t *devComm));
RINGLET_NCCL_FN(ncclTeam_t, TeamWorld, (ncclComm_t comm));
RINGLET_NCCL_FN(ncclTeam_t, TeamLsa, (ncclComm_t comm));
RINGLET_NCCL_FN(ncclTeam_t, TeamRail, (ncclComm_t comm));
RINGLET_NCCL_FN(int, TeamRankToWorld, (ncclComm_t comm, ncclTeam_t team, int rank));
RINGLET_NCCL_FN(int, TeamRankToLsa, (ncclComm_t comm, ncclTeam_t team, int rank));
RINGLET_NCCL_FN(ncclResult_t, LsaBarrierCreateRequirement,
                (ncclTeam_t team, int nBarriers, ncclLsaBarrierHandle_t *outHandle,
                 ncclDevResourceRequirements_t *outReq));
RINGLET_NCCL_FN(ncclResult_t, GinBarrierCreateRequirement,
                (ncclComm_t comm, ncclTeam_t team, int nBarriers, ncclGinBarrierHandle_t *outHandle,
                 ncclDevResourceRequirements_t *outReq));
RINGLET_NCCL_FN(int, LLA2ACalcSlots, (int maxElts, int maxEltSize));
RINGLET_NCCL_FN(ncclResult_t, LLA2ACreateRequirement,
                (int nBlocks, int nSlots, ncclLLA2AHandle_t *outHandle, ncclDevResourceRequirements_t *outReq));
#endif

#undef RINGLET_NCCL_FN

#ifdef __cplusplus
}
#endif
#endif /* NCCL_H_ */
