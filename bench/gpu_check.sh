#!/bin/bash
# The GPU path on a machine with a GPU, in one run: every CUDA test program (also under
# compute-sanitizer), the trainers' accuracy bars, strata against the machine's PyTorch, and
# strata::Nccl against raw NCCL. The programs come prebuilt (a build with -Dcuda=enabled, see
# docs/gpu.md); the data are the four Fashion-MNIST IDX files.
#
#   bench/gpu_check.sh BIN_DIR DATA_DIR [REPORT_DIR]
#
# BIN_DIR holds test_cuda_tensor, test_cuda_kernels, test_cuda_training, test_nccl,
# fashion_mnist_cuda, char_transformer_cuda, bench_train_cuda, bench_nccl and strata-info (a
# build's tests/cuda, examples, bench and tools outputs, flattened); STRATA_FORTUNES_DIR names
# the fortunes text where it is not /usr/share/games/fortunes. The order puts correctness first:
# the tests and the sanitizers on the newest kernels, the trainers, then the benchmarks. Each step has its own time limit, and a
# failing step does not stop the later ones; each step's whole output is appended to
# REPORT_DIR/steps.log as it ends, and the summary at the end says what passed. GPU_CHECK_ONLY
# (step names, space-separated) runs only those steps, for a second look within a short lease.
set -u
BIN=$(readlink -f "$1")
DATA=$(readlink -f "$2")
REPORT=${3:-${OUT:-/tmp/gpu_check}}
LOG=$(mktemp -d)
mkdir -p "$REPORT"
HERE=$(cd "$(dirname "$0")" && pwd)
export STRATA_FASHION_MNIST_DIR=$DATA PYTHONUNBUFFERED=1
summary=()

# The CUDA libraries the programs link: the toolkit's, else the ones Python wheels carry.
for lib in libcudart.so.13 libcublas.so.13 libcublasLt.so.13 libcudnn.so.9 libnccl.so.2; do
  if ! ldconfig -p | grep -q "$lib"; then
    hit=$(find /usr/local/cuda*/lib64 /usr/local/cuda*/targets /usr/lib/x86_64-linux-gnu /opt /usr/local/lib \
            -name "$lib" 2>/dev/null | head -1)
    [ -n "$hit" ] && export LD_LIBRARY_PATH=$(dirname "$hit")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  fi
done
echo "LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}"
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,clocks.max.sm --format=csv
ldd "$BIN/test_nccl" "$BIN/fashion_mnist_cuda" | grep "not found"
"$BIN/strata-info" 2>&1 | head -30

step() {  # step NAME LIMIT_S COMMAND... : runs it with a limit, logs it, records pass/fail
  local name=$1 limit=$2
  shift 2
  if [ -n "${GPU_CHECK_ONLY:-}" ] && [[ " $GPU_CHECK_ONLY " != *" $name "* ]]; then return; fi
  local t0=$SECONDS
  timeout -k 5 "$limit" "$@" >"$LOG/$name.log" 2>&1
  local rc=$?
  { echo "==== $name (rc=$rc, $((SECONDS - t0)) s): $*"; cat "$LOG/$name.log"; } >>"$REPORT/steps.log"
  summary+=("$(printf '%-28s rc=%-3s %4ss' "$name" "$rc" $((SECONDS - t0)))")
  echo "== $name: rc=$rc ($((SECONDS - t0)) s)"
  tail -n 4 "$LOG/$name.log"
}

# 1. Every CUDA test program: 77 would be a skip, and counts as a failure here.
for t in test_cuda_tensor test_cuda_kernels test_cuda_training test_nccl; do
  step "$t" 150 "$BIN/$t" --no-colors
done
CS=$(command -v compute-sanitizer || { [ -x /usr/local/cuda/bin/compute-sanitizer ] && echo /usr/local/cuda/bin/compute-sanitizer; })
[ -n "$CS" ] && step memcheck_test_cuda_training 120 "$CS" --tool memcheck --error-exitcode 9 "$BIN/test_cuda_training" --no-colors

# 1b. The layers' models on the GPU: the ResNet one epoch, the character Transformer 500 steps.
step resnet_seed0 150 "$BIN/fashion_mnist_cuda" --device cuda:0 --model resnet --epochs 1 --seed 0 --quiet
step char_transformer 150 "$BIN/char_transformer_cuda" --device cuda:0 --steps 500 --eval-every 500 --quiet

# 2. The trainers' accuracy bars: MLP 3 epochs, seeds 0-2 (mean >= 84.9 %); CNN 1 epoch (>= 84.5 %).
for seed in 0 1 2; do
  step "mlp_seed$seed" 90 "$BIN/fashion_mnist_cuda" --device cuda:0 --model mlp --epochs 3 --seed "$seed" --quiet
done
step cnn_seed0 90 "$BIN/fashion_mnist_cuda" --device cuda:0 --model cnn --epochs 1 --seed 0 --quiet
# The same CNN under MirroredStrategy<Nccl>, one replica per GPU of this machine.
GPUS=$(nvidia-smi --list-gpus | wc -l)
step mirrored_nccl_cnn_seed0 90 "$BIN/fashion_mnist_cuda" --strategy mirrored --collective nccl --replicas "$GPUS" \
  --model cnn --epochs 1 --seed 0 --quiet
# And under CentralStorageStrategy: the variables on the host, replica r on cuda:r.
step central_storage_cnn_seed0 120 "$BIN/fashion_mnist_cuda" --strategy central_storage --replicas "$GPUS" \
  --device cuda:0 --model cnn --epochs 1 --seed 0 --quiet
python3 - "$LOG" <<'EOF'
import json, sys, glob, os
acc = {}
for f in sorted(glob.glob(os.path.join(sys.argv[1], "*_seed*.log"))):
    lines = [l for l in open(f) if l.startswith("{")]
    if lines:
        r = json.loads(lines[-1])
        acc[os.path.basename(f)[:-4]] = (r["test_accuracy"], r["steady_examples_per_s"])
print("accuracy", json.dumps(acc))
mlp = [a for k, (a, _) in acc.items() if k.startswith("mlp")]
if mlp: print("mlp mean of %d seeds: %.4f (bar 0.849)" % (len(mlp), sum(mlp) / len(mlp)))
EOF

# 3. strata::Nccl against raw ncclAllReduce.
step nccl_out_of_place 60 "$BIN/bench_nccl" --iters 60
step nccl_in_place 60 "$BIN/bench_nccl" --iters 60 --inplace
cat "$LOG/nccl_out_of_place.log" "$LOG/nccl_in_place.log"

# 4. strata against the machine's PyTorch, eager, float32, same run, A B A B.
mkdir -p "$LOG/build/bench" "$LOG/build/examples" "$LOG/build/tools"
ln -sf "$BIN/bench_train_cuda" "$LOG/build/bench/bench_train_cuda"
ln -sf "$BIN/char_transformer_cuda" "$LOG/build/examples/char_transformer_cuda"
ln -sf "$BIN/strata-info" "$LOG/build/tools/strata-info"
step train_vs_pytorch 200 python3 "$HERE/train_vs_pytorch.py" --build "$LOG/build" --device cuda --batches 64,512 --pairs 3
cat "$LOG/train_vs_pytorch.log"
step transformer_vs_pytorch 200 python3 "$HERE/transformer_vs_pytorch.py" --build "$LOG/build" --device cuda \
  --steps 300 --pairs 2
cat "$LOG/transformer_vs_pytorch.log"
rm -rf "$LOG/build"

# 4b. Where the Transformer's step goes on the device: each kernel's time (Nsight Compute, the
# clocks left as they are), over launches past the first steps' warm-up.
NCU=$(command -v ncu || ls /usr/local/cuda*/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
if [ -n "$NCU" ]; then
  step ncu_transformer 150 "$NCU" --clock-control none --metrics gpu__time_duration.sum --print-summary per-kernel \
    --launch-skip 3000 --launch-count 1500 "$BIN/char_transformer_cuda" --device cuda:0 --steps 40 --eval-every 1000 --quiet
  cp "$LOG/ncu_transformer.log" "$REPORT/ncu_transformer.log"
fi

# 5. compute-sanitizer: memory errors and shared-memory races.
if [ -n "$CS" ]; then
  for t in test_cuda_tensor test_cuda_kernels; do
    step "memcheck_$t" 90 "$CS" --tool memcheck --error-exitcode 9 "$BIN/$t" --no-colors
  done
  # libnccl probes its kernels with cudaFuncGetAttributes, which answers "no kernel image" for
  # the architectures the device is not: API errors inside NCCL, not memory errors (strata
  # checks every CUDA call of its own).
  step memcheck_test_nccl 90 "$CS" --tool memcheck --report-api-errors no --error-exitcode 9 "$BIN/test_nccl" --no-colors
  for t in test_cuda_kernels test_cuda_tensor test_cuda_training; do
    step "racecheck_$t" 120 "$CS" --tool racecheck --error-exitcode 9 "$BIN/$t" --no-colors
  done
  step racecheck_test_nccl 120 "$CS" --tool racecheck --report-api-errors no --error-exitcode 9 "$BIN/test_nccl" --no-colors
fi

echo "==== summary"
printf '%s\n' "${summary[@]}"
