#!/usr/bin/python3
"""Data-parallel training with 2 replicas on a host where another job holds one core: a busy
loop pinned to CPU 0 (`taskset -c 0`) runs through every measured run. Beside PyTorch DDP
(gloo, 2 processes x 1 thread) on the same model and data: strata's MirroredStrategy (2
threads) as it is, MirroredStrategy with STRATA_SPIN_US=0 (waiters never spin long: the knob
docs/performance.md gives for shared cores, for comparison), and MultiWorkerMirroredStrategy
<Mpi> (2 processes); one replica of each alone, under the same busy loop, for reference.

What it shows: how a synchronous job behaves when its cores are not its own. A waiter that
spins while the replica it waits for shares a core with the busy loop keeps the scheduler
from moving that replica to the spinner's core (docs/performance.md, "How long a waiter
spins"). Each round runs every configuration once, in a fresh order (fixed-seed shuffle);
figures are medians over the rounds. One JSON line per configuration: examples/s, the ratio
to DDP's 2 processes, and the ratio to one replica of the same implementation alone.

    /usr/bin/python3 bench/shared_core.py --build build-perf [--rounds 5] [--models mlp,cnn]
"""
import argparse
import json
import os
import random
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from data_parallel import last_json, peer_env, run_env  # noqa: E402


def busy_loop():
    """A process that keeps CPU 0 busy until it is killed."""
    return subprocess.Popen(["taskset", "-c", "0", "sh", "-c", "while :; do :; done"])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--models", default="mlp")
    a = ap.parse_args()
    if (os.cpu_count() or 1) < 2:
        sys.exit("shared_core.py: needs at least 2 cores (one for the busy loop to share)")
    env = run_env()
    no_spin = dict(env, STRATA_SPIN_US="0")
    penv = peer_env(env, a.build)
    fm = os.path.join(a.build, "examples", "fashion_mnist")
    for model in a.models.split(","):
        steps = "300" if model == "mlp" else "60"
        common = ["--model", model, "--max-steps", steps, "--no-eval", "--quiet"]
        configs = {
            "one_device": ([fm] + common, env),
            "mirrored": ([fm] + common + ["--strategy", "mirrored", "--replicas", "2"], env),
            "mirrored_spin_0": ([fm] + common + ["--strategy", "mirrored", "--replicas", "2"], no_spin),
            "multi_worker_mirrored_mpi": (["mpirun", "-np", "2", fm] + common +
                                          ["--strategy", "multi_worker_mirrored", "--collective", "mpi"], env),
            "ddp_1": ([sys.executable, os.path.join(HERE, "pytorch_ddp.py"), "--model", model, "--nproc", "1"], penv),
            "ddp_2": ([sys.executable, os.path.join(HERE, "pytorch_ddp.py"), "--model", model, "--nproc", "2"], penv),
        }
        got = {k: [] for k in configs}
        shuffle = random.Random(2026)
        loop = busy_loop()
        try:
            for _ in range(a.rounds):
                order = list(configs)
                shuffle.shuffle(order)
                for k in order:
                    cmd, e = configs[k]
                    r = last_json(cmd, e)
                    got[k].append(r.get("steady_examples_per_s") or r["examples_per_s"])
        finally:
            loop.kill()
            loop.wait()
        med = {k: statistics.median(v) for k, v in got.items()}
        for k in ("mirrored", "mirrored_spin_0", "multi_worker_mirrored_mpi"):
            print(json.dumps({
                "bench": "shared_core", "model": model, "replicas": 2, "strategy": k, "rounds": a.rounds,
                "busy_loop": "taskset -c 0", "strata_img_s": round(med[k], 1), "peer": "pytorch_ddp_gloo_2x1",
                "peer_img_s": round(med["ddp_2"], 1), "ratio": round(med[k] / med["ddp_2"], 3),
                "vs_one_replica": round(med[k] / med["one_device"], 3),
                "peer_vs_one_replica": round(med["ddp_2"] / med["ddp_1"], 3),
                "one_replica_img_s": round(med["one_device"], 1),
                "runs": [round(x) for x in got[k]],
            }), flush=True)


if __name__ == "__main__":
    main()
