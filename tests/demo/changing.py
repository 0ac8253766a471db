#!/usr/bin/env python3
"""changing.py - a command that speaks moeft demo's protocol (--steps=N,
--journal=PATH, a "step T" line per step) but prints its process id, so
that no two runs print the same: the restored run's output differs."""
import os
import sys
import time

steps, journal = 0, None
for arg in sys.argv[1:]:
    if arg.startswith("--steps="):
        steps = int(arg[len("--steps="):])
    elif arg.startswith("--journal="):
        journal = arg[len("--journal="):]
for t in range(steps):
    time.sleep(0.005)
    if journal:
        with open(journal, "a") as j:
            j.write(f"step {t} 1\n")
print("pid", os.getpid())
