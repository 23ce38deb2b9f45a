#!/usr/bin/env bash
# Builds a fuzz target with clang 14 (libFuzzer, ASan, UBSan; Debian's libclang-rt-14-dev) and
# runs it for SECONDS (default 60) on a seed corpus of valid inputs. Prints libFuzzer's final
# stats line; fails on any crash, leak or timeout.
#   usage: tests/fuzz/run_fuzz.sh [SECONDS] [WORKDIR] [TARGET]
# TARGET: checkpoint_reader (default; corpus in WORKDIR/corpus, log WORKDIR/fuzz.log) or
# store_protocol (WORKDIR/corpus_store_protocol, WORKDIR/fuzz_store_protocol.log).
set -eu
seconds=${1:-60}
root=$(cd "$(dirname "$0")/../.." && pwd)
work=${2:-$(mktemp -d)}
target=${3:-checkpoint_reader}
case $target in
  checkpoint_reader) corpus=corpus log=fuzz.log seed=make_seed max_len=4096 ;;
  store_protocol) corpus=corpus_store_protocol log=fuzz_store_protocol.log seed=make_store_seed max_len=2048 ;;
  *) echo "run_fuzz.sh: unknown target '$target' (checkpoint_reader or store_protocol)"; exit 2 ;;
esac
mkdir -p "$work/$corpus"
inc=(-I"$root/include" -I"$root/strategies" -I"$root/kernels")
# The handshake's proofs are libcrypto's (support/crypto.hpp; Debian: libssl-dev).
crypto=(-DSTRATA_HAS_CRYPTO=1)
libs=(-lcrypto -pthread)
clang++-14 -std=c++20 -O1 -g "${inc[@]}" -o "$work/$seed" "$root/tests/fuzz/$seed.cpp" "${crypto[@]}" "${libs[@]}"
"$work/$seed" "$work/$corpus"
clang++-14 -std=c++20 -O1 -g -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined "${inc[@]}" \
  -o "$work/fuzz_$target" "$root/tests/fuzz/fuzz_$target.cpp" "${crypto[@]}" "${libs[@]}"
cd "$work"
"./fuzz_$target" -max_total_time="$seconds" -rss_limit_mb=2048 -max_len=$max_len -timeout=10 \
  -print_final_stats=1 "$corpus" 2>&1 | tee "$log" | grep -E "^#[0-9]+ +DONE|^stat::number_of_executed_units|^stat::new_units_added|ERROR|SUMMARY" || true
if grep -qE "ERROR: (libFuzzer|AddressSanitizer|LeakSanitizer|UndefinedBehaviorSanitizer)|runtime error:|deadly signal" "$log"; then
  echo "fuzz: FAILED (see $work/$log)"
  exit 1
fi
grep -q "^stat::number_of_executed_units" "$log" || { echo "fuzz: FAILED, no final stats (see $work/$log)"; exit 1; }
echo "fuzz: fuzz_$target: no crash in ${seconds} s; corpus $(ls "$corpus" | wc -l) files"
