#!/usr/bin/env bash
# `lockstep train --profile DIR --profile-steps A:B` profiles steps A to B: it prints the summary
# and writes DIR/trace.json (JSON, one X event per span), summary.txt, steps.svg and report.html.
# A malformed or empty range, and --profile-steps without --profile, are refused with one line.
# Usage: cli_profile_test.sh <path to lockstep>
set -u
lockstep="$1"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

"$lockstep" train --epochs 1 --steps-per-epoch 6 --profile "$tmp/prof" --profile-steps 2:5 \
  >"$tmp/out" 2>"$tmp/err"
rc=$?
[ $rc -eq 0 ] || fail "train --profile exited $rc: $(head -c 500 "$tmp/err")"
for f in trace.json summary.txt steps.svg report.html; do
  [ -s "$tmp/prof/$f" ] || fail "no $f in the profile directory"
done
grep -q '^Lockstep profile: 4 step(s) (steps 2\.\.5) on 1 worker(s)' "$tmp/prof/summary.txt" ||
  fail "summary.txt does not cover steps 2 to 5: $(head -n 1 "$tmp/prof/summary.txt")"
grep -q '^Lockstep profile: 4 step(s)' "$tmp/out" || fail "the summary was not printed"
grep -q '\[input, ' "$tmp/prof/summary.txt" || fail "summary.txt has no input verdict"
python3 - "$tmp/prof/trace.json" <<'PY' || fail "trace.json is not a Trace Event Format trace"
import json, sys
events = json.load(open(sys.argv[1]))["traceEvents"]
steps = {e["name"] for e in events if e["ph"] == "X" and e["name"].startswith("step ")}
assert steps == {"step 2", "step 3", "step 4", "step 5"}, steps
assert any(e["ph"] == "M" and e["name"] == "thread_name" for e in events)
PY

expect_line() {
  local want="$1"; shift
  "$lockstep" "$@" >"$tmp/out" 2>"$tmp/err"
  local rc=$?
  if [[ $rc -ne 2 || "$(cat "$tmp/err")" != "$want" ]]; then
    fail "'$*' exited $rc and wrote: $(head -c 300 "$tmp/err") -- expected exit 2 and: $want"
  fi
}
expect_line "lockstep: --profile-steps must be A:B with 1 ≤ A ≤ B (steps counted from 1), got '5:2'" \
  train --profile "$tmp/p" --profile-steps 5:2
expect_line "lockstep: --profile-steps must be A:B with 1 ≤ A ≤ B (steps counted from 1), got '0:3'" \
  train --profile "$tmp/p" --profile-steps 0:3
expect_line "lockstep: --profile-steps must be A:B with 1 ≤ A ≤ B (steps counted from 1), got 'ten'" \
  train --profile "$tmp/p" --profile-steps ten
"$lockstep" train --profile-steps 2:3 >"$tmp/out" 2>"$tmp/err"
rc=$?
{ [ $rc -eq 2 ] && grep -q -- '--profile-steps requires --profile' "$tmp/err"; } ||
  fail "--profile-steps without --profile exited $rc: $(cat "$tmp/err")"

[ $failures -eq 0 ] && echo "PASS" && exit 0
exit 1
