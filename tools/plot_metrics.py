#!/usr/bin/python3
"""Draws a training run's metrics CSV (the trainer's --metrics) as one PNG: the loss per
step, the test accuracy per evaluation, the examples/s per step, and where each step's time
went (data, forward, backward, apply_gradients; the all-reduces and the part the step waited
for). Needs matplotlib (Debian: python3-matplotlib).

    tools/plot_metrics.py metrics.csv [out.png]
"""
import csv
import sys

import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt


def column(rows, name):
    return [(int(r["step"]), float(r[name])) for r in rows if r.get(name) not in (None, "")]


def main():
    if len(sys.argv) not in (2, 3):
        sys.exit(__doc__)
    src = sys.argv[1]
    out = sys.argv[2] if len(sys.argv) == 3 else src.rsplit(".", 1)[0] + ".png"
    with open(src, newline="") as f:
        rows = list(csv.DictReader(f))
    if not rows:
        sys.exit(f"plot_metrics: {src} has no rows")
    fig, ax = plt.subplots(2, 2, figsize=(12, 8))
    loss = column(rows, "loss")
    ax[0][0].plot([s for s, _ in loss], [v for _, v in loss], lw=0.8)
    ax[0][0].set(title="training loss", xlabel="step", ylabel="loss")
    acc = column(rows, "test_accuracy")
    ax[0][1].plot([s for s, _ in acc], [100 * v for _, v in acc], "o-")
    ax[0][1].set(title="test accuracy", xlabel="step", ylabel="%")
    rate = column(rows, "examples_per_s")
    ax[1][0].plot([s for s, _ in rate], [v for _, v in rate], lw=0.6)
    ax[1][0].set(title="throughput", xlabel="step", ylabel="examples/s")
    for name in ("data_ms", "forward_ms", "backward_ms", "apply_ms", "allreduce_ms", "allreduce_exposed_ms"):
        series = column(rows, name)
        if series:
            ax[1][1].plot([s for s, _ in series], [v for _, v in series], lw=0.6, label=name[:-3])
    ax[1][1].set(title="time per step", xlabel="step", ylabel="ms (log)", yscale="log")
    ax[1][1].legend(fontsize=8)
    for a in ax.flat:
        a.grid(alpha=0.3)
    fig.suptitle(src)
    fig.tight_layout()
    fig.savefig(out, dpi=100)
    print(f"plot_metrics: {out}")


if __name__ == "__main__":
    main()
