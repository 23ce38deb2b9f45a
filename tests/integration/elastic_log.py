#!/usr/bin/env python3
"""Checks the merged log of an elastic_trainer job (run_elastic.sh, run_elastic_join.sh):

  --kill RANK STEP   the process started as RANK reported its kill; every survivor resumed the
                     next generation at STEP (at most the step in flight lost) and took its next
                     step within 2 s of the kill
  --kills K          K processes reported their kill; after each, the survivors' first steps of
                     the next generation that took one came within 2 s
  --joiner           the joiner (lines "[joiner] ...") took part in a step within 2 s of its start
  --ranks N          N processes ended with bit-identical parameters
  --examples N       the examples of an epoch (1000: the synthetic data; 60000: Fashion-MNIST)
  --epochs E         every example of each of the E epochs trained exactly once, counting for each
                     generation the steps before the one the next generation resumed at

usage: elastic_log.py LOG --ranks N --epochs E [--kill RANK STEP | --kills K] [--joiner]"""
import argparse
import re
import sys

WHO = r"\[(?:\d+|joiner)\]"


def fail(msg):
    print("FAIL: " + msg)
    sys.exit(1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("log")
    ap.add_argument("--ranks", type=int, required=True)
    ap.add_argument("--epochs", type=int, required=True)
    ap.add_argument("--kill", nargs=2, type=int, metavar=("RANK", "STEP"))
    ap.add_argument("--kills", type=int, default=0)
    ap.add_argument("--examples", type=int, default=1000)
    ap.add_argument("--joiner", action="store_true")
    a = ap.parse_args()
    lines = open(a.log).read().splitlines()

    def find(pattern):
        return [m for l in lines if (m := re.match(pattern, l))]

    if a.kill:
        victim, kill_step = a.kill
        kill = find(rf"\[{victim}\] kill (\d+)$")
        if len(kill) != 1:
            fail(f"rank {victim} did not report its kill")
        resumed = [int(m.group(1)) for m in find(rf"{WHO} generation 2 rank \d+ of {a.ranks} resumes at step (\d+)")]
        if len(resumed) != a.ranks or any(s != kill_step for s in resumed):
            fail(f"the survivors did not all resume generation 2 at step {kill_step}: {resumed}")
        delays = [int(m.group(1)) - int(kill[0].group(1)) for m in find(rf"{WHO} first step of generation 2 done at (\d+)")]
        if len(delays) != a.ranks or max(delays) > 2000:
            fail(f"the survivors' first steps after the kill: {delays} ms (bar: 2000)")
        print(f"next step after the kill: {sorted(delays)} ms (max {max(delays)} ms; bar 2000)")
    if a.kills:
        kills = [int(m.group(1)) for m in find(rf"{WHO} kill (\d+)$")]
        if len(kills) != a.kills:
            fail(f"{len(kills)} kills reported, {a.kills} expected")
        firsts = {}
        for m in find(rf"{WHO} first step of generation (\d+) done at (\d+)"):
            firsts.setdefault(int(m.group(1)), []).append(int(m.group(2)))
        for k in kills:
            after = [g for g in sorted(firsts) if min(firsts[g]) > k]
            if not after:
                fail(f"no step after the kill at {k}")
            delay = max(firsts[after[0]]) - k
            print(f"the kill at {k}: the survivors' next step (generation {after[0]}) {delay} ms after it (bar 2000)")
            if delay > 2000:
                fail("a next step came later than 2 s after a kill")
    if a.joiner:
        start = find(r"\[joiner\] start (\d+)")
        first = find(r"\[joiner\] first step of generation (\d+) done at (\d+)")
        if len(start) != 1 or len(first) != 1:
            fail("the joiner did not report its start and first step")
        delay = int(first[0].group(2)) - int(start[0].group(1))
        print(f"the joiner took part in a step of generation {first[0].group(1)} {delay} ms after its start (bar 2000)")
        if delay > 2000:
            fail("the joiner's first step came later than 2 s after its start")

    done = [m.group(1) for m in find(rf"{WHO} done: step \d+ generation \d+ parameters (-?\d+) on {a.ranks} ranks")]
    if len(done) != a.ranks or len(set(done)) != 1:
        fail(f"the final parameters of the {a.ranks} workers: {done}")
    print(f"final parameters bit-identical on the {a.ranks} workers (hash {done[0]})")

    resume = {int(m.group(1)): int(m.group(2)) for m in find(rf"{WHO} generation (\d+) rank \d+ of \d+ resumes at step (\d+)")}
    seen = {}
    for m in find(rf"{WHO} step (\d+) generation (\d+) epoch (\d+) rows (\S+)"):
        step, g, epoch = int(m.group(1)), int(m.group(2)), int(m.group(3))
        later = [k for k in resume if k > g]  # a generation that failed before its first step logs no resume
        if later and step >= resume[min(later)]:
            continue  # a step the next generation did not keep
        seen.setdefault(epoch, []).extend([] if m.group(4) == "-" else [int(r) for r in m.group(4).split(",")])
    for epoch in range(a.epochs):
        rows = seen.get(epoch, [])
        if sorted(rows) != list(range(a.examples)):
            fail(f"epoch {epoch}: {len(rows)} rows trained, {len(set(rows))} distinct, {a.examples - len(set(rows))} never")
    print(f"every example of the {a.epochs} epochs trained exactly once (generations {sorted(resume)})")


if __name__ == "__main__":
    main()
