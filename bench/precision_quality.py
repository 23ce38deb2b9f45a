#!/usr/bin/python3
"""What 16-bit training costs in quality: a trainer under --precision fp32 and under bf16 (or
fp16), the same seeds, one thread each, the two precisions of a seed at once (this measures
quality, not speed). Prints one JSON line per seed and one with the means and their difference:
points of test accuracy for the Fashion-MNIST models, the relative difference of the
validation loss for the Transformer and of the held-out loss for skip-gram.

    /usr/bin/python3 bench/precision_quality.py --build build --model mlp --epochs 3 [--seeds 0,1,2]
    /usr/bin/python3 bench/precision_quality.py --build build --model resnet --epochs 2
    /usr/bin/python3 bench/precision_quality.py --build build --model transformer --steps 500
    /usr/bin/python3 bench/precision_quality.py --build build --model skip_gram [--steps 2000]
"""
import argparse
import json
import os
import statistics
import subprocess

from data_parallel import parse_last_json


def command(a, seed, precision):
    ex = os.path.join(a.build, "examples")
    common = ["--seed", seed, "--precision", precision, "--quiet"]
    if a.model == "transformer":
        steps = a.steps or 500
        return [os.path.join(ex, "char_transformer"), *common, "--steps", str(steps), "--eval-every",
                str(steps)], "validation_loss"
    if a.model == "skip_gram":
        return [os.path.join(ex, "skip_gram"), *common, "--steps", str(a.steps or 2000)], "held_out_loss"
    return [os.path.join(ex, "fashion_mnist"), *common, "--model", a.model, "--epochs", str(a.epochs)], "test_accuracy"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--model", default="mlp", choices=["mlp", "cnn", "resnet", "transformer", "skip_gram"])
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--steps", type=int, default=None, help="the Transformer's (default 500), skip-gram's (2000)")
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--precision", default="bf16", choices=["bf16", "fp16"])
    a = ap.parse_args()
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
    values = {"fp32": [], a.precision: []}
    for seed in a.seeds.split(","):
        runs = {p: command(a, seed, p) for p in values}
        procs = {p: subprocess.Popen(c, stdout=subprocess.PIPE, text=True, env=env) for p, (c, _) in runs.items()}
        for p, proc in procs.items():
            out = proc.communicate()[0]
            if proc.returncode:
                raise subprocess.CalledProcessError(proc.returncode, runs[p][0])
            values[p].append(parse_last_json(out)[runs[p][1]])
        print(json.dumps({"bench": "precision_quality", "model": a.model, "seed": int(seed), "metric": runs["fp32"][1],
                          **{p: v[-1] for p, v in values.items()}}), flush=True)
    base, low = statistics.mean(values["fp32"]), statistics.mean(values[a.precision])
    metric = command(a, "0", "fp32")[1]
    summary = {"bench": "precision_quality", "model": a.model, "seeds": a.seeds, "metric": metric,
               "fp32_mean": round(base, 5), a.precision + "_mean": round(low, 5)}
    if metric == "test_accuracy":
        summary["difference_points"] = round(100 * (low - base), 2)
    else:
        summary["relative_difference"] = round((low - base) / base, 5)
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
