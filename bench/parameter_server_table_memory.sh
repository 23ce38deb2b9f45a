#!/usr/bin/env bash
# Peak resident memory per process of a parameter-server job on the 2 M x 64 hashed-bigram
# table (545 MB of tables over 2 servers, one worker), in training with a checkpoint at the
# end, and then resumed from it: each server's against its shard file's size.
#   usage: bench/parameter_server_table_memory.sh BUILD [STEPS] [ROWS]
set -euo pipefail
build=$1 steps=${2:-20} rows=${3:-2097152}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
run() {  # STEPS LABEL: one JSON line per rank
  mpirun -np 3 bash -c '/usr/bin/time -f "%M" -o "$0.$OMPI_COMM_WORLD_RANK" "$@"' "$dir/rss" \
    "$build/examples/skip_gram" --strategy parameter_server --servers 2 --mode sync --bigram-rows "$rows" \
    --steps "$1" --checkpoint-dir "$dir/ckpt" --quiet > "$dir/log" 2>&1 || { tail -20 "$dir/log"; exit 1; }
  for r in 0 1 2; do
    printf '{"run": "%s", "rank": %d, "peak_rss_mb": %.1f}\n' "$2" "$r" "$(($(cat "$dir/rss.$r") / 1024)).$(($(cat "$dir/rss.$r") % 1024 * 10 / 1024))"
  done
}
run "$steps" train_and_save
run $((2 * steps)) resume_and_train
grep -q "resumed from step $steps" "$dir/log" || { echo "no resume"; exit 1; }
for f in "$dir"/ckpt/ps-shard-*-$(printf '%012d' "$steps").strata "$dir"/ckpt/ckpt-$(printf '%012d' "$steps").strata; do
  [[ -e $f ]] && printf '{"file": "%s", "mb": %.1f}\n' "$(basename "$f")" "$(($(stat -c %s "$f") / 1048576))"
done
