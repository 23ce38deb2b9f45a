#!/usr/bin/env bash
# Version skew between ranks (RELIABILITY D9): rank 1 of 3 runs a build of another wire version
# (gloo_fault compiled with -DSTRATA_WIRE_VERSION=3). The job must fail at the rendezvous, before
# any data moves, with both versions named: through the TCP store by its handshake (rank 1 told
# why, rank 0's store naming it), through a file store by the ranks' comparison of builds.
#   usage: run_gloo_skew.sh STRATA_RUN GLOO_FAULT GLOO_FAULT_SKEWED [file|tcp]
set -u
run=$1 exe=$2 skewed=$3 rendezvous=${4:-file}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
cat >"$dir/rank" <<WRAP
#!/bin/sh
if [ "\$STRATA_RANK" = 1 ]; then exec "$skewed" "\$@"; else exec "$exe" "\$@"; fi
WRAP
chmod +x "$dir/rank"
start=$(date +%s%N)
out=$(STRATA_COLLECTIVE_TIMEOUT=20 timeout 60 "$run" -np 3 --rendezvous "$rendezvous" --grace 2 -- "$dir/rank" skip 2>&1); rc=$?
elapsed_ms=$((($(date +%s%N) - start) / 1000000))
echo "$out" | tail -8
echo "exit status $rc after ${elapsed_ms} ms"
((rc != 0 && rc != 124)) || fail "the job did not fail at once (status $rc)"
[[ $out != *"went unnoticed"* && $out != *"allreduce #"* ]] || fail "data moved before the skew was found"
if [[ $rendezvous == tcp ]]; then
  grep -q "^\[1\] .*the TCP store at .* speaks wire protocol v2, this process v3" <<<"$out" || fail "rank 1 was not told the versions"
  grep -q "^\[0\] .*refused 127.0.0.1:[0-9]*: wire protocol v3 vs v2 of this store" <<<"$out" || fail "rank 0's store did not name the skewed rank"
else
  grep -q "^\[[02]\] .*rank [02]: rank(s) 1 of rendezvous 'world' run another strata build: '.*wire v3.*' vs this rank's '.*wire v2" <<<"$out" ||
    fail "ranks 0 and 2 did not name rank 1's build"
fi
((elapsed_ms < 15000)) || fail "took ${elapsed_ms} ms"
echo PASS
