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
import sys

from paired import ratio_summary, run_pairs

HERE = os.path.dirname(os.path.abspath(__file__))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--pairs", type=int, default=5)
    ap.add_argument("--batches", default="64,128")
    a = ap.parse_args()
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", MKL_NUM_THREADS="1")
    strata_bin = os.path.join(a.build, "bench", "bench_input")
    for batch in a.batches.split(","):
        s_runs, p_runs = run_pairs([strata_bin, "--batch", batch],
                                   [sys.executable, os.path.join(HERE, "pytorch_input.py"), "--batch", batch], a.pairs, env)
        print(json.dumps({
            "bench": "input", "batch": int(batch), "pairs": a.pairs,
            "strata_batch_us": statistics.median(r["median_batch_us"] for r in s_runs),
            "peer": p_runs[0]["impl"], "peer_batch_us": statistics.median(r["median_batch_us"] for r in p_runs),
            **ratio_summary(s_runs, p_runs),
        }), flush=True)


if __name__ == "__main__":
    main()
