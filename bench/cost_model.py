#!/usr/bin/python3
"""The cost model of docs/distributed.md ("Cost model for scale") from measured inputs.

    mpirun -np 2 --bind-to none build/release/bench/mpi_transport_bench --json shm.json
    bench/multihost_transport.sh build/release/bench/mpi_transport_bench --json tcp.json
    bench/cost_model.py shm.json tcp.json

Prints markdown tables: the measured latency (alpha) and bandwidth (beta) of each path, and the
predicted time of one all-reduce of a gradient over p workers joined by the TCP path,
    ring (reduce-scatter + all-gather):     2 (p - 1) alpha + 2 (p - 1) / p * n / beta
    tree (binomial reduce + broadcast):     2 log2(p) (alpha + n / beta)
for the seed model (101,770 float32) and a 100M-parameter model (float32 and bfloat16 on the wire),
next to the compute a step gives to hide it behind (the backward pass, about 2/3 of a step).
"""
import json
import math
import sys

SEED_PARAMS = 101770
BIG_PARAMS = 100_000_000
WORKERS = (8, 64, 512, 4096)
# Compute per step of one worker of this machine (2 cores): the seed model at 2 x 128 examples
# runs ~500k examples/s quiet (docs/performance.md), 0.5 ms a step; a 100M-parameter dense model
# costs ~6 flop per parameter per example (forward 2, backward 4), at ~350 GFLOP/s on 2 cores
# (docs/machine.md: oneDNN fp32 ~173 GFLOP/s per core) for 256 examples a step.
SEED_STEP_S = 256 / 500e3
BIG_STEP_S = 6 * BIG_PARAMS * 256 / 350e9
BACKWARD_FRACTION = 2 / 3


def ring(p, n, alpha, beta):
    return 2 * (p - 1) * alpha + 2 * (p - 1) / p * n / beta


def tree(p, n, alpha, beta):
    return 2 * math.log2(p) * (alpha + n / beta)


def fmt(seconds):
    if seconds < 1e-3:
        return "%.0f µs" % (seconds * 1e6)
    if seconds < 1:
        return "%.1f ms" % (seconds * 1e3)
    return "%.2f s" % seconds


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    shm, tcp = (json.load(open(path)) for path in sys.argv[1:])
    print("| path | alpha (8 B one-way, best) | beta (best) | seed all-reduce, 2 ranks: measured "
          "median / best | model |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for name, m in (("shared memory (2 processes, one host)", shm),
                    ("TCP between the two hosts (veth)", tcp)):
        seed = next(r for r in m["all_reduce"] if r["count"] == SEED_PARAMS)
        print("| %s | %.2f µs | %.2f GB/s | %s / %s | %s |" % (
            name, m["alpha_s"] * 1e6, m["beta_bytes_per_s"] / 1e9, fmt(seed["median_s"]),
            fmt(seed["best_s"]), fmt(seed["model_s"])))
    alpha, beta = tcp["alpha_s"], tcp["beta_bytes_per_s"]
    print()
    print("One all-reduce over p workers on the TCP path (alpha = %.1f µs, beta = %.2f GB/s):"
          % (alpha * 1e6, beta / 1e9))
    print()
    cases = (("seed model, float32 (407 KB)", SEED_PARAMS * 4, SEED_STEP_S),
             ("100M parameters, float32 (400 MB)", BIG_PARAMS * 4, BIG_STEP_S),
             ("100M parameters, bfloat16 (200 MB)", BIG_PARAMS * 2, BIG_STEP_S))
    print("| gradient | backward to hide it in | " +
          " | ".join("p = %d ring / tree" % p for p in WORKERS) + " |")
    print("| --- | ---: |" + " ---: |" * len(WORKERS))
    for name, n, step in cases:
        cells = ["%s / %s" % (fmt(ring(p, n, alpha, beta)), fmt(tree(p, n, alpha, beta)))
                 for p in WORKERS]
        print("| %s | %s | %s |" % (name, fmt(step * BACKWARD_FRACTION), " | ".join(cells)))
    print()
    print("Latency share of the ring (2 (p - 1) alpha) against its bandwidth share:")
    print()
    print("| gradient | " + " | ".join("p = %d" % p for p in WORKERS) + " |")
    print("| --- |" + " ---: |" * len(WORKERS))
    for name, n, _ in cases:
        cells = ["%s + %s" % (fmt(2 * (p - 1) * alpha), fmt(2 * (p - 1) / p * n / beta))
                 for p in WORKERS]
        print("| %s | %s |" % (name, " | ".join(cells)))


main()
