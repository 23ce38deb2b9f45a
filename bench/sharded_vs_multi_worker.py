#!/usr/bin/python3
"""ShardedStrategy against MultiWorkerMirroredStrategy: examples/char_transformer under mpirun
on N processes, MultiWorkerMirrored and ShardedStrategy stages 1, 2 and 3 (each Transformer
block a wrap unit: --unit-bytes) in alternating rounds, the same model, batch and steps. Prints one JSON line per N and stage: the median
over rounds of the sharded run's step rate over MultiWorkerMirrored's (the median step times'
inverse ratio), of its optimizer state per process (rank 0's, from the trainer's JSON line)
over MultiWorkerMirrored's, and of its peak RSS (rank 0's) over MultiWorkerMirrored's.

    /usr/bin/python3 bench/sharded_vs_multi_worker.py --build build [--ranks 2 4] [--rounds 3] [--stages 1 2 3]
"""
import argparse
import json
import statistics

from data_parallel import last_json, run_env


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--ranks", type=int, nargs="+", default=[2, 4])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--width", type=int, default=256)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--batch", type=int, default=8, help="sequences per process")
    ap.add_argument("--stages", type=int, nargs="+", default=[1, 2, 3])
    ap.add_argument("--unit-bytes", type=int, default=4 << 20, help="stage 3's size rule (4 MiB: a block of width 256)")
    args = ap.parse_args()
    env = run_env()
    trainer = [f"{args.build}/examples/char_transformer", "--steps", str(args.steps), "--width", str(args.width),
               "--layers", str(args.layers), "--batch", str(args.batch), "--eval-every", str(10 * args.steps),
               "--eval-windows", "8", "--sample", "0", "--quiet", "--collective", "mpi"]
    ways = {"multi_worker_mirrored": ["--strategy", "multi_worker_mirrored"]}
    for stage in args.stages:
        ways[f"stage{stage}"] = ["--strategy", "sharded", "--shard-stage", str(stage)] + (
            ["--unit-bytes", str(args.unit_bytes)] if stage == 3 else [])
    for n in args.ranks:
        runs = {w: [] for w in ways}
        for _ in range(args.rounds):
            for w, flags in ways.items():
                runs[w].append(last_json(["mpirun", "-np", str(n)] + trainer + flags, env))
        base = runs["multi_worker_mirrored"]
        for stage in (f"stage{s}" for s in args.stages):
            got = runs[stage]
            ratio = lambda key, inverse=False: round(statistics.median(
                (b[key] / g[key]) if inverse else (g[key] / b[key]) for g, b in zip(got, base)), 3)
            print(json.dumps({
                "ranks": n, "sharded": stage, "width": args.width, "layers": args.layers, "batch": args.batch,
                "step_rate_ratio": ratio("median_step_ms", inverse=True),
                "optimizer_state_ratio": ratio("optimizer_state_mib"),
                "peak_rss_ratio": ratio("peak_rss_mib"),
                "sharded_median_step_ms": statistics.median(r["median_step_ms"] for r in got),
                "mwm_median_step_ms": statistics.median(r["median_step_ms"] for r in base),
                "sharded_optimizer_state_mib": statistics.median(r["optimizer_state_mib"] for r in got),
                "mwm_optimizer_state_mib": statistics.median(r["optimizer_state_mib"] for r in base),
                "sharded_peak_rss_mib": statistics.median(r["peak_rss_mib"] for r in got),
                "mwm_peak_rss_mib": statistics.median(r["peak_rss_mib"] for r in base)}), flush=True)


if __name__ == "__main__":
    main()
