#!/usr/bin/env bash
# skip_gram with --checkpoint-dir, as a user resumes it: a run of 2S steps against a run of S
# steps restarted with --steps 2S (it resumes from its step-S checkpoint). The two final
# checkpoints (the tables, Adam's lazy state, the data position) are byte-identical, and so
# are the parameter servers' shard files where there are any. With INSIDE_EPOCH=1 (and FLAGS
# saving every S steps) the first half is the 2S-step run with its final checkpoint removed,
# so the restart resumes from the one saved inside the epoch at step S, as after a crash.
#   usage: run_skip_gram_resume.sh SKIP_GRAM S [LAUNCHER...] -- FLAGS...
set -u
exe=$1 steps=$2; shift 2
launch=()
while (($#)) && [[ $1 != -- ]]; do launch+=("$1"); shift; done
shift  # --
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
final=$(printf 'ckpt-%012d.strata' $((2 * steps)))
"${launch[@]}" "$exe" "$@" --steps $((2 * steps)) --checkpoint-dir "$work/a" > "$work/a.log" 2>&1 ||
  { tail -20 "$work/a.log"; fail "the uninterrupted run failed"; }
if [[ ${INSIDE_EPOCH:-0} == 1 ]]; then
  "${launch[@]}" "$exe" "$@" --steps $((2 * steps)) --checkpoint-dir "$work/b" > "$work/b1.log" 2>&1 ||
    { tail -20 "$work/b1.log"; fail "the first run failed"; }
  rm -f "$work/b/$final" "$work"/b/ps-shard-*-$(printf '%012d' $((2 * steps))).strata
else
  "${launch[@]}" "$exe" "$@" --steps "$steps" --checkpoint-dir "$work/b" > "$work/b1.log" 2>&1 ||
    { tail -20 "$work/b1.log"; fail "the first half failed"; }
fi
"${launch[@]}" "$exe" "$@" --steps $((2 * steps)) --checkpoint-dir "$work/b" > "$work/b2.log" 2>&1 ||
  { tail -20 "$work/b2.log"; fail "the resumed run failed"; }
grep -h "resumed from step $steps " "$work/b2.log" || { tail -5 "$work/b2.log"; fail "no resume from step $steps"; }
[[ -f $work/a/$final ]] || fail "no $final"
cmp "$work/a/$final" "$work/b/$final" || fail "the resumed run's $final differs from the uninterrupted run's"
shards=0
for shard in "$work"/a/ps-shard-*-$(printf '%012d' $((2 * steps))).strata; do
  [[ -e $shard ]] || continue
  cmp "$shard" "$work/b/$(basename "$shard")" || fail "the resumed run's $(basename "$shard") differs"
  shards=$((shards + 1))
done
echo "PASS: $final identical ($(stat -c %s "$work/a/$final") bytes) and $shards shard files"
