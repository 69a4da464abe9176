# shellcheck shell=bash
# perf/peer_build.sh - sourced by perf/compare and perf/compare_cluster: a peer's benchmark driver,
# prebuilt or built here.
#
# peer_driver NAME SOURCE LOG COMPILER ARGS...
#   Prints the driver's path and returns 0, or prints why there is none and returns 1. Takes
#   $PEER_BIN/NAME when it exists (prebuilt, used as it is), then $PBIN/NAME when it is newer than
#   SOURCE (built here before), else compiles SOURCE into $PBIN/NAME with COMPILER ARGS, its output
#   in LOG; the "building" line goes to the caller's say (stderr).
peer_driver() {
    local name="$1" src="$2" log="$3" cc="$4" out="$PBIN/$1"
    shift 4
    if [[ -n "${PEER_BIN:-}" && -x "$PEER_BIN/$name" ]]; then
        echo "$PEER_BIN/$name"
        return 0
    fi
    if [[ -x "$out" && -f "$src" && "$out" -nt "$src" ]]; then
        echo "$out"
        return 0
    fi
    [[ -f "$src" ]] || { echo "no source $src (set PEER_SRC or PEER_BIN)"; return 1; }
    command -v "$cc" >/dev/null 2>&1 || { echo "no $cc"; return 1; }
    say "building $name: $cc $* $src"
    if "$cc" -o "$out" "$src" "$@" >"$log" 2>&1; then
        echo "$out"
        return 0
    fi
    echo "$cc failed, see $log"
    return 1
}
