#!/usr/bin/python3
"""Lockstep vs PyTorch vs the oneDNN floor, interleaved in one run (see scripts/bench).

Every configuration runs once per round, in the same order each round (A B C ... A B C ...), so
slow drifts of a shared machine hit all of them alike; medians over rounds are reported.
Writes results.json, table.md and samples_per_s.svg into --out.
"""
import argparse
import datetime
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
import plot  # noqa: E402

# flop per example of one training step (forward + backward; the first layer's dx is skipped).
FLOP_PER_EXAMPLE = {
    "mlp": 203264 + 205824,
    "wide": 3 * 2 * (784 * 2048 + 2048 * 2048 + 2048 * 10) - 2 * 784 * 2048,
    "conv": 2 * 2 * 26 * 26 * 32 * 9 + 3 * 2 * 13 * 13 * 32 * 10,
}
# Gradient bytes of the seed model (784-128-10: 101,770 float32 parameters) and the bandwidth the
# all-reduce floor assumes: MACHINE.md's single-core memory copy. Open MPI on one host moves the
# message through shared memory (a copy per byte sent), each rank on its own core; two ranks copying
# at once share the 24 GB/s all-core copy bandwidth, i.e. about the same 12-13 GB/s each.
SEED_GRADIENT_BYTES = 101770 * 4
COPY_BANDWIDTH = 13e9
MPI_ENV = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}
# PyTorch set up at its best here: AVX-512 OpenBLAS kernels (Debian's build picks SSE3 otherwise).
TORCH_ENV = {"OPENBLAS_CORETYPE": "SkylakeX"}


def cores():
    return len(os.sched_getaffinity(0))


def lockstep_config(args, model, replicas, precision="float32", steps=0, epochs=None, spe=None,
                    input_pipeline=None):
    name = "Lockstep %d replica%s" % (replicas, "s" if replicas > 1 else "")
    if precision != "float32":
        name += " " + precision
    if spe:
        name += " spe=%d" % spe
    if input_pipeline:
        name += " %s input" % input_pipeline
    cmd = [args.lockstep, "train", "--model", model, "--replicas", str(replicas), "--verbose", "0",
           "--epochs", str(epochs or args.epochs), "--batch-size", "128"]
    if precision != "float32":
        cmd += ["--precision", precision]
    if steps:
        cmd += ["--steps-per-epoch", str(steps)]
    if spe:
        cmd += ["--steps-per-execution", str(spe)]
    if input_pipeline:
        cmd += ["--input-pipeline", input_pipeline]
    return {"name": name, "system": "Lockstep", "model": model, "replicas": replicas,
            "global_batch": 128 * replicas, "cmd": cmd, "env": {}, "kind": "lockstep"}


def lockstep_mpi_config(args, model, procs, steps=0, epochs=None):
    """`procs` MPI processes x 1 replica each, same per-replica batch (128) as lockstep_config."""
    cmd = ["mpirun", "--oversubscribe", "-np", str(procs), "--bind-to", "none", args.lockstep,
           "train", "--model", model, "--replicas", "1", "--verbose", "0", "--epochs",
           str(epochs or args.epochs), "--batch-size", "128"]
    if steps:
        cmd += ["--steps-per-epoch", str(steps)]
    return {"name": "Lockstep %d procs x 1 replica (MPI)" % procs, "system": "Lockstep",
            "model": model, "replicas": procs, "workers": procs, "global_batch": 128 * procs,
            "cmd": cmd, "env": dict(MPI_ENV), "kind": "lockstep"}


def torch_config(args, model, mode, threads, blas_threads, global_batch, steps=0, epochs=None):
    if mode == "ddp":
        name = "PyTorch DDP gloo 2 proc x 1 thread"
    elif mode == "dataloader":
        name = "PyTorch DataLoader %d thread%s" % (blas_threads, "s" if blas_threads > 1 else "")
    else:
        name = "PyTorch %d thread%s" % (blas_threads, "s" if blas_threads > 1 else "")
    name += " batch %d" % global_batch
    cmd = ["/usr/bin/python3", os.path.join(HERE, "torch_bench.py"), "--mode", mode, "--model",
           model, "--threads", str(threads), "--global-batch", str(global_batch), "--epochs",
           str(epochs or args.epochs)]
    if steps:
        cmd += ["--steps-per-epoch", str(steps)]
    env = dict(TORCH_ENV, OPENBLAS_NUM_THREADS=str(blas_threads), OMP_NUM_THREADS=str(threads))
    return {"name": name, "system": "PyTorch", "model": model,
            "replicas": 2 if mode == "ddp" else 1, "threads": blas_threads * (2 if mode == "ddp"
                                                                            else 1),
            "global_batch": global_batch, "cmd": cmd, "env": env, "kind": "torch", "mode": mode}


def lockstep_accepts(args, flag_args):
    """Whether the CLI accepts an option (e.g. --precision mixed_bfloat16) in a one-step run."""
    with tempfile.TemporaryDirectory() as d:
        cmd = [args.lockstep, "train", "--epochs", "1", "--steps-per-epoch", "1", "--verbose", "0",
               "--history", os.path.join(d, "h.json")] + flag_args
        return subprocess.run(cmd, capture_output=True).returncode == 0


def configs_for(args, model, steps, epochs):
    n = cores()
    out = [lockstep_config(args, model, 1, steps=steps, epochs=epochs),
           lockstep_config(args, model, n, steps=steps, epochs=epochs)]
    if model in ("mlp", "wide") and args.bf16:
        out += [lockstep_config(args, model, 1, "mixed_bfloat16", steps, epochs),
                lockstep_config(args, model, n, "mixed_bfloat16", steps, epochs)]
    if model == "mlp":
        out += [lockstep_config(args, model, 1, steps=steps, epochs=epochs, spe=8),
                lockstep_config(args, model, n, steps=steps, epochs=epochs, spe=8)]
        # All cores default to one input pipeline per replica; the global pipeline (one host
        # thread, prefetched) for comparison.
        out += [lockstep_config(args, model, n, steps=steps, epochs=epochs,
                                input_pipeline="global")]
        if shutil.which("mpirun"):
            # Issue 6: 2 MPI processes x 1 replica against 1 process x 2 replicas (global batch 256).
            if n != 2:
                out += [lockstep_config(args, model, 2, steps=steps, epochs=epochs)]
            out += [lockstep_mpi_config(args, model, 2, steps, epochs)]
    for gb in (128, 128 * n):
        out += [torch_config(args, model, "fast", 1, 1, gb, steps, epochs),
                torch_config(args, model, "fast", 1, n, gb, steps, epochs)]
    out += [torch_config(args, model, "ddp", 1, 1, 128 * n, steps, epochs),
            torch_config(args, model, "dataloader", 1, n, 128 * n, steps, epochs)]
    for c in out:
        c["name"] = "%s: %s" % (model, c["name"])
    return out


def run_one(config):
    """Runs one configuration; returns its result with the peak RSS of the process tree."""
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "out.json")
        cmd = config["cmd"] + (["--history", out] if config["kind"] == "lockstep" else ["--out",
                                                                                         out])
        env = dict(os.environ, **config["env"])
        proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        _, status, usage = os.wait4(proc.pid, 0)
        if status != 0:
            err = proc.stderr.read().decode(errors="replace").strip().splitlines()
            return {"error": err[-1] if err else "exit status %d" % status}
        result = json.load(open(out))
    result["peak_rss_kb"] = max(result.get("peak_rss_kb", 0), usage.ru_maxrss)
    return result


def summarise(config, result):
    times = result["seconds_per_epoch"]
    steady = times[1:] if len(times) > 1 else times
    epoch = statistics.median(steady)
    examples = result["global_batch_size"] * result["steps_per_epoch"]
    out = {"first_epoch_s": times[0], "epoch_s": epoch, "samples_per_s": examples / epoch,
           "peak_rss_mb": result["peak_rss_kb"] / 1024.0, "examples_per_epoch": examples}
    # Gradient all-reduce (lockstep train --history): across workers, or local with one worker.
    for k in ("allreduce_seconds_per_step", "allreduce_bytes_per_step", "workers",
              "local_replicas"):
        if k in result:
            out[k] = result[k]
    return out


def measure_floor(args):
    """oneDNN fp32 rate on the seed step's five matmuls: one pinned copy per core, at once."""
    if not os.path.exists(args.ops_bench):
        return None
    procs = []
    for core in sorted(os.sched_getaffinity(0)):
        cmd = ["taskset", "-c", str(core), args.ops_bench, "--benchmark_filter=BM_SeedStepLinear/0",
               "--benchmark_format=json", "--benchmark_repetitions=5",
               "--benchmark_report_aggregates_only=true"]
        procs.append(subprocess.Popen(cmd, env=dict(os.environ, OMP_NUM_THREADS="1"),
                                      stdout=subprocess.PIPE, stderr=subprocess.DEVNULL))
    rates = []
    for p in procs:
        data = json.loads(p.communicate()[0])
        for b in data["benchmarks"]:
            if b.get("aggregate_name") == "median":
                rates.append(b["GFLOP/s"])
    return {"per_core_gflops": rates, "total_gflops": sum(rates)}


def loadavg():
    return "%.2f %.2f %.2f" % os.getloadavg()


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--lockstep", default=os.path.join(ROOT, "build/release/apps/lockstep"))
    p.add_argument("--ops-bench", default=os.path.join(ROOT, "build/release/bench/ops_bench"))
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--epochs", type=int, default=4, help="epochs per run; the first is reported apart")
    p.add_argument("--models", default="mlp,wide,conv")
    p.add_argument("--out", default=os.path.join(ROOT, "build/bench"))
    p.add_argument("--only", default="", help="regex on configuration names")
    p.add_argument("--render", default="", help="re-render table.md and the SVG from a results.json")
    args = p.parse_args()
    os.makedirs(args.out, exist_ok=True)
    if args.render:
        data = json.load(open(args.render))
        rows = table_rows(data["configs"], data["runs"], data["meta"])
        md = render(data["meta"], rows)
        open(os.path.join(args.out, "table.md"), "w").write(md)
        plot.write_svg(rows, os.path.join(args.out, "samples_per_s.svg"))
        print(md)
        return
    args.bf16 = lockstep_accepts(args, ["--precision", "mixed_bfloat16"])
    configs = []
    for model in args.models.split(","):
        if model == "mlp":
            configs += configs_for(args, model, 0, None)
        elif lockstep_accepts(args, ["--model", model]):
            configs += configs_for(args, model, {"wide": 40, "conv": 60}[model], 3)
        else:
            print("skipping model %s: lockstep train rejects it" % model, file=sys.stderr)
    if args.only:
        configs = [c for c in configs if re.search(args.only, c["name"])]
    meta = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "machine": machine(), "command": " ".join(sys.argv), "cores": cores(),
            "bf16": args.bf16, "torch_env": TORCH_ENV, "load_before": loadavg()}
    runs = {c["name"]: [] for c in configs}
    for r in range(args.rounds):
        meta["floor_round%d" % r] = measure_floor(args)
        for c in configs:
            start = time.time()
            result = run_one(c)
            if "error" in result:
                print("[round %d] %s: FAILED %s" % (r, c["name"], result["error"]), file=sys.stderr)
                continue
            s = summarise(c, result)
            s["load"] = loadavg()
            runs[c["name"]].append(s)
            print("[round %d] %-55s %9.0f samples/s  epoch %.3fs  rss %4.0f MB  load %s (%.0fs)" % (
                r, c["name"], s["samples_per_s"], s["epoch_s"], s["peak_rss_mb"], s["load"],
                time.time() - start), file=sys.stderr, flush=True)
    meta["load_after"] = loadavg()
    floors = [meta[k]["total_gflops"] for k in meta if k.startswith("floor_round") and meta[k]]
    meta["floor_gflops"] = statistics.median(floors) if floors else None
    rows = table_rows(configs, runs, meta)
    json.dump({"meta": meta, "configs": configs, "runs": runs, "rows": rows},
              open(os.path.join(args.out, "results.json"), "w"), indent=1)
    md = render(meta, rows)
    open(os.path.join(args.out, "table.md"), "w").write(md)
    plot.write_svg(rows, os.path.join(args.out, "samples_per_s.svg"))
    print(md)


def machine():
    model = ""
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return "%s, %d cores, %.0f GiB, %s" % (model, cores(), mem, platform.platform())


def table_rows(configs, runs, meta):
    rows = []
    for c in configs:
        rs = runs[c["name"]]
        if not rs:
            continue
        row = {"name": c["name"], "system": c["system"], "model": c["model"],
               "replicas": c["replicas"], "global_batch": c["global_batch"], "rounds": len(rs)}
        for k in ("samples_per_s", "epoch_s", "first_epoch_s", "peak_rss_mb"):
            row[k] = statistics.median(r[k] for r in rs)
        if all("allreduce_seconds_per_step" in r for r in rs):
            row["allreduce_seconds_per_step"] = statistics.median(
                r["allreduce_seconds_per_step"] for r in rs)
            for k in ("allreduce_bytes_per_step", "workers", "local_replicas"):
                row[k] = rs[-1][k]
        # The least disturbed round: on a shared machine the closest to the machine's own speed.
        row["best_samples_per_s"] = max(r["samples_per_s"] for r in rs)
        if meta["floor_gflops"]:
            # The floor runs the step's matmuls at the measured oneDNN rate on all cores.
            flop_rate = FLOP_PER_EXAMPLE[c["model"]] * row["samples_per_s"] / 1e9
            row["floor_fraction"] = flop_rate / meta["floor_gflops"]
        rows.append(row)
    return rows


def render(meta, rows):
    out = ["Date: %s  " % meta["date"], "Machine: %s  " % meta["machine"],
           "Command: `%s`  " % meta["command"],
           "Load average before / after: %s / %s  " % (meta["load_before"], meta["load_after"]),
           "PyTorch environment: %s, torch.set_num_threads(1), OpenBLAS threads as listed  " %
           ", ".join("%s=%s" % kv for kv in meta["torch_env"].items())]
    if meta["floor_gflops"]:
        mlp_floor = FLOP_PER_EXAMPLE["mlp"] * 60000 / (meta["floor_gflops"] * 1e9)
        out.append("Floor: oneDNN fp32 on the seed step's five matmuls, one pinned copy per core "
                   "at once: %.0f GFLOP/s in all → fastest seed-model epoch %.0f ms "
                   "(%.0f samples/s)  " % (meta["floor_gflops"], mlp_floor * 1e3, 60000 / mlp_floor))
    out += ["", "| model | configuration | global batch | samples/s (steady, median) | best round | "
            "epoch s | first epoch s | peak RSS MB | of floor |",
            "|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        name = r["name"].split(": ", 1)[1]
        out.append("| %s | %s | %d | %.0f | %.0f | %.3f | %.3f | %.0f | %s |" % (
            r["model"], name, r["global_batch"], r["samples_per_s"],
            r.get("best_samples_per_s", r["samples_per_s"]), r["epoch_s"],
            r["first_epoch_s"], r["peak_rss_mb"],
            "%.0f%%" % (100 * r["floor_fraction"]) if "floor_fraction" in r else "—"))
    out += ["", allreduce_table(rows)]
    out += ["", "Acceptance on the medians:", "", acceptance(rows), "",
            "Acceptance on the best round of each configuration:", "",
            acceptance([best_of(r) for r in rows])]
    return "\n".join(out) + "\n"


def ring_floor_seconds(n, nbytes):
    """Ring all-reduce floor: every participant sends (and receives) 2(n-1)/n of the buffer."""
    return 2.0 * (n - 1) / n * nbytes / COPY_BANDWIDTH


def allreduce_table(rows):
    rows = [r for r in rows if r.get("allreduce_seconds_per_step") and r.get("replicas", 1) > 1]
    if not rows:
        return "(no gradient all-reduce timings: lockstep train --history lacks them)"
    out = ["Gradient all-reduce per step (median over rounds; wall time on local replica 0, waiting "
           "for the slowest participant included) against the ring floor 2(n-1)/n · bytes / "
           "%.0f GB/s (MACHINE.md single-core copy; on one host MPI's transport is a copy through "
           "shared memory). With one worker the time is the local reduce-scatter, whose own floor "
           "is half the ring's. Seed-model gradients: %d bytes.  " % (COPY_BANDWIDTH / 1e9,
                                                                      SEED_GRADIENT_BYTES), "",
           "| model | configuration | phase | n | bytes/step | all-reduce µs/step | ring floor µs "
           "| floor / measured |", "|---|---|---|---:|---:|---:|---:|---:|"]
    for r in rows:
        workers = r.get("workers", 1)
        n = workers if workers > 1 else r.get("local_replicas", r["replicas"])
        floor = ring_floor_seconds(n, r["allreduce_bytes_per_step"])
        t = r["allreduce_seconds_per_step"]
        out.append("| %s | %s | %s | %d | %d | %.1f | %.1f | %.0f%% |" % (
            r["model"], r["name"].split(": ", 1)[1],
            "cross-worker (MPI)" if workers > 1 else "local reduce-scatter", n,
            r["allreduce_bytes_per_step"], t * 1e6, floor * 1e6, 100 * floor / t))
    return "\n".join(out)


def best_of(row):
    best = dict(row, samples_per_s=row.get("best_samples_per_s", row["samples_per_s"]))
    if "floor_fraction" in row:
        best["floor_fraction"] = row["floor_fraction"] * best["samples_per_s"] / row["samples_per_s"]
    return best


def acceptance(rows):
    def pick(pred):
        return [r for r in rows if r["model"] == "mlp" and pred(r)]

    # Lockstep's all-core configurations in float32 (with and without steps_per_execution, a
    # standard Keras knob); the fastest is compared, as PyTorch's fastest configuration is.
    ls_all = pick(lambda r: r["system"] == "Lockstep" and r["replicas"] > 1 and
                  "bfloat16" not in r["name"] and "MPI" not in r["name"])
    ls_one = pick(lambda r: r["system"] == "Lockstep" and r["replicas"] == 1 and
                  "bfloat16" not in r["name"])
    torch_rows = pick(lambda r: r["system"] == "PyTorch")
    ddp = pick(lambda r: "DDP" in r["name"])
    t1 = pick(lambda r: r["system"] == "PyTorch" and " 1 thread " in r["name"] and
              "DataLoader" not in r["name"])
    # Issue 6: the same global batch (256) over 2 MPI processes x 1 replica vs 1 process x 2.
    mpi = pick(lambda r: "MPI" in r["name"] and r["replicas"] == 2)
    one_by_two = pick(lambda r: r["system"] == "Lockstep" and r["replicas"] == 2 and
                      "MPI" not in r["name"] and "bfloat16" not in r["name"] and
                      "spe=" not in r["name"] and " input" not in r["name"])
    mpi_checks = []
    if mpi and one_by_two:
        mpi_checks.append(("MPI 2x1 ≥ 90% of 1x2 (2 procs x 1 replica / 1 proc x 2 replicas)",
                           mpi[0]["samples_per_s"] / one_by_two[0]["samples_per_s"], 0.90))
    if not (ls_all and ls_one and torch_rows and ddp and t1):
        if not mpi_checks:
            return "(acceptance: incomplete set of runs)"
        return "(acceptance: incomplete set of runs; only the MPI check)\n\n" + checks_table(
            mpi_checks)
    a = max(ls_all, key=lambda r: r["samples_per_s"])
    o = max(ls_one, key=lambda r: r["samples_per_s"])
    best = max(torch_rows, key=lambda r: r["samples_per_s"])
    # "1 thread, same batch" (issue 8): PyTorch single-threaded at the 1-replica run's batch.
    same = [r for r in t1 if r["global_batch"] == o["global_batch"]] or t1
    best_t1 = max(same, key=lambda r: r["samples_per_s"])
    # Replica scaling compares runs that differ only in the replica count.
    def settings(r):
        return r["name"].split("replica")[-1].lstrip("s")
    partner = [y for y in ls_one if settings(y) == settings(a)]
    if partner:
        scaling = a["samples_per_s"] / partner[0]["samples_per_s"]
        scaling_name = settings(a).strip() or "defaults"
    else:
        scaling, scaling_name = a["samples_per_s"] / o["samples_per_s"], "unpaired"
    checks = [
        ("all-core Lockstep (%s) ≥ 2.5x PyTorch's best (%s)" % (
            a["name"].split(": ")[-1], best["name"].split(": ")[1]),
         a["samples_per_s"] / best["samples_per_s"], 2.5),
        ("all-core Lockstep ≥ 4x PyTorch DDP", a["samples_per_s"] / ddp[0]["samples_per_s"], 4.0),
        ("all-core Lockstep ≥ 65% of the floor", a.get("floor_fraction", 0), 0.65),
        ("1 replica ≥ 2x single-thread PyTorch (%s)" % best_t1["name"].split(": ")[1],
         o["samples_per_s"] / best_t1["samples_per_s"], 2.0),
        ("all-core ≥ 1.85x 1 replica, same settings (%s)" % scaling_name, scaling, 1.85),
        ("peak RSS ≤ PyTorch's (measured: smallest PyTorch RSS / all-core Lockstep RSS)",
         min(r["peak_rss_mb"] for r in torch_rows) / a["peak_rss_mb"], 1.0),
    ]
    return checks_table(checks + mpi_checks)


def checks_table(checks):
    lines = ["| acceptance (seed model) | measured | target | |", "|---|---:|---:|---|"]
    for text, value, target in checks:
        lines.append("| %s | %.2f | %.2f | %s |" % (text, value, target,
                                                   "pass" if value >= target else "FAIL"))
    return "\n".join(lines)


if __name__ == "__main__":
    main()
