#!/usr/bin/env bash
# An elastic job's membership with real processes: strata-run --elastic serves the store, the
# ranks join it, one is SIGKILLed. Above min_workers the survivors get the next generation
# within a second, one rank fewer, and the job goes on (exit 0); at min_workers the job ends,
# every survivor and strata-run naming who is left.
#   usage: run_elastic_membership.sh STRATA_RUN ELASTIC_PROBE
set -u
run=$1 probe=$2
fail() { echo "FAIL: $*"; exit 1; }

start=$(date +%s%N)
out=$(timeout 60 "$run" -np 4 --elastic 2:4 -- "$probe" 1 2>&1); rc=$?
ms=$((($(date +%s%N) - start) / 1000000))
echo "$out"
echo "exit status $rc after ${ms} ms"
((rc == 0)) || fail "the job did not go on without the lost rank"
grep -q "strata-run: rank 1 was killed by signal 9; the job goes on without it (--elastic)" <<<"$out" || fail "strata-run did not name the lost rank"
(($(grep -c "joined: generation 1, rank [0-3] of 4" <<<"$out") == 4)) || fail "not every rank joined generation 1 of 4"
(($(grep -c "next: generation 2, rank [0-2] of 3" <<<"$out") == 3)) || fail "not every survivor got generation 2 of 3"

out=$(timeout 60 "$run" -np 2 --elastic 2:3 -- "$probe" 0 2>&1); rc=$?
echo "$out"
echo "exit status $rc"
((rc != 0 && rc != 124)) || fail "the job below min_workers did not end with an error"
grep -q "^\[1\] next: the elastic job ended: below min_workers=2 at generation 2: left \[.*:[0-9]*\]" <<<"$out" ||
  fail "the survivor was not told who is left"
grep -q "^strata-run: the elastic job ended: below min_workers=2" <<<"$out" || fail "strata-run did not say why the job ended"
echo PASS
