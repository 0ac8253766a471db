#!/bin/sh
# vllm_check.sh - moeft demo --engine vllm against a stand-in for vLLM
# (fake_vllm.sh serving tests/tools/fake_stream.py): the demo's own logic,
# fast and without vLLM; tests/vllm/e2e.sh runs it on the real one.
#   run       4 clients carried over the kill: exit 0, the report's lines,
#             --json's keys and figures, the requests the server got
#   differ    a server that comes back as another "model": RESULT names
#             the clients that differ, exit 1, the directory kept
#   usage     option errors, a Python without vLLM, a server that dies at
#             start: each message exactly, exit 2
#   interrupt SIGTERM to moeft demo mid-pass: it ends by SIGTERM, and
#             leaves neither moeft run, the server nor its directory
#
# Usage: vllm_check.sh CHECK MOEFT LIBMOEFT FAKE_VLLM FAKE_STREAM
set -u

check=$1 moeft=$2 lib=$3 fake=$4
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
export FAKE_STREAM="$5" FAKE_VLLM_DIR="$dir"

fail() {
	echo "demo vllm_check.sh $check: $*" >&2
	exit 1
}

demo() {
	"$moeft" demo --engine vllm --python "$fake" --model tiny --preload "$lib" "$@"
}

# expect STATUS MESSAGE ARGS...: the demo with ARGS exits STATUS, and its
# stderr's first line is MESSAGE.
expect() {
	want_rc=$1 want=$2
	shift 2
	demo "$@" >"$dir/out" 2>"$dir/err"
	rc=$?
	[ "$rc" = "$want_rc" ] || fail "demo $*: exit $rc, want $want_rc: $(cat "$dir/err")"
	got=$(head -n 1 "$dir/err")
	[ "$got" = "$want" ] || fail "demo $*: said '$got', want '$want'"
}

# The demo's directory its messages name: "(all in DIR/run.log)".
kept_dir() {
	sed -n 's/.*(all in \(.*\)\/run\.log):$/\1/p' "$dir/err" | head -n 1
}

case $check in
run)
	demo --tokens 64 --clients 4 >"$dir/report" 2>"$dir/err" || fail "exit $?: $(cat "$dir/err")"
	[ ! -s "$dir/err" ] || fail "messages on stderr: $(cat "$dir/err")"
	cat "$dir/report"
	sed -n 1p "$dir/report" | grep -qx "moeft demo: vLLM ($fake -m \
vllm.entrypoints.openai.api_server) serving tiny under moeft run --gateway," ||
		fail "first line: $(sed -n 1p "$dir/report")"
	for line in "  4 streaming clients through the gateway, 64 tokens each, greedy" \
		"  uninterrupted pass:                  256 tokens in .* s" \
		"  crash pass: SIGKILL to the server's process group when client [1-4] had \
\(2[5-9]\|[3-5][0-9]\|6[0-3]\) tokens" \
		"  moeft run restored the server and started it again (1 time)" \
		"RESULT: every client's text equals the uninterrupted pass's (4 of 4), status \
200, no error" \
		"PAUSE: the longest wait for a token was [0-9.]* s (the restart); no client saw the \
crash otherwise" \
		"  the slowest of them had its first token [0-9.]* s after the server's health" \
		"STOP: SIGTERM to moeft run: it ended; 0 of the server's processes left"; do
		grep -qx "$line" "$dir/report" || fail "no line '$line'"
	done
	# The stand-in says what it was sent again was cached but its last token.
	pattern="^  the gateway sent 4 requests on: \([0-9]*\) prompt tokens sent again, \
\([0-9]*\) of them cached;$"
	sent=$(sed -n "s/$pattern/\1 \2/p" "$dir/report")
	[ -n "$sent" ] || fail "no line of the requests sent on"
	resent=${sent% *} cached=${sent#* }
	[ "$((resent - cached))" = 4 ] ||
		fail "$resent sent again, $cached cached: want all but one token a request"
	grep -qx "RECOMPUTE: the restarted server computed 4 of the $resent tokens sent again;" \
		"$dir/report" || fail "no RECOMPUTE line of 4 of $resent"
	# 4 uninterrupted, 4 killed, 4 sent again: no request twice
	n=$(grep -c '"prompt"' "$dir/requests.log")
	[ "$n" = 12 ] || fail "the server got $n requests, want 12"

	rm -f "$dir/started" "$dir/requests.log"
	demo --tokens 64 --clients 2 --json >"$dir/json" 2>"$dir/err" ||
		fail "--json: exit $?: $(cat "$dir/err")"
	python3 - "$dir/json" <<'PY' || fail "--json: $(cat "$dir/json")"
import json, sys
d = json.load(open(sys.argv[1]))
keys = {"status", "result", "engine", "model", "clients", "clients_equal", "clients_ok",
        "max_tokens", "server_up_s", "reference_tokens", "reference_s", "kill_client",
        "kill_tokens", "pause_s", "restores", "requests_sent_on", "prompt_tokens_sent_again",
        "cached_tokens", "first_token_after_health_s", "run_ended", "server_processes_left",
        "kept_dir"}
assert set(d) == keys, sorted(set(d) ^ keys)
assert d["status"] == "ok" and d["result"] == "equal" and d["engine"] == "vllm", d
assert d["model"] == "tiny" and d["kept_dir"] is None and d["run_ended"] is True, d
assert d["clients"] == d["clients_equal"] == d["clients_ok"] == 2, d
assert d["max_tokens"] == 64 and d["reference_tokens"] == 128, d
assert d["kill_client"] in (1, 2) and 25 <= d["kill_tokens"] < 64, d
assert d["restores"] == 1 and d["requests_sent_on"] == 2, d
assert 0 < d["cached_tokens"] <= d["prompt_tokens_sent_again"], d
assert d["server_processes_left"] == 0, d
for k in ("server_up_s", "reference_s", "pause_s", "first_token_after_health_s"):
    assert isinstance(d[k], float) and d[k] > 0, (k, d)
PY
	;;
differ)
	FAKE_VLLM_MODE=differ demo --tokens 64 --clients 4 >"$dir/report" 2>"$dir/err"
	rc=$?
	[ "$rc" = 1 ] || fail "exit $rc, want 1: $(cat "$dir/err")"
	cat "$dir/report"
	pattern="^RESULT: [0-3] of 4 clients got the uninterrupted pass's text, 4 of 4 status \
200 with no error (kept in \(.*\))$"
	kept=$(sed -n "s/$pattern/\1/p" "$dir/report")
	[ -n "$kept" ] || fail "no RESULT line of clients that differ"
	[ -s "$kept/run.log" ] || fail "$kept/run.log was not kept"
	rm -rf "$kept"
	;;
usage)
	"$moeft" demo --engine foo >/dev/null 2>"$dir/err"
	[ "$(head -n 1 "$dir/err")" = "moeft demo: --engine foo: not an engine moeft demo knows \
(serve, vllm)" ] || fail "--engine foo: $(cat "$dir/err")"
	expect 2 "moeft demo: --engine serve: one engine at a time" --engine serve
	"$moeft" demo --engine vllm --preload "$lib" >/dev/null 2>"$dir/err"
	[ "$(head -n 1 "$dir/err")" = "moeft demo: --engine vllm needs --model MODEL: an MoE \
model vLLM serves (tools/demo.sh --engine vllm makes a tiny one)" ] ||
		fail "no --model: $(cat "$dir/err")"
	expect 2 "moeft demo: --model: empty" --model ""
	expect 2 "moeft demo: --clients: 0 is out of range (1 to 64)" --clients 0
	expect 2 "moeft demo: --tokens: 5 is out of range (16 to 4096)" --tokens 5
	expect 2 "moeft demo: --tokens: '1e3' is not a whole number" --tokens 1e3
	expect 2 "moeft demo: --wait: 1 is out of range (10 to 86400)" --wait 1
	expect 2 "moeft demo: --python no-such-python: not found in PATH" --python no-such-python
	expect 2 "moeft demo: --preload $dir/none.so: No such file or directory" \
		--preload "$dir/none.so"
	expect 2 "moeft demo: unexpected argument 'x' (the server's own arguments go after \
\"--\")" x
	FAKE_VLLM_MODE=no-import expect 2 "moeft demo: --python $fake cannot import \
vllm.entrypoints.openai.api_server and moeft.vllm (exited with status 1); install them \
(tools/setup.sh --vllm makes such a Python); it said:"
	grep -qx "ModuleNotFoundError: No module named 'vllm'" "$dir/err" ||
		fail "no-import: the Python's words are not shown: $(cat "$dir/err")"
	FAKE_VLLM_MODE=dies demo >/dev/null 2>"$dir/err"
	rc=$? kept=$(kept_dir)
	[ -n "$kept" ] && rm -rf "$kept"
	[ "$rc:$(head -n 1 "$dir/err")" = "2:moeft demo: moeft run exited with status 3 before \
the server answered; the last lines of moeft run (all in $kept/run.log):" ] ||
		fail "a server that dies: exit $rc: $(cat "$dir/err")"
	grep -qx "fake_vllm.sh: dying at start" "$dir/err" ||
		fail "dies: the server's words are not shown: $(cat "$dir/err")"
	"$moeft" demo --help | grep -q -- '--engine vllm --model MODEL' || fail "--help"
	;;
interrupt)
	"$moeft" demo --engine vllm --python "$fake" --model tiny --preload "$lib" \
		--tokens 4096 --clients 2 >"$dir/out" 2>"$dir/err" &
	pid=$!
	trap 'kill -TERM $pid 2>/dev/null; wait $pid; rm -rf "$dir"' EXIT
	for _ in $(seq 500); do
		[ -s "$dir/requests.log" ] && break
		sleep 0.02
	done
	[ -s "$dir/requests.log" ] || fail "no request reached the server"
	run=$(pgrep -P "$pid" | head -n 1)
	wal=$(tr '\0' '\n' <"/proc/$run/cmdline" | sed -n '/^--wal$/{n;p}')
	server=$(pgrep -f "python3 $FAKE_STREAM [0-9]* $dir/requests.log")
	if [ -z "$run" ] || [ -z "$server" ] || [ ! -d "$wal" ]; then
		fail "moeft run '$run', its server '$server', its logs '$wal'"
	fi
	kill -TERM "$pid"
	wait "$pid"
	rc=$?
	[ "$rc" = 143 ] ||
		fail "exit $rc after SIGTERM, want 143 (ended by SIGTERM): $(cat "$dir/err")"
	! kill -0 "$run" 2>/dev/null || fail "moeft run $run still runs"
	! kill -0 "$server" 2>/dev/null || fail "the server $server still runs"
	[ ! -e "${wal%/wal}" ] || fail "${wal%/wal} left behind"
	[ ! -s "$dir/err" ] || fail "messages on stderr: $(cat "$dir/err")"
	;;
*)
	fail "unknown check"
	;;
esac
