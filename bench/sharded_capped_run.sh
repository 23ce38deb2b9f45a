#!/usr/bin/env bash
# A model that does not fit: the GPT-2-small-shaped char_transformer (width 768, 12 layers, 12
# heads: about 85 M parameters, 16 B each of model state under Adam, 1.36 GB a process) on 4
# processes whose address space is capped (prlimit --as) below what MultiWorkerMirrored needs.
# MultiWorkerMirrored must stop with a message that names the bytes (never a crash or a hang);
# ShardedStrategy's stage 3 must train under the same cap. Prints each run's last lines and a
# JSON line per run.
#   usage: bench/sharded_capped_run.sh BUILD [CAP_MIB (default 2000)] [STEPS (default 6)]
set -uo pipefail
build=$1 cap_mib=${2:-2000} steps=${3:-6}
cap=$((cap_mib * 1024 * 1024))  # (prlimit takes bytes: "1500M" would not mean MiB)
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
export OMPI_MCA_btl_vader_single_copy_mechanism=none OPENBLAS_NUM_THREADS=1
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
model=(--width 768 --layers 12 --heads 12 --context 64 --global-batch 8 --steps "$steps" --eval-every "$steps"
       --eval-windows 16 --sample 0)
run() {  # LABEL, then the strategy's flags
  local label=$1
  shift
  local t0=$SECONDS
  # (the cap on each rank, not on mpirun, which maps more than a rank does)
  timeout 900 mpirun -np 4 prlimit --as="$cap" "$build/examples/char_transformer" "${model[@]}" "$@" \
    > "$dir/$label.log" 2>&1
  local rc=$?
  echo "== $label (address space capped at $cap_mib MiB per process): exit status $rc after $((SECONDS - t0)) s"
  # the strata lines (a rank's error, the progress, the JSON line), not mpirun's
  grep -E '^(char_transformer:|step |\{)' "$dir/$label.log" | sort -u | tail -6
  printf '{"run": "%s", "cap_mib": %d, "exit_status": %d, "seconds": %d}\n' "$label" "$cap_mib" "$rc" $((SECONDS - t0))
}
run multi_worker_mirrored --strategy multi_worker_mirrored --collective mpi
run sharded_stage3 --strategy sharded --shard-stage 3 --collective mpi
