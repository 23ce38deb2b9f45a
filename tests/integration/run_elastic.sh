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
python3 - "$kill_step" "$log" "$kill_rank" <<'PY' || exit 1
import re, sys
kill_step, victim = int(sys.argv[1]), sys.argv[3]
lines = open(sys.argv[2]).read().splitlines()
def fail(msg):
    print("FAIL: " + msg)
    sys.exit(1)
kill = [int(m.group(1)) for l in lines if (m := re.match(r"\[" + victim + r"\] kill (\d+)$", l))]
if len(kill) != 1:
    fail(f"rank {victim} did not report its kill")
resumes = [(int(m.group(1)), int(m.group(2))) for l in lines
           if (m := re.match(r"\[\d\] generation 2 rank \d of 3 resumes at step (\d+) offset (\d+)", l))]
if len(resumes) != 3 or any(s != kill_step for s, _ in resumes):
    fail(f"the survivors did not all resume generation 2 at step {kill_step}: {resumes}")
firsts = [int(m.group(1)) - kill[0] for l in lines if (m := re.match(r"\[\d\] first step of generation 2 done at (\d+)", l))]
if len(firsts) != 3 or max(firsts) > 2000:
    fail(f"the survivors' first steps after the kill: {firsts} ms (bar: 2000)")
print(f"next step after the kill: {sorted(firsts)} ms (max {max(firsts)} ms; bar 2000)")
done = [(m.group(1), m.group(2)) for l in lines if (m := re.match(r"\[\d\] done: step \d+ parameters (-?\d+) (\w+) on 3 ranks", l))]
if len(done) != 3 or any(d[1] != "identical" for d in done) or len({d[0] for d in done}) != 1:
    fail(f"the survivors' final parameters: {done}")
print(f"final parameters bit-identical on the 3 survivors (hash {done[0][0]})")
# Every example of each epoch once: generation 1's steps before the resume step, then generation 2's.
seen = {}
for l in lines:
    m = re.match(r"\[\d\] step (\d+) generation (\d+) epoch (\d+) rows (\S+)", l)
    if not m:
        continue
    step, gen, epoch = int(m.group(1)), int(m.group(2)), int(m.group(3))
    if gen == 1 and step >= kill_step:
        continue  # a step the next generation did not keep (none should exist)
    rows = [] if m.group(4) == "-" else [int(r) for r in m.group(4).split(",")]
    for r in rows:
        seen.setdefault(epoch, []).append(r)
for epoch in (0, 1):
    rows = seen.get(epoch, [])
    if sorted(rows) != list(range(1000)):
        dup = len(rows) - len(set(rows))
        fail(f"epoch {epoch}: {len(rows)} rows trained, {len(set(rows))} distinct, {dup} twice, {1000 - len(set(rows))} never")
print("every example of both epochs trained exactly once (1000 + 1000 rows)")
PY
echo PASS
