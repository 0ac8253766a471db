#!/usr/bin/env python3
"""check_kv.py - the KV cache a resumed run holds right before its first
step R (moe_generate.py --dump-kv-at-resume, a dump as of step R-1) against
an uninterrupted run's (--save-kv, of step R-1 or later), byte for byte.

Usage: check_kv.py [--allow-next-layer0] REFERENCE DUMP

Both are dumps of the same cache layout (formats.py).  Cache positions are
written once, in order (step 0 the prompt's P positions, step t >= 1
position P + t - 1), so as of step R-1 the positions below the dump's
`filled` (P + R - 1) must hold the reference's bytes and every later
position must be zero, as it is in the reference as of step R-1 by
construction.

--allow-next-layer0: the one exception, for eager mode.  moeft's step clock
sees a step begin at layer 0's router topk, after layer 0's attention of
that step has written its K and V, so the snapshot a window commits may
also hold step R's layer-0 K/V at position p_R = `filled` (which the
resumed step R rewrites with the same bytes).  With the flag, the tensors
of layer 0 (named "layer0.*") may hold non-zero bytes there: each
(batch, head) row either zero or, when the reference is of step R or later,
the reference's bytes at p_R.  They are reported; anything else still fails.

Prints, per tensor that differs, which positions differ in how many
(batch, head) rows, and the first difference: position, batch, head, byte
and both values.  Exit status 0 equal, 1 different, 2 bad usage or
unreadable input.  Standard library only (the CPU tests import it).
"""
import argparse
import mmap
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import formats  # noqa: E402


def spans(positions):
    """[3, 4, 5, 9] -> '3-5 9'."""
    out, start = [], None
    for i, p in enumerate(positions):
        if start is None:
            start = p
        if i + 1 == len(positions) or positions[i + 1] != p + 1:
            out.append(str(start) if start == p else "%d-%d" % (start, p))
            start = None
    return " ".join(out)


def is_layer0(name):
    return name.split(".", 1)[0] == "layer0"


class Result:
    """One tensor's comparison.  positions: the differing positions, sorted;
    rows: the (batch, head) rows with a difference; first: the first
    difference (position, batch, head, byte in the position, file offset,
    reference byte or None for "must be zero", dump byte) or None;
    next_rows: rows whose position p_R held the reference's step-R bytes
    (allowed), next_unchecked: rows whose p_R held non-zero bytes the
    reference cannot confirm (it is of step R-1), allowed too."""

    def __init__(self):
        self.positions, self.rows, self.first = [], 0, None
        self.next_rows = self.next_unchecked = 0


def compare_tensor(ref, dump, t, filled, ref_filled, allow_next=False):
    """REF and DUMP: the two files' bytes (same layout); T: a [B, H, L, D]
    tensor of the index; FILLED: the dump's written positions; REF_FILLED:
    the reference's; ALLOW_NEXT: position FILLED may hold step R's write."""
    b, h, length, d = t["shape"]
    pos_bytes = d * t["itemsize"]
    row_bytes = length * pos_bytes
    prefix = filled * pos_bytes
    allow_next = allow_next and filled < length
    ref_has_next = ref_filled > filled
    zeros = bytes(row_bytes)
    res, positions = Result(), set()

    def next_state(at):
        """Position FILLED of the row at AT: 'zero', 'ref', 'unchecked' or 'bad'."""
        lo = at + prefix
        got = dump[lo:lo + pos_bytes]
        if got == zeros[:pos_bytes]:
            return "zero"
        if not ref_has_next:
            return "unchecked"
        return "ref" if got == ref[lo:lo + pos_bytes] else "bad"

    for r in range(b * h):
        at = t["offset"] + r * row_bytes
        head_ok = ref[at:at + prefix] == dump[at:at + prefix]
        tail_from = prefix
        nxt = None
        if allow_next:
            nxt = next_state(at)
            if nxt != "bad":
                tail_from = prefix + pos_bytes
        tail_ok = dump[at + tail_from:at + row_bytes] == zeros[:row_bytes - tail_from]
        if head_ok and tail_ok:
            if nxt == "ref":
                res.next_rows += 1
            elif nxt == "unchecked":
                res.next_unchecked += 1
            continue
        res.rows += 1
        for p in range(length):
            lo = at + p * pos_bytes
            got = dump[lo:lo + pos_bytes]
            if p < filled:
                want = ref[lo:lo + pos_bytes]
            elif p == filled and allow_next:
                if nxt in ("zero", "unchecked"):
                    continue
                want = ref[lo:lo + pos_bytes]  # 'ref' or 'bad': the reference's step R
            else:
                want = zeros[:pos_bytes]
            if got == want:
                continue
            positions.add(p)
            if res.first is None:
                i = next(i for i in range(pos_bytes) if got[i] != want[i])
                zero_wanted = p > filled or (p == filled and not allow_next)
                res.first = (p, r // h, r % h, i, lo + i,
                             None if zero_wanted else want[i], got[i])
        if nxt == "ref":
            res.next_rows += 1
        elif nxt == "unchecked":
            res.next_unchecked += 1
    res.positions = sorted(positions)
    return res


def first_text(first, dump_path):
    p, b, h, i, off, want, got = first
    return ("first difference at position %d, batch %d, head %d, byte %d of the position "
            "(offset %d of %s): %s, dump 0x%02x" % (
                p, b, h, i, off, dump_path,
                "must be zero (not written by then)" if want is None
                else "reference 0x%02x" % want, got))


def compare(ref, dump, ref_idx, dump_idx, dump_path, allow_next, out):
    """Prints the findings to OUT; returns the exit status (0 or 1)."""
    filled = dump_idx["filled"]
    # Step R's write position, for a dump as of step R-1 >= 0 (step 0, the
    # prefill, writes many).
    allow_next = allow_next and dump_idx["step"] >= 0
    bad = seen_next = 0
    notes = []
    for t in dump_idx["tensors"]:
        layer0 = is_layer0(t["name"])
        res = compare_tensor(ref, dump, t, filled, ref_idx["filled"], allow_next and layer0)
        b, h = t["shape"][:2]
        if res.next_rows or res.next_unchecked:
            seen_next += 1
            notes.append("check_kv: allowed: %s: position %d (step %d's layer-0 write) holds "
                         "%s in %d of %d (batch, head) rows" % (
                             t["name"], filled, dump_idx["step"] + 1,
                             "the reference's bytes" if res.next_rows else
                             "non-zero bytes, not compared (the reference is of step %d)"
                             % ref_idx["step"],
                             res.next_rows + res.next_unchecked, b * h))
        if not res.positions:
            continue
        bad += 1
        hint = ""
        if layer0 and res.positions == [filled] and not allow_next and dump_idx["step"] >= 0:
            hint = (" (position %d is step %d's write position: eager mode's snapshot may "
                    "hold it, see --allow-next-layer0)" % (filled, dump_idx["step"] + 1))
        elif layer0 and allow_next and filled in res.positions:
            hint = (" (position %d, step %d's write position, holds neither zeros nor the "
                    "reference's bytes)" % (filled, dump_idx["step"] + 1))
        print("check_kv: DIFFERENT: %s: positions %s differ in %d of %d (batch, head) rows%s; "
              "%s" % (t["name"], spans(res.positions), res.rows, b * h, hint,
                      first_text(res.first, dump_path)), file=out)
    for n in notes:
        print(n, file=out)
    what = "%d tensors, step %d (positions %s written, the rest zero) against step %d" % (
        len(dump_idx["tensors"]), dump_idx["step"],
        "0-%d" % (filled - 1) if filled else "none", ref_idx["step"])
    if bad:
        print("check_kv: %d of %s differ" % (bad, what), file=out)
        return 1
    also = ""
    if seen_next:
        also = "; %d layer-0 tensors also hold step %d's write at position %d (allowed)" % (
            seen_next, dump_idx["step"] + 1, filled)
    print("check_kv: OK: %s: equal%s" % (what, also), file=out)
    return 0


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--allow-next-layer0", action="store_true",
                   help="layer 0 may hold step R's K/V at position p_R (eager mode)")
    p.add_argument("reference")
    p.add_argument("dump")
    a = p.parse_args(argv)
    ref_path, dump_path = a.reference, a.dump
    try:
        ref_idx = formats.kv_read_index(ref_path)
        dump_idx = formats.kv_read_index(dump_path)
    except formats.FormatError as e:
        print("check_kv: %s" % e, file=sys.stderr)
        return 2
    keys = ("name", "shape", "dtype", "itemsize", "offset", "nbytes")
    if [[t[k] for k in keys] for t in ref_idx["tensors"]] != \
            [[t[k] for k in keys] for t in dump_idx["tensors"]]:
        print("check_kv: %s and %s hold other tensors (names, shapes or dtypes differ)"
              % (ref_path, dump_path), file=sys.stderr)
        return 2
    if dump_idx["step"] > ref_idx["step"] or dump_idx["filled"] > ref_idx["filled"]:
        print("check_kv: the dump is of step %d, the reference of step %d: want a reference "
              "of that step or later" % (dump_idx["step"], ref_idx["step"]), file=sys.stderr)
        return 2
    with open(ref_path, "rb") as rf, open(dump_path, "rb") as df, \
            mmap.mmap(rf.fileno(), 0, access=mmap.ACCESS_READ) as ref, \
            mmap.mmap(df.fileno(), 0, access=mmap.ACCESS_READ) as dump:
        return compare(ref, dump, ref_idx, dump_idx, dump_path, a.allow_next_layer0, sys.stdout)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
