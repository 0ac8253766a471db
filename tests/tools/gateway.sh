#!/bin/bash
# gateway.sh - moeft gateway in front of a stand-in engine server
# (fake_stream.py) that really dies mid-stream (os._exit) and is started
# again on its port: 6 streaming completions, 2 non-streaming ones, 2
# streaming chats and a non-streaming one get exactly the text of an
# uninterrupted run, status 200, no error, and
# the requests sent again are prompt + generated tokens with the rest of
# max_tokens; a crash with no server coming back gives each client an
# error event within --wait; malformed, oversized and misdirected
# requests get 400, 413, 404; a server's refusal is passed on; a client
# that leaves mid-stream cancels its request on the server.
#
# Usage: gateway.sh MOEFT FAKE_STREAM CLIENT
set -u

moeft=$1 fake=$2 client=$3
dir=$(mktemp -d)
pids=
cleanup() {
	[ -n "$pids" ] && kill $pids 2>/dev/null
	rm -rf "$dir"
}
trap cleanup EXIT

fail() {
	echo "tools gateway.sh: $*" >&2
	exit 1
}

free_port() {
	python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# Wait until URL answers (any status).
wait_up() {
	for _ in $(seq 200); do
		python3 -c "import urllib.request, sys
try: urllib.request.urlopen(sys.argv[1], timeout=1)
except urllib.error.HTTPError: pass
except Exception: sys.exit(1)" "$1" && return 0
		sleep 0.05
	done
	fail "$1 does not answer"
}

start_fake() {
	python3 "$fake" "$port" "$dir/log" "$dir/crash" &
	fake_pid=$!
	pids="$pids $fake_pid"
	wait_up "http://127.0.0.1:$port/health"
}

port=$(free_port) gport=$(free_port)
start_fake
"$moeft" gateway --listen "127.0.0.1:$gport" --backend "http://127.0.0.1:$port" --wait 20 \
	--max-body 4096 2>"$dir/gw.err" &
gw=$!
pids="$pids $gw"
g="http://127.0.0.1:$gport"
wait_up "$g/health"

# status_of METHOD PATH [BODY [AUTHORIZATION]]: the gateway's HTTP status.
status_of() {
	python3 - "$g" "$@" <<'PY'
import http.client, sys
from urllib.parse import urlparse
u = urlparse(sys.argv[1])
c = http.client.HTTPConnection(u.hostname, u.port, timeout=30)
h = {"Content-Type": "application/json"}
if len(sys.argv) > 5:
    h["Authorization"] = sys.argv[5]
c.request(sys.argv[2], sys.argv[3], sys.argv[4] if len(sys.argv) > 4 else None, h)
print(c.getresponse().status)
PY
}

# The uninterrupted run, then the same with the server killed mid-stream
# and started again a second later.
python3 "$client" "$g" 6 30 stream >"$dir/want.stream" || fail "the client failed"
python3 "$client" "$g" 2 30 whole >"$dir/want.whole" || fail "the client failed"
python3 "$client" "$g" 2 30 chat >"$dir/want.chat" || fail "the client failed"
python3 "$client" "$g" 1 30 chat-whole >"$dir/want.chatw" || fail "the client failed"
grep -qv '"status": 200' "$dir"/want.* && fail "the uninterrupted run: $(cat "$dir"/want.*)"
cmp -s <(sed 's/"comments.*//' "$dir/want.chat") <(head -n 2 "$dir/want.stream" | sed 's/"comments.*//') ||
	fail "chat and completion differ: $(cat "$dir/want.chat" "$dir/want.stream")"
: >"$dir/log"
echo "40 11" >"$dir/crash"
python3 "$client" "$g" 6 30 stream >"$dir/got.stream" &
c1=$!
python3 "$client" "$g" 2 30 whole >"$dir/got.whole" &
c2=$!
python3 "$client" "$g" 2 30 chat >"$dir/got.chat" &
c3=$!
python3 "$client" "$g" 1 30 chat-whole >"$dir/got.chatw" &
c4=$!
for _ in $(seq 600); do
	kill -0 $fake_pid 2>/dev/null || break
	sleep 0.1
done
kill -0 $fake_pid 2>/dev/null && fail "the server did not crash within 60 s"
wait $fake_pid
[ -e "$dir/crash" ] && fail "the server did not crash"
sleep 1
start_fake
wait $c1 && wait $c2 && wait $c3 && wait $c4 || fail "a client failed"
strip() { sed 's/, "comments": [0-9]*//' "$1"; }
cmp -s <(strip "$dir/want.stream") <(strip "$dir/got.stream") ||
	fail "streaming clients: $(cat "$dir/got.stream"), want $(cat "$dir/want.stream")"
cmp -s "$dir/want.whole" "$dir/got.whole" ||
	fail "non-streaming clients: $(cat "$dir/got.whole"), want $(cat "$dir/want.whole")"
cmp -s <(strip "$dir/want.chat") <(strip "$dir/got.chat") ||
	fail "chat clients: $(cat "$dir/got.chat"), want $(cat "$dir/want.chat")"
cmp -s "$dir/want.chatw" "$dir/got.chatw" ||
	fail "a non-streaming chat client: $(cat "$dir/got.chatw"), want $(cat "$dir/want.chatw")"
# Each request sent again: its prompt's token ids plus the generated ones,
# their count plus max_tokens the original prompt's plus 30.
python3 - "$dir/log" <<'PY' || fail "the requests sent again are not continuations"
import json, sys
again = 0
for line in open(sys.argv[1]):
    if not line.startswith("{"):
        continue
    r = json.loads(line)
    if isinstance(r.get("prompt"), list):
        prompt = bytes(r["prompt"][:8]).decode()
        assert prompt.startswith("prompt "), r
        assert len(r["prompt"]) + r["max_tokens"] == 8 + 30, r
        assert r["echo"] is False and r["return_token_ids"] is True, r
        again += 1
assert again == 11, "%d requests were sent again, not 11" % again
print("gateway.sh: %d requests sent again" % again)
PY

# The gateway says what the server computed again for each: here the
# stand-in's usage (all but the last token cached).
n=$(grep -cE '^moeft gateway: request (chat)?cmpl-[0-9]+ went on after 1 server failure: ([0-9]+) prompt tokens sent again, [0-9]+ of them cached; its first token [0-9]+\.[0-9]{3} s after the server.s health$' "$dir/gw.err")
[ "$n" = 11 ] || fail "$n requests said to have gone on, not 11: $(cat "$dir/gw.err")"

# Malformed, oversized, misdirected; the server's own refusal passed on.
[ "$(status_of POST /v1/completions '{"prompt":')" = 400 ] || fail "malformed JSON: not 400"
[ "$(status_of POST /v1/completions '{"prompt":"a","n":2}')" = 400 ] || fail "n 2: not 400"
[ "$(status_of POST /v1/chat/completions '{"messages":[{"role":"user","content":"a"}],"tools":[{"type":"function","function":{"name":"f"}}]}')" = 400 ] ||
	fail "a chat with tools: not 400"
[ "$(status_of POST /v1/chat/completions '{"messages":[{"role":"user","content":"a"}],"tools":[{"type":"function","function":{"name":"f"}}],"tool_choice":"none","max_tokens":2}')" = 200 ] ||
	fail "a chat with tools it may not call: not 200"
[ "$(status_of POST /v1/completions "{\"prompt\":\"$(head -c 5000 /dev/zero | tr '\0' a)\"}")" = 413 ] ||
	fail "a body over --max-body: not 413"
[ "$(status_of GET /v1/other)" = 404 ] || fail "an unknown path: not 404"
[ "$(status_of GET /v1/completions)" = 405 ] || fail "GET of completions: not 405"
[ "$(status_of POST /v1/completions '{"prompt":"a","max_tokens":0}')" = 400 ] ||
	fail "the server's 400 was not passed on"
[ "$(status_of GET /v1/models)" = 200 ] || fail "/v1/models: not 200"
[ "$(status_of POST /v1/completions '{"prompt":"a","max_tokens":1}' 'Bearer k-1')" = 200 ] ||
	fail "a completion with a key: not 200"
grep -q '^auth Bearer k-1$' "$dir/log" || fail "the client's Authorization was not passed on"
[ "$(status_of GET /v1/models '' 'Bearer k-2')" = 200 ] || fail "/v1/models with a key: not 200"
grep -q '^auth Bearer k-2 GET /v1/models$' "$dir/log" ||
	fail "the client's Authorization was not passed on to /v1/models"

# A client that leaves mid-stream: the server sees its request cancelled.
: >"$dir/log"
python3 "$client" "$g" 1 100 stream 3 >/dev/null || fail "the leaving client failed"
for _ in $(seq 100); do
	grep -q '^cancelled$' "$dir/log" && break
	sleep 0.05
done
grep -q '^cancelled$' "$dir/log" || fail "a client left, its request was not cancelled"

# A streaming client that comes while the server is down: its stream
# starts at once (status 200), SSE comments hold it, and once the server
# is back it gets the text it would have got.
python3 "$client" "$g" 1 20 stream >"$dir/want.down" || fail "the client failed"
kill "$fake_pid"
wait "$fake_pid" 2>/dev/null
python3 "$client" "$g" 1 20 stream >"$dir/got.down" &
c1=$!
# ... and one that leaves while it waits: its request is never sent again.
python3 - "$g" >"$dir/left" <<'PY' &
import http.client, json, sys, time
from urllib.parse import urlparse
u = urlparse(sys.argv[1])
c = http.client.HTTPConnection(u.hostname, u.port, timeout=30)
c.request("POST", "/v1/completions", json.dumps({"prompt": "leaving", "max_tokens": 20,
          "stream": True}), {"Content-Type": "application/json"})
print(c.getresponse().status)
time.sleep(1)
c.close()
PY
c2=$!
sleep 3	# back before the next comment line: only the watch on parked clients sees it leave
: >"$dir/log"
start_fake
wait $c1 || fail "the client that came while the server was down failed"
wait $c2
[ "$(cat "$dir/left")" = 200 ] || fail "a client that waits for the server: status $(cat "$dir/left")"
cmp -s <(strip "$dir/want.down") <(strip "$dir/got.down") ||
	fail "a client that came while the server was down: $(cat "$dir/got.down"), want $(cat "$dir/want.down")"
grep -q '"comments": [1-9]' "$dir/got.down" ||
	fail "a client that came while the server was down got no SSE comment: $(cat "$dir/got.down")"
sleep 1
grep -q 'leaving' "$dir/log" && fail "a client left while it waited, its request was sent again"

# SIGTERM with a client waiting for a server that is down and another
# still sending its request: the waiting one is told, a GET after the
# signal gets 503, and the gateway exits 0 within its 2 s.
kill "$fake_pid"
wait "$fake_pid" 2>/dev/null
python3 "$client" "$g" 1 20 stream >"$dir/stopped" &
c1=$!
python3 - "$gport" <<'PY' &
import socket, sys, time
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{")
time.sleep(5)
PY
c2=$!
sleep 1
kill -TERM "$gw"
t0=$(date +%s%N)
[ "$(status_of GET /health)" = 503 ] || fail "a GET while the gateway stops: not 503"
wait "$gw"
rc=$?
t=$((($(date +%s%N) - t0) / 1000000))
[ $rc = 0 ] || fail "SIGTERM with parked clients: the gateway exited $rc: $(tail -3 "$dir/gw.err")"
[ $t -lt 3000 ] || fail "SIGTERM with parked clients: the gateway took $t ms"
wait $c1
grep -q '"message": "the gateway is stopping"' "$dir/stopped" ||
	fail "the waiting client was not told the gateway stops: $(cat "$dir/stopped")"
kill $c2 2>/dev/null
start_fake

# The server dies for good: each client gets an error event within --wait.
kill "$gw" 2>/dev/null
wait "$gw" 2>/dev/null
"$moeft" gateway --listen "127.0.0.1:$gport" --backend "http://127.0.0.1:$port" --wait 2 \
	2>"$dir/gw2.err" &
gw=$!
pids="$pids $gw"
wait_up "$g/health"
echo "5 1" >"$dir/crash"
python3 "$client" "$g" 2 30 stream >"$dir/dead" || fail "the client failed"
[ "$(grep -c '"message": "the server did not come back within 2 s (--wait)"' "$dir/dead")" = 2 ] ||
	fail "a server gone for good: $(cat "$dir/dead")"
[ "$(status_of GET /health)" = 503 ] || fail "/health with no server: not 503"
echo "tools gateway.sh: a crash mid-stream unnoticed by 11 clients (completions and chat), errors and limits as said"
