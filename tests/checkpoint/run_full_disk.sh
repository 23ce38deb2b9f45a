#!/usr/bin/env bash
# RELIABILITY C7 on a real full disk: a 2-process MultiWorkerMirrored<Gloo> run checkpoints to
# an 8 MiB tmpfs (mounted in a mount namespace of its own), where the step-10 checkpoint
# (about 5.4 MB) fits and the step-20 one does not. Every rank must stop naming ENOSPC, the
# step-10 checkpoint must stay whole, and once the disk has room the same command resumes
# from it.   usage: run_full_disk.sh STRATA_RUN FASHION_MNIST
set -u
run=$1 exe=$2
if ! unshare --mount --propagation private true 2>/dev/null; then
  echo "SKIP: no mount namespace here (unshare needs root)"
  exit 77
fi
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
unshare --mount --propagation private bash -s "$run" "$exe" "$dir" <<'SCRIPT'
set -u
run=$1 exe=$2 dir=$3
fail() { echo "FAIL: $*"; exit 1; }
mount -t tmpfs -o size=8m strata-full "$dir" || fail "cannot mount a tmpfs on $dir"
train() {
  timeout 120 "$run" -np 2 -- "$exe" --model mlp --max-steps 25 --no-eval --quiet --strategy multi_worker_mirrored \
    --collective gloo --checkpoint-dir "$dir/ck" --checkpoint-every 10 2>&1
}
out=$(train); rc=$?
echo "$out" | tail -8
echo "first run: exit status $rc"
((rc != 0 && rc != 124)) || fail "the run on a full disk did not fail (or hung)"
grep -q "^\[0\] .*cannot write .*No space left on device" <<<"$out" || fail "the chief did not name ENOSPC"
grep -q "^\[1\] .*step 20 was not saved: the chief failed: .*No space left on device" <<<"$out" ||
  fail "rank 1 did not learn why the save failed"
left=$(ls -A "$dir/ck" | grep -vx reached_step)  # (RestartReport's marker, docs/checkpoints.md: not a checkpoint)
echo "left in the checkpoint directory: $left"
[[ $left == "ckpt-000000000010.strata" ]] || fail "expected the step-10 checkpoint alone, found: $left"
mount -o remount,size=64m "$dir" || fail "cannot grow the tmpfs"
out=$(train); rc=$?
echo "$out" | tail -4
echo "second run: exit status $rc"
((rc == 0)) || fail "the run with room on the disk failed"
grep -q "resumed from step 10 " <<<"$out" || fail "the second run did not resume from the step-10 checkpoint"
echo "PASS"
SCRIPT
