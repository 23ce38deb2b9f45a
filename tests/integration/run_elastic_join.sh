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
python3 - "$work/job.log" <<'PY' || exit 1
import re, sys
lines = open(sys.argv[1]).read().splitlines()
def fail(msg):
    print("FAIL: " + msg)
    sys.exit(1)
start = [int(m.group(1)) for l in lines if (m := re.match(r"\[joiner\] start (\d+)$", l))]
joined = [(int(m.group(1)), int(m.group(2))) for l in lines
          if (m := re.match(r"\[joiner\] first step of generation (\d+) done at (\d+)", l))]
if len(start) != 1 or len(joined) != 1:
    fail("the joiner did not report its start and first step")
gen, at = joined[0]
print(f"the joiner took part in a step of generation {gen} {at - start[0]} ms after its start (bar 2000)")
if at - start[0] > 2000:
    fail("the joiner's first step came later than 2 s after its start")
done = [(m.group(1), m.group(2)) for l in lines if (m := re.match(r"\[(?:\d|joiner)\] done: step \d+ parameters (-?\d+) (\w+) on 4 ranks", l))]
if len(done) != 4 or any(d[1] != "identical" for d in done) or len({d[0] for d in done}) != 1:
    fail(f"the final parameters: {done}")
print(f"final parameters bit-identical on the 4 workers (hash {done[0][0]})")
# Generation g's steps count up to where generation g+1 resumed (the steps it kept).
resume = {}
for l in lines:
    if (m := re.match(r"\[(?:\d|joiner)\] generation (\d+) rank \d of \d resumes at step (\d+)", l)):
        resume[int(m.group(1))] = int(m.group(2))
seen = {}
for l in lines:
    m = re.match(r"\[(?:\d|joiner)\] step (\d+) generation (\d+) epoch (\d+) rows (\S+)", l)
    if not m:
        continue
    step, g, epoch = int(m.group(1)), int(m.group(2)), int(m.group(3))
    if g + 1 in resume and step >= resume[g + 1]:
        continue
    for r in ([] if m.group(4) == "-" else m.group(4).split(",")):
        seen.setdefault(epoch, []).append(int(r))
for epoch in (0, 1, 2):
    rows = seen.get(epoch, [])
    if sorted(rows) != list(range(1000)):
        fail(f"epoch {epoch}: {len(rows)} rows trained, {len(set(rows))} distinct")
print(f"every example of the 3 epochs trained exactly once (generations {sorted(resume)})")
PY
echo PASS
