#!/usr/bin/env python3
# check_json.py - runs the command given and checks that it exits 0 and
# prints one JSON object holding the keys of 'moeft bench launch --json'.
import json
import subprocess
import sys

KEYS = ("norule_ns_base", "norule_ns_preload", "norule_ratio", "rule_ns_preload",
        "serve_eager_ratio", "serve_graph_ratio", "callgrind_instr_per_launch", "machine")

p = subprocess.run(sys.argv[1:], stdout=subprocess.PIPE)
if p.returncode != 0:
    sys.exit(f"check_json.py: {sys.argv[1:]} exited with status {p.returncode}")
try:
    obj = json.loads(p.stdout)
except ValueError as e:
    sys.exit(f"check_json.py: not JSON ({e}): {p.stdout[:500]!r}")
missing = [k for k in KEYS if not isinstance(obj, dict) or k not in obj]
if missing:
    sys.exit(f"check_json.py: missing keys {missing}: {obj}")
print(json.dumps(obj, indent=1))
