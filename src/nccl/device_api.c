/* The host side of NCCL 2.28's device API (NCCL declares it in its nccl_device headers),
 * exported so that programs linked against NCCL 2.28 load on ringlet: PyTorch 2.11's
 * libtorch_cuda references ncclDevCommDestroy and fails to import without it.
 *
 * ringlet has no device API: kernels cannot call it, and it offers no device communicator,
 * no LSA windows (peers' memory that a kernel loads from and stores to), no GIN
 * (GPU-initiated networking) and no LL all-to-all. So:
 *   - the team queries answer from the communicator: the world is every rank, and the LSA
 *     team is the rank alone (so the rail team, the rank at the caller's place in each LSA
 *     team, is the world again);
 *   - ncclDevCommCreate and the *CreateRequirement calls answer ncclInvalidUsage, as the
 *     layer's other calls that ringlet does not provide do (comm.c), and say why;
 *   - ncclDevCommDestroy answers the same: nothing it is given was made here;
 *   - the calls that return an int or a team have no result code: they return -1 or an
 *     empty team, and leave the reason in ncclGetLastError and the warning log. */
#include <stddef.h>

#include "shim.h"

/* The LSA team's size: no rank's memory is open to another's kernels through ringlet. */
#define LSA_SIZE 1

_Static_assert(sizeof(ncclTeam_t) == 3 * sizeof(int) && offsetof(ncclTeam_t, rank) == sizeof(int) &&
                   offsetof(ncclTeam_t, stride) == 2 * sizeof(int),
               "ncclTeam_t must be laid out as NCCL 2.28's struct ncclTeam");

/* What a team query returns on error: no ranks, the caller not in it; stride 1, so that
 * NCCL's inline team helpers (ncclTeamRankIsMember...) never divide by 0 with it. */
static const ncclTeam_t no_team = {0, -1, 1};

static ncclResult_t not_provided(struct ncclComm *c, const char *fn) {
    return shim_fail(c && c->magic == SHIM_MAGIC ? c : NULL, ncclInvalidUsage,
                     "%s is not provided by ringlet: it has no NCCL device API (no device communicator, LSA "
                     "windows, GIN or LL all-to-all for kernels to call); use the host-side collectives",
                     fn);
}

ncclTeam_t ncclTeamWorld(ncclComm_t comm) {
    if (shim_ready(comm, "ncclTeamWorld")) return no_team;
    return (ncclTeam_t){comm->nranks, comm->rank, 1};
}

ncclTeam_t ncclTeamLsa(ncclComm_t comm) {
    if (shim_ready(comm, "ncclTeamLsa")) return no_team;
    return (ncclTeam_t){LSA_SIZE, comm->rank % LSA_SIZE, 1};
}

/* The ranks at the caller's place in every LSA team: one per LSA team, LSA_SIZE apart. */
ncclTeam_t ncclTeamRail(ncclComm_t comm) {
    if (shim_ready(comm, "ncclTeamRail")) return no_team;
    return (ncclTeam_t){comm->nranks / LSA_SIZE, comm->rank / LSA_SIZE, LSA_SIZE};
}

/* A team of comm's holds the caller at tm.rank, and its rank r is (r - tm.rank) * stride
 * ranks away from the caller. Returns that rank's place in the world, or in the caller's
 * LSA team (lsa); -1, with the reason recorded, where the team or the rank is not one of
 * comm's or the rank is not in the LSA team. */
static int team_rank_to(ncclComm_t comm, ncclTeam_t tm, int rank, int lsa, const char *fn) {
    if (shim_ready(comm, fn)) return -1;
    if (tm.nRanks < 1 || tm.nRanks > comm->nranks || tm.rank < 0 || tm.rank >= tm.nRanks || tm.stride < 1) {
        shim_fail(comm, ncclInvalidArgument, "%s: {nRanks %d, rank %d, stride %d} is not a team of this communicator",
                  fn, tm.nRanks, tm.rank, tm.stride);
        return -1;
    }
    if (rank < 0 || rank >= tm.nRanks) {
        shim_fail(comm, ncclInvalidArgument, "%s: rank %d is out of range (the team has %d ranks)", fn, rank,
                  tm.nRanks);
        return -1;
    }
    int base = lsa ? comm->rank % LSA_SIZE : comm->rank, n = lsa ? LSA_SIZE : comm->nranks;
    long long r = base + (long long)(rank - tm.rank) * tm.stride;
    if (r < 0 || r >= n) {
        shim_fail(comm, ncclInvalidArgument, "%s: rank %d of the team {nRanks %d, rank %d, stride %d} is not in %s", fn,
                  rank, tm.nRanks, tm.rank, tm.stride,
                  lsa ? "this rank's LSA team (ringlet's LSA team is the rank alone)" : "the communicator");
        return -1;
    }
    return (int)r;
}

int ncclTeamRankToWorld(ncclComm_t comm, ncclTeam_t tm, int rank) {
    return team_rank_to(comm, tm, rank, 0, "ncclTeamRankToWorld");
}

int ncclTeamRankToLsa(ncclComm_t comm, ncclTeam_t tm, int rank) {
    return team_rank_to(comm, tm, rank, 1, "ncclTeamRankToLsa");
}

ncclResult_t ncclDevCommCreate(ncclComm_t comm, const ncclDevCommRequirements_t *reqs, ncclDevComm_t *outDevComm) {
    (void)reqs;
    ncclResult_t rc = shim_ready(comm, "ncclDevCommCreate");
    if (rc) return rc;
    if (!outDevComm) return shim_fail(comm, ncclInvalidArgument, "ncclDevCommCreate: outDevComm is NULL");
    return not_provided(comm, "ncclDevCommCreate"); /* *outDevComm is left as it was */
}

ncclResult_t ncclDevCommDestroy(ncclComm_t comm, const ncclDevComm_t *devComm) {
    ncclResult_t rc = shim_ready(comm, "ncclDevCommDestroy");
    if (rc) return rc;
    if (!devComm) return shim_fail(comm, ncclInvalidArgument, "ncclDevCommDestroy: devComm is NULL");
    return shim_fail(comm, ncclInvalidUsage,
                     "ncclDevCommDestroy: this device communicator was not made by ringlet's ncclDevCommCreate, "
                     "which makes none (ringlet has no NCCL device API)");
}

ncclResult_t ncclLsaBarrierCreateRequirement(ncclTeam_t team, int nBarriers, ncclLsaBarrierHandle_t *outHandle,
                                             ncclDevResourceRequirements_t *outReq) {
    (void)team, (void)nBarriers, (void)outHandle, (void)outReq;
    return not_provided(NULL, "ncclLsaBarrierCreateRequirement");
}

ncclResult_t ncclGinBarrierCreateRequirement(ncclComm_t comm, ncclTeam_t team, int nBarriers,
                                             ncclGinBarrierHandle_t *outHandle, ncclDevResourceRequirements_t *outReq) {
    (void)team, (void)nBarriers, (void)outHandle, (void)outReq;
    ncclResult_t rc = shim_ready(comm, "ncclGinBarrierCreateRequirement");
    return rc ? rc : not_provided(comm, "ncclGinBarrierCreateRequirement");
}

ncclResult_t ncclLLA2ACreateRequirement(int nBlocks, int nSlots, ncclLLA2AHandle_t *outHandle,
                                        ncclDevResourceRequirements_t *outReq) {
    (void)nBlocks, (void)nSlots, (void)outHandle, (void)outReq;
    return not_provided(NULL, "ncclLLA2ACreateRequirement");
}

/* The slots an LL all-to-all of maxElts elements of maxEltSize bytes needs in NCCL's
 * layout. ringlet has no such all-to-all, hence no slot count to give: -1 (0 would read as
 * "needs none", and any other number would be a guess at NCCL's internals). */
int ncclLLA2ACalcSlots(int maxElts, int maxEltSize) {
    (void)maxElts, (void)maxEltSize;
    not_provided(NULL, "ncclLLA2ACalcSlots");
    return -1;
}

SHIM_TWIN(TeamWorld);
SHIM_TWIN(TeamLsa);
SHIM_TWIN(TeamRail);
SHIM_TWIN(TeamRankToWorld);
SHIM_TWIN(TeamRankToLsa);
SHIM_TWIN(DevCommCreate);
SHIM_TWIN(DevCommDestroy);
SHIM_TWIN(LsaBarrierCreateRequirement);
SHIM_TWIN(GinBarrierCreateRequirement);
SHIM_TWIN(LLA2ACreateRequirement);
SHIM_TWIN(LLA2ACalcSlots);
