#!/usr/bin/env bash
# End-to-end checks of the `lockstep` command: exit codes, one-line errors, the --history file.
# Usage: cli_test.sh <path to lockstep>
set -u
lockstep="$1"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failures=0
checks=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

# expect_error <substring> <args...>: non-zero exit, exactly one line on stderr containing it.
expect_error() {
  checks=$((checks + 1))
  local want="$1"; shift
  "$lockstep" "$@" >"$tmp/out" 2>"$tmp/err"
  local rc=$?
  local lines
  lines=$(wc -l <"$tmp/err")
  [[ $rc -ne 0 ]] || fail "'$*' exited 0"
  [[ $lines -eq 1 ]] || fail "'$*' wrote $lines lines to stderr: $(cat "$tmp/err")"
  grep -qF -- "$want" "$tmp/err" || fail "'$*' stderr lacks '$want': $(cat "$tmp/err")"
}

expect_error "subcommand is required"
expect_error "--bogus" train --bogus
expect_error "--epochs" train --epochs -1
expect_error "--precision" train --precision float16
expect_error "--gradient-dtype" train --gradient-dtype float16

# Missing data files: the error says where it looked.
expect_error "$tmp/empty" train --data-dir "$tmp/empty" --verbose 0

# A truncated images file: the error names the file.
mkdir -p "$tmp/bad"
printf '\x00\x00\x08\x03\x00\x00\xea\x60\x00\x00\x00\x1c\x00\x00\x00\x1c\x01\x02' >"$tmp/bad/train-images-idx3-ubyte"
for f in train-labels-idx1-ubyte t10k-images-idx3-ubyte t10k-labels-idx1-ubyte; do
  : >"$tmp/bad/$f"
done
expect_error "train-images-idx3-ubyte" train --data-dir "$tmp/bad" --verbose 0

# devices works.
checks=$((checks + 1))
"$lockstep" devices >"$tmp/devices" 2>&1 || fail "devices exited non-zero"
grep -q "replicas" "$tmp/devices" || fail "devices output lacks the replica count"

# A short real run writes the history JSON.
checks=$((checks + 1))
if "$lockstep" train --epochs 2 --steps-per-epoch 20 --replicas 2 --verbose 0 \
  --history "$tmp/h.json" >"$tmp/train" 2>&1; then
  for key in '"loss"' '"accuracy"' '"test_accuracy"' '"replicas": 2' '"seconds_per_epoch"'; do
    grep -qF "$key" "$tmp/h.json" || fail "history lacks $key"
  done
  grep -q "test accuracy" "$tmp/train" || fail "train did not report the test accuracy"
else
  fail "train exited non-zero: $(tail -3 "$tmp/train")"
fi

# Both input pipelines train (the history says which one ran), and a wrong choice is refused.
for pipeline in global per-replica; do
  checks=$((checks + 1))
  if "$lockstep" train --epochs 1 --steps-per-epoch 20 --replicas 2 --verbose 0 \
    --input-pipeline "$pipeline" --history "$tmp/p.json" >"$tmp/train" 2>&1; then
    grep -qF "\"input_pipeline\": \"$pipeline\"" "$tmp/p.json" ||
      fail "--input-pipeline $pipeline: the history does not say it ran"
  else
    fail "--input-pipeline $pipeline exited non-zero: $(tail -3 "$tmp/train")"
  fi
done
expect_error "input-pipeline" train --input-pipeline sideways --verbose 0

# --learning-rate-schedule: cosine decays over every step of the run (it says so), and changes the
# trained weights against a constant rate from the same start; vit takes cosine unless told.
checks=$((checks + 1))
for schedule in constant cosine; do
  "$lockstep" train --epochs 2 --steps-per-epoch 3 --replicas 2 --learning-rate 0.01 \
    --learning-rate-schedule "$schedule" --save-weights "$tmp/$schedule.safetensors" \
    >"$tmp/$schedule.out" 2>&1 || fail "--learning-rate-schedule $schedule exited non-zero"
done
grep -qF "optimizer: Adam, learning rate 0.01 decayed to 0 over 6 steps" "$tmp/cosine.out" ||
  fail "cosine: the run does not name its schedule: $(grep optimizer "$tmp/cosine.out")"
grep -qxF "optimizer: Adam, learning rate 0.01" "$tmp/constant.out" ||
  fail "constant: the run does not name its rate: $(grep optimizer "$tmp/constant.out")"
if cmp -s "$tmp/constant.safetensors" "$tmp/cosine.safetensors"; then
  fail "the cosine schedule trained the same weights as a constant rate"
fi
checks=$((checks + 1))
"$lockstep" train --model vit --epochs 1 --steps-per-epoch 2 --global-batch-size 16 \
  >"$tmp/vit.out" 2>&1 || fail "vit exited non-zero: $(tail -3 "$tmp/vit.out")"
grep -qF "decayed to 0 over 2 steps" "$tmp/vit.out" ||
  fail "vit does not default to the cosine schedule: $(grep optimizer "$tmp/vit.out")"
expect_error "--learning-rate-schedule" train --learning-rate-schedule linear --verbose 0

echo "$((checks - failures)) passed, $failures failed"
[[ $failures -eq 0 ]]
