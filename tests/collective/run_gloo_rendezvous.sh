#!/usr/bin/env bash
# Incomplete rendezvous (RELIABILITY A7): a world of 3 in which rank 2 never starts. Both
# started ranks must fail within the deadline, naming the missing rank.
#   usage: run_gloo_rendezvous.sh GLOO_FAULT_EXE [file|tcp]
set -u
exe=$1 rendezvous=${2:-file}
dir=$(mktemp -d)
chmod 700 "$dir"
trap 'rm -rf "$dir"' EXIT
export STRATA_WORLD_SIZE=3
source "$(dirname "$0")/rendezvous_env.sh"
start=$(date +%s%N)
for r in 0 1; do
  STRATA_RANK=$r timeout 60 "$exe" skip >"$dir/out$r" 2>&1 &
done
rc=0
for job in $(jobs -p); do wait "$job" || rc=$((rc + 1)); done
elapsed_ms=$((($(date +%s%N) - start) / 1000000))
cat "$dir/out0" "$dir/out1"
echo "$rc of 2 ranks failed after ${elapsed_ms} ms"
((rc == 2)) || { echo "FAIL: a rank did not fail"; exit 1; }
for r in 0 1; do
  grep -q "world_size=3, joined=2, missing=\[2\]" "$dir/out$r" || { echo "FAIL: rank $r does not name rank 2"; exit 1; }
done
((elapsed_ms < 20000)) || { echo "FAIL: took ${elapsed_ms} ms"; exit 1; }
echo PASS
