#!/usr/bin/python3
"""Where the CPU time of `lockstep train` goes, by phase of the step, from `perf record -g`.

  bench/profile_breakdown.py [--lockstep build/release/apps/lockstep] [--replicas 2] [--epochs 4]

Each sample is assigned to the first phase whose pattern matches its call stack (innermost frame
first), so a memcpy called by the all-reduce counts as all-reduce. Startup (reading the gzip'd IDX
files) is reported apart. Needs `perf` (Debian: linux-perf).
"""
import argparse
import collections
import os
import re
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# (phase, regex over one frame's symbol or dso); checked innermost frame outwards.
PHASES = [
    ("startup (load IDX .gz)", r"libz\.so|crc32|inflate|read_idx|load_data|_dl_|ld-linux"),
    ("input pipeline (shuffle, gather, uint8->float, one_hot)",
     r"data_internal|preprocess|one_hot|Dataset|PrefetchIterator|DistributedDataset"),
    ("all-reduce (pack, reduce-scatter, barrier)",
     r"GradientSynchronizer|SharedMemoryCommunicator|fold<|Communicator"),
    ("optimizer (Adam)", r"optimizers::"),
    ("backward (matmuls + eltwise)", r"linear_backward|_backward|GradientTape::gradient"),
    ("forward (matmuls + eltwise)", r"Layer::operator\(\)|::call\(|linear_into|linear\(|gemm_with"),
    ("loss and metric bookkeeping", r"metrics::|losses::|sum_of|crossentropy"),
    ("dispatch and replica sync (futex, yield, scheduler)",
     r"ReplicaPool|sched_yield|syscall|futex|finish_task_switch|schedule"),
]


def record(args, data):
    cmd = ["perf", "record", "-F", "2000", "-g", "-o", data, args.lockstep, "train", "--replicas",
           str(args.replicas), "--epochs", str(args.epochs), "--verbose", "0"]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def samples(data):
    out = subprocess.run(["perf", "script", "-i", data, "-F", "comm,tid,ip,sym,dso"],
                         capture_output=True, text=True).stdout
    for block in out.split("\n\n"):
        lines = [l.strip() for l in block.strip().splitlines()]
        if len(lines) >= 2:
            yield lines[1:]  # frames, innermost first


def classify(frames):
    # oneDNN's JIT kernels (perf sees them through /tmp/perf-PID.map or as [JIT]): perf cannot
    # unwind through them, so their callers (forward or backward) are unknown.
    if frames and re.search(r"\[JIT\]|/tmp/perf-\d+\.map|libdnnl", frames[0]):
        return "matmuls (oneDNN kernels, forward + backward)"
    for phase, pattern in PHASES:
        rx = re.compile(pattern)
        for f in frames:
            if rx.search(f):
                return phase
    if frames and "[k]" in frames[0] or (frames and "kernel" in frames[0]):
        return "kernel (page faults, scheduling)"
    return "other host work (allocation, copies, tape bookkeeping)"


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--lockstep", default=os.path.join(ROOT, "build/release/apps/lockstep"))
    p.add_argument("--replicas", type=int, default=2)
    p.add_argument("--epochs", type=int, default=4)
    p.add_argument("--data", default="", help="use an existing perf.data")
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as d:
        data = args.data or os.path.join(d, "perf.data")
        if not args.data:
            record(args, data)
        counts = collections.Counter(classify(f) for f in samples(data))
    total = sum(counts.values())
    startup = counts.pop("startup (load IDX .gz)", 0)
    steady = total - startup
    print("| phase | share of training CPU time |\n|---|---:|")
    for phase, n in counts.most_common():
        print("| %s | %.1f%% |" % (phase, 100.0 * n / steady))
    print("\n(%d samples; %.1f%% of all were startup, excluded)" % (total, 100.0 * startup / total),
          file=sys.stderr)


if __name__ == "__main__":
    main()
