#!/usr/bin/python3
"""PyTorch's side of train_vs_pytorch.py: the reference model, trained on Fashion-MNIST on one
thread; prints the median step time after warm-up and the peak RSS as one JSON line. With
--device cuda each timed step copies the batch in and ends with the loss on the host, as
bench_train_cuda's does, and float32 stays float32 (no TF32 in cuDNN, whose default is TF32).

    /usr/bin/python3 bench/pytorch_train.py --model mlp|cnn|resnet [--steps N] [--warmup W] [--device cuda]

With --epochs E it trains E whole epochs instead (shuffled anew each epoch, the last batch
short) and adds the test accuracy, as examples/fashion_mnist reports it (resnet_quality.py).
"""
import argparse
import gzip
import json
import os
import resource
import time

import numpy as np
import torch
import torch.nn as nn


def read_idx(path):
    with gzip.open(path, "rb") if path.endswith(".gz") else open(path, "rb") as f:
        data = f.read()
    nd = data[3]
    dims = [int.from_bytes(data[4 + 4 * i: 8 + 4 * i], "big") for i in range(nd)]
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * nd).reshape(dims)


class BasicBlock(nn.Module):
    """torchvision's basic block: strata::nn::BasicBlock's shape and names."""

    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.downsample = None
        if stride != 1 or cin != cout:
            self.downsample = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, 0, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        h = torch.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(h))
        return torch.relu(y + (self.downsample(x) if self.downsample is not None else x))


def make(model):
    if model == "resnet":  # strata::models::fashion_mnist_resnet
        return nn.Sequential(nn.Conv2d(1, 32, 3, 1, 1, bias=False), nn.BatchNorm2d(32), nn.ReLU(),
                             BasicBlock(32, 32, 2), BasicBlock(32, 64, 2), BasicBlock(64, 128, 2),
                             nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(128, 10))
    if model == "mlp":
        return nn.Sequential(nn.Flatten(), nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(),
                             nn.Linear(512, 10))
    return nn.Sequential(nn.Conv2d(1, 32, 5), nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(32, 64, 5), nn.ReLU(),
                         nn.MaxPool2d(2), nn.Flatten(), nn.Linear(1024, 128), nn.ReLU(), nn.Linear(128, 10))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="mlp")
    ap.add_argument("--steps", type=int, default=None)
    ap.add_argument("--warmup", type=int, default=30)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--epochs", type=int, default=0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--precision", default="fp32", choices=["fp32", "bf16"], help="bf16: the forward under autocast")
    ap.add_argument("--data", default=os.environ.get("STRATA_FASHION_MNIST_DIR", "/usr/share/datasets/fashion-mnist"))
    a = ap.parse_args()
    steps = a.steps or (300 if a.model == "mlp" else 120)
    torch.set_num_threads(1)
    torch.manual_seed(a.seed)
    x = torch.from_numpy(read_idx(os.path.join(a.data, "train-images-idx3-ubyte.gz")).astype(np.float32) / 255.0)
    x = x.reshape(-1, 1, 28, 28)
    y = torch.from_numpy(read_idx(os.path.join(a.data, "train-labels-idx1-ubyte.gz")).astype(np.int64))
    rng = np.random.default_rng(a.seed)
    order = torch.from_numpy(rng.permutation(len(x)))
    dev = torch.device(a.device)
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    model = make(a.model).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    times = []
    if a.epochs:  # whole epochs: every row once per epoch, the last batch short
        per_epoch = (len(x) + a.batch - 1) // a.batch
        steps, a.warmup = a.epochs * per_epoch - min(30, per_epoch), min(30, per_epoch)
        order = torch.cat([torch.from_numpy(rng.permutation(len(x))) for _ in range(a.epochs)])
    for k in range(a.warmup + steps):
        if a.epochs:
            e, j = divmod(k, per_epoch)
            idx = order[e * len(x) + j * a.batch:e * len(x) + min(len(x), (j + 1) * a.batch)]
        else:
            idx = order[k * a.batch:(k + 1) * a.batch]
        xb, yb = x[idx], y[idx]  # the batch is assembled outside the timed step, as strata prefetches it
        t0 = time.perf_counter()
        xb, yb = xb.to(dev), yb.to(dev)
        opt.zero_grad(set_to_none=True)
        with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=a.precision == "bf16"):
            loss = loss_fn(model(xb), yb)
        loss.backward()
        opt.step()
        loss.item()
        times.append((time.perf_counter() - t0) * 1000.0)
    timed = sorted(times[a.warmup:])
    median = timed[len(timed) // 2]
    report = {"impl": "pytorch-" + torch.__version__, "device": dev.type, "precision": a.precision, "batch": a.batch, "model": a.model, "steps": len(timed),
              "median_step_ms": round(median, 4), "examples_per_s": round(1000.0 * a.batch / median, 1),
              "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0, 1)}
    if a.epochs:
        tx = torch.from_numpy(read_idx(os.path.join(a.data, "t10k-images-idx3-ubyte.gz")).astype(np.float32) / 255.0)
        ty = torch.from_numpy(read_idx(os.path.join(a.data, "t10k-labels-idx1-ubyte.gz")).astype(np.int64))
        model.eval()
        with torch.no_grad():
            right = sum((model(tx[i:i + 1000].reshape(-1, 1, 28, 28).to(dev)).argmax(1).cpu() == ty[i:i + 1000]).sum().item()
                        for i in range(0, len(tx), 1000))
        report.update(epochs=a.epochs, seed=a.seed, final_loss=round(loss.item(), 6), test_accuracy=round(right / len(tx), 4))
    print(json.dumps(report))


if __name__ == "__main__":
    main()
