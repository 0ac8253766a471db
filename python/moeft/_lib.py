"""libmoeft's public C API (include/moeft.h, version 3) over ctypes.

Nothing here decides anything: each function passes its arguments to C and
returns what C returns, a negative errno on failure.  The library is found
in the process's global namespace, where LD_PRELOAD put it.
"""

from __future__ import annotations

import ctypes
import errno
import os
from array import array
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

API_VERSION = 4

_c_u32_p = ctypes.POINTER(ctypes.c_uint32)


class _Request(ctypes.Structure):
    """struct moeft_request."""

    _fields_ = [
        ("id", ctypes.c_char_p),
        ("id_len", ctypes.c_size_t),
        ("tokens", _c_u32_p),
        ("ntokens", ctypes.c_size_t),
        ("nprompt", ctypes.c_size_t),
        ("ncomputed", ctypes.c_size_t),
        ("block_tokens", ctypes.c_uint32),
        ("ngroups", ctypes.c_uint32),
        ("blocks", ctypes.POINTER(_c_u32_p)),
        ("nblocks", ctypes.POINTER(ctypes.c_size_t)),
        ("finished", ctypes.c_int),
        ("params", ctypes.c_char_p),
        ("params_len", ctypes.c_size_t),
    ]


class _RestoredRange(ctypes.Structure):
    """struct moeft_restored_range."""

    _fields_ = [
        ("at", ctypes.c_void_p),
        ("dst", ctypes.c_void_p),
        ("length", ctypes.c_size_t),
    ]


class _KvRange(ctypes.Structure):
    """struct moeft_kv_range."""

    _fields_ = [
        ("pool", ctypes.c_int),
        ("offset", ctypes.c_size_t),
        ("length", ctypes.c_size_t),
    ]


@dataclass(frozen=True)
class Request:
    """A request as moeft_commit_requests takes it."""

    id: bytes
    tokens: Sequence[int]
    nprompt: int
    ncomputed: int
    block_tokens: int
    blocks: Sequence[Sequence[int]]  # per KV cache group, in token order
    params: bytes = b""
    finished: bool = False


# name: (restype, argtypes) of every function this binding uses
_SIGNATURES: dict[str, tuple[object, list[object]]] = {
    "moeft_api_version": (ctypes.c_int, []),
    "moeft_instrumenting": (ctypes.c_int, []),
    "moeft_window": (ctypes.c_uint, []),
    "moeft_commit_requests": (
        ctypes.c_int,
        [ctypes.c_uint64, ctypes.c_uint32, ctypes.POINTER(_Request), ctypes.c_size_t],
    ),
    "moeft_kv_pool": (
        ctypes.c_int,
        [ctypes.c_char_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_size_t],
    ),
    "moeft_restored_read": (
        ctypes.c_int,
        [ctypes.c_int, ctypes.c_size_t, ctypes.c_void_p, ctypes.c_size_t],
    ),
    "moeft_restored_intact": (
        ctypes.c_int,
        [ctypes.c_int, ctypes.c_size_t, ctypes.c_size_t],
    ),
    "moeft_restored_step": (ctypes.c_int, [ctypes.POINTER(ctypes.c_uint64)]),
    "moeft_restored_device": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_size_t]),
    "moeft_restored_copy": (
        ctypes.c_int,
        [ctypes.POINTER(_RestoredRange), ctypes.c_size_t, ctypes.c_void_p],
    ),
    "moeft_commit_kv": (
        ctypes.c_int,
        [ctypes.c_uint64, ctypes.c_uint32, ctypes.POINTER(_KvRange), ctypes.c_size_t],
    ),
    "moeft_restored_prefix": (
        ctypes.c_long,
        [
            _c_u32_p,
            ctypes.c_size_t,
            ctypes.c_uint,
            _c_u32_p,
            ctypes.c_size_t,
            ctypes.POINTER(ctypes.c_size_t),
        ],
    ),
}


def strerror(rc: int) -> str:
    """A negative errno as "ENODEV (No such device)"."""
    code = -rc
    return f"{errno.errorcode.get(code, str(code))} ({os.strerror(code)})"


def _u32(values: Sequence[int]) -> array[int]:
    # array("I") is C's unsigned int: 4 bytes on every platform vLLM runs on
    return array("I", values)


def _ptr(buf: array[int]) -> ctypes._Pointer[ctypes.c_uint32]:
    if not buf:
        return _c_u32_p()
    return ctypes.cast(buf.buffer_info()[0], _c_u32_p)


class Lib:
    """The functions of a libmoeft.so that is loaded and instrumenting."""

    def __init__(self, cdll: ctypes.CDLL) -> None:
        self._f: dict[str, Any] = {}
        for name, (restype, argtypes) in _SIGNATURES.items():
            fn = getattr(cdll, name)
            fn.restype = restype
            fn.argtypes = argtypes
            self._f[name] = fn

    def window(self) -> int:
        return int(self._f["moeft_window"]())

    def restored_step(self) -> int | None:
        """The restored window's last step, or None when none was restored."""
        step = ctypes.c_uint64()
        if self._f["moeft_restored_step"](ctypes.byref(step)) != 0:
            return None
        return step.value

    def commit_requests(self, first_step: int, steps: int, reqs: Sequence[Request]) -> int:
        keep: list[object] = []  # every buffer C reads stays alive through the call
        arr = (_Request * max(len(reqs), 1))()
        for i, r in enumerate(reqs):
            tokens = _u32(r.tokens)
            groups = [_u32(g) for g in r.blocks]
            gptrs = (_c_u32_p * len(groups))(*(_ptr(g) for g in groups))
            counts = (ctypes.c_size_t * len(groups))(*(len(g) for g in groups))
            keep += [r.id, r.params, tokens, groups, gptrs, counts]
            arr[i] = _Request(
                r.id, len(r.id), _ptr(tokens), len(tokens), r.nprompt, r.ncomputed,
                r.block_tokens, len(groups), gptrs, counts, int(r.finished),
                r.params, len(r.params),
            )
        return int(self._f["moeft_commit_requests"](first_step, steps, arr, len(reqs)))

    def kv_pool(self, name: bytes, base: int, nbytes: int, chunk_bytes: int = 0) -> int:
        return int(self._f["moeft_kv_pool"](name, base, nbytes, chunk_bytes))

    def restored_intact(self, pool: int, offset: int, length: int) -> int:
        return int(self._f["moeft_restored_intact"](pool, offset, length))

    def restored_read(self, pool: int, offset: int, dst: int, length: int) -> int:
        return int(self._f["moeft_restored_read"](pool, offset, dst, length))

    def restored_device(self, at: int, length: int) -> int:
        return int(self._f["moeft_restored_device"](at, length))

    def restored_copy(self, ranges: Sequence[tuple[int, int, int]], stream: int) -> int:
        """ranges: (at, dst, length) each, device addresses."""
        arr = (_RestoredRange * max(len(ranges), 1))(*(_RestoredRange(*r) for r in ranges))
        return int(self._f["moeft_restored_copy"](arr, len(ranges), stream))

    def commit_kv(self, first_step: int, steps: int,
                  ranges: Sequence[tuple[int, int, int]]) -> int:
        """ranges: (pool, offset, length) each."""
        arr = (_KvRange * max(len(ranges), 1))(*(_KvRange(*r) for r in ranges))
        return int(self._f["moeft_commit_kv"](first_step, steps, arr, len(ranges)))

    def restored_prefix(self, tokens: Sequence[int], group: int) -> tuple[int, list[int]]:
        """(tokens the restored state holds, the crashed engine's block ids
        of group), or (a negative errno, [])."""
        buf = _u32(tokens)
        need = ctypes.c_size_t(0)
        cap = 64
        while True:
            blocks = (ctypes.c_uint32 * cap)()
            rc = int(self._f["moeft_restored_prefix"](
                _ptr(buf), len(buf), group, blocks, cap, ctypes.byref(need)))
            if rc == -errno.ENOSPC and need.value > cap:
                cap = need.value
                continue
            if rc < 0:
                return rc, []
            return rc, list(blocks[: need.value])


def load() -> tuple[Lib | None, str]:
    """This process's libmoeft, or None and why not (one sentence)."""
    cdll = ctypes.CDLL(None)
    try:
        version = cdll.moeft_api_version
    except AttributeError:
        return None, ("libmoeft.so is not loaded in this process (no moeft_api_version): "
                      "start the server with LD_PRELOAD=/path/to/libmoeft.so")
    version.restype = ctypes.c_int
    v = int(version())
    if v < API_VERSION:
        return None, (f"libmoeft.so has API version {v}; this connector needs "
                      f"{API_VERSION} or newer")
    missing = [n for n in _SIGNATURES if not hasattr(cdll, n)]
    if missing:
        return None, f"libmoeft.so (API version {v}) lacks {', '.join(missing)}"
    lib = Lib(cdll)
    # the first call starts the preload if nothing has yet
    if not lib._f["moeft_instrumenting"]():
        return None, ("moeft_instrumenting() is 0: this process is not logged "
                      "(MOEFT_DISABLE, a bad MOEFT_* variable, a log that cannot be "
                      "opened, or a child of fork(); the preload's own line says which)")
    return lib, ""
