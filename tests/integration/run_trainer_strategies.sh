#!/usr/bin/env bash
# A trainer on Debian's fortunes (char_transformer, skip_gram), started as users start it, under
# every strategy this build has: one global batch of GLOBAL examples split over the replicas, so
# every run's training and held-out losses after the given steps equal one device's.
#   usage: run_trainer_strategies.sh TRAINER STRATA_RUN|none MPIRUN|none HELD_OUT_KEY MAX_LOSS GLOBAL -- TRAINER_ARGS...
#   HELD_OUT_KEY: the closing JSON line's held-out loss; MAX_LOSS: one device's training loss must
#   fall below it (the trainer learned); GLOBAL: divisible by 2 and 3. ASYNC=1: also the
#   asynchronous parameter server, which must learn.
set -u
exe=$1 strata_run=$2 mpirun=$3 key=$4 max_loss=$5 global=$6
shift 7
small=("$@")
fail() { echo "FAIL: $*" >&2; exit 1; }
loss_of() { sed -n "s/.*\"train_loss\":\([0-9.]*\),\"$key\":\([0-9.]*\).*/\1 \2/p" <<<"$1" | tail -1; }
run() {  # label, then the command; prints the losses
  local out
  out=$(timeout 300 "${@:2}" 2>&1) || { tail -20 <<<"$out" >&2; fail "$1 failed"; }
  local l
  l=$(loss_of "$out")
  [[ -n $l ]] || { tail -5 <<<"$out" >&2; fail "$1 printed no closing line"; }
  echo "$1: $l" >&2
  echo "$l"
}
want=$(run one_device "$exe" "${small[@]}" --batch "$global")
read -r t v <<<"$want"
awk -v t="$t" -v m="$max_loss" 'BEGIN { exit !(t < m) }' || fail "one device's training loss $t: no learning (it must fall below $max_loss)"
same() {
  local got
  got=$(run "$@") || exit 1
  /usr/bin/python3 -c "
import sys
(a, b), (c, d) = (map(float, s.split()) for s in sys.argv[1:3])
sys.exit(0 if abs(a - c) <= 1e-4 * c and abs(b - d) <= 1e-4 * d else 1)" "$got" "$want" ||
    fail "$1: losses $got, one device's $want"
}
same "mirrored, 3 replicas" "$exe" "${small[@]}" --strategy mirrored --replicas 3 --batch $((global / 3))
same "central_storage, 2 replicas" "$exe" "${small[@]}" --strategy central_storage --replicas 2 --batch $((global / 2))
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
n=2 learned=
if [[ $mpirun != none ]]; then
  same "multi_worker_mirrored over mpi, 2 ranks" "$mpirun" -np 2 "$exe" "${small[@]}" --strategy multi_worker_mirrored \
    --collective mpi --batch $((global / 2))
  same "parameter_server sync over mpi, 1 server, 2 workers" "$mpirun" -np 3 "$exe" "${small[@]}" \
    --strategy parameter_server --collective mpi --servers 1 --mode sync --batch $((global / 2))
  n=$((n + 2))
fi
# Async (where the trainer runs it as it is: ASYNC=1): no one-device twin (each push is
# applied where it arrives); it must learn.
if [[ $mpirun != none && ${ASYNC:-0} == 1 ]]; then
  got=$(run "parameter_server async over mpi, 1 server, 2 workers" "$mpirun" -np 3 "$exe" "${small[@]}" \
    --strategy parameter_server --collective mpi --servers 1 --mode async --batch $((global / 2))) || exit 1
  read -r t _ <<<"$got"
  awk -v t="$t" -v m="$max_loss" 'BEGIN { exit !(t < m) }' || fail "parameter_server async: training loss $t (above $max_loss)"
  learned=", and parameter_server async learned ($got)"
  # Dispatched, --steps counts the job's batches, not each worker's: twice as many here.
  doubled=() prev=
  for a in "${small[@]}"; do
    if [[ $prev == --steps ]]; then doubled+=($((2 * a))); else doubled+=("$a"); fi
    prev=$a
  done
  got=$(run "parameter_server async over mpi, dispatched batches" "$mpirun" -np 3 "$exe" "${doubled[@]}" \
    --strategy parameter_server --collective mpi --servers 1 --mode async --dispatch-batches --batch $((global / 2))) ||
    exit 1
  read -r t _ <<<"$got"
  awk -v t="$t" -v m="$max_loss" 'BEGIN { exit !(t < m) }' ||
    fail "parameter_server async, dispatched batches: training loss $t (above $max_loss)"
  learned="$learned, with dispatched batches too ($got)"
fi
if [[ $strata_run != none ]]; then
  same "multi_worker_mirrored over gloo, 3 ranks" "$strata_run" -np 3 "$exe" "${small[@]}" \
    --strategy multi_worker_mirrored --collective gloo --batch $((global / 3))
  same "parameter_server sync over gloo, 2 servers, 2 workers" "$strata_run" -np 4 "$exe" "${small[@]}" \
    --strategy parameter_server --collective gloo --servers 2 --mode sync --batch $((global / 2))
  n=$((n + 2))
fi
echo "PASS: $n strategies equal one device ($want)$learned"
