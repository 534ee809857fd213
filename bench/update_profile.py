#!/usr/bin/python3
"""The optimizer update's share of `lockstep train`, split into the bytes it streams and the
per-variable bookkeeping a flat arena would remove (docs/architecture.md, "The flat arena: measured, not built").

  bench/update_profile.py [--lockstep build/release/apps/lockstep] [--model mlp] [train args...]

Records with `perf record --call-graph dwarf` (the release build keeps no frame pointers, so only
DWARF unwinding finds a sample's callers) and assigns each sample by its call stack: startup and
the final evaluation are left out; a sample under the update is the rule's loop, the commit's
copy (non-temporal stores of scratch when the model streams; about nothing otherwise), the
publication of a backup's win, or bookkeeping (begin_update's pointer tables, end_update's flips,
the per-chunk dispatch). Needs `perf` (Debian: linux-perf).
"""
import argparse
import collections
import os
import re
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
STARTUP = re.compile(r"load_data|read_idx|inflate|_dl_|dl_main|crc32|Model::compile|Trainer::prepare")
EVALUATE = re.compile(r"Model::evaluate|Model::predict")
UPDATE = re.compile(r"BufferedUpdate|Optimizer::apply|Optimizer::begin_update|Optimizer::end_update|"
                    r"expand_rule|update_step|Variable::flip_buffers")
POOL = re.compile(r"TaskPool::")
# Checked innermost frame outwards, the first match wins; then the whole stack.
UPDATE_LEAF = [
    ("update: the rule's loop (bytes)", re.compile(r"expand_rule|rule_loop|update_step|run_rule")),
    ("update: commit's copy (bytes)", re.compile(r"commit_chunk")),
]
UPDATE_STACK = [
    ("update: publishing a backup's win (spare copies)",
     re.compile(r"publish_backup|allocate_spares")),
    ("update: bookkeeping: pointer tables (begin_update)",
     re.compile(r"BufferedUpdate::begin_update")),
    ("update: bookkeeping: flips (end_update)",
     re.compile(r"BufferedUpdate::end_update|flip_buffers")),
]
PER_CHUNK = "update: bookkeeping: per chunk (run_part, dispatch to the rule)"


def record(args, extra, data):
    cmd = ["perf", "record", "-F", "999", "--call-graph", "dwarf,8192", "-o", data, args.lockstep,
           "train", "--model", args.model, "--verbose", "0"] + extra
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def samples(data):
    out = subprocess.run(["perf", "script", "-i", data], capture_output=True, text=True).stdout
    for block in out.split("\n\n"):
        frames = []
        for line in block.strip().splitlines()[1:]:
            m = re.match(r"\s*[0-9a-f]+ (.*) \(.*\)$", line)
            if m:
                frames.append(re.sub(r"\+0x[0-9a-f]+$", "", m.group(1)))
        if frames:
            yield frames  # innermost first


def classify(frames):
    stack = " | ".join(frames)
    if EVALUATE.search(stack):
        return "evaluate"
    if STARTUP.search(stack) and not POOL.search(stack):
        return "startup"
    if UPDATE.search(stack):
        for f in frames:
            for phase, rx in UPDATE_LEAF:
                if rx.search(f):
                    return phase
        for phase, rx in UPDATE_STACK:
            if rx.search(stack):
                return phase
        return PER_CHUNK
    # The innermost frame of Lockstep's own decides whether the pool itself ran.
    lockstep = next((f for f in frames if f.startswith("lockstep::")), "")
    if POOL.search(lockstep):
        return "task pool (scheduling, waiting)"
    return "forward, backward, input, sums and the rest"


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--lockstep", default=os.path.join(ROOT, "build/release/apps/lockstep"))
    p.add_argument("--model", default="mlp")
    p.add_argument("--data", default="", help="use an existing perf.data")
    args, extra = p.parse_known_args()
    with tempfile.TemporaryDirectory() as d:
        data = args.data or os.path.join(d, "perf.data")
        if not args.data:
            record(args, extra, data)
        counts = collections.Counter(classify(f) for f in samples(data))
    total = sum(counts.values())
    left_out = counts.pop("startup", 0) + counts.pop("evaluate", 0)
    training = total - left_out
    print("| %s | share of training CPU samples |\n|---|---:|" % args.model)
    for phase, n in sorted(counts.items()):
        print("| %s | %.2f%% |" % (phase, 100.0 * n / training))
    print("\n(%d samples, %d of training; startup and evaluation left out)" % (total, training),
          file=sys.stderr)


if __name__ == "__main__":
    main()
