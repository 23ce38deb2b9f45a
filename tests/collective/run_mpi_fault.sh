#!/usr/bin/env bash
# Runs mpi_fault under mpirun and checks that the job fails (exit non-zero) within a bound,
# with the message the mode calls for.  usage: run_mpi_fault.sh MPIRUN EXE MODE
set -u
mpirun=$1 exe=$2 mode=$3
start=$(date +%s%N)
out=$(timeout 60 "$mpirun" -np 3 "$exe" "$mode" 2>&1); rc=$?
elapsed_ms=$((($(date +%s%N) - start) / 1000000))
echo "$out" | tail -20
echo "exit status $rc after ${elapsed_ms} ms"
fail() { echo "FAIL: $*"; exit 1; }
((rc != 0)) || fail "the job exited 0"
((rc != 124)) || [[ $mode != kill ]] || fail "the job hung until the outer timeout"  # skip, stop: MPI_Abort(124)
[[ $out != *"went unnoticed"* ]] || fail "a rank finished without noticing"
if [[ $mode == skip ]]; then
  [[ $out == *"[strata.collective.timeout] allreduce #1"* ]] || fail "no timeout message naming allreduce #1"
elif [[ $mode == kill ]]; then
  grep -q "process rank 1 .* exited on signal 9" <<<"$out" || fail "mpirun did not name the killed rank"
else  # stop (RELIABILITY A3): a timeout, not sooner than half the 2 s deadline, naming the stopped rank
  grep -q "\[strata.collective.timeout\] allreduce #1 .*did not arrive: rank 1 is stopped" <<<"$out" ||
    fail "no timeout naming the stopped rank 1"
  ((elapsed_ms >= 1000)) || fail "failed after ${elapsed_ms} ms, before half the deadline"
fi
((elapsed_ms < 30000)) || fail "took ${elapsed_ms} ms"
echo "PASS"
