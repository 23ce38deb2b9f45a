#!/usr/bin/env bash
# Builds the checkpoint-reader fuzzer with clang 14 (libFuzzer, ASan, UBSan; Debian's
# libclang-rt-14-dev) and runs it for SECONDS (default 60) on a seed corpus of valid files.
# Prints libFuzzer's final stats line; fails on any crash, leak or timeout.
#   usage: tests/fuzz/run_fuzz.sh [SECONDS] [WORKDIR]
set -eu
seconds=${1:-60}
root=$(cd "$(dirname "$0")/../.." && pwd)
work=${2:-$(mktemp -d)}
mkdir -p "$work/corpus"
inc=(-I"$root/include" -I"$root/strategies" -I"$root/kernels")
clang++-14 -std=c++20 -O1 -g "${inc[@]}" -o "$work/make_seed" "$root/tests/fuzz/make_seed.cpp" -pthread
"$work/make_seed" "$work/corpus"
clang++-14 -std=c++20 -O1 -g -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined "${inc[@]}" \
  -o "$work/fuzz_checkpoint_reader" "$root/tests/fuzz/fuzz_checkpoint_reader.cpp" -pthread
cd "$work"
./fuzz_checkpoint_reader -max_total_time="$seconds" -rss_limit_mb=2048 -max_len=4096 -timeout=10 \
  -print_final_stats=1 corpus 2>&1 | tee fuzz.log | grep -E "^#[0-9]+ +DONE|^stat::number_of_executed_units|^stat::new_units_added|ERROR|SUMMARY" || true
if grep -qE "ERROR: (libFuzzer|AddressSanitizer|LeakSanitizer|UndefinedBehaviorSanitizer)|runtime error:" fuzz.log; then
  echo "fuzz: FAILED (see $work/fuzz.log)"
  exit 1
fi
echo "fuzz: no crash in ${seconds} s; corpus $(ls corpus | wc -l) files"
