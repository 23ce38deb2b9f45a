#!/usr/bin/env bash
# In-job elasticity (issue bar): 4 workers of elastic_trainer under strata-run --elastic 2:4,
# 2 epochs (16 steps each at 4 ranks); by default the one started as rank 1 is SIGKILLed at
# step 20. Passes when the job ends with 0, the survivors take their next step within 2 s of
# each kill (for a single kill at a step: they all resume at that step, at most the step in
# flight lost), they end with bit-identical parameters, and every example of each epoch was
# trained exactly once (the steps the next generation kept, counted from the logs).
#   usage: run_elastic.sh STRATA_RUN ELASTIC_TRAINER [KILL_RANK KILL_STEP]
#          run_elastic.sh STRATA_RUN ELASTIC_TRAINER FAULTS SURVIVORS
# FAULTS as elastic_trainer takes them: "1@10,2@11" (two kills in succession), "1@20,2@g2" (the
# second worker killed while the first change is under way).
set -u
run=$1 trainer=$2
fail() { echo "FAIL: $*"; exit 1; }
if [[ ${3:-} == *@* ]]; then
  faults=$3 survivors=$4 check=(--kills "$(tr ',' '\n' <<<"$faults" | wc -l)")
else
  kill_rank=${3:-1} kill_step=${4:-20}
  faults=$kill_rank@$kill_step survivors=3 check=(--kill "$kill_rank" "$kill_step")
fi
out=$(STRATA_COLLECTIVE_TIMEOUT=10 timeout 120 "$run" -np 4 --elastic 2:4 -- "$trainer" synthetic 2 "$faults" 2>&1); rc=$?
grep -v "^\[[0-9]\] step " <<<"$out" | tail -25
echo "exit status $rc"
((rc == 0)) || fail "the elastic job failed"
for f in ${faults//,/ }; do
  grep -q "strata-run: rank ${f%%@*} was killed by signal 9; the job goes on without it (--elastic)" <<<"$out" ||
    fail "strata-run did not name the lost rank ${f%%@*}"
done
log=$(mktemp)
trap 'rm -f "$log"' EXIT
printf '%s\n' "$out" >"$log"
python3 "$(dirname "$0")/elastic_log.py" "$log" --ranks "$survivors" --epochs 2 "${check[@]}" || exit 1
echo PASS
