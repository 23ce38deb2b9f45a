#!/usr/bin/python3
"""A new communicator's cost, strata against PyTorch, alternating in one run: bench_rendezvous
under strata-run --rendezvous tcp (the TCP store with its job-token handshake) and
pytorch_rendezvous.py (TCPStore, dist.new_group), each `--pairs` times at each process count.
One JSON line per count: both sides' median per-round time (median over pairs) and the ratio
PyTorch / strata (above 1: strata is faster).

    /usr/bin/python3 bench/rendezvous_vs_pytorch.py --build build [--nproc 2,4] [--pairs 3] [--rounds 20]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def last_json(cmd):
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=600).stdout
    line = [l for l in out.splitlines() if "{" in l][-1]
    return json.loads(line[line.index("{"):])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--nproc", default="2,4")
    ap.add_argument("--pairs", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=20)
    a = ap.parse_args()
    run = os.path.join(a.build, "tools", "strata-run")
    bench = os.path.join(a.build, "bench", "bench_rendezvous")
    for n in (int(x) for x in a.nproc.split(",")):
        ours, theirs = [], []
        for _ in range(a.pairs):
            ours.append(last_json([run, "-np", str(n), "--rendezvous", "tcp", "--", bench, "--rounds", str(a.rounds)]))
            theirs.append(last_json([sys.executable, os.path.join(HERE, "pytorch_rendezvous.py"), "--nproc", str(n),
                                     "--rounds", str(a.rounds)]))
        med = lambda rs, k: statistics.median(r[k] for r in rs)
        print(json.dumps({"nproc": n, "pairs": a.pairs, "rounds": a.rounds,
                          "strata_median_ms": med(ours, "median_ms"), "pytorch_median_ms": med(theirs, "median_ms"),
                          "strata_first_ms": med(ours, "first_ms"), "pytorch_first_ms": med(theirs, "first_ms"),
                          "strata_max_ms": max(r["max_ms"] for r in ours), "pytorch_max_ms": max(r["max_ms"] for r in theirs),
                          "ratio_pytorch_over_strata": round(med(theirs, "median_ms") / med(ours, "median_ms"), 2)}),
              flush=True)


if __name__ == "__main__":
    main()
