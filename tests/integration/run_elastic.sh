#!/usr/bin/env bash
# In-job elasticity (issue bar): 4 workers of elastic_trainer under strata-run --elastic 2:4; the
# one started as rank 1 is SIGKILLed at step 20 of 2 epochs (16 steps each at 4 ranks). Passes when the job ends with 0,
# the 3 survivors resume at step 20 (at most the step in flight lost), each takes its next step
# within 2 s of the kill, they end with bit-identical parameters, and every example of each
# epoch was trained exactly once (the steps the next generation kept, counted from the logs).
# KILL_RANK and KILL_STEP choose another victim and step (the fault suite draws them).
#   usage: run_elastic.sh STRATA_RUN ELASTIC_TRAINER [KILL_RANK] [KILL_STEP]
set -u
run=$1 trainer=$2 kill_rank=${3:-1} kill_step=${4:-20}
fail() { echo "FAIL: $*"; exit 1; }
out=$(STRATA_COLLECTIVE_TIMEOUT=10 timeout 120 "$run" -np 4 --elastic 2:4 -- "$trainer" 2 "$kill_rank" "$kill_step" 2>&1); rc=$?
grep -v "^\[[0-9]\] step " <<<"$out" | tail -25
echo "exit status $rc"
((rc == 0)) || fail "the elastic job failed"
grep -q "strata-run: rank $kill_rank was killed by signal 9; the job goes on without it (--elastic)" <<<"$out" ||
  fail "strata-run did not name the lost rank"
log=$(mktemp)
trap 'rm -f "$log"' EXIT
printf '%s\n' "$out" >"$log"
python3 "$(dirname "$0")/elastic_log.py" "$log" --ranks 3 --epochs 2 --kill "$kill_rank" "$kill_step" || exit 1
echo PASS
