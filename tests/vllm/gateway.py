"""The `moeft run --gateway` phase of tests/vllm/e2e.sh (stdlib only).

    gateway.py clients GATEWAY_URL PROMPTS MAX_TOKENS OUT [AFTER RUN_PID KILLS]
    gateway.py check BASELINE GOT RUN_LOG BLOCK WINDOW KILLS
    gateway.py stopped LEADER SHM_BEFORE SECONDS

clients: one streaming client per prompt through the gateway, all at once,
every other one a chat (its message the prompt's ids as words "w<id>");
with KILLS, the server that moeft run (RUN_PID) supervises is killed with
SIGKILL to its process group KILLS times: the first once a client has
AFTER tokens, each next once moeft run has started the server again and a
client has AFTER more.  The leading client, not all: the server does not
always start them together, and on 2 cores the clients see tokens up to
seconds after the server made them, so a kill aimed at the last one came
after the end.  OUT: per client its HTTP status,
request id, token ids, text, error events, SSE comment lines and its
tokens at each kill (None: it had ended).
check: every client of GOT got status 200, no error, and exactly
BASELINE's tokens and text; of each client that had tokens at the first
kill, moeft run's log (RUN_LOG, where the gateway writes) says that its
request went on after as many failures as kills it lived through, the
restarted server having all of the prompt sent again cached but what the
last window, two blocks and a token may leave out; and at least one
client lived through every kill.
stopped: after SIGTERM to moeft run (the LEADER of its session), nothing
of it is left within SECONDS, nor any new torch or Python shared memory
(psm_*, hundreds of MiB a crash) in /dev/shm.  vLLM's own shutdown leaves
a few of multiprocessing's 32-byte semaphores (sem.mp-*), with moeft or
without: those are counted, not failed.
"""

from __future__ import annotations

import json
import os
import re
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

from e2e import (body_for, fail, get, model_name, post, say, server_pids, shm_in_use,
                 shm_psm, stat, urgent)


def server_child(run_pid: int) -> int:
    """moeft run's child that leads a process group and is not its gateway:
    the server (or the restore about to become it); 0 when there is none."""
    kids = Path(f"/proc/{run_pid}/task/{run_pid}/children").read_text().split()
    for pid in map(int, kids):
        try:
            gateway = b"gateway" in Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if (st := stat(pid)) and st[2] == pid and not gateway:
            return pid
    return 0


def prioritize_gateway(run_pid: int) -> None:
    """The gateway moeft run started, ahead of the server for the CPU
    (root only), as the clients are (e2e.urgent): on 2 cores a busy server
    starved it, and the clients then saw tokens seconds after the server
    made them, so a kill aimed by what they saw landed after the end.  Each
    thread has its own nice value; those the gateway starts inherit it."""
    kids = Path(f"/proc/{run_pid}/task/{run_pid}/children").read_text().split()
    for pid in kids:
        try:
            if b"gateway" not in Path(f"/proc/{pid}/cmdline").read_bytes():
                continue
            for task in Path(f"/proc/{pid}/task").iterdir():
                os.setpriority(os.PRIO_PROCESS, int(task.name), -10)
        except OSError:
            pass


def cmd_clients(url: str, prompts_file: str, max_tokens: str, out: str, after: str = "0",
                run_pid: str = "0", kills: str = "0") -> None:
    prompts = json.loads(Path(prompts_file).read_text())
    model = model_name(url)
    res: list[dict[str, Any]] = [{"status": None, "id": None, "tokens": [], "text": "",
                                  "errors": [], "comments": 0, "at_kills": []}
                                 for _ in prompts]
    ended = [False for _ in prompts]

    def one(i: int) -> None:
        r = res[i]
        chat = i % 2 == 1
        body = body_for(model, prompts[i], int(max_tokens), True)
        if chat:
            body["messages"] = [{"role": "user", "content": " ".join(f"w{t}" for t in
                                                                     body.pop("prompt"))}]
        try:
            resp = post(url, body, 900, "/v1/chat/completions" if chat else "/v1/completions")
            r["status"] = resp.status
            if resp.status != 200:
                r["errors"].append(resp.read().decode(errors="replace")[:300])
                return
            done = False
            for raw in resp:
                line = raw.strip()
                done = done or line == b"data: [DONE]"
                if line.startswith(b":"):
                    r["comments"] += 1
                if not line.startswith(b"data: ") or line == b"data: [DONE]":
                    continue
                ev = json.loads(line[6:])
                r["id"] = r["id"] or ev.get("id")
                if "error" in ev:
                    r["errors"].append(ev["error"])
                for ch in ev.get("choices", []):
                    r["tokens"].extend(ch.get("token_ids") or [])
                    if chat:
                        r["text"] += (ch.get("delta") or {}).get("content") or ""
                    else:
                        r["text"] += ch.get("text") or ""
            if not done:
                r["errors"].append("the stream ended without [DONE]")
        except Exception as e:  # reported in OUT, checked by check
            r["errors"].append(repr(e))
        finally:
            ended[i] = True

    urgent()
    if int(kills):
        prioritize_gateway(int(run_pid))
    threads = [threading.Thread(target=one, args=(i,), daemon=True) for i in range(len(prompts))]
    t0 = time.monotonic()
    for t in threads:
        t.start()
    killed = 0
    for k in range(1, int(kills) + 1):
        # The server moeft run started since the last kill (tokens the
        # killed one made arrive meanwhile: they are no progress of it).
        while (pid := server_child(int(run_pid))) in (0, killed):
            if time.monotonic() - t0 > 600:
                fail(f"moeft run started no server for kill {k}")
            time.sleep(0.05)
        if killed:
            while get(url, "/health", 5)[0] != 200:
                time.sleep(0.1)
        base = [len(r["tokens"]) for r in res]
        while max(len(r["tokens"]) - b for r, b in zip(res, base)) < int(after):
            if all(ended) or time.monotonic() - t0 > 600:
                fail(f"every client ended before kill {k}: tokens "
                     f"{[len(r['tokens']) for r in res]}, errors {[r['errors'] for r in res]}")
            time.sleep(0.005)
        killed = pid
        at = [None if e else len(r["tokens"]) for r, e in zip(res, ended)]
        os.killpg(pid, signal.SIGKILL)
        for r, n in zip(res, at):
            r["at_kills"].append(n)
        say(f"kill {k}: SIGKILL to the server's process group {pid} "
            f"{time.monotonic() - t0:.1f} s in, the clients' tokens {at}")
    for t in threads:
        t.join(900)
    say(f"{len(prompts)} clients done in {time.monotonic() - t0:.1f} s: tokens "
        f"{[len(r['tokens']) for r in res]}, SSE comment lines {[r['comments'] for r in res]}")
    Path(out).write_text(json.dumps(res))


def cmd_check(base_file: str, got_file: str, run_log: str, block: str, window: str,
              kills: str) -> None:
    base, got = (json.loads(Path(f).read_text()) for f in (base_file, got_file))
    bad: list[str] = []
    for i, (b, g) in enumerate(zip(base, got)):
        if g["status"] != 200 or g["errors"]:
            bad.append(f"client {i}: status {g['status']}, errors {g['errors']}")
        if g["tokens"] != b["tokens"]:
            k = next((k for k, (x, y) in enumerate(zip(g["tokens"], b["tokens"])) if x != y),
                     min(len(g["tokens"]), len(b["tokens"])))
            bad.append(f"client {i}: tokens differ from the baseline's at {k} "
                       f"({len(g['tokens'])} vs {len(b['tokens'])})")
        elif g["text"] != b["text"]:
            bad.append(f"client {i}: the same tokens, another text")
    pat = re.compile(r"^moeft gateway: request (\S+) went on after (\d+) server failures?: "
                     r"(\d+) prompt tokens sent again, (\d+) of them cached; its first token "
                     r"([0-9.]+) s after the server's health$", re.M)
    went = {m[0]: (int(m[1]), int(m[2]), int(m[3]), float(m[4]))
            for m in pat.findall(Path(run_log).read_text())}
    slack = 2 * int(block) + int(window) + 1
    through_all = 0
    for i, g in enumerate(got):
        at = g["at_kills"]
        if not at or not at[0]:
            say(f"  client {i}: no token yet at the first kill")
            continue
        lived = sum(n is not None for n in at)
        through_all += lived == int(kills)
        if g["id"] not in went:
            bad.append(f"client {i} ({g['id']}): the gateway did not say it went on")
            continue
        moves, sent, cached, first = went[g["id"]]
        say(f"  client {i}: tokens at the kills {at}; went on after {moves} failures: "
            f"{sent} prompt tokens sent again, {cached} cached (at least {sent - slack} "
            f"wanted), its first token {first:.3f} s after the server's health")
        if moves != lived:
            bad.append(f"client {i}: went on after {moves} failures, lived through {lived}")
        if cached < sent - slack:
            bad.append(f"client {i}: sent again with {sent} tokens, only {cached} cached")
    if not through_all:
        bad.append(f"no client was streaming at all {kills} kills")
    if bad:
        fail("check failed:\n  " + "\n  ".join(bad))
    say(f"all {len(got)} clients got the uninterrupted run's tokens and text")


def cmd_stopped(leader: str, shm_before: str, seconds: str) -> None:
    t0 = time.monotonic()
    while (left := server_pids(int(leader))) and time.monotonic() - t0 < float(seconds):
        time.sleep(0.1)
    if left:
        fail(f"processes left {seconds} s after SIGTERM to moeft run: {left}")
    before = set(Path(shm_before).read_text().split())
    new = shm_psm() - before - shm_in_use()
    memory = sorted(n for n in new if n.startswith("psm_"))
    if memory:
        fail(f"shared memory the server left in /dev/shm: {memory}")
    say(f"moeft run and every process of the server gone {time.monotonic() - t0:.1f} s "
        f"after SIGTERM; no shared memory of theirs left in /dev/shm (semaphores vLLM's "
        f"shutdown left: {len(new)})")


def main(argv: list[str]) -> None:
    cmds = {"clients": cmd_clients, "check": cmd_check, "stopped": cmd_stopped}
    if not argv or argv[0] not in cmds:
        fail(f"usage: gateway.py {'|'.join(cmds)} ARGS (see the docstring)")
    cmds[argv[0]](*argv[1:])  # type: ignore[operator]


if __name__ == "__main__":
    main(sys.argv[1:])
