#!/usr/bin/env bash
# A worker joins a running ParameterServerStrategy<Gloo, Async> job with dispatched batches
# (parameter_server_join_training: S servers and 2 workers under strata-run --rendezvous tcp,
# 2 epochs of 750 batches). The joiner is started outside strata-run, with STRATA_PS_JOIN=1 and
# the job's store and token, once the job is training:
#   ok    it takes part in a step within 2 s of its start; in each epoch every batch is
#         completed exactly once, by the workers' steps together; every rank, the joiner
#         included, ends with the same parameters
#   kill  it SIGKILLs itself at its 20th step: the servers drop it, its batches go to the
#         others, every batch of each epoch is completed, and the job's ranks end equal
#   full  the job has max_workers=2: the joiner is refused, named on both sides, and the job
#         goes on unharmed
#   below_min  no joiner; min_workers=2 and worker rank 2 SIGKILLs itself at its 20th step
#         (strata-run --keep-going): the servers end the job, naming the worker left
#   usage: run_parameter_server_join_training.sh STRATA_RUN EXE SERVERS ok|kill|full|below_min
set -u
run=$1 exe=$2 servers=$3 mode=$4
fail() { echo "FAIL: $*"; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
export STRATA_JOB_TOKEN=$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')
export STRATA_COLLECTIVE_TIMEOUT=20
if [[ $mode == below_min ]]; then
  start=$(date +%s%N)
  MIN_WORKERS=2 KILL_RANK=2 KILL_AT_STEP=20 timeout 120 "$run" --keep-going --rendezvous tcp --port "$port" \
    -np $((servers + 2)) "$exe" "$servers" 2 >"$work/job.log" 2>&1
  rc=$?
  elapsed_ms=$((($(date +%s%N) - start) / 1000000))
  cat "$work/job.log"
  echo "job exit status $rc after $elapsed_ms ms"
  ((rc != 0 && rc != 124)) || fail "the job exited $rc"
  grep -q "^\[2\] rank 2: SIGKILL at its step 20" "$work/job.log" || fail "worker rank 2 did not kill itself"
  grep -q "\[strata.ps.peer_lost\] server rank 0: worker rank 2 is gone; 1 worker left, below min_workers=2: left \[1\]; aborting the job" \
    "$work/job.log" || fail "the first server did not end the job naming the worker left"
  ((elapsed_ms < 30000)) || fail "took $elapsed_ms ms"
  echo PASS
  exit 0
fi
max=; [[ $mode == full ]] && max=2
MAX_WORKERS=$max timeout 120 "$run" --rendezvous tcp --port "$port" -np $((servers + 2)) "$exe" "$servers" 2 >"$work/job.log" 2>&1 &
job=$!
for ((i = 0; i < 600; ++i)); do grep -q "first step" "$work/job.log" && break; sleep 0.05; done
grep -q "first step" "$work/job.log" || { cat "$work/job.log"; fail "the job did not start training"; }
sleep 0.3
kill_at=; [[ $mode == kill ]] && kill_at=20
KILL_AT_STEP=$kill_at STRATA_PS_JOIN=1 STRATA_MASTER_ADDR=127.0.0.1 STRATA_MASTER_PORT=$port \
  timeout 60 "$exe" "$servers" 2 >"$work/joiner.log" 2>&1
joiner_rc=$?
wait $job; rc=$?
cat "$work/job.log"
sed 's/^/[joiner] /' "$work/joiner.log"
echo "job exit status $rc, joiner $joiner_rc"
((rc == 0)) || fail "the job failed"
if [[ $mode == full ]]; then
  ((joiner_rc != 0)) || fail "the joiner past max_workers was let in"
  grep -q "server rank 0 refused this worker: the job has its max_workers already" "$work/joiner.log" ||
    fail "the joiner was not told why"
  grep -q "^\[0\] \[strata.ps\] server rank 0: worker rank $((servers + 2)) refused: the job has max_workers=2 workers" \
    "$work/job.log" || fail "the first server did not name the refused joiner"
  for e in 0 1; do
    grep -q "^\[0\] rank 0: epoch $e dispatched 750 batches: 750 completed, 0 again, 0 handed out again" "$work/job.log" ||
      fail "epoch $e: not every batch completed exactly once"
  done
  crcs=$(grep -o "parameters crc32c [0-9a-f]*" "$work/job.log" | sort | uniq -c)
  (($(wc -l <<<"$crcs") == 1 && $(awk '{print $1}' <<<"$crcs") == servers + 2)) || fail "the job's ranks differ"
  echo PASS
  exit 0
fi
joiner=$(grep -o "^rank [0-9]*: joined at epoch" "$work/joiner.log" | cut -d' ' -f2 | tr -d :)
[[ -n $joiner ]] || fail "the joiner did not join"
for ((s = 0; s < servers; ++s))
  do grep -q "^\[$s\] \[strata.ps\] server rank $s: worker rank $joiner joined" "$work/job.log" || fail "server $s did not admit it"; done
ms=$(grep -o "^rank $joiner: first step [0-9]* ms" "$work/joiner.log" | grep -o "[0-9]* ms" | cut -d' ' -f1)
[[ -n $ms ]] && ((ms < 2000)) || fail "the joiner's first step came ${ms:-never} ms after its start"
for e in 0 1; do
  if [[ $mode == ok ]]; then
    grep -q "^\[0\] rank 0: epoch $e dispatched 750 batches: 750 completed, 0 again, 0 handed out again" "$work/job.log" ||
      fail "epoch $e: not every batch completed exactly once"
    total=$(cat "$work/job.log" "$work/joiner.log" | grep -o "rank [0-9]*: epoch $e: [0-9]* steps" | awk '{s += $5} END {print s + 0}')
    ((total == 750)) || fail "epoch $e: the workers took $total steps, not 750"
  else
    grep -q "^\[0\] rank 0: epoch $e dispatched 750 batches: 750 completed, [01] again, [0-9]* handed out again" "$work/job.log" ||
      fail "epoch $e: not every batch completed"
  fi
done
crcs=$( (cat "$work/job.log"; [[ $mode == ok ]] && cat "$work/joiner.log") | grep -o "parameters crc32c [0-9a-f]*" | sort | uniq -c)
echo "$crcs"
(($(wc -l <<<"$crcs") == 1)) || fail "the ranks ended with different parameters"
(($(awk '{print $1}' <<<"$crcs") == servers + 2 + ($([[ $mode == ok ]] && echo 1 || echo 0)))) || fail "not every rank reported its parameters"
case $mode in
ok)
  ((joiner_rc == 0)) || fail "the joiner failed" ;;
kill)
  ((joiner_rc == 137)) || fail "the joiner's status is not 137"
  grep -q "^rank $joiner: SIGKILL at its step 20" "$work/joiner.log" || fail "the joiner did not kill itself"
  grep -q "\[strata.ps.peer_lost\] server rank 0: worker rank $joiner is gone; Async carries on with 2 workers" "$work/job.log" ||
    fail "the first server did not drop the killed joiner" ;;
*) fail "unknown mode $mode" ;;
esac
echo PASS
