#!/usr/bin/python3
"""Single-process training speed and memory: strata against the PyTorch at hand, one thread each.

Runs strata's bench_train and pytorch_train.py alternately (A B A B ...) for each model and
batch size, each run reporting its median step time after warm-up, then prints one JSON line
per model and batch with both examples/s, the median (min, max) of the per-pair ratios
strata/PyTorch, and both peak RSS. On the CPU PyTorch runs the OpenBLAS kernels strata runs
(data_parallel.peer_env); with --device cuda both train on GPU 0 (bench_train_cuda, eager
PyTorch), float32 throughout unless --precision bf16: strata's bfloat16 policy against PyTorch's
forward under torch.autocast(dtype=torch.bfloat16).

    /usr/bin/python3 bench/train_vs_pytorch.py --build build [--pairs 5] [--models mlp,cnn] [--precision bf16]
    python3 bench/train_vs_pytorch.py --build build --device cuda --batches 64,512
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
    ap.add_argument("--batches", default="64")
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--precision", default="fp32", choices=["fp32", "bf16"],
                    help="bf16: strata's --precision bf16 against PyTorch's forward under autocast bfloat16")
    a = ap.parse_args()
    gpu = a.device == "cuda"
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", MKL_NUM_THREADS="1")
    strata_bin = os.path.join(a.build, "bench", "bench_train_cuda" if gpu else "bench_train")
    for model, batch in ((m, int(b)) for m in a.models.split(",") for b in a.batches.split(",")):
        warmup = 30 if batch <= 256 else 10
        steps = min(300 if model == "mlp" else 120, 60000 // batch - warmup)  # one pass over the data at most
        common = ["--model", model, "--batch", str(batch), "--steps", str(steps), "--warmup", str(warmup),
                  "--precision", a.precision]
        s_runs, p_runs = run_pairs([strata_bin, *common, "--device", "cuda:0" if gpu else "cpu"],
                                   [sys.executable, os.path.join(HERE, "pytorch_train.py"), *common,
                                    "--device", a.device], a.pairs, env,
                                   dict(env) if gpu else peer_env(env, a.build))
        print(json.dumps({
            "bench": "train", "device": a.device, "precision": a.precision, "model": model, "batch": batch, "replicas": 1, "threads": 1,
            "pairs": a.pairs,
            "strata": "one_device", "strata_img_s": statistics.median(r["examples_per_s"] for r in s_runs),
            "peer": p_runs[0]["impl"], "peer_img_s": statistics.median(r["examples_per_s"] for r in p_runs),
            **ratio_summary(s_runs, p_runs),
            "strata_peak_rss_mib": statistics.median(r["peak_rss_mib"] for r in s_runs),
            "peer_peak_rss_mib": statistics.median(r["peak_rss_mib"] for r in p_runs),
        }), flush=True)


if __name__ == "__main__":
    main()
