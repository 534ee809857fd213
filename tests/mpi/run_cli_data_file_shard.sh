#!/bin/bash
# `mpirun -np 2 lockstep train --data '<4 TFRecord shards>' --auto-shard-policy file`: worker w
# reads exactly the shards j with j mod 2 == w (each says which), both train the same number of
# steps, and the chief reports the --validation-data test line. The shards (tf.train.Example
# {image: a PNG fixture written by pngjs, label}) are framed and encoded by a Python
# transcription of the formats (tests/integration/write_example_tfrecord.py), not by Lockstep. Shard j holds 2 + j records, so the workers'
# counts differ (2 + 4 and 3 + 5): they agree on the smaller one.
#   run_cli_data_file_shard.sh <mpirun> <lockstep> <fixtures dir>
set -u
MPIRUN=$1 LOCKSTEP=$2 FIXTURES=$3
DIR=$(mktemp -d)
trap 'rm -rf "$DIR"' EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
for s in 0 1 2 3; do  # shard s: 2 + s records, labels 0 1 0 1 ...
  labels=$(for ((i = 0; i < 2 + s; ++i)); do echo $((i % 2)); done)
  # shellcheck disable=SC2086
  python3 "$(dirname "$0")/../integration/write_example_tfrecord.py" \
    "$DIR/train-$s-of-4.tfrecord" "$FIXTURES/grey_5x3.png" $labels
done
timeout -k 5 150 "$MPIRUN" --oversubscribe --bind-to none -np 2 \
  "$LOCKSTEP" train --data "$DIR/train-*-of-4.tfrecord" --validation-data "$DIR/train-*-of-4.tfrecord" \
  --auto-shard-policy file --replicas 1 --epochs 2 --global-batch-size 2 --verbose 2 --timeout 60 \
  --history "$DIR/h.json" >"$DIR/out" 2>"$DIR/err" ||
  fail "mpirun -np 2 train --data exited $?: $(tail -5 "$DIR/err")"
cat "$DIR/out"
grep -qxF "data: worker 0 of 2 reads 2 of 4 files: train-0-of-4.tfrecord, train-2-of-4.tfrecord" \
  "$DIR/out" || fail "worker 0 does not read shards 0 and 2"
grep -qxF "data: worker 1 of 2 reads 2 of 4 files: train-1-of-4.tfrecord, train-3-of-4.tfrecord" \
  "$DIR/out" || fail "worker 1 does not read shards 1 and 3"
grep -qF "sharded by file" "$DIR/out" || fail "the chief does not report sharding by file"
grep -qF "test accuracy" "$DIR/out" || fail "no test line"
python3 - "$DIR/h.json" <<'PY' || fail "history"
import json, sys
h = json.load(open(sys.argv[1]))
# Workers hold 6 and 8 examples; they agree on 6 each: 12 examples, global batches of 2.
assert h["workers"] == 2 and h["steps_per_epoch"] == 6, (h["workers"], h["steps_per_epoch"])
PY
[ $failures -eq 0 ] && echo PASS
[ $failures -eq 0 ]
