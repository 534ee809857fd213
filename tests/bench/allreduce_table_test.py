#!/usr/bin/python3
"""bench/report.py's all-reduce table: an `mpirun` row's cross-worker time is held against the
ring floor computed here by hand; a one-worker row's time is the optimizer's pass that sums the
replicas' gradients as it reads them, so it is reported as that, with no floor and no
"reduce-scatter"."""
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.dont_write_bytecode = True
sys.path.insert(0, os.path.join(ROOT, "bench"))
import report  # noqa: E402


def main():
    rows = [
        {"model": "mlp", "name": "mpirun -np 2", "condition": "quiet", "replicas": 2,
         "workers": 2, "allreduce_bytes_per_step": 407080, "allreduce_seconds_per_step": 62.6e-6},
        {"model": "mlp", "name": "Lockstep defaults", "condition": "quiet", "replicas": 2,
         "workers": 1, "local_replicas": 2, "allreduce_bytes_per_step": 407080,
         "allreduce_seconds_per_step": 83.0e-6},
        # Not reported: one replica (nothing to sum) and a co-runner row.
        {"model": "mlp", "name": "1 replica", "condition": "quiet", "replicas": 1, "workers": 1,
         "allreduce_bytes_per_step": 407080, "allreduce_seconds_per_step": 50e-6},
        {"model": "mlp", "name": "Lockstep defaults", "condition": "co-runner", "replicas": 2,
         "workers": 1, "allreduce_bytes_per_step": 407080, "allreduce_seconds_per_step": 99e-6},
    ]
    lines = report.allreduce_table(rows)
    text = "\n".join(lines)
    assert "reduce-scatter" not in text, text
    # Ring floor for two workers: 2 (n - 1) / n bytes at the copy bandwidth, by hand: one
    # message's worth of bytes, 407080 / 13e9 s = 31.3 µs; 31.3 / 62.6 = 50%.
    mpi = [l for l in lines if l.startswith("| mlp | mpirun -np 2 |")]
    assert mpi == ["| mlp | mpirun -np 2 | 2 | 407080 | 62.6 | 31.3 | 50% |"], mpi
    local = [l for l in lines if l.startswith("| mlp | Lockstep defaults |")]
    assert local == ["| mlp | Lockstep defaults | 2 | 407080 | 83.0 |"], local
    assert not [l for l in lines if "1 replica" in l], text
    assert report.COPY_BANDWIDTH == 13e9
    # Nothing to report: no table at all.
    assert report.allreduce_table(rows[2:]) == []
    print("ok")


if __name__ == "__main__":
    main()
