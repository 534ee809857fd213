#!/usr/bin/python3
"""bench/report.py's limits for the wide model, held against the best tuned PyTorch: oneDNN's floor
on its shapes, every flop at the FMA peak, and that peak followed by the update's compulsory bytes
at the measured bandwidth. The expected values are worked out by hand here:

* the wide step costs 3 · 2 · (784·2048 + 2048·2048 + 2048·10) − 2 · 784·2048 = 31,711,232 flop an
  example (forward, weight gradients, input gradients but the first layer's);
* a floor of 220 GFLOP/s is 220e9 / 31,711,232 = 6,937.6 samples/s, over PyTorch's 4,287 1.6183,
  and Lockstep's 5,488 is 79% of it;
* an FMA peak of 233 GFLOP/s is 7,347.6 samples/s, 1.7139x PyTorch;
* the model has 784·2048 + 2048 + 2048·2048 + 2048 + 2048·10 + 10 = 5,824,522 weights; 24 bytes
  each at 34 GB/s take 4.1114 ms; a global batch of 256 takes 256 / 7,347.6 = 34.8415 ms at the
  peak, 38.9529 ms with that update after it: 6,572.0 samples/s, 1.5330x."""
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.dont_write_bytecode = True
sys.path.insert(0, os.path.join(ROOT, "bench"))
import report  # noqa: E402


def main():
    failures = []
    rows = [{"model": "wide", "condition": "quiet", "system": "Lockstep", "precision": "float32",
             "name": "Lockstep defaults", "replicas": 2, "mpi": False, "baseline": False,
             "profiler": False, "samples_per_s": 5488.0, "global_batch": 256},
            {"model": "wide", "condition": "quiet", "system": "PyTorch", "tuned": True,
             "name": "PyTorch tuned", "samples_per_s": 4287.0}]
    meta = {"wide_floors": [230.0, 220.0, 210.0], "update_streams": [34.0, 30.0, 36.0],
            "fma_peaks": [233.0, 240.0, 225.0]}
    checks = report.wide_limit_checks(rows, meta)
    got = [(round(v, 4), want) for _, v, want in checks]
    want = [(1.6183, 1.5), (1.7139, 1.5), (1.533, 1.5)]
    if got != want:
        failures.append("limits %s, expected %s" % (got, want))
    if not checks or "all-core Lockstep at 79% of it" not in checks[0][0]:
        failures.append("the floor's check does not say Lockstep is at 79%% of it: %s" % checks)
    # Without a peak or a bandwidth, only the floor; without a floor (an older results.json),
    # nothing.
    if len(report.wide_limit_checks(rows, {"wide_floors": [220.0], "update_streams": [34.0]})) != 1:
        failures.append("a floor without a peak should give the floor's check alone")
    if report.wide_limit_checks(rows, {}):
        failures.append("limits without a wide floor")
    for f in failures:
        print("FAIL:", f)
    if failures:
        sys.exit(1)
    print("ok")


if __name__ == "__main__":
    main()
