#!/usr/bin/env bash
# A worker joins an elastic job (issue bar): 3 workers of elastic_trainer under strata-run
# --elastic 2:4; once they are past step 10, a fourth process is started outside strata-run
# with the job's STRATA_ELASTIC, STRATA_MASTER_ADDR/PORT and STRATA_JOB_TOKEN. Passes when it
# takes part in a step within 2 s of its start, the four end with bit-identical parameters,
# and every example of each epoch was trained exactly once.
#   usage: run_elastic_join.sh STRATA_RUN ELASTIC_TRAINER
set -u
run=$1 trainer=$2
fail() { echo "FAIL: $*"; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
export STRATA_JOB_TOKEN=$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n') STRATA_COLLECTIVE_TIMEOUT=10
STRATA_JOB_TOKEN=$STRATA_JOB_TOKEN timeout 120 "$run" -np 3 --elastic 2:4 --port "$port" -- "$trainer" 3 -1 -1 20 >"$work/job.log" 2>&1 &
job=$!
for ((i = 0; i < 600; ++i)); do grep -q "\] step 10 " "$work/job.log" && break; sleep 0.05; done
grep -q "\] step 10 " "$work/job.log" || { cat "$work/job.log"; fail "the job did not reach step 10"; }
STRATA_ELASTIC=2:4 STRATA_MASTER_ADDR=127.0.0.1 STRATA_MASTER_PORT=$port timeout 120 "$trainer" 3 -1 -1 20 >"$work/joiner.log" 2>&1
joiner_rc=$?
wait $job; rc=$?
sed 's/^/[joiner] /' "$work/joiner.log" >>"$work/job.log"
grep -v "\] step " "$work/job.log" | tail -20
echo "job exit status $rc, joiner $joiner_rc"
((rc == 0 && joiner_rc == 0)) || fail "the job or the joiner failed"
python3 "$(dirname "$0")/elastic_log.py" "$work/job.log" --ranks 4 --epochs 3 --joiner || exit 1
echo PASS
