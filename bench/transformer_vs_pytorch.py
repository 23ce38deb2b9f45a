#!/usr/bin/python3
"""The character Transformer against PyTorch, one thread each: examples/char_transformer and
pytorch_transformer.py alternately (A B A B ...) with the same shape, batch, steps and seed,
each reporting its median step time, its final training and validation losses and its peak
RSS; prints one JSON line per seed with the medians, the per-pair ratios of step speed
(PyTorch's median step time / strata's) and the validation losses of both.

    /usr/bin/python3 bench/transformer_vs_pytorch.py --build build [--pairs 3] [--steps 200] [--seeds 0] [--precision bf16]

With --device cuda both train on the GPU: examples/char_transformer_cuda --device cuda:0 and
PyTorch on cuda, float32 without TF32 on both sides.
"""
import argparse
import json
import os
import statistics
import sys

from data_parallel import peer_env
from paired import run_pairs

HERE = os.path.dirname(os.path.abspath(__file__))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--pairs", type=int, default=3)
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--context", type=int, default=64)
    ap.add_argument("--seeds", default="0")
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--precision", default="fp32", choices=["fp32", "bf16"],
                    help="bf16: strata's --precision bf16 against PyTorch's forward under autocast bfloat16")
    a = ap.parse_args()
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", MKL_NUM_THREADS="1")
    for seed in a.seeds.split(","):
        common = ["--steps", str(a.steps), "--batch", str(a.batch), "--context", str(a.context), "--seed", seed,
                  "--precision", a.precision]
        gpu = a.device == "cuda"
        strata_cmd = [os.path.join(a.build, "examples", "char_transformer_cuda" if gpu else "char_transformer"), *common,
                      "--eval-every", str(a.steps), "--quiet"] + (["--device", "cuda:0"] if gpu else [])
        s_runs, p_runs = run_pairs(
            strata_cmd, [sys.executable, os.path.join(HERE, "pytorch_transformer.py"), *common, "--device", a.device],
            a.pairs, env, peer_env(env, a.build))
        ratios = [p["median_step_ms"] / s["median_step_ms"] for s, p in zip(s_runs, p_runs)]
        median = lambda runs, key: round(statistics.median(r[key] for r in runs), 5)
        print(json.dumps({
            "bench": "char_transformer", "precision": a.precision, "threads": 1, "steps": a.steps, "batch": a.batch, "context": a.context,
            "seed": int(seed), "pairs": a.pairs, "peer": p_runs[0]["impl"],
            "strata_step_ms": median(s_runs, "median_step_ms"), "peer_step_ms": median(p_runs, "median_step_ms"),
            "ratio": round(statistics.median(ratios), 3), "ratio_min": round(min(ratios), 3),
            "ratio_max": round(max(ratios), 3),
            "strata_validation_loss": median(s_runs, "validation_loss"),
            "peer_validation_loss": median(p_runs, "validation_loss"),
            "strata_train_loss": median(s_runs, "train_loss"), "peer_train_loss": median(p_runs, "train_loss"),
            "strata_peak_rss_mib": median(s_runs, "peak_rss_mib"), "peer_peak_rss_mib": median(p_runs, "peak_rss_mib"),
        }), flush=True)


if __name__ == "__main__":
    main()
