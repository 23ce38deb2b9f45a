#!/usr/bin/env bash
# The trainer with --checkpoint-dir on checkpoints it must not use as they are (RELIABILITY C3,
# C8): resuming a 2-replica run's checkpoint with 3 replicas fails before training, naming
# both counts; a truncated newest checkpoint is skipped with its byte counts and the run resumes
# from the one before.   usage: run_resume_refusals.sh TRAINER
set -u
exe=$1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
common=(--model mlp --max-steps 20 --no-eval --quiet --checkpoint-every 10 --checkpoint-dir "$work/c")

"$exe" "${common[@]}" --strategy mirrored --replicas 2 > "$work/1.log" 2>&1 || { cat "$work/1.log"; fail "first run"; }
out=$("$exe" "${common[@]}" --strategy mirrored --replicas 3 2>&1); rc=$?
echo "$out" | tail -3
((rc != 0)) || fail "resuming with 3 replicas did not fail"
grep -q "written with 2 replicas in sync, this run has 3" <<<"$out" || fail "the replica counts are not named"
grep -q "resumed from" <<<"$out" && fail "it trained after the refusal"

newest=$work/c/ckpt-000000000020.strata
size=$(stat -c %s "$newest")
truncate -s $((size - 1)) "$newest"
out=$("$exe" "${common[@]}" --strategy mirrored --replicas 2 2>&1); rc=$?
echo "$out" | tail -3
((rc == 0)) || fail "the run with a truncated newest checkpoint failed"
grep -q "skipping $newest: \[strata.checkpoint.truncated\] .*expected $size bytes, found $((size - 1))" <<<"$out" ||
  fail "the truncated checkpoint was not reported with its byte counts"
grep -q "resumed from step 10 (epoch 0, batch 10)" <<<"$out" || fail "did not resume from the step-10 checkpoint"
echo PASS
