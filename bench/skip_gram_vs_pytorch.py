#!/usr/bin/python3
"""Skip-gram word vectors against PyTorch, one thread each: examples/skip_gram (row-sparse
tables, lazy Adam) and pytorch_skip_gram.py (nn.Embedding(sparse=True), SparseAdam)
alternately (A B A B ...) with the same words, pairs, batch, steps and seed; prints one JSON
line per seed with the median step times, the per-pair ratio of step speed (PyTorch's median
step time / strata's), pairs/s and the held-out losses, then the held-out losses' means over
the seeds and their relative difference. With --replicas N: N workers of batch B each,
MultiWorkerMirroredStrategy<Mpi> (mpirun -np N; the tables' rows gathered or all-reduced by
density) against PyTorch DDP (gloo, N processes x 1 thread, its sparse all-reduce).

    /usr/bin/python3 bench/skip_gram_vs_pytorch.py --build build [--pairs 3] [--steps 2000] [--seeds 0,1,2]
                                                   [--replicas 2]
"""
import argparse
import json
import os
import statistics
import sys

from data_parallel import peer_env, run_env
from paired import run_pairs

HERE = os.path.dirname(os.path.abspath(__file__))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--pairs", type=int, default=3)
    ap.add_argument("--steps", type=int, default=2000)
    ap.add_argument("--batch", type=int, default=1024)
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--replicas", type=int, default=1)
    a = ap.parse_args()
    env = dict(run_env(), MKL_NUM_THREADS="1")
    example = os.path.join(a.build, "examples", "skip_gram")
    launch, across = [], []
    if a.replicas > 1:
        launch = ["mpirun", "-np", str(a.replicas)]
        across = ["--strategy", "multi_worker_mirrored", "--collective", "mpi"]
    held = {"strata": [], "peer": []}
    for seed in a.seeds.split(","):
        common = ["--steps", str(a.steps), "--batch", str(a.batch), "--seed", seed]
        s_runs, p_runs = run_pairs(
            [*launch, example, *common, *across, "--eval-every", str(a.steps), "--quiet"],
            [sys.executable, os.path.join(HERE, "pytorch_skip_gram.py"), *common, "--nproc", str(a.replicas)], a.pairs,
            env, peer_env(env, a.build))
        ratios = [p["median_step_ms"] / s["median_step_ms"] for s, p in zip(s_runs, p_runs)]
        median = lambda runs, key: round(statistics.median(r[key] for r in runs), 5)
        held["strata"].append(median(s_runs, "held_out_loss"))
        held["peer"].append(median(p_runs, "held_out_loss"))
        print(json.dumps({
            "bench": "skip_gram", "threads": 1, "replicas": a.replicas,
            "strata": "multi_worker_mirrored_mpi" if a.replicas > 1 else "one_device", "steps": a.steps, "batch": a.batch, "seed": int(seed),
            "pairs": a.pairs, "peer": p_runs[0]["impl"],
            "strata_step_ms": median(s_runs, "median_step_ms"), "peer_step_ms": median(p_runs, "median_step_ms"),
            "ratio": round(statistics.median(ratios), 3), "ratio_min": round(min(ratios), 3),
            "ratio_max": round(max(ratios), 3),
            "strata_pairs_per_s": median(s_runs, "pairs_per_s"), "peer_pairs_per_s": median(p_runs, "pairs_per_s"),
            "strata_held_out_loss": held["strata"][-1], "peer_held_out_loss": held["peer"][-1],
        }), flush=True)
    s_mean, p_mean = statistics.mean(held["strata"]), statistics.mean(held["peer"])
    print(json.dumps({"bench": "skip_gram_quality", "replicas": a.replicas, "seeds": a.seeds, "steps": a.steps,
                      "strata_held_out_mean": round(s_mean, 5), "peer_held_out_mean": round(p_mean, 5),
                      "relative_difference": round((s_mean - p_mean) / p_mean, 5)}))


if __name__ == "__main__":
    main()
