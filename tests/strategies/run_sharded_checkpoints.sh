#!/usr/bin/env bash
# A ShardedStrategy checkpoint saved on one number of ranks, restored on others: under
# ShardedStrategy (stages 1, 2 and 3), MultiWorkerMirroredStrategy and OneDeviceStrategy. Each
# restore is checked bit for bit against what the saving ranks held, then trained on to the
# uninterrupted run's end (tests/strategies/sharded_checkpoints.cpp).
#   run_sharded_checkpoints.sh mpi MPIRUN PROGRAM      saved on 4; restored on 2, 3, 2 (stage 1), 3 (stage 3), 3 (multi-worker), 1
#   run_sharded_checkpoints.sh gloo STRATA_RUN PROGRAM saved on 3 by stage 3; restored on 2, 4, 2 (stage 3), 2 (multi-worker), 1
set -euo pipefail
kind=$1 launcher=$2 program=$3
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
launch() {  # ranks, then the program's arguments
  local np=$1
  shift
  echo "== $np ranks: $*"
  "$launcher" -np "$np" "$program" "$@"
}
if [[ $kind == mpi ]]; then
  launch 4 save "$dir" mpi
  launch 2 load "$dir" mpi
  launch 3 load "$dir" mpi
  launch 2 load "$dir" mpi stage1
  launch 3 load "$dir" mpi stage3
  launch 3 load_multi_worker "$dir" mpi
else
  launch 3 save "$dir" gloo stage3
  launch 2 load "$dir" gloo
  launch 4 load "$dir" gloo
  launch 2 load "$dir" gloo stage3
  launch 2 load_multi_worker "$dir" gloo
fi
echo "== one process: load_one"
"$program" load_one "$dir"
