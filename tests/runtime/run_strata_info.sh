#!/usr/bin/env bash
# strata-info: the report names the policies this build has; --check passes on every rank
# under strata-run (and mpirun when given), and fails naming a bad STRATA_IFNAME on every rank.
#   usage: run_strata_info.sh STRATA_INFO STRATA_RUN [MPIRUN]
set -u
info=$1 run=$2 mpirun=${3:-}
fail() { echo "FAIL: $*"; exit 1; }
out=$("$info" 2>&1) || fail "strata-info exited $?: $out"
echo "$out" | head -12
grep -q "^  in_process  yes" <<<"$out" || fail "the report does not list the in_process policy"
grep -q "^  interfaces" <<<"$out" || fail "the report lists no interfaces"
grep -q "STRATA_IFNAME" <<<"$out" || fail "the report does not show STRATA_IFNAME"
"$info" --bogus >/dev/null 2>&1 && fail "an unknown flag was accepted"

out=$(timeout 60 "$run" -np 3 -- "$info" --check 2>&1); rc=$?
echo "$out"
((rc == 0)) || fail "--check under strata-run exited $rc"
(($(grep -c "check passed" <<<"$out") == 3)) || fail "not every rank passed the check under strata-run"
if grep -q "^  gloo        yes" <<<"$("$info")"; then
  (($(grep -c "gloo       ok: all-reduce over 3 rank" <<<"$out") == 3)) || fail "gloo not checked on 3 ranks"
  out=$(STRATA_IFNAME=nosuchif0 timeout 60 "$run" -np 2 -- "$info" --check 2>&1); rc=$?
  echo "$out"
  ((rc != 0)) || fail "--check passed with STRATA_IFNAME=nosuchif0"
  (($(grep -c "gloo       FAILED: .*STRATA_IFNAME=nosuchif0 .*it has: lo" <<<"$out") == 2)) ||
    fail "not every rank named the missing interface and listed the real ones"
fi
if [[ -n $mpirun ]]; then
  out=$(timeout 60 "$mpirun" -np 3 "$info" --check 2>&1); rc=$?
  echo "$out"
  ((rc == 0)) || fail "--check under mpirun exited $rc"
  (($(grep -c "mpi        ok: all-reduce over 3 rank" <<<"$out") == 3)) || fail "mpi not checked on 3 ranks"
fi
echo "PASS"
