#!/usr/bin/python3
"""The reference ResNet's convolutions one at a time, one thread: strata (bench_conv, float32
and bfloat16 in one process) against PyTorch's conv2d in float32 and under CPU autocast
bfloat16, forward and backward, batch 64.

Each pair runs bench_conv once and then this script's PyTorch side over the shapes bench_conv
printed, in a process of its own: the fastest of --reps passes of each convolution's forward
and of its backward (the gradient of the output's sum; the stem's input needs none), as
bench_conv times its own. One JSON line per convolution with forward + backward milliseconds
of both sides in both precisions and the medians (min, max) over pairs of PyTorch's time over
strata's, in bfloat16 and in float32 (above 1, strata is faster); then the same over all ten.

    /usr/bin/python3 bench/conv_vs_pytorch.py --build build [--pairs 3] [--reps 30]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.abspath(__file__)


def peer(shapes_json, reps):
    """PyTorch's side: [fp32 ms, bf16 ms] (forward + backward, each its fastest pass) per shape."""
    import torch
    import torch.nn.functional as F
    torch.set_num_threads(1)
    torch.manual_seed(7)
    out = []
    for s in json.loads(shapes_json):
        times = []
        for bf16 in (False, True):
            x = torch.empty(s["batch"], s["in"], s["size"], s["size"]).uniform_(-1, 1).requires_grad_(s["input_grad"])
            w = torch.empty(s["out"], s["in"], s["kernel"], s["kernel"]).uniform_(-0.5, 0.5).requires_grad_(True)
            fwd = bwd = float("inf")
            for _ in range(reps):
                t0 = time.perf_counter()
                with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
                    y = F.conv2d(x, w, stride=s["stride"], padding=s["pad"])
                t1 = time.perf_counter()
                loss = y.float().sum()
                t2 = time.perf_counter()
                loss.backward()
                t3 = time.perf_counter()
                fwd, bwd = min(fwd, t1 - t0), min(bwd, t3 - t2)
                x.grad = w.grad = None
            times.append(1e3 * (fwd + bwd))
        out.append(times)
    print(json.dumps(out))


def summary(conv, per):
    """The JSON line of one convolution (or of all): the medians of each side's milliseconds over
    the pairs, and PyTorch's time over strata's per pair, as [median, min, max]."""
    def ratio(peer, mine):
        q = [p / s for p, s in zip(per[peer], per[mine])]
        return [round(statistics.median(q), 3), round(min(q), 3), round(max(q), 3)]
    return {"bench": "conv_vs_pytorch", "conv": conv, "pairs": len(per["strata_bf16"]),
            **{k + "_ms": round(statistics.median(v), 4) for k, v in per.items()},
            "bf16_ratio": ratio("peer_bf16", "strata_bf16"), "fp32_ratio": ratio("peer_fp32", "strata_fp32")}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--pairs", type=int, default=3)
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--peer", help=argparse.SUPPRESS)  # the PyTorch side, run by this script
    a = ap.parse_args()
    if a.peer is not None:
        return peer(a.peer, a.reps)
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", MKL_NUM_THREADS="1")
    strata_cmd = [os.path.join(a.build, "bench", "bench_conv"), "--precision", "bf16", "--reps", str(a.reps)]
    runs = []  # per pair: (strata's lines, PyTorch's times)
    for _ in range(a.pairs):
        out = subprocess.run(strata_cmd, check=True, capture_output=True, text=True, env=env).stdout
        lines = [json.loads(l) for l in out.splitlines() if l.startswith("{")]
        convs = [l for l in lines if l["conv"] != "all"]
        peer_out = subprocess.run([sys.executable, HERE, "--peer", json.dumps(convs), "--reps", str(a.reps)],
                                  check=True, capture_output=True, text=True, env=env).stdout
        runs.append((convs, json.loads(peer_out)))
    names = [c["conv"] for c in runs[0][0]]
    totals = {k: [0.0] * a.pairs for k in ("strata_fp32", "strata_bf16", "peer_fp32", "peer_bf16")}
    for i, name in enumerate(names):
        per = {k: [] for k in totals}
        for p, (convs, peer_times) in enumerate(runs):
            c = convs[i]
            got = {"strata_fp32": c["fp32_forward_ms"] + c["fp32_backward_ms"],
                   "strata_bf16": c["forward_ms"] + c["backward_ms"],
                   "peer_fp32": peer_times[i][0], "peer_bf16": peer_times[i][1]}
            for k, v in got.items():
                per[k].append(v)
                totals[k][p] += v
        print(json.dumps({**summary(name, per), "batch": runs[0][0][i]["batch"]}), flush=True)
    print(json.dumps(summary("all", totals)))


if __name__ == "__main__":
    main()
