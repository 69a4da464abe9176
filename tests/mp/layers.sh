#!/usr/bin/env bash
# The layers of ../shared/DESIGN.md, checked on the sources and on the built objects:
#   1. CUDA: no CUDA header and no CUDA runtime or driver call outside the device layer
#      (src/device/) and kernels/: a grep over the library, the tools, the examples and the
#      tests that use the library (tests/gpu/*.cu test the kernels themselves, and
#      perf/gpu_kernels_bench.cu measures them; they belong to kernels/' own checks).
#   2. Who calls whom, from the symbols of $BUILD/obj (nm): every call from one object to
#      another must go down the layers or stay inside one:
#        base (src/base)          -> base
#        kernels                  -> kernels
#        device (src/device)      -> device, kernels, base
#        transports               -> transports, device, base
#        core (src/*.c)           -> core, transports, device, kernels, base
#        ddp (src/ddp)            -> ddp, and the public API (ringlet_*) only
#        nccl (src/nccl)          -> nccl, and the public API (ringlet_*) only
#   3. Inside the core, no loop of calls between files: each file's callees never call it
#      back, directly or through others (a file-level graph without cycles).
#   4. Includes: a transport includes only transport headers, base headers and the device
#      layer's; the device layer only its own, base and kernels headers; the NCCL layer
#      only its own and ringlet.h.
# Exit 0 = all hold, 1 = a violation (each printed), 77 = no objects to read (build first).
set -u
cd "$(dirname "$0")/../.." || exit 1
BUILD=${BUILD:-build}
if [ ! -d "$BUILD/obj" ] || ! command -v nm >/dev/null 2>&1; then
    echo "SKIP: no objects in $BUILD/obj (build first) or no nm"
    exit 77
fi
fails=0

# ---- 1. CUDA outside the device layer and kernels/
files=$(ls src/*.[ch] src/base/*.[ch] src/ddp/*.[ch] transports/*.[ch] tools/*.c perf/*.c examples/*.c \
    tests/mp/*.c tests/unit/*.c include/*.h 2>/dev/null)
# headers: <cuda*.h>, <cuda_runtime*>, <nccl.h>; calls: cudaXxx( / cuXxx( (runtime and driver API)
hits=$(grep -nE '#[[:space:]]*include[[:space:]]*[<"](cuda|cuda_runtime|cuda_runtime_api|cuda_fp16|cuda_bf16|cudaTypedefs)[^>"]*[>"]|\bcuda[A-Z][A-Za-z0-9_]*[[:space:]]*\(|\bcu[A-Z][a-z][A-Za-z0-9_]*[[:space:]]*\(' \
    $files 2>/dev/null)
if [ -n "$hits" ]; then
    echo "FAIL: CUDA outside src/device/ and kernels/:"
    echo "$hits" | sed 's/^/    /'
    fails=$((fails + 1))
else
    echo "ok:   no CUDA header or call outside src/device/ and kernels/ ($(echo "$files" | wc -w) files)"
fi

# ---- 4. includes of transports and of the device layer
bad_inc() { # dir allowed-regex
    local f inc
    for f in $1; do
        while read -r inc; do
            [ -z "$inc" ] && continue
            if ! grep -qE "^($2)$" <<<"$inc"; then echo "    $f includes \"$inc\""; fi
        done < <(sed -n 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"\([^"]*\)".*/\1/p' "$f")
    done
}
base_h=$(cd src/base && ls *.h | tr '\n' '|' | sed 's/|$//; s/\./\\./g')
dev_h=$(cd src/device && ls *.h *.inc | tr '\n' '|' | sed 's/|$//; s/\./\\./g')
tp_h=$(cd transports && ls *.h | tr '\n' '|' | sed 's/|$//; s/\./\\./g')
out=$(bad_inc "transports/*.c transports/*.h" "$tp_h|$base_h|$dev_h|ringlet\\.h")
out+=$(bad_inc "src/device/*.c src/device/*.h src/device/*.inc" "$dev_h|$base_h|reduce\\.h|reduce_cuda\\.h|convert\\.h|ringlet\\.h")
out+=$(bad_inc "src/nccl/*.c src/nccl/*.h" "shim\\.h|nccl\\.h|ringlet\\.h")
if [ -n "$out" ]; then
    echo "FAIL: includes that reach above their layer:"
    echo "$out"
    fails=$((fails + 1))
else
    echo "ok:   transports, the device layer and the NCCL layer include only what their layer may"
fi

# ---- 2 and 3. calls between objects
python3 - "$BUILD/obj" <<'EOF' || fails=$((fails + 1))
import os, subprocess, sys
root = sys.argv[1]
objs = []
for d, _, fs in os.walk(root):
    for f in fs:
        o = os.path.join(d, f)
        src = os.path.relpath(o, root)[:-2]
        # objects of sources that still exist (a moved file leaves its old object behind)
        if f.endswith(".o") and (os.path.exists(src + ".c") or os.path.exists(src + ".cu")):
            objs.append(o)
def layer(path):
    rel = os.path.relpath(path, root)
    if rel.startswith("src/base/"): return "base"
    if rel.startswith("src/device/"): return "device"
    if rel.startswith("src/ddp/"): return "ddp"
    if rel.startswith("src/nccl/"): return "nccl"
    if rel.startswith("src/"): return "core"
    if rel.startswith("transports/"): return "transports"
    if rel.startswith("kernels/"): return "kernels"
    return "other"
allowed = {
    "base": {"base"}, "kernels": {"kernels"}, "device": {"device", "kernels", "base"},
    "transports": {"transports", "device", "base"},
    "core": {"core", "transports", "device", "kernels", "base"}, "ddp": {"ddp"}, "nccl": {"nccl"},
}
defs, undefs = {}, {}
for o in objs:
    out = subprocess.run(["nm", "-P", o], capture_output=True, text=True).stdout
    undefs[o] = set()
    for line in out.splitlines():
        parts = line.split()
        if len(parts) < 2: continue
        name, kind = parts[0], parts[1]
        if kind == "U": undefs[o].add(name)
        elif kind in "TDBRCVW" and not name.startswith("."): defs.setdefault(name, o)
bad = []
edges = {}
for o in objs:
    lo = layer(o)
    for s in sorted(undefs[o]):
        t = defs.get(s)
        if not t or t == o: continue
        lt = layer(t)
        ok = lt in allowed.get(lo, set()) or (lo in ("ddp", "nccl") and s.startswith("ringlet_"))
        if not ok:
            bad.append("%s (%s) calls %s in %s (%s)" % (os.path.relpath(o, root), lo, s, os.path.relpath(t, root), lt))
        if lo == "core" and lt == "core":
            edges.setdefault(o, set()).add(t)
if bad:
    print("FAIL: calls that go up the layers:")
    for b in bad: print("    " + b)
else:
    print("ok:   %d objects: every call goes down the layers (base, kernels, device, transports, core; ddp and nccl on the public API)" % len(objs))
# cycles among core files
color, stack, cycles = {}, [], []
def visit(n):
    color[n] = 1; stack.append(n)
    for m in sorted(edges.get(n, ())):
        if color.get(m) == 1 and not cycles:
            cycles.append(stack[stack.index(m):] + [m])
        elif not color.get(m): visit(m)
    stack.pop(); color[n] = 2
for n in sorted(edges):
    if not color.get(n): visit(n)
if cycles:
    print("FAIL: a loop of calls between core files: " + " -> ".join(os.path.basename(c) for c in cycles[0]))
else:
    print("ok:   no loop of calls between the core's %d files" % len([o for o in objs if layer(o) == "core"]))
sys.exit(1 if bad or cycles else 0)
EOF
if [ $fails = 0 ]; then
    echo "layers: all hold"
    exit 0
fi
echo "layers: $fails checks failed"
exit 1
