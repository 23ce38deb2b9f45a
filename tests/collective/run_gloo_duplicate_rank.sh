#!/usr/bin/env bash
# Duplicate rank (RELIABILITY D5): a world of 2 started as ranks 0, 1 and 1. The second rank 1
# must fail at once naming both claimants (the first two form a valid world and are stopped).
#   usage: run_gloo_duplicate_rank.sh GLOO_FAULT_EXE [file|tcp]
set -u
exe=$1 rendezvous=${2:-file}
dir=$(mktemp -d)
chmod 700 "$dir"
trap 'rm -rf "$dir"' EXIT
export STRATA_WORLD_SIZE=2 STRATA_COLLECTIVE_TIMEOUT=3
source "$(dirname "$0")/rendezvous_env.sh"
STRATA_RANK=0 timeout 60 "$exe" skip >"$dir/out0" 2>&1 & p0=$!
STRATA_RANK=1 timeout 60 "$exe" skip >"$dir/out1" 2>&1 & p1=$!
sleep 0.5  # the first rank 1 claims first
start=$(date +%s%N)
STRATA_RANK=1 timeout 60 "$exe" skip >"$dir/dup" 2>&1; dup_rc=$?
dup_ms=$((($(date +%s%N) - start) / 1000000))
kill "$p0" "$p1" 2>/dev/null  # timeout passes the signal on
wait "$p0" "$p1" 2>/dev/null
cat "$dir/dup"
echo "duplicate exited $dup_rc after ${dup_ms} ms"
((dup_rc != 0 && dup_rc != 124)) || { echo "FAIL: the duplicate rank did not fail"; exit 1; }
grep -q "rank 1 of rendezvous 'world' claimed by .*:[0-9]* and .*:[0-9]*: two processes have the same rank" "$dir/dup" ||
  { echo "FAIL: the error does not name both claimants"; exit 1; }
((dup_ms < 2000)) || { echo "FAIL: the duplicate took ${dup_ms} ms to fail"; exit 1; }
echo PASS
