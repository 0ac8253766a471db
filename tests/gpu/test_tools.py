#!/usr/bin/env python3
"""test_tools.py - the parts of tests/gpu that run without torch or a GPU:
the journal, manifest and truth readers, the KV dump index, routing.bin
parsing and the set comparison, the KV comparison, the serve truth adapter,
and moe_generate.py's argument checks and cache sizing."""
import contextlib
import io
import json
import os
import struct
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import check_kv  # noqa: E402
import check_routing  # noqa: E402
import formats  # noqa: E402
import moe_generate  # noqa: E402
import serve_truth  # noqa: E402

MIB = 1 << 20


def quiet(fn, *args):
    """fn's return value (or SystemExit code) and what it printed."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        try:
            rc = fn(*args)
        except SystemExit as e:
            rc = e.code
    return rc, out.getvalue()


class Tmp(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.addCleanup(self.dir.cleanup)

    def path(self, name):
        return os.path.join(self.dir.name, name)

    def write(self, name, data):
        with open(self.path(name), "wb" if isinstance(data, bytes) else "w") as f:
            f.write(data)
        return self.path(name)


class Journal(Tmp):
    def test_reads_whole_lines_and_what_they_take(self):
        text = "step 0 1 2\nstep 1 3 4\nstep 2 5"
        p = self.write("j", text)
        tokens, keep = formats.journal_read(p, 2, 2, 10)
        self.assertEqual(tokens, [[1, 2], [3, 4]])
        self.assertEqual(keep, len("step 0 1 2\nstep 1 3 4\n"))
        self.assertEqual(formats.journal_read(p, 0, 2, 10), ([], 0))

    def test_line_format(self):
        self.assertEqual(formats.journal_line(3, [7, 0]), "step 3 7 0\n")

    def test_bad_journals_name_the_line(self):
        for text, steps, why in [
                ("step 0 1 2\nstep 1 3 4", 2, "line 2: step 1's line is cut short"),
                ("step 0 1 2\n", 2, "line 2: step 1's line is missing"),
                ("step 1 1 2\n", 1, 'line 1: want "step 0" and 2 tokens below 10'),
                ("step 0 1\n", 1, "line 1: want"),
                ("step 0 1 2 3\n", 1, "line 1: want"),
                ("step 0 1 10\n", 1, "line 1: want"),
                ("step 0 1 02\n", 1, "line 1: want"),
                ("step 0 1 -2\n", 1, "line 1: want"),
                ("step 0 1  2\n", 1, "line 1: want")]:
            p = self.write("j", text)
            with self.assertRaises(formats.FormatError) as cm:
                formats.journal_read(p, steps, 2, 10)
            self.assertIn(why, str(cm.exception), text)
        with self.assertRaises(formats.FormatError):
            formats.journal_read(self.path("missing"), 1, 2, 10)

    def test_token_hash(self):
        a = formats.token_hash([[1, 2], [3, 4]])
        self.assertEqual(len(a), 16)
        self.assertEqual(a, formats.token_hash([[1, 2], [3, 4]]))
        self.assertNotEqual(a, formats.token_hash([[1, 2], [4, 3]]))


class Manifest(Tmp):
    def resume(self, text):
        p = self.write("m.json", text)
        return quiet(moe_generate.resume_step, p)

    def test_resume_step(self):
        self.assertEqual(self.resume('{"format": 1, "resume_step": 32}')[0], 32)
        self.assertEqual(self.resume('{"resume_step": 0}')[0], 0)

    def test_bad_manifests_exit_2_naming_it(self):
        for text in ['{"resume_step": -1}', '{"resume_step": true}', '{"resume_step": 1.5}',
                     '{"resume_step": "3"}', '{"x": 1}', '[1]', 'not json',
                     '{"resume_step": 1, "resume_step": 2}']:
            rc, out = self.resume(text)
            self.assertEqual(rc, 2, text)
            self.assertIn("MOEFT_RESTORE_MANIFEST=", out)
        rc, out = quiet(moe_generate.resume_step, self.path("missing"))
        self.assertEqual(rc, 2)
        self.assertIn("No such file", out)


class Args(unittest.TestCase):
    def test_defaults_give_kv_tensors_of_their_own_allocation(self):
        a = moe_generate.parse_args([])
        self.assertEqual(a.kv_bytes, 12 * MIB)
        self.assertGreaterEqual(a.kv_bytes, 10 * MIB)
        self.assertEqual(a.kv_bytes % (2 * MIB), 0)
        # Not the size of any weight, which would then look like a KV pool.
        sizes = {a.experts * 2 * a.moe_intermediate * a.hidden * 2,
                 a.experts * a.hidden * a.moe_intermediate * 2,
                 a.vocab * a.hidden * 2, a.hidden * a.hidden * 2}
        self.assertNotIn(a.kv_bytes, sizes)
        self.assertEqual(a.save_kv_step, a.steps - 1)

    def test_kv_gib_sizes_the_cache(self):
        a = moe_generate.parse_args(["--kv-gib", "4", "--prompt-len", "2048"])
        total = 2 * a.layers * a.kv_bytes
        self.assertLessEqual(total, 4 << 30)
        self.assertGreater(total, (4 << 30) - 2 * a.layers * 2 * MIB)
        self.assertEqual(a.kv_bytes % (2 * MIB), 0)

    def test_bad_arguments_exit_2(self):
        for argv in [["--steps", "0"], ["--topk", "65"], ["--hidden", "1001"],
                     ["--mode", "graph", "--device", "cpu"], ["--cache-len", "64"],
                     ["--cache-len", "800", "--kv-gib", "1"], ["--kv-gib", "0"],
                     ["--save-kv-step", "96"], ["--batch", "x"]]:
            self.assertEqual(quiet(moe_generate.parse_args, argv)[0], 2, argv)

    def test_dump_at_resume_needs_a_resumed_run(self):
        os.environ.pop("MOEFT_RESTORE_MANIFEST", None)
        rc, out = quiet(moe_generate.main, ["--dump-kv-at-resume", "/nonexistent/x"])
        self.assertEqual(rc, 2)
        self.assertIn("not resumed", out)


class Truth(Tmp):
    def test_round_trip(self):
        p = self.write("t", formats.truth_header(2, 8, 2) +
                       formats.truth_step(0, [[[1, 2], [3, 4]], [[5, 6], [7, 0]]]) +
                       formats.truth_step(1, [[[1, 3]], [[2, 4]]]))
        head, steps, weights = formats.truth_read(p)
        self.assertEqual((head["layers"], head["experts"], head["topk"]), (2, 8, 2))
        self.assertEqual(steps[1], [[[1, 3]], [[2, 4]]])
        self.assertEqual(weights, {})
        p = self.write("w", formats.truth_header(1, 8, 2, weights=True) +
                       formats.truth_step(0, [[[1, 2]]], [[[0x3f000000, 0xffffffff]]]))
        head, steps, weights = formats.truth_read(p)
        self.assertEqual(weights, {0: [[[0x3f000000, 0xffffffff]]]})

    def test_bad_truths(self):
        head = formats.truth_header(1, 8, 2)
        for text, why in [("", "header"), ('{"truth": 2}\n', "header"),
                          (head + "{bad\n", "line 2: not JSON"),
                          (head + formats.truth_step(0, [[[1, 9]]]), "ids below 8"),
                          (head + formats.truth_step(0, [[[1]]]), "rows of 2 ids"),
                          (head + formats.truth_step(0, []), "want 1 layers"),
                          (head + formats.truth_step(0, [[[1, 2]]]) * 2, "twice"),
                          (formats.truth_header(1, 8, 2, weights=True) +
                           formats.truth_step(0, [[[1, 2]]]), "weights shaped as the ids"),
                          (formats.truth_header(1, 8, 2, weights=True) +
                           formats.truth_step(0, [[[1, 2]]], [[[1, 1 << 32]]]),
                           "float32's bits"),
                          (formats.truth_header(1, 8, 2, weights=True) +
                           formats.truth_step(0, [[[1, 2]]], [[[1]]]), "shaped as the ids"),
                          ('{"truth": 1, "layers": 1, "experts": 8, "topk": 2, '
                           '"weights": 1}\n', "weights: want true or false")]:
            p = self.write("t", text)
            with self.assertRaises(formats.FormatError) as cm:
                formats.truth_read(p)
            self.assertIn(why, str(cm.exception))


def routing_record(step, layer, rows, experts=8, width=1, flags=0, weights=None):
    """A ROUTING payload; with flags 1-3, weights (rows of float32, bfloat16
    or float16 bits as the flags say), made up as zeros when not given."""
    k = len(rows[0]) if rows else 1
    ids = [i for r in rows for i in r]
    payload = check_routing.ROUTING_HDR.pack(step, layer, len(rows), k, width, flags, experts)
    payload += struct.pack("<%d%s" % (len(ids), "BHI"[width // 2]), *ids)
    wbytes = (0, 4, 2, 2)[flags & 3]
    if weights is None:
        payload += bytes(len(ids) * wbytes)
    elif wbytes:
        payload += struct.pack("<%d%s" % (len(ids), "IHH"[(flags & 3) - 1]),
                               *[b for r in weights for b in r])
    return struct.pack("<I", len(payload)) + payload


class Routing(Tmp):
    def setup_restore(self, records, windows, truth_steps, truth_weights=None):
        os.makedirs(self.path("out"), exist_ok=True)
        self.write("out/routing.bin", b"".join(records))
        self.write("out/manifest.json", json.dumps(
            {"resume_step": 2, "routing": {"file": "routing.bin", "records": len(records),
                                           "windows": windows}}))
        w = truth_weights or {}
        self.write("truth", formats.truth_header(2, 8, 2, weights=bool(w)) +
                   "".join(formats.truth_step(s, layers, w.get(s))
                           for s, layers in truth_steps))
        return quiet(check_routing.main, [self.path("out"), self.path("truth")])

    WINDOWS = [{"id": 3, "first_step": 0, "steps": 2, "flags": 0}]
    TRUTH = [(0, [[[1, 2], [3, 4]], [[5, 6]]]), (1, [[[7, 0]], [[1, 7]]])]

    def records(self, width=1):
        return [routing_record(0, 0, [[2, 1], [3, 4]], width=width),
                routing_record(0, 1, [[6, 5]], width=width),
                routing_record(1, 0, [[0, 7]], width=width),
                routing_record(1, 1, [[7, 1]], width=width)]

    def test_equal_sets_in_any_order_and_id_widths(self):
        for width in (1, 2, 4):
            rc, out = self.setup_restore(self.records(width), self.WINDOWS, self.TRUTH)
            self.assertEqual(rc, 0, out)
            self.assertIn("steps 0-1 (2 steps in 1 windows), 2 layers, 5 token rows", out)

    def test_records_with_gating_weights(self):
        for flags in (1, 2, 3):
            recs = [routing_record(0, 0, [[2, 1], [3, 4]], flags=flags),
                    routing_record(0, 1, [[6, 5]], width=4, flags=flags)] + self.records()[2:]
            rc, out = self.setup_restore(recs, self.WINDOWS, self.TRUTH)
            self.assertEqual(rc, 0, out)

    # The truth's weights, float32 bits, for TRUTH's ids: 0.5, 0.25, ... and
    # a NaN, a negative zero and a subnormal among them.
    W = {0: [[[0x3f000000, 0x3e800000], [0x7fc00001, 0x80000000]], [[0x00000001, 0x3f800000]]],
         1: [[[0x3f400000, 0x3d800000]], [[0x40000000, 0xbf800000]]]}

    def weighted(self, flags=1, step1_layer1=None):
        """self.records() with weights: TRUTH's pairs in the logged order."""
        f32 = {0: [[[0x3e800000, 0x3f000000], [0x7fc00001, 0x80000000]],
                   [[0x3f800000, 0x00000001]]],
               1: [[[0x3d800000, 0x3f400000]], [[0xbf800000, 0x40000000]]]}
        if step1_layer1:
            f32[1][1] = step1_layer1
        logged = [(0, 0, [[2, 1], [3, 4]]), (0, 1, [[6, 5]]), (1, 0, [[0, 7]]),
                  (1, 1, [[7, 1]])]

        def enc(b):
            return b if flags == 1 else b >> 16

        return [routing_record(s, layer, rows, flags=flags,
                               weights=[[enc(b) for b in r] for r in f32[s][layer]])
                for s, layer, rows in logged]

    def test_gating_weights_against_the_truth(self):
        rc, out = self.setup_restore(self.weighted(), self.WINDOWS, self.TRUTH, self.W)
        self.assertEqual(rc, 0, out)
        self.assertIn("5 token rows of 2 ids with their gating weights", out)
        # bfloat16 records: the top halves of the same bits, which is what
        # the truth must then say (the NaN's payload and the subnormal go).
        w = {s: [[[b & 0xFFFF0000 for b in r] for r in rows] for rows in layers]
             for s, layers in self.W.items()}
        rc, out = self.setup_restore(self.weighted(flags=2), self.WINDOWS, self.TRUTH, w)
        self.assertEqual(rc, 0, out)

    def test_float16_weights_exactly(self):
        # 1.0, -2.0, the smallest subnormal, infinity, a NaN with a payload
        for h, f in [(0x3C00, 0x3F800000), (0xC000, 0xC0000000), (0x0001, 0x33800000),
                     (0x03FF, 0x387FC000), (0x7C00, 0x7F800000), (0xFE01, 0xFFC02000),
                     (0x8000, 0x80000000)]:
            self.assertEqual(check_routing.half_to_f32(h), f, hex(h))
            self.assertEqual(check_routing.half_to_f32(h),
                             f if h in (0xFE01,) else struct.unpack(
                                 "<I", struct.pack("<f", struct.unpack("<e", struct.pack(
                                     "<H", h))[0]))[0])

    def test_a_wrong_weight_is_a_mismatch(self):
        rc, out = self.setup_restore(self.weighted(step1_layer1=[[0xbf800000, 0x40000001]]),
                                     self.WINDOWS, self.TRUTH, self.W)
        self.assertEqual(rc, 1)
        self.assertIn("step 1 layer 1 row 0: logged [1:40000001, 7:bf800000], the truth's "
                      "top-2 is [1:40000000, 7:bf800000]", out)
        # Weights swapped between two ids of a row.
        rc, out = self.setup_restore(self.weighted(step1_layer1=[[0x40000000, 0xbf800000]]),
                                     self.WINDOWS, self.TRUTH, self.W)
        self.assertEqual(rc, 1)
        self.assertIn("step 1 layer 1 row 0", out)
        # Records without weights, a truth with them.
        rc, out = self.setup_restore(self.records(), self.WINDOWS, self.TRUTH, self.W)
        self.assertEqual(rc, 1)
        self.assertIn("step 0 layer 0: a record carries no gating weights", out)

    def test_rows_of_one_layer_in_several_records(self):
        recs = self.records()
        # Logged in either order: each stream appends its own.
        recs[0:1] = [routing_record(0, 0, [[3, 4]]), routing_record(0, 0, [[2, 1]])]
        self.assertEqual(self.setup_restore(recs, self.WINDOWS, self.TRUTH)[0], 0)
        recs[0] = routing_record(0, 0, [[3, 5]])
        rc, out = self.setup_restore(recs, self.WINDOWS, self.TRUTH)
        self.assertIn("step 0 layer 0 row 1: logged [3, 5], the truth's top-2 is [3, 4]", out)

    def test_flipped_id_is_a_mismatch(self):
        recs = self.records()
        recs[2] = routing_record(1, 0, [[0, 6]])
        rc, out = self.setup_restore(recs, self.WINDOWS, self.TRUTH)
        self.assertEqual(rc, 1)
        self.assertIn("step 1 layer 0 row 0: logged [0, 6], the truth's top-2 is [0, 7]", out)
        self.assertIn("logged around it: step 0: layers 0(2x2) 1(1x2); step 1: layers", out)

    def test_clock_faults_are_mismatches(self):
        # Every layer a step of its own: too few rows, then an extra layer.
        recs = self.records()[:1] + [routing_record(1, 0, [[6, 5]])]
        rc, out = self.setup_restore(recs, self.WINDOWS, self.TRUTH)
        self.assertEqual(rc, 1)
        self.assertIn("step 0 layer 1: 0 rows logged in 0 records, the truth has 1", out)
        recs = self.records() + [routing_record(1, 2, [[1, 2]])]
        rc, out = self.setup_restore(recs, self.WINDOWS, self.TRUTH)
        self.assertIn("step 1 layer 2: no such layer", out)
        recs = self.records() + [routing_record(5, 0, [[1, 2]])]
        rc, out = self.setup_restore(recs, self.WINDOWS, self.TRUTH)
        self.assertIn("step 5 layer 0: not a step of the windows", out)

    def test_other_failures(self):
        rc, out = self.setup_restore(self.records(), [dict(self.WINDOWS[0], flags=1)],
                                     self.TRUTH)
        self.assertEqual(rc, 1)
        self.assertIn("its routing was dropped", out)
        rc, out = self.setup_restore([], [], self.TRUTH)
        self.assertEqual(rc, 1)
        self.assertIn("nothing compared", out)
        rc, out = self.setup_restore(self.records(), self.WINDOWS, self.TRUTH[:1])
        self.assertIn("step 1: not in the truth file", out)

    def test_bad_inputs_exit_2(self):
        good = self.records()
        self.setup_restore(good, self.WINDOWS, self.TRUTH)
        for data, why in [(good[0][:-1], "does not fit"), (good[0][:3], "cut short"),
                          (struct.pack("<I", 24) + check_routing.ROUTING_HDR.pack(
                              0, 0, 1, 2, 3, 0, 8), "do not make"),
                          (routing_record(0, 0, [[2, 1]], flags=4), "flags 0x4"),
                          (routing_record(0, 0, [[2, 1]], flags=1)[:-2], "does not fit")]:
            self.write("out/routing.bin", data)
            rc, out = quiet(check_routing.main, [self.path("out"), self.path("truth")])
            self.assertEqual(rc, 2, why)
            self.assertIn(why, out)
        self.write("out/routing.bin", b"".join(good))
        self.write("out/manifest.json", '{"routing": {"records": 4, "windows": [{"id": 1}]}}')
        rc, out = quiet(check_routing.main, [self.path("out"), self.path("truth")])
        self.assertEqual(rc, 2)
        self.assertIn("want integers id, first_step", out)
        self.write("out/manifest.json", json.dumps(
            {"routing": {"records": 5, "windows": self.WINDOWS}}))
        rc, out = quiet(check_routing.main, [self.path("out"), self.path("truth")])
        self.assertEqual(rc, 2)
        self.assertIn("holds 4 records, the manifest says 5", out)


class KV(Tmp):
    """Two layers, K and V each, [B=2, H=2, L=6, D=3] bf16 (6 bytes a
    position), a prompt of P=2 positions: a dump as of step R-1 has
    P + R - 1 positions filled and step R writes position p_R = P + R - 1."""
    SHAPE = (2, 2, 6, 3)
    NAMES = ("layer0.k", "layer0.v", "layer1.k", "layer1.v")
    POS = 6

    def dump(self, name, step, filled, cells):
        """cells: {(tensor name, row b*H+h, position): byte value} over zeros."""
        tensors = []
        for tn in self.NAMES:
            data = bytearray(2 * 2 * 6 * self.POS)
            for (n, r, p), v in cells.items():
                if n == tn:
                    at = (r * 6 + p) * self.POS
                    data[at:at + self.POS] = bytes([v]) * self.POS
            tensors.append((tn, self.SHAPE, "bfloat16", 2, bytes(data)))
        formats.kv_write(self.path(name), step, filled, tensors)
        return self.path(name)

    @staticmethod
    def written(upto, value=0):
        """Every row of every tensor at positions 0 .. upto-1, distinct values."""
        return {(tn, r, p): 1 + (value + 7 * i + 3 * r + p) % 250
                for i, tn in enumerate(KV.NAMES) for r in range(4) for p in range(upto)}

    def setUp(self):
        super().setUp()
        # Reference after step 3 (P=2: positions 0-4); the dump is of step
        # R-1 = 1 (positions 0-2), so p_R = 3.
        self.full = self.written(5)
        self.ref = self.dump("ref", 3, 5, self.full)
        self.before = {k: v for k, v in self.full.items() if k[2] < 3}

    def check(self, cells, *flags, ref=None):
        d = self.dump("d", 1, 3, cells)
        return quiet(check_kv.main, list(flags) + [ref or self.ref, d])

    def test_identical(self):
        for flags in ((), ("--allow-next-layer0",)):
            rc, out = self.check(self.before, *flags)
            self.assertEqual(rc, 0, out)
            self.assertIn("OK: 4 tensors, step 1 (positions 0-2 written, the rest zero) "
                          "against step 3: equal\n", out)
            self.assertNotIn("allowed", out)
        self.assertEqual(quiet(check_kv.main, [self.ref, self.ref])[0], 0)

    def test_a_differing_byte_before_p_r_fails(self):
        cells = dict(self.before)
        cells[("layer1.v", 2, 1)] ^= 0x40  # batch 1, head 0
        for flags in ((), ("--allow-next-layer0",)):
            rc, out = self.check(cells, *flags)
            self.assertEqual(rc, 1, out)
            self.assertIn("DIFFERENT: layer1.v: positions 1 differ in 1 of 4 (batch, head) "
                          "rows; first difference at position 1, batch 1, head 0, byte 0 of "
                          "the position (offset %d of " % (3 * 144 + (2 * 6 + 1) * 6), out)
            self.assertIn(": reference 0x%02x, dump 0x%02x" % (
                self.full[("layer1.v", 2, 1)], cells[("layer1.v", 2, 1)]), out)
            self.assertIn("1 of 4 tensors", out)
        # A zeroed cache (nothing restored) differs at every written position.
        rc, out = self.check({})
        self.assertEqual(rc, 1)
        self.assertIn("layer0.k: positions 0-2 differ in 4 of 4", out)

    def next_layer0(self, value=None):
        """The history plus step R's layer-0 K/V at p_R = 3, in every row."""
        cells = dict(self.before)
        for tn in ("layer0.k", "layer0.v"):
            for r in range(4):
                cells[(tn, r, 3)] = self.full[(tn, r, 3)] if value is None else value
        return cells

    def test_layer0_at_p_r_needs_the_flag(self):
        rc, out = self.check(self.next_layer0())
        self.assertEqual(rc, 1, out)
        self.assertIn("DIFFERENT: layer0.k: positions 3 differ in 4 of 4 (batch, head) rows "
                      "(position 3 is step 2's write position", out)
        self.assertIn("first difference at position 3, batch 0, head 0, byte 0 of the "
                      "position (offset %d of " % (3 * 6), out)
        self.assertIn("must be zero (not written by then), dump 0x", out)
        self.assertIn("2 of 4 tensors", out)
        rc, out = self.check(self.next_layer0(), "--allow-next-layer0")
        self.assertEqual(rc, 0, out)
        self.assertIn("allowed: layer0.k: position 3 (step 2's layer-0 write) holds the "
                      "reference's bytes in 4 of 4 (batch, head) rows", out)
        self.assertIn("allowed: layer0.v: position 3", out)
        self.assertIn("equal; 2 layer-0 tensors also hold step 2's write at position 3 "
                      "(allowed)", out)
        # Some rows only, the others zero.
        cells = self.next_layer0()
        del cells[("layer0.k", 1, 3)]
        rc, out = self.check(cells, "--allow-next-layer0")
        self.assertEqual(rc, 0, out)
        self.assertIn("layer0.k: position 3 (step 2's layer-0 write) holds the reference's "
                      "bytes in 3 of 4", out)

    def test_layer0_at_p_r_must_be_the_references_step_r(self):
        cells = self.next_layer0()
        cells[("layer0.v", 3, 3)] ^= 1
        rc, out = self.check(cells, "--allow-next-layer0")
        self.assertEqual(rc, 1, out)
        self.assertIn("DIFFERENT: layer0.v: positions 3 differ in 1 of 4 (batch, head) rows "
                      "(position 3, step 2's write position, holds neither zeros nor the "
                      "reference's bytes); first difference at position 3, batch 1, head 1",
                      out)
        # A reference of step R-1 cannot say: non-zero bytes are allowed, unchecked.
        same = self.dump("same", 1, 3, self.before)
        rc, out = self.check(self.next_layer0(0x55), "--allow-next-layer0", ref=same)
        self.assertEqual(rc, 0, out)
        self.assertIn("non-zero bytes, not compared (the reference is of step 1) in 4 of 4",
                      out)

    def test_p_r_in_layer1_fails_even_with_the_flag(self):
        cells = self.next_layer0()
        cells[("layer1.k", 2, 3)] = self.full[("layer1.k", 2, 3)]
        for flags in ((), ("--allow-next-layer0",)):
            rc, out = self.check(cells, *flags)
            self.assertEqual(rc, 1, out)
            self.assertIn("DIFFERENT: layer1.k: positions 3 differ in 1 of 4 (batch, head) "
                          "rows; first difference at position 3, batch 1, head 0", out)
            self.assertIn("must be zero (not written by then)", out)

    def test_past_p_r_fails_even_with_the_flag(self):
        for cells, where in [({**self.next_layer0(), ("layer0.k", 0, 4): 9},
                              "positions 4 differ"),
                             ({**self.before, ("layer0.v", 3, 5): 9},
                              "positions 5 differ")]:
            rc, out = self.check(cells, "--allow-next-layer0")
            self.assertEqual(rc, 1, out)
            self.assertIn(where, out)
            self.assertIn("must be zero (not written by then), dump 0x09", out)

    def test_before_step_0(self):
        """Resumed at R = 0: step -1, nothing written, no p_R to allow."""
        d = self.dump("d", -1, 0, {})
        rc, out = quiet(check_kv.main, ["--allow-next-layer0", self.ref, d])
        self.assertEqual(rc, 0, out)
        self.assertIn("step -1 (positions none written, the rest zero)", out)
        d = self.dump("d", -1, 0, {("layer0.k", 0, 0): 1})
        rc, out = quiet(check_kv.main, ["--allow-next-layer0", self.ref, d])
        self.assertEqual(rc, 1, out)
        with open(d + ".json") as f:
            idx = json.load(f)
        idx["filled"] = 1
        self.write("d.json", json.dumps(idx))
        rc, out = quiet(check_kv.main, [self.ref, d])
        self.assertEqual(rc, 2)
        self.assertIn("step -1 (before step 0) with 1 positions filled", out)

    def test_unusable_inputs_exit_2(self):
        ref = self.dump("r", 1, 2, {})
        later = self.dump("later", 2, 3, {})
        rc, out = quiet(check_kv.main, [ref, later])
        self.assertEqual(rc, 2)
        self.assertIn("want a reference of that step or later", out)
        self.assertEqual(quiet(check_kv.main, [ref])[0], 2)
        self.assertEqual(quiet(check_kv.main, ["--allow", ref, later, "x"])[0], 2)
        with open(ref, "ab") as f:
            f.write(b"x")
        rc, out = quiet(check_kv.main, [ref, later])
        self.assertEqual(rc, 2)
        self.assertIn("bytes, its index says", out)
        rc, out = quiet(check_kv.main, [self.path("nope"), later])
        self.assertEqual(rc, 2)
        with open(later + ".json") as f:
            idx = json.load(f)
        idx["tensors"][1]["offset"] = 0
        self.write("later.json", json.dumps(idx))
        self.assertIn("offset or nbytes", quiet(check_kv.main, [later, later])[1])

    def test_spans(self):
        self.assertEqual(check_kv.spans([0, 1, 2, 5, 7, 8]), "0-2 5 7-8")


class ServeTruth(Tmp):
    TEXT = ("moeft-serve-truth 1 layers=2 experts=8 topk=2 hidden=64 kv-heads=2 seqs=3 "
            "steps=2 vocab=512 seed=1 block-size=16 kv-blocks=2\n"
            "step 0\nrows 0 1 2\nlayer 0 1,2 3,4 5,6\nlayer 1 0,1 2,3 4,5\n"
            "weights 0 3f000000,3e800000 3f000000,3e800000 3f000000,3e800000\n"
            "weights 1 3f000000,3e800000 3f000000,3e800000 3f000001,3e800000\n"
            "kv 00000000\ntokens 1 2 3\n"
            "step 1\nrows\nlayer 0\nlayer 1\nweights 0\nweights 1\nkv 00000000\ntokens\n"
            "seq 0 join 0 leave 1 tokens 1\ntoken-hash 0\n")

    def test_rows_in_group_order(self):
        src = self.write("serve.truth", self.TEXT)
        rc, out = quiet(serve_truth.main, [src, self.path("t")])
        self.assertEqual(rc, 0, out)
        head, steps, weights = formats.truth_read(self.path("t"))
        self.assertEqual(head["topk"], 2)
        # Sequences 0 and 2 (group 0), then 1 (group 1).
        self.assertEqual(steps[0], [[[1, 2], [5, 6], [3, 4]], [[0, 1], [4, 5], [2, 3]]])
        self.assertEqual(steps[1], [[], []])
        self.assertEqual(weights[0][1], [[0x3f000000, 0x3e800000], [0x3f000001, 0x3e800000],
                                         [0x3f000000, 0x3e800000]])
        self.assertEqual(weights[1], [[], []])

    def test_bad_serve_truth(self):
        src = self.write("serve.truth", self.TEXT.replace("layer 1 0,1", "layer 3 0,1"))
        rc, out = quiet(serve_truth.main, [src, self.path("t")])
        self.assertEqual(rc, 2)
        self.assertIn("line 2: step record: want layer 1", out)


if __name__ == "__main__":
    unittest.main()
