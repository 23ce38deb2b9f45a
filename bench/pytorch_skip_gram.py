#!/usr/bin/python3
"""examples/skip_gram's run in PyTorch: skip-gram with negative sampling on the words of
Debian's fortunes, two nn.Embedding(sparse=True) tables and SparseAdam, the same words,
vocabulary, pairs, noise distribution, initialisation scheme, batch and held-out split (the
negatives are drawn by NumPy's generator, not strata's). Prints one JSON line like the example's.
With --nproc N, N processes x 1 thread train under DistributedDataParallel (gloo over
127.0.0.1, its sparse all-reduce of the tables' gradients), batch B per process, each taking
its share of the global batch; rank 0 reports.

    /usr/bin/python3 bench/pytorch_skip_gram.py [--steps 2000] [--batch 1024] [--seed 0] [--nproc 1]
"""
import argparse
import json
import os
import re
import socket
import time

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def fortunes_text(d):
    files = sorted(f for f in os.listdir(d)
                   if os.path.isfile(os.path.join(d, f)) and not os.path.islink(os.path.join(d, f))
                   and not f.endswith(".dat"))
    return b"".join(open(os.path.join(d, f), "rb").read() for f in files)


def corpus(text, min_count):
    """strata::data::WordCorpus: ASCII letters with inner apostrophes, lower-cased; the words
    seen min_count times, by descending count then bytes."""
    words = [w.lower() for w in re.findall(rb"[A-Za-z]+(?:'[A-Za-z]+)*", text)]
    counts = {}
    for w in words:
        counts[w] = counts.get(w, 0) + 1
    vocab = sorted((w for w, c in counts.items() if c >= min_count), key=lambda w: (-counts[w], w))
    index = {w: i for i, w in enumerate(vocab)}
    tokens = np.array([index[w] for w in words if w in index], dtype=np.int64)
    return vocab, np.array([counts[w] for w in vocab], dtype=np.int64), tokens


def skip_gram_rows(tokens, counts, window, negatives, rng):
    """strata::data::skip_gram_rows: [center, context, negatives...] for every pair in the window."""
    n = len(tokens)
    centers, contexts = [], []
    for off in range(-window, window + 1):
        if off == 0:
            continue
        i = np.arange(max(0, -off), min(n, n - off))
        centers.append(i)
        contexts.append(i + off)
    i = np.concatenate(centers)
    j = np.concatenate(contexts)
    order = np.lexsort((j, i))  # by center, then context: strata's order
    i, j = i[order], j[order]
    cumulative = np.cumsum(counts.astype(np.float64) ** 0.75)
    noise = np.searchsorted(cumulative, rng.random((len(i), negatives)) * cumulative[-1], side="right")
    noise = np.minimum(noise, len(counts) - 1)
    return np.concatenate([tokens[i][:, None], tokens[j][:, None], noise], axis=1)


class SkipGram(torch.nn.Module):
    """Two nn.Embedding(sparse=True) tables: the center's vector against its context's and
    the noise words'."""

    def __init__(self, V, D):
        super().__init__()
        self.emb_in = torch.nn.Embedding(V, D, sparse=True)
        self.emb_out = torch.nn.Embedding(V, D, sparse=True)
        with torch.no_grad():
            self.emb_in.weight.uniform_(-0.5 / D, 0.5 / D)
            self.emb_out.weight.zero_()

    def forward(self, rows):
        return (self.emb_out(rows[:, 1:]) * self.emb_in(rows[:, :1])).sum(2)


def worker(rank, a, port):
    torch.set_num_threads(1)
    torch.manual_seed(a.seed)
    if a.nproc > 1:
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=a.nproc)
    vocab, counts, tokens = corpus(fortunes_text(a.data), a.min_count)
    split = len(tokens) * 9 // 10
    train = torch.from_numpy(skip_gram_rows(tokens[:split], counts, a.window, a.negatives,
                                            np.random.default_rng(a.seed + 7)))
    held = torch.from_numpy(skip_gram_rows(tokens[split:], counts, a.window, a.negatives,
                                           np.random.default_rng(12345))[:a.eval_rows])
    V, D, k1 = len(vocab), a.dim, 1 + a.negatives
    net = SkipGram(V, D)
    model = torch.nn.parallel.DistributedDataParallel(net) if a.nproc > 1 else net
    opt = torch.optim.SparseAdam(list(net.parameters()), lr=a.lr)

    def pair_loss(logits, targets):
        return torch.nn.functional.binary_cross_entropy_with_logits(logits, targets, reduction="sum") / logits.shape[0]

    targets = torch.zeros(a.batch, k1)
    targets[:, 0] = 1
    gen = torch.Generator().manual_seed(a.seed)
    gb = a.batch * a.nproc  # the global batch; this process takes its share of each
    step, seconds, step_ms, loss = 0, 0.0, [], float("nan")
    while step < a.steps:
        perm = torch.randperm(len(train), generator=gen)
        for b in range(0, len(train) - gb + 1, gb):
            if step == a.steps:
                break
            t0 = time.perf_counter()
            rows = train[perm[b + rank * a.batch:b + (rank + 1) * a.batch]]
            opt.zero_grad()
            l = pair_loss(model(rows), targets)  # DDP averages the processes' gradients: the global batch's mean
            l.backward()
            opt.step()
            dt = time.perf_counter() - t0
            seconds += dt
            step_ms.append(dt * 1000)
            loss = l.item()
            step += 1
    with torch.no_grad():
        held_targets = torch.zeros(len(held), k1)
        held_targets[:, 0] = 1
        held_loss = pair_loss(net(held), held_targets).item()
    warm = min(10, len(step_ms) // 10)
    tail = sorted(step_ms[warm:])
    if rank == 0:
        print(json.dumps({"model": "skip_gram", "impl": "pytorch_" + torch.__version__ + ("_ddp_gloo" if a.nproc > 1 else ""),
                          "replicas": a.nproc, "steps": step,
                          "train_loss": round(loss, 5), "held_out_loss": round(held_loss, 5),
                          "pairs_per_s": round(step * gb / seconds, 1),
                          "median_step_ms": round(tail[len(tail) // 2], 4)}), flush=True)
    if a.nproc > 1:
        dist.destroy_process_group()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=2000)
    ap.add_argument("--batch", type=int, default=1024)
    ap.add_argument("--dim", type=int, default=64)
    ap.add_argument("--window", type=int, default=2)
    ap.add_argument("--negatives", type=int, default=5)
    ap.add_argument("--min-count", type=int, default=2)
    ap.add_argument("--lr", type=float, default=0.01)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--eval-rows", type=int, default=20000)
    ap.add_argument("--nproc", type=int, default=1)
    ap.add_argument("--data", default=os.environ.get("STRATA_FORTUNES_DIR", "/usr/share/games/fortunes"))
    a = ap.parse_args()
    if a.nproc == 1:
        worker(0, a, 0)
        return
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.spawn(worker, args=(a, port), nprocs=a.nproc, join=True)


if __name__ == "__main__":
    main()
