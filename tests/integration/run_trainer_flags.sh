#!/usr/bin/env bash
# The trainers' shared flags (examples/common/run_flags.hpp), one vocabulary: each trainer runs
# with the same --steps, --batch, --lr, --seed, --quiet, --checkpoint-dir and
# --checkpoint-every, stops at --steps and saves where told; restarted with --max-steps (the
# old spelling of --steps) it resumes from its last checkpoint and trains the rest. With
# every checkpoint damaged it refuses to start, naming the files, until --start-afresh; then
# it trains from step 0 and the damaged files stay (set aside). --precision bf16 and fp16 train; a
# precision it does not run (fp8) is refused, naming the flag.
#   usage: run_trainer_flags.sh FASHION_MNIST CHAR_TRANSFORMER SKIP_GRAM
set -u
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
shared=(--batch 16 --lr 0.01 --seed 1 --quiet --checkpoint-every 3)
# Each trainer's own flags for a small, quick run.
declare -A own=(
  [fashion_mnist]="--model mlp --no-eval"
  [char_transformer]="--context 16 --width 16 --heads 2 --layers 1 --eval-every 3 --eval-windows 8 --sample 8"
  [skip_gram]="--dim 8 --min-count 20 --eval-every 3 --eval-rows 100"
)
steps_of() {  # the JSON closing line's "steps"
  /usr/bin/python3 -c 'import json, sys; print([json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")][-1]["steps"])' "$1"
}
for exe in "$@"; do
  name=$(basename "$exe")
  dir=$work/$name
  read -r -a flags <<<"${own[$name]}"
  "$exe" "${flags[@]}" "${shared[@]}" --steps 6 --checkpoint-dir "$dir" > "$work/$name.1" 2>&1 ||
    { cat "$work/$name.1"; fail "$name: the first run failed"; }
  [[ $(steps_of "$work/$name.1") == 6 ]] || fail "$name: --steps 6 did not train 6 steps"
  [[ -f $dir/ckpt-000000000003.strata && -f $dir/ckpt-000000000006.strata ]] || { ls "$dir"; fail "$name: no checkpoints at steps 3 and 6"; }
  "$exe" "${flags[@]}" "${shared[@]}" --max-steps 8 --checkpoint-dir "$dir" > "$work/$name.2" 2>&1 ||
    { cat "$work/$name.2"; fail "$name: the run with --max-steps failed"; }
  grep -q "resumed from step 6 " "$work/$name.2" || { cat "$work/$name.2"; fail "$name: did not resume from step 6"; }
  [[ $(steps_of "$work/$name.2") == 2 ]] || fail "$name: --max-steps 8 after step 6 did not train 2 steps"
  for f in "$dir"/ckpt-*.strata; do  # one byte of each checkpoint's first tensor
    printf '\xff' | dd of="$f" bs=1 seek=70 conv=notrunc status=none
  done
  "$exe" "${flags[@]}" "${shared[@]}" --steps 8 --checkpoint-dir "$dir" > "$work/$name.3" 2>&1 &&
    { cat "$work/$name.3"; fail "$name: started with every checkpoint damaged"; }
  grep -q "none can be read" "$work/$name.3" && grep -q "ckpt-000000000008.strata: .*checksum" "$work/$name.3" ||
    { cat "$work/$name.3"; fail "$name: the damaged checkpoints are not named"; }
  "$exe" "${flags[@]}" "${shared[@]}" --steps 8 --checkpoint-dir "$dir" --start-afresh > "$work/$name.4" 2>&1 ||
    { cat "$work/$name.4"; fail "$name: --start-afresh failed"; }
  [[ $(steps_of "$work/$name.4") == 8 ]] || fail "$name: --start-afresh did not train from step 0"
  [[ -f $dir/ckpt-000000000008.strata.damaged ]] || { ls "$dir"; fail "$name: the damaged checkpoint was not kept"; }
  "$exe" "${flags[@]}" --batch 16 --seed 1 --quiet --steps 2 --precision bf16 > "$work/$name.5" 2>&1 ||
    { cat "$work/$name.5"; fail "$name: --precision bf16 failed"; }
  [[ $(steps_of "$work/$name.5") == 2 ]] || fail "$name: --precision bf16 did not train 2 steps"
  "$exe" "${flags[@]}" --batch 16 --seed 1 --quiet --steps 2 --precision fp16 > "$work/$name.6" 2>&1 ||
    { cat "$work/$name.6"; fail "$name: --precision fp16 failed"; }
  [[ $(steps_of "$work/$name.6") == 2 ]] || fail "$name: --precision fp16 did not train 2 steps"
  "$exe" "${flags[@]}" --batch 16 --seed 1 --quiet --steps 2 --precision fp8 > "$work/$name.7" 2>&1 &&
    { cat "$work/$name.7"; fail "$name: took --precision fp8, which it does not run"; }
  grep -q -- "--precision" "$work/$name.7" || { cat "$work/$name.7"; fail "$name: the refusal of fp8 names no flag"; }
  echo "ok   $name: --steps, --max-steps, --checkpoint-dir/--checkpoint-every, a refusal, --start-afresh, --precision"
done
echo PASS
