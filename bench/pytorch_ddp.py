#!/usr/bin/python3
"""PyTorch DDP's side of data_parallel.py: the reference model trained by N processes x 1 thread
with the gloo backend over 127.0.0.1, batch B per process; rank 0 prints the global examples/s
over the timed steps (wall time, batches assembled inside the loop as a training run does).

    /usr/bin/python3 bench/pytorch_ddp.py --model mlp|cnn --nproc 2 [--steps N] [--warmup W] [--precision bf16]

--precision bf16 runs the forward and the loss under CPU autocast bfloat16 (float32 master weights
and float32 gradients on the wire, as DDP keeps them).
"""
import argparse
import json
import os
import socket
import time

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn

from pytorch_train import make, read_idx


def worker(rank, a, port):
    torch.set_num_threads(1)
    torch.manual_seed(0)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=a.nproc)
    x = torch.from_numpy(read_idx(os.path.join(a.data, "train-images-idx3-ubyte.gz")).astype(np.float32) / 255.0)
    x = x.reshape(-1, 1, 28, 28)
    y = torch.from_numpy(read_idx(os.path.join(a.data, "train-labels-idx1-ubyte.gz")).astype(np.int64))
    order = torch.from_numpy(np.random.default_rng(0).permutation(len(x)))
    model = nn.parallel.DistributedDataParallel(make(a.model))
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    gb = a.batch * a.nproc
    t0 = None
    for k in range(a.warmup + a.steps):
        if k == a.warmup:
            dist.barrier()
            t0 = time.perf_counter()
        idx = order[(k * gb + rank * a.batch) % (len(x) - gb):][:a.batch]
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=a.precision == "bf16"):
            loss = loss_fn(model(x[idx]), y[idx])
        loss.backward()
        opt.step()
        loss.item()
    dist.barrier()
    elapsed = time.perf_counter() - t0
    if rank == 0:
        print(json.dumps({"impl": "pytorch-ddp-gloo-" + torch.__version__, "model": a.model, "nproc": a.nproc,
                          "precision": a.precision,
                          "steps": a.steps, "examples_per_s": round(a.steps * gb / elapsed, 1)}), flush=True)
    dist.destroy_process_group()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="mlp")
    ap.add_argument("--nproc", type=int, default=2)
    ap.add_argument("--steps", type=int, default=None)
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--precision", default="fp32", choices=["fp32", "bf16"])
    ap.add_argument("--data", default=os.environ.get("STRATA_FASHION_MNIST_DIR", "/usr/share/datasets/fashion-mnist"))
    a = ap.parse_args()
    a.steps = a.steps or (300 if a.model == "mlp" else 60)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.spawn(worker, args=(a, port), nprocs=a.nproc, join=True)


if __name__ == "__main__":
    main()
