#!/usr/bin/python3
"""The floors bench/harness.py measures with ops_bench, and what bench/report.py makes of them —
the float32 floor beside the co-runner (measure_floor with a co-runner condition,
co_runner_checks) and the wide model's limits (measure_wide_limits):

* the harness starts the co-runner before the floor's copies and stops it after them, pinned to the
  first core for "co-runner pinned" and free for "co-runner", and asks ops_bench for the wall-clock
  variant of the floor (a CPU-time rate would not see the share the co-runner takes);
* the wide model's floor and the update stream run as one pinned copy per core each, one after the
  other, quiet, and their sums are reported;
* the report turns that floor into samples/s by the seed step's flop per example and holds it, and
  all-core Lockstep, against the best tuned PyTorch under the same co-runner — the expected values
  are worked out by hand below.

The ops_bench here is this file in "ops_bench" mode: it records what it was asked and which
co-runners it found among its siblings, and prints the JSON ops_bench would."""
import json
import os
import stat
import sys
import tempfile
import time
import types

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.dont_write_bytecode = True
sys.path.insert(0, os.path.join(ROOT, "bench"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import co_runners  # noqa: E402


def co_runner_affinities(parent):
    found = []
    for pid in co_runners.co_runner_pids(parent):
        try:
            found.append(sorted(os.sched_getaffinity(pid)))
        except OSError:
            continue
    return found


def fake_ops_bench(argv):
    # The harness starts the co-runner first, but taskset's exec of sh may not be done yet. A pinned
    # co-runner is `taskset -c N sh ...`: until its exec, its command line is taskset's, which
    # already names the loop, and its affinity is already set once taskset has run.
    # Quiet calls look once: the harness started no co-runner for them to wait for.
    deadline = time.monotonic() + (30 if os.environ["FAKE_EXPECT_CO_RUNNER"] == "1" else 0)
    co = co_runner_affinities(os.getppid())
    while not co and time.monotonic() < deadline:
        time.sleep(0.01)
        co = co_runner_affinities(os.getppid())
    pattern = [a for a in argv if a.startswith("--benchmark_filter=")][0].split("=", 1)[1]
    core = sorted(os.sched_getaffinity(0))
    record = {"pattern": pattern, "core": core, "co_runners": co}
    with open(os.path.join(os.environ["FAKE_OPS_BENCH_DIR"], "core%d.json" % core[0]), "w") as f:
        json.dump(record, f)
    name, counter = pattern.rstrip("$"), "GFLOP/s"
    if "UpdateStream" in pattern:
        counter = "GB/s"
    elif "|" in pattern:
        name = pattern.split("|")[0].rstrip("$")
    print(json.dumps({"benchmarks": [
        {"run_name": name, "aggregate_name": "median", counter: 50.0 + core[0]}]}))


def check_harness(failures):
    import harness
    with tempfile.TemporaryDirectory() as d:
        wrapper = os.path.join(d, "ops_bench")
        with open(wrapper, "w") as f:
            f.write("#!/bin/sh\nexec %s %s ops_bench \"$@\"\n" % (sys.executable,
                                                                   os.path.abspath(__file__)))
        os.chmod(wrapper, os.stat(wrapper).st_mode | stat.S_IXUSR)
        os.environ["FAKE_OPS_BENCH_DIR"] = d
        args = types.SimpleNamespace(ops_bench=wrapper, floor_repetitions=1)
        cores = sorted(os.sched_getaffinity(0))
        os.environ["FAKE_EXPECT_CO_RUNNER"] = "1"
        for condition in ("co-runner", "co-runner pinned"):
            f = harness.measure_floor(args, False, condition)
            want_total = sum(50.0 + c for c in cores)
            if not f or f["total_gflops"] != want_total:
                failures.append("%s: floor %s, expected %s GFLOP/s in all" % (condition, f,
                                                                              want_total))
            for c in cores:
                rec = json.load(open(os.path.join(d, "core%d.json" % c)))
                if rec["core"] != [c]:
                    failures.append("%s: a copy meant for core %d ran on %s" % (condition, c,
                                                                               rec["core"]))
                if rec["pattern"] != "BM_SeedStepOneDnnWallClock/0/real_time$":
                    failures.append("%s: asked ops_bench for %r, not the wall-clock floor" % (
                        condition, rec["pattern"]))
                want = [[cores[0]]] if condition == "co-runner pinned" else [cores]
                if rec["co_runners"] != want:
                    failures.append("%s: the copy on core %d saw co-runners %s, expected %s" % (
                        condition, c, rec["co_runners"], want))
            left = co_runner_affinities(os.getpid())
            if left:
                failures.append("%s: a co-runner is still running after the floor: %s" % (
                    condition, left))
        os.environ["FAKE_EXPECT_CO_RUNNER"] = "0"
        wide = harness.measure_wide_limits(args)
        want = sum(50.0 + c for c in cores)
        if not wide or wide["gflops"] != want or wide["stream_gbs"] != want:
            failures.append("wide limits %s, expected %s GFLOP/s and %s GB/s in all" % (
                wide, want, want))
        rec = json.load(open(os.path.join(d, "core%d.json" % cores[-1])))
        if rec["pattern"] != "BM_UpdateStream/2912261/real_time$" or rec["co_runners"]:
            failures.append("wide limits: the last copy asked %r beside %s" % (
                rec["pattern"], rec["co_runners"]))
        quiet = harness.measure_floor(args, False)
        for c in cores:
            rec = json.load(open(os.path.join(d, "core%d.json" % c)))
            if rec["co_runners"] or "WallClock" in rec["pattern"]:
                failures.append("quiet: the copy on core %d saw %s asking %r" % (
                    c, rec["co_runners"], rec["pattern"]))
        if not quiet:
            failures.append("quiet: no floor")


def check_report(failures):
    import report
    # Three rounds beside the unpinned co-runner: median 146 GFLOP/s. The seed step costs 409,088
    # flop an example (203,264 forward and weight gradients, 205,824 the rest of backward), so the
    # floor is 146e9 / 409,088 = 356,891 samples/s; over PyTorch's 169,939: 2.1001; Lockstep's
    # 257,024 is 72% of it. Pinned: 170e9 / 409,088 = 415,559; / 172,399 = 2.4104; 323,689 is 78%.
    meta = {"co_runner_floors": {"co-runner": [150.0, 140.0, 146.0], "co-runner pinned": [170.0]}}
    rows = []
    for cond, lockstep, torch in (("co-runner", 257024.0, 169939.0),
                                  ("co-runner pinned", 323689.0, 172399.0)):
        rows.append({"model": "mlp", "condition": cond, "system": "Lockstep", "defaults": True,
                     "precision": "float32", "name": "Lockstep defaults", "replicas": 2,
                     "samples_per_s": lockstep})
        rows.append({"model": "mlp", "condition": cond, "system": "PyTorch", "tuned": True,
                     "name": "PyTorch C++ tuned", "samples_per_s": torch})
    limit = [(t.split(":")[0], round(v, 4)) for t, v, want, *_ in report.co_runner_checks(rows, meta)
             if "floor" in t and want == 2.0]
    if limit != [("co-runner", 2.1001), ("co-runner pinned", 2.4104)]:
        failures.append("report: floor over PyTorch %s, expected co-runner 2.1001, pinned 2.4104"
                        % limit)
    table = "\n".join(report.co_runner_table(rows, meta))
    for part in ("co-runner 356891 samples/s, all-core Lockstep at 72% of it",
                 "co-runner pinned 415559 samples/s, all-core Lockstep at 78% of it"):
        if part not in table:
            failures.append("report: the co-runner table lacks %r:\n%s" % (part, table))
    header = "\n".join(report.header(dict(meta, date="d", machine="m", command="c", rounds=1,
                                           epochs=1, minutes=1.0, load_before="0", load_after="0",
                                           torch_env={})))
    if "beside the co-runner: the same copies timed by the wall clock" not in header or \
            "→ 356891 samples/s" not in header:
        failures.append("report: the header does not give the floor beside the co-runner:\n" +
                        header)
    # No floor measured beside the co-runner (an older results.json): no floor checks.
    if [t for t, *_ in report.co_runner_checks(rows, {}) if "floor" in t]:
        failures.append("report: floor checks without a floor beside the co-runner")


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "ops_bench":
        fake_ops_bench(sys.argv[2:])
        return
    failures = []
    check_harness(failures)
    check_report(failures)
    for f in failures:
        print("FAIL:", f)
    if failures:
        sys.exit(1)
    print("ok")


if __name__ == "__main__":
    main()
