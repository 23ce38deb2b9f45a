#!/usr/bin/env bash
# strata-run end to end: every rank starts with its environment and its output prefixed; a
# failing rank stops the others within the grace period and the launcher exits with its
# status (with --keep-going the others finish); bad arguments are named.   usage: run_launcher.sh STRATA_RUN RANK_PROBE
set -u
run=$1 probe=$2
fail() { echo "FAIL: $*"; exit 1; }

out=$("$run" -np 3 "$probe" ok 2>&1); rc=$?
echo "$out"
((rc == 0)) || fail "ok job exited $rc"
for r in 0 1 2; do
  grep -q "^\[$r\] rank $r of 3, local $r of 3, launcher env, master 127.0.0.1:[0-9]*, dir set$" <<<"$out" \
    || fail "no line for rank $r"
done

start=$(date +%s)
out=$("$run" -np 3 --grace 2 -- "$probe" fail 1 2>&1); rc=$?
elapsed=$(($(date +%s) - start))
echo "$out"
((rc == 3)) || fail "failing job exited $rc, expected 3"
((elapsed < 15)) || fail "took ${elapsed} s to stop the other ranks"
grep -q "rank 1 exited with status 3" <<<"$out" || fail "the failing rank is not named"

# --keep-going: the failure is reported, the others run to their end, the job takes its status.
out=$("$run" --keep-going -np 3 -- "$probe" outlive 1 2>&1); rc=$?
echo "$out"
((rc == 3)) || fail "--keep-going job exited $rc, expected 3"
grep -q "rank 1 exited with status 3; the other ranks carry on (--keep-going)" <<<"$out" || fail "--keep-going: no report"
for r in 0 2; do grep -q "^\[$r\] rank $r finished$" <<<"$out" || fail "--keep-going: rank $r did not finish"; done

out=$("$run" -np 0 "$probe" 2>&1); rc=$?
((rc != 0)) && grep -q -- "-np=0 is outside" <<<"$out" || fail "-np 0 not rejected by name: $out"
out=$("$run" -np 2 2>&1); rc=$?
((rc != 0)) && grep -q "no program to run" <<<"$out" || fail "missing program not named: $out"
out=$("$run" -np 1 /nonexistent/program 2>&1); rc=$?
((rc == 127)) && grep -q "cannot run '/nonexistent/program'" <<<"$out" || fail "missing executable: rc $rc: $out"
# --elastic's bounds and its conflicts are named.
for bad in "--elastic 3:4 -np 2|must satisfy 1 <= MIN <= -np (2) <= MAX" "--elastic 1:2 -np 3|must satisfy 1 <= MIN <= -np (3) <= MAX" \
           "--elastic 2|--elastic 2 is not MIN:MAX" "--elastic 1:2 --rendezvous file -np 2|not a rendezvous directory" \
           "--elastic 1:2 --max-restarts 1 -np 2|choose one"; do
  args=${bad%%|*} want=${bad#*|}
  out=$("$run" $args -- "$probe" ok 2>&1); rc=$?
  ((rc != 0)) && grep -qF -- "$want" <<<"$out" || fail "strata-run $args not rejected by name: rc $rc: $out"
done
# A port in use is named before any rank starts (RELIABILITY D6); python3 holds one.
portfile=$(mktemp)
python3 -c 'import socket, sys, time
s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen()
print(s.getsockname()[1], flush=True); time.sleep(30)' >"$portfile" &
holder=$!
for _ in $(seq 100); do [[ -s $portfile ]] && break; sleep 0.05; done
port=$(cat "$portfile")
out=$("$run" -np 2 --port "$port" "$probe" ok 2>&1); rc=$?
kill "$holder" 2>/dev/null
rm -f "$portfile"
((rc != 0)) && grep -q -- "--port $port on 127.0.0.1 is not free" <<<"$out" || fail "port in use not named: rc $rc: $out"
echo PASS
