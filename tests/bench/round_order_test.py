#!/usr/bin/python3
"""bench/harness.py alternates the order of its configurations from round to round (so no row is
always the first after the floors, or always the last of a drifting round) and keeps each row's
co-runner runs right after its quiet run, whose rate they are reported as fractions of. A PyTorch
grid point that timed out is not run again in later rounds, and each round it is left out of says
so; a Lockstep row that timed out is run again."""
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.dont_write_bytecode = True


def timed_out_points_are_not_rerun(harness):
    configs = [{"id": "torch slow [co-runner]", "kind": "torch", "condition": "quiet"},
               {"id": "torch fast [co-runner]", "kind": "torch", "condition": "quiet"},
               {"id": "lockstep [co-runner]", "kind": "lockstep", "condition": "quiet"}]
    calls = []

    def fake_run(config, timeout):
        calls.append(config["id"])
        if "fast" in config["id"]:
            return {"seconds_per_epoch": [2.0, 1.0], "global_batch_size": 10,
                    "steps_per_epoch": 10, "peak_rss_kb": 1024}
        return {"error": "timed out after %.0f s (--run-timeout)" % timeout, "timed_out": True}

    runs = {c["id"]: [] for c in configs}
    meta = {"failures": []}
    timed_out = {}
    for r in range(3):
        harness.run_round(configs, r, 7.0, runs, meta, timed_out, run=fake_run)
    failures = []
    if calls.count("torch slow [co-runner]") != 1:
        failures.append("the timed-out PyTorch point ran %d times, expected once" %
                        calls.count("torch slow [co-runner]"))
    if calls.count("lockstep [co-runner]") != 3 or calls.count("torch fast [co-runner]") != 3:
        failures.append("expected the other rows in every round, got the calls %s" % calls)
    skipped = [f for f in meta["failures"] if f["id"] == "torch slow [co-runner]"]
    expected = ["timed out after 7 s (--run-timeout)"] + [
        "timed out after 7 s (--run-timeout) in round 0, not run again"] * 2
    if [f["error"] for f in skipped] != expected or [f["round"] for f in skipped] != [0, 1, 2]:
        failures.append("expected one timeout and two skips of the slow point, got %s" % skipped)
    if [s["samples_per_s"] for s in runs["torch fast [co-runner]"]] != [100.0] * 3:
        failures.append("the fast point's rates: %s" % runs["torch fast [co-runner]"])
    return failures


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
    failures += timed_out_points_are_not_rerun(harness)
    for f in failures:
        print(f, file=sys.stderr)
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
