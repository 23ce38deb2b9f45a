#!/usr/bin/env bash
# A parameter-server worker with the tables on the servers only (--tables remote) against one
# holding them (--tables rows), on the 2 M x 64 hashed-bigram table over 2 servers: the worker's
# resident memory at its steps' ends, the median step, the bytes per step and the held-out
# loss (Sync: the two runs must agree to the bit). Alternating runs; the medians of REPEATS.
#   usage: bench/parameter_server_remote_tables.sh BUILD [STEPS] [REPEATS] [ROWS]
set -euo pipefail
build=$1 steps=${2:-300} repeats=${3:-3} rows=${4:-2097152}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
field() { grep -o "\"$1\":[0-9.]*" | cut -d: -f2; }
declare -A step_ms resident loss
for ((k = 0; k < repeats; k++)); do
  for tables in rows remote; do
    line=$(mpirun -np 3 "$build/examples/skip_gram" --strategy parameter_server --servers 2 --mode sync \
             --bigram-rows "$rows" --steps "$steps" --eval-every 100000 --quiet --tables "$tables" | grep '^{')
    step_ms[$tables]+="$(field median_step_ms <<<"$line") "
    resident[$tables]+="$(field resident_mib_in_steps <<<"$line") "
    loss[$tables]+="$(field held_out_loss <<<"$line") "
    echo "{\"tables\": \"$tables\", \"run\": $k, \"result\": $line}"
  done
done
median() { tr ' ' '\n' | grep . | sort -g | awk '{v[NR] = $1} END {print v[int((NR + 1) / 2)]}'; }
for tables in rows remote; do
  printf '{"tables": "%s", "median_step_ms": %s, "resident_mib_in_steps": %s, "held_out_losses": "%s"}\n' "$tables" \
    "$(median <<<"${step_ms[$tables]}")" "$(median <<<"${resident[$tables]}")" "${loss[$tables]% }"
done
printf '{"remote_over_rows_step_time": %.3f}\n' \
  "$(echo "$(median <<<"${step_ms[remote]}") / $(median <<<"${step_ms[rows]}")" | bc -l)"
