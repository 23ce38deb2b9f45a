#!/usr/bin/python3
"""Single-process training speed and memory: strata against PyTorch 1.13, one thread each.

Runs strata's bench_train and pytorch_train.py alternately (A B A B ...) for each model, each
run reporting its median step time after warm-up, then prints one JSON line per model with
both examples/s, the median (min, max) of the per-pair ratios strata/PyTorch, and both peak RSS.
PyTorch runs the OpenBLAS kernels strata runs (data_parallel.peer_env).

    /usr/bin/python3 bench/train_vs_pytorch.py --build build [--pairs 5] [--models mlp,cnn]
"""
import argparse
import json
import os
import statistics
import sys

from data_parallel import peer_env
from paired import ratio_summary, run_pairs

HERE = os.path.dirname(os.path.abspath(__file__))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--pairs", type=int, default=5)
    ap.add_argument("--models", default="mlp,cnn")
    a = ap.parse_args()
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", MKL_NUM_THREADS="1")
    strata_bin = os.path.join(a.build, "bench", "bench_train")
    for model in a.models.split(","):
        s_runs, p_runs = run_pairs([strata_bin, "--model", model],
                                   [sys.executable, os.path.join(HERE, "pytorch_train.py"), "--model", model], a.pairs, env,
                                   peer_env(env, a.build))
        print(json.dumps({
            "bench": "train", "model": model, "replicas": 1, "threads": 1, "pairs": a.pairs,
            "strata": "one_device", "strata_img_s": statistics.median(r["examples_per_s"] for r in s_runs),
            "peer": p_runs[0]["impl"], "peer_img_s": statistics.median(r["examples_per_s"] for r in p_runs),
            **ratio_summary(s_runs, p_runs),
            "strata_peak_rss_mib": statistics.median(r["peak_rss_mib"] for r in s_runs),
            "peer_peak_rss_mib": statistics.median(r["peak_rss_mib"] for r in p_runs),
        }), flush=True)


if __name__ == "__main__":
    main()
