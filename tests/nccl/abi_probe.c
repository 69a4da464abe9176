/* Prints NCCL's ABI as the nccl.h it is compiled against sees it: enum values, constants,
 * struct sizes and field offsets, the config initializer's contents. tests/mp/nccl_abi.sh
 * compiles it against NCCL's own header and against ringlet's and compares the outputs
 * (lines starting "info" are the versions, which differ by design). */
#include <stddef.h>
#include <stdio.h>

#include <nccl.h>

#define V(x) printf("%-34s %lld\n", #x, (long long)(x))
#define OFF(t, f) printf("offsetof(%s, %s) %zu\n", #t, #f, offsetof(t, f))

int main(void) {
    printf("info NCCL_VERSION_CODE %d (%d.%d.%d)\n", NCCL_VERSION_CODE, NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH);
    V(NCCL_VERSION(2, 8, 4)), V(NCCL_VERSION(2, 19, 3)), V(NCCL_VERSION(2, 28, 9));
    V(NCCL_UNIQUE_ID_BYTES), V(sizeof(ncclUniqueId)), V(sizeof(ncclComm_t)), V(sizeof(ncclWindow_t));
    V(ncclSuccess), V(ncclUnhandledCudaError), V(ncclSystemError), V(ncclInternalError), V(ncclInvalidArgument);
    V(ncclInvalidUsage), V(ncclRemoteError), V(ncclInProgress), V(ncclNumResults), V(sizeof(ncclResult_t));
    V(ncclSum), V(ncclProd), V(ncclMax), V(ncclMin), V(ncclAvg), V(ncclNumOps), V(ncclMaxRedOp), V(sizeof(ncclRedOp_t));
    V(ncclInt8), V(ncclChar), V(ncclUint8), V(ncclInt32), V(ncclInt), V(ncclUint32), V(ncclInt64), V(ncclUint64);
    V(ncclFloat16), V(ncclHalf), V(ncclFloat32), V(ncclFloat), V(ncclFloat64), V(ncclDouble), V(ncclBfloat16);
    V(ncclFloat8e4m3), V(ncclFloat8e5m2), V(ncclNumTypes), V(sizeof(ncclDataType_t));
    V(ncclScalarDevice), V(ncclScalarHostImmediate), V(sizeof(ncclScalarResidence_t));
    V(NCCL_CONFIG_UNDEF_INT), V(NCCL_SPLIT_NOCOLOR), V((long long)(NCCL_UNDEF_FLOAT * 4));
    V(NCCL_WIN_DEFAULT), V(NCCL_WIN_COLL_SYMMETRIC), V(NCCL_WIN_REQUIRED_ALIGNMENT);
    V(NCCL_CTA_POLICY_DEFAULT), V(NCCL_CTA_POLICY_EFFICIENCY), V(NCCL_CTA_POLICY_ZERO);
    V(NCCL_SHRINK_DEFAULT), V(NCCL_SHRINK_ABORT), V(NCCL_REVOKE_DEFAULT);
    V(sizeof(ncclConfig_t));
    OFF(ncclConfig_t, size), OFF(ncclConfig_t, magic), OFF(ncclConfig_t, version), OFF(ncclConfig_t, blocking);
    OFF(ncclConfig_t, cgaClusterSize), OFF(ncclConfig_t, minCTAs), OFF(ncclConfig_t, maxCTAs);
    OFF(ncclConfig_t, netName), OFF(ncclConfig_t, splitShare), OFF(ncclConfig_t, trafficClass);
    OFF(ncclConfig_t, commName), OFF(ncclConfig_t, collnetEnable), OFF(ncclConfig_t, CTAPolicy);
    OFF(ncclConfig_t, shrinkShare), OFF(ncclConfig_t, nvlsCTAs), OFF(ncclConfig_t, nChannelsPerNetPeer);
    OFF(ncclConfig_t, nvlinkCentricSched);
    ncclConfig_t c = NCCL_CONFIG_INITIALIZER;
    V(c.size), V(c.magic), V(c.blocking), V(c.cgaClusterSize), V(c.minCTAs), V(c.maxCTAs), V(c.netName == NULL);
    V(c.splitShare), V(c.trafficClass), V(c.commName == NULL), V(c.collnetEnable), V(c.CTAPolicy), V(c.shrinkShare);
    V(c.nvlsCTAs), V(c.nChannelsPerNetPeer), V(c.nvlinkCentricSched);
    printf("info config version %u\n", c.version);
    V(sizeof(ncclSimInfo_t));
    OFF(ncclSimInfo_t, size), OFF(ncclSimInfo_t, magic), OFF(ncclSimInfo_t, version), OFF(ncclSimInfo_t, estimatedTime);
    ncclSimInfo_t s = NCCL_SIM_INFO_INITIALIZER;
    V(s.size), V(s.magic), V((long long)(s.estimatedTime * 4));
    return 0;
}
