#!/usr/bin/env bash
# Runs a command that must fail — within 120 s, not by the outer timeout — with output
# matching REGEX (grep -E).   usage: expect_failure.sh REGEX -- command args...
set -u
regex=$1; shift
[[ ${1:-} == -- ]] && shift
out=$(timeout 120 "$@" 2>&1); rc=$?
echo "$out" | tail -15
echo "exit status $rc"
((rc != 0)) || { echo "FAIL: the command succeeded"; exit 1; }
((rc != 124)) || { echo "FAIL: the command hung until the outer timeout"; exit 1; }
grep -Eq -- "$regex" <<<"$out" || { echo "FAIL: no line matches: $regex"; exit 1; }
echo "PASS"
