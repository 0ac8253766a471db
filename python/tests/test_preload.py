"""The connector under libmoeft.so, in the two processes of a server
(harness.py): what it records, as `moeft restore --out` reads it back, and
a server restarted by `moeft restore -- CMD` that resumes resubmitted
requests from the restored state.

One recorded run (the module's fixture): request a (a 10-token prompt,
chunked 8 + 2) from step 0, b from step 2, c (2 tokens to generate) from
step 3; windows of 4 steps; both processes SIGKILLed after step 9, in the
middle of the third window, so the state is that of step 7.
"""

from __future__ import annotations

import array
import json
import os
import re
import shutil
import signal
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from conftest import PYTHON_DIR, TESTS_DIR
from moeft_files import RequestIndex, manifest, read_requests
from vllm_env import kv_value

BS = 4  # vllm_env.Shape's
BLOCK = 4096  # bytes of a block of one layer
LAYER = 32 * BLOCK  # bytes of one layer
WINDOW = 4
# the processes' logs: ROLE.DEVICE.wal, ROLE their process title
# cleaned, DEVICE "nodev" where no GPU driver answers
SCHED, WORKER = "VLLM__EngineCore", "VLLM__Worker"


def named(d: Path, role: str, suffix: str = "") -> Path:
    """ROLE.DEVICE + suffix in d (a device name holds no ".")."""
    (path,) = [p for p in d.glob(f"{role}.*{suffix}")
               if p.name.count(".") == 1 + suffix.count(".")]
    return path

RECORD = [
    {"id": "a", "prompt": list(range(11, 21)), "at": 0,
     "params": {"max_tokens": 20, "temperature": 0.5, "seed": 7, "stop": ["x y"]}},
    {"id": "b", "prompt": list(range(31, 36)), "at": 2, "params": {"max_tokens": 30}},
    {"id": "c", "prompt": [41, 42, 43], "at": 3, "params": {"max_tokens": 2}},
]
PARAMS = {  # what /v1/completions needs to send them again, as recorded
    "a": b'{"max_tokens":20,"temperature":0.5,"top_p":1.0,"top_k":0,"min_p":0.0,'
         b'"seed":7,"stop":["x y"]}',
    "b": b'{"max_tokens":30,"temperature":1.0,"top_p":1.0,"top_k":0,"min_p":0.0}',
}


@dataclass
class Run:
    rc: int
    output: str  # stdout and stderr: vLLM logs to stdout
    trace: list[dict[str, Any]]
    out: Path  # the harness's dumps

    def steps(self) -> dict[int, dict[str, Any]]:
        return {r["step"]: r for r in self.trace if "step" in r}

    def answers(self) -> dict[str, list[Any]]:
        return {r["asked"]: r["answer"] for r in self.trace if "asked" in r}

    def handshake(self) -> Any:
        return next(r["handshake"] for r in self.trace if "handshake" in r)

    def kv(self, name: str) -> bytes:
        return (self.out / name).read_bytes()


def environment(wal: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("MOEFT_") and k != "LD_PRELOAD"}
    env.update(MOEFT_WAL=str(wal), MOEFT_WINDOW=str(WINDOW), MOEFT_WAL_SIZE="16M",
               PYTHONPATH=str(PYTHON_DIR), PYTHONUNBUFFERED="1", **extra)
    return env


def harness(work: Path, env: dict[str, str], requests: list[dict[str, Any]], steps: int,
            prefix: Sequence[str] = (), finish: bool = False) -> Run:
    out = work / "out"
    out.mkdir(parents=True)
    plan = work / "plan.json"
    plan.write_text(json.dumps({"out": str(out), "model": str(work / "model"), "steps": steps,
                                "requests": requests, "finish": finish}))
    p = subprocess.run([*prefix, sys.executable, str(TESTS_DIR / "harness.py"), str(plan)],
                       env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                       timeout=600)
    trace_file = out / "trace.jsonl"
    trace = ([json.loads(x) for x in trace_file.read_text().splitlines()]
             if trace_file.exists() else [])
    return Run(p.returncode, p.stdout, trace, out)


def restore(cli: Path, wal: Path, out: Path) -> tuple[int, str]:
    p = subprocess.run([str(cli), "restore", "--wal", str(wal), "--out", str(out)],
                       capture_output=True, text=True, timeout=120)
    return p.returncode, p.stderr


def wal_copy(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    dst.chmod(0o700)
    return dst


@dataclass
class Recording:
    run: Run
    wal: Path
    restored: Path  # moeft restore --out of it
    index: RequestIndex
    image: bytes  # the worker's KV pool as restored


@pytest.fixture(scope="module")
def recording(tmp_path_factory: pytest.TempPathFactory, moeft_lib: Path,
              moeft_cli: Path) -> Recording:
    work = tmp_path_factory.mktemp("record")
    wal = work / "wal"
    wal.mkdir(mode=0o700)
    run = harness(work, environment(wal, LD_PRELOAD=str(moeft_lib)), RECORD, steps=10)
    assert run.rc == -signal.SIGKILL, run.output
    out = work / "restored"
    rc, err = restore(moeft_cli, wal, out)
    assert rc == 0, err
    return Recording(run, wal, out, read_requests(named(out, SCHED) / "requests"),
                     (named(out, WORKER) / "kv-pool-0.bin").read_bytes())


def block(kv: bytes, layer: int, b: int) -> bytes:
    return kv[layer * LAYER + b * BLOCK:layer * LAYER + (b + 1) * BLOCK]


def test_windows_of_requests(recording: Recording) -> None:
    steps = recording.run.steps()
    assert [(s, r["commit"]) for s, r in steps.items() if r["commit"]] == [
        (3, [0, 4]), (7, [4, 4])]
    # c ran in the first window and finished in the second
    assert [r["id"] for r in steps[3]["running"]] == ["a", "b", "c"]
    idx = recording.index
    assert (idx.first_step, idx.last_step) == (4, 7)
    expected = {r["id"]: r for r in steps[7]["running"]}  # as vLLM held them
    assert sorted(idx.requests) == sorted(expected) == ["a", "b"]
    for rid, want in expected.items():
        got = idx.requests[rid]
        nblocks = -(-want["ncomputed"] // BS)
        assert (got.step, got.tokens, got.nprompt, got.ncomputed, got.block_tokens,
                got.finished, got.blocks, got.params) == (
                7, want["tokens"], want["nprompt"], want["ncomputed"], BS,
                False, [want["blocks"][:nblocks]], PARAMS[rid])
    # a: 10 prompt tokens and 6 generated, every one's KV computed by step 7
    assert (len(idx.requests["a"].tokens), idx.requests["a"].ncomputed) == (16, 16)


def test_windows_of_kv(recording: Recording) -> None:
    m = manifest(named(recording.restored, WORKER))
    assert (m["window"]["first_step"], m["window"]["last_step"], m["lost_chunks"]) == (4, 7, 0)
    assert recording.image == recording.run.kv("window-7.bin")
    assert recording.image != recording.run.kv("last.bin")  # steps 8, 9 came after
    # the blocks each recorded request names hold its tokens' KV
    for r in recording.index.requests.values():
        for layer in range(2):
            for pos in range(r.ncomputed):
                floats = array.array("f", block(recording.image, layer, r.blocks[0][pos // BS]))
                row = floats[(pos % BS) * 128:(pos % BS + 1) * 128]  # head 0, slot pos % BS
                assert set(row) == {kv_value(pos, r.tokens[pos]) + layer * (1 << 20)}


def resubmitted(idx: RequestIndex) -> list[dict[str, Any]]:
    """Each request as `moeft resubmit` sends it: prompt and generated
    tokens as the prompt, the budget left."""
    out = []
    for rid, r in sorted(idx.requests.items()):
        params = json.loads(r.params)
        params["max_tokens"] -= len(r.tokens) - r.nprompt
        out.append({"id": "re-" + rid, "prompt": r.tokens, "at": 0, "params": params})
    return out


def restored_run(recording: Recording, work: Path, lib: Path, cli: Path, wal: Path,
                 steps: int) -> Run:
    return harness(work, environment(wal), resubmitted(recording.index), steps,
                   prefix=[str(cli), "restore", "--wal", str(wal), "--preload", str(lib), "--"])


def check_loads(recording: Recording, run: Run, matched: dict[str, int]) -> None:
    """Each resubmitted request is admitted with its matched tokens computed,
    and that step loads its blocks, the crashed engine's into the new ones,
    before the forward, byte for byte."""
    steps = run.steps()
    admitted = {rid: (step, n, blocks) for step, r in steps.items()
                for rid, (n, blocks) in r["new"].items()}
    assert {rid: n for rid, (_, n, _) in admitted.items()} == matched
    loads: dict[int, list[list[int]]] = {}
    for rid, (step, n, new) in admitted.items():
        old = recording.index.requests[rid.removeprefix("re-")].blocks[0]
        loads.setdefault(step, []).extend([old[i], new[i]] for i in range(n // BS))
    assert {s: r["loads"] for s, r in steps.items() if r["loads"]} == loads
    for step, pairs in loads.items():
        assert steps[step]["sync_loads"] is True
        loaded = run.kv(f"loaded-{step}.bin")
        for was, now in pairs:
            for layer in range(2):
                assert block(loaded, layer, now) == block(recording.image, layer, was)


def test_restored_run(recording: Recording, tmp_path: Path, moeft_lib: Path,
                      moeft_cli: Path) -> None:
    wal = wal_copy(recording.wal, tmp_path / "wal")
    run = restored_run(recording, tmp_path, moeft_lib, moeft_cli, wal, steps=6)
    assert run.rc == -signal.SIGKILL, run.output
    assert run.handshake() == {"restored": True, "damaged": []}
    # a: 16 tokens, 16 computed: the engine computes the last itself, so
    # 15, in whole blocks 12; b: 10 tokens, 10 computed: 8
    matched = {"re-a": 12, "re-b": 8}
    assert run.answers() == {rid: [n, False] for rid, n in matched.items()}
    check_loads(recording, run, matched)
    for line in ("re-a: 12 tokens from the restored state, 3 blocks\n",
                 "re-b: 8 tokens from the restored state, 2 blocks\n"):
        assert "moeft: resumed request " + line in run.output
    # the restarted server numbers its steps on from 8 and records windows again
    steps = run.steps()
    assert min(steps) == 8
    assert [s for s, r in steps.items() if r["commit"]] == [11]
    out = tmp_path / "again"
    rc, err = restore(moeft_cli, wal, out)
    assert rc == 0, err
    again = read_requests(named(out, SCHED) / "requests")
    assert (again.first_step, again.last_step, sorted(again.requests)) == (8, 11, ["re-a", "re-b"])
    assert (named(out, WORKER) / "kv-pool-0.bin").read_bytes() == run.kv("window-11.bin")


def test_damaged_block_is_recomputed(recording: Recording, tmp_path: Path, moeft_lib: Path,
                                     moeft_cli: Path) -> None:
    wal = wal_copy(recording.wal, tmp_path / "wal")
    # a's second block (old block 2) of layer 0: one 4 KiB chunk in the store
    chunk = block(recording.image, 0, recording.index.requests["a"].blocks[0][1])
    store = named(wal, WORKER, ".wal.kv")
    data = bytearray(store.read_bytes())
    copies = [m.start() for m in re.finditer(re.escape(chunk), bytes(data))]
    assert copies
    for at in copies:
        data[at + 100] ^= 0x10
    store.write_bytes(bytes(data))
    rc, _ = restore(moeft_cli, wal, tmp_path / "check")
    pools = manifest(named(tmp_path / "check", WORKER))["kv_pools"]
    assert (rc, pools[0]["lost_chunks"]) == (1, [2])

    run = restored_run(recording, tmp_path, moeft_lib, moeft_cli, wal, steps=2)
    assert run.rc == -signal.SIGKILL, run.output
    assert run.handshake() == {"restored": True, "damaged": [2]}
    matched = {"re-a": 4, "re-b": 8}  # a only up to its damaged block
    assert run.answers() == {rid: [n, False] for rid, n in matched.items()}
    check_loads(recording, run, matched)
    assert ("moeft: resumed request re-a: 4 tokens from the restored state, 1 block; "
            "8 tokens recomputed because blocks were damaged\n") in run.output


def test_not_instrumenting(tmp_path: Path, moeft_lib: Path) -> None:
    """Preloaded but off (MOEFT_DISABLE=1): nothing recorded, one line per
    process says why, and the requests are served to the end."""
    wal = tmp_path / "wal"
    wal.mkdir(mode=0o700)
    env = environment(wal, LD_PRELOAD=str(moeft_lib), MOEFT_DISABLE="1")
    run = harness(tmp_path, env, RECORD, steps=40, finish=True)
    assert run.rc == 0, run.output
    assert run.output.count("moeft: recording nothing: moeft_instrumenting() is 0") == 2
    assert run.output.count("moeft: ") == 2
    steps = run.steps()
    assert not any(r["commit"] or r["loads"] for r in steps.values())
    assert run.handshake() is None
    assert list(wal.iterdir()) == []
    end = next(r for r in run.trace if "generated" in r)
    assert end["unfinished"] == []
    assert {rid: len(t) for rid, t in end["generated"].items()} == {"a": 20, "b": 30, "c": 2}
