#!/usr/bin/python3
"""ShardedStrategy beside PyTorch's DDP on the CPU: the GPT-2-small-shaped character
Transformer (width 768, 12 layers, 12 heads by default) on N processes, one thread each,
PyTorch 1.13's DDP over gloo (pytorch_transformer.py --nproc N) against examples/char_transformer
under mpirun with MultiWorkerMirrored and ShardedStrategy's stages 2 and 3, the same batch
per process, in alternating rounds. Debian's PyTorch cannot import its FSDP, so ZeRO's side is
its arithmetic: DeepSpeed's model-state bytes per rank under Adam in float32 for P parameters
(DDP 16P, ZeRO-1 8P + 8P/N, ZeRO-2 4P + 12P/N, ZeRO-3 16P/N). Prints one JSON line per N and
way: the median step time and characters per second, peak RSS (rank 0's), their ratios to
DDP's (per round, then the median), and the ZeRO figure for the stage.

    /usr/bin/python3 bench/sharded_vs_pytorch_ddp.py --build build-rel [--ranks 2 4] [--rounds 2]
"""
import argparse
import json
import os
import statistics

from data_parallel import last_json, peer_env, run_env

HERE = os.path.dirname(os.path.abspath(__file__))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build-rel")
    ap.add_argument("--ranks", type=int, nargs="+", default=[2])
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--width", type=int, default=768)
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--heads", type=int, default=12)
    ap.add_argument("--context", type=int, default=64)
    ap.add_argument("--batch", type=int, default=4, help="sequences per process")
    args = ap.parse_args()
    env = run_env()
    shape = ["--width", str(args.width), "--layers", str(args.layers), "--heads", str(args.heads),
             "--context", str(args.context), "--batch", str(args.batch)]
    strata = [f"{args.build}/examples/char_transformer", "--steps", str(args.steps), "--eval-every",
              str(10 * args.steps), "--eval-windows", "1", "--sample", "0", "--quiet", "--collective", "mpi"] + shape
    ways = {"multi_worker_mirrored": ["--strategy", "multi_worker_mirrored"],
            "stage2": ["--strategy", "sharded", "--shard-stage", "2"],
            "stage3": ["--strategy", "sharded", "--shard-stage", "3"]}
    mib = 1024.0 * 1024.0
    for n in args.ranks:
        ddp_cmd = ["/usr/bin/python3", os.path.join(HERE, "pytorch_transformer.py"), "--nproc", str(n), "--steps",
                   str(args.steps), "--warmup-steps", "3", "--eval-windows", "1"] + shape
        runs = {"ddp": [], **{w: [] for w in ways}}
        for _ in range(args.rounds):
            runs["ddp"].append(last_json(ddp_cmd, peer_env(env, args.build)))
            for w, flags in ways.items():
                runs[w].append(last_json(["mpirun", "-np", str(n)] + strata + flags, env))
        p = runs["stage2"][0]["parameters"]
        zero = {"ddp": 16 * p, "multi_worker_mirrored": 16 * p, "stage2": 4 * p + 12 * p / n, "stage3": 16 * p / n}
        ddp = runs["ddp"]
        for w, got in runs.items():
            per_round = lambda key: round(statistics.median(g[key] / d[key] for g, d in zip(got, ddp)), 3)
            step = statistics.median(r["median_step_ms"] for r in got)
            print(json.dumps({
                "ranks": n, "way": w, "parameters": p, "batch_per_process": args.batch,
                "median_step_ms": round(step, 1),
                "chars_per_s": round(1000.0 * n * args.batch * args.context / step, 1),
                "peak_rss_mib": statistics.median(r["peak_rss_mib"] for r in got),
                "step_rate_vs_ddp": round(statistics.median(d["median_step_ms"] / g["median_step_ms"]
                                                            for g, d in zip(got, ddp)), 3),
                "peak_rss_vs_ddp": per_round("peak_rss_mib"),
                "zero_model_state_mib": round(zero[w] / mib, 1)}), flush=True)


if __name__ == "__main__":
    main()
