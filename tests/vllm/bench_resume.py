"""Resuming with moeft against a plain restart, measured in one run
(stdlib only): what the restarted server computes again per request, and
the time from its first health to each request's first resumed token.

    bench_resume.py MOEFT LIBMOEFT MODEL_DIR [MAX_TOKENS [AFTER]]

Twice, under `moeft run --gateway` (logs in a fresh directory): a vLLM
server with moeft's KV connector, then the same server without it (a
plain restart: nothing restored, the gateway's resent prompts computed
whole).  Each time 8 streaming clients (e2e.py's prompts, MAX_TOKENS 850)
go through the gateway, and the server's process group is killed with
SIGKILL once they have AFTER (120) tokens; moeft run restarts it, and the
gateway's "went on" lines say, per request, the prompt sent again, how
much of it the server had cached, and when its first token came after
the server's health.  Run in the environment of tools/setup.sh --vllm,
with e2e.sh's variables (tests/vllm/README.md).
"""

from __future__ import annotations

import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from e2e import cmd_prompts, free_port, say, server_argv, wait_health
from gateway import cmd_clients

KV_CONFIG = ('{"kv_connector":"MoeftConnector","kv_connector_module_path":"moeft.vllm",'
             '"kv_role":"kv_both"}')
LINE = re.compile(r"went on after 1 server failure: (\d+) prompt tokens sent again, (\d+) "
                  r"of them cached; its first token ([0-9.]+) s after the server's health")


def one(moeft: str, lib: str, model: str, work: Path, name: str, connector: bool,
        max_tokens: str, after: str) -> list[tuple[int, int, float]]:
    port, gport = free_port(), free_port()
    server = server_argv(model, port, 256, "--enable-prompt-tokens-details")
    if connector:
        server += ["--kv-transfer-config", KV_CONFIG]
    log = work / f"{name}.log"
    wal = Path(tempfile.mkdtemp(prefix="moeft-bench-resume.", dir="/dev/shm"))
    run = subprocess.Popen([moeft, "run", "--wal", str(wal), "--preload", lib, "--gateway",
                            f"127.0.0.1:{gport}", "--", *server],
                           stdout=log.open("w"), stderr=subprocess.STDOUT,
                           start_new_session=True)
    try:
        wait_health(f"http://127.0.0.1:{gport}", 400)
        cmd_clients(f"http://127.0.0.1:{gport}", str(work / "prompts.json"), max_tokens,
                    str(work / f"{name}.json"), after, str(run.pid), "1")
    finally:
        run.send_signal(signal.SIGTERM)
        run.wait(120)
        shutil.rmtree(wal, ignore_errors=True)
    return [(int(a), int(b), float(c)) for a, b, c in LINE.findall(log.read_text())]


def main(argv: list[str]) -> None:
    moeft, lib, model = argv[:3]
    max_tokens = argv[3] if len(argv) > 3 else "850"
    after = argv[4] if len(argv) > 4 else "120"
    work = Path(tempfile.mkdtemp(prefix="moeft-bench-resume."))
    cmd_prompts(str(work / "prompts.json"), "8")
    rows = {}
    for name, connector in (("moeft", True), ("plain", False)):
        went = one(moeft, lib, model, work, name, connector, max_tokens, after)
        if len(went) != 8:
            sys.exit(f"bench_resume: {name}: {len(went)} requests went on, not 8 "
                     f"({work}/{name}.log)")
        computed = sorted(sent - cached for sent, cached, _ in went)
        first = sorted(f for _, _, f in went)
        rows[name] = (computed, first)
        say(f"{name}: prompt tokens computed again per request {computed}; first resumed "
            f"token after the server's health: median {statistics.median(first):.3f} s, "
            f"max {first[-1]:.3f} s")
    m, p = rows["moeft"], rows["plain"]
    say(f"moeft/plain: tokens computed again {sum(m[0])}/{sum(p[0])}; first token median "
        f"{statistics.median(m[1]):.3f}/{statistics.median(p[1]):.3f} s")
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main(sys.argv[1:])
