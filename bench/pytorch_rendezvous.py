#!/usr/bin/python3
"""PyTorch's side of rendezvous_vs_pytorch.py: N processes meet at a TCPStore
(init_process_group over tcp://), then each round builds a new gloo group (dist.new_group),
runs one all_reduce of one float on it and destroys it. Rank 0 prints one JSON line: the first
group's time (init_process_group and its first all_reduce) and the median and max of the slowest
rank's time per round.

    /usr/bin/python3 bench/pytorch_rendezvous.py --nproc 4 [--rounds 20]
"""
import argparse
import json
import socket
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def worker(rank, a, port):
    torch.set_num_threads(1)
    t0 = time.perf_counter()
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=a.nproc)
    dist.all_reduce(torch.ones(1))
    first = torch.tensor([(time.perf_counter() - t0) * 1e3], dtype=torch.float64)
    dist.all_reduce(first, op=dist.ReduceOp.MAX)
    times = []
    for _ in range(a.rounds):
        dist.barrier()
        start = time.perf_counter()
        g = dist.new_group(backend="gloo")
        dist.all_reduce(torch.ones(1), group=g)
        dist.destroy_process_group(g)
        t = torch.tensor([(time.perf_counter() - start) * 1e3], dtype=torch.float64)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        times.append(t.item())
    times.sort()
    if rank == 0:
        print(json.dumps({"impl": "pytorch-" + torch.__version__, "nproc": a.nproc, "rounds": a.rounds,
                          "first_ms": round(first.item(), 2), "median_ms": round(times[len(times) // 2], 2),
                          "max_ms": round(times[-1], 2)}), flush=True)
    dist.destroy_process_group()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--nproc", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=20)
    a = ap.parse_args()
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    mp.spawn(worker, args=(a, port), nprocs=a.nproc)


if __name__ == "__main__":
    main()
