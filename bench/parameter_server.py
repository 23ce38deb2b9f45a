#!/usr/bin/python3
"""ParameterServerStrategy<Mpi> training throughput beside MultiWorkerMirroredStrategy<Mpi>,
same model, data and batch (64 per worker), in the same run: Sync and Async with 1 server +
2 workers (3 processes on this 2-core machine: oversubscribed, the server shares a core with a
worker) against MultiWorkerMirroredStrategy with 2 workers (2 processes). Async workers each
count their own examples; the job's examples/s is their sum. Each round runs every
configuration once, in turn; figures are medians over the rounds. One JSON line per
configuration with the ratio to MultiWorkerMirroredStrategy<Mpi>.

    /usr/bin/python3 bench/parameter_server.py --build build [--rounds 3] [--models mlp,cnn]
"""
import argparse
import json
import os
import statistics

from data_parallel import last_json, run_env


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--models", default="mlp,cnn")
    a = ap.parse_args()
    env = run_env()
    fm = os.path.join(a.build, "examples", "fashion_mnist")
    for model in a.models.split(","):
        steps = "300" if model == "mlp" else "60"
        common = ["--model", model, "--max-steps", steps, "--no-eval", "--quiet"]
        configs = {
            "multi_worker_mirrored_mpi": ["mpirun", "-np", "2", fm] + common +
                                         ["--strategy", "multi_worker_mirrored", "--collective", "mpi"],
            "parameter_server_sync": ["mpirun", "-np", "3", fm] + common +
                                     ["--strategy", "parameter_server", "--servers", "1", "--mode", "sync"],
            "parameter_server_async": ["mpirun", "-np", "3", fm] + common +
                                      ["--strategy", "parameter_server", "--servers", "1", "--mode", "async"],
        }
        got = {k: [] for k in configs}
        for _ in range(a.rounds):
            for k, cmd in configs.items():
                got[k].append(last_json(cmd, env)["examples_per_s"])
        base = statistics.median(got["multi_worker_mirrored_mpi"])
        for k, runs in got.items():
            med = statistics.median(runs)
            print(json.dumps({"bench": "parameter_server", "model": model, "strategy": k, "workers": 2,
                              "servers": 0 if k.startswith("multi") else 1, "processes": 2 if k.startswith("multi") else 3,
                              "cores": os.cpu_count(), "rounds": a.rounds, "examples_per_s": round(med, 1),
                              "runs": [round(r, 1) for r in runs],
                              "ratio_to_multi_worker_mirrored_mpi": round(med / base, 3)}), flush=True)


if __name__ == "__main__":
    main()
