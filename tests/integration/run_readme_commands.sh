#!/usr/bin/env bash
# The README's commands, as a user copies them (read from README.md, so the test follows the
# text): the first one trains the reference MLP for 3 epochs and must reach the foundation's
# accuracy bar (84.9 %); each line of "The same loop, other strategies" runs for 20 steps
# (--max-steps 20 --no-eval --quiet appended) and must report its strategy. `build/` in the
# commands is this build's directory; mpirun gets the root and oversubscription variables CI
# sets anyway.
#   usage: run_readme_commands.sh SOURCE_ROOT BUILD_DIR
set -u
root=$(realpath "$1") build=$(realpath "$2")
fail() { echo "FAIL: $*"; exit 1; }
readme=$root/README.md
[[ -f $readme ]] || fail "no $readme"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work" || fail "no work dir"

# 1. The getting-started command: the part after `meson compile -C build fashion_mnist &&`.
first=$(grep -m1 '^tools/setup.sh && meson compile -C build fashion_mnist && ' "$readme" |
        sed 's/^.*meson compile -C build fashion_mnist && //')
[[ $first == build/examples/fashion_mnist* ]] || fail "README's first command changed: '$first'"
echo "\$ $first"
out=$(eval "timeout 900 ${first/#build\//$build/}" </dev/null 2>&1) || { tail -20 <<<"$out"; fail "the first command failed"; }
line=$(grep '^{"model"' <<<"$out" | tail -1)
echo "  $line"
acc=$(sed -n 's/.*"test_accuracy":\([0-9.]*\).*/\1/p' <<<"$line")
[[ $line == *'"epochs":3,'* && -n $acc ]] || fail "no 3-epoch report with a test accuracy"
awk -v a="$acc" 'BEGIN { exit !(a >= 0.849) }' || fail "test accuracy $acc below the 84.9 % bar"

# 2. The strategy lines.
n=0
while IFS= read -r cmd; do
  cmd=${cmd%%#*}                       # the comment
  cmd=${cmd//build\//$build/}
  want=$(sed -n 's/.*--strategy \([a-z_]*\).*/\1/p' <<<"$cmd")
  want=${want:-one_device}
  echo "\$ $cmd(+ --max-steps 20 --no-eval --quiet)"
  out=$(eval "timeout 300 $cmd --max-steps 20 --no-eval --quiet" </dev/null 2>&1) || { tail -20 <<<"$out"; fail "'$cmd' failed"; }
  grep -q "\"strategy\":\"$want\"" <<<"$out" || { tail -5 <<<"$out"; fail "'$cmd' did not report strategy $want"; }
  n=$((n + 1))
done < <(sed -n '/^## The same loop, other strategies/,/^## /p' "$readme" | sed -n '/^```sh/,/^```/p' |
         grep -E '^(build/|mpirun )')
((n >= 6)) || fail "found $n strategy commands in the README, expected at least 6"
echo "PASS: the first command (test accuracy $acc) and $n strategy commands"
