#!/usr/bin/env bash
# Resume with nothing lost (RELIABILITY B1): a Fashion-MNIST run killed (SIGKILL, rank 0) after
# step 75 and restarted with the same command resumes from its step-70 checkpoint and ends
# with a final checkpoint byte-identical to the uninterrupted run's — parameters, optimizer
# state, data position and generator, all bitwise. 2 epochs of 60 steps, so the resumed part
# crosses an epoch boundary.
# ParameterServerStrategy's per-server shard files and ShardedStrategy's per-rank shards of the
# state must match as well. The chief's rank is
# STRATA_RESUME_CHIEF (default 0; the first worker under ParameterServerStrategy).
# Flags after -- come after the common ones, so a test may override them (a dropout model on
# 1001 rows: 30 steps an epoch, 4 epochs); STRATA_RESUME_AT is where the resume must say it
# resumed from (default "epoch 1, batch 10").
#   usage: run_resume.sh TRAINER [LAUNCHER...] -- STRATEGY FLAGS...
#   e.g.   run_resume.sh build/tests/resume_trainer mpirun -np 2 -- --strategy multi_worker_mirrored --collective mpi
set -u
exe=$1; shift
launch=()
while (($#)) && [[ $1 != -- ]]; do launch+=("$1"); shift; done
shift  # --
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
common=(--model mlp --epochs 2 --max-steps 60 --checkpoint-every 10)
fail() { echo "FAIL: $*"; exit 1; }

"${launch[@]}" "$exe" "${common[@]}" "$@" --checkpoint-dir "$work/a" > "$work/a.log" 2>&1 ||
  { cat "$work/a.log"; fail "the uninterrupted run failed"; }
chief=${STRATA_RESUME_CHIEF:-0}
STRATA_FAULT="$chief;75;after_step;sigkill" "${launch[@]}" "$exe" "${common[@]}" "$@" --checkpoint-dir "$work/b" > "$work/b1.log" 2>&1 &&
  { cat "$work/b1.log"; fail "the run meant to be killed at step 75 exited 0"; }
ls "$work/b"
[[ -f $work/b/ckpt-000000000070.strata && ! -f $work/b/ckpt-000000000080.strata ]] ||
  fail "after the kill, the newest checkpoint is not step 70"
"${launch[@]}" "$exe" "${common[@]}" "$@" --checkpoint-dir "$work/b" > "$work/b2.log" 2>&1 ||
  { cat "$work/b2.log"; fail "the resumed run failed"; }
grep -h "resumed from step 70 (${STRATA_RESUME_AT:-epoch 1, batch 10})" "$work/b2.log" || { cat "$work/b2.log"; fail "no resume from step 70"; }
cmp "$work/a/ckpt-000000000120.strata" "$work/b/ckpt-000000000120.strata" ||
  fail "the resumed run's final checkpoint differs from the uninterrupted run's"
for shard in "$work"/a/ps-shard-*-000000000120.strata "$work"/a/state-*-000000000120.strata; do
  [[ -e $shard ]] || continue
  cmp "$shard" "$work/b/$(basename "$shard")" || fail "the resumed run's $(basename "$shard") differs"
  echo "shard $(basename "$shard") identical"
done
echo "PASS: final checkpoints identical ($(stat -c %s "$work/a/ckpt-000000000120.strata") bytes)"
