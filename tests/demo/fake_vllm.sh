#!/bin/sh
# fake_vllm.sh - a stand-in for vLLM's Python, for vllm_check.sh.
#   fake_vllm.sh -c CODE         moeft demo's import check: succeeds, unless
#                                FAKE_VLLM_MODE is "no-import"
#   fake_vllm.sh -m MODULE ... --port P ...
#                                serves tests/tools/fake_stream.py on P
#                                (FAKE_STREAM: its path)
# FAKE_VLLM_DIR: its log and marks.  FAKE_VLLM_MODE: "differ", a second
# start serves another "model" (other tokens); "dies", it exits at once.
set -eu

mode=${FAKE_VLLM_MODE:-}
if [ "$1" = -c ]; then
	[ "$mode" != no-import ] || { echo "ModuleNotFoundError: No module named 'vllm'" >&2; exit 1; }
	exit 0
fi
[ "$mode" != dies ] || { echo "fake_vllm.sh: dying at start" >&2; exit 3; }
port=
while [ $# -gt 0 ]; do
	[ "$1" = --port ] && port=$2
	shift
done
if [ -e "$FAKE_VLLM_DIR/started" ] && [ "$mode" = differ ]; then
	export FAKE_STREAM_SALT=1
fi
: >"$FAKE_VLLM_DIR/started"
exec python3 "$FAKE_STREAM" "$port" "$FAKE_VLLM_DIR/requests.log" "$FAKE_VLLM_DIR/no-crash"
