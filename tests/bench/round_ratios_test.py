#!/usr/bin/python3
"""bench/report.py's targets read two ways: the ratio of two rows' medians, and the median of their
per-round ratios (the speed issue's own measure; a round's two runs are minutes apart, so the VM's
slow and fast hours cancel in each ratio). The expected values are worked out by hand here:

* Lockstep ran 500, 400 and 450 samples/s in rounds 0, 1 and 2, PyTorch 200, 200 and 150: the
  ratio of the medians is 450 / 200 = 2.25 (FAIL against 2.5), the per-round ratios 2.5, 2.0 and
  3.0 have the median 2.5 (pass);
* beside the co-runner Lockstep ran 300, 320 and 200: of its quiet rate 0.6, 0.8 and 0.444 by
  round (median 0.6) against 300 / 450 = 0.667 by the medians;
* a float32 floor of 0.2454528, 0.204544 and 0.2454528 GFLOP/s (the seed step's 409,088 flop an
  example: 600, 500 and 600 samples/s) holds 500, 400 and 450 at 0.8333, 0.8 and 0.75 (median
  0.8), and the median floor, 600 samples/s, holds the median 450 at 0.75;
* a round that one row did not run counts in neither measure's per-round half, and a floor list
  shorter than the rounds gives no per-round value at all."""
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.dont_write_bytecode = True
sys.path.insert(0, os.path.join(ROOT, "bench"))
import report  # noqa: E402


def lockstep(condition, rates):
    return {"model": "mlp", "condition": condition, "system": "Lockstep", "defaults": True,
            "precision": "float32", "name": "Lockstep defaults", "replicas": 2, "mpi": False,
            "baseline": False, "profiler": False, "global_batch": 256, "peak_rss_mb": 100.0,
            "samples_per_s": sorted(rates)[len(rates) // 2],
            "by_round": dict(enumerate(rates))}


def torch(condition, rates):
    return {"model": "mlp", "condition": condition, "system": "PyTorch", "tuned": True,
            "group": "PyTorch C++", "name": "PyTorch C++ tuned", "peak_rss_mb": 300.0,
            "samples_per_s": sorted(rates)[len(rates) // 2], "by_round": dict(enumerate(rates))}


def find(checks, start):
    hits = [c for c in checks if c[0].startswith(start)]
    return hits[0] if len(hits) == 1 else None


def main():
    failures = []
    quiet, peer = lockstep("quiet", [500.0, 400.0, 450.0]), torch("quiet", [200.0, 200.0, 150.0])
    meta = {"rounds": 3, "floors": {"float32": [0.2454528, 0.204544, 0.2454528]}}
    for r in (quiet, peer):
        r["floor_fraction"] = report.floor_fraction(r, meta, r["samples_per_s"])
    checks = report.speed_checks([quiet, peer], meta)
    c = find(checks, "mlp: all-core float32 (Lockstep defaults) ≥ 2.5x")
    if not c or (round(c[1], 4), round(c[3], 4)) != (2.25, 2.5):
        failures.append("2.5x: %s, expected 2.25 by the medians and 2.5 by the rounds" % (c,))
    c = find(checks, "mlp: all-core float32 ≥ 75%")
    if not c or (round(c[1], 4), round(c[3], 4)) != (0.75, 0.8):
        failures.append("floor share: %s, expected 0.75 and 0.8" % (c,))
    table = "\n".join(report.checks_table("t", checks))
    row = [line for line in table.splitlines() if "≥ 2.5x" in line]
    if len(row) != 1 or "| 2.25 | FAIL | 2.50 | pass | 2.50 |" not in row[0]:
        failures.append("the table's 2.5x row should fail by the medians and pass by the rounds: "
                        "%s" % row)

    # Beside a co-runner: of its quiet rate by round, from the harness's configurations and runs
    # (rows_of).
    configs, runs = [], {}
    for condition, rates in (("quiet", [500.0, 400.0, 450.0]),
                             ("co-runner", [300.0, 320.0, 200.0])):
        cid = "Lockstep defaults [%s]" % condition
        configs.append({"id": cid, "name": "Lockstep defaults", "system": "Lockstep",
                        "model": "mlp", "condition": condition, "replicas": 2,
                        "precision": "float32", "kind": "lockstep", "defaults": True,
                        "mpi": False, "baseline": False, "profiler": False})
        runs[cid] = [{"round": r, "samples_per_s": v, "global_batch": 256, "epoch_s": 1.0,
                      "first_epoch_s": 1.0, "peak_rss_mb": 100.0} for r, v in enumerate(rates)]
    c = find(report.co_runner_checks(report.rows_of(configs, runs, meta), meta),
             "co-runner: all-core keeps ≥ 60%")
    if not c or (round(c[1], 4), round(c[3], 4)) != (0.6667, 0.6):
        failures.append("co-runner share: %s, expected 0.6667 and 0.6" % (c,))

    # Rounds one row lacks, and floors that cannot be placed in rounds.
    partial = dict(peer, by_round={0: 200.0, 2: 150.0})
    if round(report.round_ratio(quiet, partial), 4) != 2.75:
        failures.append("rounds 0 and 2 only: %s, expected (2.5 + 3.0) / 2 = 2.75"
                        % report.round_ratio(quiet, partial))
    if report.round_ratio(quiet, {"by_round": {}}) is not None:
        failures.append("no common round should give no per-round ratio")
    if report.rates_by_round({"rounds": 3}, [200.0, 210.0], 409088):
        failures.append("two floors for three rounds should give no floor by round")
    for f in failures:
        print("FAIL:", f)
    if failures:
        sys.exit(1)
    print("ok")


if __name__ == "__main__":
    main()
