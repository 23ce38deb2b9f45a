#!/usr/bin/python3
"""Single-process training speed and memory: strata against PyTorch 1.13, one thread each.

Runs strata's bench_train and pytorch_train.py alternately (A B A B ...) for each model, each
run reporting its median step time after warm-up, then prints one JSON line per model with
both examples/s, the median (min, max) of the per-pair ratios strata/PyTorch, and both peak RSS.

    /usr/bin/python3 bench/train_vs_pytorch.py --build build [--pairs 5] [--models mlp,cnn]
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
    ap.add_argument("--models", default="mlp,cnn")
    a = ap.parse_args()
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", MKL_NUM_THREADS="1")
    strata_bin = os.path.join(a.build, "bench", "bench_train")
    for model in a.models.split(","):
        s_runs, p_runs = [], []
        for _ in range(a.pairs):
            s_runs.append(run([strata_bin, "--model", model], env))
            p_runs.append(run([sys.executable, os.path.join(HERE, "pytorch_train.py"), "--model", model], env))
        ratios = [s["examples_per_s"] / p["examples_per_s"] for s, p in zip(s_runs, p_runs)]
        print(json.dumps({
            "bench": "train", "model": model, "replicas": 1, "threads": 1, "pairs": a.pairs,
            "strata": "one_device", "strata_img_s": statistics.median(r["examples_per_s"] for r in s_runs),
            "peer": p_runs[0]["impl"], "peer_img_s": statistics.median(r["examples_per_s"] for r in p_runs),
            "ratio": round(statistics.median(ratios), 3), "ratio_min": round(min(ratios), 3),
            "ratio_max": round(max(ratios), 3),
            "strata_peak_rss_mib": statistics.median(r["peak_rss_mib"] for r in s_runs),
            "peer_peak_rss_mib": statistics.median(r["peak_rss_mib"] for r in p_runs),
        }), flush=True)


if __name__ == "__main__":
    main()
