#!/usr/bin/env python3
"""serve_truth.py - the test serving program's --truth (demo/serve.c's
header comment) rewritten as moe_generate.py's truth (formats.py), so that
check_routing.py can be run on serve's logs on the CPU fixture.

Usage: serve_truth.py SERVE_TRUTH OUT

serve runs sequence i in group i % 2, each group on its stream with its own
routing launches, a group's rows in ascending sequence order.  Its truth
lists a step's rows in ascending sequence order; the rows are reordered here
into group 0's, then group 1's: the order in which an eager, one-thread run
logs them (group 0 launches its step first).  Graph runs also route padding
rows, which the truth leaves out: use eager runs.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import formats  # noqa: E402

GROUPS = 2  # serve.c's NGROUPS


def rows_of(line, word, layer, seqs, base):
    """The rows of a "WORD LAYER a,b,... ..." line: one field per sequence,
    each a comma-separated list of numbers in base."""
    fields = line.split()
    if fields[:2] != [word, str(layer)] or len(fields) != 2 + len(seqs):
        raise ValueError("want %s %d and one field per row" % (word, layer))
    return [[int(v, base) for v in f.split(",")] for f in fields[2:]]


def read(path):
    """Header fields and [(step, rows' sequences, [layer][row] ids,
    [layer][row] weights' float32 bits)]."""
    try:
        with open(path, encoding="ascii") as f:
            lines = f.read().splitlines()
    except (OSError, UnicodeDecodeError) as e:
        raise formats.FormatError("%s: %s" % (path, e)) from e
    if not lines or not lines[0].startswith("moeft-serve-truth 1 "):
        raise formats.FormatError("%s: line 1: not a moeft-serve-truth 1 header" % path)
    try:
        head = dict(f.split("=", 1) for f in lines[0].split()[2:])
        layers, experts, topk = (int(head[k]) for k in ("layers", "experts", "topk"))
    except (KeyError, ValueError) as e:
        raise formats.FormatError("%s: line 1: want layers=, experts=, topk=" % path) from e
    steps, n = [], 1
    while n < len(lines) and lines[n].startswith("step "):
        where = "%s: line %d" % (path, n + 1)
        try:
            step = int(lines[n].split()[1])
            rows = lines[n + 1].split()
            if rows[0] != "rows":
                raise ValueError("no rows line")
            seqs = [int(s) for s in rows[1:]]
            ids, weights = [], []
            for layer in range(layers):
                ids.append(rows_of(lines[n + 2 + layer], "layer", layer, seqs, 10))
                weights.append(rows_of(lines[n + 2 + layers + layer], "weights", layer, seqs,
                                       16))
        except (IndexError, ValueError) as e:
            raise formats.FormatError("%s: step record: %s" % (where, e)) from e
        steps.append((step, seqs, ids, weights))
        # step, rows, the layers' ids, their weights, kv, tokens
        n += 4 + 2 * layers
    return layers, experts, topk, steps


def main(argv):
    if len(argv) != 2:
        print("usage: serve_truth.py SERVE_TRUTH OUT", file=sys.stderr)
        return 2
    try:
        layers, experts, topk, steps = read(argv[0])
    except formats.FormatError as e:
        print("serve_truth: %s" % e, file=sys.stderr)
        return 2
    with open(argv[1], "w", encoding="utf-8") as out:
        out.write(formats.truth_header(layers, experts, topk, weights=True))
        for step, seqs, ids, weights in steps:
            order = sorted(range(len(seqs)), key=lambda r: (seqs[r] % GROUPS, seqs[r]))
            out.write(formats.truth_step(step, [[rows[r] for r in order] for rows in ids],
                                         [[rows[r] for r in order] for rows in weights]))
    print("serve_truth: %d steps of %d layers" % (len(steps), layers))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
