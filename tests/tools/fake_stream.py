#!/usr/bin/env python3
"""fake_stream.py - a stand-in engine server that streams, for gateway.sh.

Usage: fake_stream.py PORT LOG CRASH_FILE

Serves 127.0.0.1:PORT like vLLM's OpenAI server: /health, /v1/models
("tiny"), /v1/completions and /v1/chat/completions, streaming (SSE, with
token_ids per event, prompt_token_ids in the first, a usage event when
asked) or not; a chat's prompt is its messages' contents, one per line.  Its
"model" is deterministic: a string prompt's token ids are its bytes, and
each next token is a function of the two before, so a request sent again
as prompt plus generated tokens goes on exactly where it stopped.  Each
request body is appended to LOG as one line (and "auth VALUE" for its
Authorization header, "auth VALUE GET PATH" for a GET's), and "cancelled" when the
client went away mid-stream.  When CRASH_FILE holds "K N", the process
dies (os._exit) once it has streamed K tokens while the file was there
and N streams are running, removing the file first: a crash in
mid-decode of N requests.  FAKE_STREAM_SALT (an integer, default 0)
changes the "model": its tokens differ from the default's.
"""
import json
import os
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from threading import Lock

lock = Lock()
streamed = 0  # tokens streamed while the crash file was there
running = 0   # streams in progress
salt = int(os.environ.get("FAKE_STREAM_SALT", "0"))


def next_token(ids: list[int]) -> int:
    a = ids[-1] if ids else 1
    b = ids[-2] if len(ids) > 1 else 2
    return (a * 7 + b * 3 + 11 + salt) % 1000


def note(line: str) -> None:
    with lock, open(sys.argv[2], "a") as log:
        log.write(line + "\n")


def crash_point() -> tuple[int, int] | None:
    try:
        with open(sys.argv[3]) as f:
            k, n = f.read().split()
            return int(k), int(n)
    except (OSError, ValueError):
        return None


class Handler(BaseHTTPRequestHandler):
    def log_message(self, *args: object) -> None:
        pass

    def reply(self, status: int, obj: object) -> None:
        body = json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        if self.headers.get("Authorization"):
            note(f"auth {self.headers['Authorization']} GET {self.path}")
        if self.path == "/health":
            self.reply(200, {})
        elif self.path == "/v1/models":
            self.reply(200, {"object": "list", "data": [{"id": "tiny"}]})
        else:
            self.reply(404, {})

    def do_POST(self) -> None:
        global streamed, running
        raw = self.rfile.read(int(self.headers["Content-Length"]))
        note(raw.decode())
        if self.headers.get("Authorization"):
            note("auth " + self.headers["Authorization"])
        req = json.loads(raw)
        chat = self.path == "/v1/chat/completions"
        if self.path != "/v1/completions" and not chat:
            self.reply(404, {})
            return
        n = req.get("max_completion_tokens", req.get("max_tokens"))
        n = 16 if n is None else n
        if not isinstance(n, int) or n < 1:
            self.reply(400, {"error": {"message": "max_tokens must be at least 1"}})
            return
        if chat:
            ids = list("\n".join(m["content"] for m in req["messages"]).encode())
        else:
            prompt = req["prompt"]
            ids = list(prompt.encode()) if isinstance(prompt, str) else list(prompt)
        want_ids = req.get("return_token_ids", False)
        rid = ("chatcmpl-%d" if chat else "cmpl-%d") % time.monotonic_ns()
        kind = "chat.completion" if chat else "text_completion"
        gen: list[int] = []
        for _ in range(n):
            gen.append(next_token(ids + gen))
        text = "".join(" t%d" % t for t in gen)
        if not req.get("stream"):
            whole = {"index": 0, "finish_reason": "length",
                     "token_ids": gen if want_ids else None}
            whole.update({"message": {"role": "assistant", "content": text}} if chat
                         else {"text": text})
            self.reply(200, {"id": rid, "object": kind, "choices": [whole],
                             "usage": {"prompt_tokens": len(ids), "completion_tokens": n}})
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        with lock:
            running += 1
        # With a crash to come, the streams start together (the crash is
        # to find them all running, however late their clients came).
        k = crash_point()
        t0 = time.monotonic()
        while k is not None and running < k[1] and time.monotonic() - t0 < 30:
            time.sleep(0.01)

        def send(choice: dict | None, **top: object) -> None:
            ev = {"id": rid, "object": kind + (".chunk" if chat else ""), "model": "tiny",
                  "choices": [choice] if choice else [], **top}
            self.wfile.write(b"data: " + json.dumps(ev).encode() + b"\n\n")
            self.wfile.flush()

        try:
            if chat:  # vLLM's first chat event: the role, the prompt's ids
                send({"index": 0, "delta": {"role": "assistant", "content": ""},
                      "finish_reason": None}, **({"prompt_token_ids": ids} if want_ids else {}))
            for i, t in enumerate(gen):
                choice: dict = {"index": 0, "logprobs": None, "stop_reason": None,
                                "finish_reason": "length" if i == n - 1 else None}
                choice.update({"delta": {"content": " t%d" % t}} if chat else {"text": " t%d" % t})
                if want_ids:
                    choice["token_ids"] = [t]
                    if i == 0 and not chat:
                        choice["prompt_token_ids"] = ids
                send(choice)
                with lock:
                    k = crash_point()
                    streamed += k is not None
                    if k is not None and streamed >= k[0] and running >= k[1]:
                        os.unlink(sys.argv[3])
                        os._exit(9)
                time.sleep(0.02)
            if (req.get("stream_options") or {}).get("include_usage"):
                send(None, usage={"prompt_tokens": len(ids), "completion_tokens": n,
                                  "total_tokens": len(ids) + n,
                                  "prompt_tokens_details": {"cached_tokens": len(ids) - 1}})
            self.wfile.write(b"data: [DONE]\n\n")
        except (BrokenPipeError, ConnectionResetError):
            note("cancelled")
        finally:
            with lock:
                running -= 1


server = ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), Handler)
server.daemon_threads = True
server.serve_forever()
