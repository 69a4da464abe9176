#!/usr/bin/env bash
# README.md's "Layout" section names every source file, so that a reader finds each one
# there: every *.c, *.h, *.cu, *.cuh, *.inc, *.cc, *.py and *.sh under the folders below
# (the tree's files, tracked or new: git ls-files, or find outside a git checkout).
# A file is named when the section holds its path (tools/ringlet-run.c), or holds its name
# as a whole word in the block of its folder: the line that starts with the folder
# ("src/comm/   ...") and the indented lines after it, up to the next line that starts
# at the margin.
# Exit 0 = every file named, 1 = some are not (each printed).
set -u
cd "$(dirname "$0")/../.." || exit 1
ROOTS=(src transports kernels tools perf)
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
    # tracked, and new ones not ignored; minus those deleted but not yet committed
    files=$(git ls-files --cached --others --exclude-standard -- "${ROOTS[@]}" | sort -u |
        while read -r f; do [ -f "$f" ] && echo "$f"; done)
else
    files=$(find "${ROOTS[@]}" -type f | sort)
fi
files=$(grep -E '\.(c|h|cu|cuh|inc|cc|py|sh)$' <<<"$files")
[ -n "$files" ] || { echo "FAIL: no source files found under ${ROOTS[*]}"; exit 1; }
FILES=$files python3 - README.md <<'EOF'
import os, re, sys
readme = open(sys.argv[1]).read()
m = re.search(r"^## Layout\n(.*?)(?=^## )", readme, re.S | re.M)
if not m:
    print("FAIL: README.md has no \"## Layout\" section"); sys.exit(1)
section = m.group(1)
blocks = {}  # folder ("src/comm/") -> its text
cur = None
for line in section.splitlines():
    if line and not line[0].isspace():
        first = line.split()[0]
        cur = first if first.endswith("/") else None
        if cur: blocks[cur] = blocks.get(cur, "") + line[len(first):] + "\n"
    elif cur and line.strip():
        blocks[cur] += line + "\n"
    elif not line.strip():
        cur = None
def named(path):
    if re.search(r"(?<![\w./-])" + re.escape(path) + r"(?![\w-])", section): return True
    text = blocks.get(os.path.dirname(path) + "/", "")
    return re.search(r"(?<![\w./-])" + re.escape(os.path.basename(path)) + r"(?![\w-])", text) is not None
files = [f for f in os.environ["FILES"].split() if f]
missing = [f for f in files if not named(f)]
if missing:
    print("FAIL: README.md's Layout section does not name %d of %d source files (add each to its folder's block):"
          % (len(missing), len(files)))
    for f in missing: print("    " + f)
    sys.exit(1)
print("ok:   README.md's Layout section names all %d source files under src/, transports/, kernels/, tools/, perf/"
      % len(files))
EOF
