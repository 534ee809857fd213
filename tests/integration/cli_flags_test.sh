#!/usr/bin/env bash
# Every numeric flag of `lockstep train` refuses a value out of its range with one line on stderr
# that names the flag, the allowed range in words and the value: "--batch-size must be ≥ 1, got 0",
# never CLI11's "Value 0 not in range 0.000000 to 1797693134862315708145...".
# Usage: cli_flags_test.sh <path to lockstep>
set -u
lockstep="$1"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failures=0
checks=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

# expect_line <exact stderr line> <args...>: exit code 2 (a usage error, before any data is read)
# and exactly that one line on stderr.
expect_line() {
  checks=$((checks + 1))
  local want="$1"; shift
  "$lockstep" "$@" >"$tmp/out" 2>"$tmp/err"
  local rc=$?
  if [[ $rc -ne 2 || "$(cat "$tmp/err")" != "$want" ]]; then
    fail "'$*' exited $rc and wrote: $(head -c 300 "$tmp/err") -- expected exit 2 and: $want"
  fi
}

expect_line "lockstep: --batch-size must be ≥ 1, got 0" train --batch-size 0
expect_line "lockstep: --batch-size must be ≥ 1, got -5" train --batch-size -5
expect_line "lockstep: --epochs must be ≥ 1, got 0" train --epochs 0
expect_line "lockstep: --epochs must be ≥ 1, got -1" train --epochs -1
expect_line "lockstep: --epochs must be ≤ 2147483647, got 99999999999" train --epochs 99999999999
expect_line "lockstep: --epochs must be an integer ≥ 1, got 'five'" train --epochs five
expect_line "lockstep: --global-batch-size must be ≥ 1, got 0" train --global-batch-size 0
expect_line "lockstep: --steps-per-epoch must be ≥ 1, got 0" train --steps-per-epoch 0
expect_line "lockstep: --steps-per-epoch must be an integer ≥ 1, got '2.5'" \
  train --steps-per-epoch 2.5
expect_line "lockstep: --replicas must be ≥ 1, got 0" train --replicas 0
expect_line "lockstep: --steps-per-execution must be ≥ 1, got 0" train --steps-per-execution 0
expect_line "lockstep: --bytes-per-pack must be ≥ 1, got 0" train --bytes-per-pack 0
expect_line "lockstep: --verbose must be between 0 and 2, got 3" train --verbose 3
expect_line "lockstep: --verbose must be between 0 and 2, got -1" train --verbose -1
expect_line "lockstep: --timeout must be ≥ 0, got -1" train --timeout -1
expect_line "lockstep: --timeout must be a number ≥ 0, got 'soon'" train --timeout soon
expect_line "lockstep: --timeout must be a number ≥ 0, got 'nan'" train --timeout nan
expect_line "lockstep: --seed must be ≥ 0, got -1" train --seed -1
expect_line "lockstep: --learning-rate must be ≥ 0, got -0.1" train --learning-rate -0.1
expect_line "lockstep: --seed must be ≤ 18446744073709551615, got 18446744073709551616" \
  train --seed 18446744073709551616

# The limits themselves are accepted: the command gets past parsing (and then fails on the data
# directory, which proves the flags were taken).
checks=$((checks + 1))
"$lockstep" train --verbose 0 --epochs 1 --timeout 0 --seed 18446744073709551615 \
  --data-dir "$tmp/none" >"$tmp/out" 2>"$tmp/err"
grep -qF "$tmp/none" "$tmp/err" || fail "in-range flags were refused: $(cat "$tmp/err")"

echo "$((checks - failures)) passed, $failures failed"
[[ $failures -eq 0 ]]
