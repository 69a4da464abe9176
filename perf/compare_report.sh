#!/usr/bin/env bash
# perf/compare's report, sourced by perf/compare once the runs are done (or for --report):
# summary.csv (medians and bests per rank count, peer, kind and size), the table with its
# ratios and goals (table.txt), results.json, and the plot (compare.png). It reads the
# variables perf/compare set (OUT, CSV, HERE, META_*, ringlet_list, peer_list, MISSING, ...).
# ---------------------------------------------------------------- summary ---------------------------------
# summary.csv: ranks,peer,kind,bytes,runs,ok,wrong,best,median (busbw for bw, time_us for lat);
# ringlet-<t> is ringlet's out-of-place form, ringlet-<t>@ip its in-place form (Open MPI's driver
# is out-of-place, Gloo's in-place: each is compared with ringlet's form of the same kind)
SUM="$OUT/summary.csv"
awk -F, 'NR > 1 {
        peer = ($3 ~ /^ringlet-/ && $8 == "ip") ? $3 "@ip" : $3
        k = $2 "," peer "," $9 "," $4; runs[k]++
        if ($7 == "OK") { v = ($9 == "lat") ? $5 : $6; n = ++ok[k]; val[k, n] = v }
        if ($7 == "WRONG") wrong[k]++
    }
    END {
        print "ranks,peer,kind,bytes,runs,ok,wrong,best,median"
        for (k in runs) {
            n = ok[k] + 0
            for (i = 1; i <= n; i++) a[i] = val[k, i] + 0
            for (i = 2; i <= n; i++) { x = a[i]; for (j = i - 1; j >= 1 && a[j] > x; j--) a[j + 1] = a[j]; a[j + 1] = x }
            split(k, f, ",")
            if (n == 0) { best = ""; med = "" }
            else {
                med = (n % 2) ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
                best = (f[3] == "lat") ? a[1] : a[n]  # latency: the smallest time is the best
            }
            printf "%s,%d,%d,%d,%s,%s\n", k, runs[k], n, wrong[k] + 0, best, med
        }
    }' "$CSV" | { IFS= read -r h; echo "$h"; sort -t, -k1,1n -k3,3 -k4,4n -k2,2; } >"$SUM"

table() {
    local cols=("${ringlet_list[@]}")
    local p
    for p in "${ringlet_list[@]}"; do cols+=("$p@ip"); done
    for p in "${peer_list[@]}"; do [[ -z "${MISSING[$p]:-}" ]] && cols+=("$p"); done
    echo "# perf/compare: all-reduce float32 sum, $META_DATE"
    echo "# host $META_HOST, $META_NPROC CPUs ($META_CPU), $META_MEM, $META_KERNEL"
    echo "# ringlet commit $META_COMMIT; $PASSES interleaved passes; ranks: $RANKS; elapsed ${ELAPSED}s"
    [[ "${HOG:-0}" == 1 ]] && echo "# with a CPU hog (one busy process) running beside every measurement"
    case "${BIND:-}" in
    "") ;;
    none) echo "# ringlet's ranks: unbound, BIND=none (Open MPI: mpirun's default binding)" ;;
    *) echo "# ringlet's ranks: ringlet-run --bind $BIND (Open MPI: mpirun's default binding)" ;;
    esac
    echo "# peers: ${cols[*]}"
    for p in "${!MISSING[@]}"; do echo "# missing: $p: ${MISSING[$p]}"; done
    echo "# cells: median / best over the passes with a checked, correct result; (k/N) when only k of N"
    echo "#   passes gave one, '!' when a result was wrong, '-' when none. busbw = algbw x 2(n-1)/n in GB/s"
    echo "#   (1e9 B/s). ringlet-<t>: out-of-place (ringlet-perf's first form), ringlet-<t>@ip: in place (its"
    echo "#   second); Open MPI's driver is out-of-place, Gloo's in place: ratios take ringlet's form of the same kind."
    awk -F, -v cols="${cols[*]}" -v ranks="$RANKS" -v def="$DEFAULT" -v passes="$PASSES" \
        -v gmin="$GOAL_MIN" -v gband="$GOAL_BAND" -v latb="$LAT_B" -v shm_mpi="$SHM_MPI_MIN" -v ceil="$SHM_CEILING" \
        -v cfrac="$CEILING_FRAC" -v tcp_mpi="$TCP_MPI_MIN" -v tcp_gloo="$TCP_GLOO_MIN" -v lat_mpi="$LAT_MPI_MIN" \
        -v lat_gloo="$LAT_GLOO_MIN" -v e_tm="$EVERY_TCP_MPI_MIN" -v e_tmb="$EVERY_TCP_MPI_BIG_MIN" \
        -v e_tg="$EVERY_TCP_GLOO_MIN" -v e_sm="$EVERY_SHM_MPI_MIN" '
    function pad(w) { return "  %-" w "s" }
    function trim(s) { sub(/ +$/, "", s); return s }
    function rpad(h) { return "  %" (length(h) > 8 ? length(h) : 8) "s" }
    function hs(b) { if (b >= 1048576 && b % 1048576 == 0) return (b / 1048576) " MiB"
                     if (b >= 1024 && b % 1024 == 0) return (b / 1024) " KiB"; return b " B" }
    function cell(k, lat,   s) {
        if (!(k in runs)) return "-"
        if (ok[k] == 0) return wrong[k] ? "! wrong" : "-"
        s = lat ? sprintf("%.1f / %.1f", med[k], best[k]) : sprintf("%.3f / %.3f", med[k], best[k])
        if (ok[k] < runs[k]) s = s sprintf(" (%d/%d)", ok[k], runs[k])
        if (wrong[k]) s = s " !"
        return s
    }
    function m(r, p, b, kind,   k) { k = r SUBSEP p SUBSEP kind SUBSEP b; return (k in med && ok[k] > 0) ? med[k] + 0 : "" }
    # ringlet row who against peer: its in-place form against Gloo (whose driver is in place)
    function form(who, peer) { return (peer ~ /^gloo/ && who ~ /^ringlet-/ && who !~ /@ip$/) ? who "@ip" : who }
    function mf(r, who, peer, b, kind) { return m(r, form(who, peer), b, kind) }
    function ratio(x, y) { return (x == "" || y == "" || y == 0) ? "" : x / y }
    function fr(x) { return x == "" ? "-" : sprintf("%.2f", x) }
    function verdict(x, lim) { return x == "" ? "n/a" : (x >= lim ? "PASS" : "MISS") }
    function bestpeer(r, b, kind,   i, v, bv) {  # the best median among the libraries beside ringlet
        bv = ""; bestname = ""; bestgaps = 0  # bestgaps: peers with no result there (failed runs)
        for (i = 1; i <= nc; i++) {
            if (c[i] ~ /^ringlet-/ || c[i] == "tcp-raw") continue
            v = m(r, c[i], b, kind)
            if (v == "") { if ((r SUBSEP c[i] SUBSEP kind SUBSEP b) in runs) bestgaps++; continue }
            if (bv == "" || (kind == "lat" ? v < bv : v > bv)) { bv = v; bestname = c[i] }
        }
        return bv
    }
    function nok(r, p, b, kind,   k) { k = r SUBSEP p SUBSEP kind SUBSEP b; return ok[k] + 0 }
    function goal(text, x, lim, np) {
        printf "  %-66s %6s  %s [>= %s]%s\n", text, fr(x), verdict(x, lim), lim, (x != "" && np > 0 && np < 3) ? " (fewer than 3 passes)" : ""
        ngoal++  # one not measured (a failed run) counts, as not passed
        if (x == "") nna++; else if (x >= lim) npass++
    }
    NR > 1 {
        k = $1 SUBSEP $2 SUBSEP $3 SUBSEP $4
        runs[k] = $5; ok[k] = $6; wrong[k] = $7; best[k] = $8; med[k] = $9
        if ($3 == "bw") bsz[$4] = 1
    }
    END {
        nc = split(cols, c, " "); nr = split(ranks, R, " ")
        for (i = 1; i <= nc; i++) havecol[c[i]] = 1
        ns = 0; for (b in bsz) S[++ns] = b + 0
        for (i = 2; i <= ns; i++) { x = S[i]; for (j = i - 1; j >= 1 && S[j] > x; j--) S[j + 1] = S[j]; S[j + 1] = x }
        for (ri = 1; ri <= nr; ri++) {
            r = R[ri]
            printf "\n## %d ranks: busbw (GB/s), median / best of %d passes\n", r, passes
            haslat = 0
            for (i = 1; i <= nc; i++) if ((r SUBSEP c[i] SUBSEP "lat" SUBSEP latb) in runs) haslat = 1
            for (i = 1; i <= nc; i++) {  # the cells first, for the widths of the columns
                W[i] = length(c[i])
                for (si = 1; si <= ns; si++) { T[i, si] = cell(r SUBSEP c[i] SUBSEP "bw" SUBSEP S[si], 0); if (length(T[i, si]) > W[i]) W[i] = length(T[i, si]) }
                T[i, 0] = cell(r SUBSEP c[i] SUBSEP "lat" SUBSEP latb, 1); if (haslat && length(T[i, 0]) > W[i]) W[i] = length(T[i, 0])
            }
            line = sprintf("%-9s", "size"); for (i = 1; i <= nc; i++) line = line sprintf(pad(W[i]), c[i]); print trim(line)
            for (si = 1; si <= ns; si++) {
                line = sprintf("%-9s", hs(S[si]))
                for (i = 1; i <= nc; i++) line = line sprintf(pad(W[i]), T[i, si])
                print trim(line)
            }
            if (haslat) {
                line = sprintf("%-9s", hs(latb) " lat")
                for (i = 1; i <= nc; i++) line = line sprintf(pad(W[i]), T[i, 0])
                print line "   <- latency: time (us), median / best"
            }
        }
        if (def == "") exit
        # ratios: ringlet default / each peer and / the best peer; ringlet-tcp / the TCP peers
        tcp = ""; for (i = 1; i <= nc; i++) if (c[i] == "ringlet-tcp" && def != "ringlet-tcp") tcp = c[i]
        nh = 0
        for (i = 1; i <= nc; i++) if (c[i] !~ /^ringlet-/ && c[i] != "tcp-raw") { H[++nh] = c[i]; HA[nh] = def; HB[nh] = c[i] }
        H[++nh] = "best"; HA[nh] = def; HB[nh] = "best"
        if (tcp != "") for (i = 1; i <= nc; i++) if (c[i] == "mpi-tcp" || c[i] ~ /^gloo/ || c[i] == "tcp-raw") { H[++nh] = "tcp/" c[i]; HA[nh] = tcp; HB[nh] = c[i] }
        # the share of the plain sockets (tcp-raw) that Open MPI TCP reaches, beside ringlet-tcp
        if (havecol["tcp-raw"] && havecol["mpi-tcp"]) { H[++nh] = "mpi-tcp/raw"; HA[nh] = "mpi-tcp"; HB[nh] = "tcp-raw" }
        printf "\n## ratios of medians, > 1 when ringlet is ahead (busbw ringlet / busbw peer; latency: time peer / time ringlet)\n"
        printf "#  columns <peer> and best: %s against that peer and the best peer at that size", def
        if (tcp != "") printf "; tcp/<peer>: %s against a TCP peer (tcp-raw: the ring bytes over plain sockets)", tcp
        if (havecol["tcp-raw"] && havecol["mpi-tcp"]) printf "; mpi-tcp/raw: Open MPI TCP against those"
        printf "\n%-6s %-9s", "ranks", "size"; for (h = 1; h <= nh; h++) printf rpad(H[h]), H[h]; printf "   best peer\n"
        for (ri = 1; ri <= nr; ri++) {
            r = R[ri]
            for (si = 1; si <= ns; si++) {
                b = S[si]
                printf "%-6s %-9s", r, hs(b)
                for (h = 1; h <= nh; h++) {
                    y = (HB[h] == "best") ? bestpeer(r, b, "bw") : m(r, HB[h], b, "bw")
                    x = mf(r, HA[h], HB[h] == "best" ? bestname : HB[h], b, "bw")
                    printf rpad(H[h]), fr(ratio(x, y))
                }
                bestpeer(r, b, "bw"); printf "   %s\n", bestname == "" ? "-" : bestname
            }
            if ((r SUBSEP def SUBSEP "lat" SUBSEP latb) in runs) {
                printf "%-6s %-9s", r, hs(latb) " lat"
                for (h = 1; h <= nh; h++) {
                    y = (HB[h] == "best") ? bestpeer(r, latb, "lat") : m(r, HB[h], latb, "lat")
                    x = mf(r, HA[h], HB[h] == "best" ? bestname : HB[h], latb, "lat")
                    printf rpad(H[h]), fr(ratio(y, x))
                }
                bestpeer(r, latb, "lat"); printf "   %s\n", bestname == "" ? "-" : bestname
            }
        }
        # goals: the comparisons of the issue at 64 MiB, the latency, and the band
        big = 67108864
        printf "\n## goals (ratio of medians; PASS when >= the threshold in brackets)\n"
        nce = split(ceil, CE, " ")
        for (i = 1; i <= nce; i++) { split(CE[i], kv, ":"); CEIL[kv[1]] = kv[2] }
        ngoal = 0; npass = 0; nna = 0
        for (ri = 1; ri <= nr; ri++) {
            r = R[ri]
            for (i = 1; i <= nc; i++) if (c[i] == "mpi-shm")
                goal(sprintf("%d ranks, 64 MiB busbw: %s / mpi-shm", r, def), ratio(m(r, def, big, "bw"), m(r, "mpi-shm", big, "bw")), shm_mpi, nok(r, def, big, "bw"))
            if ((r in CEIL) && m(r, def, big, "bw") != "")
                goal(sprintf("%d ranks, 64 MiB busbw: %s / shm ceiling %s GB/s", r, def, CEIL[r]), ratio(m(r, def, big, "bw"), CEIL[r]), cfrac, nok(r, def, big, "bw"))
            y = bestpeer(r, big, "bw")
            # a peer whose runs failed there may have been the best: not measured
            goal(sprintf("%d ranks, 64 MiB busbw: %s / best peer (%s)", r, form(def, bestname), bestname == "" ? "-" : bestname), bestgaps ? "" : ratio(mf(r, def, bestname, big, "bw"), y), gmin, nok(r, def, big, "bw"))
            if (bestgaps) printf "  %66s (%d peer(s) without a result at 64 MiB)\n", "", bestgaps
            if (tcp != "") for (i = 1; i <= nc; i++) if (c[i] == "mpi-tcp" || c[i] == "gloo")
                goal(sprintf("%d ranks, 64 MiB busbw: %s / %s", r, form(tcp, c[i]), c[i]), ratio(mf(r, tcp, c[i], big, "bw"), m(r, c[i], big, "bw")), c[i] == "gloo" ? tcp_gloo : tcp_mpi, nok(r, tcp, big, "bw"))
        }
        r = R[1]; for (ri = 1; ri <= nr; ri++) if (R[ri] == 2) r = 2
        for (i = 1; i <= nc; i++) {
            if (c[i] != "mpi-shm" && c[i] != "gloo") continue
            if (!((r SUBSEP def SUBSEP "lat" SUBSEP latb) in runs)) continue
            goal(sprintf("%d ranks, %d B latency: time %s / time %s", r, latb, c[i], form(def, c[i])), ratio(m(r, c[i], latb, "lat"), mf(r, def, c[i], latb, "lat")), c[i] == "gloo" ? lat_gloo : lat_mpi, nok(r, def, latb, "lat"))
        }
        for (ri = 1; ri <= nr; ri++) {
            r = R[ri]; worst = ""; wsz = ""; lo = ""; hi = ""; gaps = 0
            for (si = 1; si <= ns; si++) {
                b = S[si]; if (b < 4096 || b > 268435456) continue
                y = bestpeer(r, b, "bw"); x = bestgaps ? "" : ratio(mf(r, def, bestname, b, "bw"), y)
                if (x == "") { gaps++; continue }
                if (lo == "") lo = b
                hi = b
                if (worst == "" || x < worst) { worst = x; wsz = hs(b) }
            }
            np = (worst == "" || lo != 4096 || hi != 268435456 || gaps) ? 0 : 3
            goal(sprintf("%d ranks, %s..%s: worst %s / best peer (at %s)", r, lo == "" ? "-" : hs(lo), hi == "" ? "-" : hs(hi), def, wsz == "" ? "-" : wsz), worst, gband, np)
            if (worst != "" && !np) printf "  %66s (not every size of 4 KiB..256 MiB was measured)\n", ""
        }
        # every size (issue 23): the worst ratio over the sizes, the 8 B latency included
        printf "\n## at every size: the worst ratio of medians over the sizes (8 B: peer time / ringlet time)\n"
        for (ri = 1; ri <= nr; ri++) {
            r = R[ri]
            every(r, "ringlet-tcp", "mpi-tcp", 0, e_tm, "every size")
            every(r, "ringlet-tcp", "mpi-tcp", 1048576, e_tmb, "from 1 MiB")
            every(r, "ringlet-tcp", "gloo", 4096, e_tg, "from 4 KiB")
            every(r, "ringlet-shm", "mpi-shm", 0, e_sm, "every size")
        }
        printf "  %d of %d goals PASS%s\n", npass, ngoal, nna ? sprintf(" (%d not measured: failed runs)", nna) : ""
    }
    # The worst of a / b over the sizes from `from` bytes (the latency row counts as its size,
    # inverted); a goal line with the size where it is.
    function every(r, a, b, from, lim, what,   si, x, w, wsz, n, gaps) {
        if (!(havecol[a] && havecol[b])) return
        w = ""; wsz = ""; n = 0; gaps = 0
        if (latb >= from) {
            x = ratio(m(r, b, latb, "lat"), mf(r, a, b, latb, "lat"))
            if (x == "") gaps++; else { n++; w = x; wsz = hs(latb) " lat" }
        }
        for (si = 1; si <= ns; si++) {
            if (S[si] < from) continue
            x = ratio(mf(r, a, b, S[si], "bw"), m(r, b, S[si], "bw"))
            if (x == "") { gaps++; continue }
            n++
            if (w == "" || x < w) { w = x; wsz = hs(S[si]) }
        }
        goal(sprintf("%d ranks, %s: worst %s / %s (at %s)%s", r, what, form(a, b), b, wsz == "" ? "-" : wsz, gaps ? ", gaps" : ""), w, lim, n ? 3 : 0)
    }' "$SUM"
}
# Whether placement.csv holds figures (perf/core_rtt.c ran).
have_placement() { [[ -f "$OUT/placement.csv" ]] && (($(wc -l <"$OUT/placement.csv") > 1)); }
# Where the host had CPUs 0 and 1 (perf/core_rtt.c) just before each bandwidth run, if measured.
placement_table() {
    local f="$OUT/placement.csv"
    have_placement || return 0
    echo
    echo "## placement: the round trip of a cache line between the first two CPUs (ns) just before each"
    echo "#   bandwidth run (perf/core_rtt.c): tens of ns when they share a cache, hundreds when the host"
    echo "#   put them apart (a VM's vCPUs move), and every copy between ranks on them slows down then"
    awk -F, -v passes="$PASSES" 'NR > 1 { k = $2 SUBSEP $3; if (!(k in seen)) { seen[k] = 1; order[++n] = k }
            v[k, $1] = ($4 == "" ? "-" : $4) }
        END {
            line = sprintf("ranks  %-14s", "run"); for (p = 1; p <= passes; p++) line = line sprintf("  pass %-3d", p)
            sub(/ +$/, "", line); print line
            for (i = 1; i <= n; i++) {
                split(order[i], f, SUBSEP); line = sprintf("%-5s  %-14s", f[1], f[2])
                for (p = 1; p <= passes; p++) line = line sprintf("  %-8s", ((order[i], p) in v) ? v[order[i], p] : "-")
                sub(/ +$/, "", line); print line
            }
        }' "$f" | sort -s -k1,1n
}
# The every-size comparisons again, each pass's pair of runs kept only where both ran in the
# same placement (core_rtt both under PLACE_APART_NS, or both at or over it): on a VM whose
# vCPUs move, a pass of one peer with its CPUs together against one of the other's with them
# apart decides a median ratio (perf/README.md). Bandwidth sizes only (the latency runs have
# no placement figure of their own).
matched_table() {
    local f="$OUT/placement.csv"
    have_placement || return 0
    echo
    echo "## at every size, passes in the same placement only: the worst ratio over the bandwidth sizes of"
    echo "#   median(ringlet) / median(peer), over the passes whose two runs had core_rtt both < ${PLACE_APART_NS} ns"
    echo "#   (together, T) or both >= it (apart, A); '-' when no pass matched. Information, not a goal."
    awk -F, -v apart="$PLACE_APART_NS" -v ranks="$RANKS" '
    function hs(b) { if (b >= 1048576 && b % 1048576 == 0) return (b / 1048576) " MiB"
                     if (b >= 1024 && b % 1024 == 0) return (b / 1024) " KiB"; return b " B" }
    function median(list,   n, a, i, j, x) {
        n = split(list, a, " ")
        for (i = 2; i <= n; i++) { x = a[i] + 0; for (j = i - 1; j >= 1 && a[j] + 0 > x; j--) a[j + 1] = a[j]; a[j + 1] = x }
        return n == 0 ? "" : (n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2)
    }
    FNR == 1 { file++; next }
    file == 1 { if ($4 != "") cls[$1, $2, $3] = ($4 + 0 >= apart) ? "A" : "T"; next }
    $7 == "OK" && $9 == "bw" {
        run = $3; name = ($3 ~ /^ringlet-/ && $8 == "ip") ? $3 "@ip" : $3
        bw[$1, $2, name, $4] = $6; runof[name] = run; size[$4] = 1; if ($1 + 0 > np) np = $1 + 0
    }
    END {
        ns = 0; for (b in size) S[++ns] = b + 0
        for (i = 2; i <= ns; i++) { x = S[i]; for (j = i - 1; j >= 1 && S[j] > x; j--) S[j + 1] = S[j]; S[j + 1] = x }
        npair = split("ringlet-tcp:mpi-tcp ringlet-tcp@ip:gloo ringlet-shm:mpi-shm", P, " ")
        nr = split(ranks, R, " ")
        for (ri = 1; ri <= nr; ri++) for (pi = 1; pi <= npair; pi++) {
            r = R[ri]; split(P[pi], ab, ":"); a = ab[1]; b = ab[2]
            if (!(a in runof) || !(b in runof)) continue
            passes = ""; worst = ""; wsz = ""
            for (p = 1; p <= np; p++) {
                ca = cls[p, r, runof[a]]; cb = cls[p, r, runof[b]]
                if (ca != "" && ca == cb) passes = passes (passes == "" ? "" : ",") p ca
            }
            for (si = 1; si <= ns && passes != ""; si++) {
                la = ""; lb = ""
                for (p = 1; p <= np; p++) {
                    ca = cls[p, r, runof[a]]
                    if (ca == "" || ca != cls[p, r, runof[b]]) continue
                    if ((p, r, a, S[si]) in bw && (p, r, b, S[si]) in bw) { la = la " " bw[p, r, a, S[si]]; lb = lb " " bw[p, r, b, S[si]] }
                }
                ma = median(la); mb = median(lb)
                if (ma == "" || mb == "" || mb == 0) continue
                x = ma / mb
                if (worst == "" || x < worst) { worst = x; wsz = hs(S[si]) }
            }
            printf "  %d ranks: %-31s passes %-12s worst %s%s\n", r, a " / " b, passes == "" ? "-" : passes,
                worst == "" ? "-" : sprintf("%.2f", worst), wsz == "" ? "" : " (at " wsz ")"
        }
    }' "$f" "$CSV"
}
{
    table
    matched_table
    placement_table
} | tee "$OUT/table.txt"

# ---------------------------------------------------------------- results.json ----------------------------
jstr() { local s="$1"; s="${s//\\/\\\\}"; s="${s//\"/\\\"}"; printf '"%s"' "$s"; }
{
    printf '{\n  "tool": "perf/compare",\n  "meta": {"date": %s, "host": %s, "nproc": %s, "cpu": %s, "memory": %s, ' \
        "$(jstr "$META_DATE")" "$(jstr "$META_HOST")" "$(jstr "$META_NPROC")" "$(jstr "$META_CPU")" "$(jstr "$META_MEM")"
    printf '"kernel": %s, "commit": %s, "passes": %d, "ranks": %s, "sizes": %s, "transports": %s, ' \
        "$(jstr "$META_KERNEL")" "$(jstr "$META_COMMIT")" "$PASSES" "$(jstr "$RANKS")" "$(jstr "${size_list[*]}")" \
        "$(jstr "$TRANSPORTS")"
    printf '"peers": %s, "target_s": %s, "elapsed_s": %d},\n  "missing": {' "$(jstr "${peer_list[*]}")" \
        "$(jstr "$TARGET_S")" "$ELAPSED"
    first=1
    for p in "${!MISSING[@]}"; do
        ((first)) || printf ', '
        printf '%s: %s' "$(jstr "$p")" "$(jstr "${MISSING[$p]}")"
        first=0
    done
    printf '},\n'
    to_json() { # CSV with a header -> a JSON array of objects; numbers stay numbers, empty is null
        awk -F, 'NR == 1 { n = split($0, h, ","); next }
            { printf "%s\n    {", (NR > 2 ? "," : "")
              for (i = 1; i <= n; i++) {
                  v = $i
                  if (v == "") v = "null"; else if (v !~ /^-?[0-9]+(\.[0-9]+)?([eE][-+]?[0-9]+)?$/) v = "\"" v "\""
                  printf "%s\"%s\": %s", (i > 1 ? ", " : ""), h[i], v
              }
              printf "}" }
            END { printf "\n  " }' "$1"
    }
    printf '  "summary": ['
    to_json "$SUM"
    printf '],\n  "results": ['
    to_json "$CSV"
    if [[ -f "$OUT/placement.csv" ]]; then
        printf '],\n  "placement": ['
        to_json "$OUT/placement.csv"
    fi
    printf ']\n}\n'
} >"$OUT/results.json"

# ---------------------------------------------------------------- the plot --------------------------------
plot_py=""
rm -f "$OUT/compare.png"
for py in ${PLOT_PYTHON:-/usr/bin/python3 python3}; do
    if command -v "$py" >/dev/null 2>&1 && "$py" -c "import matplotlib" >/dev/null 2>&1; then
        plot_py="$py"
        break
    fi
done
echo
if [[ -z "$plot_py" ]]; then
    echo "no plot: matplotlib is not installed (Debian: apt-get install python3-matplotlib, or scripts/install-deps.sh peers)"
elif "$plot_py" "$HERE/compare_plot.py" "$CSV" "$OUT/compare.png" \
    --title "all-reduce float32 sum: $META_HOST, $META_NPROC CPUs ($META_CPU), commit $META_COMMIT, $META_DATE" \
    >"$OUT/logs/plot.log" 2>&1; then
    echo "plot: $OUT/compare.png"
else
    echo "no plot: compare_plot.py failed (see $OUT/logs/plot.log)"
fi
echo "results: $CSV, $OUT/results.json, $OUT/table.txt; logs: $OUT/logs/; $((SECONDS - T_START))s in all"
# Exit 1 when a ringlet result was wrong or a ringlet run gave none (a peer's failure is
# shown in the tables and goals, not here): a script that runs this can tell.
if awk -F, 'NR > 1 && ($7 == "WRONG" || ($3 ~ /^ringlet-/ && $7 != "OK")) { bad = 1 } END { exit !bad }' "$CSV"; then
    echo "compare: ringlet gave wrong results or no result in some runs (see $CSV)"
    exit 1
fi
exit 0
