#!/usr/bin/python3
"""Where a stage 3 step's time goes: examples/char_transformer under mpirun -np N with
ShardedStrategy's stage 3 and --timeline, once with the units' collectives where the host's
rule puts them (on 2 cores: blocking on the replica's thread, through shared memory) and once
with STRATA_COMM_THREAD=1 (MPI's non-blocking calls, each unit's all-gather started a unit
ahead). From rank 0's trace, per step after the first two (the first records the units'
order): the step, its forward, backward and update, and each collective event's time on the
replica's thread (`allgather` and `reduce_scatter` run there; `iallgather` is only the start
of a non-blocking one, `allgather_wait` the part compute did not hide). One JSON line per way,
medians over the steps; the traces stay in --out for https://ui.perfetto.dev.

    /usr/bin/python3 bench/sharded_timeline.py --build build [--ranks 2] [--width 768 --layers 12]
"""
import argparse
import json
import os
import statistics

from data_parallel import last_json, run_env

EVENTS = ["forward", "backward", "update", "allgather", "iallgather", "allgather_wait", "reduce_scatter",
          "ireduce_scatter"]


def per_step(trace_path):
    with open(trace_path) as f:
        events = [e for e in json.load(f)["traceEvents"] if e.get("ph") == "X" and e.get("pid") == 0]
    starts = sorted(e["ts"] for e in events if e["name"] == "forward")
    steps = []
    for a, b in zip(starts[2:], starts[3:]):  # whole steps after the first two
        row = {"step_ms": (b - a) / 1e3}
        for name in EVENTS:
            row[name + "_ms"] = sum(e["dur"] for e in events if e["name"] == name and a <= e["ts"] < b) / 1e3
        steps.append(row)
    return steps


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--width", type=int, default=768)
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--heads", type=int, default=12)
    ap.add_argument("--batch", type=int, default=4, help="sequences per process")
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--unit-bytes", type=int, default=64 << 20)
    ap.add_argument("--out", default="/tmp", help="where the traces are written")
    args = ap.parse_args()
    trainer = [f"{args.build}/examples/char_transformer", "--steps", str(args.steps), "--width", str(args.width),
               "--layers", str(args.layers), "--heads", str(args.heads), "--batch", str(args.batch),
               "--eval-every", str(10 * args.steps), "--eval-windows", "8", "--sample", "0", "--quiet",
               "--collective", "mpi", "--strategy", "sharded", "--shard-stage", "3", "--unit-bytes", str(args.unit_bytes)]
    for way, extra in [("by_host_rule", {}), ("comm_thread", {"STRATA_COMM_THREAD": "1"})]:
        env = dict(run_env(), **extra)
        path = os.path.join(args.out, f"sharded_timeline_{way}_np{args.ranks}.json")
        flags = [x for k, v in extra.items() for x in ("-x", f"{k}={v}")]
        result = last_json(["mpirun", "-np", str(args.ranks)] + flags + trainer + ["--timeline", path], env)
        steps = per_step(path)
        line = {"way": way, "ranks": args.ranks, "width": args.width, "layers": args.layers, "batch": args.batch,
                "steps_read": len(steps), "trainer_median_step_ms": result["median_step_ms"], "trace": path}
        for key in steps[0]:
            line[key] = round(statistics.median(s[key] for s in steps), 1)
        exposed = line["allgather_ms"] + line["allgather_wait_ms"] + line["reduce_scatter_ms"]
        line["collectives_on_replica_thread_share"] = round(exposed / line["step_ms"], 3)
        print(json.dumps(line), flush=True)


if __name__ == "__main__":
    main()
