#!/bin/bash
# Two hosts x 1 worker x 2 replicas train to the weights of 1 process x 4 replicas and of 1 replica
# on the same global batches (within 1e-5 relative: summation orders differ), and two launches
# across the hosts give byte-identical weights. Between the hosts MPI can only use TCP (the hosts
# share no memory for Open MPI: the same job with shared memory alone must fail to connect them).
#   test_equivalence.sh <multi_worker_train>
set -u
source "$(dirname "$0")/hosts.sh"
multihost_require_root
PROG=$1
hosts_up || { echo "FAIL: could not create the two hosts"; multihost_finish 1; }
W=$MULTIHOST_WORK
fail=0
two_hosts() {  # out [extra mpirun arguments...]
  local out=$1
  shift
  MULTIHOST_TIMEOUT=120 multihost_mpirun -np 2 --map-by node -x LOCKSTEP_DEVICES=cpu:2 "$@" \
    "$PROG" multi 2 "$out" >"$out.log" 2>&1
}
two_hosts "$W/hosts.a" || { cat "$W/hosts.a.log"; echo "FAIL: 2 hosts x 2 replicas (run a)"; fail=1; }
two_hosts "$W/hosts.b" || { cat "$W/hosts.b.log"; echo "FAIL: 2 hosts x 2 replicas (run b)"; fail=1; }
on_host ls-host-a "$PROG" mirrored 4 "$W/mirrored4" >/dev/null 2>&1 ||
  { echo "FAIL: MirroredStrategy(4) run"; fail=1; }
on_host ls-host-a "$PROG" default 1 "$W/default" >/dev/null 2>&1 ||
  { echo "FAIL: default strategy run"; fail=1; }
[ $fail = 0 ] || multihost_finish 1

if cmp "$W/hosts.a" "$W/hosts.b"; then
  echo "2 hosts x 1 worker x 2 replicas: two launches are byte-identical"
else
  echo "FAIL: two launches across the hosts differ"; fail=1
fi
for other in mirrored4 default; do
  "$PROG" compare "$W/hosts.a" "$W/$other" 1e-5 || { echo "FAIL: 2 hosts vs $other"; fail=1; }
done
# The hosts are separate nodes to Open MPI: without the TCP transport nothing connects them.
if MULTIHOST_TIMEOUT=60 MULTIHOST_BTL=self,vader multihost_mpirun -np 2 --map-by node \
  -x LOCKSTEP_DEVICES=cpu:2 "$PROG" multi 2 "$W/no_tcp" >"$W/no_tcp.log" 2>&1; then
  echo "FAIL: the job ran without TCP between the hosts (are they really two nodes?)"; fail=1
elif ! grep -q "unable to reach each other" "$W/no_tcp.log"; then
  cat "$W/no_tcp.log"; echo "FAIL: without TCP the job failed for another reason"; fail=1
else
  echo "without the TCP transport the two hosts cannot reach each other (as expected)"
fi
multihost_finish $fail
