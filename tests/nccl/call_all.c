/* A program built against NCCL's own nccl.h (the CUDA toolkit's) and linked to ringlet's
 * libnccl.so.2: one rank in one process calls every function that header declares, and
 * its pnccl twin, and checks what each returns and does (host buffers, small random
 * integers, results exact). tests/mp/nccl_abi.sh checks that every function of the
 * header is called here. Prints "call_all: N checks, F failed" and the library that
 * served ncclGetVersion. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <nccl.h>

static long g_checks, g_failed;
#define EXPECT(call, want)                                                                                             \
    do {                                                                                                               \
        ncclResult_t r_ = (call);                                                                                      \
        g_checks++;                                                                                                    \
        if (r_ != (want)) {                                                                                            \
            g_failed++;                                                                                                \
            printf("FAIL line %d: %s returned %d (%s), expected %d\n", __LINE__, #call, (int)r_,                     \
                   pncclGetLastError(NULL), (int)(want));                                                              \
        }                                                                                                              \
    } while (0)
#define OK(call) EXPECT(call, ncclSuccess)
#define TRUE(cond)                                                                                                     \
    do {                                                                                                               \
        g_checks++;                                                                                                    \
        if (!(cond)) g_failed++, printf("FAIL line %d: %s\n", __LINE__, #cond);                                       \
    } while (0)

enum { N = 4099 };

static int32_t rnd(uint32_t *s) {
    *s = *s * 1103515245u + 12345u;
    return (int32_t)((*s >> 16) % 201) - 100;
}

int main(void) {
    uint32_t seed = 12345;
    int32_t *a = malloc(N * 4), *b = malloc(N * 4), *want = malloc(N * 4);
    int v = 0, pv = 0;
    OK(ncclGetVersion(&v));
    OK(pncclGetVersion(&pv));
    TRUE(v == pv && v >= 21900);
    Dl_info info;
    if (dladdr((void *)ncclGetVersion, &info) && info.dli_fname) printf("ncclGetVersion from %s\n", info.dli_fname);
    printf("version %d\n", v);
    TRUE(strlen(ncclGetErrorString(ncclRemoteError)) > 0 && pncclGetErrorString(ncclSuccess) != NULL);
    ncclResetDebugInit();
    pncclResetDebugInit();

    ncclUniqueId id;
    OK(ncclGetUniqueId(&id));
    ncclComm_t c = NULL;
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    cfg.blocking = 1;
    OK(ncclCommInitRankConfig(&c, 1, id, 0, &cfg));
    int n = 0, r = -1, dev = -2;
    OK(ncclCommCount(c, &n));
    OK(ncclCommUserRank(c, &r));
    OK(ncclCommCuDevice(c, &dev));
    TRUE(n == 1 && r == 0);
    ncclResult_t as = ncclInternalError;
    OK(ncclCommGetAsyncError(c, &as));
    TRUE(as == ncclSuccess);

    /* Collectives at one rank: the result is this rank's input (sum), or blocks of it. */
    for (int i = 0; i < N; i++) a[i] = rnd(&seed), want[i] = a[i];
    OK(ncclAllReduce(a, b, N, ncclInt32, ncclSum, c, NULL));
    TRUE(!memcmp(b, want, N * 4));
    memset(b, 0, N * 4);
    OK(pncclAllReduce(a, b, N, ncclInt32, ncclMax, c, NULL));
    TRUE(!memcmp(b, want, N * 4));
    memset(b, 0, N * 4);
    OK(ncclBroadcast(a, b, N, ncclInt32, 0, c, NULL));
    TRUE(!memcmp(b, want, N * 4));
    memcpy(b, a, N * 4);
    OK(ncclBcast(b, N, ncclInt32, 0, c, NULL));
    TRUE(!memcmp(b, want, N * 4));
    memset(b, 0, N * 4);
    OK(ncclReduce(a, b, N, ncclInt32, ncclMin, 0, c, NULL));
    TRUE(!memcmp(b, want, N * 4));
    memset(b, 0, N * 4);
    OK(ncclAllGather(a, b, N, ncclInt32, c, NULL));
    TRUE(!memcmp(b, want, N * 4));
    memset(b, 0, N * 4);
    OK(ncclReduceScatter(a, b, N, ncclInt32, ncclSum, c, NULL));
    TRUE(!memcmp(b, want, N * 4));
    memset(b, 0, N * 4);
    OK(ncclAlltoAll(a, b, N, ncclInt32, c, NULL));
    TRUE(!memcmp(b, want, N * 4));
    memset(b, 0, N * 4);
    OK(ncclGather(a, b, N, ncclInt32, 0, c, NULL));
    TRUE(!memcmp(b, want, N * 4));
    memset(b, 0, N * 4);
    OK(ncclScatter(a, b, N, ncclInt32, 0, c, NULL));
    TRUE(!memcmp(b, want, N * 4));
    /* A send to and a receive from this rank itself, grouped. */
    memset(b, 0, N * 4);
    OK(ncclGroupStart());
    OK(ncclSend(a, N, ncclInt32, 0, c, NULL));
    OK(ncclRecv(b, N, ncclInt32, 0, c, NULL));
    OK(ncclGroupEnd());
    TRUE(!memcmp(b, want, N * 4));
    /* Pre-multiplied sum by 3. */
    ncclRedOp_t op;
    int32_t three = 3;
    OK(ncclRedOpCreatePreMulSum(&op, &three, ncclInt32, ncclScalarHostImmediate, c));
    OK(ncclAllReduce(a, b, N, ncclInt32, op, c, NULL));
    for (int i = 0; i < N; i++) want[i] = 3 * a[i];
    TRUE(!memcmp(b, want, N * 4));
    OK(ncclRedOpDestroy(op, c));
    /* float8: refused. */
    EXPECT(ncclAllReduce(a, b, 8, ncclFloat8e5m2, ncclSum, c, NULL), ncclInvalidArgument);
    TRUE(strstr(ncclGetLastError(c), "float8") != NULL);
    /* A call refused inside a group (float8) spoils it: ncclGroupEnd runs none of it. */
    memset(b, 0, N * 4);
    OK(ncclGroupStart());
    EXPECT(ncclAllReduce(a, b, 8, ncclFloat8e5m2, ncclSum, c, NULL), ncclInvalidArgument);
    OK(ncclAllReduce(a, b, N, ncclInt32, ncclSum, c, NULL));
    EXPECT(ncclGroupEnd(), ncclInvalidArgument);
    TRUE(strstr(pncclGetLastError(NULL), "none of the group") != NULL);
    int32_t zero[4] = {0, 0, 0, 0};
    TRUE(!memcmp(b, zero, sizeof zero));
    OK(ncclAllReduce(a, b, N, ncclInt32, ncclSum, c, NULL));
    TRUE(!memcmp(b, a, N * 4));
    /* The latest error, not the communicator's older one (as NCCL: comm is not read). */
    EXPECT(ncclGroupEnd(), ncclInvalidUsage);
    TRUE(strstr(ncclGetLastError(c), "float8") == NULL && strstr(ncclGetLastError(c), "ncclGroupEnd") != NULL);
    /* Registration. */
    void *h = NULL;
    OK(ncclCommRegister(c, a, N * 4, &h));
    OK(ncclCommDeregister(c, h));
    /* What ringlet does not provide: a clear refusal. */
    ncclComm_t x = c;
    EXPECT(ncclCommShrink(c, NULL, 0, &x, NULL, NCCL_SHRINK_DEFAULT), ncclInvalidUsage);
    TRUE(x == NULL);
    EXPECT(ncclCommRevoke(c, NCCL_REVOKE_DEFAULT), ncclInvalidUsage);
    ncclWindow_t w = NULL;
    EXPECT(ncclCommWindowRegister(c, a, 4096, &w, NCCL_WIN_DEFAULT), ncclInvalidUsage);
    EXPECT(ncclCommWindowDeregister(c, w), ncclInvalidUsage);
    /* NCCL's simulation ends the group and runs nothing (PyTorch's time estimator calls no
     * ncclGroupEnd after it): ringlet ends the group the same way, its call dropped, with no
     * estimate (NCCL_UNDEF_FLOAT: no cost model); the next call runs at once. */
    ncclSimInfo_t si = NCCL_SIM_INFO_INITIALIZER;
    si.estimatedTime = 5.0f;
    memset(b, 0, N * 4);
    memset(want, 0, N * 4);
    OK(ncclGroupStart());
    OK(ncclAllReduce(a, b, N, ncclInt32, ncclSum, c, NULL));
    OK(ncclGroupSimulateEnd(&si));
    TRUE(si.estimatedTime == NCCL_UNDEF_FLOAT);
    TRUE(!memcmp(b, want, N * 4));
    EXPECT(ncclGroupEnd(), ncclInvalidUsage); /* no group left open */
    OK(ncclAllReduce(a, b, N, ncclInt32, ncclSum, c, NULL));
    TRUE(!memcmp(b, a, N * 4));
    ncclSimInfo_t bad = NCCL_SIM_INFO_INITIALIZER;
    bad.magic = 0;
    OK(ncclGroupStart());
    EXPECT(ncclGroupSimulateEnd(&bad), ncclInvalidArgument); /* the group ended all the same */
    TRUE(strstr(pncclGetLastError(NULL), "NCCL_SIM_INFO_INITIALIZER") != NULL);
    EXPECT(ncclGroupEnd(), ncclInvalidUsage);
    /* A simulation of a group with a refused call says so, as NCCL's (it said success). */
    OK(ncclGroupStart());
    EXPECT(ncclAllReduce(a, b, N, (ncclDataType_t)99, ncclSum, c, NULL), ncclInvalidArgument);
    EXPECT(ncclGroupSimulateEnd(&si), ncclInvalidArgument);
    EXPECT(ncclGroupEnd(), ncclInvalidUsage);
    /* No simInfo: a plain ncclGroupEnd, as NCCL's (the group was dropped, its results
     * never written). */
    memset(b, 0, N * 4);
    OK(ncclGroupStart());
    OK(ncclAllReduce(a, b, N, ncclInt32, ncclSum, c, NULL));
    OK(ncclGroupSimulateEnd(NULL));
    TRUE(!memcmp(b, a, N * 4));
    EXPECT(ncclGroupEnd(), ncclInvalidUsage);
    /* Finalize: of NULL a no-op, twice refused, as NCCL's; ncclCommInitAll of no device makes none. */
    OK(ncclCommFinalize(NULL));
    ncclComm_t none[1] = {NULL};
    OK(ncclCommInitAll(none, 0, NULL));
    TRUE(none[0] == NULL);
    /* Device memory: from the device backend when there is one (RINGLET_DEVICE=sim). */
    void *d = NULL;
    ncclResult_t mr = ncclMemAlloc(&d, 1 << 20);
    TRUE(mr == ncclSuccess ? d != NULL : mr == ncclInvalidUsage);
    if (mr == ncclSuccess) OK(ncclMemFree(d));
    /* Split (every rank: color 0), then the split one finalized and destroyed. */
    ncclComm_t s = NULL;
    OK(ncclCommSplit(c, 0, 0, &s, NULL));
    OK(ncclCommFinalize(s));
    EXPECT(ncclCommFinalize(s), ncclInvalidArgument);
    OK(ncclCommDestroy(s));
    OK(ncclCommSplit(c, NCCL_SPLIT_NOCOLOR, 0, &s, NULL));
    TRUE(s == NULL);
    OK(ncclCommDestroy(c));
    /* The other inits. */
    OK(ncclGetUniqueId(&id));
    OK(ncclCommInitRank(&c, 1, id, 0));
    OK(ncclCommAbort(c));
    OK(ncclGetUniqueId(&id));
    OK(ncclCommInitRankScalable(&c, 1, 0, 1, &id, NULL));
    OK(ncclCommDestroy(c));
    /* Several roots' ids (PyTorch: one per 128 ranks): ringlet uses the first, and this
     * process's others are given back: 70 inits, each with a second id of its own, leave
     * ncclGetUniqueId working (a process holds at most 64 unused ids). */
    int scalable_ok = 1;
    for (int k = 0; k < 70 && scalable_ok; k++) {
        ncclUniqueId two[2];
        scalable_ok = ncclGetUniqueId(&two[0]) == ncclSuccess && ncclGetUniqueId(&two[1]) == ncclSuccess &&
                      ncclCommInitRankScalable(&c, 1, 0, 2, two, NULL) == ncclSuccess && ncclCommDestroy(c) == ncclSuccess;
        if (!scalable_ok) printf("FAIL: scalable init %d: %s\n", k, pncclGetLastError(NULL));
    }
    TRUE(scalable_ok);
    ncclComm_t all[2];
    OK(ncclCommInitAll(all, 2, NULL));
    for (int i = 0; i < N; i++) want[i] = 2 * a[i];
    int32_t *b2 = malloc(N * 4);
    OK(ncclGroupStart());
    OK(ncclAllReduce(a, b, N, ncclInt32, ncclSum, all[0], NULL));
    OK(ncclAllReduce(a, b2, N, ncclInt32, ncclSum, all[1], NULL));
    OK(ncclGroupEnd());
    TRUE(!memcmp(b, want, N * 4) && !memcmp(b2, want, N * 4));
    OK(ncclCommDestroy(all[0]));
    OK(ncclCommDestroy(all[1]));
    /* Bad input: clear errors. */
    EXPECT(ncclCommInitRank(&c, 2, id, 5), ncclInvalidArgument);
    EXPECT(ncclCommCount(NULL, &n), ncclInvalidArgument);
    /* NULL (what a failed init leaves) to destroy and abort: nothing to do, as NCCL */
    OK(ncclCommDestroy(NULL));
    OK(ncclCommAbort(NULL));
    free(a), free(b), free(b2), free(want);
    printf("call_all: %ld checks, %ld failed\n", g_checks, g_failed);
    return g_failed ? 1 : 0;
}
