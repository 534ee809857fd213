#!/usr/bin/env bash
# `lockstep train --data SPEC`: class folders of PNGs (the committed fixtures, written by pngjs),
# a CSV file and a TFRecord file of tf.train.Example (framed and encoded here by a Python
# transcription of the formats, not by Lockstep) train and report the --validation-data test
# line, with the input shape and class count taken from the data; bad files stop with one line
# naming the file and the line, record or label.
# Usage: cli_data_test.sh <path to lockstep> <fixtures dir>
set -u
lockstep="$1"
fixtures="$2"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failures=0
checks=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

# expect_train <substrings...> -- <args...>: exit 0, stdout holding every substring.
expect_train() {
  checks=$((checks + 1))
  local wants=()
  while [[ $1 != -- ]]; do wants+=("$1"); shift; done
  shift
  "$lockstep" train "$@" --epochs 2 --global-batch-size 4 --replicas 1 --verbose 2 \
    >"$tmp/out" 2>"$tmp/err" || { fail "'$*' exited $?: $(head -c 400 "$tmp/err")"; return; }
  for w in "${wants[@]}"; do
    grep -qF -- "$w" "$tmp/out" || fail "'$*': output lacks '$w': $(head -c 600 "$tmp/out")"
  done
}
# expect_error <substrings...> -- <args...>: non-zero exit, stderr holding every substring.
expect_error() {
  checks=$((checks + 1))
  local wants=()
  while [[ $1 != -- ]]; do wants+=("$1"); shift; done
  shift
  "$lockstep" train "$@" --epochs 1 --global-batch-size 4 --replicas 1 --verbose 0 \
    >"$tmp/out" 2>"$tmp/err"
  local rc=$?
  [[ $rc -ne 0 ]] || fail "'$*' exited 0"
  for w in "${wants[@]}"; do
    grep -qF -- "$w" "$tmp/err" || fail "'$*': stderr lacks '$w': $(head -c 400 "$tmp/err")"
  done
}

# Class folders: "a" holds the 5x3 grey PNG 6 times, "b" the 4x3 RGB one (read as grey, resized).
mkdir -p "$tmp/png/a" "$tmp/png/b"
for i in 0 1 2 3 4 5; do
  cp "$fixtures/grey_5x3.png" "$tmp/png/a/$i.png"
  cp "$fixtures/rgb_4x3.png" "$tmp/png/b/$i.png"
done
expect_train "input [3, 5, 1] uint8" "2 classes" "sharded by data" "test accuracy" -- \
  --data "$tmp/png" --validation-data "$tmp/png"
# --cache none and a cache file give the same kind of run.
expect_train "cache: none" "test accuracy" -- --data "$tmp/png" --validation-data "$tmp/png" \
  --cache none
expect_train "cache: $tmp/cache.bin" "no --validation-data" -- --data "$tmp/png" --cache "$tmp/cache.bin" \
  --history "$tmp/h.json"
checks=$((checks + 1))
grep -qF "\"test_accuracy\": null" "$tmp/h.json" || fail "history without --validation-data: $(cat "$tmp/h.json")"

# CSV: a header, quoted fields, an empty feature (0), the label in the middle.
{
  echo 'f1,label,f2'
  for i in 0 1 2 3 4 5 6 7; do echo "$i,$((i % 3)),\"$((i * 2))\""; done
  echo '9,1,'
} >"$tmp/train.csv"
expect_train "input [2] float32" "3 classes" -- --data "$tmp/train.csv"
{ echo 'x,y'; for i in 0 1 2 3; do echo "$i,$((i % 2))"; done; } >"$tmp/xy.csv"
expect_train "2 classes" -- --data "$tmp/xy.csv" --label-column y
expect_error "xy.csv" "no column 'label'" -- --data "$tmp/xy.csv"
{ echo 'f1,label'; echo '1,0'; echo '2,1'; echo '3'; } >"$tmp/bad.csv"
expect_error "bad.csv" "line 4" "2 fields" "received 1" -- --data "$tmp/bad.csv"

# TFRecord of tf.train.Example {image: the grey PNG, label}, 2 shards of labels 0 1 0 1.
writer="$(dirname "$0")/write_example_tfrecord.py"
python3 "$writer" "$tmp/part-0.tfrecord" "$fixtures/grey_5x3.png" 0 1 0 1
python3 "$writer" "$tmp/part-1.tfrecord" "$fixtures/grey_5x3.png" 0 1 0 1
expect_train "input [3, 5, 1] uint8" "2 classes" "test accuracy" -- \
  --data "$tmp/part-*.tfrecord" --validation-data "$tmp/part-*.tfrecord"
# The foreign fixture holds a record whose label is -5 (and whose image is not an image).
expect_error "label of -5" -- --data "$fixtures/examples.tfrecord"
head -c 100 "$tmp/part-0.tfrecord" >"$tmp/cut.tfrecord"
expect_error "cut.tfrecord" "record 0" "truncated" -- --data "$tmp/cut.tfrecord"

# evaluate and predict read --data as train does: a model saved after training on the class
# folders gets, from evaluate --data, the test loss and accuracy train printed for the same files,
# and predict writes one row per image.
checks=$((checks + 1))
"$lockstep" train --data "$tmp/png" --validation-data "$tmp/png" --epochs 2 --global-batch-size 4 \
  --replicas 1 --verbose 0 --save-model "$tmp/m.keras" >"$tmp/train_out" 2>&1 ||
  fail "train --save-model: $(tail -3 "$tmp/train_out")"
"$lockstep" evaluate --model "$tmp/m.keras" --data "$tmp/png" --batch-size 4 >"$tmp/eval_out" 2>&1 ||
  fail "evaluate --data: $(tail -3 "$tmp/eval_out")"
want=$(grep -o 'test accuracy: [0-9.]*' "$tmp/train_out")
got=$(grep -o 'test accuracy: [0-9.]*' "$tmp/eval_out")
[[ -n $want && $got == "$want" ]] || fail "evaluate --data printed '$got', train printed '$want'"
checks=$((checks + 1))
"$lockstep" predict --model "$tmp/m.keras" --data "$tmp/png" --output "$tmp/p.csv" >/dev/null 2>&1 ||
  fail "predict --data"
[[ $(wc -l <"$tmp/p.csv") -eq 12 && $(head -1 "$tmp/p.csv" | tr ',' '\n' | wc -l) -eq 2 ]] ||
  fail "predict --data wrote $(wc -l <"$tmp/p.csv") rows: $(head -2 "$tmp/p.csv")"

# A file with an image name that is not an image.
echo "not a png" >"$tmp/png/b/fake.png"
expect_error "fake.png" "neither a PNG nor a JPEG" -- --data "$tmp/png"
expect_error "--image-shape" -- --data "$tmp/png" --image-shape 28x28

echo "$((checks - failures)) passed, $failures failed"
[[ $failures -eq 0 ]]
