"""The two processes of a vLLM server, for the tests that need libmoeft.so.

    python harness.py PLAN.json

runs the scheduler (process name VLLM::EngineCore, as vLLM names it), which
starts the worker (VLLM::Worker) as a child and drives it over a pipe, as
EngineCore drives its worker: the worker's connector registers the KV cache
and hands its handshake metadata up, then each engine step's
SchedulerOutput goes down and the worker's load errors come back.  Both
inherit LD_PRELOAD and MOEFT_* from the caller (or from `moeft restore`);
each keeps its own log in MOEFT_WAL, named by its process name.

PLAN.json: {"out": dir, "model": dir, "steps": N, "requests": [{"id",
"prompt", "at": harness step, "params": {SamplingParams}}...]}.  After N
harness steps both processes are SIGKILLed (the crash) unless "finish" is
true.  Into "out" go trace.jsonl (one line per engine step: what the
scheduler planned and, when a window ends, its running requests as vLLM
holds them) and the worker's KV cache bytes: window-STEP.bin after each
step that ends a window, loaded-STEP.bin right after a step's loads,
last.bin at the end.
"""

from __future__ import annotations

import json
import os
import pickle
import signal
import struct
import subprocess
import sys
from pathlib import Path
from typing import IO, Any


def set_name(name: str) -> None:
    # as vLLM's set_process_title does, before anything starts the preload:
    # the name names the log
    import setproctitle

    setproctitle.setproctitle(name)


def send(f: IO[bytes], obj: object) -> None:
    data = pickle.dumps(obj)
    f.write(struct.pack("<Q", len(data)) + data)
    f.flush()


def recv(f: IO[bytes]) -> Any:
    head = f.read(8)
    if len(head) < 8:
        raise EOFError("the other process is gone")
    return pickle.loads(f.read(struct.unpack("<Q", head)[0]))


def configure_logging() -> None:
    """As vLLM's EngineCore and Worker processes do at their start."""
    from vllm.config import LoggingConfig
    from vllm.logger import configure_logging

    configure_logging(LoggingConfig())


def worker(plan: dict[str, Any]) -> None:
    set_name("VLLM::Worker")
    from vllm_env import Shape, Worker

    configure_logging()

    up = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # stray prints must not garble the pipe
    down = sys.stdin.buffer
    out = Path(plan["out"])
    w = Worker(Path(plan["model"]), Shape())
    send(up, w.connector.get_handshake_metadata())
    while True:
        msg = recv(down)
        if msg is None:
            (out / "last.bin").write_bytes(w.kv.bytes())
            send(up, None)
            return
        so, slots, values = msg
        meta = so.kv_connector_metadata

        def dump_loaded(meta: Any = meta) -> None:
            if meta.loads:
                (out / f"loaded-{meta.step}.bin").write_bytes(w.kv.bytes())

        errors = w.step(so, slots, values, after_load=dump_loaded)
        if meta.commit:
            (out / f"window-{meta.step}.bin").write_bytes(w.kv.bytes())
        send(up, errors)


def scheduler(plan: dict[str, Any], plan_path: str) -> None:
    set_name("VLLM::EngineCore")
    child = subprocess.Popen([sys.executable, __file__, plan_path, "worker"],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert child.stdin and child.stdout
    from vllm_env import Engine, Shape

    configure_logging()
    out = Path(plan["out"])
    trace = open(out / "trace.jsonl", "w")

    def log(**rec: Any) -> None:
        trace.write(json.dumps(rec) + "\n")
        trace.flush()

    handshake = recv(child.stdout)  # the worker registered its KV cache first
    e = Engine(Path(plan["model"]), Shape())
    e.handshake({} if handshake is None else {(0, 0): handshake})
    log(handshake=None if handshake is None else vars(handshake))

    down, up = child.stdin, child.stdout

    def forward(so: Any, slots: list[int], values: list[float]) -> set[int]:
        send(down, (so, slots, values))
        return recv(up)  # type: ignore[no-any-return]

    e.run(plan["requests"], plan["steps"], forward, log)
    send(child.stdin, None)
    recv(child.stdout)
    trace.close()
    if plan.get("finish"):
        child.stdin.close()
        child.wait()
        return
    os.kill(child.pid, signal.SIGKILL)  # kill -9 of the server
    child.wait()
    os.kill(os.getpid(), signal.SIGKILL)


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).parent))
    sys.path.insert(0, str(Path(__file__).parent.parent))
    p = json.loads(Path(sys.argv[1]).read_text())
    if sys.argv[2:] == ["worker"]:
        worker(p)
    else:
        scheduler(p, sys.argv[1])
