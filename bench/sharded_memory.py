#!/usr/bin/python3
"""Memory per process under ShardedStrategy's stages against MultiWorkerMirroredStrategy, as the
process count grows: examples/char_transformer (GPT-2-small-shaped by default: width 768, 12
layers, 12 heads, about 85 M parameters with the fortunes' characters) under mpirun on N
processes, a few steps with one sequence per process, so that the model state dominates.
Prints one JSON line per N and strategy with rank 0's peak tensor bytes (the allocator's own
count) and peak RSS, and, for stage 3, the bound the design promises: 1.15 x 16 P / N plus the
largest wrap unit's parameters, plus the activations of one sequence (measured: one device's
peak tensor bytes less its 16 P of model state); for stage 2, its model state beside
DeepSpeed's ZeRO-2 figure, 4 P + 12 P / N.

    /usr/bin/python3 bench/sharded_memory.py --build build [--ranks 1 2 4] [--ways stage2 stage3]
"""
import argparse
import json

from data_parallel import last_json, run_env


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--ranks", type=int, nargs="+", default=[1, 2, 4])
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--width", type=int, default=768)
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--heads", type=int, default=12)
    ap.add_argument("--context", type=int, default=64)
    ap.add_argument("--ways", nargs="+", default=["multi_worker_mirrored", "stage1", "stage2", "stage3"])
    args = ap.parse_args()
    env = run_env()
    trainer = [f"{args.build}/examples/char_transformer", "--steps", str(args.steps), "--width", str(args.width),
               "--layers", str(args.layers), "--heads", str(args.heads), "--context", str(args.context),
               "--batch", "1", "--eval-every", str(10 * args.steps), "--eval-windows", "1", "--sample", "0", "--quiet"]
    mib = 1024.0 * 1024.0
    one = last_json(trainer + ["--strategy", "one_device"], env)
    params = one["parameters"]
    activations = one["peak_tensor_mib"] - 16 * params / mib
    # A block's parameters: the largest unit under the size rule (embeddings and head stay whole).
    unit = (12 * args.width * args.width + 13 * args.width) * 4 / mib
    print(json.dumps({"one_device_peak_tensor_mib": one["peak_tensor_mib"], "parameters": params,
                      "activations_mib": round(activations, 1), "largest_unit_mib": round(unit, 1)}), flush=True)
    ways = {"multi_worker_mirrored": ["--strategy", "multi_worker_mirrored"],
            "stage1": ["--strategy", "sharded", "--shard-stage", "1"],
            "stage2": ["--strategy", "sharded", "--shard-stage", "2"],
            "stage3": ["--strategy", "sharded", "--shard-stage", "3"]}
    for n in args.ranks:
        for way, flags in ((w, ways[w]) for w in args.ways):
            r = last_json(["mpirun", "-np", str(n)] + trainer + flags + ["--collective", "mpi"], env)
            line = {"ranks": n, "strategy": way, "peak_tensor_mib": r["peak_tensor_mib"],
                    "peak_rss_mib": r["peak_rss_mib"], "median_step_ms": r["median_step_ms"],
                    "validation_loss": r["validation_loss"]}
            if way == "stage2":  # DeepSpeed's ZeRO-2 figure: 4P + 12P/N (the buckets in flight beside it)
                line["model_state_mib"] = round(r["peak_tensor_mib"] - activations, 1)
                line["zero2_mib"] = round((4 * params + 12 * params / n) / mib, 1)
            if way == "stage3":
                bound = 1.15 * 16 * params / n / mib + unit
                line["bound_mib"] = round(bound + activations, 1)
                line["model_state_mib"] = round(r["peak_tensor_mib"] - activations, 1)
                line["model_state_bound_mib"] = round(bound, 1)
            print(json.dumps(line), flush=True)


if __name__ == "__main__":
    main()
