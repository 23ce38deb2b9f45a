#!/usr/bin/python3
"""bfloat16 GEMM throughput, one thread: strata's gemm_bf16 (bench_gemm --bf16, beside strata's
float GEMM) against PyTorch's bfloat16 and float32 matmul, on the reference models' shapes.

Each pair runs bench_gemm --bf16 once (every shape, its rounds alternating bf16 and float) and
then this script's PyTorch side over the shapes bench_gemm printed, in a process of its own
(torch.matmul on bf16 tensors, the GEMM under CPU autocast, and on float32 tensors, transposes
as views). One JSON line per shape: strata's bf16 and float GFLOP/s, PyTorch's, and the
medians (min, max) over pairs of strata bf16 / PyTorch bf16 and of strata bf16 / strata float.

    /usr/bin/python3 bench/gemm_vs_pytorch.py --build build [--pairs 3] [--rounds 5]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.abspath(__file__)


def peer(shapes_json, rounds):
    """PyTorch's side: GFLOP/s of bf16 and float32 matmul per shape, medians of `rounds`."""
    import torch
    torch.set_num_threads(1)
    torch.manual_seed(7)
    out = []
    for s in json.loads(shapes_json):
        m, n, k, ta, tb = s["m"], s["n"], s["k"], s["trans_a"], s["trans_b"]
        figures = {}
        for name, dtype in (("bf16", torch.bfloat16), ("float", torch.float32)):
            a = torch.empty((k, m) if ta else (m, k)).uniform_(-1, 1).to(dtype)
            b = torch.empty((n, k) if tb else (k, n)).uniform_(-1, 1).to(dtype)
            x, y = (a.t() if ta else a), (b.t() if tb else b)
            calls = max(3, int(5e9 / (2.0 * m * n * k)))
            torch.matmul(x, y)
            per_call = []
            for _ in range(rounds):
                t0 = time.perf_counter()
                for _ in range(calls):
                    torch.matmul(x, y)
                per_call.append((time.perf_counter() - t0) / calls)
            figures[name] = 2.0 * m * n * k / statistics.median(per_call) / 1e9
        out.append(figures)
    print(json.dumps(out))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--pairs", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--peer", help=argparse.SUPPRESS)  # the PyTorch side, run by this script
    a = ap.parse_args()
    if a.peer is not None:
        return peer(a.peer, a.rounds)
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", MKL_NUM_THREADS="1")
    strata_cmd = [os.path.join(a.build, "bench", "bench_gemm"), "--bf16", "--rounds", str(a.rounds)]
    pairs = []
    for _ in range(a.pairs):
        lines = subprocess.run(strata_cmd, env=env, check=True, capture_output=True, text=True).stdout.splitlines()
        ours = [json.loads(line) for line in lines if line.startswith("{")]
        if any("skipped" in o for o in ours):
            print(ours[0])
            return 0
        shapes = json.dumps([{k: o[k] for k in ("m", "n", "k", "trans_a", "trans_b")} for o in ours])
        theirs = json.loads(subprocess.run([sys.executable, HERE, "--peer", shapes, "--rounds", str(a.rounds)], env=env,
                                           check=True, capture_output=True, text=True).stdout)
        pairs.append(list(zip(ours, theirs)))
    for i, (first, _) in enumerate(pairs[0]):
        vs_torch = [p[i][0]["bf16_gflops"] / p[i][1]["bf16"] for p in pairs]
        vs_float = [p[i][0]["bf16_gflops"] / p[i][0]["float_gflops"] for p in pairs]
        med = lambda key, side: round(statistics.median(p[i][side][key] for p in pairs), 1)
        print(json.dumps({
            "bench": "gemm_vs_pytorch", "shape": first["shape"], "m": first["m"], "n": first["n"], "k": first["k"],
            "trans_a": first["trans_a"], "trans_b": first["trans_b"], "pairs": a.pairs,
            "bf16_kernel": first["bf16_kernel"], "strata_bf16_gflops": med("bf16_gflops", 0),
            "strata_float_gflops": med("float_gflops", 0), "pytorch_bf16_gflops": med("bf16", 1),
            "pytorch_float_gflops": med("float", 1),
            "bf16_vs_pytorch_bf16": round(statistics.median(vs_torch), 3),
            "bf16_vs_pytorch_bf16_min": round(min(vs_torch), 3), "bf16_vs_pytorch_bf16_max": round(max(vs_torch), 3),
            "bf16_vs_strata_float": round(statistics.median(vs_float), 3)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
