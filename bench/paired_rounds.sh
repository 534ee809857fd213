#!/usr/bin/env bash
# Paired rounds of two `lockstep` binaries (or one binary against itself), alternated A B B A A B
# ... so that the machine's drift hits both alike and neither always runs first (the second run
# of a pair can gain or lose a few percent from the first, for as long as the VM's regime lasts):
# prints each round's median µs per step over the steady epochs (2..E) and the per-round ratio
# A/B; the median of those ratios is the figure (B faster when > 1). Extra arguments go to
# `lockstep train`. CO_RUNNER=1 runs every round beside one spinning process (`while :; do :;
# done`, the harness's co-runner), CO_RUNNER=pinned beside one pinned to core 0; it is stopped
# when the rounds end.
#   [CO_RUNNER=1|pinned] bench/paired_rounds.sh ROUNDS EPOCHS OLD_LOCKSTEP NEW_LOCKSTEP [train args...]
set -euo pipefail
(($# >= 4)) || { echo "usage: $0 ROUNDS EPOCHS BINARY_A BINARY_B [train args...]" >&2; exit 2; }
rounds=$1 epochs=$2 a=$3 b=$4
shift 4
co_runner=""
case "${CO_RUNNER:-}" in
  "" | 0) ;;
  pinned) taskset -c 0 sh -c 'while :; do :; done' & co_runner=$! ;;
  *) sh -c 'while :; do :; done' & co_runner=$! ;;
esac
[[ -z $co_runner ]] || echo "beside a spinning co-runner (pid $co_runner${CO_RUNNER:+, $CO_RUNNER})"
# The step time of one run: the median over the steady epochs (2..E) of the history's
# seconds_per_epoch / steps_per_epoch (the progress line rounds to whole ms above 1 ms/step).
history=$(mktemp)
trap '[[ -z $co_runner ]] || kill "$co_runner" 2>/dev/null; rm -f "$history"' EXIT
step_us() {
  "$1" train --epochs "$epochs" --verbose 0 --history "$history" "${@:2}" >/dev/null
  python3 -c 'import json, statistics, sys
h = json.load(open(sys.argv[1]))
print("%.1f" % (statistics.median(h["seconds_per_epoch"][1:]) / h["steps_per_epoch"] * 1e6))' "$history"
}
for ((r = 1; r <= rounds; ++r)); do
  if ((r % 2)); then
    ta=$(step_us "$a" "$@") tb=$(step_us "$b" "$@")
  else
    tb=$(step_us "$b" "$@") ta=$(step_us "$a" "$@")
  fi
  echo "$r $ta $tb"
done | awk '{r = $2 / $3; printf "round %d: A %s us/step, B %s us/step, A/B %.3f\n", $1, $2, $3, r; x[NR] = r}
  END {for (i = 1; i <= NR; ++i) for (j = i + 1; j <= NR; ++j) if (x[j] < x[i]) {t = x[i]; x[i] = x[j]; x[j] = t}
       m = (NR % 2) ? x[(NR + 1) / 2] : (x[NR / 2] + x[NR / 2 + 1]) / 2
       printf "median A/B over %d rounds: %.3f (B faster when > 1)\n", NR, m}'
