#!/usr/bin/env bash
# resubmit.sh - moeft resubmit against a stand-in server (fake_openai.py):
# a scheduler's log of known requests (requests_log.c) restored offline,
# then resubmitted: exact bodies sent (prompt + generated tokens, the
# budget left, the recorded params), exact JSON out, the finished request
# and the spent one not sent; a failing server, no restore, a bad URL and
# a server that never gets healthy, each with its exit status.
#
# Usage: resubmit.sh MOEFT LIBMOEFT REQUESTS_LOG FAKE_SERVER
set -euo pipefail
moeft=$1 lib=$2 make_log=$3 fake=$4
dir=$(mktemp -d /tmp/moeft-resubmit-XXXXXX)
server=
cleanup() {
	[[ -n $server ]] && kill "$server" 2>/dev/null
	rm -rf "$dir"
}
trap cleanup EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

mkdir -m 0700 "$dir/wal"
MOEFT_WAL=$dir/wal/sched.nodev.wal LD_PRELOAD=$lib "$make_log" || fail "requests_log"
"$moeft" restore --wal "$dir/wal" --out "$dir/out" >/dev/null 2>&1 || fail "restore"
[[ $(cat "$dir/out/set") == $'moeft-restore-set 1\nsched.nodev' ]] || fail "set file: $(cat "$dir/out/set")"

start() {
	rm -f "$dir/port"
	python3 "$fake" "$dir/port" "$dir/bodies" "$@" &
	server=$!
	for _ in $(seq 100); do [[ -s $dir/port ]] && break; sleep 0.1; done
	port=$(cat "$dir/port")
}

start
status=0
"$moeft" resubmit --restored "$dir/out" --server "http://127.0.0.1:$port/" --json \
	>"$dir/json" 2>"$dir/err" || status=$?
[[ $status == 0 ]] || fail "status $status: $(cat "$dir/err")"
want='[{"id":"a","prompt_token_ids":[1,2,3],"token_ids":[4,5,100,101,102,103,104,105,106,107],"resumed_from":2,"prompt_tokens":5,"cached_tokens":4,"finish_reason":"length","error":null},{"id":"c","prompt_token_ids":[7],"token_ids":[8,9],"resumed_from":2,"prompt_tokens":3,"cached_tokens":0,"finish_reason":"length","error":null}]'
[[ $(cat "$dir/json") == "$want" ]] || fail "json: $(cat "$dir/json")"
# One body, a's: its params, the model, every token, 10 - 2 tokens left.
body=$(cat "$dir/bodies")
python3 - "$body" <<'PY' || fail "body: $body"
import json, sys
b = json.loads(sys.argv[1])
want = {"max_tokens": 8, "temperature": 0, "ignore_eos": True, "model": "tiny",
        "prompt": [1, 2, 3, 4, 5], "stream": False, "return_token_ids": True}
sys.exit(0 if b == want else 1)
PY
"$moeft" resubmit --restored "$dir/out" --server "http://127.0.0.1:$port" >"$dir/text"
grep -qx 'a: resumed after 2 generated tokens; 4 of the 5 sent were cached; 8 more generated (length)' \
	"$dir/text" || fail "text: $(cat "$dir/text")"
kill "$server"; wait "$server" 2>/dev/null || true; server=

# A server that fails the request: status 1, the error per request.
start fail
status=0
"$moeft" resubmit --restored "$dir/out" --server "http://127.0.0.1:$port" --json \
	>"$dir/json" 2>/dev/null || status=$?
[[ $status == 1 ]] || fail "failing server: status $status"
grep -q '"id":"a",.*"error":"HTTP 500: {\\"error\\": \\"boom\\"}"' "$dir/json" || fail "error json: $(cat "$dir/json")"
kill "$server"; wait "$server" 2>/dev/null || true; server=

# Nobody listens now: not healthy in time, status 1.
status=0
"$moeft" resubmit --restored "$dir/out" --server "http://127.0.0.1:$port" --timeout 1 \
	2>"$dir/err" || status=$?
[[ $status == 1 ]] && grep -q 'did not become healthy in 1 s' "$dir/err" || fail "unhealthy: $status $(cat "$dir/err")"
# No restore there, a bad URL, no --wal: usage errors (2).
status=0
"$moeft" resubmit --wal "$dir/nowhere" --server "http://127.0.0.1:1" 2>"$dir/err" || status=$?
[[ $status == 2 ]] && grep -q "nowhere.restore/set: No such file or directory (no server's restore there" "$dir/err" ||
	fail "no restore: $status $(cat "$dir/err")"
status=0
"$moeft" resubmit --wal "$dir/wal" --server "127.0.0.1:1" 2>"$dir/err" || status=$?
[[ $status == 2 ]] && grep -q -- "--server must be an http:// or https:// URL" "$dir/err" || fail "bad url: $status"
status=0
"$moeft" resubmit --server "http://127.0.0.1:1" 2>"$dir/err" || status=$?
[[ $status == 2 ]] && grep -q -- "--wal DIR (or --restored OUT) is required" "$dir/err" || fail "no wal: $status"
echo "resubmit: ok"
