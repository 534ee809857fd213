"""The configurations scripts/bench runs: Lockstep's, and PyTorch's (Python and C++ frontend).

Each configuration is a dict: name, system, model, cmd, env, kind ("lockstep" | "torch"), the
global batch, and for PyTorch the tuning group it belongs to (`group`, e.g. "PyTorch C++") and its
grid point (`tuning`). A co-runner condition is added by the harness (`condition`).
"""
import os

HERE = os.path.dirname(os.path.abspath(__file__))
MPI_ENV = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}
PER_REPLICA_BATCH = 128
# Steps per epoch and epochs of the larger models (a full epoch of the wide model takes minutes).
SHORT_RUNS = {"wide": (40, 3), "conv": (60, 3), "vit": (30, 3)}
# The vision transformer trains on global batches of 256 (apps/models/vit.cpp's setting, what
# docs/keras-compat.md's accuracy runs use); its PyTorch peer (bench/pytorch_vit.py) takes the same.
VIT_GLOBAL_BATCH = 256


def lockstep_config(args, model, replicas, precision="float32", spe=None, input_pipeline=None,
                    binary=None, label="Lockstep", profile_dir=None):
    """`lockstep train` with `replicas` local replicas of batch 128 each (replicas=0: the CLI's
    own default, one per available core). With `profile_dir`, the step profiler records every step
    but the first (`--profile`; it writes its files after the last epoch, outside the timings)."""
    steps, epochs = SHORT_RUNS.get(model, (0, args.epochs))
    if replicas:
        name = "%s %d replica%s" % (label, replicas, "s" if replicas > 1 else "")
    else:
        name = "%s defaults (all cores)" % label
    if precision != "float32":
        name += " " + precision
    if spe:
        name += " spe=%d" % spe
    if input_pipeline:
        name += " %s input" % input_pipeline
    if profile_dir:
        name += " profiler on"
    cmd = [binary or args.lockstep, "train", "--model", model, "--verbose", "0", "--epochs",
           str(epochs)]
    if replicas:
        cmd += ["--replicas", str(replicas), "--batch-size", str(PER_REPLICA_BATCH)]
    if precision != "float32":
        cmd += ["--precision", precision]
    if steps:
        cmd += ["--steps-per-epoch", str(steps)]
    if spe:
        cmd += ["--steps-per-execution", str(spe)]
    if input_pipeline:
        cmd += ["--input-pipeline", input_pipeline]
    if profile_dir:
        cmd += ["--profile", profile_dir]
    return {"name": name, "system": "Lockstep", "model": model,
            "replicas": replicas or args.cores, "precision": precision,
            "global_batch": PER_REPLICA_BATCH * (replicas or args.cores), "cmd": cmd, "env": {},
            "kind": "lockstep",
            "defaults": (replicas == 0 and not spe and not input_pipeline and binary is None
                         and not profile_dir),
            "baseline": binary is not None, "profiler": bool(profile_dir)}


def lockstep_mpi_config(args, model, procs):
    """`procs` MPI processes x 1 replica each, same per-replica batch as lockstep_config, with
    Open MPI's default binding (each of two ranks bound to a core), as a user runs it."""
    steps, epochs = SHORT_RUNS.get(model, (0, args.epochs))
    cmd = ["mpirun", "--oversubscribe", "-np", str(procs), args.lockstep,
           "train", "--model", model, "--replicas", "1", "--verbose", "0", "--epochs",
           str(epochs), "--batch-size", str(PER_REPLICA_BATCH)]
    if steps:
        cmd += ["--steps-per-epoch", str(steps)]
    return {"name": "Lockstep %d procs x 1 replica (MPI)" % procs, "system": "Lockstep",
            "model": model, "replicas": procs, "workers": procs, "precision": "float32",
            "global_batch": PER_REPLICA_BATCH * procs, "cmd": cmd, "env": dict(MPI_ENV),
            "kind": "lockstep", "mpi": True}


def tuning_name(threads, blas, batch):
    return "%d intra-op + %d BLAS thread%s, batch %d" % (threads, blas, "s" if blas > 1 else "",
                                                        batch)


def torch_config(args, model, peer, threads, blas, batch, mode="fast"):
    """One grid point of a PyTorch peer. peer: "python" (bench/torch_bench.py) or "cpp" (the C++
    frontend, bench/torch_cpp). Threads are set in the environment before torch loads: OpenBLAS
    reads OPENBLAS_NUM_THREADS when the library is loaded, and torch's intra-op pool takes
    --threads (torch.set_num_threads / at::set_num_threads) with OMP_NUM_THREADS matching it."""
    steps, epochs = SHORT_RUNS.get(model, (0, args.epochs))
    if peer == "cpp":
        cmd = [args.torch_cpp, "--model", model, "--threads", str(threads), "--global-batch",
               str(batch), "--epochs", str(epochs)]
        group = "PyTorch C++"
    else:
        cmd = ["/usr/bin/python3", os.path.join(HERE, "torch_bench.py"), "--mode", mode,
               "--model", model, "--threads", str(threads), "--global-batch", str(batch),
               "--epochs", str(epochs)]
        group = {"fast": "PyTorch", "ddp": "PyTorch DDP gloo 2 procs",
                 "dataloader": "PyTorch DataLoader"}[mode]
    if steps:
        cmd += ["--steps-per-epoch", str(steps)]
    env = dict(args.torch_env, OPENBLAS_NUM_THREADS=str(blas), OMP_NUM_THREADS=str(threads))
    return {"name": "%s %s" % (group, tuning_name(threads, blas, batch)), "system": "PyTorch",
            "model": model, "replicas": 2 if mode == "ddp" else 1, "global_batch": batch,
            "cmd": cmd, "env": env, "kind": "torch", "mode": mode,
            "group": group if mode == "fast" else None,
            "tuning": tuning_name(threads, blas, batch)}


def torch_vit_config(args, threads, blas, precision):
    """One grid point of the ViT's PyTorch peer, bench/pytorch_vit.py (nn.MultiheadAttention;
    bfloat16: torch.autocast), threads set as for torch_config."""
    steps, epochs = SHORT_RUNS["vit"]
    cmd = ["/usr/bin/python3", os.path.join(HERE, "pytorch_vit.py"), "--precision", precision,
           "--threads", str(threads), "--global-batch", str(VIT_GLOBAL_BATCH), "--epochs",
           str(epochs), "--steps-per-epoch", str(steps)]
    group = "PyTorch" if precision == "float32" else "PyTorch bf16 autocast"
    env = dict(args.torch_env, OPENBLAS_NUM_THREADS=str(blas), OMP_NUM_THREADS=str(threads))
    tuning = tuning_name(threads, blas, VIT_GLOBAL_BATCH)
    return {"name": "%s %s" % (group, tuning), "system": "PyTorch", "model": "vit",
            "replicas": 1, "global_batch": VIT_GLOBAL_BATCH, "cmd": cmd, "env": env,
            "kind": "torch", "mode": "fast", "group": group, "tuning": tuning,
            "precision": "float32" if precision == "float32" else "mixed_bfloat16"}


def torch_vit_grid(args):
    return [torch_vit_config(args, t, b, precision) for precision in ("float32", "bfloat16")
            for t in args.torch_threads for b in args.blas_threads]


def torch_grid(args, model, peer):
    return [torch_config(args, model, peer, t, b, batch) for batch in args.torch_batches
            for t in args.torch_threads for b in args.blas_threads]


def peers_of(args):
    out = ["python"] if "python" in args.peers else []
    if "cpp" in args.peers and args.torch_cpp:
        out.append("cpp")
    return out
