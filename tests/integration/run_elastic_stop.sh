#!/usr/bin/env bash
# A stopped worker (RELIABILITY B2, issue 29): 4 workers of elastic_trainer under strata-run
# --elastic 2:4, collective timeout 3 s; the one started as rank 1 SIGSTOPs itself before step
# 10. The survivors' all-reduce times out, their census through the store finds rank 1 silent,
# the store drops it, and they go on. Once they have, the script sends SIGCONT: the stopped
# worker must learn it was dropped (evicted) and end, never act in the new generation. Passes
# when the job ends with 0, the 3 survivors hold bit-identical parameters, every example of
# each epoch was trained exactly once, and the comeback was refused with the reason.
#   usage: run_elastic_stop.sh STRATA_RUN ELASTIC_TRAINER
set -u
run=$1 trainer=$2
fail() { echo "FAIL: $*"; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
STRATA_COLLECTIVE_TIMEOUT=3 timeout 120 "$run" -np 4 --elastic 2:4 -- "$trainer" synthetic 2 1@10:stop >"$work/job.log" 2>&1 &
job=$!
for ((i = 0; i < 400; ++i)); do grep -q "^\[0\] generation 2 " "$work/job.log" && break; sleep 0.05; done
grep -q "^\[0\] generation 2 " "$work/job.log" || { cat "$work/job.log"; fail "the survivors did not go on without the stopped worker"; }
pid=$(sed -n 's/^\[1\] start [0-9]* pid \([0-9]*\)$/\1/p' "$work/job.log")
[[ -n $pid ]] || fail "no pid of the stopped worker"
kill -CONT "$pid"
wait $job; rc=$?
grep -v "\] step " "$work/job.log" | tail -20
echo "exit status $rc"
((rc == 0)) || fail "the elastic job failed"
grep -q "^\[1\] elastic_trainer: .*strata.elastic.dropped.*evicted at the report of .*: it did not answer" "$work/job.log" ||
  fail "the stopped worker, continued, was not told it was dropped"
grep -q "^\[[0-9]\] step 10 generation 1 " "$work/job.log" && fail "a step 10 of generation 1 completed"
python3 "$(dirname "$0")/elastic_log.py" "$work/job.log" --ranks 3 --epochs 2 || exit 1
echo PASS
