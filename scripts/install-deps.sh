#!/usr/bin/env bash
# Installs the Debian packages ringlet needs, when some are missing.
#   scripts/install-deps.sh            build + test dependencies
#   scripts/install-deps.sh peers      also the peers perf/compare runs (Open MPI, Gloo) and its plot (matplotlib)
# As root it runs apt-get; otherwise it says what to install and goes on (the build
# itself only needs a C compiler and make).
set -u
# build and test: the compiler; verbs headers (else the IB transport is built as a stub;
# libibverbs itself is only dlopen'd); rdma-core + perftest for the IB tests in the VM;
# Debian's PyTorch (CPU) and numpy for the Python package and the DDP tests; clang and
# its runtime (libFuzzer) for tests/mp/fuzz.sh; valgrind for tests/mp/valgrind.sh;
# iproute2 (ip netns, tc netem) for the network-fault tests.
pkgs=(gcc g++ make libc6-dev pkg-config python3 procps iproute2
      libibverbs-dev ibverbs-providers rdma-core perftest
      python3-torch python3-numpy clang libclang-rt-dev valgrind)
if [ "${1:-}" = peers ]; then
    pkgs+=(g++ openmpi-bin libopenmpi-dev libgloo-dev iperf3 python3-matplotlib)
fi
missing=()
for p in "${pkgs[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
if [ "$(id -u)" -ne 0 ]; then
    echo "install-deps: missing Debian packages: ${missing[*]} (run as root, or: sudo apt-get install ${missing[*]})" >&2
    exit 0
fi
echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq >/dev/null || echo "install-deps: apt-get update failed" >&2
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null && exit 0
# Together they failed (no network, or one package this release lacks): one at a time, so
# the others still come; what stays missing is said, and the tests that need it skip. Only
# a missing compiler or make stops here: nothing could be built.
failed=()
for p in "${missing[@]}"; do
    apt-get install -y -qq --no-install-recommends "$p" >/dev/null 2>&1 || failed+=("$p")
done
[ ${#failed[@]} -eq 0 ] && exit 0
echo "install-deps: could not install ${failed[*]} (the tests that need them skip)" >&2
for tool in cc make; do
    command -v "$tool" >/dev/null 2>&1 || { echo "install-deps: no $tool: nothing can be built" >&2; exit 1; }
done
exit 0
