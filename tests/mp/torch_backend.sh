#!/usr/bin/env bash
# The torch.distributed backend "ringlet" (python/ringlet/torch_backend.py) on torch 1.13, CPU:
#   1. tests/python/backend_ops.py at P = 2, 3, 4, and at P = 3 over TCP (a fresh group's
#      first exchange receives from ranks it has no connection from): every ProcessGroup
#      operation torch's collectives use, against Gloo on the same random inputs,
#      synchronous and asynchronous
#      (wait, get_future, is_completed), over 10 to 12 dtypes (bool and complex converted),
#      non-contiguous and empty tensors, wait(timeout), a receive pending across a
#      collective, a subgroup destroyed (its communicator gone at once), torch 2.x's coalesced
#      fast path (one Work covering all), the clear errors.
#   2. tests/python/backend_ddp.py at P = 2 and 4: torch's DistributedDataParallel over
#      "ringlet" against the same over "gloo", 1e-6: BatchNorm buffers,
#      find_unused_parameters, no_sync, gradient_as_bucket_view, static_graph, a Python comm
#      hook, subgroups (P = 4), ZeroRedundancyOptimizer.
#   3. tests/python/backend_kill.py at P = 3: a rank SIGKILLs itself in backward (rank 1, then
#      rank 0, which holds torch's store): the survivors raise RuntimeError within the timeout
#      naming it; a rank SIGSTOPs itself with init_process_group(timeout=4 s): the survivors
#      raise after 4 s (torch's timeout is ringlet's deadline, RINGLET_TIMEOUT is 120 here).
#   4. tests/python/backend_env.py: init_process_group("ringlet") under srun's and mpirun's
#      variables (no RANK/WORLD_SIZE), with init_method file://, and under torchrun (the
#      spelling Debian's torch 1.13 on Python 3.11 runs: --nproc_per_node, --redirects 2
#      --tee 2), where it runs at all.
# Skips (77) in a sanitizer build and without torch (tests/mp/lib/python.bash). Takes about
# 60 s on a 2-core machine. Exit 0 = passed, 1 = a failure.
set -u

source "$(dirname "$0")/lib/python.bash"
py_setup torch-backend
pass='^\[[0-9]+\] backend_%s: rank [0-9]+: %s'
# shellcheck disable=SC2059
for P in 2 3 4; do
    py_run backend_ops "$P" "$(printf "$pass" ops '[1-9][0-9]* checks, 0 failed')" tests/python/backend_ops.py
done
# over TCP too: a receive from a rank with no connection yet waits for that rank's connect
# (case_first_exchange: exchanges that posted their receives first waited to the deadline)
# shellcheck disable=SC2059
RINGLET_TRANSPORT=tcp py_run "backend_ops over tcp" 3 "$(printf "$pass" ops '[1-9][0-9]* checks, 0 failed')" \
    tests/python/backend_ops.py
for P in 2 4; do
    # shellcheck disable=SC2059
    py_run backend_ddp "$P" "$(printf "$pass" ddp PASS)" tests/python/backend_ddp.py
done

# 3. kills: the launcher reports the victim; the survivors must say OK twice each
kill_case() { # name victim args...
    local name=$1 victim=$2 t rc n
    shift 2
    t=$(now_ms)
    "$RUN" -n 3 --grace 60 --timeout 300 "$PYTHON" tests/python/backend_kill.py --victim "$victim" "$@" \
        >"$TMP/out" 2>"$TMP/err"
    rc=$?
    n=$(grep -cE '^\[[0-9]\] backend_kill: survivor [0-9]: OK' "$TMP/out")
    if [ "$n" = 4 ] && ! grep -q 'survivor [0-9]: FAIL' "$TMP/out" && grep -q "rank $victim killed by signal SIGKILL" "$TMP/err" "$TMP/out"; then
        echo "ok:   backend_kill $name (launcher exit $rc, $((($(now_ms) - t) / 1000)) s)"
        grep -m1 -E 'survivor [0-9]: OK: RuntimeError' "$TMP/out" | cut -c1-300 | sed 's/^/      /'
    else
        fails=$((fails + 1))
        echo "FAIL: backend_kill $name: $n of 4 survivor checks OK, launcher exit $rc"
        tail -n 20 "$TMP/out"
        tail -n 20 "$TMP/err"
    fi
}
kill_case "rank 1 SIGKILLed" 1 --step 3
kill_case "rank 0 SIGKILLed" 0 --step 2
kill_case "rank 2 SIGSTOPped, timeout 4 s" 2 --step 2 --hang --timeout 4

# 4. launchers' variables
env_case() { # name nranks command-prefix...
    local name=$1 n=$2 good
    # counted by match, not by line: torchrun's tee may put two ranks' lines on one
    good=$(grep -oE "backend_env: rank [0-9]+ of $n \($name; [^)]*\): OK" "$TMP/env" | wc -l)
    if [ "$good" = "$n" ]; then
        echo "ok:   init_process_group(\"ringlet\") under $name: $n ranks"
    else
        fails=$((fails + 1))
        echo "FAIL: init_process_group(\"ringlet\") under $name: $good of $n ranks OK"
        tail -n 20 "$TMP/env"
    fi
}
port=$(free_port_pair)
: >"$TMP/env"
for r in 0 1; do
    env -u RANK -u WORLD_SIZE -u LOCAL_RANK -u LOCAL_WORLD_SIZE SLURM_PROCID=$r SLURM_NTASKS=2 SLURM_LOCALID=$r \
        MASTER_ADDR=127.0.0.1 MASTER_PORT=$port timeout 120 "$PYTHON" tests/python/backend_env.py srun >>"$TMP/env" 2>&1 &
done
wait
env_case srun 2
port2=$(free_port_pair)
: >"$TMP/env"
for r in 0 1 2; do
    env -u RANK -u WORLD_SIZE -u LOCAL_RANK -u LOCAL_WORLD_SIZE OMPI_COMM_WORLD_RANK=$r OMPI_COMM_WORLD_SIZE=3 \
        OMPI_COMM_WORLD_LOCAL_RANK=$r MASTER_ADDR=127.0.0.1 MASTER_PORT=$port2 \
        timeout 120 "$PYTHON" tests/python/backend_env.py mpirun >>"$TMP/env" 2>&1 &
done
wait
env_case mpirun 3
: >"$TMP/env"
for r in 0 1; do
    env -u RANK -u WORLD_SIZE timeout 120 "$PYTHON" tests/python/backend_env.py file --init-method "file://$TMP/fstore" \
        --rank $r --world-size 2 >>"$TMP/env" 2>&1 &
done
wait
env_case file 2
TORCHRUN=(timeout 120 "$PYTHON" -m torch.distributed.run --standalone --nproc_per_node 2 --redirects 2 --tee 2)
echo 'import os; print("rank", os.environ["RANK"])' >"$TMP/hello.py"
if (cd "$TMP" && "${TORCHRUN[@]}" "$TMP/hello.py") >"$TMP/hello" 2>&1; then
    script="$PWD/tests/python/backend_env.py"
    (cd "$TMP" && env -u RANK -u WORLD_SIZE -u MASTER_ADDR -u MASTER_PORT "${TORCHRUN[@]}" "$script" torchrun) \
        >"$TMP/env" 2>&1
    env_case torchrun 2
else
    echo "note: torchrun (python3 -m torch.distributed.run --nproc_per_node 2 --redirects 2 --tee 2) does not run" \
        "even a trivial script here, so it is not tested: $(grep -E 'Error' "$TMP/hello" | tail -n 1)"
fi
py_finish torch_backend
