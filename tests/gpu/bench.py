#!/usr/bin/env python3
"""bench.py - the GPU tier's figures, measured in one run, as one markdown
table headed by the GPU's name:

- decode tokens/s of moe_generate.py, eager and graph, without the preload
  (before and after the runs with it) and under it at MOEFT_WINDOW 16 and 1
  (ratio against the mean of the two without);
- log bytes per token and per decode window (moeft inspect --json; the
  windows and their steps from an offline restore's manifest);
- restore bandwidth: the preload's copy of the KV images into the restarted
  process ("moeft: restore: N bytes of KV restored in S s ...: D bytes of
  data copied (G GB/s)", the data's rate against pinned host-to-device
  copies measured here with torch) and the offline restore's write of them
  (its summary line);
- RTO with a KV cache of --kv-gib (>= 4 GiB), the prompts filling it but
  for the decode steps (--rto-prompt-len): kill -9 after --kill-after
  steps, then from `moeft restore -- CMD` starting to the resumed process's
  first token, against a restart that computes everything again (the
  uninterrupted run's start-up, prefill and decode steps up to the resume
  point), both from the timestamps moe_generate.py prints.

Usage: bench.py --moeft PATH --lib PATH [--steps N] [--kv-gib G]
       [--kill-after N] [--rto-mode eager|graph] [--skip-rto] [--timeout S]
       [--out FILE] [--logs DIR]
Exit status: 0, or 1 when a run fails or prints less than expected.
"""
import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
GEN = os.path.join(HERE, "moe_generate.py")
BATCH = 8  # sequences decoded at once, in every run
run_timeout = 300.0  # seconds one program run may take (--timeout)


class BenchError(Exception):
    pass


def run(cmd, env=None):
    """stdout and stderr of a command that must succeed."""
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=run_timeout)
    if p.returncode:
        raise BenchError("%s: exit %d: %s" % (" ".join(cmd[:4]), p.returncode,
                                              p.stderr.strip()[-2000:]))
    return p.stdout, p.stderr


def fields(text, prefix):
    """The key=value fields of the line starting with prefix."""
    for line in text.splitlines():
        if line.startswith(prefix + " "):
            return dict(f.split("=", 1) for f in line.split()[1:] if "=" in f)
    raise BenchError("no %r line in:\n%s" % (prefix, text[-2000:]))


def gen(args):
    return [sys.executable, GEN, "--batch", str(BATCH)] + args


def whole_lines(path):
    try:
        with open(path, "rb") as f:
            return f.read().count(b"\n")
    except FileNotFoundError:
        return 0


def grep(pattern, text, what):
    m = re.search(pattern, text)
    if not m:
        raise BenchError("no %s in:\n%s" % (what, text[-2000:]))
    return m


class Bench:
    def __init__(self, a):
        self.a = a
        self.dir = tempfile.mkdtemp(prefix="moeft-bench-", dir="/dev/shm")
        self.rows = []
        self.kv_bytes = None

    def row(self, measure, figure, goal=""):
        self.rows.append((measure, figure, goal))
        print("bench: %s: %s %s" % (measure, figure, goal), flush=True)

    def preload_env(self, wal, window, kv_bytes, commit="wait", block=None):
        for p in (wal, wal + ".kv"):
            if os.path.exists(p):
                os.remove(p)
        shutil.rmtree(wal + ".restore", ignore_errors=True)
        return dict(os.environ, LD_PRELOAD=os.path.abspath(self.a.lib), MOEFT_WAL=wal,
                    MOEFT_WINDOW=str(window), MOEFT_COMMIT=commit, MOEFT_PROFILE="torch",
                    MOEFT_KV="size=%d%s" % (kv_bytes, ",block=" + block if block else ""),
                    MOEFT_LOG="info")

    def generate(self, args, env=None, label=None):
        out, err = run(gen(args), env=env)
        self.keep(label, err)
        kv = fields(out, "kv")
        if kv["own-allocations"] != kv["tensors"] or kv["other-allocations"] != "0":
            raise BenchError("the KV tensors are not allocations of their own: %s" % kv)
        return out, err

    def keep(self, label, err):
        """A preload run's stderr (its settings and exit summary) into --logs."""
        if label and self.a.logs:
            os.makedirs(self.a.logs, exist_ok=True)
            with open(os.path.join(self.a.logs, label + ".err"), "w", encoding="utf-8") as f:
                f.write(err[-20000:])

    def throughput(self):
        for mode in ("eager", "graph"):
            args = ["--mode", mode, "--steps", str(self.a.steps)]
            out, _ = self.generate(args)
            self.kv_bytes = int(fields(out, "kv")["tensor-bytes"])
            before = float(fields(out, "times")["tok-s"])
            # The commit's share: with MOEFT_COMMIT=async no host wait
            # waits for a window's commit (the RPO bound is lost); the
            # chunk size's: 64 KiB chunks, the default before 4 KiB.
            runs = [(16, "wait", None), (16, "async", None), (1, "wait", None)]
            if mode == "graph":
                runs.append((16, "wait", "64K"))
            got = []
            for window, commit, block in runs:
                wal = os.path.join(self.dir, "tput.wal")
                out, err = self.generate(args, self.preload_env(wal, window, self.kv_bytes,
                                                                commit, block),
                                       "%s-w%d-%s%s" % (mode, window, commit,
                                                        "-" + block if block else ""))
                got.append(float(fields(out, "times")["tok-s"]))
                if mode == "eager" and (window, commit, block) == (16, "wait", None):
                    self.log_sizes(wal, err)
            # The baseline again after them: a ratio against a drifting
            # baseline (clocks, the host) would be that drift.
            out, _ = self.generate(args)
            after = float(fields(out, "times")["tok-s"])
            base = (before + after) / 2
            self.row("decode, %s, without the preload (before, after the runs below)" % mode,
                     "%.0f, %.0f tok/s" % (before, after))
            for (window, commit, block), tps in zip(runs, got):
                self.row("decode, %s, preload, MOEFT_WINDOW=%d%s%s" % (
                             mode, window, ", MOEFT_COMMIT=async" if commit == "async" else "",
                             ", chunks of " + block if block else ""),
                         "%.0f tok/s, **%.3fx**" % (tps, tps / base),
                         ">= 0.99x" if (window, commit, block) == (16, "wait", None) else "")

    def log_sizes(self, wal, err):
        out, _ = run([self.a.moeft, "inspect", "--wal", wal, "--json"])
        inspect = json.loads(out)
        dest = os.path.join(self.dir, "sizes.restore")
        run([self.a.moeft, "restore", "--wal", wal, "--out", dest])
        with open(os.path.join(dest, "manifest.json"), encoding="utf-8") as f:
            windows = json.load(f)["routing"]["windows"]
        shutil.rmtree(dest)
        if not windows:
            raise BenchError("%s: no committed decode window" % wal)
        tokens = sum(w["steps"] for w in windows) * BATCH
        types = inspect["types"]
        self.row("log, eager, window 16: bytes per token",
                 "%.0f B (routing %.0f B)" % (inspect["bytes"] / tokens,
                                              types["routing"]["bytes"] / tokens))
        summary = grep(r"decode_windows=([0-9]+) .* kv_chunks=([0-9]+) kv_bytes=([0-9]+)", err,
                       "the preload's summary")
        n = int(summary[1])
        self.row("KV store, eager, window 16: bytes per decode window",
                 "%.0f B in %.0f chunks (%d windows, the prefill's included)" % (
                     int(summary[3]) / n, int(summary[2]) / n, n))
        self.row("log, eager, window 16: bytes per decode window",
                 "%.0f B over %d windows; %.1f KV chunks per window" % (
                     inspect["bytes"] / len(windows), len(windows),
                     types.get("kvref", {}).get("count", 0) / len(windows)))

    def pinned_h2d(self):
        import torch
        n = 1 << 30
        host = torch.empty(n, dtype=torch.uint8, pin_memory=True)
        dev = torch.empty(n, dtype=torch.uint8, device="cuda")
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        best = 0.0
        for _ in range(5):
            start.record()
            dev.copy_(host, non_blocking=True)
            end.record()
            end.synchronize()
            best = max(best, n / (start.elapsed_time(end) / 1e3) / 1e9)
        self.gpu = torch.cuda.get_device_name()
        return best

    def rto(self, h2d):
        a = self.a
        args = ["--mode", a.rto_mode, "--kv-gib", str(a.kv_gib), "--prompt-len",
                str(a.rto_prompt_len), "--steps", str(a.rto_steps)]
        fresh_out, _ = self.generate(args)
        kv = int(fields(fresh_out, "kv")["tensor-bytes"])
        total_gib = kv * int(fields(fresh_out, "kv")["tensors"]) / (1 << 30)
        fresh = {k: float(v) for k, v in fields(fresh_out, "times").items()}
        step_s = fresh["decode-s"] / fresh["decode-steps"]

        wal = os.path.join(self.dir, "rto.wal")
        journal = os.path.join(self.dir, "rto.journal")
        env = self.preload_env(wal, 16, kv)
        with open(os.path.join(self.dir, "killed.err"), "w") as err:
            p = subprocess.Popen(gen(args + ["--journal", journal]),
                                 env=env, stdout=subprocess.DEVNULL, stderr=err)
            deadline = time.time() + run_timeout
            while p.poll() is None and time.time() < deadline and \
                    whole_lines(journal) < a.kill_after:
                time.sleep(0.01)
            if p.poll() is not None:
                raise BenchError("the run to kill ended first (exit %s)" % p.returncode)
            p.send_signal(signal.SIGKILL)
            p.wait()
        with open(os.path.join(self.dir, "killed.err"), encoding="utf-8") as err:
            self.keep("rto-killed", err.read())
        t0 = time.time()
        del env["MOEFT_WAL"], env["LD_PRELOAD"]  # moeft restore sets them
        out, err = run([a.moeft, "restore", "--wal", wal, "--preload", a.lib, "--"] +
                       gen(args + ["--journal", journal]), env=env)
        self.keep("rto-restored", err)
        resumed = {k: float(v) for k, v in fields(out, "times").items()}
        r = int(resumed["resumed-at"])
        if fields(out, "result") != fields(fresh_out, "result"):
            raise BenchError("the resumed run's tokens are not the uninterrupted run's:\n%s\n%s"
                             % (grep("result .*", out, "result").group(0),
                                grep("result .*", fresh_out, "result").group(0)))
        offline = grep(r"moeft restore: window .* ([0-9.]+) s, ([0-9]+) MB/s", err,
                       "offline restore summary")
        copy = grep(r"([0-9]+) bytes of KV restored in ([0-9.]+) s \(([0-9.]+) GB/s\): "
                    r"([0-9]+) bytes of data copied in ([0-9.]+) s \(([0-9.]+) GB/s\), "
                    r"([0-9]+) bytes of zeros", err, "the preload's restore line")
        rto = resumed["first"] - t0
        # Without moeft: start again, prefill, decode steps 1 .. r.
        recompute = fresh["first"] - fresh["start"] + r * step_s
        self.row("restore copy into the GPU (preload), %.2f GiB of data, %.2f GiB of zeros" % (
                     int(copy[4]) / (1 << 30), int(copy[7]) / (1 << 30)),
                 "data %s GB/s in %s s, **%.2fx** pinned H2D (pools %s GB/s in %s s)" % (
                     copy[6], copy[5], float(copy[6]) / h2d, copy[3], copy[2]),
                 ">= 0.8x of pinned H2D")
        self.row("offline restore (moeft restore, images into tmpfs)",
                 "%.0f MB/s in %s s" % (float(offline[2]), offline[1]))
        self.row("RTO with moeft, %.1f GiB KV, %s, resumed at step %d" % (
                     total_gib, a.rto_mode, r),
                 "%.2f s (restore %.2f s, start-up %.2f s, first step %.2f s)" % (
                     rto, resumed["start"] - t0, resumed["ready"] - resumed["start"],
                     resumed["first"] - resumed["ready"]))
        self.row("RTO restarting and computing again (prefill + %d steps)" % r,
                 "%.2f s (start-up %.2f s, prefill %.2f s, %.1f ms a step)" % (
                     recompute, fresh["ready"] - fresh["start"], fresh["prefill-s"],
                     step_s * 1e3))
        self.row("RTO ratio", "**%.2fx**" % (recompute / rto), ">= 10x")
        # The process's own start-up (imports, weights) is the same both
        # ways: the uninterrupted run's.  The resumed run's is longer by the
        # restore's copy into the GPU, which counts against moeft.
        own = fresh["ready"] - fresh["start"]
        self.row("RTO ratio without the start-up both pay (%.2f s)" % own,
                 "%.2fx (%.2f s against %.2f s)" % (
                     (recompute - own) / (rto - own), recompute - own, rto - own))

    def table(self):
        lines = ["GPU: %s" % self.gpu, "", "| measure | figure | goal |", "|---|---|---|"]
        lines += ["| %s | %s | %s |" % r for r in self.rows]
        return "\n".join(lines) + "\n"


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--moeft", required=True)
    p.add_argument("--lib", required=True)
    p.add_argument("--steps", type=int, default=256)
    p.add_argument("--kv-gib", type=float, default=4.0)
    p.add_argument("--rto-prompt-len", default="fill",
                   help="moe_generate.py's --prompt-len for the RTO runs (default fill)")
    p.add_argument("--rto-steps", type=int, default=96)
    p.add_argument("--kill-after", type=int, default=60)
    p.add_argument("--rto-mode", choices=("eager", "graph"), default="graph")
    p.add_argument("--timeout", type=float, default=300,
                   help="seconds one program run may take (default 300)")
    p.add_argument("--skip-rto", action="store_true",
                   help="no restore rows (the 4 GiB runs): throughput and log sizes only")
    p.add_argument("--out")
    p.add_argument("--logs", help="a directory for the preload runs' stderr")
    a = p.parse_args(argv)
    global run_timeout
    run_timeout = a.timeout
    for path in (a.moeft, a.lib):
        if not os.access(path, os.R_OK):
            p.error("%s: not readable" % path)
    if not 16 < a.kill_after < a.rto_steps:
        p.error("--kill-after must be past the first window and before --rto-steps")
    b = Bench(a)
    try:
        h2d = b.pinned_h2d()
        b.row("pinned host-to-device copy (torch, 1 GiB)", "%.1f GB/s" % h2d)
        b.throughput()
        if not a.skip_rto:
            b.rto(h2d)
    except (BenchError, subprocess.TimeoutExpired) as e:
        print("bench: FAILED: %s" % e, file=sys.stderr)
        return 1
    finally:
        shutil.rmtree(b.dir, ignore_errors=True)
    table = b.table()
    print(table)
    if a.out:
        with open(a.out, "w", encoding="utf-8") as f:
            f.write(table)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
