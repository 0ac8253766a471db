#!/usr/bin/env python3
"""fake_openai.py - a stand-in OpenAI-compatible server for resubmit.sh.

Usage: fake_openai.py PORT_FILE BODY_LOG [MODE]

Listens on a free port of 127.0.0.1 (written to PORT_FILE), answers
/health with 503 twice and then 200, /v1/models with the model "tiny",
and /v1/completions with token ids 100, 101, ... (max_tokens of them) and
cached_tokens = len(prompt) - 1, appending each request's body as one
line to BODY_LOG.  MODE "fail" answers completions with HTTP 500.
"""
import json
import os
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

health_polls = 0


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
        global health_polls
        if self.path == "/health":
            health_polls += 1
            self.reply(200 if health_polls > 2 else 503, {})
        elif self.path == "/v1/models":
            self.reply(200, {"data": [{"id": "tiny"}]})
        else:
            self.reply(404, {})

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        with open(sys.argv[2], "a") as log:
            log.write(body.decode() + "\n")
        if len(sys.argv) > 3 and sys.argv[3] == "fail":
            self.reply(500, {"error": "boom"})
            return
        req = json.loads(body)
        n = req.get("max_tokens", 16)
        self.reply(200, {"choices": [{"token_ids": list(range(100, 100 + n)),
                                      "finish_reason": "length"}],
                         "usage": {"prompt_tokens_details":
                                   {"cached_tokens": len(req["prompt"]) - 1}}})


server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
with open(sys.argv[1] + ".tmp", "w") as f:
    f.write(str(server.server_address[1]))
os.rename(sys.argv[1] + ".tmp", sys.argv[1])
server.serve_forever()
