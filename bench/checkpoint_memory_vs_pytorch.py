#!/usr/bin/env python3
"""The memory a checkpoint write and a read take beyond the state they save, strata against
torch.save and torch.load, in the same run: a float32 table of MB megabytes, written and read
PAIRS times each way (strata's bench_checkpoint_memory: streamed and in_memory writes,
read_into and read_whole reads, each in a child process of its own; PyTorch: torch.save of
{"table": tensor}, and torch.load then copy_ into the table as load_state_dict does, each in
a fresh interpreter). Prints each way's median extra peak RSS and time, one JSON line each.

usage: /usr/bin/python3 bench/checkpoint_memory_vs_pytorch.py --build BUILD [--mb 256] [--pairs 3]"""
import argparse
import json
import statistics
import subprocess
import sys
import tempfile

PEER = r"""
import os, resource, sys, time, torch
mb, path = int(sys.argv[1]), sys.argv[2]
peak = lambda: resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
t = torch.full((mb * 1024 * 256,), 0.5)
p0, t0 = peak(), time.time()
torch.save({"table": t}, path)
f = open(path, "rb"); os.fsync(f.fileno()); f.close()  # as strata's write, to the disk
print('{"way": "torch.save", "extra_mb": %.1f, "seconds": %.3f}' % (peak() - p0, time.time() - t0))
"""

PEER_LOAD = r"""
import os, resource, sys, time, torch
mb, path = int(sys.argv[1]), sys.argv[2]
peak = lambda: resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
t = torch.full((mb * 1024 * 256,), 0.25)
p0, t0 = peak(), time.time()
t.copy_(torch.load(path)["table"])
print('{"way": "torch.load", "extra_mb": %.1f, "seconds": %.3f}' % (peak() - p0, time.time() - t0))
os.remove(path)
"""


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", required=True)
    ap.add_argument("--mb", type=int, default=256)
    ap.add_argument("--pairs", type=int, default=3)
    a = ap.parse_args()
    runs = {}
    with tempfile.TemporaryDirectory() as d:
        for _ in range(a.pairs):
            out = subprocess.run([f"{a.build}/bench/bench_checkpoint_memory", str(a.mb), d], check=True,
                                 capture_output=True, text=True).stdout
            for peer in (PEER, PEER_LOAD):
                out += subprocess.run(["/usr/bin/python3", "-c", peer, str(a.mb), f"{d}/t.pt"], check=True,
                                      capture_output=True, text=True).stdout
            for line in out.splitlines():
                r = json.loads(line)
                runs.setdefault(r["way"], []).append(r)
    for way, rs in runs.items():
        print(json.dumps({"way": way, "mb": a.mb, "runs": len(rs),
                          "extra_mb": statistics.median(r["extra_mb"] for r in rs),
                          "seconds": statistics.median(r["seconds"] for r in rs)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
