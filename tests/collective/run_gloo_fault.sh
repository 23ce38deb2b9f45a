#!/usr/bin/env bash
# Runs gloo_fault under strata-run and checks that the job fails within a bound, each
# surviving rank naming the collective.   usage: run_gloo_fault.sh STRATA_RUN EXE MODE [file|tcp] [REPEAT]
# REPEAT runs the job that many times: a race between a rank's exit and the others' last wait
# shows in a fraction of runs only.
set -u
run=$1 exe=$2 mode=$3 rendezvous=${4:-file} repeat=${5:-1}
if ((repeat > 1)); then
  for ((i = 1; i <= repeat; ++i)); do
    once=$("$0" "$run" "$exe" "$mode" "$rendezvous" 1 2>&1) || { echo "$once"; echo "FAIL: run $i of $repeat"; exit 1; }
  done
  echo "PASS ($repeat runs)"
  exit 0
fi
start=$(date +%s%N)
out=$(timeout 60 "$run" -np 3 --rendezvous "$rendezvous" --grace 2 -- "$exe" "$mode" 2>&1); rc=$?
elapsed_ms=$((($(date +%s%N) - start) / 1000000))
echo "$out" | tail -20
echo "exit status $rc after ${elapsed_ms} ms"
fail() { echo "FAIL: $*"; exit 1; }
((rc != 0)) || fail "the job exited 0"
((rc != 124)) || fail "the job hung until the outer timeout"
[[ $out != *"went unnoticed"* ]] || fail "a rank finished without noticing"
if [[ $mode == stop ]]; then  # RELIABILITY A3: a timeout (2 s), not sooner, naming the stopped rank
  grep -q "^\[[02]\] rank [02]: \[strata.collective.timeout\] allreduce #1 .*did not arrive: rank 1 is stopped" <<<"$out" ||
    fail "no survivor named the stopped rank 1"
  ((elapsed_ms >= 1000)) || fail "failed after ${elapsed_ms} ms, before half the 2 s deadline"
  ((elapsed_ms < 20000)) || fail "took ${elapsed_ms} ms"
elif [[ $mode == skip ]]; then
  grep -q "^\[[02]\] rank [02]: \[strata.collective.timeout\] allreduce #1" <<<"$out" || fail "no timeout naming allreduce #1"
  ((elapsed_ms < 20000)) || fail "took ${elapsed_ms} ms"
else
  grep -q "rank 1 was killed by signal 9" <<<"$out" || fail "strata-run did not name the killed rank"
  grep -q "^\[[02]\] rank [02]: \[strata.collective.peer\] allreduce #1 .*peer lost: rank 1 is no longer running" <<<"$out" ||
    fail "no survivor named rank 1 as the lost peer"
  ((elapsed_ms < 10000)) || fail "took ${elapsed_ms} ms"
fi
echo "PASS"
