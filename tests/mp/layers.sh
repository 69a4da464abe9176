#!/usr/bin/env bash
# The layers of ../shared/DESIGN.md (README.md, Architecture), one folder each, bottom to
# top; each may use its own folder and the folders below it, never one above:
#     base        src/base/      -> base
#     kernels     kernels/       -> kernels
#     device      src/device/    -> device, kernels, base
#     transports  transports/    -> transports, device, base
#     comm        src/comm/      -> comm, transports, device, kernels, base
#     algo        src/algo/      -> algo, comm, and what comm may
#     engine      src/engine/    -> engine, algo, and what algo may
#     api         src/api/       -> api, engine, and what engine may
#     ddp, nccl   src/ddp/, src/nccl/  -> their own folder, and the public API only
# (include/ringlet.h and ringlet_ddp.h, the public headers, are open to all.) Checked:
#   1. CUDA: no CUDA header and no CUDA runtime or driver call outside the device layer
#      (src/device/) and kernels/: a grep over the library (but src/nccl/nccl.h, which
#      includes CUDA's headers for NCCL's users), the tools, the examples and the tests that
#      use the library (tests/gpu/*.cu test the kernels themselves, and
#      perf/gpu_kernels_bench.cu measures them; they belong to kernels/' own checks).
#   2. Includes: a file includes only headers of its own folder or of folders its layer
#      may use (a header is found by name: header names are unique across the folders);
#      a library source outside these folders (a new folder, a file left in src/) fails.
#   3. Calls, from the symbols of $BUILD/obj (nm): every call from one object to another
#      goes down the layers or stays inside one.
#   4. Inside each folder of the core (comm, algo, engine, api), no loop of calls between
#      files: each file's callees never call it back, directly or through others (a
#      file-level graph without cycles). With 3, no loop of calls crosses folders either.
#      (The device layer's backends and the DDP layer's files call each other both ways.)
# Exit 0 = all hold, 1 = a violation (each printed) or no objects to read (a build that
# left none must not turn this check off), 77 = no nm or no python3.
set -u
cd "$(dirname "$0")/../.." || exit 1
BUILD=${BUILD:-build}
if ! command -v nm >/dev/null 2>&1 || ! command -v python3 >/dev/null 2>&1; then
    echo "SKIP: no nm or no python3"
    exit 77
fi
if ! ls "$BUILD"/obj/src/*/*.o >/dev/null 2>&1; then
    echo "FAIL: no objects in $BUILD/obj/src (build first: make)"
    exit 1
fi
fails=0

# ---- 1. CUDA outside the device layer and kernels/
files=$(ls src/*.[ch] src/*/*.[ch] transports/*.[ch] tools/*.c perf/*.c examples/*.c \
    tests/mp/*.c tests/unit/*.c include/*.h 2>/dev/null | grep -vE '^src/(device|nccl)/')
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

# ---- 2, 3 and 4: includes, and calls between objects
python3 - "$BUILD/obj" <<'EOF'
import os, re, subprocess, sys
root = sys.argv[1]
# Bottom to top; each layer's folder, and the layers it may use besides its own.
LAYERS = [
    ("base", "src/base", []),
    ("kernels", "kernels", []),
    ("device", "src/device", ["kernels", "base"]),
    ("transports", "transports", ["device", "base"]),
    ("comm", "src/comm", ["transports", "device", "kernels", "base"]),
    ("algo", "src/algo", ["comm", "transports", "device", "kernels", "base"]),
    ("engine", "src/engine", ["algo", "comm", "transports", "device", "kernels", "base"]),
    ("api", "src/api", ["engine", "algo", "comm", "transports", "device", "kernels", "base"]),
    ("ddp", "src/ddp", []),
    ("nccl", "src/nccl", []),
]
ORDER = ", ".join(n for n, _, _ in LAYERS[:8])
folder = {n: d for n, d, _ in LAYERS}
allowed = {n: set([n] + below) for n, _, below in LAYERS}
PUBLIC_API_ONLY = ("ddp", "nccl")  # and the public API (ringlet_*), through include/
NO_LOOPS = ("comm", "algo", "engine", "api")  # folders whose files call one way only
SRC_EXT = (".c", ".h", ".cu", ".cuh", ".inc")

def layer_of(path):
    path = os.path.normpath(path)
    for n, d, _ in LAYERS:
        if os.path.dirname(path) == d: return n
    return None

fails = 0
# ---- 2. includes
unplaced = [os.path.join(d, f) for d in ["src"] + [os.path.join("src", x) for x in sorted(os.listdir("src"))]
            if os.path.isdir(d) for f in sorted(os.listdir(d))
            if f.endswith(SRC_EXT) and layer_of(os.path.join(d, f)) is None]
where = {}  # header name -> layer ("public" for include/)
for n, d, _ in LAYERS:
    for f in os.listdir(d):
        if f.endswith((".h", ".cuh", ".inc")): where.setdefault(f, n)
for f in os.listdir("include"): where[f] = "public"
inc_re = re.compile(r'^\s*#\s*include\s*"([^"]+)"')
bad_inc = []
checked = 0
for n, d, _ in LAYERS:
    for f in sorted(os.listdir(d)):
        if not f.endswith(SRC_EXT): continue
        path = os.path.join(d, f)
        checked += 1
        with open(path, errors="replace") as fh:
            for lineno, line in enumerate(fh, 1):
                m = inc_re.match(line)
                if not m: continue
                inc = m.group(1)
                if "/" in inc:  # a path: the folder it names
                    t = layer_of(os.path.join(d, inc))
                    if os.path.normpath(os.path.join(d, os.path.dirname(inc))) == "include": t = "public"
                else:
                    t = where.get(inc)
                if t == "public": ok = True
                elif t is None: ok = False
                else: ok = t in allowed[n]
                if not ok:
                    what = "a header of no layer" if t is None else "%s, in %s/ (%s)" % (inc, folder[t], t)
                    bad_inc.append("%s:%d (%s) includes \"%s\": %s" % (path, lineno, n, inc, what))
if unplaced:
    print("FAIL: library sources in no layer's folder (README.md, Architecture; add the folder to tests/mp/layers.sh):")
    for u in unplaced: print("    " + u)
    fails += 1
if bad_inc:
    print("FAIL: includes that reach above their layer (layers bottom to top: %s):" % ORDER)
    for b in bad_inc: print("    " + b)
    fails += 1
if not unplaced and not bad_inc:
    print("ok:   %d files in %d folders include only headers of their own layer or of layers below" % (checked, len(LAYERS)))

# ---- 3. calls between objects
objs = []
for d, _, fs in os.walk(root):
    for f in fs:
        o = os.path.join(d, f)
        src = os.path.relpath(o, root)[:-2]
        # objects of sources that still exist (a moved file leaves its old object behind)
        if f.endswith(".o") and (os.path.exists(src + ".c") or os.path.exists(src + ".cu")):
            objs.append(o)
def olayer(o):
    return layer_of(os.path.relpath(o, root)) or "other"
defs, undefs = {}, {}
for o in sorted(objs):
    out = subprocess.run(["nm", "-P", o], capture_output=True, text=True).stdout
    undefs[o] = set()
    for line in out.splitlines():
        parts = line.split()
        if len(parts) < 2: continue
        name, kind = parts[0], parts[1]
        if kind == "U": undefs[o].add(name)
        elif kind in "TDBRCVW" and not name.startswith("."): defs.setdefault(name, o)
bad = []
edges = {}  # inside one folder: object -> objects it calls
rel = lambda o: os.path.relpath(o, root)[:-2]
for o in sorted(objs):
    lo = olayer(o)
    for s in sorted(undefs[o]):
        t = defs.get(s)
        if not t or t == o: continue
        lt = olayer(t)
        ok = lt in allowed.get(lo, set()) or (lo in PUBLIC_API_ONLY and s.startswith("ringlet_"))
        if not ok:
            bad.append("%s (%s) calls %s in %s (%s)" % (rel(o), lo, s, rel(t), lt))
        if lt == lo and lo in NO_LOOPS:
            edges.setdefault(o, set()).add(t)
if bad:
    print("FAIL: calls that go up the layers (layers bottom to top: %s; ddp and nccl: the public API only):" % ORDER)
    for b in bad: print("    " + b)
    fails += 1
else:
    print("ok:   %d objects: every call goes down the layers (%s; ddp and nccl on the public API)" % (len(objs), ORDER))

# ---- 4. loops of calls between the files of one folder
color, stack, cycles = {}, [], []
def visit(n):
    color[n] = 1; stack.append(n)
    for m in sorted(edges.get(n, ())):
        if color.get(m) == 1:
            cycles.append(stack[stack.index(m):] + [m])
        elif not color.get(m): visit(m)
    stack.pop(); color[n] = 2
for n in sorted(edges):
    if not color.get(n): visit(n)
if cycles:
    print("FAIL: loops of calls between the files of one folder (%s):" % ", ".join(NO_LOOPS))
    for c in cycles: print("    " + " -> ".join(rel(x) for x in c))
    fails += 1
else:
    print("ok:   no loop of calls between the files of one folder (%s: %d files)"
          % (", ".join(NO_LOOPS), len([o for o in objs if olayer(o) in NO_LOOPS])))
sys.exit(fails)  # the number of checks that failed
EOF
fails=$((fails + $?))
if [ $fails = 0 ]; then
    echo "layers: all hold"
    exit 0
fi
echo "layers: $fails checks failed"
exit 1
