#!/usr/bin/env bash
# A trainer's checkpoint resumed on another number of processes (--global-batch keeps the
# global batch): char_transformer under ShardedStrategy on 2 processes saves at steps 10 and
# 20; its step-10 checkpoint (the manifest and both shards), copied to a directory of its own,
# resumes on 3 processes under ShardedStrategy, on 4 under its stage 3 (the block a wrap unit)
# and on one device, and each ends at step 20
# with the uninterrupted run's validation loss (relative difference below 1e-4; the sums run
# over other numbers of replicas).
#   usage: run_reshard_trainer.sh MPIRUN CHAR_TRANSFORMER
set -u
mpirun=$1 trainer=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
model=(--width 32 --heads 2 --layers 1 --context 16 --global-batch 12 --steps 20 --eval-every 20 --eval-windows 64
       --sample 0 --quiet --checkpoint-every 10)
sharded=(--strategy sharded --collective mpi)
loss() { grep -o '"validation_loss":[0-9.]*' "$1" | cut -d: -f2; }

"$mpirun" -np 2 "$trainer" "${model[@]}" "${sharded[@]}" --checkpoint-dir "$work/a" > "$work/a.log" 2>&1 ||
  { cat "$work/a.log"; fail "the uninterrupted run failed"; }
want=$(loss "$work/a.log")
for run in "3 ${sharded[*]}" "4 ${sharded[*]} --shard-stage 3 --unit-bytes 65536" "1 --strategy one_device"; do
  read -r np flags <<< "$run"
  dir="$work/resume_$np"
  mkdir -p "$dir"
  cp "$work"/a/*000000000010.strata "$dir"/
  # shellcheck disable=SC2086  # the flags split on purpose
  if ((np > 1)); then launch=("$mpirun" -np "$np"); else launch=(); fi
  "${launch[@]}" "$trainer" "${model[@]}" $flags --checkpoint-dir "$dir" > "$work/$np.log" 2>&1 ||
    { cat "$work/$np.log"; fail "the run resumed on $np failed"; }
  grep -q "resumed from step 10 " "$work/$np.log" || { cat "$work/$np.log"; fail "no resume from step 10 on $np"; }
  got=$(loss "$work/$np.log")
  python3 -c "import sys; a, b = float(sys.argv[1]), float(sys.argv[2]); sys.exit(abs(a - b) / a >= 1e-4)" "$want" "$got" ||
    fail "resumed on $np: validation loss $got, the uninterrupted run's $want"
  echo "resumed on $np process(es): validation loss $got (uninterrupted: $want)"
done
echo "PASS"
