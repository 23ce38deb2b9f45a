#!/usr/bin/env bash
# The progress line's rate is the run's: over a whole epoch of Fashion-MNIST (whose last
# batch is partial), the last progress line's examples/s and the closing JSON's
# examples_per_s agree within 5 %.   usage: run_progress_rate.sh FASHION_MNIST
set -u
out=$("$1" --model mlp --batch 1024 --no-eval 2>&1) || { echo "$out"; echo "FAIL: the run failed"; exit 1; }
echo "$out" | tail -3
/usr/bin/python3 - <<PY || { echo "FAIL: the progress line's rate is not the run's"; exit 1; }
import json, re
out = """$out"""
progress = [float(m) for m in re.findall(r"([0-9.]+) examples/s", out)]
summary = [json.loads(l) for l in out.splitlines() if l.startswith("{")][-1]["examples_per_s"]
assert progress, "no progress line"
ratio = progress[-1] / summary
print(f"progress {progress[-1]:.0f} examples/s, summary {summary:.0f}: ratio {ratio:.3f}")
assert abs(ratio - 1) <= 0.05, ratio
PY
echo PASS
