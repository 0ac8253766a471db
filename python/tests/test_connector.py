"""The connector in this process, with vLLM's real scheduler and a CPU KV
cache (vllm_env.py): without libmoeft.so (nothing recorded, serving goes
on), and with a stand-in for libmoeft's functions (FakeLib) where a test
needs answers the real library gives only after a crash and a restore, or
failures it gives only when something is broken.  test_preload.py runs
the real library."""

from __future__ import annotations

import ctypes
import errno
import logging
import pickle
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from vllm.distributed.kv_transfer.kv_connector.v1.base import KVConnectorBase_V1
from vllm.v1.attention.backends.cpu_attn import CPUAttentionMetadata

from moeft import _lib
import moeft.vllm
from moeft.vllm import MoeftConnector, MoeftHandshake, MoeftMeta, _block_slabs
from vllm_env import Engine, Shape, Worker

BS = Shape().block_size


class FakeLib:
    """_lib.Lib's methods with scripted answers, every call kept."""

    def __init__(self, window: int = 4, restored_step: int | None = None) -> None:
        self._window = window
        self._restored_step = restored_step
        self.commits: list[tuple[int, int, list[dict[str, Any]]]] = []
        self.kv_commits: list[tuple[int, int, list[tuple[int, int, int]]]] = []
        self.pools: list[tuple[bytes, int, int]] = []
        self.commit_rc = 0
        self.read_rc = 0
        self.prefixes: dict[tuple[int, ...], tuple[int, list[int]]] = {}
        self.damaged: set[tuple[int, int]] = set()  # (offset, length) answered 0
        self.intact_rc = 1  # the answer for other ranges
        self.device_rc = 1
        self.copy_rc = 0
        self.copies: list[tuple[list[tuple[int, int, int]], int]] = []
        self.images: list[tuple[int, bytes]] = []  # (base, restored bytes)

    def window(self) -> int:
        return self._window

    def restored_step(self) -> int | None:
        return self._restored_step

    def commit_requests(self, first: int, steps: int, reqs: list[_lib.Request]) -> int:
        self.commits.append((first, steps, [
            {"id": r.id.decode(), "tokens": list(r.tokens), "nprompt": r.nprompt,
             "ncomputed": r.ncomputed, "block_tokens": r.block_tokens,
             "blocks": [list(g) for g in r.blocks], "params": r.params} for r in reqs]))
        return self.commit_rc

    def kv_pool(self, name: bytes, base: int, nbytes: int, chunk: int = 0) -> int:
        self.pools.append((name, base, nbytes))
        return len(self.pools) - 1

    def restored_intact(self, pool: int, offset: int, length: int) -> int:
        return 0 if (offset, length) in self.damaged else self.intact_rc

    def restored_read(self, pool: int, offset: int, dst: int, length: int) -> int:
        if self.read_rc == 0:
            ctypes.memset(dst, 0x5A, length)
        return self.read_rc

    def commit_kv(self, first: int, steps: int, ranges: list[tuple[int, int, int]]) -> int:
        self.kv_commits.append((first, steps, list(ranges)))
        return 0

    def restored_device(self, at: int, length: int) -> int:
        return self.device_rc

    def restored_copy(self, ranges: list[tuple[int, int, int]], stream: int) -> int:
        """Copies from the images (self.images: the pools' bytes as restored)."""
        self.copies.append((list(ranges), stream))
        if self.copy_rc == 0:
            for at, dst, length in ranges:
                base, image = next((base, b) for base, b in self.images
                                   if base <= at < base + len(b))
                ctypes.memmove(dst, image[at - base:at - base + length], length)
        return self.copy_rc

    def restored_prefix(self, tokens: Any, group: int) -> tuple[int, list[int]]:
        t = tuple(tokens)
        for prefix, answer in self.prefixes.items():
            if t[:len(prefix)] == prefix:
                return answer
        return 0, []


class Lines(logging.Handler):
    """The connector's log lines."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)

    def at(self, level: int) -> list[str]:
        return [r.getMessage() for r in self.records if r.levelno == level]


@pytest.fixture
def lines() -> Iterator[Lines]:
    h = Lines()
    log = logging.getLogger("vllm.moeft")
    log.addHandler(h)
    old = log.level
    log.setLevel(logging.DEBUG)
    yield h
    log.removeHandler(h)
    log.setLevel(old)


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> FakeLib:
    lib = FakeLib()
    monkeypatch.setattr(_lib, "load", lambda: (lib, ""))
    return lib


def drive(e: Engine, requests: list[dict[str, Any]], steps: int,
          worker: Worker | None = None) -> list[dict[str, Any]]:
    trace: list[dict[str, Any]] = []

    def forward(so: Any, slots: list[int], values: list[float]) -> set[int]:
        return worker.step(so, slots, values) if worker else set()

    e.run(requests, steps, forward, lambda **rec: trace.append(rec))
    return trace


def req(rid: str, prompt: list[int], at: int = 0, **params: Any) -> dict[str, Any]:
    return {"id": rid, "prompt": prompt, "at": at, "params": params or {"max_tokens": 8}}


def ceil_blocks(n: int) -> int:
    return -(-n // BS)


# ---------------------------------------------------------------- no library


def test_without_the_library(tmp_path: Path, lines: Lines) -> None:
    """Not preloaded: one warning per connector says why, nothing is
    recorded or offered, and every request is served to its end."""
    lib, why = _lib.load()
    if "moeft_api_version" not in why:
        pytest.skip("this process has libmoeft.so loaded")
    assert lib is None and "LD_PRELOAD" in why
    w = Worker(tmp_path / "model", Shape())
    e = Engine(tmp_path / "model", Shape())
    e.handshake({})
    trace = drive(e, [req("a", list(range(11, 21)), max_tokens=20),
                      req("b", list(range(31, 36)), at=2, max_tokens=30)], 40, w)
    assert lines.at(logging.WARNING) == [f"moeft: recording nothing: {why}"] * 2
    assert len(lines.records) == 2
    assert w.connector.get_handshake_metadata() is None
    steps = [r for r in trace if "step" in r]
    assert [r["step"] for r in steps] == list(range(len(steps)))
    assert not any(r["commit"] or r["loads"] for r in steps)
    assert all(r["answer"] == [0, False] for r in trace if "asked" in r)
    assert trace[-1]["unfinished"] == []
    assert {k: len(v) for k, v in trace[-1]["generated"].items()} == {"a": 20, "b": 30}


# ------------------------------------------------------------------ recording


def test_windows_through_preemption(tmp_path: Path, fake: FakeLib) -> None:
    """Two requests that do not fit the KV cache together: one is preempted
    and resumed.  Every window commits exactly the requests vLLM runs at its
    last step, with the blocks vLLM gave them."""
    fake._window = 3
    e = Engine(tmp_path / "model", Shape(num_blocks=10))
    trace = drive(e, [req("a", list(range(100, 112)), max_tokens=24),
                      req("b", list(range(200, 212)), max_tokens=24)], 60)
    steps = [r for r in trace if "step" in r]
    assert any(r["preempted"] for r in steps)  # the case this test is about
    windows = [r for r in steps if r["commit"]]
    assert [r["step"] for r in windows] == [s for s in range(2, steps[-1]["step"] + 1, 3)]
    assert [(f, n) for f, n, _ in fake.commits] == [(r["step"] - 2, 3) for r in windows]
    for (_, _, got), r in zip(fake.commits, windows, strict=True):
        want = [{"id": x["id"], "tokens": x["tokens"], "nprompt": x["nprompt"],
                 "ncomputed": x["ncomputed"], "block_tokens": BS,
                 "blocks": [x["blocks"][:ceil_blocks(x["ncomputed"])]],
                 "params": b'{"max_tokens":24,"temperature":1.0,"top_p":1.0,"top_k":0,'
                           b'"min_p":0.0}'} for x in r["running"]]
        assert sorted(got, key=lambda x: x["id"]) == sorted(want, key=lambda x: x["id"])
    assert trace[-1]["unfinished"] == []


def test_params(tmp_path: Path, fake: FakeLib, lines: Lines) -> None:
    e = Engine(tmp_path / "model", Shape())
    drive(e, [req("p", [5, 6, 7], max_tokens=9, temperature=0.7, top_p=0.9, top_k=3,
                  min_p=0.1, seed=1, stop=["a\u00e9"], stop_token_ids=[4], ignore_eos=True,
                  min_tokens=2, repetition_penalty=1.1, presence_penalty=0.5,
                  frequency_penalty=-0.5),
              req("long", [8, 9], stop=["x" * 5000], max_tokens=8)], 4)
    got = {r["id"]: r["params"] for r in fake.commits[0][2]}
    assert got == {
        "p": b'{"max_tokens":9,"temperature":0.7,"top_p":0.9,"top_k":3,"min_p":0.1,"seed":1,'
             b'"stop":["a\\u00e9"],"stop_token_ids":[4],"ignore_eos":true,"min_tokens":2,'
             b'"repetition_penalty":1.1,"presence_penalty":0.5,"frequency_penalty":-0.5}',
        "long": b""}
    assert lines.at(logging.WARNING) == [
        "moeft: request long: sampling parameters take 5080 bytes, over 4096; recorded "
        "without them"]


def test_kv_windows(tmp_path: Path, fake: FakeLib) -> None:
    """The worker registers the one storage of the layers as a pool named
    by its geometry and commits, per window, every block the steps wrote,
    in every layer."""
    fake._window = 2
    w = Worker(tmp_path / "model", Shape())
    base = w.kv.storage.data_ptr()
    assert fake.pools == [(b"vllm-kv float32 32x[2,4,128] 2 layers", base, 2 * 32 * 4096)]
    e = Engine(tmp_path / "model", Shape())
    written: dict[int, set[int]] = {}  # step: blocks written

    def forward(so: Any, slots: list[int], values: list[float]) -> set[int]:
        written[so.kv_connector_metadata.step] = {s // BS for s in slots}
        return w.step(so, slots, values)

    e.run([req("a", list(range(11, 21)), max_tokens=6), req("b", [1, 2, 3], at=1)], 12,
          forward, lambda **rec: None)
    assert [(f, n) for f, n, _ in fake.kv_commits] == [
        (s - 1, 2) for s in sorted(written) if s % 2 == 1]
    for first, n, ranges in fake.kv_commits:
        blocks = sorted(set().union(*(written[s] for s in range(first, first + n))))
        assert ranges == [(0, layer * 32 * 4096 + b * 4096, 4096)
                          for b in blocks for layer in range(2)]
    # a padded slot (-1) within the tokens is no block
    c = w.connector
    c.bind_connector_metadata(MoeftMeta(step=100, commit=(99, 2)))
    meta = CPUAttentionMetadata(
        num_actual_tokens=3, max_query_len=3, query_start_loc=torch.tensor([0, 3]),
        max_seq_len=0, seq_lens=torch.zeros(1), block_table=torch.zeros((1, 1)),
        slot_mapping=torch.tensor([-1, 4 * BS + 1, -1]), scheduler_metadata=None)
    for name, layer in w.kv.layers.items():
        c.save_kv_layer(name, layer, meta)  # type: ignore[arg-type]
    c.wait_for_save()  # type: ignore[no-untyped-call]
    assert fake.kv_commits[-1] == (99, 2, [(0, 4 * 4096, 4096), (0, 36 * 4096, 4096)])


# ------------------------------------------------------------------ restoring


PROMPT = list(range(300, 316))  # 16 tokens


def restored(tmp_path: Path, fake: FakeLib, damaged: tuple[int, ...] = (),
             workers: dict[tuple[int, int], Any] | None = None) -> Engine:
    fake._restored_step = 41
    fake.prefixes[tuple(PROMPT[:12])] = (12, [7, 8, 9])
    e = Engine(tmp_path / "model", Shape())
    e.handshake({(0, 0): MoeftHandshake(True, damaged)} if workers is None else workers)
    return e


def test_resume(tmp_path: Path, fake: FakeLib, lines: Lines) -> None:
    e = restored(tmp_path, fake)
    trace = drive(e, [req("r", PROMPT)], 1)
    assert trace[0] == {"asked": "r", "answer": [12, False]}
    step = trace[1]
    new = step["new"]["r"][1]
    assert (step["step"], step["new"]["r"][0], step["sync_loads"]) == (42, 12, True)
    assert step["loads"] == [[7, new[0]], [8, new[1]], [9, new[2]]]
    assert "moeft: resumed request r: 12 tokens from the restored state, 3 blocks" in \
        lines.at(logging.INFO)


def test_resume_after_a_local_hit(tmp_path: Path, fake: FakeLib) -> None:
    """A prefix the local cache holds (8 tokens, from a request that ran
    first) is not loaded again: only the restored blocks after it."""
    e = restored(tmp_path, fake)
    trace = drive(e, [req("first", PROMPT[:9], max_tokens=1), req("r", PROMPT, at=3)], 4)
    step = next(r for r in trace if "step" in r and "r" in r["new"])
    new = step["new"]["r"][1]
    assert step["new"]["r"][0] == 12
    assert step["loads"] == [[9, new[2]]]


def test_damaged_blocks_cut_the_prefix(tmp_path: Path, fake: FakeLib, lines: Lines) -> None:
    e = restored(tmp_path, fake, damaged=(8, 30))
    trace = drive(e, [req("r", PROMPT)], 1)
    assert trace[0]["answer"] == [4, False]
    assert trace[1]["loads"] == [[7, trace[1]["new"]["r"][1][0]]]
    assert ("moeft: resumed request r: 4 tokens from the restored state, 1 block; 8 tokens "
            "recomputed because blocks were damaged") in lines.at(logging.INFO)


@pytest.mark.parametrize("workers, why", [
    ({}, "no worker reported its KV pools"),
    ({(0, 0): MoeftHandshake(False)}, "0 of 1 workers restored their KV pools"),
])
def test_nothing_offered_without_restored_workers(tmp_path: Path, fake: FakeLib, lines: Lines,
                                                  workers: Any, why: str) -> None:
    e = restored(tmp_path, fake, workers=workers)
    trace = drive(e, [req("r", PROMPT)], 3)
    assert trace[0]["answer"] == [0, False]
    assert not any(r.get("loads") for r in trace)
    assert lines.at(logging.WARNING) == [f"moeft: restored KV is not offered: {why}"]


def test_worker_reports_damaged_blocks(tmp_path: Path, fake: FakeLib) -> None:
    layer = 32 * 4096
    fake.damaged = {(layer, layer), (layer + 5 * 4096, 4096)}  # layer 1, its block 5
    w = Worker(tmp_path / "model", Shape())
    assert w.connector.get_handshake_metadata() == MoeftHandshake(True, (5,))
    fake.intact_rc = -errno.ENODEV  # a fresh start: nothing restored
    w = Worker(tmp_path / "model2", Shape())
    assert w.connector.get_handshake_metadata() == MoeftHandshake(False, ())


# ------------------------------------------------------------------- failures


def test_failed_commits_are_logged_once(tmp_path: Path, fake: FakeLib, lines: Lines) -> None:
    fake.commit_rc = -errno.ENOSPC
    e = Engine(tmp_path / "model", Shape())
    trace = drive(e, [req("a", [1, 2, 3], max_tokens=12)], 12)
    assert len(fake.commits) == 3  # tried at every window's end
    assert not any(r.get("commit") for r in trace)  # so the workers commit no KV
    assert lines.at(logging.ERROR) == [
        "moeft: moeft_commit_requests failed: ENOSPC (No space left on device); this window "
        "is not recorded, later ones are tried (logged once)"]
    assert trace[-1]["unfinished"] == []


def test_a_raising_hook_fails_open(tmp_path: Path, fake: FakeLib, lines: Lines) -> None:
    def boom(*args: Any) -> int:
        raise RuntimeError("boom")

    fake.commit_requests = boom  # type: ignore[method-assign,assignment]
    e = Engine(tmp_path / "model", Shape())
    trace = drive(e, [req("a", [1, 2, 3], max_tokens=12)], 12)
    metas = [r for r in trace if "step" in r]
    assert len(metas) == 12 and not any(r["commit"] for r in metas)
    assert lines.at(logging.ERROR) == [
        "moeft: build_connector_meta raised; vLLM serves on (logged once)"]
    assert trace[-1]["unfinished"] == []


def test_failed_loads_are_reported(tmp_path: Path, fake: FakeLib, lines: Lines) -> None:
    fake.read_rc = -errno.EBADMSG
    w = Worker(tmp_path / "model", Shape())
    e = restored(tmp_path, fake)
    errors: list[set[int]] = []

    def forward(so: Any, slots: list[int], values: list[float]) -> set[int]:
        errors.append(w.step(so, slots, values))
        return set()  # vLLM's answer to them is not this test's

    trace: list[dict[str, Any]] = []
    e.run([req("r", PROMPT)], 1, forward, lambda **rec: trace.append(rec))
    new = trace[1]["new"]["r"][1]
    assert errors == [set(new[:3])]
    assert lines.at(logging.ERROR) == [
        "moeft: moeft_restored_read(old block 7) failed: EBADMSG (Bad message); vLLM is told "
        "the block failed to load (logged once)"]


def test_loads_copy_into_the_new_blocks(tmp_path: Path, fake: FakeLib) -> None:
    w = Worker(tmp_path / "model", Shape())
    e = restored(tmp_path, fake)
    loaded: list[bytes] = []

    def forward(so: Any, slots: list[int], values: list[float]) -> set[int]:
        return w.step(so, slots, values, after_load=lambda: loaded.append(w.kv.bytes()))

    trace: list[dict[str, Any]] = []
    e.run([req("r", PROMPT)], 1, forward, lambda **rec: trace.append(rec))
    new = set(trace[1]["new"]["r"][1][:3])
    kv = loaded[0]
    for layer in range(2):
        for b in range(32):
            at = layer * 32 * 4096 + b * 4096
            assert kv[at:at + 4096] == (b"\x5a" if b in new else b"\0") * 4096


def test_what_vllm_ships_pickles() -> None:
    assert issubclass(MoeftConnector, KVConnectorBase_V1)
    for x in (MoeftMeta(step=3, commit=(0, 4), loads=[(1, 2)]), MoeftHandshake(True, (5,))):
        assert pickle.loads(pickle.dumps(x)) == x


# ---------------------------------------------------------------- device KV


def test_block_slabs_of_vllm_layouts() -> None:
    nb, bs, heads, dim = 8, 4, 2, 16
    flash = torch.zeros(2, nb, bs, heads, dim)  # FlashAttention: K's blocks, then V's
    block = bs * heads * dim * 4
    assert _block_slabs(flash, nb) == [(flash.data_ptr(), block),
                                       (flash.data_ptr() + nb * block, block)]
    infer = torch.zeros(nb, 2, bs, heads, dim)  # FlashInfer: K and V inside a block
    assert _block_slabs(infer, nb) == [(infer.data_ptr(), 2 * block)]
    assert _block_slabs(flash.transpose(0, 1), nb) is None  # not contiguous
    assert _block_slabs(flash, nb + 1) is None  # no dimension of the blocks
    assert _block_slabs(torch.zeros(2, 2, bs, heads, dim), 2) is None  # either layout
    assert _block_slabs(torch.zeros(4, heads, nb, dim), nb) is None  # blocks not first


def device_worker(tmp_path: Path, fake: FakeLib, monkeypatch: pytest.MonkeyPatch
                  ) -> tuple[Any, torch.Tensor]:
    """A worker connector handed a FlashAttention-shaped KV cache as if it
    were on a GPU (CPU memory; the stream is 0)."""
    shape = Shape()
    monkeypatch.setattr(moeft.vllm, "_current_stream", lambda t: 0)
    w = Worker(tmp_path / "model", shape)
    kv = torch.zeros(2, shape.num_blocks, shape.block_size, shape.heads, shape.head_size)
    w.connector._worker.register_device([kv])
    return w.connector._worker, kv


def test_device_loads_copy_restored_blocks(tmp_path: Path, fake: FakeLib,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    worker, kv = device_worker(tmp_path, fake, monkeypatch)
    assert worker.handshake == MoeftHandshake(True, ())
    for b in range(kv.shape[1]):
        kv[:, b] = b + kv.new_tensor([[[[0.0]]], [[[0.5]]]])  # K: b, V: b + 0.5
    fake.images = [(kv.data_ptr(), bytes(kv.numpy().tobytes()))]
    kv.fill_(-1.0)  # the engine's new work, since the restore
    worker.load([(3, 7), (5, 1)])
    assert worker.load_errors == set()
    ranges, stream = fake.copies[0]
    assert stream == 0 and len(ranges) == 4  # two blocks in K's and V's slabs
    for old, new in [(3, 7), (5, 1)]:
        assert torch.equal(kv[0, new], torch.full_like(kv[0, new], old))
        assert torch.equal(kv[1, new], torch.full_like(kv[1, new], old + 0.5))
    assert torch.equal(kv[:, 0], torch.full_like(kv[:, 0], -1.0))  # untouched


def test_device_load_failures(tmp_path: Path, fake: FakeLib, lines: Lines,
                              monkeypatch: pytest.MonkeyPatch) -> None:
    fake.copy_rc = -errno.EIO
    worker, _ = device_worker(tmp_path, fake, monkeypatch)
    worker.load([(3, 7), (5, 1)])
    assert worker.load_errors == {7, 1}
    worker.load_errors.clear()
    worker.load([(3, 999)])  # no such block: nothing copied
    assert worker.load_errors == {999} and len(fake.copies) == 1
    assert lines.at(logging.ERROR) == [
        "moeft: moeft_restored_copy(2 blocks) failed: EIO (Input/output error); vLLM is told "
        "the blocks failed to load (logged once)",
        "moeft: asked to load blocks outside the KV cache's 32: [(3, 999)]; vLLM is told "
        "they failed to load"]


def test_device_not_restored(tmp_path: Path, fake: FakeLib,
                             monkeypatch: pytest.MonkeyPatch) -> None:
    fake.device_rc = -errno.ENODEV  # a fresh start
    worker, _ = device_worker(tmp_path, fake, monkeypatch)
    assert worker.handshake == MoeftHandshake(False, ())


def test_device_layout_not_understood(tmp_path: Path, fake: FakeLib, lines: Lines) -> None:
    w = Worker(tmp_path / "model", Shape())
    worker = w.connector._worker
    worker.register_device([torch.zeros(4, 2, Shape().num_blocks, 8)])
    assert worker.handshake == MoeftHandshake(False, ()) and worker.slabs == []
    assert lines.at(logging.WARNING) == [
        "moeft: device KV cache of shape (4, 2, 32, 8) strides (512, 256, 8, 1) is neither "
        "(2, 32, ...) nor (32, 2, ...), contiguous; restored KV is not offered"]
