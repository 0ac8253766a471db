#!/usr/bin/env python3
# check_restore.py POOL_MIB CMD [ARGS...] - runs 'moeft bench restore
# --json' with its online part (CMD) and checks what holds whatever the
# speed: the offline restore wrote the forged pools; online, the preload
# read from the KV store only live bytes (some, under the pool), copied
# them and the short runs of zeros between them, set the rest to zeros
# (copied + zeroed = the pool), at most 1.05 bytes copied per live byte
# (the goal: byte counts, unlike times, meet it on any machine),
# and took some time to do it.
import json
import subprocess
import sys

pool_mib, cmd = int(sys.argv[1]), sys.argv[2:]
p = subprocess.run(cmd, stdout=subprocess.PIPE)
if p.returncode != 0:
    sys.exit(f"check_restore.py: {cmd} exited with status {p.returncode}")
r = json.loads(p.stdout)
print(json.dumps(r, indent=1))
o = r["online"]
checks = [
    ("bytes", r["bytes"] == pool_mib << 20),
    ("pool_bytes", o["pool_bytes"] == pool_mib << 20),
    ("restored_bytes", o["restored_bytes"] == o["pool_bytes"]),
    ("live_bytes", 0 < o["live_bytes"] < o["pool_bytes"]),
    ("copied_bytes", o["live_bytes"] <= o["copied_bytes"]),
    ("zeroed_bytes", o["copied_bytes"] + o["zeroed_bytes"] == o["pool_bytes"]),
    ("copied_per_live", abs(o["copied_per_live"] * o["live_bytes"] - o["copied_bytes"])
     <= 1e-6 * o["copied_bytes"]),
    ("copied_per_live goal", o["copied_per_live"] <= 1.05),
    ("times", o["copy_s"] > 0 and o["restore_s"] >= o["copy_s"] and o["memcpy_ratio"] > 0),
]
bad = [name for name, ok in checks if not ok]
if bad:
    sys.exit(f"check_restore.py: wrong {bad}")
