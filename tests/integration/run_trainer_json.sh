#!/usr/bin/env bash
# The trainer's closing line is valid JSON in every run, including one that resumes a finished
# run and trains no step (its loss is then null, not NaN).
#   usage: run_trainer_json.sh TRAINER
set -u
exe=$1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
flags=(--max-steps 20 --no-eval --quiet --checkpoint-dir "$work/ckpt")
"$exe" "${flags[@]}" > "$work/first.log" 2>&1 || { cat "$work/first.log"; fail "the first run failed"; }
"$exe" "${flags[@]}" > "$work/again.log" 2>&1 || { cat "$work/again.log"; fail "the finished run's restart failed"; }
cat "$work/first.log" "$work/again.log"
/usr/bin/python3 - "$work/first.log" "$work/again.log" <<'PY' || fail "a closing line is not the JSON expected"
import json, sys
first, again = ([json.loads(l) for l in open(p) if l.startswith("{")][-1] for p in sys.argv[1:])
assert first["steps"] == 20 and isinstance(first["final_loss"], float), first
assert again["steps"] == 0 and again["final_loss"] is None and again["test_accuracy"] is None, again
PY
echo "PASS: both closing lines parse; the finished run's loss is null"
