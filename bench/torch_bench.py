#!/usr/bin/python3
"""PyTorch peer of `lockstep train`: the same models on the same Fashion-MNIST files.

Modes:
  fast        the whole training set as one float32 tensor, a shuffled index per epoch, a gather
              per batch (the fastest way to feed PyTorch on a CPU);
  dataloader  the typical user's path: TensorDataset + DataLoader(shuffle=True, batch_size=B);
  ddp         DistributedDataParallel, gloo, N processes x 1 thread, each on its half of the
              global batch (the `fast` feeding).

Set it up at its best before starting (the harness does): OPENBLAS_CORETYPE=SkylakeX, because
Debian's OpenBLAS otherwise picks SSE3 kernels on this CPU, and --threads / --blas-threads.
Writes one JSON object: seconds_per_epoch, global_batch_size, steps_per_epoch, peak_rss_kb.
"""
import argparse
import gzip
import json
import os
import resource
import sys
import time

import numpy as np

DATA_DIR = "/usr/share/datasets/fashion-mnist"


def read_idx(path):
    with gzip.open(path, "rb") as f:
        raw = f.read()
    ndim = raw[3]
    dims = [int.from_bytes(raw[4 + 4 * i:8 + 4 * i], "big") for i in range(ndim)]
    return np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)


def load_train(data_dir):
    x = read_idx(os.path.join(data_dir, "train-images-idx3-ubyte.gz")).reshape(-1, 784)
    y = read_idx(os.path.join(data_dir, "train-labels-idx1-ubyte.gz"))
    return x, y


def build_model(torch, name):
    nn = torch.nn
    if name == "wide":
        return nn.Sequential(nn.Linear(784, 2048), nn.ReLU(), nn.Linear(2048, 2048), nn.ReLU(),
                             nn.Linear(2048, 10))
    if name == "conv":
        return nn.Sequential(nn.Unflatten(1, (1, 28, 28)), nn.Conv2d(1, 32, 3), nn.ReLU(),
                             nn.MaxPool2d(2), nn.Flatten(), nn.Linear(32 * 13 * 13, 10))
    return nn.Sequential(nn.Linear(784, 128), nn.ReLU(), nn.Linear(128, 10))


def train_step(model, opt, loss_fn, xb, yb):
    # Softmax + categorical cross-entropy on one-hot labels == CrossEntropyLoss on the logits.
    opt.zero_grad(set_to_none=True)
    loss = loss_fn(model(xb), yb)
    loss.backward()
    opt.step()
    return loss


def epoch_batches(torch, x, y, batch, steps, rank, world, seed):
    """The fast feeding: one permutation per epoch, each rank gathers its part of each batch."""
    gen = torch.Generator().manual_seed(seed)
    perm = torch.randperm(x.shape[0], generator=gen)
    per_rank = batch // world
    for s in range(steps):
        idx = perm[s * batch + rank * per_rank:s * batch + (rank + 1) * per_rank]
        yield x.index_select(0, idx), y.index_select(0, idx)


def run(args, rank=0, world=1):
    import torch
    torch.set_num_threads(args.threads)
    # Subnormals flushed as Lockstep flushes them (docs/keras-compat.md): Adam's decaying moments
    # otherwise cost a microcode assist per vector on x86, in PyTorch's optimizer as in ours.
    torch.set_flush_denormal(not args.keep_denormals)
    torch.manual_seed(args.seed)
    xu8, yu8 = load_train(args.data_dir)
    steps = args.steps_per_epoch or xu8.shape[0] // args.global_batch
    model = build_model(torch, args.model)
    if world > 1:
        model = torch.nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3, foreach=True)
    loss_fn = torch.nn.CrossEntropyLoss()
    times = []
    if args.mode == "dataloader":
        ds = torch.utils.data.TensorDataset(
            torch.from_numpy(xu8.astype(np.float32) / 255.0), torch.from_numpy(yu8.astype(np.int64)))
        loader = torch.utils.data.DataLoader(ds, batch_size=args.global_batch, shuffle=True,
                                             drop_last=True)
    else:
        x = torch.from_numpy(xu8.astype(np.float32) / 255.0)
        y = torch.from_numpy(yu8.astype(np.int64))
    for epoch in range(args.epochs):
        if world > 1:
            torch.distributed.barrier()
        start = time.perf_counter()
        if args.mode == "dataloader":
            batches = (b for b, _ in zip(loader, range(steps)))
        else:
            batches = epoch_batches(torch, x, y, args.global_batch, steps, rank, world,
                                    args.seed + epoch)
        for xb, yb in batches:
            loss = train_step(model, opt, loss_fn, xb, yb)
        float(loss)
        if world > 1:
            torch.distributed.barrier()
        times.append(time.perf_counter() - start)
    return {"seconds_per_epoch": times, "global_batch_size": args.global_batch,
            "steps_per_epoch": steps, "loss": float(loss),
            "peak_rss_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}


def ddp_worker(rank, args, out_dir):
    import torch
    os.environ["OMP_NUM_THREADS"] = str(args.threads)
    torch.distributed.init_process_group("gloo", rank=rank, world_size=args.world)
    result = run(args, rank, args.world)
    with open(os.path.join(out_dir, "rank%d.json" % rank), "w") as f:
        json.dump(result, f)
    torch.distributed.destroy_process_group()


def run_ddp(args):
    import tempfile
    import torch.multiprocessing as mp
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", str(29500 + os.getpid() % 1000))
    with tempfile.TemporaryDirectory() as out_dir:
        mp.spawn(ddp_worker, args=(args, out_dir), nprocs=args.world, join=True)
        ranks = [json.load(open(os.path.join(out_dir, "rank%d.json" % r)))
                 for r in range(args.world)]
    result = ranks[0]
    # Peak RSS of DDP = every rank plus the launcher.
    result["peak_rss_kb"] = sum(r["peak_rss_kb"] for r in ranks) + \
        resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return result


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--mode", choices=["fast", "dataloader", "ddp"], default="fast")
    p.add_argument("--model", choices=["mlp", "wide", "conv"], default="mlp")
    p.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    p.add_argument("--world", type=int, default=2, help="DDP processes")
    p.add_argument("--global-batch", type=int, default=128)
    p.add_argument("--epochs", type=int, default=4)
    p.add_argument("--steps-per-epoch", type=int, default=0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--keep-denormals", action="store_true",
                   help="leave torch.set_flush_denormal off (PyTorch's default)")
    p.add_argument("--data-dir", default=DATA_DIR)
    p.add_argument("--out", required=True)
    args = p.parse_args()
    result = run_ddp(args) if args.mode == "ddp" else run(args)
    result["torch_threads"] = args.threads
    result["blas_threads"] = os.environ.get("OPENBLAS_NUM_THREADS", "")
    with open(args.out, "w") as f:
        json.dump(result, f)


if __name__ == "__main__":
    sys.exit(main())
