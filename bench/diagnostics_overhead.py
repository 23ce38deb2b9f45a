#!/usr/bin/python3
"""What the job's diagnostics cost: the same MultiWorkerMirrored job on 2 processes with the
collective flight recorder and the straggler scores on (their defaults: 4,096 entries, windows
of 50 steps) and both off (STRATA_FLIGHT_RECORDER_ENTRIES=0, --straggler-every 0), in pairs run
back to back in alternating order, over Mpi (mpirun) and Gloo (strata-run); the MLP
(examples/fashion_mnist, the steady examples/s) and the Transformer (examples/char_transformer,
the median step). Prints one JSON line per model and collective: the median over the pairs of
the on run's speed over the off run's (1.0: free; the bar is 0.99). --only recorder|stragglers
turns on just one of the two.

    /usr/bin/python3 bench/diagnostics_overhead.py --build build [--pairs 5] [--only recorder]
"""
import argparse
import json
import os
import statistics

from data_parallel import last_json, run_env


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--pairs", type=int, default=5)
    ap.add_argument("--models", default="mlp,transformer")
    ap.add_argument("--collectives", default="mpi,gloo")
    ap.add_argument("--only", choices=["recorder", "stragglers"], default=None)
    a = ap.parse_args()
    env = run_env()
    fm = os.path.join(a.build, "examples", "fashion_mnist")
    ct = os.path.join(a.build, "examples", "char_transformer")
    run = os.path.join(a.build, "tools", "strata-run")
    trainers = {
        "mlp": ([fm, "--model", "mlp", "--max-steps", "320", "--no-eval", "--quiet"],
                lambda r: r.get("steady_examples_per_s") or r["examples_per_s"]),
        "transformer": ([ct, "--steps", "60", "--eval-every", "1000", "--eval-windows", "8", "--sample", "0", "--quiet"],
                        lambda r: 1000.0 / r["median_step_ms"]),
    }
    for model in a.models.split(","):
        cmd, speed = trainers[model]
        for coll in a.collectives.split(","):
            launch = (["mpirun", "-x", "STRATA_FLIGHT_RECORDER_ENTRIES", "-np", "2"] if coll == "mpi"
                      else [run, "-np", "2", "--"])
            job = launch + cmd + ["--strategy", "multi_worker_mirrored", "--collective", coll]
            ratios, on_runs, off_runs = [], [], []
            for p in range(a.pairs):
                got = {}
                for way in (("off", "on") if p % 2 == 0 else ("on", "off")):
                    recorder = way == "on" and a.only != "stragglers"
                    stragglers = way == "on" and a.only != "recorder"
                    e = dict(env, STRATA_FLIGHT_RECORDER_ENTRIES="4096" if recorder else "0")
                    got[way] = speed(last_json(job + ["--straggler-every", "50" if stragglers else "0"], e))
                ratios.append(got["on"] / got["off"])
                on_runs.append(got["on"])
                off_runs.append(got["off"])
            print(json.dumps({"bench": "diagnostics_overhead", "on": a.only or "recorder+stragglers", "model": model, "collective": coll, "replicas": 2,
                              "pairs": a.pairs, "on_over_off": round(statistics.median(ratios), 4),
                              "per_pair": [round(r, 4) for r in ratios],
                              "on_median": round(statistics.median(on_runs), 2),
                              "off_median": round(statistics.median(off_runs), 2),
                              "unit": "examples/s" if model == "mlp" else "steps/s"}), flush=True)


if __name__ == "__main__":
    main()
