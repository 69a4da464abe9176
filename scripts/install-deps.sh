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
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null || {
    echo "install-deps: apt-get install ${missing[*]} failed" >&2
    exit 1
}
