#!/usr/bin/env bash
# run_under_cap.sh CAP PROBE TEST_BINARY [ARGS...]
# Runs a test binary with LOCKSTEP_MAX_CPU_ISA=CAP (ONEDNN_MAX_CPU_ISA cleared, so Lockstep alone
# hands the cap to oneDNN), after checking with PROBE that the cap took: oneDNN's effective ISA is
# CAP, Lockstep's loops are the build CAP allows, and bfloat16 kernels count only from AVX512_CORE_BF16.
# A cap above this CPU's ISA exits 77 (CTest's SKIP_RETURN_CODE): that path is the host's own,
# which the unit label runs.
set -euo pipefail
cap=$1 probe=$2
shift 2
order=(SSE41 AVX AVX2 AVX2_VNNI AVX512_CORE AVX512_CORE_VNNI AVX512_CORE_BF16 AVX512_CORE_AMX)
rank() {
  local i
  for i in "${!order[@]}"; do [[ ${order[$i]} == "$1" ]] && { echo "$i"; return; }; done
  echo "run_under_cap.sh: unknown cap $1" >&2
  exit 2
}
host=$(env -u LOCKSTEP_MAX_CPU_ISA -u ONEDNN_MAX_CPU_ISA "$probe" | sed -n 's/^host=//p')
if [[ $host == ASIMD ]]; then
  echo "this CPU is aarch64 ($host): the x86-64 cap $cap does not apply (its path is the host's own)"
  exit 77
fi
if (($(rank "$cap") > $(rank "$host"))); then
  echo "this CPU's ISA is $host; the cap $cap is above it (its path is the host's own)"
  exit 77
fi
report=$(env -u ONEDNN_MAX_CPU_ISA LOCKSTEP_MAX_CPU_ISA="$cap" "$probe")
echo "$report"
value() { sed -n "s/^$1=//p" <<<"$report"; }
fail() {
  echo "run_under_cap.sh: under LOCKSTEP_MAX_CPU_ISA=$cap: $*" >&2
  exit 1
}
[[ $(value onednn) == "$cap" ]] || fail "oneDNN dispatches to $(value onednn), not $cap"
case $cap in
  SSE41 | AVX) loops=x86-64 ;;
  AVX2 | AVX2_VNNI) loops=x86-64-v3 ;;
  *) loops=x86-64-v4 ;;
esac
[[ $(value loops) == "$loops" ]] || fail "Lockstep's loops are the $(value loops) build, not $loops"
if (($(rank "$cap") >= $(rank AVX512_CORE_BF16))); then bf16=native; else bf16=emulated; fi
[[ $(value bf16) == "$bf16" ]] || fail "bfloat16 math is $(value bf16), expected $bf16"
exec env -u ONEDNN_MAX_CPU_ISA LOCKSTEP_MAX_CPU_ISA="$cap" "$@"
