#!/usr/bin/env bash
# `lockstep train` resolves the cluster as `lockstep devices` does (TF_CONFIG, SLURM): a cluster
# of several workers that no MPI launcher started stops with one line saying how to launch it, a
# malformed description stops with the resolver's error, and a one-worker description trains.
# Usage: cli_cluster_test.sh <path to lockstep>
set -u
lockstep="$1"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failures=0
checks=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
# Never let the launcher variables of an enclosing job leak into these runs.
unset OMPI_COMM_WORLD_RANK PMI_RANK PMIX_RANK SLURM_PROCID SLURM_STEP_ID TF_CONFIG

# expect_error <substrings...> -- <command...>: non-zero exit, one stderr line holding them all.
expect_error() {
  checks=$((checks + 1))
  local wants=()
  while [[ $1 != -- ]]; do wants+=("$1"); shift; done
  shift
  "$@" >"$tmp/out" 2>"$tmp/err"
  local rc=$? problem=""
  [[ $rc -ne 0 ]] || problem="exited 0"
  [[ $(wc -l <"$tmp/err") -eq 1 ]] || problem="$problem; wrote $(wc -l <"$tmp/err") lines"
  for w in "${wants[@]}"; do grep -qF -- "$w" "$tmp/err" || problem="$problem; lacks '$w'"; done
  [[ -z $problem ]] || fail "'$*': $problem: $(head -c 600 "$tmp/err")"
}

short_train=(train --epochs 1 --steps-per-epoch 2 --verbose 0)
two='{"cluster":{"worker":["a:1","b:2"]},"task":{"type":"worker","index":1}}'

# devices describes the TF_CONFIG cluster; train refuses to run it as a lone process.
checks=$((checks + 1))
TF_CONFIG=$two "$lockstep" devices >"$tmp/devices" 2>&1
grep -qF "2 workers (this is worker 1)" "$tmp/devices" ||
  fail "devices does not describe the TF_CONFIG cluster: $(cat "$tmp/devices")"
expect_error "TF_CONFIG describes 2 workers (this is worker 1)" "mpirun -np 2 --host a,b" "srun" -- \
  env TF_CONFIG="$two" "$lockstep" "${short_train[@]}"

# A chief and a worker: the chief is worker 0, listed first.
chief='{"cluster":{"chief":["c:7"],"worker":["w:8"]},"task":{"type":"chief","index":0}}'
expect_error "TF_CONFIG describes 2 workers (this is worker 0)" "--host c,w" -- \
  env TF_CONFIG="$chief" "$lockstep" "${short_train[@]}"

# Malformed TF_CONFIG and an index out of range: the same errors as devices gives.
for config in '{bad' '{"cluster":{"worker":["a:1","b:2"]},"task":{"type":"worker","index":2}}'; do
  TF_CONFIG=$config "$lockstep" devices >/dev/null 2>"$tmp/devices_err"
  want=$(head -c 60 "$tmp/devices_err")
  [[ -n $want ]] || fail "devices accepted TF_CONFIG=$config"
  expect_error "TF_CONFIG" "$want" -- env TF_CONFIG="$config" "$lockstep" "${short_train[@]}"
done

# A SLURM job step of 2 tasks started without MPI (no PMI variables).
slurm=(SLURM_PROCID=1 SLURM_STEP_ID=0 SLURM_STEP_NUM_TASKS=2 SLURM_STEP_NODELIST='n[1-2]'
  SLURM_STEP_TASKS_PER_NODE='1(x2)')
checks=$((checks + 1))
env "${slurm[@]}" "$lockstep" devices >"$tmp/devices" 2>&1
grep -qF "2 workers (this is worker 1)" "$tmp/devices" ||
  fail "devices does not describe the SLURM step: $(cat "$tmp/devices")"
expect_error "SLURM describes a job step of 2 tasks (this is task 1)" "srun --mpi=pmix -n 2" -- \
  env "${slurm[@]}" "$lockstep" "${short_train[@]}"
expect_error "SLURM_STEP_NUM_TASKS" -- \
  env SLURM_PROCID=0 SLURM_STEP_ID=0 SLURM_STEP_NUM_TASKS=two "$lockstep" "${short_train[@]}"

# A one-worker TF_CONFIG is honoured: train runs, as that worker.
checks=$((checks + 1))
one='{"cluster":{"worker":["localhost:1"]},"task":{"type":"worker","index":0}}'
if TF_CONFIG=$one "$lockstep" "${short_train[@]}" --replicas 2 --history "$tmp/h.json" \
  >"$tmp/out" 2>"$tmp/err"; then
  grep -qF '"workers": 1' "$tmp/h.json" || fail "one-worker TF_CONFIG: history lacks workers 1"
  grep -qF '"replicas": 2' "$tmp/h.json" || fail "one-worker TF_CONFIG: history lacks replicas 2"
else
  fail "a one-worker TF_CONFIG did not train: $(cat "$tmp/err")"
fi

echo "$((checks - failures)) passed, $failures failed"
[[ $failures -eq 0 ]]
