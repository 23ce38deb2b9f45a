#!/usr/bin/env bash
# strata-run --max-restarts (RELIABILITY B2): a job whose rank RANK is killed (SIGKILL) after
# step 75 is started again by the launcher, every rank, resumes from its step-70 checkpoint
# through the same loop, says how many steps it redid, and ends with a final checkpoint
# byte-identical to the uninterrupted run's (and so are ShardedStrategy's shards of the state).
# Then the limit: a rank that fails in every run (exit 1 at step 15, STRATA_FAULT_EVERY_RUN)
# ends the job after --max-restarts 2 restarts with its status, a job stopped from outside
# (SIGTERM to strata-run) is not restarted, and --max-restarts with --keep-going is refused.
#   usage: run_max_restarts.sh TRAINER STRATA_RUN NP RANK -- STRATEGY FLAGS...
set -u
exe=$1 run=$2 np=$3 rank=$4; shift 4
shift  # --
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
common=(--model mlp --epochs 2 --max-steps 60 --checkpoint-every 10)
fail() { echo "FAIL: $*"; exit 1; }

"$run" -np "$np" "$exe" "${common[@]}" "$@" --checkpoint-dir "$work/a" > "$work/a.log" 2>&1 ||
  { cat "$work/a.log"; fail "the uninterrupted run failed"; }
STRATA_FAULT="$rank;75;after_step;sigkill" "$run" -np "$np" --max-restarts 2 "$exe" "${common[@]}" "$@" \
  --checkpoint-dir "$work/b" > "$work/b.log" 2>&1 || { cat "$work/b.log"; fail "the restarted job failed"; }
cat "$work/b.log" | grep -v "^\[[0-9]*\] *$" | grep "strata-run\|restart\|resumed"
grep -q "strata-run: rank $rank was killed by signal 9" "$work/b.log" || fail "the kill is not reported"
grep -q "strata-run: restarting every rank (restart 1 of at most 2)" "$work/b.log" || fail "no restart"
grep -q "strata-run: the job finished after 1 restart$" "$work/b.log" || fail "no summary of the restarts"
line=$(grep -o "restart 1: resumed from step 70; the last run reached step [0-9]*: [0-9]* steps redone" "$work/b.log") ||
  fail "the restarted run does not say what it redid"
redone=${line##*: }; redone=${redone%% *}
((redone >= 5 && redone <= 10)) || fail "$redone steps redone: expected 5 to 10 (killed after step 75, checkpoints every 10)"
cmp "$work/a/ckpt-000000000120.strata" "$work/b/ckpt-000000000120.strata" ||
  fail "the restarted job's final checkpoint differs from the uninterrupted run's"
for shard in "$work"/a/state-*-000000000120.strata; do  # ShardedStrategy's shards of the state
  [[ -e $shard ]] || continue
  cmp "$shard" "$work/b/$(basename "$shard")" || fail "the restarted job's $(basename "$shard") differs"
done

# A rank that fails in every run: two restarts, then the job ends with its status.
STRATA_FAULT="$rank;15;after_step;exit1" STRATA_FAULT_EVERY_RUN=1 "$run" -np "$np" --max-restarts 2 "$exe" \
  "${common[@]}" "$@" --checkpoint-dir "$work/c" > "$work/c.log" 2>&1
status=$?
((status == 1)) || { cat "$work/c.log"; fail "a job failing in every run ended with status $status, not 1"; }
[[ $(grep -c "strata-run: restarting every rank" "$work/c.log") == 2 ]] || fail "not exactly 2 restarts"
grep -q "strata-run: the job failed after 2 restarts (--max-restarts 2)" "$work/c.log" || fail "no final report"

# Stopped from outside: SIGTERM to the launcher ends the job, with no restart.
"$run" -np "$np" --max-restarts 2 "$exe" "${common[@]}" "$@" --epochs 50 --checkpoint-dir "$work/d" > "$work/d.log" 2>&1 &
pid=$!
sleep 2
kill -TERM "$pid"
wait "$pid"
status=$?
((status != 0)) || fail "a job stopped by SIGTERM exited 0"
! grep -q "restarting every rank" "$work/d.log" || { cat "$work/d.log"; fail "a job stopped from outside restarted"; }
# --keep-going lets the others run on, --max-restarts restarts them all: refused together.
"$run" -np 1 --max-restarts 1 --keep-going true > "$work/e.log" 2>&1 && fail "--max-restarts with --keep-going ran"
grep -q "choose one" "$work/e.log" || { cat "$work/e.log"; fail "--max-restarts with --keep-going: no clear error"; }
echo "PASS: restarted once, $redone steps redone, final checkpoint identical; a rank failing in every run ends the" \
  "job after 2 restarts; SIGTERM is not restarted"
