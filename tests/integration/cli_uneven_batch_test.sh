#!/usr/bin/env bash
# `LOCKSTEP_DEVICES=cpu:4 lockstep train --global-batch-size 250`: 4 replicas do not divide 250, so
# the CLI feeds them from the global pipeline, whose batches tf.distribute-style rebatching splits
# 63, 63, 63, 61; it trains to the weights of 1 replica on the same batches (same seed, so the same
# shuffled global batches). Tolerance: 1e-4 relative (floor 1e-2). The two runs sum each gradient
# in a different order (4 slices, then across replicas, vs one batch of 250); where a weight's
# gradient nearly cancels over the batch (Fashion-MNIST's mostly-zero border pixels), Adam's
# per-element normalisation turns that rounding into up to ~1e-4 of one step of 1e-3. Another batch
# order moves the weights by ~1e-3, which the negative control below checks is caught.
# Per-replica pipelines, which batch 250 / 4 each, are refused for such a batch with one line.
# Usage: cli_uneven_batch_test.sh <path to lockstep> <path to weights_close>
set -u
lockstep="$1" weights_close="$2"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failures=0
checks=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

run=(train --global-batch-size 250 --epochs 2 --steps-per-epoch 4 --seed 5)

checks=$((checks + 1))
if LOCKSTEP_DEVICES=cpu:4 "$lockstep" "${run[@]}" --verbose 2 --save-weights "$tmp/four.safetensors" \
  --history "$tmp/four.json" >"$tmp/four.out" 2>"$tmp/four.err"; then
  head -1 "$tmp/four.out" | grep -qxF "1 worker (this is worker 0), 4 local replicas, 4 in sync" ||
    fail "the first line is not the topology: $(head -1 "$tmp/four.out")"
  grep -qxF "num_replicas_in_sync: 4 - global batch: 250" "$tmp/four.out" ||
    fail "no line names the replicas and the global batch: $(cat "$tmp/four.out")"
  grep -qF "input pipeline: global, prefetched (250 examples split unevenly over 4 replicas)" \
    "$tmp/four.out" || fail "the output does not say which pipeline ran: $(cat "$tmp/four.out")"
  for key in '"replicas": 4' '"global_batch_size": 250' '"input_pipeline": "global"'; do
    grep -qF "$key" "$tmp/four.json" || fail "history lacks $key"
  done
else
  fail "4 replicas with a global batch of 250 exited non-zero: $(tail -3 "$tmp/four.err")"
fi

checks=$((checks + 1))
if LOCKSTEP_DEVICES=cpu:1 "$lockstep" "${run[@]}" --verbose 0 --save-weights "$tmp/one.safetensors" \
  >"$tmp/one.out" 2>"$tmp/one.err"; then
  "$weights_close" "$tmp/four.safetensors" "$tmp/one.safetensors" 1e-4 >"$tmp/cmp" 2>&1 ||
    fail "4 replicas and 1 replica ended with different weights: $(cat "$tmp/cmp")"
  cat "$tmp/cmp"
else
  fail "1 replica with a global batch of 250 exited non-zero: $(tail -3 "$tmp/one.err")"
fi

# Negative control: the same run on other batches (another shuffle seed, same initial weights
# loaded from a file) is told apart at this tolerance.
checks=$((checks + 1))
LOCKSTEP_DEVICES=cpu:1 "$lockstep" train --global-batch-size 250 --epochs 1 --steps-per-epoch 1 \
  --seed 5 --verbose 0 --save-weights "$tmp/init.safetensors" >/dev/null 2>&1
if LOCKSTEP_DEVICES=cpu:1 "$lockstep" train --global-batch-size 250 --epochs 2 --steps-per-epoch 4 \
  --seed 5 --verbose 0 --load-weights "$tmp/init.safetensors" \
  --save-weights "$tmp/a.safetensors" >/dev/null 2>&1 &&
  LOCKSTEP_DEVICES=cpu:1 "$lockstep" train --global-batch-size 250 --epochs 2 --steps-per-epoch 4 \
    --seed 6 --verbose 0 --load-weights "$tmp/init.safetensors" \
    --save-weights "$tmp/b.safetensors" >/dev/null 2>&1; then
  "$weights_close" "$tmp/a.safetensors" "$tmp/b.safetensors" 1e-4 >"$tmp/cmp" 2>&1 &&
    fail "runs on different batches compared equal: $(cat "$tmp/cmp")"
else
  fail "the negative control's runs exited non-zero"
fi

checks=$((checks + 1))
LOCKSTEP_DEVICES=cpu:4 "$lockstep" "${run[@]}" --verbose 0 --input-pipeline per-replica \
  >"$tmp/out" 2>"$tmp/err"
rc=$?
grep -v "oversubscribed" "$tmp/err" >"$tmp/err1"
if [[ $rc -eq 0 || $(wc -l <"$tmp/err1") -ne 1 ]] ||
  ! grep -qF -- "--input-pipeline per-replica needs a global batch that the 4 replicas in sync divide, got 250" "$tmp/err1"; then
  fail "per-replica pipelines with an uneven batch: exit $rc, $(cat "$tmp/err1")"
fi

echo "$((checks - failures)) passed, $failures failed"
[[ $failures -eq 0 ]]
