#!/usr/bin/env bash
# An elastic job under ShardedStrategy's stage 3 (elastic_trainer_sharded), its state moving
# through sharded checkpoints every 8 steps:
#   kill  4 workers under strata-run --elastic 2:4, 2 epochs; the one started as rank 1 is
#         SIGKILLed before step 21. Its shard is gone with it: the 3 survivors all resume
#         generation 2 at step 16, the newest checkpoint, resharded from 4 ranks to 3
#   join  3 workers, 3 epochs; a fourth joins past step 10. The 3 save their shards at the
#         step boundary where they see it, and all 4 resume generation 2 at that step: no step
#         lost, the state resharded from 3 ranks to 4
# Either way the job ends with 0, the last generation's workers with bit-identical parameters,
# and every example of each epoch trained exactly once (counting the steps each generation
# kept: elastic_log.py).
#   usage: run_elastic_sharded.sh STRATA_RUN ELASTIC_TRAINER_SHARDED kill|join
set -u
run=$1 trainer=$2 mode=$3
fail() { echo "FAIL: $*"; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export STRATA_COLLECTIVE_TIMEOUT=10
log() { python3 "$(dirname "$0")/elastic_log.py" "$work/job.log" "$@"; }
# The steps each process resumed generation G at.
resumed() { grep -o "generation $1 rank [0-9]* of [0-9]* resumes at step [0-9]*" "$work/job.log" | awk '{print $NF}' | sort -u; }
case $mode in
kill)
  STRATA_COLLECTIVE_TIMEOUT=10 timeout 150 "$run" -np 4 --elastic 2:4 -- "$trainer" synthetic 2 1@21 0 11 "$work/ck" \
    >"$work/job.log" 2>&1
  rc=$?
  grep -v "^\[[0-9]\] step " "$work/job.log" | tail -20
  echo "exit status $rc"
  ((rc == 0)) || fail "the elastic job failed"
  grep -q "strata-run: rank 1 was killed by signal 9; the job goes on without it (--elastic)" "$work/job.log" ||
    fail "strata-run did not name the lost rank"
  [[ $(resumed 2) == 16 ]] || fail "the survivors resumed generation 2 at step(s) $(resumed 2 | tr '\n' ' '), not 16"
  (($(grep -c "generation 2 rank [0-9] of 3 resumes at step 16" "$work/job.log") == 3)) || fail "not 3 survivors at step 16"
  log --ranks 3 --epochs 2 --kills 1 || exit 1
  ;;
join)
  port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  export STRATA_JOB_TOKEN=$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')
  timeout 150 "$run" -np 3 --elastic 2:4 --port "$port" -- "$trainer" synthetic 3 - 20 11 "$work/ck" >"$work/job.log" 2>&1 &
  job=$!
  for ((i = 0; i < 600; ++i)); do grep -q "\] step 10 " "$work/job.log" && break; sleep 0.05; done
  grep -q "\] step 10 " "$work/job.log" || { cat "$work/job.log"; fail "the job did not reach step 10"; }
  STRATA_ELASTIC=2:4 STRATA_MASTER_ADDR=127.0.0.1 STRATA_MASTER_PORT=$port \
    timeout 150 "$trainer" synthetic 3 - 20 11 "$work/ck" >"$work/joiner.log" 2>&1
  joiner_rc=$?
  wait $job; rc=$?
  sed 's/^/[joiner] /' "$work/joiner.log" >>"$work/job.log"
  grep -v "\] step " "$work/job.log" | tail -14
  echo "job exit status $rc, joiner $joiner_rc"
  ((rc == 0 && joiner_rc == 0)) || fail "the job or the joiner failed"
  at=$(resumed 2)
  [[ $at =~ ^[0-9]+$ ]] || fail "generation 2 resumed at more than one step: $(tr '\n' ' ' <<<"$at")"
  (($(grep -c "generation 2 rank [0-9] of 4 resumes at step $at offset .* after a change of membership" "$work/job.log") == 3)) ||
    fail "not the 3 workers resumed generation 2 at step $at after the change"
  grep -q "^\[joiner\] generation 2 rank [0-9] of 4 resumes at step $at " "$work/job.log" || fail "the joiner did not resume at step $at"
  last=$(grep -o "step [0-9]* generation 1 " "$work/job.log" | awk '{print $2}' | sort -n | tail -1)
  ((last + 1 == at)) || fail "generation 1 trained to step $last, generation 2 resumed at $at: steps lost"
  echo "generation 2 resumed at step $at, the step after generation 1's last ($last): none lost"
  log --ranks 4 --epochs 3 --joiner || exit 1
  ;;
*) fail "unknown mode $mode" ;;
esac
echo PASS
