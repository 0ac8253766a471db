"""formats.py - the files moe_generate.py writes, read back: the journal,
the routing truth and the KV-cache dumps, plus the token hash.  Standard
library only, so the checkers and the CPU tests import it without torch.

Journal: one line per completed step, "step T tok tok ...\n" (the batch's
tokens in row order), each written with one write(2), so a killed run
leaves whole lines and at most one partial line after them.

Truth: JSON lines.  First a header
    {"truth": 1, "layers": L, "experts": E, "topk": K}
(with "weights": true when the steps list gating weights), then one object
per computed step
    {"step": T, "layers": [[[id, ...] per row] per layer]}
holding, for every MoE layer and token row, the top-k expert ids of the
softmax of the router logits, and with weights also
    "weights": [[[bits, ...] per row] per layer]
each id's gating weight, the float32 top-k value of that softmax, as its
32 bits (an unsigned integer: exact, whatever the value).

KV dump: PATH holds the raw bytes of the cache tensors one after the other,
PATH.json their index:
    {"kv": 1, "step": T, "filled": N, "seq_dim": 2, "file": "PATH's name",
     "tensors": [{"name": "layer0.k", "shape": [B, H, L, D],
                  "dtype": "bfloat16", "itemsize": 2, "offset": O,
                  "nbytes": S}, ...]}
filled: the cache positions written as of step T (positions are written
once, in order, so positions >= filled are still zeros).  T is -1, with
filled 0, for a cache as it was before step 0.
"""
import hashlib
import json
import os
import struct


class FormatError(Exception):
    """An input file is not what its format says; the message names it."""


# ---- journal ---------------------------------------------------------------

def journal_line(step, tokens):
    return "step %d %s\n" % (step, " ".join(str(t) for t in tokens))


def journal_read(path, steps, batch, vocab):
    """The tokens of steps 0 .. steps-1 from the journal's first lines, and
    the bytes those lines take (what follows them is the crashed run's,
    past the resume point)."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise FormatError("%s: %s" % (path, e.strerror)) from e
    tokens, at = [], 0
    for t in range(steps):
        end = data.find(b"\n", at)
        if end < 0:
            what = "is cut short" if at < len(data) else "is missing"
            raise FormatError("%s: line %d: step %d's line %s (resuming at step %d)"
                              % (path, t + 1, t, what, steps))
        fields = data[at:end].split(b" ")
        want = "want \"step %d\" and %d tokens below %d" % (t, batch, vocab)
        if len(fields) != batch + 2 or fields[0] != b"step" or fields[1] != b"%d" % t:
            raise FormatError("%s: line %d: %s" % (path, t + 1, want))
        row = []
        for field in fields[2:]:
            if not field.isdigit() or int(field) >= vocab or field != b"%d" % int(field):
                raise FormatError("%s: line %d: %s" % (path, t + 1, want))
            row.append(int(field))
        tokens.append(row)
        at = end + 1
    return tokens, at


def token_hash(steps_tokens):
    """SHA-256 (first 16 hex digits) of every token, int32 little-endian,
    step after step, row after row."""
    h = hashlib.sha256()
    for row in steps_tokens:
        h.update(struct.pack("<%di" % len(row), *row))
    return h.hexdigest()[:16]


# ---- routing truth -----------------------------------------------------------

def truth_header(layers, experts, topk, weights=False):
    head = {"truth": 1, "layers": layers, "experts": experts, "topk": topk}
    if weights:
        head["weights"] = True
    return json.dumps(head) + "\n"


def truth_step(step, layers, weights=None):
    obj = {"step": step, "layers": layers}
    if weights is not None:
        obj["weights"] = weights
    return json.dumps(obj, separators=(",", ":")) + "\n"


def _int(v, what, lo=0):
    if type(v) is not int or v < lo:
        raise FormatError("%s: want an integer >= %d, got %r" % (what, lo, v))
    return v


def truth_read(path):
    """The header, {step: [layer][row] -> list of ids} and, when the header
    says so, {step: [layer][row] -> list of weights' float32 bits}, else {}."""
    try:
        f = open(path, encoding="utf-8")
    except OSError as e:
        raise FormatError("%s: %s" % (path, e.strerror)) from e
    with f:
        lines = f.read().split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    objs = []
    for n, line in enumerate(lines, 1):
        try:
            objs.append(json.loads(line))
        except ValueError as e:
            raise FormatError("%s: line %d: not JSON: %s" % (path, n, e)) from e
        if type(objs[-1]) is not dict:
            raise FormatError("%s: line %d: not a JSON object" % (path, n))
    if not objs or objs[0].get("truth") != 1:
        raise FormatError("%s: line 1: want the header {\"truth\": 1, ...}" % path)
    head = objs[0]
    for key in ("layers", "experts", "topk"):
        _int(head.get(key), "%s: header: %s" % (path, key), 1)
    if type(head.get("weights", False)) is not bool:
        raise FormatError("%s: header: weights: want true or false" % path)
    steps, weights = {}, {}
    for n, obj in enumerate(objs[1:], 2):
        where = "%s: line %d" % (path, n)
        step = _int(obj.get("step"), where + ": step")
        layers = obj.get("layers")
        if type(layers) is not list or len(layers) != head["layers"]:
            raise FormatError("%s: want %d layers" % (where, head["layers"]))
        for rows in layers:
            if type(rows) is not list or any(
                    type(r) is not list or len(r) != head["topk"] or
                    any(type(i) is not int or not 0 <= i < head["experts"] for i in r)
                    for r in rows):
                raise FormatError("%s: want rows of %d ids below %d"
                                  % (where, head["topk"], head["experts"]))
        if step in steps:
            raise FormatError("%s: step %d appears twice" % (where, step))
        steps[step] = layers
        if head.get("weights"):
            weights[step] = _truth_weights(obj.get("weights"), layers, where)
    return head, steps, weights


def _truth_weights(w, layers, where):
    """A step's weights: the shape of its ids, each a float32's bits."""
    if type(w) is not list or len(w) != len(layers) or any(
            type(rows) is not list or len(rows) != len(ids) or any(
                type(r) is not list or len(r) != len(i) or
                any(type(b) is not int or not 0 <= b < 1 << 32 for b in r)
                for r, i in zip(rows, ids))
            for rows, ids in zip(w, layers)):
        raise FormatError("%s: want weights shaped as the ids, each a float32's bits" % where)
    return w


# ---- KV dumps ------------------------------------------------------------------

def kv_write(path, step, filled, tensors):
    """tensors: (name, shape, dtype name, itemsize, bytes-like) in order."""
    index, offset = [], 0
    with open(path, "wb") as f:
        for name, shape, dtype, itemsize, data in tensors:
            nbytes = len(memoryview(data).cast("B"))
            f.write(data)
            index.append({"name": name, "shape": list(shape), "dtype": dtype,
                          "itemsize": itemsize, "offset": offset, "nbytes": nbytes})
            offset += nbytes
    with open(path + ".json", "w", encoding="utf-8") as f:
        json.dump({"kv": 1, "step": step, "filled": filled, "seq_dim": 2,
                   "file": os.path.basename(path), "tensors": index}, f, indent=1)
        f.write("\n")


def kv_read_index(path):
    """The index of the dump at PATH (PATH.json), checked against PATH's size."""
    where = path + ".json"
    try:
        with open(where, encoding="utf-8") as f:
            idx = json.load(f)
    except OSError as e:
        raise FormatError("%s: %s" % (where, e.strerror)) from e
    except ValueError as e:
        raise FormatError("%s: not JSON: %s" % (where, e)) from e
    if type(idx) is not dict or idx.get("kv") != 1:
        raise FormatError("%s: want {\"kv\": 1, ...}" % where)
    _int(idx.get("step"), where + ": step", -1)
    _int(idx.get("filled"), where + ": filled")
    if idx["step"] < 0 and idx["filled"]:
        raise FormatError("%s: step -1 (before step 0) with %d positions filled"
                          % (where, idx["filled"]))
    if idx.get("seq_dim") != 2 or type(idx.get("tensors")) is not list or not idx["tensors"]:
        raise FormatError("%s: want seq_dim 2 and a list of tensors" % where)
    end = 0
    for i, t in enumerate(idx["tensors"]):
        tw = "%s: tensor %d" % (where, i)
        if type(t) is not dict or type(t.get("name")) is not str:
            raise FormatError(tw + ": want an object with a name")
        shape = t.get("shape")
        if type(shape) is not list or len(shape) != 4:
            raise FormatError(tw + ": want a 4-dimensional shape")
        n = _int(t.get("itemsize"), tw + ": itemsize", 1)
        for d in shape:
            n *= _int(d, tw + ": shape", 1)
        if _int(t.get("offset"), tw + ": offset") != end or t.get("nbytes") != n:
            raise FormatError(tw + ": offset or nbytes do not follow from the shapes")
        if idx["filled"] > shape[2]:
            raise FormatError(tw + ": filled %d is past the cache length %d"
                              % (idx["filled"], shape[2]))
        end += n
    try:
        size = os.path.getsize(path)
    except OSError as e:
        raise FormatError("%s: %s" % (path, e.strerror)) from e
    if size != end:
        raise FormatError("%s: %d bytes, its index says %d" % (path, size, end))
    return idx
