#!/usr/bin/python3
"""PyTorch peer of `lockstep train --model vit`: the same vision transformer on the same
Fashion-MNIST files, with torch.nn.MultiheadAttention.

The model, layer for layer as apps/models/vit.cpp builds it: Conv2d(1, 64, 4, stride 4) patches
(49 tokens), a learned position embedding, 4 pre-norm blocks (LayerNorm(eps=1e-6),
MultiheadAttention(64, 4 heads), residual; LayerNorm, Linear(64, 128), exact GELU, Linear(128, 64),
residual), LayerNorm, the mean over the tokens and Linear(64, 10); Adam(lr=1e-3, eps=1e-7 as
Keras), cross-entropy on the logits.

Feeding is the fast one of bench/torch_bench.py: the whole training set as one float32 tensor, a
shuffled index per epoch, a gather per batch. --precision bfloat16 runs the forward pass under
torch.autocast("cpu", dtype=torch.bfloat16) (PyTorch's mixed precision on CPUs: matmuls and
convolutions in bfloat16, softmax and normalizations in float32, float32 weights).

Set the threads before starting, as for the other peers: OMP_NUM_THREADS=1 and
OPENBLAS_NUM_THREADS=2 (PyTorch's best on this 2-core machine, see docs/machine.md) with --threads 1,
or --threads 2. Writes one JSON object: seconds_per_epoch, samples_per_second (per epoch),
global_batch_size, steps_per_epoch, loss, test_accuracy (with --evaluate), precision, threads.

  OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=2 OPENBLAS_CORETYPE=SkylakeX \\
      python3 bench/pytorch_vit.py --epochs 2 --global-batch 256 --out /tmp/torch_vit.json
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


def load(data_dir, split):
    prefix = "train" if split == "train" else "t10k"
    x = read_idx(os.path.join(data_dir, prefix + "-images-idx3-ubyte.gz")).reshape(-1, 784)
    y = read_idx(os.path.join(data_dir, prefix + "-labels-idx1-ubyte.gz"))
    return x, y


def build_vit(torch, width=64, heads=4, blocks=4, mlp_ratio=2, patch=4, image=28, classes=10):
    nn = torch.nn
    tokens = (image // patch) ** 2

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.norm1 = nn.LayerNorm(width, eps=1e-6)
            self.attention = nn.MultiheadAttention(width, heads, batch_first=True)
            self.norm2 = nn.LayerNorm(width, eps=1e-6)
            self.mlp = nn.Sequential(nn.Linear(width, mlp_ratio * width), nn.GELU(),
                                     nn.Linear(mlp_ratio * width, width))

        def forward(self, x):
            h = self.norm1(x)
            x = x + self.attention(h, h, h, need_weights=False)[0]
            return x + self.mlp(self.norm2(x))

    class ViT(nn.Module):
        def __init__(self):
            super().__init__()
            self.patches = nn.Conv2d(1, width, patch, stride=patch)
            self.position = nn.Parameter(torch.empty(1, tokens, width).uniform_(-0.2, 0.2))
            self.blocks = nn.Sequential(*[Block() for _ in range(blocks)])
            self.norm = nn.LayerNorm(width, eps=1e-6)
            self.head = nn.Linear(width, classes)

        def forward(self, pixels):
            x = self.patches(pixels.view(-1, 1, image, image))  # [B, width, 7, 7]
            x = x.flatten(2).transpose(1, 2) + self.position  # [B, 49, width]
            x = self.norm(self.blocks(x))
            return self.head(x.mean(dim=1))

    return ViT()


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--precision", choices=["float32", "bfloat16"], default="float32")
    p.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    p.add_argument("--global-batch", type=int, default=256)
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--steps-per-epoch", type=int, default=0, help="0: a full pass")
    p.add_argument("--evaluate", action="store_true", help="test accuracy after training")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--keep-denormals", action="store_true",
                   help="leave torch.set_flush_denormal off (PyTorch's default)")
    p.add_argument("--data-dir", default=DATA_DIR)
    p.add_argument("--out", required=True)
    args = p.parse_args()

    import torch
    torch.set_num_threads(args.threads)
    # Subnormals flushed as Lockstep flushes them (docs/keras-compat.md), as in torch_bench.py.
    torch.set_flush_denormal(not args.keep_denormals)
    torch.manual_seed(args.seed)
    xu8, yu8 = load(args.data_dir, "train")
    x = torch.from_numpy(xu8.astype(np.float32) / 255.0)
    y = torch.from_numpy(yu8.astype(np.int64))
    steps = args.steps_per_epoch or x.shape[0] // args.global_batch
    model = build_vit(torch)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3, eps=1e-7)
    loss_fn = torch.nn.CrossEntropyLoss()
    autocast = args.precision == "bfloat16"
    times = []
    loss = torch.zeros(())
    for epoch in range(args.epochs):
        gen = torch.Generator().manual_seed(args.seed + epoch)
        perm = torch.randperm(x.shape[0], generator=gen)
        start = time.perf_counter()
        for s in range(steps):
            idx = perm[s * args.global_batch:(s + 1) * args.global_batch]
            xb, yb = x.index_select(0, idx), y.index_select(0, idx)
            opt.zero_grad(set_to_none=True)
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
                logits = model(xb)
            loss = loss_fn(logits.float(), yb)
            loss.backward()
            opt.step()
        float(loss)
        times.append(time.perf_counter() - start)
    result = {"seconds_per_epoch": times,
              "samples_per_second": [steps * args.global_batch / t for t in times],
              "global_batch_size": args.global_batch, "steps_per_epoch": steps,
              "loss": float(loss), "precision": args.precision, "torch_threads": args.threads,
              "blas_threads": os.environ.get("OPENBLAS_NUM_THREADS", ""),
              "omp_threads": os.environ.get("OMP_NUM_THREADS", ""),
              "torch_version": torch.__version__}
    if args.evaluate:
        xt, yt = load(args.data_dir, "test")
        xt = torch.from_numpy(xt.astype(np.float32) / 255.0)
        yt = torch.from_numpy(yt.astype(np.int64))
        correct = 0
        model.eval()
        with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            for i in range(0, xt.shape[0], 1000):
                correct += int((model(xt[i:i + 1000]).argmax(1) == yt[i:i + 1000]).sum())
        result["test_accuracy"] = correct / xt.shape[0]
    result["peak_rss_kb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    with open(args.out, "w") as f:
        json.dump(result, f)
    print(json.dumps(result))


if __name__ == "__main__":
    sys.exit(main())
