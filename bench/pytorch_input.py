#!/usr/bin/python3
"""PyTorch's side of input_vs_pytorch.py: assembles shuffled Fashion-MNIST batches the way
pytorch_train.py and pytorch_ddp.py do (x[idx], y[idx] from tensors in memory) and prints the
median time per batch after warm-up as one JSON line.

    /usr/bin/python3 bench/pytorch_input.py [--batches N] [--warmup W] [--batch B]
"""
import argparse
import json
import os
import time

import numpy as np
import torch

from pytorch_train import read_idx


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--batches", type=int, default=400)
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--data", default=os.environ.get("STRATA_FASHION_MNIST_DIR", "/usr/share/datasets/fashion-mnist"))
    a = ap.parse_args()
    torch.set_num_threads(1)
    x = torch.from_numpy(read_idx(os.path.join(a.data, "train-images-idx3-ubyte.gz")).astype(np.float32) / 255.0)
    x = x.reshape(-1, 1, 28, 28)
    y = torch.from_numpy(read_idx(os.path.join(a.data, "train-labels-idx1-ubyte.gz")).astype(np.int64))
    order = torch.from_numpy(np.random.default_rng(0).permutation(len(x)))
    times, checksum = [], 0.0
    for k in range(a.warmup + a.batches):
        t0 = time.perf_counter()
        idx = order[k * a.batch:(k + 1) * a.batch]
        xb, yb = x[idx], y[idx]
        times.append((time.perf_counter() - t0) * 1e6)
        checksum += float(xb[-1, 0, 27, 27]) + float(yb[-1])
    timed = sorted(times[a.warmup:])
    median = timed[len(timed) // 2]
    print(json.dumps({"impl": "pytorch-" + torch.__version__, "batch": a.batch, "batches": len(timed),
                      "median_batch_us": round(median, 2), "examples_per_s": round(1e6 * a.batch / median, 1),
                      "checksum": round(checksum, 3)}))


if __name__ == "__main__":
    main()
