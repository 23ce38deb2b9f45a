#!/usr/bin/env bash
# ParameterServerStrategy<Sync> checkpoints that must not be used as they are (RELIABILITY
# C2, C3): a shard of the newest checkpoint damaged (one byte flipped) makes the chief skip
# that checkpoint, naming the shard, and resume from the one before; a checkpoint written with
# one server is refused by a job with two, naming both counts, before training.
#   usage: run_resume_parameter_server.sh TRAINER   (under mpirun, from the environment)
set -u
exe=$1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
common=(--strategy parameter_server --mode sync --model mlp --max-steps 20 --no-eval --quiet --checkpoint-every 10
        --checkpoint-dir "$work/c")

mpirun -np 3 "$exe" --servers 1 "${common[@]}" > "$work/1.log" 2>&1 || { cat "$work/1.log"; fail "first run"; }
shard=$work/c/ps-shard-000-000000000020.strata
[[ -f $shard ]] || { ls "$work/c"; fail "no shard of step 20"; }
printf '\xff' | dd of="$shard" bs=1 seek=200 conv=notrunc status=none
out=$(mpirun -np 3 "$exe" --servers 1 "${common[@]}" 2>&1); rc=$?
echo "$out" | grep -E "skipping|resumed" | head -3
((rc == 0)) || { echo "$out" | tail -5; fail "the run with a damaged shard failed"; }
grep -q "skipping $work/c/ckpt-000000000020.strata: .*$shard" <<<"$out" || fail "the damaged shard was not named"
grep -q "resumed from step 10 (epoch 0, batch 10)" <<<"$out" || fail "did not resume from the step-10 checkpoint"

out=$(mpirun -np 4 "$exe" --servers 2 "${common[@]}" 2>&1); rc=$?
echo "$out" | grep -m1 "written with"
((rc != 0)) || fail "a 1-server checkpoint was resumed by a 2-server job"
grep -q "was written with 1 servers, this job has 2" <<<"$out" || fail "the server counts are not named"
grep -q "resumed from" <<<"$out" && fail "it trained after the refusal"
echo PASS
