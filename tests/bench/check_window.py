#!/usr/bin/env python3
# check_window.py WINDOWS POOL_MIB CMD [ARGS...] - runs 'moeft bench window
# --json' (CMD) and checks what holds whatever the speed: every window
# committed and snapshotted once, no ring overflow, a pool of at least
# POOL_MIB MiB of which a window writes under 1%, a snapshot that reads at
# most the pool and stages at least what was written, staging that holds
# what one window stages; and floors at twice today's ratios (2.25 read,
# 3.4 pinned per byte written: README), which byte counts, unlike times,
# meet on any machine, so that a data path that goes back to growing with
# the pool fails.
import json
import subprocess
import sys

windows, pool_mib, cmd = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3:]
p = subprocess.run(cmd, stdout=subprocess.PIPE)
if p.returncode != 0:
    sys.exit(f"check_window.py: {cmd} exited with status {p.returncode}")
r = json.loads(p.stdout)
print(json.dumps(r, indent=1))
checks = [
    ("decode_windows", r["decode_windows"] == windows),
    ("snapshots", r["snapshots"] == windows and r["snapshots_skipped"] == 0),
    ("ring_overflows", r["ring_overflows"] == 0),
    ("pool_bytes", r["pool_bytes"] >= pool_mib << 20),
    ("written_bytes", 0 < r["written_bytes"] < r["pool_bytes"] / 100),
    ("read_bytes", r["written_bytes"] <= r["read_bytes"] <= r["pool_bytes"]),
    ("first_read_bytes", r["first_read_bytes"] == r["pool_bytes"]),
    ("read_per_written", abs(r["read_per_written"] * r["written_bytes"] - r["read_bytes"])
     <= 1e-6 * r["read_bytes"]),
    ("staged_bytes", r["staged_bytes"] >= r["written_bytes"]),
    ("pinned_bytes", r["pinned_bytes"] >= r["staged_bytes"]),
    ("read_per_written floor", r["read_per_written"] <= 4.5),
    ("pinned_per_written floor", r["pinned_per_written"] <= 7),
]
bad = [name for name, ok in checks if not ok]
if bad:
    sys.exit(f"check_window.py: wrong {bad}")
