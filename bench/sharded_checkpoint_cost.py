#!/usr/bin/python3
"""What a checkpoint costs under ShardedStrategy against MultiWorkerMirroredStrategy:
examples/char_transformer under mpirun on N processes, each strategy with no checkpoint and
with one every K steps, in alternating rounds. A save's seconds are the training loop's extra
time over the saves it made (the loop's time is the characters it trained over its rate);
the bytes are those the busiest rank writes per save (MultiWorkerMirrored: the chief's whole
checkpoint; sharded: the chief's manifest and its shard). Prints one JSON line per N: the
medians over rounds, and the sharded figures over MultiWorkerMirrored's.

    /usr/bin/python3 bench/sharded_checkpoint_cost.py --build build [--ranks 2 4] [--rounds 3]
"""
import argparse
import json
import os
import shutil
import statistics
import tempfile

from data_parallel import last_json, run_env


def loop_seconds(line, steps, batch, ranks, context):
    return steps * batch * ranks * context / line["chars_per_s"]


def busiest_rank_bytes(directory, step):
    """The bytes rank 0 wrote at `step`: the checkpoint (or manifest) and its own shard."""
    tag = f"{step:012d}.strata"
    total = os.path.getsize(os.path.join(directory, f"ckpt-{tag}"))
    for name in os.listdir(directory):
        if name.startswith("state-00000-") and name.endswith(tag):
            total += os.path.getsize(os.path.join(directory, name))
    return total


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--ranks", type=int, nargs="+", default=[2, 4])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--every", type=int, default=5, help="steps between checkpoints")
    ap.add_argument("--width", type=int, default=256)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--batch", type=int, default=8, help="sequences per process")
    args = ap.parse_args()
    context = 64  # the trainer's default
    env = run_env()
    trainer = [f"{args.build}/examples/char_transformer", "--steps", str(args.steps), "--width", str(args.width),
               "--layers", str(args.layers), "--batch", str(args.batch), "--eval-every", str(10 * args.steps),
               "--eval-windows", "8", "--sample", "0", "--quiet", "--collective", "mpi"]
    ways = {"multi_worker_mirrored": ["--strategy", "multi_worker_mirrored"], "sharded": ["--strategy", "sharded"]}
    saves = args.steps // args.every + 1  # every K steps, and once more at the end
    for n in args.ranks:
        seconds = {w: [] for w in ways}
        written = {w: [] for w in ways}
        for _ in range(args.rounds):
            for w, flags in ways.items():
                cmd = ["mpirun", "-np", str(n)] + trainer + flags
                plain = last_json(cmd, env)
                work = tempfile.mkdtemp()
                try:
                    saved = last_json(cmd + ["--checkpoint-dir", work, "--checkpoint-every", str(args.every)], env)
                    written[w].append(busiest_rank_bytes(work, args.steps))
                finally:
                    shutil.rmtree(work)
                extra = (loop_seconds(saved, args.steps, args.batch, n, context) -
                         loop_seconds(plain, args.steps, args.batch, n, context))
                seconds[w].append(extra / saves)
        save_s = {w: statistics.median(v) for w, v in seconds.items()}
        save_b = {w: statistics.median(v) for w, v in written.items()}
        print(json.dumps({
            "ranks": n, "width": args.width, "layers": args.layers, "batch": args.batch, "every": args.every,
            "sharded_save_ms": round(1000 * save_s["sharded"], 1),
            "mwm_save_ms": round(1000 * save_s["multi_worker_mirrored"], 1),
            "save_time_ratio": round(save_s["sharded"] / save_s["multi_worker_mirrored"], 3)
            if save_s["multi_worker_mirrored"] > 0 else None,  # (noise larger than the save)
            "sharded_busiest_rank_mib": round(save_b["sharded"] / 2**20, 2),
            "mwm_busiest_rank_mib": round(save_b["multi_worker_mirrored"] / 2**20, 2),
            "busiest_rank_bytes_ratio": round(save_b["sharded"] / save_b["multi_worker_mirrored"], 3)}), flush=True)


if __name__ == "__main__":
    main()
