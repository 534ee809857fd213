#!/bin/bash
# Multi-worker equivalence: the same training (multi_worker_train.cpp) gives the same weights
#   * 2 workers x 2 local replicas (mpirun -np 2, LOCKSTEP_DEVICES=cpu:2),
#   * 4 workers x 1 local replica  (mpirun -np 4, LOCKSTEP_DEVICES=cpu:1),
#   * 4 replicas in one process (MirroredStrategy(4)),
#   * 1 replica on the global batch (the default strategy),
#   * 2 x 2 again with small gradient buckets (byte-identical),
#   * 4 x 1 again with small gradient buckets, all-reduced while backward runs (byte-identical),
#   * 4 x 1 again with each form of the host's shared-memory all-reduce fixed (byte-identical),
# within $REL relative (summation order differs between them; derived below), and two launches of
# the 2 x 2 job give byte-identical weights. With a BatchNormalization layer (multi-bn), whose
# moving statistics are summed over every replica of every worker after each step — the count of
# those sums checked inside the gradient all-reduce (2 x 2, 4 x 1) or by an all-reduce of its own
# when the gradients cross in buckets during backward (4 x 1 overlap) — the weights and moving
# statistics match MirroredStrategy(4) within $REL. With batch-end logs read on worker 0 only
# (multi-mixed-logs), the 2 x 2 job trains the same bytes. With clipping by norm (norms of the
# summed gradient first), alone (4 x 1: the one local replica's buffer is summed across workers in
# place) and with gradient accumulation (the accumulator joins the sum), the weights match
# MirroredStrategy(4) within $REL. The logs written alongside check that reported loss and metrics
# are global.
#   run_equivalence_test.sh <mpirun> <multi_worker_train>
set -u
MPIRUN=$1 PROG=$2
# What re-associating the gradient sums can move a weight by, relative to the 1e-2 floor of
# `multi_worker_train compare` (the derivation beside kReassociationBound in
# tests/keras/replica_equivalence_test.cpp): updates × lr × 2·K·u·κ / floor, with 18 Adam updates
# (3 epochs of 6 steps) at lr 1e-3, K = 16 per-example terms per gradient element (one global
# batch; with accumulation, 9 updates of 32 terms: the same product), u = 2^-24 and κ ≤ 1e4 the
# conditioning allowed (an element's sum of absolute terms over its root-mean-square gradient).
# Clipping by norm rescales the summed gradient, which Adam's normalized step all but cancels.
# 18 × 1e-3 × 2 × 16 × 2^-24 × 1e4 / 1e-2 = 0.0343. The logs hold the loss, a mean of ≤ 16
# cross-entropies over logits that move with the weights (each weight moving by at most REL of
# its size, a two-layer product by at most about 2·REL), and the accuracy, a count that no example
# near a tie flips on this fixed data: they are compared at 2·REL.
REL=0.0343 LOG_REL=0.0686
DIR=$(mktemp -d)
trap 'rm -rf "$DIR"' EXIT
fail=0
run_mpi() {  # np local_replicas out [mode]
  LOCKSTEP_DEVICES=cpu:$2 timeout -k 5 100 "$MPIRUN" --oversubscribe --bind-to none -np "$1" \
    -x LOCKSTEP_DEVICES ${LOCKSTEP_MPI_HOST_SHARED_BARRIERS:+-x LOCKSTEP_MPI_HOST_SHARED_BARRIERS} "$PROG" "${4:-multi}" "$1" "$3" ||
    { echo "FAIL: mpirun -np $1 ${4:-multi} exited $?"; fail=1; }
}
run_mpi 2 2 "$DIR/mw2x2.a"
run_mpi 2 2 "$DIR/mw2x2.b"
run_mpi 4 1 "$DIR/mw4x1"
run_mpi 2 2 "$DIR/mw2x2.overlap" multi-overlap
run_mpi 4 1 "$DIR/mw4x1.overlap" multi-overlap
LOCKSTEP_MPI_HOST_SHARED_BARRIERS=1 run_mpi 4 1 "$DIR/mw4x1.one"
LOCKSTEP_MPI_HOST_SHARED_BARRIERS=2 run_mpi 4 1 "$DIR/mw4x1.two"
"$PROG" mirrored 4 "$DIR/mirrored4" || { echo "FAIL: MirroredStrategy(4) run"; fail=1; }
"$PROG" default 1 "$DIR/default" || { echo "FAIL: default strategy run"; fail=1; }
"$PROG" default-missing 1 "$DIR/missing" ||
  { echo "FAIL: default strategy run, examples missing"; fail=1; }
run_mpi 2 2 "$DIR/mixed2x2" multi-mixed-logs
run_mpi 2 2 "$DIR/bn2x2" multi-bn
run_mpi 4 1 "$DIR/bn4x1" multi-bn
run_mpi 4 1 "$DIR/bn4x1.overlap" multi-bn-overlap
"$PROG" mirrored-bn 4 "$DIR/bnmirrored4" || { echo "FAIL: MirroredStrategy(4) run with BN"; fail=1; }
run_mpi 4 1 "$DIR/clip4x1" multi-clip
run_mpi 4 1 "$DIR/clipacc4x1" multi-clip-accum
"$PROG" mirrored-clip 4 "$DIR/clipmirrored4" || { echo "FAIL: MirroredStrategy(4) with clipnorm"; fail=1; }
"$PROG" mirrored-clip-accum 4 "$DIR/clipaccmirrored4" ||
  { echo "FAIL: MirroredStrategy(4) with clipnorm and accumulation"; fail=1; }
[ $fail = 0 ] || exit 1

if cmp "$DIR/mw2x2.a" "$DIR/mw2x2.b"; then
  echo "2 workers x 2 replicas: two launches are byte-identical"
else
  echo "FAIL: two launches of the 2 x 2 job differ"; fail=1
fi
# Small buckets sum the same values in the same order: the same bytes as the one-bucket runs.
# With one local replica the buckets cross workers on a communication thread while backward runs.
if cmp "$DIR/mw2x2.a" "$DIR/mw2x2.overlap"; then
  echo "2 workers x 2 replicas: small buckets give byte-identical weights"
else
  echo "FAIL: small buckets changed the 2 x 2 weights"; fail=1
fi
if cmp "$DIR/mw4x1" "$DIR/mw4x1.overlap"; then
  echo "4 workers x 1 replica: the all-reduce overlapped with backward gives byte-identical weights"
else
  echo "FAIL: the overlapped all-reduce changed the 4 x 1 weights"; fail=1
fi
# The shared-memory all-reduce between the ranks of one host with one barrier per pack (each rank
# folds the whole pack, as on a busy host) or two (each rank its block, as on a quiet one).
for form in one two; do
  if cmp "$DIR/mw4x1" "$DIR/mw4x1.$form"; then
    echo "4 workers x 1 replica: packs with the '$form' barrier form give byte-identical weights"
  else
    echo "FAIL: the '$form' barrier form changed the 4 x 1 weights"; fail=1
  fi
done
for other in mw4x1 mirrored4 default; do
  "$PROG" compare "$DIR/mw2x2.a" "$DIR/$other" $REL || { echo "FAIL: 2x2 vs $other"; fail=1; }
done
# Reported numbers are global, not per worker: every worker logs the same loss and accuracy
# at every batch end, epoch end and evaluate, and they match the one-process runs on the same
# global batches.
for run in mw2x2.a mw4x1; do
  for log in "$DIR/$run".logs.*; do
    cmp "$DIR/$run.logs.0" "$log" || { echo "FAIL: $run: $log differs from worker 0's logs"; fail=1; }
  done
  for other in mirrored4 default; do
    "$PROG" compare "$DIR/$run.logs.0" "$DIR/$other.logs" $LOG_REL ||
      { echo "FAIL: logs of $run vs $other"; fail=1; }
  done
done
cmp "$DIR/mw2x2.a" "$DIR/mixed2x2" ||
  { echo "FAIL: batch-end logs on worker 0 only changed the 2 x 2 weights"; fail=1; }
for run in bn2x2 bn4x1 bn4x1.overlap; do
  "$PROG" compare "$DIR/$run" "$DIR/bnmirrored4" $REL ||
    { echo "FAIL: BatchNormalization: $run vs MirroredStrategy(4)"; fail=1; }
done
for pair in "clip4x1 clipmirrored4" "clipacc4x1 clipaccmirrored4"; do
  set -- $pair
  "$PROG" compare "$DIR/$1" "$DIR/$2" $REL || { echo "FAIL: $1 vs $2"; fail=1; }
done
# Clipping and accumulation change the training: neither may match the plain run, nor each other.
for run in clip4x1 clipacc4x1; do
  if cmp -s "$DIR/mw4x1" "$DIR/$run"; then echo "FAIL: $run trained the plain run's weights"; fail=1; fi
done
if cmp -s "$DIR/clip4x1" "$DIR/clipacc4x1"; then
  echo "FAIL: accumulation did not change the clipped run"; fail=1
fi
# The BatchNormalization runs are a different training: its weights must not match the plain one.
if "$PROG" compare "$DIR/bnmirrored4" "$DIR/mirrored4" $REL >/dev/null 2>&1; then
  echo "FAIL: the BatchNormalization model trained the plain model's weights"; fail=1
fi
# The bound can fail: six of the 96 examples left out of the loss train beyond it.
if "$PROG" compare "$DIR/missing" "$DIR/default" $REL; then
  echo "FAIL: a training missing six examples stayed within $REL"; fail=1
fi
[ "$(ls "$DIR"/mw4x1.logs.* | wc -l)" = 4 ] || { echo "FAIL: expected 4 workers' logs"; fail=1; }
[ $fail = 0 ] && echo PASS && exit 0
exit 1
