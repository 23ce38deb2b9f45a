#!/usr/bin/env bash
# The accuracy bar of in-job elasticity (docs/elastic.md): the MLP on Fashion-MNIST, 1 epoch,
# 4 workers under strata-run --elastic 2:4, per-worker batch 32, for each of 3 seeds:
#   uninterrupted   the 4 workers throughout
#   loss + join     the worker started as rank 1 is SIGKILLed before step 150; once the others
#                   are past step 250 a new worker joins (the job's token), and the 4 finish
# Prints each run's test accuracy, and the interrupted runs' exactly-once count of the epoch's
# 60,000 examples (tests/integration/elastic_log.py). Passes when every interrupted run saw
# every example once and the two means differ by no more than the uninterrupted runs'
# seed-to-seed spread (their max - min).
#   usage: bench/elastic_accuracy.sh BUILD_DIR [FASHION_MNIST_DIR]
set -u
build=$1 data=${2:-${STRATA_FASHION_MNIST_DIR:-/usr/share/datasets/fashion-mnist}}
run=$build/tools/strata-run trainer=$build/tests/elastic_trainer
here=$(cd "$(dirname "$0")" && pwd)
fail() { echo "FAIL: $*"; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export STRATA_COLLECTIVE_TIMEOUT=20
accuracy() { sed -n 's/.*done: .* test accuracy \([0-9.]*\)$/\1/p' "$1"; }
plain=() interrupted=()
for seed in 1 2 3; do
  timeout 600 "$run" -np 4 --elastic 2:4 -- "$trainer" "$data" 1 - 0 "$seed" >"$work/plain.log" 2>&1 ||
    { tail "$work/plain.log"; fail "the uninterrupted run of seed $seed failed"; }
  plain+=("$(accuracy "$work/plain.log")")

  port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  export STRATA_JOB_TOKEN=$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')
  timeout 600 "$run" -np 4 --elastic 2:4 --port "$port" -- "$trainer" "$data" 1 1@150 0 "$seed" >"$work/job.log" 2>&1 &
  job=$!
  for ((i = 0; i < 2400; ++i)); do grep -q "\] step 250 " "$work/job.log" && break; sleep 0.05; done
  STRATA_ELASTIC=2:4 STRATA_MASTER_ADDR=127.0.0.1 STRATA_MASTER_PORT=$port timeout 600 "$trainer" "$data" 1 - 0 "$seed" \
    >"$work/joiner.log" 2>&1 || { tail "$work/joiner.log"; fail "the joiner of seed $seed failed"; }
  wait $job || { tail "$work/job.log"; fail "the interrupted run of seed $seed failed"; }
  unset STRATA_JOB_TOKEN
  sed 's/^/[joiner] /' "$work/joiner.log" >>"$work/job.log"
  echo "seed $seed, loss + join:"
  python3 "$here/../tests/integration/elastic_log.py" "$work/job.log" --ranks 4 --epochs 1 --examples 60000 --kills 1 --joiner |
    sed 's/^/  /'
  ((PIPESTATUS[0] == 0)) || fail "seed $seed: the interrupted run's log checks failed"
  interrupted+=("$(accuracy "$work/job.log")")
  echo "  test accuracy: uninterrupted ${plain[-1]}, loss + join ${interrupted[-1]}"
done
python3 - "${plain[@]}" "${interrupted[@]}" <<'PY'
import statistics, sys
v = [float(x) for x in sys.argv[1:]]
plain, inter = v[:3], v[3:]
lo, hi, m = min(plain), max(plain), statistics.mean(inter)
print(f"uninterrupted: {plain} mean {statistics.mean(plain):.4f} spread {hi - lo:.4f}")
print(f"loss + join:   {inter} mean {m:.4f}")
d = abs(m - statistics.mean(plain))
ok = d <= hi - lo
print(f"difference of the means {d:.4f}, seed-to-seed spread {hi - lo:.4f}")
print("PASS" if ok else "FAIL: the means differ by more than the seed-to-seed spread")
sys.exit(0 if ok else 1)
PY
