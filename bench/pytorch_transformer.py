#!/usr/bin/python3
"""PyTorch's side of transformer_vs_pytorch.py: the reference character Transformer
(strata::models::CharTransformer's shape, names and initialisation) trained on Debian's
fortunes as examples/char_transformer trains it — the same corpus, vocabulary, held-out tail
and windows, AdamW (betas 0.9/0.99, weight decay 0.1) on a cosine schedule with warm-up, the
global norm clipped to 1 — on one thread. Prints one JSON line: the final training and
validation losses (nats per character), the median step time after warm-up, characters per
second and the peak RSS.

    /usr/bin/python3 bench/pytorch_transformer.py [--steps 200] [--batch 32] [--seed 0] [--nproc 2]

With --device cuda it trains on the GPU (float32, TF32 off, as strata's float32).
With --nproc N it trains as PyTorch DDP: N processes x 1 thread, gloo over 127.0.0.1, batch
B per process (rank r takes the r-th B rows of each global batch of N x B); rank 0 reports.
"""
import argparse
import json
import math
import os
import resource
import socket
import time

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn


def fortunes_text(d):
    names = sorted(f for f in os.listdir(d) if not f.endswith(".dat") and os.path.isfile(os.path.join(d, f))
                   and not os.path.islink(os.path.join(d, f)))
    return b"".join(open(os.path.join(d, f), "rb").read() for f in names)


def windows(tokens, context):
    n = (len(tokens) - 1) // context
    x = tokens[:n * context].reshape(n, context)
    y = tokens[1:n * context + 1].reshape(n, context)
    return torch.from_numpy(x.astype(np.int64)), torch.from_numpy(y.astype(np.int64))


class Block(nn.Module):
    def __init__(self, width, heads):
        super().__init__()
        self.ln_1 = nn.LayerNorm(width)
        self.attn = nn.MultiheadAttention(width, heads, batch_first=True)
        self.ln_2 = nn.LayerNorm(width)
        self.mlp = nn.Sequential(nn.Linear(width, 4 * width), nn.GELU(), nn.Linear(4 * width, width))

    def forward(self, x, mask):
        h = self.ln_1(x)
        x = x + self.attn(h, h, h, attn_mask=mask, need_weights=False)[0]
        return x + self.mlp(self.ln_2(x))


class CharTransformer(nn.Module):
    def __init__(self, vocab, context, width, heads, layers):
        super().__init__()
        self.wte = nn.Embedding(vocab, width)
        self.wpe = nn.Embedding(context, width)
        self.h = nn.ModuleList(Block(width, heads) for _ in range(layers))
        self.ln_f = nn.LayerNorm(width)
        self.lm_head = nn.Linear(width, vocab, bias=False)
        for name, p in self.named_parameters():  # strata's scheme: GPT-2's
            if p.dim() == 1:
                if name.endswith("bias"):
                    nn.init.zeros_(p)
                continue
            residual = name.endswith("out_proj.weight") or name.endswith("mlp.2.weight")
            nn.init.normal_(p, 0.0, 0.02 / math.sqrt(2 * layers) if residual else 0.02)

    def forward(self, idx):
        t = idx.shape[1]
        mask = torch.triu(torch.full((t, t), float("-inf"), device=idx.device), diagonal=1)
        x = self.wte(idx) + self.wpe(torch.arange(t, device=idx.device))
        for b in self.h:
            x = b(x, mask)
        return self.lm_head(self.ln_f(x))


def cosine(step, peak, total, warmup, final):
    if step < warmup:
        return peak * (step + 1) / warmup
    progress = (step - warmup) / max(1, total - warmup)
    return final + 0.5 * (peak - final) * (1 + math.cos(math.pi * min(1.0, progress)))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--nproc", type=int, default=1)
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--warmup-steps", type=int, default=10, help="left out of the median step time")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--context", type=int, default=64)
    ap.add_argument("--width", type=int, default=128)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--eval-windows", type=int, default=256)
    ap.add_argument("--device", default="cpu", help="cpu, or cuda (one process)")
    ap.add_argument("--precision", default="fp32", choices=["fp32", "bf16"], help="bf16: the forward under autocast")
    ap.add_argument("--data", default=os.environ.get("STRATA_FORTUNES_DIR", "/usr/share/games/fortunes"))
    a = ap.parse_args()
    if a.nproc == 1:
        train(0, a, None)
        return
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.spawn(train, args=(a, port), nprocs=a.nproc, join=True)


def train(rank, a, port):
    torch.set_num_threads(1)
    if port is not None:
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=a.nproc)
    torch.manual_seed(a.seed)
    text = np.frombuffer(fortunes_text(a.data), dtype=np.uint8)
    vocab = np.unique(text)
    tokens = np.searchsorted(vocab, text)
    split = len(tokens) * 9 // 10
    x, y = windows(tokens[:split], a.context)
    vx, vy = windows(tokens[split:], a.context)
    vx, vy = vx[:a.eval_windows], vy[:a.eval_windows]
    model = CharTransformer(len(vocab), a.context, a.width, a.heads, a.layers)
    dev = torch.device(a.device)
    if dev.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        model = model.to(dev)
        x, y, vx, vy = x.to(dev), y.to(dev), vx.to(dev), vy.to(dev)
    net = nn.parallel.DistributedDataParallel(model) if port is not None else model
    opt = torch.optim.AdamW(model.parameters(), lr=a.lr, betas=(0.9, 0.99), eps=1e-8, weight_decay=0.1)
    warm = min(100, a.steps // 10)
    order = torch.from_numpy(np.random.default_rng(a.seed).permutation(len(x))).to(dev)
    loss_fn = nn.CrossEntropyLoss()
    times, loss = [], float("nan")
    for step in range(a.steps):
        first = (step * a.batch * a.nproc) % len(x) + rank * a.batch
        idx = order[first:][:a.batch]
        xb, yb = x[idx], y[idx]
        for g in opt.param_groups:
            g["lr"] = cosine(step, a.lr, a.steps, warm, a.lr / 10)
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=a.precision == "bf16"):
            out = loss_fn(net(xb).reshape(-1, len(vocab)), yb.reshape(-1))
        out.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        loss = out.item()
        times.append((time.perf_counter() - t0) * 1000.0)
    if rank != 0:
        return
    with torch.no_grad():
        model.eval()
        val = sum(loss_fn(model(vx[i:i + 64]).reshape(-1, len(vocab)), vy[i:i + 64].reshape(-1)).item() * vy[i:i + 64].numel()
                  for i in range(0, len(vx), 64)) / vy.numel()
    timed = sorted(times[a.warmup_steps:]) or sorted(times)
    median = timed[len(timed) // 2]
    print(json.dumps({"impl": "pytorch-" + torch.__version__, "model": "char_transformer", "precision": a.precision,
                      "steps": a.steps,
                      "batch": a.batch, "nproc": a.nproc, "train_loss": round(loss, 5), "validation_loss": round(val, 5),
                      "median_step_ms": round(median, 4), "chars_per_s": round(1000.0 * a.nproc * a.batch * a.context / median, 1),
                      "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0, 1)}))


if __name__ == "__main__":
    main()
