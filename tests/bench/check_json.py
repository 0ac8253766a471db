#!/usr/bin/env python3
# check_json.py KEYS CMD [ARGS...] - runs the command and checks that it
# exits 0 and prints one JSON object holding each of KEYS (comma-separated;
# a dotted key is a path into objects and arrays: peers.0.walk.moeft_ratio).
import json
import subprocess
import sys


def has(obj, path):
    for part in path.split("."):
        if isinstance(obj, dict) and part in obj:
            obj = obj[part]
        elif isinstance(obj, list) and part.isdigit() and int(part) < len(obj):
            obj = obj[int(part)]
        else:
            return False
    return True


keys = sys.argv[1].split(",")
cmd = sys.argv[2:]
p = subprocess.run(cmd, stdout=subprocess.PIPE)
if p.returncode != 0:
    sys.exit(f"check_json.py: {cmd} exited with status {p.returncode}")
try:
    obj = json.loads(p.stdout)
except ValueError as e:
    sys.exit(f"check_json.py: not JSON ({e}): {p.stdout[:500]!r}")
missing = [k for k in keys if not isinstance(obj, dict) or not has(obj, k)]
if missing:
    sys.exit(f"check_json.py: missing keys {missing}: {obj}")
print(json.dumps(obj, indent=1))
