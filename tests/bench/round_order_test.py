#!/usr/bin/python3
"""bench/harness.py alternates the order of its configurations from round to round (so no row is
always the first after the floors, or always the last of a drifting round) and keeps each row's
co-runner runs right after its quiet run, whose rate they are reported as fractions of."""
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.dont_write_bytecode = True


def main():
    sys.path.insert(0, os.path.join(ROOT, "bench"))
    import harness
    listed = [("a", "quiet"), ("a", "co-runner"), ("a", "co-runner pinned"), ("b", "quiet"),
              ("c", "quiet"), ("c", "co-runner")]
    configs = [{"id": "%s [%s]" % (n, c), "condition": c} for n, c in listed]
    even = [c["id"] for c in harness.round_order(configs, 0)]
    odd = [c["id"] for c in harness.round_order(configs, 1)]
    expected_odd = ["c [quiet]", "c [co-runner]", "b [quiet]", "a [quiet]", "a [co-runner]",
                    "a [co-runner pinned]"]
    failures = []
    if even != [c["id"] for c in configs]:
        failures.append("round 0: expected the listed order, got %s" % even)
    if odd != expected_odd:
        failures.append("round 1: expected %s, got %s" % (expected_odd, odd))
    if [c["id"] for c in harness.round_order(configs, 2)] != even:
        failures.append("round 2: expected round 0's order again")
    for f in failures:
        print(f, file=sys.stderr)
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
