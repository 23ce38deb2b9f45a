#!/usr/bin/python3
"""The ResNet's quality against PyTorch: examples/fashion_mnist --model resnet and
pytorch_train.py --model resnet each train E epochs (SGD, lr 0.05, momentum 0.9, batch 64, one
thread) from seeds 0, 1, 2 and report the test accuracy; prints one JSON line per seed and
one with the means and their difference (strata - PyTorch, in points). The two sides of a
seed run at once (this measures accuracy, not speed).

    /usr/bin/python3 bench/resnet_quality.py --build build [--epochs 2] [--seeds 0,1,2]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

from data_parallel import parse_last_json, peer_env

HERE = os.path.dirname(os.path.abspath(__file__))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--model", default="resnet")
    a = ap.parse_args()
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", MKL_NUM_THREADS="1")
    ours, peers = [], []
    for seed in a.seeds.split(","):
        common = ["--model", a.model, "--epochs", str(a.epochs), "--seed", seed]
        cmds = [([os.path.join(a.build, "examples", "fashion_mnist"), *common, "--quiet"], env),
                ([sys.executable, os.path.join(HERE, "pytorch_train.py"), *common], peer_env(env, a.build))]
        procs = [subprocess.Popen(c, stdout=subprocess.PIPE, text=True, env=e) for c, e in cmds]
        outs = [p.communicate()[0] for p in procs]
        for p, (c, _) in zip(procs, cmds):
            if p.returncode:
                raise subprocess.CalledProcessError(p.returncode, c)
        s, t = (parse_last_json(o) for o in outs)
        ours.append(s["test_accuracy"])
        peers.append(t["test_accuracy"])
        print(json.dumps({"bench": "quality", "model": a.model, "epochs": a.epochs, "seed": int(seed),
                          "strata_test_accuracy": s["test_accuracy"], "peer": t["impl"],
                          "peer_test_accuracy": t["test_accuracy"]}), flush=True)
    print(json.dumps({"bench": "quality", "model": a.model, "epochs": a.epochs, "seeds": a.seeds,
                      "strata_mean": round(statistics.mean(ours), 4), "peer_mean": round(statistics.mean(peers), 4),
                      "difference_points": round(100 * (statistics.mean(ours) - statistics.mean(peers)), 2)}))


if __name__ == "__main__":
    main()
