#!/usr/bin/env python3
# heatmap.py - 'moeft inspect --heatmap' against logs of known routing.
#
# Usage: heatmap.py MOEFT HEATMAP_LOG
#
# HEATMAP_LOG writes the logs (see heatmap_log.c); the picture is read
# back with xml.etree: its cells must be the expected shares of the decode
# windows' routing, one per layer and expert.  Then the failures: paths
# that cannot be written, and a log without routing to draw.
import json
import os
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET

NS = "{http://www.w3.org/2000/svg}"
TO_4_DECIMALS = 5e-5
MOEFT, WRITER = sys.argv[1], sys.argv[2]
failures = 0


def check(cond, what):
    global failures
    print(("ok    " if cond else "FAIL  ") + what)
    failures += not cond


def run(*args):
    return subprocess.run(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def write_log(path, mode):
    p = run(WRITER, path, mode)
    if p.returncode != 0:
        sys.exit(f"heatmap.py: {WRITER} {mode}: {p.stderr.decode(errors='replace')}")


def inspect(log, svg, *more):
    return run(MOEFT, "inspect", "--wal", log, "--heatmap", svg, *more)


def expected(experts, steps, tokens, k):
    """Shares of heatmap_log.c's id_of: {(layer, expert): share}."""
    shares = {}
    for layer, n in enumerate(experts):
        if not n:
            continue
        count = [0] * n
        for s in steps:
            for t in range(tokens):
                for j in range(k):
                    count[(layer + s * t + 3 * j) % n] += 1
        for e in range(n):
            shares[(layer, e)] = count[e] / sum(count)
    return shares


def cells(root):
    """The cells: {(layer, expert): <rect>}, and how many there are."""
    rects = [r for r in root.iter(NS + "rect") if r.get("class") == "cell"]
    return {(int(r.get("data-layer")), int(r.get("data-expert"))): r for r in rects}, len(rects)


def shares(root):
    return {k: float(r.get("data-share")) for k, r in cells(root)[0].items()}


def luminance(fill):
    rgb = [int(fill[i:i + 2], 16) / 255 for i in (1, 3, 5)]
    return 0.2126 * rgb[0] + 0.7152 * rgb[1] + 0.0722 * rgb[2]


def picture(svg, want, what):
    """The picture's cells against the shares wanted; returns its root."""
    root = ET.parse(svg).getroot()
    check(root.tag == NS + "svg", f"{what}: root element is <svg> in the SVG namespace")
    rects, n = cells(root)
    got = shares(root)
    check(n == len(want) and set(got) == set(want),
          f"{what}: one cell per layer and expert ({n} cells, {len(want)} expected)")
    bad = [k for k in want if k in got and abs(got[k] - want[k]) >= TO_4_DECIMALS]
    check(not bad, f"{what}: every cell's data-share is its expert's share "
          f"(wrong: {[(k, got[k], want[k]) for k in bad[:5]]})")
    legend = [g for g in root.iter(NS + "g") if g.get("class") == "legend"]
    check(len(legend) == 1, f"{what}: one legend")
    if legend:
        g = legend[0]
        lo, hi = min(want.values()), max(want.values())
        texts = {t.get("class"): t.text for t in g.iter(NS + "text")}
        check(abs(float(g.get("data-min")) - lo) < TO_4_DECIMALS and
              abs(float(g.get("data-max")) - hi) < TO_4_DECIMALS and
              texts.get("legend-min") == f"{100 * lo:.2f}%" and
              texts.get("legend-max") == f"{100 * hi:.2f}%",
              f"{what}: legend labels the smallest and largest share ({texts})")
        check(g.find(f".//{NS}linearGradient") is not None, f"{what}: legend has a colour scale")
    fills = {k: r.get("fill") for k, r in rects.items()}
    lightest, darkest = min(want, key=want.get), max(want, key=want.get)
    check(luminance(fills[darkest]) < luminance(fills[lightest]),
          f"{what}: the largest share is darker ({fills[darkest]}) than the smallest "
          f"({fills[lightest]})")
    return root


def text_of(root):
    return " ".join(t.text or "" for t in root.iter(NS + "text"))


def main():
    with tempfile.TemporaryDirectory() as d:
        os.umask(0o022)
        log = os.path.join(d, "routing.wal")
        svg = os.path.join(d, "usage.svg")
        write_log(log, "routing")

        # known routing: decode windows only
        with open(svg, "w") as f:
            f.write("an older file, to be replaced")
        p = inspect(log, svg)
        check(p.returncode == 0, f"inspect --heatmap exits 0 ({p.returncode}: {p.stderr!r})")
        want = expected([8, 8, 8, 8], [*range(12), *range(16, 20)], 3, 2)
        check(want[(0, 0)] == 24 / 96 and want[(0, 7)] == 6 / 96,
              "the test's own shares: layer 0, expert 0 24/96, expert 7 6/96")
        root = picture(svg, want, "routing")
        got = shares(root)
        check(abs(got[(0, 0)] - 0.25) < TO_4_DECIMALS and
              abs(got[(0, 7)] - 0.0625) < TO_4_DECIMALS and
              abs(got[(3, 5)] - want[(3, 5)]) < TO_4_DECIMALS,
              "cells L0 E0, L0 E7 (routing outside decode windows left out), L3 E5")
        log_id = json.loads(run(MOEFT, "inspect", "--wal", log, "--json").stdout)["log_id"]
        words = text_of(root)
        for part in (f"log {log_id}", "windows 1-5 (4 decode windows)", "48 tokens",
                     "4 layers x 8 experts", "1 window missing routing"):
            check(part in words, f"title says '{part}' ({words[:160]!r})")
        check(sorted(os.listdir(d)) == ["routing.wal", "usage.svg"],
              f"no temporary file is left ({sorted(os.listdir(d))})")
        check(os.stat(svg).st_mode & 0o777 == 0o644, "the picture gets the umask's mode")

        # the JSON report says where the picture went and counts as it does
        p = inspect(log, svg, "--json")
        obj = json.loads(p.stdout) if p.returncode == 0 else {}
        check(obj.get("heatmap") == svg, "inspect --json --heatmap names the picture")
        row = obj.get("experts", {}).get("0", [])
        check(row and abs(row[0] / sum(row) - want[(0, 0)]) < 1e-9,
              f"the JSON histogram counts decode windows only ({row})")

        # layers with other expert counts, a layer without routing
        rlog = os.path.join(d, "ragged.wal")
        write_log(rlog, "ragged")
        p = inspect(rlog, svg)
        check(p.returncode == 0, f"ragged: exits 0 ({p.stderr!r})")
        picture(svg, expected([6, 0, 8], range(2), 3, 2), "ragged")

        # 512 experts: small cells, a bounded picture
        wlog = os.path.join(d, "wide.wal")
        write_log(wlog, "wide")
        p = inspect(wlog, svg)
        check(p.returncode == 0, f"wide: exits 0 ({p.stderr!r})")
        root = picture(svg, expected([512, 512], range(2), 64, 8), "wide")
        cell = next(r for r in root.iter(NS + "rect") if r.get("class") == "cell")
        width = float(root.get("width"))
        check(3 <= float(cell.get("width")) <= 4 and width <= 1700,
              f"wide: cells of {cell.get('width')} px, {width:g} px wide")
        labels = [t for t in root.iter(NS + "text") if (t.text or "").isdigit()]
        check(len(labels) < 160, f"wide: expert numbers at a stride ({len(labels)} labels)")

        # text from outside is escaped, bytes that are not UTF-8 too
        odd = os.path.join(os.fsencode(d), b"a&b<c>'d\"\xff.wal")
        write_log(odd, "ragged")
        p = inspect(odd, svg)
        check(p.returncode == 0, f"odd log name: exits 0 ({p.stderr!r})")
        root = ET.parse(svg).getroot()
        check("a&b<c>'d\"\ufffd.wal" in text_of(root), "odd log name: shown, escaped")

        # failures: nothing is written, the message names the path
        before = sorted(os.listdir(d))
        for bad, why in ((os.path.join(d, "missing", "x.svg"), "a missing directory"),
                         (os.path.join(log, "x.svg"), "a file as directory"),
                         (d, "a directory"),
                         (d + "/", "a directory name")):
            p = inspect(log, bad)
            err = p.stderr.decode(errors="replace")
            check(p.returncode == 2 and bad in err and sorted(os.listdir(d)) == before,
                  f"unwritable path, {why}: exit 2, named ({p.returncode}: {err.strip()})")
        if os.geteuid() != 0:
            ro = os.path.join(d, "ro")
            os.mkdir(ro, 0o555)
            p = inspect(log, os.path.join(ro, "x.svg"))
            check(p.returncode == 2 and os.listdir(ro) == [], "read-only directory: exit 2")

        nlog = os.path.join(d, "none.wal")
        nsvg = os.path.join(d, "none.svg")
        write_log(nlog, "none")
        p = inspect(nlog, nsvg)
        err = p.stderr.decode(errors="replace")
        check(p.returncode == 1 and "no routing" in err and nsvg in err and
              not os.path.exists(nsvg),
              f"no routing in decode windows: exit 1, nothing written ({p.returncode}: "
              f"{err.strip()})")
        p = inspect(nlog, nsvg, "--json")
        obj = json.loads(p.stdout) if p.stdout else {}
        check(p.returncode == 1 and obj.get("status") == "error",
              "no routing, --json: exit 1 and an error object")
    print(f"{failures} failed")
    return 1 if failures else 0


sys.exit(main())
