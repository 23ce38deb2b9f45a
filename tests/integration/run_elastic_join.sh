#!/usr/bin/env bash
# A worker joins an elastic job (issue bar): 3 workers of elastic_trainer under strata-run
# --elastic 2:4; once they are past step 10, a fourth process is started outside strata-run
# with the job's STRATA_ELASTIC and STRATA_MASTER_ADDR/PORT, and:
#   ok           the job's STRATA_JOB_TOKEN: it takes part in a step within 2 s of its start, and
#                the four end with bit-identical parameters
#   wrong_token  another token: refused and named on both sides (it is told the store refused
#                its proof, the store names it); the three go on unharmed
#   version      the job's token, but a build of another wire version (JOINER, built with
#                -DSTRATA_WIRE_VERSION=3): refused with both versions named; the three go on
# In every mode every example of each epoch is trained exactly once.
#   usage: run_elastic_join.sh STRATA_RUN ELASTIC_TRAINER [ok|wrong_token|version JOINER]
set -u
run=$1 trainer=$2 mode=${3:-ok} joiner=${4:-$2}
fail() { echo "FAIL: $*"; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
token=$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')
export STRATA_COLLECTIVE_TIMEOUT=10
STRATA_JOB_TOKEN=$token timeout 120 "$run" -np 3 --elastic 2:4 --port "$port" -- "$trainer" synthetic 3 - 20 >"$work/job.log" 2>&1 &
job=$!
for ((i = 0; i < 600; ++i)); do grep -q "\] step 10 " "$work/job.log" && break; sleep 0.05; done
grep -q "\] step 10 " "$work/job.log" || { cat "$work/job.log"; fail "the job did not reach step 10"; }
joiner_token=$token
[[ $mode == wrong_token ]] && joiner_token=$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')
STRATA_JOB_TOKEN=$joiner_token STRATA_ELASTIC=2:4 STRATA_MASTER_ADDR=127.0.0.1 STRATA_MASTER_PORT=$port \
  timeout 120 "$joiner" synthetic 3 - 20 >"$work/joiner.log" 2>&1
joiner_rc=$?
wait $job; rc=$?
sed 's/^/[joiner] /' "$work/joiner.log" >>"$work/job.log"
grep -v "\] step " "$work/job.log" | tail -12
echo "job exit status $rc, joiner $joiner_rc"
((rc == 0)) || fail "the job failed"
case $mode in
ok)
  ((joiner_rc == 0)) || fail "the joiner failed"
  python3 "$(dirname "$0")/elastic_log.py" "$work/job.log" --ranks 4 --epochs 3 --joiner || exit 1
  ;;
wrong_token)
  ((joiner_rc != 0)) || fail "the joiner with another token was let in"
  grep -q "^\[joiner\] elastic_trainer: .*the TCP store at 127.0.0.1:$port refused this process: .*job token" "$work/job.log" ||
    fail "the joiner was not told why"
  grep -q "refused 127.0.0.1:[0-9]*: .*job token" "$work/job.log" || fail "the store did not name the refused joiner"
  python3 "$(dirname "$0")/elastic_log.py" "$work/job.log" --ranks 3 --epochs 3 || exit 1
  ;;
version)
  ((joiner_rc != 0)) || fail "the joiner of another wire version was let in"
  grep -q "^\[joiner\] elastic_trainer: .*speaks wire protocol v2, this process v3" "$work/job.log" || fail "the joiner was not told the versions"
  grep -q "refused 127.0.0.1:[0-9]*: wire protocol v3 vs v2 of this store" "$work/job.log" || fail "the store did not name the joiner"
  python3 "$(dirname "$0")/elastic_log.py" "$work/job.log" --ranks 3 --epochs 3 || exit 1
  ;;
*) fail "unknown mode $mode" ;;
esac
echo PASS
