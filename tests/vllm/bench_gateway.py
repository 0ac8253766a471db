"""The gateway's cost: streams through `moeft gateway` against the server
directly, measured in one run (stdlib only).

    bench_gateway.py MOEFT MODEL_DIR [STREAMS [MAX_TOKENS [ROUNDS]]]

Starts a vLLM server on the model (no preload: the gateway's own cost is
measured) and `moeft gateway` in front of it, then ROUNDS (5) times, in
turn, STREAMS (64) concurrent greedy streaming completions of MAX_TOKENS
(256) tokens each, straight to the server and through the gateway (which
goes first alternates, so that a drift of the machine's speed falls on
both alike).  Prints
per path the tokens per second of the whole batch and the gap between a
stream's tokens as its client saw them (p50, p99), the ratios, and the
gateway's own CPU time per token streamed through it.  Run
in the environment of tools/setup.sh --vllm, with e2e.sh's variables:
    VLLM_TARGET_DEVICE=cpu VLLM_CPU_KVCACHE_SPACE=1 HF_HUB_OFFLINE=1 \\
    $(tools/setup.sh --vllm-env)/bin/python tests/vllm/bench_gateway.py \\
        build/tools/moeft ~/.cache/moeft/tiny-moe
"""

from __future__ import annotations

import json
import os
import signal
import statistics
import subprocess
import sys
import threading
import time

from e2e import body_for, conn, free_port, model_name, server_argv, wait_health


def batch(url: str, model: str, streams: int, max_tokens: int) -> tuple[float, list[float]]:
    """Tokens per second of the batch, and every gap between two tokens of
    a stream (seconds)."""
    gaps: list[list[float]] = [[] for _ in range(streams)]
    counts = [0] * streams

    def one(i: int) -> None:
        prompt = [(31 * i + 7 * j) % 900 + 4 for j in range(24)]
        c = conn(url, 600)
        c.request("POST", "/v1/completions",
                  json.dumps(body_for(model, prompt, max_tokens, True)),
                  {"Content-Type": "application/json"})
        r = c.getresponse()
        last = None
        for raw in r:
            line = raw.strip()
            if not line.startswith(b"data: ") or line == b"data: [DONE]":
                continue
            ev = json.loads(line[6:])
            n = sum(len(ch.get("token_ids") or []) for ch in ev.get("choices", []))
            if not n:
                continue
            t = time.monotonic()
            if last is not None:
                gaps[i].append(t - last)
            last = t
            counts[i] += n
        c.close()

    threads = [threading.Thread(target=one, args=(i,)) for i in range(streams)]
    t0 = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    secs = time.monotonic() - t0
    if min(counts) != max_tokens:
        sys.exit(f"bench_gateway: streams got {sorted(set(counts))} tokens, not {max_tokens}")
    return sum(counts) / secs, [g for s in gaps for g in s]


def cpu_s(pid: int) -> float:
    """CPU seconds (user + system) process pid has used so far."""
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def pct(xs: list[float], p: float) -> float:
    return statistics.quantiles(xs, n=100)[int(p) - 1] if len(xs) > 1 else 0.0


def main(argv: list[str]) -> None:
    moeft, model_dir = argv[0], argv[1]
    streams = int(argv[2]) if len(argv) > 2 else 64
    max_tokens = int(argv[3]) if len(argv) > 3 else 256
    rounds = int(argv[4]) if len(argv) > 4 else 5
    sp, gp = free_port(), free_port()
    server = subprocess.Popen(
        server_argv(model_dir, sp, 512, "--max-num-seqs", str(streams)),
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    gateway = subprocess.Popen([moeft, "gateway", "--listen", f"127.0.0.1:{gp}",
                                "--backend", f"http://127.0.0.1:{sp}"],
                               stderr=subprocess.DEVNULL)
    direct, through = f"http://127.0.0.1:{sp}", f"http://127.0.0.1:{gp}"
    try:
        wait_health(direct, 400)
        wait_health(through, 30)
        model = model_name(direct)
        batch(direct, model, streams, 8)  # warm up
        res: dict[str, list[tuple[float, list[float]]]] = {"direct": [], "gateway": []}
        gw_cpu = gw_wall = 0.0
        for r in range(rounds):
            for path in ("direct", "gateway") if r % 2 == 0 else ("gateway", "direct"):
                if path == "direct":
                    res["direct"].append(batch(direct, model, streams, max_tokens))
                    continue
                c0, t0 = cpu_s(gateway.pid), time.monotonic()
                res["gateway"].append(batch(through, model, streams, max_tokens))
                gw_cpu += cpu_s(gateway.pid) - c0
                gw_wall += time.monotonic() - t0
        out = {}
        for k, runs in res.items():
            tps = statistics.median(r[0] for r in runs)
            gaps = [g for r in runs for g in r[1]]
            out[k] = (tps, pct(gaps, 50) * 1e3, pct(gaps, 99) * 1e3)
            print(f"{k:8s} {streams} streams x {max_tokens} tokens: {tps:8.1f} tokens/s "
                  f"(median of {rounds}); gap between a stream's tokens p50 "
                  f"{out[k][1]:.2f} ms, p99 {out[k][2]:.2f} ms")
        d, g = out["direct"], out["gateway"]
        print(f"gateway/direct: tokens/s {g[0] / d[0]:.3f}; added gap per token p50 "
              f"{g[1] - d[1]:+.2f} ms, p99 {g[2] - d[2]:+.2f} ms")
        print(f"gateway CPU: {gw_cpu / (rounds * streams * max_tokens) * 1e6:.1f} us per token, "
              f"{gw_cpu / gw_wall * 100:.1f}% of one core while streaming "
              f"(of {os.cpu_count()} cores)")
    finally:
        gateway.send_signal(signal.SIGTERM)
        gateway.wait(30)
        # SIGTERM: vLLM shuts down and removes its shared memory files.
        os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait(30)


if __name__ == "__main__":
    main(sys.argv[1:])
