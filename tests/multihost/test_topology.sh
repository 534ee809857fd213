#!/bin/bash
# `lockstep devices` on two hosts prints the job's layout: hosts, workers per host, replicas per
# worker, and which workers each host runs; every worker prints the same layout. Two layouts:
# 1 worker x 2 replicas on each host, and 3 workers x 1 replica over two hosts (2 + 1). The first
# lines of `lockstep train` (the chief) show the same layout.
#   test_topology.sh <lockstep>
set -u
source "$(dirname "$0")/hosts.sh"
multihost_require_root
LOCKSTEP=$1
hosts_up || { echo "FAIL: could not create the two hosts"; multihost_finish 1; }
W=$MULTIHOST_WORK
fail=0
devices() {  # name np replicas
  MULTIHOST_TIMEOUT=120 multihost_mpirun -np "$2" -x "LOCKSTEP_DEVICES=cpu:$3" \
    sh -c '"$0" devices > "$1.$OMPI_COMM_WORLD_RANK"' "$LOCKSTEP" "$W/$1" >"$W/$1.log" 2>&1 ||
    { cat "$W/$1.log"; echo "FAIL: lockstep devices ($1) failed"; fail=1; }
}
expect() {  # file line
  grep -qxF -- "$2" "$1" || { echo "FAIL: $1 lacks the line '$2':"; cat "$1"; fail=1; }
}
devices one_per_host 2 2
for r in 0 1; do
  f=$W/one_per_host.$r
  expect "$f" "2 workers (this is worker $r), 2 local replicas, 4 in sync"
  expect "$f" "  2 hosts, 1 worker per host, 2 replicas per worker"
  expect "$f" "  host ls-host-a: worker 0"
  expect "$f" "  host ls-host-b: worker 1"
  expect "$f" "  /job:worker/task:$r/device:cpu:1  cores 1"
done
printf '%s slots=2\n' ls-host-a ls-host-b >"$HOSTFILE"
devices uneven 3 1
for r in 0 1 2; do
  f=$W/uneven.$r
  expect "$f" "3 workers (this is worker $r), 1 local replica, 3 in sync"
  expect "$f" "  2 hosts, 1-2 workers per host, 1 replica per worker"
  expect "$f" "  host ls-host-a: workers 0-1"
  expect "$f" "  host ls-host-b: worker 2"
done
# `lockstep train` on 2 hosts x 1 worker x 2 replicas: the chief's first lines are the layout
# `lockstep devices` prints, then the replicas in sync; the other worker prints nothing.
printf '%s slots=1\n' ls-host-a ls-host-b >"$HOSTFILE"
MULTIHOST_TIMEOUT=200 multihost_mpirun -np 2 --map-by node -x LOCKSTEP_DEVICES=cpu:2 "$LOCKSTEP" \
  train --epochs 1 --steps-per-epoch 2 --verbose 2 --timeout 60 >"$W/train.log" 2>&1 ||
  { cat "$W/train.log"; echo "FAIL: lockstep train on two hosts failed"; fail=1; }
want="2 workers (this is worker 0), 2 local replicas, 4 in sync
  2 hosts, 1 worker per host, 2 replicas per worker
  host ls-host-a: worker 0
  host ls-host-b: worker 1
  /job:worker/task:0/device:cpu:0  cores 0
  /job:worker/task:0/device:cpu:1  cores 1
num_replicas_in_sync: 4 - global batch: 512"
# Not train's lines: Open MPI's setpgid notice, and `ip netns exec` saying it could not put the
# namespace's hosts file in place where the machine has no /etc/hosts (a bare Debian).
got=$(grep -v -e setpgid -e '^Bind /etc/netns/' "$W/train.log" | head -7)
[ "$got" = "$want" ] || { echo "FAIL: the first lines of train are:"; echo "$got";
  echo "expected:"; echo "$want"; fail=1; }
grep -q 'this is worker 1' "$W/train.log" && { echo "FAIL: worker 1 printed the layout"; fail=1; }
[ $fail = 0 ] && cat "$W/one_per_host.0" "$W/uneven.2" && head -7 "$W/train.log"
multihost_finish $fail
