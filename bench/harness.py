#!/usr/bin/python3
"""Lockstep vs PyTorch (tuned, Python and C++) vs the oneDNN floors, interleaved in one run.

Every configuration runs once per round, the order reversed every other round (A B C, C B A, ...),
so slow drifts of a shared machine hit all of them alike and none always runs first or last after
a floor; medians over rounds are reported. Each
PyTorch peer is tuned: every round runs its grid (intra-op threads x OpenBLAS threads x global
batch) and keeps the best point of that round. The float32 and bfloat16 floors (oneDNN's own
matmul primitives on the seed step's shapes, one pinned copy per core at once) are measured at the
start of every round. With --co-runner, the contention-sensitive rows also run beside one spinning
process (`sh -c 'while :; do :; done'`), unpinned and pinned to one core, right after their quiet
run, and the float32 floor is measured beside each (timed by the wall clock): the limit of a
two-thread run there. Writes results.json, table.md and samples_per_s.svg into --out. See docs/performance.md.
"""
import argparse
import datetime
import json
import os
import platform
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
sys.dont_write_bytecode = True  # no __pycache__ in the source tree
import peers  # noqa: E402
import plot  # noqa: E402
import report  # noqa: E402

SPIN = ["sh", "-c", "while :; do :; done"]
CO_RUNNER_CONDITIONS = report.CO_RUNNERS

# OpenBLAS core types PyTorch's BLAS may be forced to, with the CPU flags each one's kernels need.
# Debian's OpenBLAS 0.3.21 detects some CPUs of this machine class wrongly (the Zen 5 as Prescott:
# SSE3 kernels), and a core type the CPU cannot execute dies with SIGILL, so the harness tries the
# candidates this CPU can run (and that the ISA cap allows) and keeps the fastest.
CORETYPES = [("", ()), ("Haswell", ("avx2", "fma")), ("Zen", ("avx2", "fma")),
             ("SkylakeX", ("avx512f", "avx512bw", "avx512vl", "avx512dq")),
             ("Cooperlake", ("avx512f", "avx512bw", "avx512vl", "avx512dq", "avx512_bf16"))]
# One single-threaded torch matmul loop on the seed model's first layer shape, in GFLOP/s.
CORETYPE_PROBE = """
import time, torch
torch.set_num_threads(1)
a, b = torch.randn(256, 784), torch.randn(784, 128)
for _ in range(20): a @ b
n, t0 = 0, time.perf_counter()
while time.perf_counter() - t0 < 0.4:
    a @ b; n += 1
print(2 * 256 * 784 * 128 * n / (time.perf_counter() - t0) / 1e9)
"""


def cores():
    return len(os.sched_getaffinity(0))


def lockstep_accepts(args, flag_args):
    """Whether the CLI accepts an option (e.g. --precision mixed_bfloat16) in a one-step run."""
    with tempfile.TemporaryDirectory() as d:
        cmd = [args.lockstep, "train", "--epochs", "1", "--steps-per-epoch", "1", "--verbose", "0",
               "--history", os.path.join(d, "h.json")] + flag_args
        return subprocess.run(cmd, capture_output=True).returncode == 0


def configs_for(args, model):
    n = args.cores
    out = [peers.lockstep_config(args, model, 0), peers.lockstep_config(args, model, 1)]
    if args.baseline:
        out.append(peers.lockstep_config(args, model, 0, binary=args.baseline,
                                         label="Lockstep baseline"))
    if model in ("mlp", "wide", "vit") and args.bf16:
        out += [peers.lockstep_config(args, model, 0, "mixed_bfloat16"),
                peers.lockstep_config(args, model, 1, "mixed_bfloat16")]
    if model == "mlp":
        if args.profiler_row:
            out.append(peers.lockstep_config(args, model, 0,
                                             profile_dir=os.path.join(args.out, "profile")))
        if not args.lean:
            out += [peers.lockstep_config(args, model, n, spe=8),
                    peers.lockstep_config(args, model, n, input_pipeline="global")]
        if shutil.which("mpirun"):
            out.append(peers.lockstep_mpi_config(args, model, 2))
    if model == "vit":
        # One PyTorch peer, in Python (the C++ frontend peer has no ViT), tuned in float32 and in
        # bfloat16 autocast, at the ViT's global batch.
        return out + (peers.torch_vit_grid(args) if "python" in args.peers else [])
    for peer in peers.peers_of(args):
        out += peers.torch_grid(args, model, peer)
    if model == "mlp" and not args.lean:
        out += [peers.torch_config(args, model, "python", 1, 1, 128 * n, mode="ddp"),
                peers.torch_config(args, model, "python", 1, n, 128 * n, mode="dataloader")]
    return out


def under_co_runner(config):
    """The rows compared under a co-runner: all-core and 1-replica Lockstep (float32
    defaults), MPI 2 x 1, and the tuned PyTorch peers (their whole grid, re-tuned)."""
    if config["model"] != "mlp" or config.get("baseline"):
        return False
    if config["kind"] == "torch":
        return config.get("group") is not None
    if config.get("mpi"):
        return True
    return config["precision"] == "float32" and (config.get("defaults") or (
        config["replicas"] == 1 and "spe=" not in config["name"] and "input" not in config["name"]))


def with_conditions(args, configs):
    out = []
    for c in configs:
        out.append(dict(c, condition="quiet"))
        if args.co_runner and under_co_runner(c):
            out += [dict(c, condition=cond) for cond in CO_RUNNER_CONDITIONS]
    for c in out:
        c["id"] = "%s: %s [%s]" % (c["model"], c["name"], c["condition"])
    return out


# Where the co-runner runs relative to the measured run. Linux with autogroups (Debian's default,
# /proc/sys/kernel/sched_autogroup_enabled) shares the CPUs first between sessions, then between
# the threads of a session: a co-runner in another session than the run gets half of a two-core
# machine whatever either runs, so every multi-threaded run is held to one core and a one-thread run
# loses nothing. "same" (the default) keeps both in the harness's session, where the kernel shares
# per runnable thread — as between a host program's own threads, or jobs of one terminal, service
# or container; "own" gives the co-runner a session of its own (--co-runner-session).
CO_RUNNER_SESSION = "same"


def round_order(configs, r):
    """The configurations of round r: as listed in even rounds, reversed in odd ones. A row's runs
    beside the co-runner stay right after its quiet run (they are reported as fractions of it)."""
    groups = []
    for c in configs:
        if groups and c["condition"] != "quiet":
            groups[-1].append(c)
        else:
            groups.append([c])
    if r % 2:
        groups.reverse()
    return [c for g in groups for c in g]


def run_round(configs, r, timeout, runs, meta, timed_out, run=None):
    """Round r's runs (floors apart), in round_order: each result appended to runs[id], each
    failure to meta["failures"]. A PyTorch grid point that timed out is recorded in `timed_out`
    and not run in later rounds (skipped_error). `run` stands in for run_one in tests."""
    run = run or run_one
    for c in round_order(configs, r):
        if c["id"] in timed_out:
            meta["failures"].append({"round": r, "id": c["id"],
                                     "error": skipped_error(timeout, timed_out[c["id"]])})
            continue
        start = time.time()
        result = run(c, timeout)
        if result.get("timed_out") and c["kind"] == "torch":
            timed_out[c["id"]] = r
        if "error" in result:
            print("[round %d] %s: FAILED %s" % (r, c["id"], result["error"]), file=sys.stderr)
            meta["failures"].append({"round": r, "id": c["id"], "error": result["error"]})
            continue
        s = summarise(result)
        s["load"] = loadavg()
        s["round"] = r
        runs[c["id"]].append(s)
        print("[round %d] %-78s %9.0f samples/s  rss %4.0f MB  load %s (%.0fs)" % (
            r, c["id"], s["samples_per_s"], s["peak_rss_mb"], s["load"], time.time() - start),
            file=sys.stderr, flush=True)


def skipped_error(timeout, first_round):
    """Why a PyTorch grid point is not run again: it timed out in an earlier round. Such a point
    (two intra-op threads and two OpenBLAS threads beside a spinning co-runner, typically) runs
    tens of times slower than the grid's best and cannot be a round's best point; rerunning it
    would only spend --run-timeout seconds every round."""
    return "timed out after %.0f s (--run-timeout) in round %d, not run again" % (timeout,
                                                                                 first_round)


def start_co_runner(condition):
    if condition == "quiet":
        return None
    cmd = SPIN if condition == "co-runner" else (
        ["taskset", "-c", str(min(os.sched_getaffinity(0)))] + SPIN)
    return subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL,
                            start_new_session=CO_RUNNER_SESSION == "own")


def run_one(config, timeout):
    """Runs one configuration (beside its co-runner, if any) in a process group of its own (in the
    harness's session: see CO_RUNNER_SESSION); returns
    its result with the peak RSS of the process tree, or an error. A run longer than `timeout`
    seconds is stopped (its whole process group) and reported as timed out: on a busy machine
    oversubscribed thread pools (torch's OpenMP spinning against OpenBLAS threads, a co-runner)
    can be 100x slower than the best point of a grid, and would make a run last hours."""
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "out.json")
        cmd = config["cmd"] + (["--history", out] if config["kind"] == "lockstep" else ["--out",
                                                                                         out])
        env = dict(os.environ, **config["env"])
        co = start_co_runner(config["condition"])
        timed_out = threading.Event()
        try:
            with tempfile.TemporaryFile() as err:
                proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=err,
                                        process_group=0)
                timer = threading.Timer(timeout, lambda: (timed_out.set(),
                                                          os.killpg(proc.pid, signal.SIGKILL)))
                timer.start()
                try:
                    _, status, usage = os.wait4(proc.pid, 0)
                finally:
                    timer.cancel()
                err.seek(0)
                lines = err.read().decode(errors="replace").strip().splitlines()
        finally:
            if co:
                co.kill()
                co.wait()
        if timed_out.is_set():
            return {"error": "timed out after %.0f s (--run-timeout)" % timeout, "timed_out": True}
        if status != 0:
            return {"error": lines[-1] if lines else "exit status %d" % status}
        result = json.load(open(out))
    result["peak_rss_kb"] = max(result.get("peak_rss_kb", 0), usage.ru_maxrss)
    return result


def summarise(result):
    times = result["seconds_per_epoch"]
    steady = times[1:] if len(times) > 1 else times
    epoch = statistics.median(steady)
    examples = result["global_batch_size"] * result["steps_per_epoch"]
    out = {"first_epoch_s": times[0], "epoch_s": epoch, "samples_per_s": examples / epoch,
           "peak_rss_mb": result["peak_rss_kb"] / 1024.0, "examples_per_epoch": examples,
           "global_batch": result["global_batch_size"]}
    for k in ("allreduce_seconds_per_step", "allreduce_bytes_per_step", "workers",
              "local_replicas", "test_accuracy"):
        if k in result:
            out[k] = result[k]
    return out


def pinned_copies(args, pattern, what, condition="quiet"):
    """Runs the ops_bench benchmarks matching `pattern` as one pinned single-threaded copy per core,
    all at once (beside the co-runner `condition` if not quiet); returns, per copy, the medians'
    counters by benchmark run name, or None (and says why) when a copy printed no JSON."""
    procs = []
    co = start_co_runner(condition)
    try:
        for core in sorted(os.sched_getaffinity(0)):
            cmd = ["taskset", "-c", str(core), args.ops_bench,
                   "--benchmark_filter=" + pattern,
                   "--benchmark_format=json", "--benchmark_repetitions=%d" % args.floor_repetitions,
                   "--benchmark_min_time=0.2", "--benchmark_report_aggregates_only=true"]
            procs.append(subprocess.Popen(cmd, env=dict(os.environ, OMP_NUM_THREADS="1"),
                                          stdout=subprocess.PIPE, stderr=subprocess.DEVNULL))
        outputs = [p.communicate()[0] for p in procs]
    finally:
        if co:
            co.kill()
            co.wait()
    copies = []
    for p, raw in zip(procs, outputs):
        try:
            data = json.loads(raw or b"{}")
        except ValueError:
            print("%s: ops_bench printed no JSON (exit %d)" % (what, p.returncode),
                  file=sys.stderr)
            return None
        copies.append({b.get("run_name", b.get("name", "")): b
                       for b in data.get("benchmarks", []) if b.get("aggregate_name") == "median"})
    return copies


def measure_floor(args, bfloat16, condition="quiet"):
    """oneDNN's own matmul primitives on the seed step's five matmuls (ops_bench
    BM_SeedStepOneDnn): one pinned single-threaded copy per core, all at once. GFLOP/s in all.
    Beside a co-runner (condition "co-runner" or "co-runner pinned", started as for the runs) the
    copies are timed by the wall clock (BM_SeedStepOneDnnWallClock): what the cores the scheduler
    leaves to two threads can do, the limit of a two-thread run beside the same co-runner."""
    if not os.path.exists(args.ops_bench):
        return None
    # The float32 run also measures each core's FMA peak (BM_FmaPeak), so the table can say how
    # close the floor itself is to the hardware.
    if condition != "quiet":
        pattern = "BM_SeedStepOneDnnWallClock/%d/real_time$" % (1 if bfloat16 else 0)
    else:
        pattern = "BM_SeedStepOneDnn/1$" if bfloat16 else "BM_SeedStepOneDnn/0$|BM_FmaPeak$"
    copies = pinned_copies(args, pattern, "floor %s" % ("bfloat16" if bfloat16 else "float32"),
                           condition)
    if copies is None:
        return None
    rates, peaks = [], []
    for medians in copies:
        for name, b in medians.items():
            (peaks if name.startswith("BM_FmaPeak") else rates).append(b["GFLOP/s"])
    if len(rates) != len(copies):
        return None
    out = {"per_core_gflops": rates, "total_gflops": sum(rates)}
    if len(peaks) == len(copies) and all(x > 0 for x in peaks):
        out["peak_gflops"] = sum(peaks)
    return out


def measure_wide_limits(args):
    """The wide model's float32 floor (ops_bench BM_WideStepOneDnn: its eight matmuls, batch 128,
    with plain operands and, BM_WideStepOneDnnPacked, in oneDNN's preferred layouts; each copy's
    faster of the two) and the memory bandwidth an optimizer's pass over its weights gets
    (BM_UpdateStream: half the wide model's weights a copy, 28 bytes moved an element), each as one
    pinned copy per core at once, timed by the wall clock. {"gflops": in all, "stream_gbs": in
    all, and each per core} or None."""
    if not os.path.exists(args.ops_bench):
        return None
    out = {}
    for key, pattern, counter in (
            ("gflops", "BM_WideStepOneDnn/0/real_time$|BM_WideStepOneDnnPacked/0/real_time$",
             "GFLOP/s"),
            ("stream_gbs", "BM_UpdateStream/2912261/real_time$", "GB/s")):
        copies = pinned_copies(args, pattern, "wide %s" % key)
        if not copies or not all(copies):
            return None
        values = [max(b[counter] for b in medians.values()) for medians in copies]
        out[key] = sum(values)
        out[key + "_per_core"] = values
    return out


def cpu_flags():
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("flags"):
                return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def isa_cap():
    """The ISA cap in force for this run (LOCKSTEP_MAX_CPU_ISA, else ONEDNN_MAX_CPU_ISA), or ''."""
    return os.environ.get("LOCKSTEP_MAX_CPU_ISA") or os.environ.get("ONEDNN_MAX_CPU_ISA") or ""


# PyTorch's own vectorized kernels (ATen) pick the widest the CPU has unless told otherwise; under
# a cap they must take the same ceiling as Lockstep's loops, or a capped run compares AVX2 against
# AVX-512. Its oneDNN takes the cap's own variable.
ATEN_CAPABILITY = {"SSE41": "default", "AVX": "default", "AVX2": "avx2", "AVX2_VNNI": "avx2",
                   "AVX2_VNNI_2": "avx2"}


def torch_isa_env():
    """The environment that caps PyTorch as Lockstep is capped ({} without a cap)."""
    cap = isa_cap().upper()
    if not cap:
        return {}
    env = {"ONEDNN_MAX_CPU_ISA": cap, "DNNL_MAX_CPU_ISA": cap}
    env["ATEN_CPU_CAPABILITY"] = ATEN_CAPABILITY.get(cap, "avx512")
    return env


def choose_coretype():
    """Tries every OpenBLAS core type this CPU can execute under the cap and keeps the fastest.
    Returns (environment for PyTorch, {core type: GFLOP/s or the reason it was left out})."""
    flags = cpu_flags()
    cap = isa_cap().upper()
    below_avx512 = cap in ("SSE41", "AVX", "AVX2", "AVX2_VNNI")
    below_avx2 = cap in ("SSE41", "AVX")
    tried = {}
    for name, needs in CORETYPES:
        label = name or "OpenBLAS's own detection"
        missing = [f for f in needs if f not in flags]
        if missing:
            tried[label] = "not executable here (no %s)" % ", ".join(missing)
            continue
        if needs and ((below_avx512 and "avx512f" in needs) or below_avx2):
            tried[label] = "above the cap %s" % cap
            continue
        env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
        env.pop("OPENBLAS_CORETYPE", None)
        if name:
            env["OPENBLAS_CORETYPE"] = name
        try:
            r = subprocess.run([sys.executable, "-c", CORETYPE_PROBE], env=env, capture_output=True,
                               text=True, timeout=120)
        except subprocess.TimeoutExpired:
            tried[label] = "timed out"
            continue
        if r.returncode != 0:
            tried[label] = ("killed by signal %d" % -r.returncode if r.returncode < 0 else
                            "exit %d: %s" % (r.returncode, (r.stderr.strip().splitlines() or
                                                             [""])[-1][:120]))
            continue
        try:
            tried[label] = float(r.stdout.strip().splitlines()[-1])
        except (ValueError, IndexError):
            tried[label] = "no result: %s" % r.stdout.strip()[:120]
    measured = {k: v for k, v in tried.items() if isinstance(v, float)}
    if not measured:
        return {}, tried
    best = max(measured, key=measured.get)
    env = {} if best == "OpenBLAS's own detection" else {"OPENBLAS_CORETYPE": best}
    return env, tried


def lockstep_cpu(args):
    """`lockstep devices --json`'s cpu block: model, host ISA, oneDNN's ISA and the cap, the loops'
    build, whether bfloat16 math is native or emulated."""
    r = subprocess.run([args.lockstep, "devices", "--json"], capture_output=True, text=True)
    try:
        return json.loads(r.stdout).get("cpu", {})
    except ValueError:
        return {"error": (r.stderr.strip() or r.stdout.strip())[:200]}


def loadavg():
    return "%.2f %.2f %.2f" % os.getloadavg()


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


def git_commit():
    r = subprocess.run(["git", "-C", ROOT, "describe", "--always", "--dirty"], capture_output=True,
                       text=True)
    return r.stdout.strip() or "unknown"


def int_list(text):
    return [int(v) for v in text.split(",") if v]


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--lockstep", default=os.path.join(ROOT, "build/release/apps/lockstep"))
    p.add_argument("--ops-bench", default=os.path.join(ROOT, "build/release/bench/ops_bench"))
    p.add_argument("--torch-cpp", default=os.path.join(ROOT, "build/torch_cpp/torch_cpp_bench"),
                   help="the PyTorch C++ frontend peer ('' to leave it out)")
    p.add_argument("--baseline", default="",
                   help="another lockstep binary (e.g. the previous commit's): quiet rows beside")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--epochs", type=int, default=5,
                   help="epochs per seed-model run; the first is reported apart")
    p.add_argument("--models", default="mlp,wide,conv",
                   help="comma-separated: mlp, wide, conv, vit (the vision transformer, float32 "
                   "and mixed_bfloat16 against bench/pytorch_vit.py)")
    p.add_argument("--peers", default="python,cpp", help="PyTorch peers to tune: python, cpp")
    p.add_argument("--torch-threads", type=int_list, default=[1, 2])
    p.add_argument("--blas-threads", type=int_list, default=[1, 2])
    p.add_argument("--torch-batches", type=int_list, default=[128, 256])
    p.add_argument("--co-runner", action="store_true",
                   help="also run the contention rows beside a spinning co-runner, unpinned and "
                   "pinned to one core")
    p.add_argument("--co-runner-session", choices=["same", "own"], default="same",
                   help="same: the co-runner shares the run's session, and the kernel shares the "
                   "cores per thread; own: a session of its own, and with autogroups the kernel "
                   "gives each session half the machine (see CO_RUNNER_SESSION)")
    p.add_argument("--lean", action="store_true",
                   help="leave out the secondary rows (spe=8, global input, DDP, DataLoader)")
    p.add_argument("--quick", action="store_true",
                   help="a quick check that everything runs: 2 rounds, 3 epochs, seed model only, "
                   "lean (options given explicitly still win)")
    p.add_argument("--profiler-row", action="store_true",
                   help="add the all-core defaults row with the step profiler on (--profile), to "
                        "set against the defaults row (docs/profiling.md)")
    p.add_argument("--floor-repetitions", type=int, default=5)
    p.add_argument("--run-timeout", type=float, default=300,
                   help="seconds before one run is stopped and reported as timed out")
    p.add_argument("--out", default=os.path.join(ROOT, "build/bench"))
    p.add_argument("--only", default="", help="regex on configuration names")
    p.add_argument("--render", default="", help="re-render table.md and the SVG from a results.json")
    argv = sys.argv[1:]
    args = p.parse_args(argv)
    if args.quick:
        given = {a.split("=")[0] for a in argv}
        if "--rounds" not in given:
            args.rounds = 2
        if "--epochs" not in given:
            args.epochs = 3
        if "--models" not in given:
            args.models = "mlp"
        if "--floor-repetitions" not in given:
            args.floor_repetitions = 3
        if "--run-timeout" not in given:
            args.run_timeout = 60
        args.lean = True
    args.cores = cores()
    if args.torch_cpp and not os.path.exists(args.torch_cpp):
        print("no PyTorch C++ peer at %s (install libtorch-dev: scripts/setup --bench)" %
              args.torch_cpp, file=sys.stderr)
        args.torch_cpp = ""
    return args


def main():
    global CO_RUNNER_SESSION
    args = parse_args()
    CO_RUNNER_SESSION = args.co_runner_session
    os.makedirs(args.out, exist_ok=True)
    if args.render:
        data = json.load(open(args.render))
        md = report.render(data["meta"], report.rows_of(data["configs"], data["runs"], data["meta"]))
        open(os.path.join(args.out, "table.md"), "w").write(md)
        print(md)
        return
    args.cpu = lockstep_cpu(args)
    args.torch_env, coretypes = choose_coretype()
    args.torch_env.update(torch_isa_env())
    print("OpenBLAS core types (GFLOP/s, one thread): %s -> %s" % (
        "; ".join("%s %s" % (k, "%.1f" % v if isinstance(v, float) else v)
                  for k, v in coretypes.items()),
        args.torch_env.get("OPENBLAS_CORETYPE", "OpenBLAS's own detection")), file=sys.stderr)
    args.bf16 = lockstep_accepts(args, ["--precision", "mixed_bfloat16"])
    # The bfloat16 floor exists only where oneDNN has bfloat16 kernels; elsewhere mixed_bfloat16
    # computes in float32 kernels and its floor is the float32 one.
    bf16_floor = args.cpu.get("bfloat16_math") == "native"
    configs = []
    for model in args.models.split(","):
        if model == "mlp" or lockstep_accepts(args, ["--model", model]):
            configs += configs_for(args, model)
        else:
            print("skipping model %s: lockstep train rejects it" % model, file=sys.stderr)
    configs = with_conditions(args, configs)
    if args.only:
        configs = [c for c in configs if re.search(args.only, c["id"])]
    meta = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "machine": machine(), "command": " ".join(sys.argv), "commit": git_commit(),
            "cores": args.cores, "bf16": args.bf16, "torch_env": args.torch_env,
            "openblas_coretypes": coretypes, "cpu": args.cpu, "isa_cap": isa_cap(),
            "bf16_floor_note": "" if bf16_floor else "none: emulated (no bfloat16 kernels here)",
            "rounds": args.rounds, "epochs": args.epochs, "co_runner": args.co_runner,
            "co_runner_session": args.co_runner_session,
            "load_before": loadavg(), "floors": {"float32": [], "bfloat16": []},
            "fma_peaks": [],
            "co_runner_floors": {c: [] for c in CO_RUNNER_CONDITIONS},
            "wide_floors": [], "update_streams": [],
            "failures": []}
    runs = {c["id"]: [] for c in configs}
    timed_out = {}  # id -> the round a PyTorch grid point timed out in
    started = time.time()
    for r in range(args.rounds):
        for precision in ("float32", "bfloat16") if bf16_floor else ("float32",):
            f = measure_floor(args, precision == "bfloat16")
            if f:
                meta["floors"][precision].append(f["total_gflops"])
                if "peak_gflops" in f:
                    meta["fma_peaks"].append(f["peak_gflops"])
                print("[round %d] floor %-8s %7.0f GFLOP/s (%s per core)" % (
                    r, precision, f["total_gflops"],
                    " + ".join("%.0f" % g for g in f["per_core_gflops"])), file=sys.stderr)
        if "wide" in args.models.split(","):
            w = measure_wide_limits(args)
            if w:
                meta["wide_floors"].append(w["gflops"])
                meta["update_streams"].append(w["stream_gbs"])
                print("[round %d] wide floor float32 %7.0f GFLOP/s (%s per core); update stream "
                      "%.1f GB/s (%s)" % (r, w["gflops"], " + ".join(
                          "%.0f" % g for g in w["gflops_per_core"]), w["stream_gbs"], " + ".join(
                          "%.1f" % g for g in w["stream_gbs_per_core"])), file=sys.stderr)
        for condition in CO_RUNNER_CONDITIONS if args.co_runner else ():
            f = measure_floor(args, False, condition)
            if f:
                meta["co_runner_floors"][condition].append(f["total_gflops"])
                print("[round %d] floor float32 beside the %s %7.0f GFLOP/s (%s per core)" % (
                    r, condition, f["total_gflops"],
                    " + ".join("%.0f" % g for g in f["per_core_gflops"])), file=sys.stderr)
        run_round(configs, r, args.run_timeout, runs, meta, timed_out)
    meta["load_after"] = loadavg()
    meta["minutes"] = (time.time() - started) / 60
    rows = report.rows_of(configs, runs, meta)
    json.dump({"meta": meta, "configs": configs, "runs": runs, "rows": rows},
              open(os.path.join(args.out, "results.json"), "w"), indent=1)
    md = report.render(meta, rows)
    open(os.path.join(args.out, "table.md"), "w").write(md)
    plot.write_svg([r for r in rows if r["condition"] == "quiet" and not (
        r["kind"] == "torch" and r.get("group") and not r.get("tuned"))],
        os.path.join(args.out, "samples_per_s.svg"))
    print(md)


if __name__ == "__main__":
    main()
