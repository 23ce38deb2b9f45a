#!/usr/bin/env bash
# RELIABILITY E2 with a real job: a 2-rank Gloo job over the TCP store trains while
# hostile_store_client.py attacks its store (garbage, wrong tokens, a 4 GiB length, another
# wire version and build, 10k connections) twice: during the rendezvous, and during training. Passes when every stranger
# was refused with its reason on the client's side and named in rank 0's log, a friend with the
# token was admitted, and the job ends exactly as a run without the strangers.
#   usage: run_hostile_store.sh STRATA_RUN TRAINER HOSTILE_CLIENT [FLOOD]
set -u
run=$1 trainer=$2 client=$3 flood=${4:-10000}
export STRATA_FASHION_MNIST_DIR=${STRATA_FASHION_MNIST_DIR:-/usr/share/datasets/fashion-mnist}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
export STRATA_JOB_TOKEN=$(python3 -c 'import secrets; print(secrets.token_hex(32))')
args=(--strategy multi_worker_mirrored --collective gloo --epochs 2 --seed 3)

timeout 120 "$run" -np 2 --rendezvous tcp --port "$(free_port)" -- "$trainer" "${args[@]}" >"$work/clean.log" 2>&1 ||
  { tail -20 "$work/clean.log"; fail "the run without strangers failed"; }

port=$(free_port)
start=$(date +%s%N)
timeout 120 "$run" -np 2 --rendezvous tcp --port "$port" -- "$trainer" "${args[@]}" >"$work/job.log" 2>&1 &
job=$!
python3 "$client" "$port" --flood 0 --ports-out "$work/ports1.txt"; rendezvous_rc=$?
rendezvous_ms=$((($(date +%s%N) - start) / 1000000))
for ((i = 0; i < 600; ++i)); do  # training has begun once rank 0 reports its first step
  grep -q "epoch 1/2  step 1/" "$work/job.log" && break
  sleep 0.05
done
python3 "$client" "$port" --token "$STRATA_JOB_TOKEN" --flood "$flood" --ports-out "$work/ports2.txt"; client_rc=$?
client_ms=$((($(date +%s%N) - start) / 1000000))
training_done=$(grep -c "epoch 2/2  test accuracy" "$work/job.log")
cat "$work/ports1.txt" "$work/ports2.txt" >"$work/ports.txt"
wait $job; job_rc=$?
grep -v "refused 127.0.0.1" "$work/job.log" | tail -5
echo "strangers done ${rendezvous_ms} ms (first wave) and ${client_ms} ms (second wave) after the job started; job exit status $job_rc"
((job_rc == 0)) || { tail -30 "$work/job.log"; fail "the job failed under attack"; }
((rendezvous_rc == 0 && client_rc == 0)) || fail "a stranger was not refused as expected, or the friend was not admitted"
((training_done == 0)) || fail "the second wave came after training ended; it must come during training"
named=0
while read -r p name; do
  grep -q "^\[0\] \[strata.runtime.tcp_store\] the TCP store at 127.0.0.1:$port refused 127.0.0.1:$p: " "$work/job.log" ||
    fail "rank 0's log does not name the $name connection from port $p"
  named=$((named + 1))
done <"$work/ports.txt"
echo "rank 0 named $named of $(wc -l <"$work/ports.txt") strangers; refusals counted: $(grep -c "refused 127.0.0.1" "$work/job.log") log lines"
grep -q "warning: STRATA_JOB_TOKEN is not set" "$work/job.log" && fail "rank 0 warned of no token, yet strata-run passed one"
clean=$(grep -o '"final_loss":[^,]*,"test_accuracy":[^,]*' "$work/clean.log")
attacked=$(grep -o '"final_loss":[^,]*,"test_accuracy":[^,]*' "$work/job.log")
[[ -n $clean && $clean == "$attacked" ]] || fail "the attacked job ended with $attacked, the clean one with $clean"
echo "the job is unharmed: $attacked, as without strangers"
echo PASS
