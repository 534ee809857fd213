#!/bin/bash
# A BackupAndRestore backup written by `mpirun -np 2` (2 workers x 1 replica) resumes in one
# process (1 worker x 2 replicas), and the other way round, with the weights of an uninterrupted
# run (within 1e-5 relative): weights, optimizer state and the random streams are per replica in
# sync, and the input position is re-sharded over the new workers. A backup whose replicas in sync
# differ from the job's (2 x 2 resumed as 1 x 2, 1 x 1 resumed as 2 x 1) stops at once with one
# line naming the counts the backup was written with.
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
  "$CLOSE" "$DIR/$pipeline.a.out" "$DIR/$pipeline.ref" 1e-5 ||
    fail "$pipeline: -np 2 -> alone differs from the uninterrupted run"
  # One process writes, -np 2 resumes.
  LOCKSTEP_DEVICES=cpu:2 alone "$PROG" write "$DIR/$pipeline.b" 2 $pipeline || fail "$pipeline: write alone"
  LOCKSTEP_DEVICES=cpu:1 mpi2 "$PROG" resume "$DIR/$pipeline.b" 4 $pipeline "$DIR/$pipeline.b.out" ||
    fail "$pipeline: resume under -np 2"
  [ "$(cat "$DIR/$pipeline.b.out.restored" 2>/dev/null)" = 1 ] ||
    fail "$pipeline: -np 2 did not resume after epoch index 1"
  "$CLOSE" "$DIR/$pipeline.b.out" "$DIR/$pipeline.ref" 1e-5 ||
    fail "$pipeline: alone -> -np 2 differs from the uninterrupted run"
done

# 2 workers x 2 replicas (4 in sync) resumed by one process of 2 replicas: refused at once.
LOCKSTEP_DEVICES=cpu:2 mpi2 "$PROG" write "$DIR/c" 2 global || fail "2 x 2 write"
LOCKSTEP_DEVICES=cpu:2 alone "$PROG" resume "$DIR/c" 4 global "$DIR/c.out" 2>"$DIR/c.err"
rc=$?
cat "$DIR/c.err"
[ $rc -ne 0 ] || fail "a 4-replica backup resumed on 2 replicas"
[ "$(wc -l <"$DIR/c.err")" -eq 1 ] || fail "the refusal is not one line"
grep -qF "written by 2 workers x 2 replicas (4 in sync)" "$DIR/c.err" ||
  fail "the refusal does not name the counts the backup was written with"
grep -qF "this job has 1 worker x 2 replicas (2 in sync)" "$DIR/c.err" ||
  fail "the refusal does not name this job's counts"
[ ! -e "$DIR/c.out" ] || fail "training ran from a mismatched backup"

# 1 x 1 resumed by 2 workers x 1: the job ends non-zero with the same kind of message.
LOCKSTEP_DEVICES=cpu:1 alone "$PROG" write "$DIR/d" 2 global || fail "1 x 1 write"
LOCKSTEP_DEVICES=cpu:1 mpi2 "$PROG" resume "$DIR/d" 4 global "$DIR/d.out" >"$DIR/d.log" 2>&1
rc=$?
[ $rc -ne 0 ] || fail "a 1-replica backup resumed on 2 workers"
grep -qF "written by 1 worker x 1 replica (1 in sync)" "$DIR/d.log" ||
  { cat "$DIR/d.log"; fail "the -np 2 refusal does not name the backup's counts"; }

[ $failures -eq 0 ] && echo PASS
[ $failures -eq 0 ]
