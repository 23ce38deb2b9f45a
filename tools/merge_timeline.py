#!/usr/bin/env python3
"""Joins per-rank timelines (the trainer's --timeline FILE writes FILE.rank<r> where the
ranks cannot merge themselves, e.g. parameter-server roles, or ranks on several hosts whose
files were copied together) into one Chrome trace.

    tools/merge_timeline.py out.json rank0.json rank1.json ...
"""
import json
import sys

if len(sys.argv) < 3:
    sys.exit(__doc__)
events = []
for path in sys.argv[2:]:
    with open(path) as f:
        events += json.load(f)["traceEvents"]
with open(sys.argv[1], "w") as f:
    json.dump({"traceEvents": events}, f)
print(f"merge_timeline: {sys.argv[1]}: {len(events)} events from {len(sys.argv) - 2} file(s)")
