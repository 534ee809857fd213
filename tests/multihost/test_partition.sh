#!/bin/bash
# A network partition mid-training: 2 hosts x 1 worker x 2 replicas train with `lockstep train
# --timeout T`; once the chief has started epoch 2 (every worker is training) the link between the
# hosts goes down. Each side survives on its own: every worker must exit non-zero within T (+ the
# diagnosis and a margin) with an error naming the host it can no longer reach and that host's
# world ranks and pids, and no process may be left on either host (Open MPI's daemons end once TCP
# gives up on the link: hosts.sh sets net.ipv4.tcp_retries2 on each host).
#   test_partition.sh <lockstep> <timeout_seconds>
set -u
source "$(dirname "$0")/hosts.sh"
multihost_require_root
LOCKSTEP=$1 TIMEOUT=$2
MARGIN=10
hosts_up || { echo "FAIL: could not create the two hosts"; multihost_finish 1; }
W=$MULTIHOST_WORK
fail=0
MULTIHOST_TIMEOUT=300 multihost_mpirun -np 2 --map-by node -x LOCKSTEP_DEVICES=cpu:2 \
  "$MULTIHOST_DIR/rank.sh" "$W" "$LOCKSTEP" train --epochs 1000 --steps-per-epoch 20 \
  --timeout "$TIMEOUT" --verbose 2 >"$W/log" 2>&1 &
MPIRUN=$!
if ! wait_for_line "$W/log" '^Epoch 2/' $MPIRUN 120; then
  cat "$W/log" "$W"/err.*; echo "FAIL: the job did not reach epoch 2"; multihost_finish 1
fi
ip -n ls-host-a link set ls-veth-a down
start=$(date +%s.%N)
echo "link between ls-host-a and ls-host-b down"
# Every process of the job ends once TCP gives up on the link; the ranks must end much earlier.
wait_hosts_empty 120 || { echo "FAIL: processes left on the hosts"; fail=1; }
wait $MPIRUN
grep -v 'setpgid' "$W/log"
declare -A OTHER=([0]=1 [1]=0) HOST=([0]=ls-host-a [1]=ls-host-b)
for r in 0 1; do
  o=${OTHER[$r]}
  echo "---- world rank $r (on ${HOST[$r]}): stderr"
  cat "$W/err.$r"
  read -r code end <"$W/rc.$r" || { echo "FAIL: world rank $r left no exit code"; fail=1; continue; }
  took=$(echo "$end - $start" | bc)
  echo "world rank $r exited with $code, ${took} s after the link went down (timeout $TIMEOUT s)"
  [ "$code" != 0 ] || { echo "FAIL: world rank $r exited 0"; fail=1; }
  if (($(echo "$took > $TIMEOUT + $MARGIN" | bc))); then
    echo "FAIL: world rank $r took longer than the timeout + ${MARGIN} s"; fail=1
  fi
  pattern="^lockstep: fatal \(world rank $r\): Unavailable: host ${HOST[$o]} is unreachable or down: none of its workers answered \(world rank $o \(pid $(cat "$W/pid.$o") on host ${HOST[$o]}\)"
  grep -Eq "$pattern" "$W/err.$r" ||
    { echo "FAIL: world rank $r did not name the unreachable host ${HOST[$o]} and world rank $o"; fail=1; }
done
multihost_finish $fail
