"""Readers of what `moeft restore --out` writes, for the tests: the request
index (preload/reqindex.h: "MOEFTRQ1", then REQUEST payloads as
wal/FORMAT.md lays them out) and manifest.json."""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass
class Recorded:
    step: int
    id: str
    tokens: list[int]
    nprompt: int
    ncomputed: int
    block_tokens: int
    finished: bool
    blocks: list[list[int]]  # per KV cache group
    params: bytes


@dataclass
class RequestIndex:
    window: int
    first_step: int
    last_step: int
    requests: dict[str, Recorded]


def _request(p: bytes) -> Recorded:
    step, ntok, nprompt, ncomp, bt, idlen, ngroups, flags, _, plen = struct.unpack_from(
        "<QIIIIBBBBI", p)
    off = 32
    rid = p[off:off + idlen].decode("ascii")
    off += (idlen + 3) // 4 * 4
    counts = struct.unpack_from(f"<{ngroups}I", p, off)
    off += 4 * ngroups
    tokens = list(struct.unpack_from(f"<{ntok}I", p, off))
    off += 4 * ntok
    blocks = []
    for c in counts:
        blocks.append(list(struct.unpack_from(f"<{c}I", p, off)))
        off += 4 * c
    params = p[off:off + plen]
    assert off + plen == len(p), "a REQUEST payload's length is what its counts say"
    return Recorded(step, rid, tokens, nprompt, ncomp, bt, bool(flags & 1), blocks, params)


def read_requests(path: Path) -> RequestIndex:
    b = path.read_bytes()
    assert b[:8] == b"MOEFTRQ1"
    _, window, first, last, n = struct.unpack_from("<QQQQI", b, 8)
    off, reqs = 48, {}
    for _ in range(n):
        (length,) = struct.unpack_from("<I", b, off)
        r = _request(b[off + 4:off + 4 + length])
        reqs[r.id] = r
        off += 4 + (length + 3) // 4 * 4
    assert off + 4 == len(b), "the CRC ends the file"
    return RequestIndex(window, first, last, reqs)


def manifest(out: Path) -> Any:
    return json.loads((out / "manifest.json").read_text())
