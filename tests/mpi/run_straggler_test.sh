#!/bin/bash
# A worker that stops answering is named by every survivor: 3 workers x 2 replicas train with
# `lockstep train --timeout T`; once the chief has printed "Epoch 2/" (every worker has taken part
# in every collective of epoch 1, so all are training) the test sends SIGSTOP to the chosen rank's
# process. The others must exit non-zero within T (+ startup and diagnosis margin), and each must
# print its own fatal line naming the stopped worker by world rank, pid and host, and saying that
# it is stopped; no process of the job may be left.
#
#   run_straggler_test.sh <mpirun> <lockstep> <timeout_seconds> <victim_rank>
#
# The job's processes carry the test's own temporary directory on their command lines (the backup
# directory), which is how the test finds any left over. Each rank runs under `sh -c` that records the trainer's pid (to stop it) and exit code. A
# survivor without an exit code was killed by the job abort (MPI_Abort of another survivor), which
# only happens after it has printed its report (abort_job waits for the survivors).
set -u
MPIRUN=$1 LOCKSTEP=$2 TIMEOUT=$3 VICTIM=$4
MARGIN=15  # startup of the survivors' diagnosis (grace <= 2 s), report exchange, teardown
DIR=$(mktemp -d)
MPIRUN_PID=
cleanup() {
  [ -n "$MPIRUN_PID" ] && kill -9 "$MPIRUN_PID" 2>/dev/null
  for f in "$DIR"/pid.*; do [ -f "$f" ] && kill -9 "$(cat "$f")" 2>/dev/null; done
  rm -rf "$DIR"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

LOCKSTEP_DEVICES=cpu:2 "$MPIRUN" --oversubscribe --bind-to none -np 3 -x LOCKSTEP_DEVICES \
  sh -c '"$0" train --epochs 1000 --steps-per-epoch 20 --timeout "$1" --verbose 2 --seed 7 \
           --backup-dir "$2/backup" & echo $! > "$2/pid.$OMPI_COMM_WORLD_RANK"; wait $!
         echo $? > "$2/rc.$OMPI_COMM_WORLD_RANK"' \
  "$LOCKSTEP" "$TIMEOUT" "$DIR" >"$DIR/log" 2>&1 &
MPIRUN_PID=$!

# Training is under way on every worker once the chief starts epoch 2. The backstop bounds only a
# run that never gets there (it is a failure, reported below).
for _ in $(seq 1200); do
  grep -q '^Epoch 2/' "$DIR/log" 2>/dev/null && break
  kill -0 "$MPIRUN_PID" 2>/dev/null || break
  sleep 0.1
done
if ! grep -q '^Epoch 2/' "$DIR/log"; then
  cat "$DIR/log"; echo "FAIL: the job did not reach epoch 2"; exit 1
fi
VICTIM_PID=$(cat "$DIR/pid.$VICTIM")
HOST=$(hostname)
kill -STOP "$VICTIM_PID"
start=$(date +%s.%N)
echo "stopped world rank $VICTIM (pid $VICTIM_PID on host $HOST)"

# `timeout` would not help here (mpirun is a background job): wait with a bound of our own.
for _ in $(seq $(((TIMEOUT + MARGIN + 30) * 10))); do
  kill -0 "$MPIRUN_PID" 2>/dev/null || break
  sleep 0.1
done
end=$(date +%s.%N)
if kill -0 "$MPIRUN_PID" 2>/dev/null; then
  cat "$DIR/log"; echo "FAIL: the job still runs $(echo "$end - $start" | bc) s after the stop"
  exit 1
fi
wait "$MPIRUN_PID"
rc=$?
MPIRUN_PID=
elapsed=$(echo "$end - $start" | bc)
cat "$DIR/log"
echo "---- mpirun exit code $rc, ${elapsed} s after SIGSTOP (timeout ${TIMEOUT} s + margin ${MARGIN} s)"

fail=0
if (( $(echo "$elapsed > $TIMEOUT + $MARGIN" | bc) )); then
  echo "FAIL: the survivors took ${elapsed} s to end"; fail=1
fi
[ "$rc" -eq 0 ] && { echo "FAIL: mpirun exited 0"; fail=1; }
for r in 0 1 2; do
  [ "$r" = "$VICTIM" ] && continue
  code=$(cat "$DIR/rc.$r" 2>/dev/null)
  [ -n "$code" ] || code="none (killed by the job abort)"
  echo "survivor world rank $r exit code: $code"
  [ "$code" = 0 ] && { echo "FAIL: survivor world rank $r exited 0"; fail=1; }
  # A collective with operands says them in parentheses ("all_reduce #95 (float32[101770], SUM)");
  # a barrier has none, and the victim may be stopped in either.
  pattern="^lockstep: fatal \(world rank $r\): Unavailable: .*world rank $VICTIM \(pid $VICTIM_PID on host $HOST\) stopped answering: it did not join [a-z_]+ #[0-9]+( \(.*\))? within $TIMEOUT s; it is stopped \(process state T"
  if ! grep -Eq "$pattern" "$DIR/log"; then
    echo "FAIL: survivor world rank $r did not name the stopped world rank $VICTIM (pid $VICTIM_PID)"
    fail=1
  fi
done
# Nothing of the job may be left, the stopped process included.
for _ in $(seq 50); do
  kill -0 "$VICTIM_PID" 2>/dev/null || pgrep -f "$DIR" >/dev/null || break
  sleep 0.1
done
if kill -0 "$VICTIM_PID" 2>/dev/null || pgrep -af "$DIR"; then
  echo "FAIL: processes of the job are left running"; fail=1
fi
[ $fail -eq 0 ] && echo PASS
exit $fail
