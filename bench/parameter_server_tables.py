#!/usr/bin/python3
"""The sparse parameter server against the dense protocol, same run: examples/skip_gram with
the hashed-bigram table (--bigram-rows, a million rows by default) under
ParameterServerStrategy<Mpi>, 1 server + 2 workers (3 processes on 2 cores), Sync and Async,
with tables going by rows (the default), living on the servers only (--tables remote: the
workers look up the rows they read) and whole (--tables whole, the dense rule). Each round
runs every configuration once, in turn; figures are medians over the rounds. One JSON line per
configuration: the chief worker's pairs/s and median step, the bytes it pushed and received
per step, the touched rows' lower bound, and the ratios to the same mode going whole.

    /usr/bin/python3 bench/parameter_server_tables.py --build build [--rounds 3] [--bigram-rows 1048576]
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
    ap.add_argument("--bigram-rows", type=int, default=1 << 20)
    ap.add_argument("--steps", type=int, default=300, help="steps of a run by rows")
    ap.add_argument("--whole-steps", type=int, default=40, help="steps of a run with whole tables (each moves them all)")
    a = ap.parse_args()
    env = dict(run_env(), STRATA_COLLECTIVE_TIMEOUT="300")
    exe = os.path.join(a.build, "examples", "skip_gram")
    common = ["--bigram-rows", str(a.bigram_rows), "--eval-every", "100000", "--eval-rows", "1000", "--quiet",
              "--strategy", "parameter_server", "--collective", "mpi", "--servers", "1"]
    configs = {}
    for mode in ("sync", "async"):
        configs[(mode, "rows")] = ["--mode", mode, "--steps", str(a.steps)]
        configs[(mode, "remote")] = ["--mode", mode, "--tables", "remote", "--steps", str(a.steps)]
        configs[(mode, "whole")] = ["--mode", mode, "--tables", "whole", "--updates", "dense", "--steps", str(a.whole_steps)]
    got = {k: [] for k in configs}
    for _ in range(a.rounds):
        for k, flags in configs.items():
            got[k].append(last_json(["mpirun", "-x", "STRATA_COLLECTIVE_TIMEOUT", "-np", "3", exe] + common + flags, env))
    for (mode, tables), runs in got.items():
        med = lambda key: statistics.median(r[key] for r in runs)
        whole = got[(mode, "whole")]
        base_rate = statistics.median(r["pairs_per_s"] for r in whole)
        base_bytes = statistics.median(r["table_bytes_per_step"] for r in whole)
        touched = [r["touched_bytes_per_step"] for r in runs if r["touched_bytes_per_step"] is not None]
        print(json.dumps({
            "bench": "parameter_server_tables", "mode": mode, "tables": tables, "bigram_rows": a.bigram_rows,
            "servers": 1, "workers": 2, "cores": os.cpu_count(), "rounds": a.rounds,
            "pairs_per_s": round(med("pairs_per_s"), 1), "runs": [round(r["pairs_per_s"], 1) for r in runs],
            "median_step_ms": round(med("median_step_ms"), 3),
            "pushed_bytes_per_step": med("table_bytes_per_step"), "received_bytes_per_step": med("received_bytes_per_step"),
            "touched_bytes_per_step": statistics.median(touched) if touched else None,
            "speed_vs_whole": round(med("pairs_per_s") / base_rate, 2),
            "fewer_pushed_bytes_than_whole": round(base_bytes / med("table_bytes_per_step"), 1),
            "worker_resident_mib_in_steps": med("resident_mib_in_steps")}), flush=True)


if __name__ == "__main__":
    main()
