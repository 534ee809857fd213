#!/bin/bash
# A lost worker: with 3 workers, kill -9 one mid-epoch; the others exit non-zero
# within the configured timeout with a message naming the lost rank; no process is left running.
#
#   run_failure_test.sh <mpirun> <failure_victim> <timeout_seconds> recovery|default
#
# recovery: `mpirun --enable-recovery` keeps the survivors running after rank 1 dies, so they
#   detect the loss themselves (the path under test): each must print our message naming rank 1
#   and exit non-zero through abort_job. In this mode mpirun itself always exits 0 (Open MPI 4.1),
#   so every rank runs under `sh -c` that records its own exit code.
# default: plain mpirun kills the survivors as soon as rank 1 dies (before they can report) and
#   exits non-zero, naming rank 1 itself. Checked so that both launch modes are known to end.
set -u
MPIRUN=$1 VICTIM=$2 TIMEOUT=$3 MODE=$4
# Startup of 3 processes and the diagnosis grace period (at most 2 s) come on top of the timeout.
MARGIN=15
TOKEN="lockstep-failure-$$-$RANDOM"
DIR=$(mktemp -d)
trap 'rm -rf "$DIR"' EXIT

EXTRA=()
[ "$MODE" = recovery ] && EXTRA=(--enable-recovery)
start=$(date +%s.%N)
# `timeout` is the hang backstop only; CTest's TIMEOUT is a second one.
timeout -k 5 $((TIMEOUT + 60)) "$MPIRUN" --oversubscribe -np 3 "${EXTRA[@]}" \
  sh -c '"$0" "$1" "$2"; echo $? > "$3/rc.$OMPI_COMM_WORLD_RANK"' \
  "$VICTIM" "$TIMEOUT" "$TOKEN" "$DIR" >"$DIR/log" 2>&1
rc=$?
end=$(date +%s.%N)
elapsed=$(echo "$end - $start" | bc)
cat "$DIR/log"
echo "---- mode $MODE: mpirun exit code $rc after ${elapsed} s (timeout ${TIMEOUT} s + margin ${MARGIN} s)"

fail=0
if (( $(echo "$elapsed > $TIMEOUT + $MARGIN" | bc) )); then
  echo "FAIL: took ${elapsed} s, more than timeout + margin (hung?)"; fail=1
fi
if [ "$MODE" = recovery ]; then
  # A survivor either records its own non-zero exit code, or (its wrapper being in the same
  # process group) is killed together with it when the other survivor's MPI_Abort ends the job;
  # both mean it did not finish normally. At least one must have exited through abort_job.
  nonzero=0
  for r in 0 2; do
    code=$(cat "$DIR/rc.$r" 2>/dev/null || echo "none (killed by the job abort)")
    echo "survivor rank $r exit code: $code"
    [ "$code" = 0 ] && { echo "FAIL: survivor rank $r exited 0"; fail=1; }
    [[ "$code" =~ ^[1-9][0-9]*$ ]] && nonzero=1
  done
  [ $nonzero -eq 1 ] || { echo "FAIL: no survivor exited non-zero on its own"; fail=1; }
  if ! grep -Eq 'lockstep: fatal \(world rank [02]\): .*world rank 1 \(pid [0-9]+ on host .*\) stopped answering: it did not join all_reduce #' "$DIR/log"; then
    echo "FAIL: no survivor named the lost rank 1"; fail=1
  fi
else
  if [ "$rc" -eq 0 ]; then echo "FAIL: mpirun exited 0"; fail=1; fi
  if ! grep -q 'rank 1' "$DIR/log"; then echo "FAIL: nothing named rank 1"; fail=1; fi
fi
# No process of this job may be left; give the OS a moment to reap them.
for _ in $(seq 50); do
  pgrep -f "$TOKEN" >/dev/null || break
  sleep 0.1
done
if pgrep -af "$TOKEN"; then
  echo "FAIL: processes left running"; pkill -9 -f "$TOKEN"; fail=1
fi
[ $fail -eq 0 ] && echo PASS
exit $fail
