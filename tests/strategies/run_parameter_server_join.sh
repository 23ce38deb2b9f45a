#!/usr/bin/env bash
# Two workers join a parameter-server job over Gloo (2 servers, 2 first workers, under
# strata-run --rendezvous tcp): both started at once outside strata-run with the job's store
# and token. Each takes a free slot (ranks 4 and 5), links to both servers, and is answered by
# each; one then exits cleanly, the other is killed, and both servers report it lost. A third,
# started first with another token, is refused by the job's store and named; it takes no slot.
#   usage: run_parameter_server_join.sh STRATA_RUN PARAMETER_SERVER_JOIN
set -u
run=$1 exe=$2
fail() { echo "FAIL: $*"; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
export STRATA_JOB_TOKEN=$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')
export STRATA_COLLECTIVE_TIMEOUT=20
timeout 90 "$run" --rendezvous tcp --port "$port" -np 4 "$exe" job 2 2 >"$work/job.log" 2>&1 &
job=$!
STRATA_JOB_TOKEN=$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n') STRATA_MASTER_ADDR=127.0.0.1 \
  STRATA_MASTER_PORT=$port timeout 60 "$exe" join >"$work/stranger.log" 2>&1
stranger_rc=$?
STRATA_MASTER_ADDR=127.0.0.1 STRATA_MASTER_PORT=$port timeout 60 "$exe" join >"$work/join.log" 2>&1 &
joiner=$!
STRATA_MASTER_ADDR=127.0.0.1 STRATA_MASTER_PORT=$port timeout 60 "$exe" join-kill >"$work/kill.log" 2>&1
killed_rc=$?
wait $joiner; joiner_rc=$?
wait $job; rc=$?
cat "$work/job.log"
sed 's/^/[joiner] /' "$work/join.log"
sed 's/^/[killed] /' "$work/kill.log"
sed 's/^/[stranger] /' "$work/stranger.log"
echo "job exit status $rc, joiner $joiner_rc, killed joiner $killed_rc, stranger $stranger_rc"
((stranger_rc != 0)) || fail "the joiner with another token was let in"
grep -q "the TCP store at 127.0.0.1:$port refused this process: .*job token" "$work/stranger.log" ||
  fail "the joiner with another token was not told why"
grep -q "refused 127.0.0.1:[0-9]*: .*job token" "$work/job.log" || fail "the store did not name the refused joiner"
((rc == 0)) || fail "the job failed"
((joiner_rc == 0)) || fail "the joiner failed"
((killed_rc == 137)) || fail "the killed joiner's status is not 137"
ok=$(grep -o "^joiner: rank [45], linked to 2 servers" "$work/join.log" | grep -o "rank [45]" | cut -d' ' -f2)
killed=$(grep -o "^joiner: rank [45], linked to 2 servers" "$work/kill.log" | grep -o "rank [45]" | cut -d' ' -f2)
[[ -n $ok && -n $killed && $ok != "$killed" ]] || fail "the joiners did not take ranks 4 and 5"
for s in 0 1; do
  for w in 2 3 4 5; do
    grep -q "^\[$s\] server rank $s: worker rank $w \(done\|lost\)" "$work/job.log" || fail "server $s did not hear the end of worker $w"
  done
  grep -q "^\[$s\] server rank $s: worker rank 4 joined" "$work/job.log" || fail "server $s did not admit rank 4"
  grep -q "^\[$s\] server rank $s: worker rank 5 joined" "$work/job.log" || fail "server $s did not admit rank 5"
  grep -q "^\[$s\] server rank $s: worker rank $ok done" "$work/job.log" || fail "server $s did not hear the joiner finish"
  grep -q "^\[$s\] server rank $s: worker rank $killed lost" "$work/job.log" || fail "server $s did not report the killed joiner"
  grep -q "^\[$s\] server rank $s: 4 workers answered, 3 done, 1 lost" "$work/job.log" || fail "server $s did not answer every worker"
done
echo PASS
