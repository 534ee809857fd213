#!/bin/bash
# A BackupAndRestore backup written by `mpirun -np 2` (2 workers x 1 replica) resumes in one
# process (1 worker x 2 replicas), and the other way round, with the weights of an uninterrupted
# run bit for bit (weights_close at a tolerance of 0): weights, optimizer state and the random
# streams are per replica in sync, the input position is re-sharded over the new workers, and the
# sum of two replicas' gradients is one addition whether it crosses workers or not. A backup of
# other replicas in sync (2 x 2 resumed as 1 x 2, 1 x 1 as 2 x 1) resumes too, deterministically
# (an elastic restart); a global batch the new replicas cannot divide for per-replica pipelines
# stops at once with one line naming both. A backup of an input sharded by file resumes on its own
# number of workers only.
#   run_backup_worker_count.sh <mpirun> <backup_worker_count> <weights_close>
set -u
MPIRUN=$1 PROG=$2 CLOSE=$3
DIR=$(mktemp -d)
trap 'rm -rf "$DIR"' EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
mpi2() { timeout -k 5 150 "$MPIRUN" --oversubscribe --bind-to none -np 2 -x LOCKSTEP_DEVICES "$@"; }
alone() { timeout -k 5 150 "$@"; }

for pipeline in global per-replica; do
  LOCKSTEP_DEVICES=cpu:2 alone "$PROG" full - 4 $pipeline "$DIR/$pipeline.ref" ||
    fail "$pipeline: uninterrupted run"
  # -np 2 writes, one process resumes.
  LOCKSTEP_DEVICES=cpu:1 mpi2 "$PROG" write "$DIR/$pipeline.a" 2 $pipeline || fail "$pipeline: -np 2 write"
  LOCKSTEP_DEVICES=cpu:2 alone "$PROG" resume "$DIR/$pipeline.a" 4 $pipeline "$DIR/$pipeline.a.out" ||
    fail "$pipeline: resume alone"
  [ "$(cat "$DIR/$pipeline.a.out.restored" 2>/dev/null)" = 1 ] ||
    fail "$pipeline: the lone process did not resume after epoch index 1"
  "$CLOSE" "$DIR/$pipeline.a.out" "$DIR/$pipeline.ref" 0 ||
    fail "$pipeline: -np 2 -> alone differs from the uninterrupted run"
  # One process writes, -np 2 resumes.
  LOCKSTEP_DEVICES=cpu:2 alone "$PROG" write "$DIR/$pipeline.b" 2 $pipeline || fail "$pipeline: write alone"
  LOCKSTEP_DEVICES=cpu:1 mpi2 "$PROG" resume "$DIR/$pipeline.b" 4 $pipeline "$DIR/$pipeline.b.out" ||
    fail "$pipeline: resume under -np 2"
  [ "$(cat "$DIR/$pipeline.b.out.restored" 2>/dev/null)" = 1 ] ||
    fail "$pipeline: -np 2 did not resume after epoch index 1"
  "$CLOSE" "$DIR/$pipeline.b.out" "$DIR/$pipeline.ref" 0 ||
    fail "$pipeline: alone -> -np 2 differs from the uninterrupted run"
done

# Elastic restart: 2 workers x 2 replicas (4 in sync) resumed by one process of 2 replicas (as
# after losing one of two hosts). The model has Dropout, whose per-replica streams are derived
# anew for another replica count, so the check is that it resumes after the saved epoch and that
# two resumes from the same backup end with the same bytes (tests/keras's ElasticRestart tests
# compare such resumes with a float64 reference).
LOCKSTEP_DEVICES=cpu:2 mpi2 "$PROG" write "$DIR/c" 2 global || fail "2 x 2 write"
cp -a "$DIR/c" "$DIR/c2"
for d in c c2; do
  LOCKSTEP_DEVICES=cpu:2 alone "$PROG" resume "$DIR/$d" 4 global "$DIR/$d.out" ||
    fail "a 4-replica backup did not resume on 1 x 2"
  [ "$(cat "$DIR/$d.out.restored" 2>/dev/null)" = 1 ] ||
    fail "1 x 2 did not resume the 2 x 2 backup after epoch index 1"
done
cmp -s "$DIR/c.out" "$DIR/c2.out" || fail "two 2 x 2 -> 1 x 2 resumes of one backup differ"

# 1 x 1 resumed by 2 workers x 1 (more replicas than the backup's).
LOCKSTEP_DEVICES=cpu:1 alone "$PROG" write "$DIR/d" 2 global || fail "1 x 1 write"
LOCKSTEP_DEVICES=cpu:1 mpi2 "$PROG" resume "$DIR/d" 4 global "$DIR/d.out" >"$DIR/d.log" 2>&1 ||
  { cat "$DIR/d.log"; fail "a 1-replica backup did not resume on 2 workers"; }
[ "$(cat "$DIR/d.out.restored" 2>/dev/null)" = 1 ] ||
  fail "2 x 1 did not resume the 1 x 1 backup after epoch index 1"

# Per-replica pipelines need the global batch (16) divided among the replicas: 3 cannot, and
# the resume stops at once with one line naming both numbers, before training.
LOCKSTEP_DEVICES=cpu:2 alone "$PROG" write "$DIR/e" 2 per-replica || fail "1 x 2 write"
LOCKSTEP_DEVICES=cpu:3 alone "$PROG" resume "$DIR/e" 4 per-replica "$DIR/e.out" 2>"$DIR/e.err"
rc=$?
cat "$DIR/e.err"
[ $rc -ne 0 ] || fail "16 examples were split over 3 per-replica pipelines"
[ "$(grep -vc '^lockstep: warning: ' "$DIR/e.err")" -eq 1 ] || fail "the refusal is not one line"
grep -qF "global batch size (16) must be divisible by the number of replicas in sync (3)" \
  "$DIR/e.err" || fail "the refusal does not name the global batch and the replicas"
[ ! -e "$DIR/e.out" ] || fail "training ran with a global batch the replicas cannot divide"

# Input sharded by file (each worker reads its own 2 of 4 CSV files): the backup resumes on its own
# number of workers, and another number stops before training with one line that names the
# workers it needs.
refused() {  # refused NAME ERRFILE OUT WORKERS
  local rc=$4
  cat "$2"
  [ "$rc" -ne 0 ] || fail "$1: resumed a FILE-sharded backup on another number of workers"
  grep -qF "AutoShardPolicy::FILE" "$2" || fail "$1: the refusal does not name FILE sharding"
  grep -qF "resume on $5" "$2" || fail "$1: the refusal does not name the workers to resume on"
  [ ! -e "$3" ] || fail "$1: training ran"
}
LOCKSTEP_DEVICES=cpu:1 mpi2 "$PROG" write "$DIR/f" 2 file || fail "file: -np 2 write"
cp -a "$DIR/f" "$DIR/f2"
LOCKSTEP_DEVICES=cpu:2 alone "$PROG" resume "$DIR/f" 4 file "$DIR/f.out" 2>"$DIR/f.err"
rc=$?
refused "file: -np 2 -> alone" "$DIR/f.err" "$DIR/f.out" $rc "2 workers"
[ "$(grep -vc '^lockstep: warning: ' "$DIR/f.err")" -eq 1 ] || fail "file: the refusal is not one line"
LOCKSTEP_DEVICES=cpu:1 mpi2 "$PROG" resume "$DIR/f2" 4 file "$DIR/f2.out" ||
  fail "file: -np 2 did not resume its own backup"
[ "$(cat "$DIR/f2.out.restored" 2>/dev/null)" = 1 ] ||
  fail "file: -np 2 did not resume its own backup after epoch index 1"
LOCKSTEP_DEVICES=cpu:2 alone "$PROG" write "$DIR/g" 2 file || fail "file: write alone"
LOCKSTEP_DEVICES=cpu:1 mpi2 "$PROG" resume "$DIR/g" 4 file "$DIR/g.out" 2>"$DIR/g.err"
rc=$?
refused "file: alone -> -np 2" "$DIR/g.err" "$DIR/g.out" $rc "1 worker"

[ $failures -eq 0 ] && echo PASS
[ $failures -eq 0 ]
