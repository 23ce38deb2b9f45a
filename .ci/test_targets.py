#!/usr/bin/env python3
"""Prints the ninja targets that `meson test -C BUILD_DIR [SELECTION...]` builds before it runs
its tests (the selected tests' dependencies), one per line, so CI can build them ahead of time.
The selection (--suite, --no-suite, test names) is meson's own: `meson test --list` applies it.

usage: test_targets.py BUILD_DIR [SELECTION...]
"""
import json
import os
import subprocess
import sys


def main():
    build = os.path.abspath(sys.argv[1])
    listed = subprocess.run(["meson", "test", "-C", build, "--list", "--no-rebuild", *sys.argv[2:]], check=True,
                            capture_output=True, text=True).stdout.split("\n")
    names = {line.rsplit(" / ", 1)[-1].strip() for line in listed if line.strip()}
    info = os.path.join(build, "meson-info")
    tests = json.load(open(os.path.join(info, "intro-tests.json")))
    files = {t["id"]: t["filename"] for t in json.load(open(os.path.join(info, "intro-targets.json")))}
    targets = set()
    for t in tests:
        if t["name"] in names:
            for d in t["depends"]:
                targets.update(os.path.relpath(f, build) for f in files[d])
    missing = names - {t["name"] for t in tests}
    if missing:
        sys.exit(f"test_targets.py: meson listed tests it does not describe: {sorted(missing)}")
    print("\n".join(sorted(targets)))


if __name__ == "__main__":
    main()
