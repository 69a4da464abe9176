/* The host side of NCCL 2.28's device API as a program built against NCCL's own headers
 * sees it in ringlet's libnccl.so.2: C++ on the CUDA toolkit's nccl.h and nccl_device.h,
 * as PyTorch uses them (NCCL's library is never linked or loaded). Built and run by
 * tests/mp/nccl_abi.sh:
 *   -DRINGLET_HEADER     built on ringlet's nccl.h instead: prints ncclTeam_t's layout only,
 *                        which the script compares with the layout NCCL's header gives;
 *   -DRINGLET_DECLS=F    F (ringlet's nccl.h's prototypes, preprocessed) is included after
 *                        NCCL's headers: a C function declared again with other types does
 *                        not compile, so every signature of ringlet's header is checked.
 * Run: ncclCommInitAll with 3 ranks in this process; on each, the teams (and NCCL's own
 * inline team helpers on them), the calls ringlet refuses and their messages, bad arguments.
 * Prints "nccl_device_probe: N checks, F failed"; exit 0 iff none failed. */
#include <stddef.h> /* before nccl_device.h, which uses size_t without it */
#include <stdio.h>

#ifdef RINGLET_HEADER
#include "nccl.h"
#else
#include <dlfcn.h>
#include <string.h>

#include <nccl.h>
#include <nccl_device.h>
#ifdef RINGLET_DECLS
extern "C" {
#include RINGLET_DECLS
}
#endif
#endif

static void print_layout(void) {
    printf("layout ncclTeam_t size %zu nRanks@%zu rank@%zu stride@%zu\n", sizeof(ncclTeam_t),
           offsetof(ncclTeam_t, nRanks), offsetof(ncclTeam_t, rank), offsetof(ncclTeam_t, stride));
}

#ifdef RINGLET_HEADER
int main() {
    print_layout();
    return 0;
}
#else
static int g_checks, g_failed;
static void check(bool ok, int line, const char *what, int rank) {
    g_checks++;
    if (!ok && ++g_failed < 30) printf("FAIL line %d, rank %d: %s (last error: %s)\n", line, rank, what, ncclGetLastError(NULL));
}
#define CHECK(cond, rank) check((cond), __LINE__, #cond, rank)

static bool same(ncclTeam_t a, int n, int r, int s) { return a.nRanks == n && a.rank == r && a.stride == s; }
static bool says(ncclComm_t c, const char *what) { return strstr(ncclGetLastError(c), what) != NULL; }

static void per_rank(ncclComm_t c, int r, int P) {
    ncclTeam_t w = ncclTeamWorld(c), l = ncclTeamLsa(c), rail = ncclTeamRail(c);
    CHECK(same(w, P, r, 1), r);
    CHECK(same(l, 1, 0, 1), r);    /* ringlet's LSA team: the rank alone */
    CHECK(same(rail, P, r, 1), r); /* so the rail is the world */
    for (int k = 0; k < P; k++) {
        CHECK(ncclTeamRankToWorld(c, w, k) == k, r);
        CHECK(ncclTeamRankToWorld(c, rail, k) == k, r);
        /* NCCL's inline helpers agree: world rank k is in the caller's LSA team iff it is the caller */
        CHECK(ncclTeamRankIsMember(l, w, k) == (k == r), r);
    }
    CHECK(ncclTeamRankToWorld(c, l, 0) == r, r);
    CHECK(ncclTeamRankToTeam(w, l, 0) == r, r);
    CHECK(same(ncclTeamOuterFactor(w, l.nRanks), rail.nRanks, rail.rank, rail.stride), r);
    CHECK(ncclTeamRankToLsa(c, l, 0) == 0, r);
    CHECK(ncclTeamRankToLsa(c, w, r) == 0, r);
    CHECK(ncclTeamRankToLsa(c, w, (r + 1) % P) == -1 && says(c, "LSA team"), r);
    /* bad arguments: -1 or an empty team, and a message */
    CHECK(ncclTeamRankToWorld(c, w, P) == -1 && says(c, "out of range"), r);
    CHECK(ncclTeamRankToWorld(c, w, -1) == -1, r);
    ncclTeam_t bad = {P, r, 0};
    CHECK(ncclTeamRankToWorld(c, bad, 0) == -1 && says(c, "not a team"), r);
    /* the calls ringlet refuses */
    static ncclDevComm_t dc;
    ncclDevCommRequirements_t reqs = {};
    CHECK(ncclDevCommCreate(c, &reqs, &dc) == ncclInvalidUsage && says(c, "ncclDevCommCreate is not provided"), r);
    CHECK(ncclDevCommCreate(c, &reqs, NULL) == ncclInvalidArgument, r);
    CHECK(ncclDevCommDestroy(c, &dc) == ncclInvalidUsage && says(c, "ncclDevCommDestroy"), r);
    CHECK(ncclDevCommDestroy(c, NULL) == ncclInvalidArgument, r);
    static ncclLsaBarrierHandle_t lh;
    static ncclGinBarrierHandle_t gh;
    static ncclLLA2AHandle_t ah;
    ncclDevResourceRequirements_t req = {};
    CHECK(ncclLsaBarrierCreateRequirement(l, 1, &lh, &req) == ncclInvalidUsage, r);
    CHECK(ncclGinBarrierCreateRequirement(c, rail, 1, &gh, &req) == ncclInvalidUsage &&
              says(c, "ncclGinBarrierCreateRequirement"),
          r);
    CHECK(ncclLLA2ACreateRequirement(1, 64, &ah, &req) == ncclInvalidUsage, r);
    CHECK(ncclLLA2ACalcSlots(64, 8) == -1 && says(NULL, "ncclLLA2ACalcSlots"), r);
#ifdef RINGLET_DECLS
    CHECK(same(pncclTeamWorld(c), P, r, 1), r); /* the profiling twin */
#endif
}

int main() {
    print_layout();
    Dl_info info;
    if (dladdr((void *)(ncclTeam_t(*)(ncclComm_t))ncclTeamWorld, &info) && info.dli_fname)
        printf("ncclTeamWorld from %s\n", info.dli_fname);
    const int P = 3;
    ncclComm_t comms[P];
    if (ncclCommInitAll(comms, P, NULL) != ncclSuccess) {
        printf("FAIL: ncclCommInitAll: %s\n", ncclGetLastError(NULL));
        return 1;
    }
    for (int r = 0; r < P; r++) per_rank(comms[r], r, P);
    /* no communicator */
    CHECK(same(ncclTeamWorld(NULL), 0, -1, 1) && says(NULL, "comm is NULL"), -1);
    CHECK(ncclTeamLsa(NULL).nRanks == 0 && ncclTeamRail(NULL).nRanks == 0, -1);
    CHECK(ncclTeamRankToWorld(NULL, ncclTeamWorld(comms[0]), 0) == -1, -1);
    CHECK(ncclTeamRankToLsa(NULL, ncclTeamLsa(comms[0]), 0) == -1, -1);
    CHECK(ncclDevCommCreate(NULL, NULL, NULL) == ncclInvalidArgument, -1);
    CHECK(ncclDevCommDestroy(NULL, NULL) == ncclInvalidArgument, -1);
    CHECK(ncclGinBarrierCreateRequirement(NULL, ncclTeamWorld(comms[0]), 1, NULL, NULL) == ncclInvalidArgument, -1);
    for (int r = 0; r < P; r++) CHECK(ncclCommDestroy(comms[r]) == ncclSuccess, r);
    printf("nccl_device_probe: %d checks, %d failed\n", g_checks, g_failed);
    return g_failed != 0;
}
#endif
