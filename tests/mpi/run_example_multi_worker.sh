#!/bin/bash
# `mpirun -np 2 examples/multi_worker` must just work: both workers exit 0 and end with the same
# weights (each prints a checksum of its weight bytes with --checksum).
#   run_example_multi_worker.sh <mpirun> <multi_worker>
set -u
MPIRUN=$1 PROG=$2
LOG=$(mktemp)
trap 'rm -f "$LOG"' EXIT
# One local replica per worker keeps the job small on a shared machine (global batch 256).
LOCKSTEP_DEVICES=cpu:1 timeout -k 5 150 "$MPIRUN" --oversubscribe --bind-to none -np 2 \
  -x LOCKSTEP_DEVICES "$PROG" --synthetic --steps 4 --epochs 2 --checksum >"$LOG" 2>&1
rc=$?
cat "$LOG"
[ $rc -eq 0 ] || { echo "FAIL: mpirun exited $rc"; exit 1; }
grep -q '^2 worker(s), 2 replicas in sync$' "$LOG" || { echo "FAIL: chief banner missing"; exit 1; }
grep -q '^test loss: ' "$LOG" || { echo "FAIL: no test loss reported"; exit 1; }
# Only the chief reports: exactly one banner and one test line.
[ "$(grep -c '^test loss: ' "$LOG")" = 1 ] || { echo "FAIL: more than the chief reported"; exit 1; }
c0=$(sed -n 's/^worker 0 weights checksum //p' "$LOG")
c1=$(sed -n 's/^worker 1 weights checksum //p' "$LOG")
[ -n "$c0" ] && [ -n "$c1" ] || { echo "FAIL: a worker printed no checksum"; exit 1; }
[ "$c0" = "$c1" ] || { echo "FAIL: workers disagree on the final weights ($c0 vs $c1)"; exit 1; }
echo "PASS: both workers end with weights $c0"
