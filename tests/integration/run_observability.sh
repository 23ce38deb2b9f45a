#!/usr/bin/env bash
# One epoch of the 2-process example (MultiWorkerMirrored over Gloo, under strata-run) with
# --metrics and --timeline: the trace is valid JSON with each rank's forward, backward,
# all-reduce and optimizer events and its straggler counters (compute ms every step, its
# score every 50 steps); the CSV has a row per step with its compute time, the slowest rank
# where a straggler window closed, and the evaluation; the plot tool turns it into a PNG. The files stay in OUT_DIR (CI keeps them to look at).
#   usage: run_observability.sh STRATA_RUN TRAINER PLOT_TOOL OUT_DIR
set -u
run=$(realpath "$1") trainer=$(realpath "$2") plot=$(realpath "$3") out=$4
fail() { echo "FAIL: $*"; exit 1; }
rm -rf "$out" && mkdir -p "$out" && cd "$out" || fail "cannot use $out"
timeout 300 "$run" -np 2 -- "$trainer" --strategy multi_worker_mirrored --collective gloo --model mlp \
  --metrics metrics.csv --timeline timeline.json >train.log 2>&1 || { tail -20 train.log; fail "training failed"; }
tail -3 train.log
/usr/bin/python3 - <<'PY' || fail "the trace or the CSV is wrong"
import csv, json, collections
events = json.load(open("timeline.json"))["traceEvents"]  # valid JSON, or this raises
spans = [e for e in events if e.get("ph") == "X"]
by_rank = collections.Counter((e["pid"], e["name"]) for e in spans)
rows = list(csv.DictReader(open("metrics.csv")))
train = [r for r in rows if r["loss"]]
evals = [r for r in rows if r["test_accuracy"]]
steps = len(train)
assert steps in (60000 // 128, -(-60000 // 128)) and len(evals) == 1, (steps, len(evals))  # one epoch
for rank in (0, 1):
    for name in ("forward", "backward", "aggregate gradients", "optimizer step", "data"):
        assert by_rank[(rank, name)] == steps, (rank, name, by_rank[(rank, name)])
    assert by_rank[(rank, "allreduce")] >= steps, (rank, by_rank[(rank, "allreduce")])
    assert any(e["name"] == "process_name" and e["pid"] == rank for e in events)
assert all(e["dur"] >= 0 and e["ts"] > 0 for e in spans)
counters = collections.Counter((e["pid"], e["name"]) for e in events if e.get("ph") == "C")
for rank in (0, 1):
    assert counters[(rank, "compute ms")] == steps, (rank, counters[(rank, "compute ms")])
    assert counters[(rank, "straggler score")] == steps // 50, (rank, counters[(rank, "straggler score")])
assert all(e["args"]["value"] >= 0 for e in events if e.get("ph") == "C")
assert all(float(r["compute_ms"]) > 0 for r in train)
windows = [r for r in train if r["slowest_rank"]]
assert [int(r["step"]) for r in windows] == [50 * k for k in range(1, steps // 50 + 1)], [r["step"] for r in windows]
assert all(r["slowest_rank"] in ("0", "1") and float(r["slowest_vs_others"]) >= 1 for r in windows)
assert float(train[-1]["loss"]) < float(train[0]["loss"]) / 2
assert all(float(r[c]) >= 0 for r in train for c in ("forward_ms", "backward_ms", "apply_ms", "allreduce_ms"))
print(f"trace: {len(spans)} spans and {sum(counters.values())} counter values over ranks "
      f"{sorted({e['pid'] for e in spans})}; csv: {len(train)} steps, {len(windows)} straggler windows, "
      f"test accuracy {float(evals[0]['test_accuracy']):.4f}")
PY
/usr/bin/python3 -c "import matplotlib" 2>/dev/null || fail "matplotlib is missing (Debian: python3-matplotlib)"
/usr/bin/python3 "$plot" metrics.csv metrics.png || fail "the plot tool failed"
[[ -s metrics.png ]] && [[ $(head -c 8 metrics.png | od -An -tx1 | tr -d ' \n') == 89504e470d0a1a0a ]] ||
  fail "metrics.png is not a PNG"
echo "PASS: $out/timeline.json, $out/metrics.csv, $out/metrics.png"
