"""The Python half of tests/vllm/e2e.sh: requests, kills, checks (stdlib only).

    e2e.py port
    e2e.py prompts OUT [N]
    e2e.py health URL PID SECONDS
    e2e.py baseline URL PROMPTS MAX_TOKENS OUT
    e2e.py crash URL PROMPTS MAX_TOKENS AFTER LEADER SHM_BEFORE OUT
    e2e.py kill-at WAL_DIR MAX_TOKENS BASELINE SERVER_LOG LEADER SHM_BEFORE PART READY
    e2e.py kill LEADER SHM_BEFORE
    e2e.py ident PID
    e2e.py shm-list OUT
    e2e.py shm-gone LEFT SERVER_LOG
    e2e.py prefix BASELINE CRASH
    e2e.py check BASELINE RESUBMIT BLOCK [DAMAGE]
    e2e.py damage MOEFT WAL_DIR MODEL_DIR BLOCKS WORK OUT

LEADER is PID@START (ident: the pid and when it started, so that a pid
reused since is never taken for the server's).  A server is the process
that setsid started, every process of its process group or session, and
every descendant of those (vLLM's process titles overwrite their
environments, so no variable can mark them).
Killing one: SIGSTOP to each (the moment of the crash), then SIGKILL to
each, until none is left, then the psm_* files in
/dev/shm that its processes mapped or held open just before, that were not
there before it started (SHM_BEFORE) and that no live process maps or holds
open now are removed, and so are multiprocessing's semaphores (sem.mp-*)
by the same rule; the others are left.
"""

from __future__ import annotations

import http.client
import json
import os
import re
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, NoReturn
from urllib.parse import urlsplit

SHM = Path("/dev/shm")


def say(msg: str) -> None:
    print(f"e2e: {msg}", flush=True)


def fail(msg: str) -> NoReturn:
    print(f"e2e: {msg}", file=sys.stderr, flush=True)
    sys.exit(1)


# --- HTTP ---------------------------------------------------------------

def conn(url: str, timeout: float) -> http.client.HTTPConnection:
    u = urlsplit(url)
    return http.client.HTTPConnection(u.hostname or "127.0.0.1", u.port or 80, timeout=timeout)


def get(url: str, path: str, timeout: float = 5) -> tuple[int, bytes]:
    c = conn(url, timeout)
    try:
        c.request("GET", path)
        r = c.getresponse()
        return r.status, r.read()
    finally:
        c.close()


def model_name(url: str) -> str:
    status, body = get(url, "/v1/models", 30)
    if status != 200:
        fail(f"GET /v1/models: HTTP {status}")
    return str(json.loads(body)["data"][0]["id"])


def body_for(model: str, prompt: list[int], max_tokens: int, stream: bool) -> dict[str, Any]:
    b: dict[str, Any] = {"model": model, "prompt": prompt, "max_tokens": max_tokens,
                         "temperature": 0, "ignore_eos": True, "return_token_ids": True}
    if stream:
        b["stream"] = True
        b["stream_options"] = {"include_usage": True}
    return b


def post(url: str, body: dict[str, Any], timeout: float,
         path: str = "/v1/completions") -> http.client.HTTPResponse:
    c = conn(url, timeout)
    c.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
    return c.getresponse()


# --- processes ----------------------------------------------------------

def stat(pid: int) -> tuple[str, int, int, int] | None:
    """State, parent, process group and session of pid; None when gone."""
    try:
        st = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    f = st[st.rindex(")") + 2:].split()
    return f[0], int(f[1]), int(f[2]), int(f[3])


def started(pid: int) -> int:
    """When pid started (clock ticks since boot); 0 when there is no pid."""
    try:
        st = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return 0
    return int(st[st.rindex(")") + 2:].split()[19])


def cmd_ident(pid: str) -> None:
    """PID@START, what the kills below take: a pid reused since is left alone."""
    print(f"{pid}@{started(int(pid))}")


def server_pids(leader: int) -> list[int]:
    """Live processes of the server whose process group (and session) setsid
    made for leader: those still in it, and its descendants, which vLLM's
    process titles would hide from a look at their environments."""
    procs = {}
    for p in Path("/proc").iterdir():
        if p.name.isdigit() and (s := stat(int(p.name))) and s[0] != "Z":
            procs[int(p.name)] = s
    found = {pid for pid, s in procs.items() if leader in (s[2], s[3])}
    if leader in procs:
        found.add(leader)
    grew = True
    while grew:
        grew = False
        for pid, s in procs.items():
            if s[1] in found and pid not in found:
                found.add(pid)
                grew = True
    found.discard(os.getpid())
    return sorted(found)


# What a killed vLLM leaves in /dev/shm: torch's shared memory (psm_*,
# hundreds of MiB) and multiprocessing's semaphores (sem.mp-*).
LEFT = re.compile(r"/dev/shm/((?:psm_|sem\.mp-)[^/\s]+)")


def shm_psm() -> set[str]:
    return {p.name for p in SHM.iterdir() if LEFT.fullmatch(str(p))}


def shm_in_use(pids: list[int] | None = None) -> set[str]:
    """Those names that a live process (of pids, or any) maps or holds open."""
    used: set[str] = set()
    for p in Path("/proc").iterdir() if pids is None else (Path(f"/proc/{i}") for i in pids):
        if not p.name.isdigit():
            continue
        try:
            used.update(LEFT.findall((p / "maps").read_text()))
            for fd in (p / "fd").iterdir():
                m = LEFT.match(os.readlink(fd))
                if m:
                    used.add(m.group(1))
        except OSError:
            continue
    return used


def kill_server(ident: str, shm_before: Path) -> None:
    """Kill the server that ident (PID@START, cmd_ident) names, unless that
    pid is another process's by now.  With E2E_LEAVE_SHM=FILE in the
    environment, the files it would remove from /dev/shm are left there
    for moeft restore to remove, and their names written to FILE."""
    t0 = time.monotonic()
    leader, _, start = ident.partition("@")
    if (now := started(int(leader))) and now != int(start or 0):
        say(f"pid {leader} is no longer the server's (another process has it): not killed")
        return
    # Stopped first, in one call: the crash is this moment.  Reading a busy
    # server's /proc/PID/maps took up to 5 s, which the requests ran on.
    try:
        os.killpg(int(leader), signal.SIGSTOP)
    except ProcessLookupError:
        pass
    for pid in server_pids(int(leader)):
        try:
            os.kill(pid, signal.SIGSTOP)
        except ProcessLookupError:
            pass
    # What the server's processes use in /dev/shm, read before the kill: only
    # those are its to remove (another server on the machine may be passing
    # a semaphore between its processes that no process holds right then).
    theirs = shm_in_use(server_pids(int(leader)))
    # The group first, in one call: the kill lands before anything else;
    # then whatever of the server is still alive, in the group or not.
    try:
        os.killpg(int(leader), signal.SIGKILL)
        group = True
    except ProcessLookupError:
        group = False
    outside: set[int] = set()
    deadline = time.monotonic() + 20
    while (left := server_pids(int(leader))) and time.monotonic() < deadline:
        for pid in left:
            st = stat(pid)
            if st and st[2] != int(leader):
                outside.add(pid)
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.05)
    if left:
        fail(f"processes of the server still alive 20 s after SIGKILL: {left}")
    before = set(shm_before.read_text().split()) if shm_before.exists() else set()
    new = (shm_psm() - before) & theirs
    used = shm_in_use()
    leave = os.environ.get("E2E_LEAVE_SHM")
    gone, kept, freed = [], [], 0
    for name in sorted(new):
        if name in used:
            kept.append(name)
            continue
        if leave:
            gone.append(name)
            continue
        try:
            f = SHM / name
            freed += f.stat().st_size
            f.unlink()
            gone.append(name)
        except FileNotFoundError:
            pass
    if leave:
        Path(leave).write_text("".join(f"{name}\n" for name in gone))
    say(f"killed the server (process group {leader}"
        + ("" if group else ", gone already")
        + (f", and {len(outside)} processes outside it" if outside else "")
        + f"; {time.monotonic() - t0:.1f} s); "
        + (f"left {len(gone)} files it left in /dev/shm to moeft restore" if leave else
           f"removed {len(gone)} files it left in /dev/shm ({freed >> 20} MiB)")
        + (f"; kept {len(kept)} a live process uses" if kept else ""))


# --- subcommands --------------------------------------------------------

def urgent() -> None:
    """Ahead of the server for the CPU where allowed (root): a kill that
    waits for a CPU lands late."""
    try:
        os.setpriority(os.PRIO_PROCESS, 0, -10)
    except OSError:
        pass


def free_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = int(s.getsockname()[1])
    s.close()
    return port


def cmd_port() -> None:
    print(free_port())


def wait_health(url: str, seconds: float) -> None:
    """Until url's /health answers 200; the caller's exit after seconds."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < seconds:
        try:
            if get(url, "/health", 2)[0] == 200:
                return
        except OSError:
            pass
        time.sleep(0.5)
    fail(f"{url}: no /health 200 within {seconds} s")


def server_argv(model: str, port: int, blocks: int, *extra: str) -> list[str]:
    """e2e.sh's server, for the benchmarks in Python (tests/vllm/README.md)."""
    return [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", model,
            "--port", str(port), "--dtype", "float32", "--enforce-eager", "--block-size",
            "32", "--seed", "0", "--num-gpu-blocks-override", str(blocks),
            "--max-model-len", "2048", *extra]


def cmd_prompts(out: str, n: str = "4") -> None:
    """N (4) prompts of token ids, 41 to 31 + 10 N tokens, distinct from their
    first token on (no shared prefix block); ids 4..993 (no special token)."""
    prompts = [[(97 * i + 13 * j * (i + 1) + 7) % 990 + 4 for j in range(41 + 10 * i)]
               for i in range(int(n))]
    Path(out).write_text(json.dumps(prompts))


def cmd_health(url: str, pid: str, seconds: str) -> None:
    t0 = time.monotonic()
    while time.monotonic() - t0 < float(seconds):
        if (st := stat(int(pid))) is None or st[0] == "Z":
            fail(f"the server (pid {pid}) exited before /health answered")
        try:
            if get(url, "/health", 2)[0] == 200:
                say(f"server healthy after {time.monotonic() - t0:.0f} s")
                return
        except OSError:
            pass
        time.sleep(0.5)
    fail(f"no /health 200 within {seconds} s")


def cmd_baseline(url: str, prompts_file: str, max_tokens: str, out: str) -> None:
    prompts = json.loads(Path(prompts_file).read_text())
    model = model_name(url)
    got: dict[int, Any] = {}

    def one(i: int) -> None:
        try:
            r = post(url, body_for(model, prompts[i], int(max_tokens), False), 600)
            got[i] = json.loads(r.read())
        except Exception as e:  # reported below
            got[i] = {"error": repr(e)}

    t0 = time.monotonic()
    threads = [threading.Thread(target=one, args=(i,)) for i in range(len(prompts))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    secs = time.monotonic() - t0
    tokens = []
    for i in range(len(prompts)):
        ch = got[i].get("choices") or [{}]
        if ch[0].get("prompt_token_ids") != prompts[i] or \
                len(ch[0].get("token_ids") or []) != int(max_tokens):
            fail(f"baseline request {i}: unexpected answer {str(got[i])[:400]}")
        tokens.append(ch[0]["token_ids"])
    step_ms = 1000 * secs / int(max_tokens)
    Path(out).write_text(json.dumps({"prompts": prompts, "tokens": tokens, "step_ms": step_ms}))
    n = len(prompts) * int(max_tokens)
    say(f"baseline: {len(prompts)} concurrent requests, {n} tokens in {secs:.1f} s "
        f"({step_ms:.1f} ms per decode step of the batch); "
        f"distinct tokens per request {[len(set(t)) for t in tokens]}")


def cmd_crash(url: str, prompts_file: str, max_tokens: str, after: str, leader: str,
              shm_before: str, out: str) -> None:
    """Stream the requests; once each has AFTER tokens, kill the server."""
    prompts = json.loads(Path(prompts_file).read_text())
    model = model_name(url)
    seen: list[list[int]] = [[] for _ in prompts]
    ended: list[str | None] = [None for _ in prompts]
    killed = threading.Event()
    urgent()

    def one(i: int) -> None:
        try:
            r = post(url, body_for(model, prompts[i], int(max_tokens), True), 600)
            for raw in r:
                line = raw.strip()
                if not line.startswith(b"data: ") or line == b"data: [DONE]":
                    continue
                for ch in json.loads(line[6:]).get("choices", []):
                    seen[i].extend(ch.get("token_ids") or [])
                    if ch.get("finish_reason"):
                        ended[i] = f"finished ({ch['finish_reason']})"
            ended[i] = ended[i] or "stream ended"
        except Exception as e:
            ended[i] = "cut" if killed.is_set() else f"error {e!r}"

    threads = [threading.Thread(target=one, args=(i,), daemon=True) for i in range(len(prompts))]
    t0 = time.monotonic()
    for t in threads:
        t.start()
    while min(len(s) for s in seen) < int(after):
        if any(e is not None for e in ended) or time.monotonic() - t0 > 300:
            kill_server(leader, Path(shm_before))
            fail(f"a request ended before the kill: {ended}, tokens {[len(s) for s in seen]}")
        time.sleep(0.005)
    killed.set()
    at = [len(s) for s in seen]
    kill_server(leader, Path(shm_before))
    for t in threads:
        t.join(10)
    say(f"killed the server {time.monotonic() - t0:.1f} s into the requests, their tokens "
        f"seen by then {at}, by the end of their streams {[len(s) for s in seen]}; "
        f"streams: {ended}")
    Path(out).write_text(json.dumps({"prompts": prompts, "tokens": seen}))
    done = [i for i, e in enumerate(ended) if e and e.startswith("finished")]
    if done:
        fail(f"requests {done} finished before the kill took effect: no crash mid-decode "
             "(a machine too busy?)")


def cmd_kill_at(wal: str, max_tokens: str, baseline_file: str, log: str, leader: str,
                shm_before: str, part: str, ready: str) -> None:
    """Kill the restored server about 1/PART of the way through what its
    restored requests (in WAL.restore, the restore's directory) had left:
    once the server's LOG says the connector resumed each of them (its
    "moeft: resumed request" lines, when their decode begins), after
    1/PART of the steps left at the baseline's time per step.  vLLM serves
    no finer progress signal (its /metrics answers only once the batch is
    done on 2 cores), and a clock started earlier measured the server's
    start-up too.  Creates READY once it watches: the caller starts the
    requests then (a Python started while the server decodes on both CPUs
    took seconds to begin).  The caller checks that the requests were still
    running."""
    restored = Path(wal + ".restore")
    left = []
    for f in restored.glob("*/requests"):
        left += [int(max_tokens) - (len(r["tokens"]) - r["prompt"])
                 for r in parse_requests(f.read_bytes())]
    if not left or min(left) < 96:
        kill_server(leader, Path(shm_before))
        fail(f"the restored requests ({restored}) have {left} tokens left to decode: "
             "too few to crash in between")
    urgent()
    Path(ready).touch()
    t0 = time.monotonic()
    while Path(log).read_text(errors="replace").count("moeft: resumed request") < len(left):
        if time.monotonic() - t0 > 120:
            kill_server(leader, Path(shm_before))
            fail(f"{log} does not say that the {len(left)} restored requests resumed")
        time.sleep(0.002)
    step_ms = float(json.loads(Path(baseline_file).read_text())["step_ms"])
    delay = min(left) * step_ms / 1000 / int(part)
    time.sleep(delay)
    kill_server(leader, Path(shm_before))
    say(f"killed the server {delay:.2f} s after its log said the requests resumed (1/{part} "
        f"of {min(left)} steps at the baseline's {step_ms:.1f} ms; tokens left at the "
        f"restored window {left})")


def cmd_check(baseline_file: str, resubmit_file: str, block: str, damage_file: str = "") -> None:
    base = json.loads(Path(baseline_file).read_text())
    try:
        res = json.loads(Path(resubmit_file).read_text())
    except (OSError, ValueError) as e:
        fail(f"moeft resubmit's output is no JSON: {e}")
    if not isinstance(res, list):
        fail("moeft resubmit's output is no JSON array")
    damage = json.loads(Path(damage_file).read_text()) if damage_file else None
    bad: list[str] = []
    matched: dict[int, str] = {}
    affected_seen = 0
    for r in res:
        rid, p, t = r.get("id"), r.get("prompt_token_ids"), r.get("token_ids")
        resumed, cached = r.get("resumed_from"), r.get("cached_tokens")
        if not (isinstance(p, list) and isinstance(t, list) and isinstance(resumed, int)
                and isinstance(cached, int)):
            bad.append(f"{rid}: missing or mistyped fields in {str(r)[:300]}")
            continue
        seq = p + t
        which = [i for i, bp in enumerate(base["prompts"]) if seq[:len(bp)] == bp]
        if len(which) != 1:
            bad.append(f"{rid}: its prompt matches {len(which)} of the baseline's prompts")
            continue
        i = which[0]
        if i in matched:
            bad.append(f"{rid}: baseline request {i} already answered by {matched[i]}")
        matched[i] = str(rid)
        want = base["prompts"][i] + base["tokens"][i]
        same = seq == want
        if not same:
            k = next((k for k in range(min(len(seq), len(want))) if seq[k] != want[k]),
                     min(len(seq), len(want)))
            bad.append(f"{rid}: tokens differ from the baseline's at position {k} of "
                       f"prompt+tokens ({len(seq)} vs {len(want)} long)")
        full = len(p) + resumed - int(block)
        note = f"cached >= {full}"
        if damage and str(i) in damage["affected"]:
            bound = damage["affected"][str(i)] * int(block)
            affected_seen += 1
            note = f"damaged: cached <= {bound}"
            if cached > bound:
                bad.append(f"{rid}: {cached} tokens cached, but block "
                           f"{damage['affected'][str(i)]} of it was damaged (at most {bound})")
        elif cached < full:
            bad.append(f"{rid}: {cached} tokens cached, fewer than prompt {len(p)} + resumed "
                       f"{resumed} - one block")
        say(f"  request {rid} (baseline {i}): prompt {len(p)}, resumed from {resumed}, "
            f"cached {cached} ({note}), {len(t)} tokens, {'equal' if same else 'DIFFERENT'}")
    missing = sorted(set(range(len(base["prompts"]))) - set(matched))
    if missing:
        bad.append(f"no result for baseline requests {missing} (all were in flight)")
    if damage and not affected_seen:
        bad.append("no result is of the request whose KV was damaged")
    if bad:
        fail("check failed:\n  " + "\n  ".join(bad))
    say(f"all {len(res)} requests equal the baseline")


def cmd_prefix(baseline_file: str, crash_file: str) -> None:
    """The tokens streamed before the kill are the baseline's first ones."""
    b, c = (json.loads(Path(f).read_text()) for f in (baseline_file, crash_file))
    bad = [i for i, t in enumerate(c["tokens"]) if t != b["tokens"][i][:len(t)]]
    if bad:
        fail(f"the tokens streamed before the kill differ from the baseline's: requests {bad}")
    say("the tokens streamed before the kill equal the baseline's")


def cmd_shm_list(out: str) -> None:
    Path(out).write_text("\n".join(sorted(shm_psm())) + "\n")


def cmd_shm_gone(left_file: str, server_log: str) -> None:
    """moeft restore removed every file a killed server left in /dev/shm
    (left_file, from E2E_LEAVE_SHM), and said so in server_log."""
    left = Path(left_file).read_text().split()
    if not left:
        fail(f"{left_file}: the killed server left nothing in /dev/shm to remove")
    there = [n for n in left if (SHM / n).exists()]
    said = re.findall(r"^moeft restore: removed (\d+) files? \(.*\) the server's processes "
                      r"left in /dev/shm$", Path(server_log).read_text(), re.M)
    if there:
        fail(f"moeft restore left {len(there)} of the {len(left)} files: {there[:4]}")
    if len(said) != 1 or int(said[0]) < len(left):
        fail(f"moeft restore said it removed {said or 'nothing'}, want at least {len(left)}")
    say(f"moeft restore removed all {len(left)} files the killed server left in /dev/shm "
        f"(it said {said[0]})")


# --- damage -------------------------------------------------------------

def parse_requests(buf: bytes) -> list[dict[str, Any]]:
    """The REQUEST payloads of a restore's `requests` file (preload/reqindex.h)."""
    if buf[:8] != b"MOEFTRQ1":
        fail("requests: bad magic")
    (n,) = struct.unpack_from("<I", buf, 40)
    off, reqs = 48, []
    for _ in range(n):
        (ln,) = struct.unpack_from("<I", buf, off)
        p = buf[off + 4: off + 4 + ln]
        off += 4 + ln + (-ln % 4)
        step, ntok, nprompt, ncomp, bt, idlen, groups = struct.unpack_from("<QIIIIBB", p, 0)
        q = 32
        rid = p[q:q + idlen].decode()
        q += idlen + (-idlen % 4)
        counts = struct.unpack_from(f"<{groups}I", p, q)
        q += 4 * groups
        toks = list(struct.unpack_from(f"<{ntok}I", p, q))
        q += 4 * ntok
        blocks = list(struct.unpack_from(f"<{counts[0]}I", p, q))
        reqs.append({"id": rid, "tokens": toks, "prompt": nprompt, "computed": ncomp,
                     "block_tokens": bt, "blocks": blocks})
    return reqs


def offline_restore(moeft: str, wal: str, out: Path) -> tuple[int, str]:
    r = subprocess.run([moeft, "restore", "--wal", wal, "--out", str(out), "--json"],
                       capture_output=True, text=True)
    return r.returncode, r.stdout + r.stderr


def cmd_damage(moeft: str, wal: str, model_dir: str, nblocks: str, work: str, out: str) -> None:
    """Flip a bit in both store copies of the KV chunk that holds layer 0 of
    the middle block of the longest restored request; say which requests'
    blocks the chunk covers, and check that a restore now finds it lost."""
    cfg = json.loads((Path(model_dir) / "config.json").read_text())
    before = Path(work) / "damage-before"
    rc, text = offline_restore(moeft, wal, before)
    if rc != 0:
        fail(f"moeft restore --out (before the damage) exited {rc}:\n{text}")
    sched, pools = None, []
    for d in sorted(before.iterdir()):
        man = d / "manifest.json"
        if not man.is_file():
            continue
        m = json.loads(man.read_text())
        if (d / "requests").is_file():
            sched = d
        for p in m.get("kv_pools") or []:
            pools.append((d.name, m["log"]["path"], p))
    if sched is None or len(pools) != 1:
        fail(f"expected one log with requests and one KV pool under {wal}; got "
             f"scheduler {sched}, pools {[(n, p['pool']) for n, _, p in pools]}")
    name, log_path, pool = pools[0]
    reqs = parse_requests((sched / "requests").read_bytes())
    bt = reqs[0]["block_tokens"]
    block_bytes = 2 * cfg["num_key_value_heads"] * bt * cfg["head_dim"] * 4
    layers = cfg["num_hidden_layers"]
    if pool["size"] != layers * int(nblocks) * block_bytes:
        fail(f"KV pool of {pool['size']} bytes; expected {layers} layers x {nblocks} blocks "
             f"x {block_bytes} bytes (the layout python/VLLM.md gives)")
    cb = pool["chunk_bytes"]
    x = max(reqs, key=lambda r: len(r["blocks"]))
    k = len(x["blocks"]) // 2
    chunk = x["blocks"][k] * block_bytes // cb

    store = Path(log_path + ".kv")
    data = bytearray(store.read_bytes())
    if data[:8] != b"MOEFTKVS":
        fail(f"{store}: no KV store")
    entry = 4096 + 64 * pool["pool"]
    word, _, size, ecb, _, num, chunks, region = struct.unpack_from("<QQQQIIQQ", data, entry)
    if word != 0x50564B5446454F4D or size != pool["size"] or ecb != cb:
        fail(f"{store}: pool table entry {pool['pool']} is not the manifest's pool")
    dstart = region + (2 * chunks * 32 + 4095) // 4096 * 4096
    flipped = []
    with open(store, "r+b") as f:
        for slot in (0, 1):
            hdr = region + (2 * chunk + slot) * 32
            (ww,) = struct.unpack_from("<Q", data, hdr)
            if ww == 0:
                continue
            at = dstart + (2 * chunk + slot) * cb + cb // 2
            f.seek(at)
            f.write(bytes([data[at] ^ 0x10]))
            flipped.append(at)
    if not flipped:
        fail(f"chunk {chunk} of pool {pool['pool']} has no copy in {store}")

    lo, hi = chunk * cb, (chunk + 1) * cb
    affected: dict[str, int] = {}
    base_prompts = json.loads((Path(work) / "prompts.json").read_text())
    for r in reqs:
        hit = [j for j, b in enumerate(r["blocks"])
               if b * block_bytes < hi and (b + 1) * block_bytes > lo]
        if hit:
            prompt = r["tokens"][:r["prompt"]]
            i = next((i for i, bp in enumerate(base_prompts) if prompt[:len(bp)] == bp), None)
            if i is None:
                fail(f"restored request {r['id']} matches no prompt of the test")
            affected[str(i)] = hit[0]
    after = Path(work) / "damage-after"
    rc, text = offline_restore(moeft, wal, after)
    lost = json.loads((after / name / "manifest.json").read_text())["kv_pools"][0]["lost_chunks"]
    if chunk not in lost:
        fail(f"after flipping bits at store offsets {flipped}, a restore does not find "
             f"chunk {chunk} lost (exit {rc}, lost {lost}):\n{text}")
    Path(out).write_text(json.dumps({"store": str(store), "pool": pool["pool"],
                                     "chunk": chunk, "chunk_bytes": cb, "offsets": flipped,
                                     "request": x["id"], "block_index": k,
                                     "affected": affected}))
    say(f"damaged KV chunk {chunk} ({cb} bytes; layer 0 of block {x['blocks'][k]}, block "
        f"index {k} of request {x['id']}) in {store}: {len(flipped)} copies; an offline "
        f"restore now exits {rc} and lists it lost; baseline requests affected (first "
        f"damaged block): {affected}")


def main(argv: list[str]) -> None:
    cmds = {"port": cmd_port, "prompts": cmd_prompts, "health": cmd_health,
            "baseline": cmd_baseline, "crash": cmd_crash, "kill-at": cmd_kill_at,
            "kill": lambda leader, shm: kill_server(leader, Path(shm)), "shm-list": cmd_shm_list,
            "shm-gone": cmd_shm_gone,
            "prefix": cmd_prefix, "ident": cmd_ident,
            "check": cmd_check, "damage": cmd_damage}
    if not argv or argv[0] not in cmds:
        fail(f"usage: e2e.py {'|'.join(cmds)} ARGS (see the docstring)")
    cmds[argv[0]](*argv[1:])  # type: ignore[operator]


if __name__ == "__main__":
    main(sys.argv[1:])
