#!/usr/bin/env bash
# `lockstep train` on a data directory whose label file holds a byte at or above the 10 classes
# (a label of 200) stops before training with one line naming the file, the example and the value;
# the same directory with valid labels trains. The IDX fixtures are generated here.
# Usage: cli_labels_test.sh <path to lockstep>
set -u
lockstep="$1"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failures=0
checks=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

byte() { printf "\\x$(printf %02x "$1")"; }
# images <file> <n>: an IDX uint8 [n, 28, 28] file of zeros (n < 256).
images() {
  { printf '\x00\x00\x08\x03\x00\x00\x00'; byte "$2"
    printf '\x00\x00\x00\x1c\x00\x00\x00\x1c'; head -c $(($2 * 784)) /dev/zero; } >"$1"
}
# labels <file> <byte>...: an IDX uint8 [n] file holding the given label bytes (n < 256).
labels() {
  local file=$1; shift
  { printf '\x00\x00\x08\x01\x00\x00\x00'; byte $#; for b in "$@"; do byte "$b"; done; } >"$file"
}

# A directory of 8 training and 4 test examples; `bad_split` gets a label of 200 at example 5.
make_dir() {
  local dir=$1 bad_split=$2
  mkdir -p "$dir"
  images "$dir/train-images-idx3-ubyte" 8
  images "$dir/t10k-images-idx3-ubyte" 4
  labels "$dir/train-labels-idx1-ubyte" 0 1 2 3 4 5 6 7
  labels "$dir/t10k-labels-idx1-ubyte" 9 8 7 6
  case $bad_split in
    train) labels "$dir/train-labels-idx1-ubyte" 0 1 2 3 4 200 6 7 ;;
    test) labels "$dir/t10k-labels-idx1-ubyte" 9 8 10 6 ;;
  esac
  return 0
}

# expect_error <substrings...> -- <args...>: non-zero exit, one stderr line holding every substring.
expect_error() {
  checks=$((checks + 1))
  local wants=()
  while [[ $1 != -- ]]; do wants+=("$1"); shift; done
  shift
  "$lockstep" "$@" >"$tmp/out" 2>"$tmp/err"
  local rc=$? problem=""
  [[ $rc -ne 0 ]] || problem="exited 0"
  [[ $(wc -l <"$tmp/err") -eq 1 ]] || problem="$problem; wrote $(wc -l <"$tmp/err") lines"
  for w in "${wants[@]}"; do grep -qF -- "$w" "$tmp/err" || problem="$problem; lacks '$w'"; done
  [[ -z $problem ]] || fail "'$*': $problem: $(head -c 400 "$tmp/err")"
}

make_dir "$tmp/train200" train
expect_error "$tmp/train200/train-labels-idx1-ubyte" "example 5" "label 200" "[0, 10)" -- \
  train --data-dir "$tmp/train200" --epochs 1 --global-batch-size 4 --verbose 0
make_dir "$tmp/test10" test
expect_error "$tmp/test10/t10k-labels-idx1-ubyte" "example 2" "label 10" -- \
  train --data-dir "$tmp/test10" --dataset mnist --epochs 1 --global-batch-size 4 --verbose 0

# The same files with valid labels train (so the refusal above is about the label).
make_dir "$tmp/good" none
checks=$((checks + 1))
"$lockstep" train --data-dir "$tmp/good" --epochs 1 --global-batch-size 4 --replicas 1 \
  --verbose 0 >"$tmp/out" 2>"$tmp/err" || fail "valid labels did not train: $(cat "$tmp/err")"

echo "$((checks - failures)) passed, $failures failed"
[[ $failures -eq 0 ]]
