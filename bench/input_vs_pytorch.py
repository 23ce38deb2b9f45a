#!/usr/bin/python3
"""Input speed: assembling a shuffled Fashion-MNIST batch (gathering its rows from the
training set in memory, one thread), strata's Pipeline against PyTorch's x[idx], y[idx].

Runs bench_input and pytorch_input.py alternately (A B A B ...), each reporting its median
time per batch after warm-up, and prints one JSON line per batch size with both, and the
median (min, max) of the per-pair ratios of examples/s strata/PyTorch.

    /usr/bin/python3 bench/input_vs_pytorch.py --build build [--pairs 5] [--batches 64,128]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def run(cmd, env):
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, env=env).stdout
    return json.loads(out.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--pairs", type=int, default=5)
    ap.add_argument("--batches", default="64,128")
    a = ap.parse_args()
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", MKL_NUM_THREADS="1")
    strata_bin = os.path.join(a.build, "bench", "bench_input")
    for batch in a.batches.split(","):
        s_runs, p_runs = [], []
        for _ in range(a.pairs):
            s_runs.append(run([strata_bin, "--batch", batch], env))
            p_runs.append(run([sys.executable, os.path.join(HERE, "pytorch_input.py"), "--batch", batch], env))
        ratios = [s["examples_per_s"] / p["examples_per_s"] for s, p in zip(s_runs, p_runs)]
        print(json.dumps({
            "bench": "input", "batch": int(batch), "pairs": a.pairs,
            "strata_batch_us": statistics.median(r["median_batch_us"] for r in s_runs),
            "peer": p_runs[0]["impl"], "peer_batch_us": statistics.median(r["median_batch_us"] for r in p_runs),
            "ratio": round(statistics.median(ratios), 3), "ratio_min": round(min(ratios), 3),
            "ratio_max": round(max(ratios), 3),
        }), flush=True)


if __name__ == "__main__":
    main()
