# Shared by tests/mp/collectives.sh and tests/mp/stream.sh; sourced, not run.
#   scratch_dir NAME   TMP: a new temporary folder, removed at exit. Killed by TERM (a step's
#                      budget on the GPU machine), the script says which run it was in
#                      ($CURRENT, which it keeps up to date) and what that run's ranks had
#                      printed ($TMP/out, $TMP/err), then exits 143.
scratch_dir() {
    TMP=$(mktemp -d "${TMPDIR:-/tmp}/ringlet-$1.XXXXXX")
    SCRATCH_NAME=$1
    CURRENT=""
    trap 'rm -rf "$TMP"' EXIT
    trap 'echo "$SCRATCH_NAME.sh: killed during: ${CURRENT:-no run}"; grep -ahv " INFO: " "$TMP/out" "$TMP/err" 2>/dev/null | tail -n 40; exit 143' TERM
}
