#!/usr/bin/env bash
# Compiles SOURCE (with the given flags) and passes only if compilation fails with an error
# containing EXPECTED.   usage: expect_error.sh EXPECTED SOURCE COMPILER [FLAGS...]
set -u
expected=$1 src=$2; shift 2
out=$("$@" -fsyntax-only "$src" 2>&1) && { echo "FAIL: $src compiled"; exit 1; }
grep -qF -- "$expected" <<<"$out" || { echo "$out" | head -20; echo "FAIL: no '$expected' in the error"; exit 1; }
# ...and it must be the only error: a test that fails for another reason proves nothing.
others=$(grep -E "error:" <<<"$out" | grep -vF -- "$expected")
[[ -z $others ]] || { echo "$others" | head -5; echo "FAIL: other errors besides '$expected'"; exit 1; }
echo "PASS: $src fails to compile with: $(grep -F -- "$expected" <<<"$out" | head -1)"
