#!/usr/bin/env bash
# A multi-host rehearsal on one machine: two network namespaces ("hosts") joined by a veth
# pair, 10.77.0.1/24 and 10.77.0.2/24, each side's interface named strata0. Rank 0 runs in
# the first, rank 1 in the second, started by hand the way a cluster launcher would (the
# STRATA_* variables), the TCP store on rank 0's address, the interface chosen by
# STRATA_IFNAME. It checks:
#   1. strata-info --check passes on both ranks across the hosts;
#   2. the 2-process example trains across them (MultiWorkerMirrored over Gloo), and its
#      --timeline lands whole on rank 0's host: each "host" runs in a directory of its own,
#      and rank 1's events reach rank 0 through the collective, not a shared file system;
#   3. a rank that picks the wrong interface (one whose address the other host cannot reach)
#      fails within the deadline with an error, never a hang;
#   4. with MPIRUN given: mpirun, started on host a, launches rank 1 on host b through a
#      launch agent (what ssh is between real hosts: here `ip netns exec`), MPI's traffic on
#      TCP over strata0 (btl tcp, btl_tcp_if_include / oob_tcp_if_include), strata's shared
#      memory off (STRATA_SHM=0); strata-info --check passes there (Mpi and Gloo, the TCP
#      store at STRATA_MASTER_ADDR) and the example trains over MultiWorkerMirrored<Mpi>.
# Needs root and `ip netns` (iproute2); elsewhere it is skipped (exit 77) with a message.
#   usage: run_netns.sh STRATA_INFO TRAINER [MPIRUN]
set -u
info=$(realpath "$1") trainer=$(realpath "$2") mpirun=${3:-}
a=strata_a_$$ b=strata_b_$$
skip() { echo "SKIP: $*"; exit 77; }
fail() { echo "FAIL: $*"; exit 1; }
command -v ip >/dev/null || skip "no ip command (Debian: iproute2)"
ip netns add "$a" 2>/dev/null || skip "cannot create network namespaces here (needs root / CAP_NET_ADMIN)"
cleanup() { ip netns del "$a" 2>/dev/null; ip netns del "$b" 2>/dev/null; }
trap cleanup EXIT
ip netns add "$b" || fail "ip netns add $b"
ip link add vetha$$ type veth peer name vethb$$ || fail "cannot create a veth pair"
ip link set vetha$$ netns "$a" && ip link set vethb$$ netns "$b" || fail "cannot move the veth ends"
ip -n "$a" link set vetha$$ name strata0 && ip -n "$b" link set vethb$$ name strata0 || fail "cannot rename"
ip -n "$a" addr add 10.77.0.1/24 dev strata0 && ip -n "$b" addr add 10.77.0.2/24 dev strata0 || fail "addresses"
for ns in "$a" "$b"; do ip -n "$ns" link set lo up && ip -n "$ns" link set strata0 up || fail "links up"; done
echo "hosts: $a 10.77.0.1, $b 10.77.0.2 (interface strata0 on each)"

port=29611
# The job token, as a user gives one to ranks that no strata-run started (docs/launching.md).
token=$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')
job() {  # ifname on a, ifname on b, then the program and its arguments: rank 0 on a, rank 1 on b
  local ifa=$1 ifb=$2; shift 2
  local common=(STRATA_WORLD_SIZE=2 STRATA_MASTER_ADDR=10.77.0.1 STRATA_MASTER_PORT=$port STRATA_COLLECTIVE_TIMEOUT=5
                STRATA_JOB_TOKEN=$token)
  (cd "$work/host_a" && ip netns exec "$a" env "${common[@]}" STRATA_RANK=0 STRATA_IFNAME="$ifa" timeout 120 "$@") \
    >"$work/r0.log" 2>&1 &
  local p0=$!
  (cd "$work/host_b" && ip netns exec "$b" env "${common[@]}" STRATA_RANK=1 STRATA_IFNAME="$ifb" timeout 120 "$@") \
    >"$work/r1.log" 2>&1 &
  local p1=$!
  wait $p0; rc0=$?
  wait $p1; rc1=$?
  sed 's/^/  [0] /' "$work/r0.log" | tail -6
  sed 's/^/  [1] /' "$work/r1.log" | tail -6
}
work=$(mktemp -d)
mkdir -p "$work/host_a" "$work/host_b"
trap 'cleanup; rm -rf "$work"' EXIT

echo "1. strata-info --check across the hosts"
job strata0 strata0 "$info" --check
((rc0 == 0 && rc1 == 0)) || fail "the check failed (exit $rc0, $rc1)"
grep -q "gloo       ok: all-reduce over 2 rank" "$work/r1.log" || fail "rank 1 did not check Gloo across the hosts"
grep -q "STRATA_JOB_TOKEN is not set" "$work/r0.log" && fail "rank 0's store did not take the job token"

echo "2. the example across the hosts, with a timeline"
job strata0 strata0 "$trainer" --strategy multi_worker_mirrored --collective gloo --model mlp --max-steps 30 --no-eval \
  --quiet --timeline trace.json
((rc0 == 0 && rc1 == 0)) || fail "training across the hosts failed (exit $rc0, $rc1)"
grep -q '"replicas":2' "$work/r0.log" || fail "rank 0 did not report a 2-replica run"
[[ -z $(ls -A "$work/host_b") ]] || fail "rank 1 left files on its host: $(ls "$work/host_b")"
/usr/bin/python3 - "$work/host_a/trace.json" <<'PY' || fail "the trace on host a is not one valid trace of both ranks"
import json, sys
events = json.load(open(sys.argv[1]))["traceEvents"]
spans = [e for e in events if e.get("ph") == "X"]
for rank in (0, 1):
    steps = [e for e in spans if e["pid"] == rank and e["name"] == "optimizer step"]
    assert len(steps) == 30, (rank, len(steps))
print(f"  trace on host a: {len(spans)} spans from ranks {sorted({e['pid'] for e in spans})}")
PY

# Gloo's pair with the lower address listens and the other connects, so a wrong interface
# bites where it makes a rank listen on an address the other host has no route to: host a's
# ghost0 (10.0.0.1, one end of a veth pair of its own, below 10.77.0.2).
echo "3. rank 0 on the wrong interface (ghost0, 10.0.0.1: host b has no route to it)"
ip -n "$a" link add ghost0 type veth peer name ghost1 && ip -n "$a" addr add 10.0.0.1/24 dev ghost0 &&
  ip -n "$a" link set ghost0 up && ip -n "$a" link set ghost1 up ||
  fail "cannot add the ghost interface"
start=$(date +%s)
job ghost0 strata0 "$info" --check
elapsed=$(($(date +%s) - start))
((rc0 != 0 || rc1 != 0)) || fail "the job passed with rank 0 on ghost0"
((rc0 != 124 && rc1 != 124)) || fail "a rank hung until the outer timeout"
((elapsed < 60)) || fail "took ${elapsed} s"
grep -q "gloo       FAILED" "$work/r0.log" "$work/r1.log" || fail "no rank reported the Gloo failure"
grep -q "this rank.s connections use 10.0.0.1 (STRATA_IFNAME=ghost0)" "$work/r0.log" ||
  fail "rank 0 did not name the address it listens on"
echo "wrong interface detected in ${elapsed} s"

if [[ -n $mpirun ]]; then
  echo "4. mpirun across the hosts (launch agent: ip netns exec)"
  ip -n "$a" link del ghost0 2>/dev/null
  agent=$work/netns_agent.sh  # mpirun calls it as: agent HOST COMMAND...
  printf '%s\n' '#!/bin/sh' 'host=$1; shift' \
    "case \$host in 10.77.0.2) ns=$b ;; *) echo \"netns_agent: no host \$host\" >&2; exit 1 ;; esac" \
    'exec ip netns exec "$ns" sh -c "$*"' >"$agent"
  chmod +x "$agent"
  mpijob() {
    (cd "$work/host_a" && ip netns exec "$a" env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
      timeout 120 "$mpirun" --mca plm_rsh_agent "$agent" -H 10.77.0.1,10.77.0.2 -np 2 \
      --mca btl tcp,self --mca btl_tcp_if_include strata0 --mca oob_tcp_if_include strata0 \
      -x STRATA_IFNAME=strata0 -x STRATA_MASTER_ADDR=10.77.0.1 -x STRATA_MASTER_PORT=$((port + 1)) \
      -x STRATA_SHM=0 -x STRATA_COLLECTIVE_TIMEOUT=10 -x STRATA_JOB_TOKEN="$token" "$@") >"$work/mpi.log" 2>&1
    rc=$?
    grep -v '^---' "$work/mpi.log" | sed 's/^/  /' | tail -8
  }
  mpijob sh -c 'echo "rank $OMPI_COMM_WORLD_RANK on $(ip -br -4 addr show strata0 | tr -s " " | cut -d" " -f3)"'
  ((rc == 0)) || fail "mpirun could not start a rank on each host (exit $rc)"
  grep -q "rank 1 on 10.77.0.2/24" "$work/mpi.log" || fail "rank 1 did not run on host b"
  mpijob "$info" --check
  ((rc == 0)) || fail "strata-info --check under mpirun across the hosts (exit $rc)"
  grep -q "rank 1: mpi        ok" "$work/mpi.log" && grep -q "rank 1: gloo       ok" "$work/mpi.log" ||
    fail "rank 1 did not check Mpi and Gloo"
  mpijob "$trainer" --strategy multi_worker_mirrored --collective mpi --model mlp --max-steps 30 --no-eval --quiet
  ((rc == 0)) || fail "training under mpirun across the hosts failed (exit $rc)"
  grep -q '"replicas":2' "$work/mpi.log" || fail "no 2-replica report under mpirun"
fi
echo "PASS"
