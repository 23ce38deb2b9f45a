#!/usr/bin/python3
"""Data-parallel training throughput with 2 replicas: strata's MirroredStrategy (2 threads;
whole gradients, the default, sharded ones: --gradients sharded, and sharded ones with the
rows divided by measured speed: --rows measured), MultiWorkerMirroredStrategy<Mpi>
and <Gloo> (2 processes) beside PyTorch DDP (gloo, 2 processes x 1 thread), on the reference MLP and CNN with batch 64 per replica, in the same run.
Each round runs every configuration once, in an order of its own (a fixed-seed shuffle): on
this host a 2-replica run that follows a 1-replica one (its second core idle for a second) is
slower in most pairs, and a fixed order, or a rotation of one, would charge that to the same
configuration every round. The figures are medians over the rounds.
Both sides count examples/s the same way: wall time over the same number of steps (--steps)
after the first 20 (strata's steady_examples_per_s; pytorch_ddp.py's --warmup 20). One JSON line per
configuration: examples/s, the ratio to DDP, the scaling efficiency (2-replica examples/s /
(2 x the 1-replica examples/s of the same implementation)), both also taken within each
round (ratio_per_round, scaling_per_round: [min, median, max]), the scaling over whole runs
(warm-up steps included), and the gradient all-reduce time per step with the share of it
hidden behind backward.
DDP runs the OpenBLAS kernels strata runs, or OpenBLAS's AVX-512 ones where strata runs its own
AVX-512 GEMM (peer_env: OPENBLAS_CORETYPE for its linear layers).
The host's own ceiling is measured beside them: two independent one-device runs at once (no
communication at all), `ceiling_scaling` = their summed examples/s / (2 x one run alone).
On a host whose two cores slow each other down (shared caches, memory bandwidth, a busy
hypervisor), no data-parallel run can scale better than that; `scaling_vs_ceiling` is a
configuration's scaling efficiency over it.

    /usr/bin/python3 bench/data_parallel.py --build build [--rounds 3] [--models mlp,cnn] [--steps N] [--precision bf16]

--precision bf16: every strata run under `--precision bf16`, DDP's forward and loss under CPU
autocast bfloat16 (both keep float32 masters and reduce float32 gradients).
"""
import argparse
import json
import os
import random
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def parse_last_json(out):
    line = [l for l in out.strip().splitlines() if "{" in l][-1]
    return json.loads(line[line.index("{"):])


def last_json(cmd, env):
    return parse_last_json(subprocess.run(cmd, check=True, capture_output=True, text=True, env=env).stdout)


def pair_json(cmd, env):
    """Two copies of a one-replica run at once, with different seeds; their summed rates."""
    procs = [subprocess.Popen(cmd + ["--seed", str(s)], stdout=subprocess.PIPE, text=True, env=env) for s in (1, 2)]
    outs = [p.communicate()[0] for p in procs]
    if any(p.returncode for p in procs):
        raise subprocess.CalledProcessError(max(p.returncode for p in procs), cmd)
    got = [parse_last_json(o) for o in outs]
    return {k: sum(g[k] for g in got) for k in ("examples_per_s", "steady_examples_per_s")}


def run_env():
    """The environment of every measured run: one BLAS/OpenMP thread per process, and mpirun
    allowed as root and past one process per core."""
    return dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", OMPI_ALLOW_RUN_AS_ROOT="1",
                OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", OMPI_MCA_rmaps_base_oversubscribe="1",
                OMPI_MCA_btl_vader_single_copy_mechanism="none")


def strata_info_line(build, key):
    """The value of strata-info's line `key` in this build on this host (its first word), or
    None where the line is absent (a build without OpenBLAS has no "blas kernels" line)."""
    info = os.path.join(build, "tools", "strata-info")
    if not os.path.exists(info):
        sys.exit(f"{info} is missing: meson compile -C {build} tools/strata-info")
    out = subprocess.run([info], check=True, capture_output=True, text=True).stdout
    for line in out.splitlines():
        if line.strip().startswith(key + " "):
            return line.strip()[len(key):].split()[0]
    return None


def blas_kernels(build):
    """The OpenBLAS kernels strata's GEMMs run in this build on this host (strata-info's
    "blas kernels" line; strata re-selects them where OpenBLAS fell back to kernels older than
    the CPU, kernels/strata/kernels/cpu/blas_core.hpp), or None without OpenBLAS."""
    return strata_info_line(build, "blas kernels")


def peer_env(env, build):
    """The peers' environment: OPENBLAS_CORETYPE names the kernels strata runs, so that PyTorch's
    BLAS calls (Debian's torch takes its linear layers' GEMMs from the same OpenBLAS) run the
    same kernels; a peer left on a fallback OpenBLAS chose would flatter the ratio. Where strata
    runs its own AVX-512 GEMM (strata-info's "gemm kernel"), the peer gets OpenBLAS's AVX-512
    kernels, SkylakeX: the nearest it has, whatever OPENBLAS_CORETYPE the host pins. Where strata
    splits its GEMMs with OpenBLAS's own AVX-512 kernels (strata-avx512+openblas), the peer gets
    those same kernels."""
    if strata_info_line(build, "gemm kernel") == "strata-avx512":
        return dict(env, OPENBLAS_CORETYPE="SkylakeX")
    kernels = blas_kernels(build)
    return dict(env, OPENBLAS_CORETYPE=kernels) if kernels else dict(env)


def per_round(num, den, factor=1.0):
    """[min, median, max] over the rounds of num[i] / (factor * den[i]): a figure taken within
    each round, where the two runs it compares ran minutes apart at most, so that the host's
    load drifting between rounds moves both; the spread says how far one round can mislead."""
    q = sorted(n / (factor * d) for n, d in zip(num, den))
    return [round(q[0], 3), round(statistics.median(q), 3), round(q[-1], 3)]


def median_of(runs, key):
    values = [r[key] for r in runs if r.get(key) is not None]
    return round(statistics.median(values), 4) if values else None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--models", default="mlp,cnn")
    ap.add_argument("--steps", type=int, default=None,
                    help="timed steps of each run, after 20 warm-up steps (default: 300 for the MLP, else 60)")
    ap.add_argument("--precision", default="fp32", choices=["fp32", "bf16"])
    a = ap.parse_args()
    env = run_env()
    penv = peer_env(env, a.build)
    fm = os.path.join(a.build, "examples", "fashion_mnist")
    run = os.path.join(a.build, "tools", "strata-run")
    for model in a.models.split(","):
        timed = a.steps or (300 if model == "mlp" else 60)
        common = ["--model", model, "--max-steps", str(20 + timed), "--no-eval", "--quiet", "--precision", a.precision]
        peer = ["--precision", a.precision]
        configs = {
            "one_device": [fm] + common,
            "one_device_pair": [fm] + common,  # run twice at once by pair_json: the ceiling
            "mirrored": [fm] + common + ["--strategy", "mirrored", "--replicas", "2"],
            "mirrored_sharded": [fm] + common + ["--strategy", "mirrored", "--replicas", "2", "--gradients", "sharded"],
            "mirrored_sharded_measured_rows": [fm] + common + ["--strategy", "mirrored", "--replicas", "2",
                                                               "--gradients", "sharded", "--rows", "measured"],
            "multi_worker_mirrored_mpi": ["mpirun", "-np", "2", fm] + common +
                                         ["--strategy", "multi_worker_mirrored", "--collective", "mpi"],
            "multi_worker_mirrored_gloo": [run, "-np", "2", fm] + common +
                                          ["--strategy", "multi_worker_mirrored", "--collective", "gloo"],
            "ddp_1": [sys.executable, os.path.join(HERE, "pytorch_ddp.py"), "--model", model, "--nproc", "1",
                      "--steps", str(timed)] + peer,
            "ddp_2": [sys.executable, os.path.join(HERE, "pytorch_ddp.py"), "--model", model, "--nproc", "2",
                      "--steps", str(timed)] + peer,
        }
        got = {k: [] for k in configs}
        shuffle = random.Random(2026)
        for _ in range(a.rounds):
            order = list(configs)
            shuffle.shuffle(order)
            for k in order:
                got[k].append((pair_json if k == "one_device_pair" else last_json)(
                    configs[k], penv if k.startswith("ddp") else env))
        def rate(r):  # strata's steady-state figure; DDP's already leaves out its warm-up
            return r.get("steady_examples_per_s") or r["examples_per_s"]
        med = {k: statistics.median(rate(r) for r in v) for k, v in got.items()}
        whole = {k: statistics.median(r["examples_per_s"] for r in v) for k, v in got.items()}
        ceiling = med["one_device_pair"] / (2 * med["one_device"])
        rates = {k: [rate(r) for r in v] for k, v in got.items()}
        for k in ("mirrored", "mirrored_sharded", "mirrored_sharded_measured_rows", "multi_worker_mirrored_mpi",
                  "multi_worker_mirrored_gloo"):
            print(json.dumps({
                "bench": "data_parallel", "model": model, "precision": a.precision, "replicas": 2, "strategy": k,
                "rounds": a.rounds,
                "strata_img_s": round(med[k], 1), "peer": "pytorch_ddp_gloo_2x1", "peer_img_s": round(med["ddp_2"], 1),
                "ratio": round(med[k] / med["ddp_2"], 3),
                "scaling_efficiency": round(med[k] / (2 * med["one_device"]), 3),
                "scaling_whole_run": round(whole[k] / (2 * whole["one_device"]), 3),
                "ceiling_scaling": round(ceiling, 3),
                "scaling_vs_ceiling": round(med[k] / med["one_device_pair"], 3),
                "peer_scaling_efficiency": round(med["ddp_2"] / (2 * med["ddp_1"]), 3),
                "ratio_per_round": per_round(rates[k], rates["ddp_2"]),
                "scaling_per_round": per_round(rates[k], rates["one_device"], 2.0),
                "one_replica_img_s": round(med["one_device"], 1),
                "allreduce_ms_per_step": median_of(got[k], "allreduce_ms_per_step"),
                "allreduce_hidden": median_of(got[k], "allreduce_hidden"),
                "blas_kernels": got[k][0].get("blas_kernels"), "peer_blas_kernels": penv.get("OPENBLAS_CORETYPE"),
            }), flush=True)


if __name__ == "__main__":
    main()
