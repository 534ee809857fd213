#!/bin/bash
# Losing a whole host, then resuming. 2 hosts x 1 worker x 2 replicas train with BackupAndRestore
# (`lockstep train --backup-dir`, a backup at every epoch end) and `--timeout T`:
#   1. reference: the same training, uninterrupted, on both hosts;
#   2. once the chief has started epoch 3, every process of ls-host-b is killed (SIGKILL): the job
#      must end within T, with nothing left on either host. Open MPI's runtime sees its daemon's
#      connection (or its launcher session) close and ends the job at once, before any collective
#      times out; its message names ls-host-b when the connection is noticed first ("ORTE has lost
#      communication with a remote daemon"), else it reports a daemon that failed;
#   3. the same, but the host dies silently, as on a power loss (its link goes down first, so no
#      connection is closed): now only the collectives' timeout can tell, and the worker on
#      ls-host-a must itself name ls-host-b and its world rank and pid;
#   4. elastic restart: the backup of run 2 resumes on ls-host-a alone, one process of 2 replicas
#      (2 in sync instead of 4: a replica is a shard of the global batch, which stays 256, each
#      replica now taking 128), and ends epoch 3 with the weights of an uninterrupted 3-epoch run
#      on both hosts up to float rounding: its sums run in another order, and the difference
#      that makes compounds through training without a useful bound, so the check is that the
#      resume continued the backup's state — within 1e-3 of how far that epoch moved the
#      reference's weights (its largest change of any weight from epoch 2 to 3), where a resume
#      from any other state (other weights, reset optimizer moments, another epoch) lands a sizable
#      fraction of that movement away. The numerics of such resumes are checked against float64 in
#      tests/keras (ElasticRestart); resuming it on global batches of 128 instead is refused at the
#      first step, naming both layouts and both batches, and leaves the backup as it was;
#   5. relaunched on both hosts instead, the backup of run 2 resumes to the reference's weights bit
#      for bit.
#   test_kill_host.sh <lockstep> <timeout_seconds>
set -u
source "$(dirname "$0")/hosts.sh"
multihost_require_root
LOCKSTEP=$1 TIMEOUT=$2
MARGIN=10
hosts_up || { echo "FAIL: could not create the two hosts"; multihost_finish 1; }
W=$MULTIHOST_WORK
fail=0
# The input pipeline is the global one so that 2 and 4 replicas see the same global batches.
TRAIN=(train --steps-per-epoch 200 --global-batch-size 256 --input-pipeline global
       --seed 3 --verbose 2 --timeout "$TIMEOUT")

two_hosts() {  # name [train arguments...]: starts the job in the background, rank files in W/name
  local name=$1
  shift
  mkdir -p "$W/$name"
  MULTIHOST_TIMEOUT=300 multihost_mpirun -np 2 --map-by node -x LOCKSTEP_DEVICES=cpu:2 \
    "$MULTIHOST_DIR/rank.sh" "$W/$name" "$LOCKSTEP" "${TRAIN[@]}" "$@" >"$W/$name/log" 2>&1 &
  MPIRUN=$!
}
show() { grep -v setpgid "$W/$1/log"; for f in "$W/$1"/err.*; do echo "-- $f"; cat "$f"; done; }

echo "==== 1. reference runs on both hosts (6 epochs, and 2 and 3 for the elastic restart)"
two_hosts reference --epochs 6 --save-weights "$W/reference.safetensors"
wait $MPIRUN || { show reference; echo "FAIL: the reference run failed"; multihost_finish 1; }
two_hosts reference2 --epochs 2 --save-weights "$W/reference2.safetensors"
wait $MPIRUN || { show reference2; echo "FAIL: the 2-epoch reference run failed"; multihost_finish 1; }
two_hosts reference3 --epochs 3 --save-weights "$W/reference3.safetensors"
wait $MPIRUN || { show reference3; echo "FAIL: the 3-epoch reference run failed"; multihost_finish 1; }

echo "==== 2. SIGKILL every process of ls-host-b during epoch 3"
two_hosts killed --epochs 6 --backup-dir "$W/backup"
wait_for_line "$W/killed/log" '^Epoch 3/' $MPIRUN 120 ||
  { show killed; echo "FAIL: the job did not reach epoch 3"; multihost_finish 1; }
kill_host ls-host-b
start=$(date +%s.%N)
wait $MPIRUN
took=$(echo "$(date +%s.%N) - $start" | bc)
show killed
echo "the job ended ${took} s after ls-host-b was killed (timeout $TIMEOUT s)"
if (($(echo "$took > $TIMEOUT + $MARGIN" | bc))); then echo "FAIL: too slow"; fail=1; fi
grep -q 'test loss' "$W/killed/log" && { echo "FAIL: the job finished before the kill"; fail=1; }
grep -Eq 'Remote daemon: .* on node ls-host-b|unable to reliably start one or more daemons' \
  "$W/killed/log" || { echo "FAIL: Open MPI did not end the job for the lost daemon"; fail=1; }
wait_hosts_empty 60 || { echo "FAIL: processes left after the kill"; fail=1; }
[ -d "$W/backup" ] || { echo "FAIL: no backup was left to resume from"; multihost_finish 1; }
cp -a "$W/backup" "$W/backup.both"

echo "==== 3. ls-host-b dies silently (link down, then SIGKILL) during epoch 3"
two_hosts silent --epochs 6 --backup-dir "$W/backup.silent"
wait_for_line "$W/silent/log" '^Epoch 3/' $MPIRUN 120 ||
  { show silent; echo "FAIL: the job did not reach epoch 3"; multihost_finish 1; }
ip -n ls-host-b link set ls-veth-b down
kill_host ls-host-b
start=$(date +%s.%N)
wait_hosts_empty 120 || { echo "FAIL: processes left after the host died"; fail=1; }
wait $MPIRUN
show silent
if read -r code end <"$W/silent/rc.0"; then
  took=$(echo "$end - $start" | bc)
  echo "world rank 0 exited with $code, ${took} s after ls-host-b died (timeout $TIMEOUT s)"
  [ "$code" != 0 ] || { echo "FAIL: world rank 0 exited 0"; fail=1; }
  if (($(echo "$took > $TIMEOUT + $MARGIN" | bc))); then echo "FAIL: too slow"; fail=1; fi
else
  echo "FAIL: world rank 0 left no exit code"; fail=1
fi
pattern="^lockstep: fatal \(world rank 0\): Unavailable: host ls-host-b is unreachable or down: none of its workers answered \(world rank 1 \(pid $(cat "$W/silent/pid.1") on host ls-host-b\)"
grep -Eq "$pattern" "$W/silent/err.0" ||
  { echo "FAIL: world rank 0 did not name ls-host-b and world rank 1"; fail=1; }
ip -n ls-host-b link set ls-veth-b up

echo "==== 4. elastic restart: resume on ls-host-a alone, 1 worker x 2 replicas"
# The global batch must stay 256: 2 replicas on global batches of 128 are refused at their first
# step, and the backup stays as it was (the resume below uses it).
cp -a "$W/backup" "$W/backup.before"
HALF=("${TRAIN[@]/#256/128}")  # the same arguments with --global-batch-size 128
on_host ls-host-a "$LOCKSTEP" "${HALF[@]}" --epochs 6 --replicas 2 --backup-dir "$W/backup" \
  >"$W/half.log" 2>&1 && { echo "FAIL: resumed on another global batch"; fail=1; }
grep -q 'InvalidArgument: BackupAndRestore: .*written by 2 workers x 2 replicas (4 in sync) training on a global batch of 256 examples per step; this job (1 worker x 2 replicas (2 in sync)) resumed it on global batches of 128' "$W/half.log" ||
  { cat "$W/half.log"; echo "FAIL: another global batch was not refused clearly"; fail=1; }
grep -o 'InvalidArgument: BackupAndRestore: .*' "$W/half.log"
cmp -s "$W/backup/backup.safetensors" "$W/backup.before/backup.safetensors" ||
  { echo "FAIL: the refused resume changed the backup"; fail=1; }
on_host ls-host-a "$LOCKSTEP" "${TRAIN[@]}" --replicas 2 --epochs 3 --backup-dir "$W/backup" \
  --save-weights "$W/elastic.safetensors" >"$W/elastic.log" 2>&1
rc=$?
grep -v setpgid "$W/elastic.log"
if [ $rc != 0 ]; then
  echo "FAIL: the resume on one host failed (exit $rc)"; fail=1
else
  grep -q '^num_replicas_in_sync: 2 - global batch: 256' "$W/elastic.log" ||
    { echo "FAIL: the resume did not run 2 replicas on global batches of 256"; fail=1; }
  first=$(grep -m1 -o '^Epoch [0-9]*' "$W/elastic.log")
  [ "$first" = "Epoch 3" ] || { echo "FAIL: expected to resume at epoch 3, got '$first'"; fail=1; }
  "$MULTIHOST_DIR/compare_weights.py" "$W/reference3.safetensors" "$W/elastic.safetensors" 1e-3 \
    --of-movement-from "$W/reference2.safetensors" ||
    { echo "FAIL: the elastic resume ended far from the reference"; fail=1; }
fi

echo "==== 5. relaunch on both hosts: bit-identical to the reference"
two_hosts both --epochs 6 --backup-dir "$W/backup.both" --save-weights "$W/both.safetensors"
wait $MPIRUN || { show both; echo "FAIL: the relaunch on both hosts failed"; fail=1; }
first=$(grep -m1 -o '^Epoch [0-9]*' "$W/both/log")
[ "$first" != "Epoch 1" ] || { echo "FAIL: the relaunch started afresh instead of resuming"; fail=1; }
if cmp "$W/reference.safetensors" "$W/both.safetensors"; then
  echo "resumed on both hosts ($first onwards): byte-identical to the uninterrupted run"
else
  echo "FAIL: the resumed weights differ from the uninterrupted run"; fail=1
fi
multihost_finish $fail
