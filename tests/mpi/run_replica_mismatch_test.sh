#!/bin/bash
# MultiWorkerMirroredStrategy refuses workers with different local replica counts: under
# `mpirun -np 2` with LOCKSTEP_DEVICES=cpu:1 on rank 0 and cpu:2 on rank 1, the job exits non-zero
# with InvalidArgument listing each worker's count.
#   run_replica_mismatch_test.sh <mpirun> <multi_worker>
set -u
MPIRUN=$1 PROG=$2
LOG=$(mktemp)
trap 'rm -f "$LOG"' EXIT
# The count is chosen per rank inside the job: rank r gets cpu:(r+1).
timeout -k 5 100 "$MPIRUN" --oversubscribe --bind-to none -np 2 \
  sh -c 'LOCKSTEP_DEVICES=cpu:$((OMPI_COMM_WORLD_RANK + 1)) exec "$0" --synthetic --steps 1 --epochs 1' \
  "$PROG" >"$LOG" 2>&1
rc=$?
cat "$LOG"
[ $rc -ne 0 ] || { echo "FAIL: mpirun exited 0 with mismatched replica counts"; exit 1; }
grep -q 'InvalidArgument' "$LOG" || { echo "FAIL: no InvalidArgument reported"; exit 1; }
grep -q 'every worker must have the same number of local replicas. Received worker 0: 1, worker 1: 2\.' "$LOG" ||
  { echo "FAIL: the message does not list each worker's count"; exit 1; }
grep -q 'replicas in sync' "$LOG" && { echo "FAIL: training started"; exit 1; }
echo PASS
