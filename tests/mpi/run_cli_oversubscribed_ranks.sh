#!/bin/bash
# `mpirun --oversubscribe -np 3` on 2 cores: the local ranks outnumber the cores, so each process
# takes one core and one replica (3 in sync, not 3 x 2), and `lockstep devices` (every rank) and
# the first lines of `lockstep train` (the chief: the same layout) say how the cores were divided. The job runs under
# `taskset -c 0,1`, so the ranks see 2 cores whatever the machine has.
#   run_cli_oversubscribed_ranks.sh <mpirun> <lockstep>
set -u
MPIRUN=$1 LOCKSTEP=$2
DIR=$(mktemp -d)
trap 'rm -rf "$DIR"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
[ "$(nproc --all)" -ge 2 ] || { echo "needs 2 cores"; exit 1; }
unset LOCKSTEP_DEVICES
division="3 local workers on 2 cores [0,1]: more workers than cores, so one core (one replica) \
each, round-robin (local worker 0: core 0, 1: core 1, 2: core 0)"

timeout -k 5 100 taskset -c 0,1 "$MPIRUN" --oversubscribe -np 3 "$LOCKSTEP" devices \
  >"$DIR/devices" 2>&1 || { cat "$DIR/devices"; fail "devices exited non-zero"; }
cat "$DIR/devices"
for r in 0 1 2; do
  grep -qxF "3 workers (this is worker $r), 1 local replica, 3 in sync" "$DIR/devices" ||
    fail "rank $r does not report 1 local replica of 3 in sync"
  grep -qxF "$division; this is local worker $r on core $((r % 2))" "$DIR/devices" ||
    fail "rank $r does not say how the cores were divided"
done

timeout -k 5 200 taskset -c 0,1 "$MPIRUN" --oversubscribe -np 3 "$LOCKSTEP" train --epochs 1 \
  --steps-per-epoch 3 --timeout 60 --verbose 2 --history "$DIR/h.json" >"$DIR/train" 2>&1 ||
  { cat "$DIR/train"; fail "train exited non-zero"; }
cat "$DIR/train"
# The chief's first lines: the job's layout as `lockstep devices` prints it (hosts, workers per
# host, replicas per worker, the division of the cores), then the replicas in sync.
want="3 workers (this is worker 0), 1 local replica, 3 in sync
  1 host, 3 workers per host, 1 replica per worker
  host $(hostname): workers 0-2
$division; this is local worker 0 on core 0
  /job:worker/task:0/device:cpu:0  cores 0
num_replicas_in_sync: 3 - global batch: 384"
first=$(head -6 "$DIR/train")
[ "$first" = "$want" ] || fail "first lines of train:
$first
expected:
$want"
[ "$(grep -c 'workers (this is worker' "$DIR/train")" = 1 ] ||
  fail "the layout was printed by other workers than the chief"
for key in '"replicas": 3' '"workers": 3' '"local_replicas": 1'; do
  grep -qF "$key" "$DIR/h.json" || fail "history lacks $key"
done
echo PASS
