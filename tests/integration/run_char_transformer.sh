#!/usr/bin/env bash
# The character Transformer trainer, started as users start it, under every strategy this build
# has: one global batch of 6 sequences split over the replicas (evenly or not), so every run's
# training and validation losses after 20 steps equal one device's.
#   usage: run_char_transformer.sh TRAINER STRATA_RUN MPIRUN|none
set -u
exe=$1 strata_run=$2 mpirun=$3
fail() { echo "FAIL: $*" >&2; exit 1; }
small=(--steps 20 --lr 0.003 --context 16 --width 16 --heads 2 --layers 1 --eval-every 20 --eval-windows 8 --sample 40 --quiet)
loss_of() { sed -n 's/.*"train_loss":\([0-9.]*\),"validation_loss":\([0-9.]*\).*/\1 \2/p' <<<"$1" | tail -1; }
run() {  # label, then the command; prints the losses
  local out
  out=$(timeout 300 "${@:2}" 2>&1) || { tail -20 <<<"$out" >&2; fail "$1 failed"; }
  local l
  l=$(loss_of "$out")
  [[ -n $l ]] || { tail -5 <<<"$out" >&2; fail "$1 printed no closing line"; }
  echo "$1: $l" >&2
  echo "$l"
}
want=$(run one_device "$exe" "${small[@]}" --batch 6)
read -r t v <<<"$want"
awk -v t="$t" 'BEGIN { exit !(t < 4.6) }' || fail "one device's loss $t: no learning from log(vocabulary) = 4.74"
same() {
  local got
  got=$(run "$@") || exit 1
  /usr/bin/python3 -c "
import sys
(a, b), (c, d) = (map(float, s.split()) for s in sys.argv[1:3])
sys.exit(0 if abs(a - c) <= 1e-4 * c and abs(b - d) <= 1e-4 * d else 1)" "$got" "$want" ||
    fail "$1: losses $got, one device's $want"
}
same "mirrored, 3 replicas" "$exe" "${small[@]}" --strategy mirrored --replicas 3 --batch 2
same "central_storage, 2 replicas" "$exe" "${small[@]}" --strategy central_storage --replicas 2 --batch 3
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
n=2
if [[ $mpirun != none ]]; then
  same "multi_worker_mirrored over mpi, 2 ranks" "$mpirun" -np 2 "$exe" "${small[@]}" --strategy multi_worker_mirrored \
    --collective mpi --batch 3
  same "parameter_server sync over mpi, 1 server, 2 workers" "$mpirun" -np 3 "$exe" "${small[@]}" \
    --strategy parameter_server --collective mpi --servers 1 --mode sync --batch 3
  n=$((n + 2))
fi
if [[ $strata_run != none ]]; then
  same "multi_worker_mirrored over gloo, 3 ranks" "$strata_run" -np 3 "$exe" "${small[@]}" \
    --strategy multi_worker_mirrored --collective gloo --batch 2
  n=$((n + 1))
fi
echo "PASS: $n strategies equal one device ($want)"
