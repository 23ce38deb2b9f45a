#!/usr/bin/python3
"""Two replicas of the character Transformer against PyTorch DDP: examples/char_transformer on
one device, Mirrored over 2 threads and MultiWorkerMirrored over 2 mpirun processes, against
pytorch_transformer.py with --nproc 1 and 2 (DDP, gloo), batch B per replica, in shuffled
rounds. Prints one JSON line per strata strategy: global characters/s from the median step
time, the ratio to DDP's, and both sides' scaling from one replica to two, the first two also
taken within each round ([min, median, max] over the rounds). Beside them, two
one-device runs at once with nothing between them (the host's ceiling: what two cores give
two independent copies; data_parallel.py's one_device_pair), and each scaling against it.

    /usr/bin/python3 bench/transformer_data_parallel.py --build build [--rounds 3] [--steps 100]
"""
import argparse
import json
import os
import random
import statistics
import subprocess
import sys

from data_parallel import last_json, parse_last_json, peer_env, per_round, run_env

HERE = os.path.dirname(os.path.abspath(__file__))


def pair_step_ms(cmd, env):
    """Two copies of a one-device run at once, seeds 1 and 2: the step time at which the pair
    gives its summed rate (harmonic mean of the two median steps)."""
    procs = [subprocess.Popen(cmd + ["--seed", str(s)], stdout=subprocess.PIPE, text=True, env=env) for s in (1, 2)]
    outs = [p.communicate()[0] for p in procs]
    if any(p.returncode for p in procs):
        raise subprocess.CalledProcessError(max(p.returncode for p in procs), cmd)
    steps = [parse_last_json(o)["median_step_ms"] for o in outs]
    return 2.0 / sum(1.0 / t for t in steps)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--context", type=int, default=64)
    a = ap.parse_args()
    env = run_env()
    penv = peer_env(env, a.build)
    trainer = os.path.join(a.build, "examples", "char_transformer")
    common = ["--steps", str(a.steps), "--batch", str(a.batch), "--context", str(a.context)]
    ours = common + ["--eval-every", str(a.steps), "--quiet"]
    peer = [sys.executable, os.path.join(HERE, "pytorch_transformer.py"), *common]
    configs = {  # name: (command, replicas)
        "one_device": ([trainer, *ours], 1),
        "one_device_pair": ([trainer, *ours], 2),  # run twice at once by pair_step_ms: the ceiling
        "mirrored": ([trainer, *ours, "--strategy", "mirrored", "--replicas", "2"], 2),
        "multi_worker_mirrored_mpi": (["mpirun", "-np", "2", trainer, *ours, "--strategy", "multi_worker_mirrored",
                                       "--collective", "mpi"], 2),
        "ddp_1": ([*peer, "--nproc", "1"], 1),
        "ddp_2": ([*peer, "--nproc", "2"], 2),
    }
    got = {k: [] for k in configs}
    shuffle = random.Random(2026)
    for _ in range(a.rounds):
        order = list(configs)
        shuffle.shuffle(order)
        for k in order:
            if k == "one_device_pair":
                step_ms = pair_step_ms(configs[k][0], env)
            else:
                step_ms = last_json(configs[k][0], penv if k.startswith("ddp") else env)["median_step_ms"]
            got[k].append(1000.0 * configs[k][1] * a.batch * a.context / step_ms)
    rate = {k: statistics.median(v) for k, v in got.items()}
    for k in ("mirrored", "multi_worker_mirrored_mpi"):
        print(json.dumps({
            "bench": "transformer_data_parallel", "replicas": 2, "strategy": k, "rounds": a.rounds, "steps": a.steps,
            "strata_chars_s": round(rate[k], 1), "peer": "pytorch_ddp_gloo_2x1", "peer_chars_s": round(rate["ddp_2"], 1),
            "ratio": round(rate[k] / rate["ddp_2"], 3),
            "scaling_efficiency": round(rate[k] / (2 * rate["one_device"]), 3),
            "peer_scaling_efficiency": round(rate["ddp_2"] / (2 * rate["ddp_1"]), 3),
            "host_ceiling": round(rate["one_device_pair"] / (2 * rate["one_device"]), 3),
            "scaling_vs_ceiling": round(rate[k] / rate["one_device_pair"], 3),
            "ratio_per_round": per_round(got[k], got["ddp_2"]),
            "scaling_per_round": per_round(got[k], got["one_device"], 2.0),
            "one_replica_chars_s": round(rate["one_device"], 1), "peer_one_replica_chars_s": round(rate["ddp_1"], 1),
        }), flush=True)


if __name__ == "__main__":
    main()
