#!/usr/bin/env python3
"""gateway_client.py - clients of moeft gateway for gateway.sh.

Usage: gateway_client.py URL CLIENTS MAX_TOKENS [stream|whole|chat|chat-whole] [LEAVE_AFTER]

Sends CLIENTS concurrent completions (prompts "prompt 0", "prompt 1", ...)
and prints one JSON line per client, in order: its HTTP status, the text
it received, the error events and the SSE comment lines it saw.  The
chat kinds send the prompt as a user message to /v1/chat/completions.  With
LEAVE_AFTER, each streaming client disconnects after that many events.
"""
import http.client
import json
import sys
import threading
from urllib.parse import urlparse

url = urlparse(sys.argv[1])
clients, max_tokens = int(sys.argv[2]), int(sys.argv[3])
kind = sys.argv[4] if len(sys.argv) > 4 else "stream"
stream, chat = kind in ("stream", "chat"), kind.startswith("chat")
leave = int(sys.argv[5]) if len(sys.argv) > 5 else None
results: list[dict] = [{} for _ in range(clients)]


def client(i: int) -> None:
    conn = http.client.HTTPConnection(url.hostname, url.port, timeout=120)
    body: dict = {"model": "tiny", "stream": stream}
    if chat:
        body.update(messages=[{"role": "user", "content": "prompt %d" % i}],
                    max_completion_tokens=max_tokens)
    else:
        body.update(prompt="prompt %d" % i, max_tokens=max_tokens)
    conn.request("POST", "/v1/chat/completions" if chat else "/v1/completions",
                 json.dumps(body), {"Content-Type": "application/json"})
    r = conn.getresponse()
    out = {"status": r.status, "text": "", "errors": [], "comments": 0, "events": 0}
    if not stream or r.status != 200:
        reply = json.loads(r.read() or b"{}")
        choices = reply.get("choices") or [{}]
        if r.status == 200 and chat:
            assert reply["object"] == "chat.completion" and "text" not in choices[0], reply
            out["text"] = choices[0]["message"]["content"]
        elif r.status == 200:
            assert reply["object"] == "text_completion" and "message" not in choices[0], reply
            out["text"] = choices[0]["text"]
        if "error" in reply:
            out["errors"].append(reply["error"])
    else:
        while True:
            line = r.readline()
            if not line:
                break
            line = line.decode().rstrip("\n")
            if line.startswith(":"):
                out["comments"] += 1
            elif line.startswith("data: ") and line != "data: [DONE]":
                ev = json.loads(line[6:])
                if "error" in ev:
                    out["errors"].append(ev["error"])
                for c in ev.get("choices", []):
                    # Each in its own API's form, a chunk sent again included.
                    if chat:
                        assert ev["object"] == "chat.completion.chunk" and "text" not in c, ev
                        out["text"] += c["delta"].get("content") or ""
                    else:
                        assert ev["object"] == "text_completion" and "delta" not in c, ev
                        out["text"] += c["text"]
                out["events"] += 1
                if leave is not None and out["events"] >= leave:
                    break
    conn.close()
    results[i] = out


threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
for t in threads:
    t.start()
for t in threads:
    t.join()
for res in results:
    print(json.dumps(res))
