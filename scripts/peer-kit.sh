#!/usr/bin/env bash
# scripts/peer-kit.sh [build|verify|all]  - a self-contained Open MPI 4.1 + Gloo peer kit.
#
# Builds .peerkit/ (ignored by git) so that a machine without Open MPI, libgloo or internet (the GPU
# machine) can run the peer drivers of ../shared/peers: the Debian 12 packages of the Open MPI runtime
# and of libgloo0 are fetched with `apt-get download`, unpacked with `dpkg -x` into .peerkit/root/,
# pruned, and the drivers are compiled here against the same package versions.
#
#   build   (default) fetch, unpack, prune, compile the drivers, write env.sh and run_gloo.sh
#   verify  run 2-rank Open MPI (tcp and vader) and Gloo from the kit inside a throw-away chroot that
#           holds only a minimal Debian base (libc6, bash, coreutils, grep; no Open MPI, PMIx, hwloc,
#           libevent, Gloo, zlib, libudev or libstdc++), with the kit mounted at another path.
#           Needs root (unshare -m, chroot).
#   all     build, then verify
#
# Use on the target machine (bash):
#   . .peerkit/env.sh
#   mpirun -np 4 --mca pml ob1 --mca btl tcp,self --mca btl_tcp_if_include lo mpi_allreduce_bench 1.0
#   mpirun -np 4 --mca pml ob1 --mca btl vader,self mpi_allreduce_bench 1.0
#   .peerkit/run_gloo.sh 4 1.0 chunked,new_ring
# (.peerkit/README.txt has the details.)
#
# Environment (optional):
#   PEERKIT_DIR     output folder            (default: <repo>/.peerkit)
#   PEERKIT_CACHE   downloaded .deb files, chroot for verify (default: /tmp/peerkit-cache)
#   RINGLET_PEERS   peer sources             (default: <repo>/../shared/peers)
#   VERIFY_MAXB     largest size verify runs (default: 1048576)
#   VERIFY_RANKS    rank counts verify runs  (default: "2 4")
set -euo pipefail

HERE="$(cd "$(dirname "$0")" && pwd)"
ROOT="$(cd "$HERE/.." && pwd)"
KIT="${PEERKIT_DIR:-$ROOT/.peerkit}"
CACHE="${PEERKIT_CACHE:-/tmp/peerkit-cache}"
PEERS="${RINGLET_PEERS:-$ROOT/../shared/peers}"
MODE="${1:-build}"
MA=x86_64-linux-gnu

# Packages whose files the kit carries on LD_LIBRARY_PATH.
KIT_PKGS=(openmpi-bin libopenmpi3 openmpi-common libpmix2 libhwloc15 libevent-core-2.1-7
    libevent-pthreads-2.1-7 libmunge2 libgloo0 libhiredis0.14 libibverbs1 libnl-3-200 libnl-route-3-200)
# Common system libraries: carried, but put on LD_LIBRARY_PATH by env.sh only when the target lacks
# them (so that Python/PyTorch started from the same shell keep the system's newer copies).
FALLBACK_PKGS=(zlib1g libudev1 libstdc++6)
# Minimal base for the verify chroot.
BASE_PKGS=(libc6 libc-bin libgcc-s1 bash libtinfo6 coreutils libacl1 libattr1 libgmp10 libselinux1
    libpcre2-8-0 grep)

log() { echo "peer-kit: $*" >&2; }
die() { log "$*"; exit 1; }

fetch_debs() { # fetch_debs DIR PKG... : the installed version when there is one (ABI match with headers)
    local dir="$1"
    shift
    mkdir -p "$dir"
    local p v spec
    for p in "$@"; do
        if compgen -G "$dir/${p}_*.deb" >/dev/null; then continue; fi
        v="$(dpkg-query -W -f='${Version}' "$p" 2>/dev/null || true)"
        spec="$p${v:+=$v}"
        log "apt-get download $spec"
        if ! (cd "$dir" && apt-get download -q -o APT::Sandbox::User=root "$spec" >/dev/null 2>&1); then
            [[ "$spec" != "$p" ]] || die "apt-get download $p failed"
            log "  $spec not downloadable; taking the candidate version of $p (headers may differ)"
            (cd "$dir" && apt-get download -q -o APT::Sandbox::User=root "$p" >/dev/null) ||
                die "apt-get download $p failed"
        fi
    done
}

needed() { readelf -d "$1" 2>/dev/null | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p'; }

build() {
    if ! command -v apt-get >/dev/null || ! command -v dpkg >/dev/null; then die "needs apt-get and dpkg (Debian)"; fi
    [[ -f "$PEERS/mpi_allreduce_bench.c" ]] || die "no peer sources in $PEERS (set RINGLET_PEERS)"
    local ex="$ROOT/.git/info/exclude"
    if [[ -f "$ex" ]] && ! grep -qxF '/.peerkit/' "$ex"; then echo '/.peerkit/' >>"$ex"; fi

    fetch_debs "$CACHE/debs" "${KIT_PKGS[@]}" "${FALLBACK_PKGS[@]}"

    rm -rf "${KIT:?}"
    mkdir -p "$KIT/root" "$KIT/bin" "$KIT/src" "$KIT/fallback"
    local R="$KIT/root" p f
    for p in "${KIT_PKGS[@]}"; do dpkg -x "$(ls "$CACHE/debs/${p}"_*.deb | head -1)" "$R"; done

    if [[ -d "$R/lib" ]]; then # usr-merge: /lib/$MA (libnl-3) into /usr/lib/$MA
        cp -a "$R/lib/." "$R/usr/lib/" && rm -rf "${R:?}/lib"
    fi
    # ---- prune: docs, compiler wrappers, Java/Fortran/OpenSHMEM, components whose libraries we lack ----
    rm -rf "$R/usr/share/doc" "$R/usr/share/man" "$R/usr/share/lintian" "$R/usr/share/bug" \
        "$R/usr/share/openmpi/"*wrapper-data.txt "$R/usr/share/openmpi/amca-param-sets" \
        "$R/usr/share/openmpi/openmpi-valgrind.supp" "$R/usr/lib/$MA/pmix2/share/pmix/"*wrapper-data.txt \
        "$R/usr/lib/$MA/pmix2/share/pmix/pmix-valgrind.supp" "$R/etc/libibverbs.d" \
        "$R/usr/lib/$MA/libibverbs" "$R/usr/sbin" "$R/usr/lib/$MA/openmpi/lib/ompi_monitoring_prof.so"
    (cd "$R/usr/bin" && for f in *; do
        case "$f" in orterun | orted | ompi_info | orte-info | orte-clean | ompi-clean | mpirun.openmpi | mpiexec.openmpi) ;;
        *) rm -f "$f" ;;
        esac
    done && ln -sf orterun mpirun && ln -sf orterun mpiexec)
    rm -f "$R/usr/lib/$MA/"libmpi_java.so* "$R/usr/lib/$MA/"libmpi_mpifh* "$R/usr/lib/$MA/"libmpi_usempi* \
        "$R/usr/lib/$MA/"liboshmem.so* "$R/usr/lib/$MA/"libompitrace.so* "$R/usr/lib/$MA/"libmpi_cxx.so*
    local comp="$R/usr/lib/$MA/openmpi/lib/openmpi3"
    rm -f "$comp/"mca_{atomic,memheap,scoll,spml,sshmem}_*.so "$comp/mca_btl_openib.so"
    # available sonames: kit + fallback packages + glibc
    local have=" libc.so.6 libm.so.6 libdl.so.2 libpthread.so.0 librt.so.1 ld-linux-x86-64.so.2 "
    local tmpfb
    tmpfb="$(mktemp -d)"
    for p in "${FALLBACK_PKGS[@]}"; do dpkg -x "$(ls "$CACHE/debs/${p}"_*.deb | head -1)" "$tmpfb"; done
    for _ in 1 2 3; do # dropping a lib can orphan a component that needs it
        have=" libc.so.6 libm.so.6 libdl.so.2 libpthread.so.0 librt.so.1 ld-linux-x86-64.so.2 libgcc_s.so.1 "
        while IFS= read -r f; do have+="$(basename "$f") "; done < <(find "$R" "$tmpfb" -name 'lib*.so*' \( -type f -o -type l \))
        while IFS= read -r f; do
            local n missing=""
            for n in $(needed "$f"); do [[ "$have" == *" $n "* ]] || missing+=" $n"; done
            if [[ -n "$missing" ]]; then
                log "dropping $(basename "$f") (needs$missing)"
                rm -f "$f"
                case "$f" in */libmca_common_*) rm -f "$R/usr/lib/$MA/openmpi/lib/$(basename "${f%%.so*}").so" ;; esac
            fi
        done < <(find "$R/usr/lib" -name '*.so*' -type f)
    done
    find "$R" -xtype l -delete # dangling symlinks (dev links of removed libs)
    # PMIx's own parameter file hard-codes its component path; env.sh sets it instead.
    printf '# component path set by env.sh (PMIX_MCA_mca_base_component_path)\n' \
        >"$R/usr/lib/$MA/pmix2/share/pmix-mca-params.conf"
    mkdir -p "$R/usr/lib/$MA/hwloc" && : >"$R/usr/lib/$MA/hwloc/.keep" # empty hwloc plugin dir

    # ---- fallback copies of common system libraries (env.sh adds them only when missing) ----
    mkdir -p "$KIT/fallback/zlib" "$KIT/fallback/udev" "$KIT/fallback/stdcxx"
    find "$tmpfb" -name 'libz.so.1*' -exec cp -a {} "$KIT/fallback/zlib/" \;
    find "$tmpfb" -name 'libudev.so.1*' -exec cp -a {} "$KIT/fallback/udev/" \;
    find "$tmpfb" -name 'libstdc++.so.6*' ! -name '*.py' -exec cp -a {} "$KIT/fallback/stdcxx/" \;
    for f in zlib/libz.so.1 udev/libudev.so.1 stdcxx/libstdc++.so.6; do
        [[ -e "$KIT/fallback/$f" ]] || die "fallback $f missing"
    done
    rm -rf "$tmpfb"

    # ---- drivers (compiled against this machine's headers, same package versions as the kit) ----
    local B="$KIT/bin" S="$PEERS"
    cp "$S/mpi_allreduce_bench.c" "$S/gloo_allreduce_bench.cc" "$S/physlimits.c" "$S/run_gloo.sh" \
        "$S/README.md" "$KIT/src/"
    log "compiling the drivers"
    gcc -O3 -Wall -o "$B/physlimits" "$S/physlimits.c" -lpthread
    # as `mpicc -O2`, but without the wrapper's -rpath to the system's Open MPI
    # shellcheck disable=SC2046
    gcc -O2 -Wall $(mpicc --showme:compile) -o "$B/mpi_allreduce_bench" "$S/mpi_allreduce_bench.c" \
        -L/usr/lib/$MA -lmpi
    g++ -O3 -std=c++17 -Wall -o "$B/gloo_allreduce_bench" "$S/gloo_allreduce_bench.cc" -lgloo -lpthread
    strip -s "$B/physlimits" "$B/mpi_allreduce_bench" "$B/gloo_allreduce_bench"

    # libstdc++ symbol version the Gloo pieces need (env.sh checks the target's libstdc++ for it)
    local glibcxx
    glibcxx="$(objdump -T "$B/gloo_allreduce_bench" "$R/usr/lib/libgloo.so.0" 2>/dev/null |
        grep -o 'GLIBCXX_3\.4\.[0-9]*' | sort -t. -k3,3n -u | tail -1)"
    local glibc
    glibc="$(find "$B" "$R" -type f \( -name '*.so*' -o -perm -u+x \) -exec objdump -T {} + 2>/dev/null |
        grep -o 'GLIBC_2\.[0-9]*' | sort -t. -k2,2n -u | tail -1)"

    # ---- run_gloo.sh: the original, plus sourcing env.sh (binary found in bin/ next to it) ----
    sed '/^HERE=/a [[ -f "$HERE/env.sh" ]] \&\& . "$HERE/env.sh"   # peer-kit: kit libraries' \
        "$S/run_gloo.sh" >"$KIT/run_gloo.sh"
    chmod +x "$KIT/run_gloo.sh"
    grep -q 'peer-kit' "$KIT/run_gloo.sh" || die "adapting run_gloo.sh failed"

    write_env "$glibcxx"
    write_readme "$glibcxx" "$glibc"
    (cd "$KIT" && {
        echo "# peer-kit built $(date -u +%FT%TZ) on $(. /etc/os-release && echo "$PRETTY_NAME"), glibc $(ldd --version | head -1 | awk '{print $NF}')"
        echo "# requires: glibc >= ${glibc#GLIBC_} ; libstdc++ with $glibcxx (else fallback/stdcxx is used)"
        for p in "${KIT_PKGS[@]}" "${FALLBACK_PKGS[@]}"; do basename "$(ls "$CACHE/debs/${p}"_*.deb | head -1)"; done
    } >MANIFEST)
    log "kit: $KIT ($(du -sh "$KIT" | cut -f1), $(find "$KIT" -type f | wc -l) files)"
}

write_env() {
    local glibcxx="$1"
    cat >"$KIT/env.sh" <<EOF
# shellcheck shell=bash
# env.sh - source this (bash) to use the peer kit:  . .peerkit/env.sh
# Generated by scripts/peer-kit.sh. Relocatable: finds its own folder.
PEERKIT="\$(cd "\$(dirname "\${BASH_SOURCE[0]:-\$0}")" && pwd)"
export PEERKIT
_pk_r="\$PEERKIT/root"
_pk_lib="\$_pk_r/usr/lib/$MA"
_pk_pmix="\$_pk_lib/pmix2"

# --- programs and libraries (LD_LIBRARY_PATH is searched before the system's directories) ---
case ":\${PATH:-}:" in *":\$PEERKIT/bin:"*) ;; *) PATH="\$PEERKIT/bin:\$_pk_r/usr/bin\${PATH:+:\$PATH}" ;; esac
_pk_ld="\$_pk_lib:\$_pk_r/usr/lib:\$_pk_pmix/lib"
# common libraries: the system's copy when it has one, the kit's (Debian 12) otherwise
_pk_sys() { # _pk_sys SONAME : is SONAME in the system's library directories?
  local d
  for d in /lib/$MA /usr/lib/$MA /lib64 /usr/lib64 /lib /usr/lib; do [ -e "\$d/\$1" ] && return 0; done
  command -v ldconfig >/dev/null 2>&1 && ldconfig -p 2>/dev/null | grep -qF " \$1 " && return 0
  return 1
}
_pk_sys libz.so.1 || _pk_ld="\$_pk_ld:\$PEERKIT/fallback/zlib"
_pk_sys libudev.so.1 || _pk_ld="\$_pk_ld:\$PEERKIT/fallback/udev"
_pk_cxx=""
for _pk_d in /usr/lib/$MA /lib/$MA /usr/lib64 /lib64; do
  [ -e "\$_pk_d/libstdc++.so.6" ] && { _pk_cxx="\$_pk_d/libstdc++.so.6"; break; }
done
if [ -z "\$_pk_cxx" ] || ! grep -qaF "$glibcxx" "\$_pk_cxx" 2>/dev/null; then
  _pk_ld="\$_pk_ld:\$PEERKIT/fallback/stdcxx"   # system libstdc++ missing or older than $glibcxx
fi
case ":\${LD_LIBRARY_PATH:-}:" in *":\$_pk_lib:"*) ;; *) LD_LIBRARY_PATH="\$_pk_ld\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}" ;; esac
export PATH LD_LIBRARY_PATH

# --- Open MPI 4.1 relocation (Debian layout: prefix /usr, libdir .../openmpi/lib, sysconfdir /etc/openmpi) ---
export OPAL_PREFIX="\$_pk_r/usr"
export OPAL_EXEC_PREFIX="\$_pk_r/usr"
export OPAL_BINDIR="\$_pk_r/usr/bin"
export OPAL_SBINDIR="\$_pk_r/usr/sbin"
export OPAL_LIBEXECDIR="\$_pk_r/usr/libexec"
export OPAL_DATAROOTDIR="\$_pk_r/usr/share"
export OPAL_DATADIR="\$_pk_r/usr/share"
export OPAL_SYSCONFDIR="\$_pk_r/etc/openmpi"
export OPAL_LIBDIR="\$_pk_lib/openmpi/lib"
export OPAL_INCLUDEDIR="\$_pk_lib/openmpi/include"
export OPAL_PKGDATADIR="\$_pk_r/usr/share/openmpi"
export OPAL_PKGLIBDIR="\$_pk_lib/openmpi/lib/openmpi3"
export OPAL_PKGINCLUDEDIR="\$_pk_lib/openmpi/include/openmpi"
export OMPI_MCA_mca_base_component_path="\$OPAL_PKGLIBDIR"
export OMPI_MCA_mca_base_param_files="\$OPAL_SYSCONFDIR/openmpi-mca-params.conf"
export OMPI_MCA_orte_default_hostfile="\$OPAL_SYSCONFDIR/openmpi-default-hostfile"
# root is allowed; more ranks than detected cores is allowed
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1
# one node, no ssh needed: the rsh launcher refuses to start when neither ssh nor rsh is installed
export OMPI_MCA_plm=isolated
export OMPI_MCA_btl_base_warn_component_unused=0

# --- PMIx 4.2 (Debian prefix /usr/lib/$MA/pmix2, absolute sub-directories: set each) ---
export PMIX_PREFIX="\$_pk_pmix"
export PMIX_EXEC_PREFIX="\$_pk_pmix"
export PMIX_BINDIR="\$_pk_pmix/bin"
export PMIX_LIBEXECDIR="\$_pk_pmix/libexec"
export PMIX_DATADIR="\$_pk_pmix/share"
export PMIX_SYSCONFDIR="\$_pk_pmix/share"
export PMIX_LIBDIR="\$_pk_pmix/lib"
export PMIX_INCLUDEDIR="\$_pk_pmix/include"
export PMIX_PKGDATADIR="\$_pk_pmix/share/pmix"
export PMIX_PKGLIBDIR="\$_pk_pmix/lib/pmix"
export PMIX_PKGINCLUDEDIR="\$_pk_pmix/include/pmix"
export PMIX_MCA_mca_base_component_path="\$_pk_pmix/lib/pmix"

# --- hwloc: no plugins (the system's, if any, may be another hwloc version) ---
export HWLOC_PLUGINS_PATH="\$_pk_lib/hwloc"

unset _pk_r _pk_lib _pk_pmix _pk_ld _pk_cxx _pk_d
unset -f _pk_sys
EOF
}

write_readme() {
    local glibcxx="$1" glibc="$2"
    cat >"$KIT/README.txt" <<EOF
Peer kit (made by scripts/peer-kit.sh): Debian 12 Open MPI 4.1.4 runtime + libgloo0, relocatable,
and the peer drivers of shared/peers compiled against them (no -march=native).

  . .peerkit/env.sh           # bash; sets PATH, LD_LIBRARY_PATH, OPAL_*, PMIX_*, OMPI_* (see env.sh)

Open MPI (arguments: [target_s=1.0] [max_bytes=268435456]):
  mpirun -np N --mca pml ob1 --mca btl tcp,self --mca btl_tcp_if_include lo mpi_allreduce_bench 1.0
  mpirun -np N --mca pml ob1 --mca btl vader,self mpi_allreduce_bench 1.0
  (vader fails in containers that forbid process_vm_readv: add --mca btl_vader_single_copy_mechanism none)
Gloo (arguments: NRANKS [target_s] [algos] [max_bytes] [max_call_s]):
  .peerkit/run_gloo.sh N 1.0 chunked,new_ring
Memory ceilings:
  physlimits [MiB=64] [reps=20] [threads=1]

The GPU machine (Ubuntu 24.04, seen 2026-11) has its own Open MPI 4.1.6 and PMIx 5 in /usr, no ssh, and
sets OMPI_MCA_plm=isolated, OMPI_MCA_btl_vader_single_copy_mechanism=none, PMIX_MCA_gds=hash; env.sh
puts the kit first (PATH, LD_LIBRARY_PATH, OPAL_*/PMIX_* paths) and keeps those settings.
Needs glibc >= ${glibc#GLIBC_}. libz, libudev and libstdc++ ($glibcxx) come from the system when it
has them, from fallback/ otherwise. Sources of the drivers: src/. Package list: MANIFEST.
EOF
}

# ---------------------------------------------------------------- verify --------------------------------
verify() {
    [[ -f "$KIT/env.sh" ]] || die "no kit at $KIT (run build first)"
    [[ "$(id -u)" == 0 ]] || die "verify needs root (unshare -m, chroot)"
    local maxb="${VERIFY_MAXB:-1048576}" ranks="${VERIFY_RANKS:-2 4}"
    local CR="$CACHE/chroot"
    fetch_debs "$CACHE/base-debs" "${BASE_PKGS[@]}"
    rm -rf "$CR"
    mkdir -p "$CR"
    local p
    for p in "${BASE_PKGS[@]}"; do dpkg -x "$(ls "$CACHE/base-debs/${p}"_*.deb | head -1)" "$CR"; done
    # Debian 12 is usr-merged: /bin, /lib, /lib64 are links into /usr
    for p in bin sbin lib lib64; do [[ -e "$CR/$p" ]] || ln -s "usr/$p" "$CR/$p"; done
    mkdir -p "$CR"/{proc,sys,dev,tmp,root,etc,kit/peer-kit-here} && chmod 1777 "$CR/tmp"
    echo 'root:x:0:0:root:/root:/bin/bash' >"$CR/etc/passwd"
    echo 'root:x:0:' >"$CR/etc/group"
    echo '127.0.0.1 localhost' >"$CR/etc/hosts"
    cp /etc/hostname "$CR/etc/hostname" 2>/dev/null || true
    "$CR/usr/sbin/ldconfig" -r "$CR" 2>/dev/null || true
    local bad
    bad="$(cd "$CR" && find . -name 'libmpi*' -o -name 'libgloo*' -o -name 'libz.so*' -o -name 'libstdc++*' \
        -o -name 'libpmix*' -o -name 'libhwloc*' -o -name 'libevent*' | head -3)"
    [[ -z "$bad" ]] || die "chroot base unexpectedly holds $bad"

    cat >"$CR/root/check.sh" <<EOF
set -u
. /kit/peer-kit-here/env.sh
fail=0
ok() { echo "CHECK ok: \$*"; }
no() { echo "CHECK FAIL: \$*"; fail=1; }
echo "LD_LIBRARY_PATH=\$LD_LIBRARY_PATH"
ompi_info --path all --parsable > /tmp/paths.txt 2>&1 || no "ompi_info"
grep -E '^path:(prefix|libdir|pkglibdir|sysconfdir|pkgdatadir):' /tmp/paths.txt
if grep -E '^path:(prefix|libdir|pkglibdir|sysconfdir|pkgdatadir):' /tmp/paths.txt | grep -qv ':/kit/peer-kit-here/'; then no "ompi_info paths outside the kit"; else ok "ompi_info paths in the kit"; fi
n=\$(ompi_info --parsable 2>/dev/null | grep -cE '^mca:(btl|pml|plm|ess|odls|ras|rmaps|pmix):')
[ "\$n" -gt 15 ] && ok "ompi_info sees \$n btl/pml/plm/ess/odls/ras/rmaps/pmix components" || no "components: \$n"
ompi_info --parsable 2>/dev/null | grep -E '^mca:(btl|pml|plm|pmix):' | cut -d: -f2,3 | sort -u | tr '\n' ' '; echo
run() { echo "+ \$*"; timeout -k 5 120 "\$@" > /tmp/out.txt 2>&1; r=\$?; cat /tmp/out.txt; [ \$r = 0 ] && ! grep -q FAIL /tmp/out.txt && grep -q ' OK' /tmp/out.txt && ok "\$*" || no "rc=\$r: \$*"; }
for n in $ranks; do
run mpirun -np \$n --mca pml ob1 --mca btl tcp,self --mca btl_tcp_if_include lo mpi_allreduce_bench 0.05 $maxb
run mpirun -np \$n --mca pml ob1 --mca btl vader,self mpi_allreduce_bench 0.05 $maxb
run /kit/peer-kit-here/run_gloo.sh \$n 0.05 chunked,new_ring $maxb
done
physlimits 8 3 > /tmp/pl.txt 2>&1 && ok "physlimits" || no "physlimits"
exit \$fail
EOF
    log "verify: chroot $CR (no system Open MPI/Gloo), kit mounted at /kit/peer-kit-here"
    unshare -m --propagation private bash -c '
        set -e
        CR="$1"; KIT="$2"
        mount --bind "$KIT" "$CR/kit/peer-kit-here"
        mount -t proc proc "$CR/proc"
        mount --rbind /sys "$CR/sys"
        mount --rbind /dev "$CR/dev"
        exec chroot "$CR" /usr/bin/env -i PATH=/usr/bin:/bin HOME=/root TERM=dumb /bin/bash /root/check.sh
    ' _ "$CR" "$KIT"
}

case "$MODE" in
build) build ;;
verify) verify ;;
all) build && verify ;;
*) die "usage: $0 [build|verify|all]" ;;
esac
