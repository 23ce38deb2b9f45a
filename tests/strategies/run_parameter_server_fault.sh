#!/usr/bin/env bash
# Runs parameter_server_fault (1 server, 2 workers, a 2 s deadline) under mpirun (transport
# mpi) or strata-run (gloo) and checks that the job fails within a bound, with the message the
# mode calls for (RELIABILITY B4-B5).
#   usage: run_parameter_server_fault.sh LAUNCHER EXE MODE mpi|gloo
set -u
launcher=$1 exe=$2 mode=$3 transport=$4
start=$(date +%s%N)
if [[ $transport == mpi ]]; then
  out=$(STRATA_COLLECTIVE_TIMEOUT=2 timeout 60 "$launcher" -x STRATA_COLLECTIVE_TIMEOUT -np 3 "$exe" "$mode" mpi 2>&1); rc=$?
elif [[ $mode == carry-on* ]]; then
  out=$(STRATA_COLLECTIVE_TIMEOUT=2 timeout 60 "$launcher" --keep-going -np 3 "$exe" "$mode" gloo 2>&1); rc=$?
else
  out=$(STRATA_COLLECTIVE_TIMEOUT=2 timeout 60 "$launcher" -np 3 "$exe" "$mode" gloo 2>&1); rc=$?
fi
elapsed_ms=$((($(date +%s%N) - start) / 1000000))
echo "$out" | tail -20
echo "exit status $rc after ${elapsed_ms} ms"
fail() { echo "FAIL: $*"; exit 1; }
((rc != 0)) || fail "the job exited 0"
[[ $out != *"went unnoticed"* ]] || fail "a rank finished without noticing"
case $mode in
  stop-worker)
    grep -q "\[strata.ps.timeout\] server rank 0: partition .* missing: worker rank 2 (stopped)" <<<"$out" ||
      fail "the server did not name the stopped worker rank 2"
    ((elapsed_ms >= 1000)) || fail "failed after ${elapsed_ms} ms, before half the deadline" ;;
  stop-server)
    grep -q "\[strata.ps.timeout\] worker rank [12]: replies not complete .* waiting for server rank 0 (stopped)" <<<"$out" ||
      fail "no worker named the stopped server rank 0"
    ((elapsed_ms >= 1000)) || fail "failed after ${elapsed_ms} ms, before half the deadline" ;;
  kill-server)
    ((rc != 124)) || [[ $transport == gloo ]] || fail "the job hung until the outer timeout"
    if [[ $transport == mpi ]]; then
      grep -q "process rank 0 .* exited on signal 9" <<<"$out" || fail "mpirun did not name the killed server rank 0"
    else  # the workers' connections to the server close: they name it, and strata-run reports it
      grep -q "\[strata.ps.timeout\] worker rank [12]: replies not complete .* waiting for server rank 0 (gone)" <<<"$out" ||
        fail "no worker named the lost server rank 0"
      grep -q "rank 0 was killed by signal 9" <<<"$out" || fail "strata-run did not name the killed server rank 0"
    fi ;;
  kill-worker)
    ((rc != 124)) || [[ $transport == gloo ]] || fail "the job hung until the outer timeout"
    if grep -q "finished the epoch" <<<"$out"; then  # the rest got to the end before the launcher stopped them
      grep -q "\[strata.ps.peer_lost\] server rank 0: worker rank 2 is gone" <<<"$out" ||
        fail "ranks finished without the server reporting the lost worker"
    fi
    if [[ $transport == mpi ]]; then
      grep -q "process rank 2 .* exited on signal 9" <<<"$out" || fail "mpirun did not name the killed worker rank 2"
    else
      grep -q "rank 2 was killed by signal 9" <<<"$out" || fail "strata-run did not name the killed worker rank 2"
    fi ;;
  carry-on)  # Async over Gloo under strata-run --keep-going: the rest finish, the loss reported
    ((rc == 137)) || fail "the job's status is not the killed rank's (137)"
    grep -q "strata-run: rank 2 was killed by signal 9; the other ranks carry on" <<<"$out" ||
      fail "strata-run did not report the killed worker rank 2"
    grep -q "\[strata.ps.peer_lost\] server rank 0: worker rank 2 is gone; Async carries on with 1 worker" <<<"$out" ||
      fail "the server did not report the lost worker"
    grep -q "rank 1 finished the epoch (250 steps here); workers still in the job: 1" <<<"$out" ||
      fail "worker rank 1 did not finish its epoch"
    grep -q "rank 0 finished the epoch" <<<"$out" || fail "the server did not finish the epoch" ;;
  carry-on-dispatched)  # the same, and the lost worker's batches trained by the other
    ((rc == 137)) || fail "the job's status is not the killed rank's (137)"
    grep -q "\[strata.ps.peer_lost\] server rank 0: worker rank 2 is gone; Async carries on with 1 worker" <<<"$out" ||
      fail "the server did not report the lost worker"
    grep -q "rank 0 dispatched 500 batches: 500 completed, 0 again, [12] handed out again" <<<"$out" ||
      fail "the server did not count every batch of the epoch completed once"
    grep -q "rank 1 finished the epoch (49[78] steps here); workers still in the job: 1" <<<"$out" ||
      fail "worker rank 1 did not train the epoch's other batches" ;;
  bad-row | bad-count)
    grep -q "\[strata.ps\] server rank 0: worker rank 2 pushed a malformed row message to table partition [0-9]" <<<"$out" ||
      fail "the server did not refuse worker rank 2's malformed table push"
    [[ $out != *"hostile push went unnoticed"* ]] || fail "a rank finished after the hostile push" ;;
  bad-lookup)
    grep -q "\[strata.ps\] server rank 0: worker rank 2 sent a malformed lookup (row 5000 of a block of 1000 rows)" <<<"$out" ||
      fail "the server did not refuse worker rank 2's malformed lookup"
    [[ $out != *"hostile push went unnoticed"* ]] || fail "a rank finished after the hostile lookup" ;;
  *) fail "unknown mode $mode" ;;
esac
((elapsed_ms < 30000)) || fail "took ${elapsed_ms} ms"
echo "PASS"
