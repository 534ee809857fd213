#!/usr/bin/env bash
# The ISA cap from the command line: `lockstep devices` names oneDNN's ISA, the cap and how
# bfloat16 math runs; an unknown cap is one clear line; under LOCKSTEP_MAX_CPU_ISA=AVX2 (oneDNN has
# no bfloat16 kernels there) `lockstep train --precision mixed_bfloat16` trains and says that
# bfloat16 is emulated in float32 kernels. Uses the installed Fashion-MNIST.
# Usage: cli_isa_test.sh <path to lockstep>
set -u
lockstep="$1"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
unset ONEDNN_MAX_CPU_ISA

LOCKSTEP_MAX_CPU_ISA=AVX9 "$lockstep" devices >"$tmp/out" 2>"$tmp/err"
rc=$?
[[ $rc -ne 0 ]] || fail "an unknown cap was accepted"
grep -q 'LOCKSTEP_MAX_CPU_ISA: unknown instruction set "AVX9". Expected one of' "$tmp/err" ||
  fail "unknown cap: $(cat "$tmp/err")"

LOCKSTEP_MAX_CPU_ISA=AVX2 "$lockstep" devices >"$tmp/out" 2>&1 || fail "devices under AVX2: $(cat "$tmp/out")"
grep -q '^oneDNN ISA: AVX2; cap: AVX2 (from LOCKSTEP_MAX_CPU_ISA)' "$tmp/out" ||
  fail "devices does not report the AVX2 cap: $(cat "$tmp/out")"
grep -q '^bfloat16 emulated in float32 kernels on this CPU (AVX2)' "$tmp/out" ||
  fail "devices does not say bfloat16 is emulated: $(cat "$tmp/out")"

ONEDNN_MAX_CPU_ISA=AVX2 "$lockstep" devices --json >"$tmp/json" 2>&1 || fail "devices --json"
grep -q '"onednn_isa": "AVX2"' "$tmp/json" || fail "devices --json: $(cat "$tmp/json")"
grep -q '"max_cpu_isa_from": "ONEDNN_MAX_CPU_ISA"' "$tmp/json" || fail "devices --json source"

LOCKSTEP_MAX_CPU_ISA=AVX2 "$lockstep" train --precision mixed_bfloat16 --epochs 1 \
  --steps-per-epoch 40 --verbose 2 --history "$tmp/h.json" >"$tmp/out" 2>&1
rc=$?
[[ $rc -eq 0 ]] || fail "mixed_bfloat16 under AVX2 exited $rc: $(tail -5 "$tmp/out")"
[[ $(grep -c '^bfloat16 emulated in float32 kernels on this CPU (AVX2)' "$tmp/out") -eq 1 ]] ||
  fail "train does not say once that bfloat16 is emulated: $(head -20 "$tmp/out")"
grep -q '^test loss: ' "$tmp/out" || fail "no test line: $(tail -5 "$tmp/out")"

if ((failures)); then
  echo "$failures check(s) failed"
  exit 1
fi
echo "all ISA cap checks passed"
