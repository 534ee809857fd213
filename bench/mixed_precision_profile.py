#!/usr/bin/python3
"""mixed_bfloat16 against float32 on one model's training step, from `perf record` samples.

  bench/mixed_precision_profile.py [--bench build/release/bench/mixed_precision_bench]
      [--model vit] [--rounds 20] [--pairs 2]

Runs `mixed_precision_bench --profile POLICY` under perf for each policy, alternated `pairs`
times, and sums the samples per symbol. oneDNN's JIT kernels do the same work under both policies
(the float32 form multiplies float32 tensors of the same shapes), so the ratio of their samples
measures how fast the machine ran each policy's runs; the step ratio is reported raw and scaled by
it, which takes out most of what other tenants of a loaded VM do to the wall-clock ratio. The
table lists the symbols whose (scaled) samples differ most, as a share of the float32 step.
Run with the cap under study in the environment (e.g. LOCKSTEP_MAX_CPU_ISA=AVX2); one core, as a
replica runs (OMP_NUM_THREADS=1, taskset -c 0). Needs `perf` (Debian: linux-perf).
"""
import argparse
import collections
import os
import re
import subprocess
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def samples(bench, model, rounds, policy, data):
    subprocess.run(["perf", "record", "-q", "-o", data, "-F", "2000", "taskset", "-c", "0", bench,
                    "--model", model, "--rounds", str(rounds), "--profile", policy],
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                   env=dict(os.environ, OMP_NUM_THREADS="1"))
    report = subprocess.run(["perf", "report", "-i", data, "--no-children", "--sort", "dso,symbol",
                             "-F", "sample,dso,symbol"], check=True, capture_output=True,
                            text=True).stdout
    counts = collections.Counter()
    for line in report.splitlines():
        parts = line.split()
        if not parts or line.startswith("#") or len(parts) < 3 or not parts[0].isdigit():
            continue
        n, dso, symbol = int(parts[0]), parts[1], " ".join(parts[2:])
        if dso.startswith("[JIT]"):
            symbol = "[JIT] oneDNN's kernels"
        elif symbol.startswith("[.] 0x") or symbol.startswith("[k]"):
            symbol = dso + " (other)"
        counts[re.sub(r"_x86_64_v[34]|\s+-\s+-\s*$", "", symbol)[:100]] += n
    return counts


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--bench", default=os.path.join(ROOT, "build/release/bench/mixed_precision_bench"))
    p.add_argument("--model", default="vit")
    p.add_argument("--rounds", type=int, default=20)
    p.add_argument("--pairs", type=int, default=2)
    a = p.parse_args()
    totals = {"float32": collections.Counter(), "mixed_bfloat16": collections.Counter()}
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(a.pairs):
            for policy in totals:
                totals[policy] += samples(a.bench, a.model, a.rounds, policy,
                                          os.path.join(tmp, "perf.data"))
    f32, mixed = totals["float32"], totals["mixed_bfloat16"]
    jit = "[JIT] oneDNN's kernels"
    scale = f32[jit] / max(1, mixed[jit])
    t32, tm = sum(f32.values()), sum(mixed.values())
    print(f"{a.model}: samples float32 {t32}, mixed_bfloat16 {tm}; step ratio raw {tm / t32:.3f}, "
          f"scaled by oneDNN's kernels {tm * scale / t32:.3f}")
    keys = sorted(set(f32) | set(mixed), key=lambda k: -abs(mixed[k] * scale - f32[k]))
    print(f"{'float32':>8} {'mixed':>8} {'diff':>7}  symbol")
    for k in keys[:15]:
        print(f"{f32[k]:8d} {round(mixed[k] * scale):8d} {100 * (mixed[k] * scale - f32[k]) / t32:+6.2f}%  {k}")


if __name__ == "__main__":
    main()
