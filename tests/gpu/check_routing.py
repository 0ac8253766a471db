#!/usr/bin/env python3
"""check_routing.py - the routing an offline `moeft restore --out DIR` wrote
(DIR/routing.bin, DIR/manifest.json; layout in the README's "Restore
output") against the serving program's truth file (formats.py).

Usage: check_routing.py DIR TRUTH

For every step of the decode windows the manifest lists, every layer of the
truth and every token row, the ids logged must be the truth's top-k as a set
(torch.topk may order them otherwise); when the truth lists gating weights,
each id's logged weight must be the truth's, bit for bit (records with
bfloat16 or float16 weights are compared as the float32 values they are).  A step's layer may have several
records, one per stream that ran it (the test serving program's two
groups); each must match a run of consecutive truth rows, the records
tiling the rows in any order.  Prints what it compared, or the first
mismatch and the records of the steps around it.  Exit status: 0 all equal, 1 a
mismatch or nothing compared, 2 an input that cannot be read.
"""
import collections
import json
import os
import struct
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import formats  # noqa: E402

ROUTING_HDR = struct.Struct("<QIIHBBI")  # step, layer, tokens, k, id bytes, flags, experts
ROUTING_GAP = 1  # a window's flag: routing was dropped


class Record:
    __slots__ = ("step", "layer", "tokens", "k", "flags", "experts", "rows", "wrows")
    # experts: the rule's count, or without one the largest id logged + 1;
    # wrows: per row the weights as float32 bits, None without weights


def half_to_f32(h):
    """The bits of the float32 that float16 h is, NaN payloads kept."""
    sign, exp, man = h >> 15 << 31, (h >> 10) & 0x1F, h & 0x3FF
    if exp == 0x1F:
        return sign | 0xFF << 23 | man << 13
    if exp == 0:
        if not man:
            return sign
        exp = 1
        while not man & 0x400:
            man <<= 1
            exp -= 1
        man &= 0x3FF
    return sign | (exp - 15 + 127) << 23 | man << 13


def f32_bits(raw, flags):
    """Weights of a record (flags 1 float32, 2 bfloat16, 3 float16) as the
    bits of the float32 each is exactly."""
    if flags == 1:
        return list(struct.unpack("<%dI" % (len(raw) // 4), raw))
    halves = struct.unpack("<%dH" % (len(raw) // 2), raw)
    if flags == 2:
        return [h << 16 for h in halves]
    return [half_to_f32(h) for h in halves]


def read_routing(path):
    """routing.bin: records, each a u32 length and a ROUTING payload."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise formats.FormatError("%s: %s" % (path, e.strerror)) from e
    records, at = [], 0
    while at < len(data):
        where = "%s: record %d at byte %d" % (path, len(records), at)
        if at + 4 > len(data):
            raise formats.FormatError(where + ": cut short in its length")
        (n,) = struct.unpack_from("<I", data, at)
        if n < ROUTING_HDR.size or at + 4 + n > len(data):
            raise formats.FormatError(where + ": length %d does not fit" % n)
        r = Record()
        r.step, r.layer, r.tokens, r.k, width, r.flags, r.experts = \
            ROUTING_HDR.unpack_from(data, at + 4)
        if r.flags & ~3:
            raise formats.FormatError(where + ": flags 0x%x" % r.flags)
        # gating weights after the ids: none, float32, bfloat16, float16
        wbytes = (0, 4, 2, 2)[r.flags & 3]
        if width not in (1, 2, 4) or r.tokens * r.k * (width + wbytes) != n - ROUTING_HDR.size:
            raise formats.FormatError(where + ": %d tokens x %d ids of %d bytes (and weights "
                                      "of %d) do not make its %d bytes"
                                      % (r.tokens, r.k, width, wbytes, n))
        n_ids = r.tokens * r.k
        ids = struct.unpack_from("<%d%s" % (n_ids, "BHI"[width // 2]),
                                 data, at + 4 + ROUTING_HDR.size)
        r.rows = [ids[i * r.k:(i + 1) * r.k] for i in range(r.tokens)]
        r.wrows = None
        if wbytes:
            w_at = at + 4 + ROUTING_HDR.size + n_ids * width
            w = f32_bits(data[w_at:w_at + n_ids * wbytes], r.flags & 3)
            r.wrows = [w[i * r.k:(i + 1) * r.k] for i in range(r.tokens)]
        records.append(r)
        at += 4 + n
    return records


def read_manifest(path):
    """routing.records and the decode windows (id, first_step, steps, flags)."""
    try:
        with open(path, encoding="utf-8") as f:
            m = json.load(f)
    except OSError as e:
        raise formats.FormatError("%s: %s" % (path, e.strerror)) from e
    except ValueError as e:
        raise formats.FormatError("%s: not JSON: %s" % (path, e)) from e
    routing = m.get("routing") if type(m) is dict else None
    windows = routing.get("windows") if type(routing) is dict else None
    if type(windows) is not list or type(routing.get("records")) is not int:
        raise formats.FormatError('%s: want "routing": {"records": N, "windows": [...]}' % path)
    for w in windows:
        if type(w) is not dict or any(type(w.get(k)) is not int or w[k] < 0
                                      for k in ("id", "first_step", "steps", "flags")):
            raise formats.FormatError("%s: routing window %r: want integers id, first_step, "
                                      "steps, flags" % (path, w))
    return routing["records"], windows


def layout(records, steps):
    """How the logged records of these steps look: layers per step."""
    per_step = collections.defaultdict(list)
    for r in records:
        if r.step in steps:
            per_step[r.step].append("%d(%dx%d)" % (r.layer, r.tokens, r.k))
    return "; ".join("step %d: layers %s" % (s, " ".join(per_step[s]) or "none")
                     for s in sorted(steps))


def row_keys(ids, weights):
    """What a row must equal: its ids as a set, or with weights the set of
    (id, weight bits) pairs."""
    if weights is None:
        return [tuple(sorted(r)) for r in ids]
    return [tuple(sorted(zip(r, w))) for r, w in zip(ids, weights)]


def show(key):
    return "[%s]" % ", ".join("%d:%08x" % p if type(p) is tuple else str(p) for p in key)


def tile(recs, want):
    """Match each record of a step and layer (its row keys) to a run of the
    truth's rows (want, row keys), the records in any order (each stream
    logs its own).  None when they tile the rows; else (truth row, logged
    row) of the first mismatch, the logged row from the record that matches
    the most rows there."""
    left, at = list(recs), 0
    while left:
        def matching(keys):
            return next((i for i, (g, w) in enumerate(zip(keys, want[at:])) if g != w),
                        len(keys))
        best = max(left, key=matching)
        n = matching(best)
        if n < len(best):
            return at + n, best[n]
        left.remove(best)
        at += n
    return None


def compare(records, windows, head, truth, truth_w):
    """(compared rows, steps compared, first mismatch or None); truth_w the
    truth's weights, None without."""
    covered = sorted({s for w in windows for s in range(w["first_step"],
                                                        w["first_step"] + w["steps"])})
    for w in windows:
        if w["flags"] & ROUTING_GAP:
            return 0, [], "window %d (steps %d-%d): its routing was dropped (flags %d)" % (
                w["id"], w["first_step"], w["first_step"] + w["steps"] - 1, w["flags"])
    logged = collections.defaultdict(list)
    for r in records:
        logged[(r.step, r.layer)].append(r)
    known = set(covered)
    for r in records:
        if r.step not in known or r.layer >= head["layers"]:
            return 0, [], "a record of step %d layer %d: %s (the model has %d layers)" % (
                r.step, r.layer, "not a step of the windows" if r.step not in known
                else "no such layer", head["layers"])
    rows_compared = 0
    for step in covered:
        if step not in truth:
            return rows_compared, [], "step %d: not in the truth file" % step
        for layer, want in enumerate(truth[step]):
            recs = logged.get((step, layer), [])
            got = sum(r.tokens for r in recs)
            if got != len(want):
                return rows_compared, [step], "step %d layer %d: %d rows logged in %d records, " \
                    "the truth has %d" % (step, layer, got, len(recs), len(want))
            if truth_w is not None and any(r.wrows is None for r in recs):
                return rows_compared, [step], "step %d layer %d: a record carries no " \
                    "gating weights; the truth lists them" % (step, layer)
            want_w = truth_w[step][layer] if truth_w is not None else None
            keys = row_keys(want, want_w)
            bad = tile([row_keys(r.rows, r.wrows if truth_w is not None else None)
                        for r in recs], keys)
            if bad:
                return rows_compared, [step], "step %d layer %d row %d: logged %s, the " \
                    "truth's top-%d is %s" % (step, layer, bad[0], show(bad[1]),
                                              head["topk"], show(keys[bad[0]]))
            rows_compared += len(want)
    return rows_compared, covered, None


def main(argv):
    if len(argv) != 2:
        print("usage: check_routing.py DIR TRUTH", file=sys.stderr)
        return 2
    out, truth_path = argv
    try:
        want_records, windows = read_manifest(os.path.join(out, "manifest.json"))
        records = read_routing(os.path.join(out, "routing.bin"))
        head, truth, truth_w = formats.truth_read(truth_path)
    except formats.FormatError as e:
        print("check_routing: %s" % e, file=sys.stderr)
        return 2
    if len(records) != want_records:
        print("check_routing: routing.bin holds %d records, the manifest says %d"
              % (len(records), want_records), file=sys.stderr)
        return 2
    rows, steps, bad = compare(records, windows, head, truth,
                               truth_w if head.get("weights") else None)
    if bad:
        print("check_routing: MISMATCH: %s" % bad)
        if steps:
            around = {s for s in range(steps[0] - 1, steps[0] + 2)}
            print("check_routing: logged around it: %s" % layout(records, around))
        return 1
    if not rows:
        print("check_routing: nothing compared (%d windows, %d records)"
              % (len(windows), len(records)))
        return 1
    print("check_routing: OK: steps %d-%d (%d steps in %d windows), %d layers, %d token rows "
          "of %d ids%s: every logged set is the truth's" % (
              steps[0], steps[-1], len(steps), len(windows), head["layers"], rows, head["topk"],
              " with their gating weights" if head.get("weights") else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
