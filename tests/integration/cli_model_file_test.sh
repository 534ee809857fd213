#!/usr/bin/env bash
# `lockstep train --save-model --export-onnx`, `lockstep evaluate --model`, `lockstep predict --model --output`
# and `lockstep train --load-model` on the installed Fashion-MNIST: evaluate reports the same test
# loss and accuracy train printed for the saved model; predict writes one row of 10 outputs per
# test example; --load-model continues training; combined with --model, --load-weights or a
# --backup-dir holding a backup it is one clear error line.
# Usage: cli_model_file_test.sh <path to lockstep>
set -u
lockstep="$1"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

train=(train --epochs 1 --steps-per-epoch 10 --verbose 0 --replicas 2 --seed 3)
"$lockstep" "${train[@]}" --save-model "$tmp/m.keras" --export-onnx "$tmp/m.onnx" >"$tmp/train.out" 2>&1 || fail "train: $(cat "$tmp/train.out")"
[[ -s "$tmp/m.onnx" ]] || fail "train --export-onnx wrote no $tmp/m.onnx"
"$lockstep" evaluate --model "$tmp/m.keras" >"$tmp/eval.out" 2>&1 || fail "evaluate: $(cat "$tmp/eval.out")"
grep -q '^test loss: .* - test accuracy: ' "$tmp/eval.out" || fail "evaluate printed: $(cat "$tmp/eval.out")"
[[ "$(tail -1 "$tmp/train.out")" == "$(cat "$tmp/eval.out")" ]] ||
  fail "train reported '$(tail -1 "$tmp/train.out")', evaluate '$(cat "$tmp/eval.out")'"

"$lockstep" predict --model "$tmp/m.keras" --output "$tmp/p.csv" >"$tmp/pred.out" 2>&1 || fail "predict: $(cat "$tmp/pred.out")"
rows=$(wc -l <"$tmp/p.csv")
[[ "$rows" == 10000 ]] || fail "predict wrote $rows rows, expected 10000"
cols=$(head -1 "$tmp/p.csv" | tr ',' '\n' | wc -l)
[[ "$cols" == 10 ]] || fail "predict wrote $cols columns, expected 10"

"$lockstep" "${train[@]}" --load-model "$tmp/m.keras" >"$tmp/cont.out" 2>&1 || fail "train --load-model: $(cat "$tmp/cont.out")"
grep -q '^test loss: ' "$tmp/cont.out" || fail "train --load-model printed: $(cat "$tmp/cont.out")"

expect_error() {
  local want="$1"; shift
  "$lockstep" "$@" >"$tmp/out" 2>"$tmp/err"
  local rc=$?
  if [[ $rc -eq 0 || "$(cat "$tmp/err")" != *"$want"* ]]; then
    fail "'$*' exited $rc and wrote: $(head -c 300 "$tmp/err") -- expected an error with: $want"
  fi
}
expect_error "--load-model and --model cannot be combined" train --load-model "$tmp/m.keras" --model mlp
expect_error "--load-model and --load-weights cannot be combined" \
  train --load-model "$tmp/m.keras" --load-weights "$tmp/w.safetensors"
mkdir -p "$tmp/backup" && : >"$tmp/backup/backup.safetensors"
expect_error "holds a backup" train --load-model "$tmp/m.keras" --backup-dir "$tmp/backup"
expect_error "not a .keras archive" evaluate --model "$tmp/p.csv"
expect_error "cannot open" evaluate --model "$tmp/missing.keras"

if ((failures)); then
  echo "$failures check(s) failed"
  exit 1
fi
echo "all model-file checks passed"
