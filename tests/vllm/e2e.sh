#!/usr/bin/env bash
# tests/vllm/e2e.sh - moeft under a real vLLM (CPU build) on a tiny random
# Qwen3-MoE model: crash the server with kill -9 mid-decode, bring it back
# with moeft restore, resubmit the requests it was running, and check that
# every request's tokens equal an uninterrupted run's.
#
# Usage: tests/vllm/e2e.sh [BUILD_DIR]
#   BUILD_DIR (or MOEFT_E2E_BUILD; default build) holds tools/moeft and
#   preload/libmoeft.so.  The environment is tools/setup.sh --vllm's.
#
# Phases, each printed with its time:
#   a  baseline: a server without moeft; 4 concurrent greedy requests
#      (distinct token-id prompts of 41-71 tokens, MAX_TOKENS each)
#   b  crash: the same server under the preload with moeft.vllm's
#      MoeftConnector; the same requests, streamed; kill -9 of every process
#      of the server once each has AFTER tokens; the tokens seen before the
#      kill equal the baseline's; the log directory verifies; what the
#      server left in /dev/shm stays there (c checks it is removed)
#   c  restore: moeft restore --wal DIR -- <the same server>, then moeft
#      resubmit: every request's tokens equal the baseline's, and its
#      prompt and the tokens before the restored window came from the
#      restored KV (cached_tokens >= prompt + resumed_from - one block);
#      moeft restore alone removed every file b's server left in /dev/shm
#   d  a second crash (what it leaves in /dev/shm removed by the second
#      restore, as in c): restore (a copy of) b's logs, resubmit, kill the
#      server an eighth of the way through what the requests had left
#      (from when its log says they resumed, tests/vllm/e2e.py kill-at),
#      restore again, resubmit: as c.  When the kill came too late
#      (resubmit had finished), once more on another copy, at a 32nd
#   e  damage: flip bits in both store copies of one KV chunk of a
#      request's block (in a copy of b's logs); the restore says the chunk
#      is lost, and resubmission recomputes that request from the damaged
#      block on (cached_tokens no more than the blocks before it) with the
#      same tokens
#   f  moeft run --gateway: the server under moeft run with the connector,
#      8 streaming clients through moeft gateway (4 completions of token-id
#      prompts, 4 chats of those ids as words; GMAX
#      tokens each), once uninterrupted and once with the server's process
#      group killed twice (at AFTER and 2 x AFTER tokens a client); moeft
#      run restores it each time: every client gets the uninterrupted
#      run's tokens and text, status 200, no error, and the gateway's lines
#      say that the restarted server had what it was sent again cached
#      but what the last window and two blocks may leave out
#      (tests/vllm/gateway.py); then SIGTERM to moeft run leaves no process
#      and none of the server's shared memory
#   g  moeft demo --engine vllm, as the README runs it (tools/demo.sh
#      --engine vllm): exit 0, every client's text equal, all 8 requests
#      sent on with what the restarted server computed again within a
#      window, two blocks and a token each, and moeft run stopped leaving
#      none of the server's processes
# Each check prints "ok - NAME" or "not ok - NAME: why"; the last line is
# "vllm e2e: N passed, N failed"; the exit status is 0 when none failed.
#
# Environment: MOEFT_E2E_PHASES (default "a b c d e f g"; b needs a, c-e need
# b), MOEFT_E2E_MAX_TOKENS (1900), MOEFT_E2E_AFTER (120), MOEFT_E2E_GMAX (1700), MOEFT_E2E_MODEL
# (the model's directory, made or reused: ~/.cache/moeft/tiny-moe),
# MOEFT_E2E_KEEP=1 (keep the work directories; they are kept anyway when a
# check fails), MOEFT_E2E_KV_CONFIG (the --kv-transfer-config JSON, to try
# the script with another connector).
set -uo pipefail
export LC_NUMERIC=C  # $EPOCHREALTIME with a decimal point
cd "$(dirname "$0")/../.."
root=$PWD

build=${1:-${MOEFT_E2E_BUILD:-build}}
phases=" ${MOEFT_E2E_PHASES:-a b c d e f g} "
# Long enough that a kill aimed by what the clients saw lands mid-decode
# even when a client sees its tokens seconds after the server made them
# (seen on 2 cores: a step every 5 ms, one client 4 s behind the others).
max_tokens=${MOEFT_E2E_MAX_TOKENS:-1900}
after=${MOEFT_E2E_AFTER:-120}
gmax=${MOEFT_E2E_GMAX:-1700}
cache=${XDG_CACHE_HOME:-$HOME/.cache}/moeft
model=${MOEFT_E2E_MODEL:-$cache/tiny-moe}
kv_config=${MOEFT_E2E_KV_CONFIG:-'{"kv_connector":"MoeftConnector","kv_connector_module_path":"moeft.vllm","kv_role":"kv_both"}'}
blocks=512        # --num-gpu-blocks-override: a 32 MiB KV cache (8 x 1811 tokens)
block_size=32
keep=${MOEFT_E2E_KEEP:-0}
# The preload warns about every MOEFT_ variable it does not know: the
# tests' own go no further than here.
unset MOEFT_E2E_BUILD MOEFT_E2E_PHASES MOEFT_E2E_MAX_TOKENS MOEFT_E2E_AFTER MOEFT_E2E_GMAX \
	MOEFT_E2E_MODEL \
	MOEFT_E2E_KV_CONFIG MOEFT_E2E_KEEP MOEFT_REQUIRE_VLLM MOEFT_FUZZ_SECONDS

passed=0
failed=0
t_start=$SECONDS
ok() { echo "ok - $1"; passed=$((passed + 1)); }
notok() { echo "not ok - $1: $2"; failed=$((failed + 1)); }
finish() {
	echo "vllm e2e: total $((SECONDS - t_start)) s"
	echo "vllm e2e: $passed passed, $failed failed"
	exit $((failed > 0))
}
phase_t=0
phase() { printf '\n--- %s\n' "$1"; phase_t=$SECONDS; }
took() { echo "    ($1: $((SECONDS - phase_t)) s)"; }
has() { [[ $phases == *" $1 "* ]]; }

if ! env=$(tools/setup.sh --vllm-env); then
	notok "environment" "no vLLM environment (tools/setup.sh --vllm makes it)"
	finish
fi
unset MOEFT_VLLM_ENV
py=$env/bin/python
moeft=$root/$build/tools/moeft
preload=$root/$build/preload/libmoeft.so
[[ $build == /* ]] && moeft=$build/tools/moeft preload=$build/preload/libmoeft.so
if [[ ! -x $moeft || ! -f $preload ]]; then
	notok "build" "no $moeft or $preload (build $build first)"
	finish
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/moeft-vllm-e2e.XXXXXX")
# The logs: in shared memory, as the preload's default directory is.
shm=$(mktemp -d /dev/shm/moeft-vllm-e2e.XXXXXX)
port=$("$py" tests/vllm/e2e.py port)
url=http://127.0.0.1:$port
helper() { "$py" "$root/tests/vllm/e2e.py" "$@"; }
echo "vllm e2e: env $env, build $build, work $work, logs $shm, port $port"
# Each server maps about 400 MiB of /dev/shm (torch's shared memory), its
# logs and KV store take about 100 MiB more.
shm_free=$(df --output=avail -m /dev/shm | tail -n 1)
((shm_free >= 1024)) ||
	echo "vllm e2e: warning: only $shm_free MiB free in /dev/shm; vLLM may fail for want of it"

# The running server: PID@START (e2e.py ident), empty when none.
running=
# Kill what is left of it on the way out.
cleanup() {
	[[ -n $running ]] && helper kill "$running" "$work/shm-before" >/dev/null 2>&1
	# What a kill left to a restore that failed or never came.
	cat "$work"/shm-left* 2>/dev/null | grep -E '^(psm_|sem\.mp-)[^/]+$' |
		while read -r name; do rm -f "/dev/shm/$name"; done
	if ((failed)) || [[ $keep == 1 ]]; then
		echo "vllm e2e: kept $work and $shm"
	else
		rm -rf "$work" "$shm"
	fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# PYTHONUNBUFFERED: the server's log lines are there when written (e2e.py
# kill-at waits for one).
export PYTHONUNBUFFERED=1
export VLLM_TARGET_DEVICE=cpu VLLM_CPU_KVCACHE_SPACE=1 VLLM_CPU_OMP_THREADS_BIND=0 \
	HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 VLLM_NO_USAGE_STATS=1 DO_NOT_TRACK=1
# The same server every time (the connector aside in phase a).
server=("$py" -m vllm.entrypoints.openai.api_server --model "$model" --port "$port"
	--dtype float32 --enforce-eager --block-size $block_size --seed 0
	--num-gpu-blocks-override $blocks --max-model-len 2048
	--enable-prompt-tokens-details)
connector=(--kv-transfer-config "$kv_config")

# start LOG [VAR=VALUE...] -- CMD...: start CMD with those variables in a
# session and process group of its own (setsid; from a subshell, which
# leads no group, so setsid does not fork and its pid leads the group);
# wait for it to serve.
start() {
	local log=$1 vars=()
	shift
	while [[ $1 != -- ]]; do vars+=("$1"); shift; done
	shift
	helper shm-list "$work/shm-before"
	# Unbuffered: vLLM's processes log to stdout, which Python buffers
	# when it is a file, and phase d times its kill from the log's lines.
	( exec setsid env PYTHONUNBUFFERED=1 "${vars[@]}" "$@" >"$log" 2>&1 ) &
	local pid=$!
	# Not a job: no "Killed" line from this shell when it is killed (it
	# is still reaped).
	disown "$pid"
	running=$(helper ident "$pid")
	if helper health "$url" "$pid" 400; then
		return 0
	fi
	echo "    last lines of $log:"
	tail -n 25 "$log" | sed 's/^/    | /'
	stop
	return 1
}
# Kill the server (or what is left of it) and forget it.
stop() { helper kill "$running" "$work/shm-before"; running=; }

# moeft resubmit, being written: say so instead of running what is not there.
have_resubmit() {
	"$moeft" resubmit --help >/dev/null 2>&1 && return 0
	echo "    moeft resubmit is not in this build ($moeft resubmit --help fails):" \
		"the restored requests cannot be resubmitted yet"
	return 1
}

# restore_and_check NAME WAL LOG [DAMAGE]: restore WAL online into the same
# server, resubmit, compare with the baseline.
restore_and_check() {
	local name=$1 wal=$2 log=$3 damage=${4:-} t rc out
	out=$work/resubmit-${name// /-}
	t=$SECONDS
	if ! start "$log" -- "$moeft" restore --wal "$wal" --preload "$preload" -- \
			"${server[@]}" "${connector[@]}"; then
		notok "$name" "the restored server did not come up (log $log)"
		return 1
	fi
	echo "    restored server up in $((SECONDS - t)) s; the restore said:"
	grep -E '^moeft( restore)?:' "$log" | head -n 12 | sed 's/^/    | /'
	if ! have_resubmit; then
		notok "$name" "moeft resubmit missing"
		stop
		return 1
	fi
	t=$EPOCHREALTIME
	"$moeft" resubmit --wal "$wal" --server "$url" --json >"$out.json" 2>"$out.err"
	rc=$?
	t=$(awk -v a="$t" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.2f", b - a }')
	echo "    moeft resubmit exited $rc in $t s"
	((rc == 0)) && echo "$t" >"$out.secs"
	sed 's/^/    | /' "$out.err" | tail -n 20
	stop
	if ((rc != 0)); then
		notok "$name" "moeft resubmit exited $rc"
		return 1
	fi
	if helper check "$work/baseline.json" "$out.json" $block_size $damage; then
		ok "$name"
	else
		notok "$name" "the resubmitted requests differ (above)"
		return 1
	fi
}

# The model: made once, reused while its stamp matches.
phase "model"
mkdir -p "$(dirname "$model")"
if ! "$py" python/tests/make_tiny_moe.py "$model" 2>"$work/model.err"; then
	cat "$work/model.err"
	notok "model" "could not make the tiny model"
	finish
fi
took model
helper prompts "$work/prompts.json"

# a. The uninterrupted run.
if has a; then
	phase "a: baseline (no moeft)"
	if start "$work/server-a.log" -- "${server[@]}" &&
	   helper baseline "$url" "$work/prompts.json" "$max_tokens" "$work/baseline.json"; then
		ok "baseline"
	else
		notok "baseline" "see above (log $work/server-a.log)"
	fi
	stop
	took "a"
fi

# b. The crash.
wal=$shm/wal
b_ok=0
if has b; then
	phase "b: crash under the preload and the connector"
	if [[ ! -f $work/baseline.json ]]; then
		notok "crash" "no baseline (phase a)"
	elif [[ $kv_config == *moeft.vllm* ]] &&
	     ! "$py" -c 'import importlib.util as u, sys; sys.exit(not u.find_spec("moeft.vllm"))' \
			2>/dev/null; then
		notok "crash" "no moeft.vllm in $env (tools/setup.sh --vllm installs python/)"
	elif ! start "$work/server-b.log" MOEFT_WAL="$wal/" MOEFT_WAL_SIZE=64M \
			LD_PRELOAD="$preload" -- "${server[@]}" "${connector[@]}"; then
		notok "crash" "the server did not come up under the preload (log $work/server-b.log)"
	elif ! E2E_LEAVE_SHM=$work/shm-left helper crash "$url" "$work/prompts.json" \
			"$max_tokens" "$after" "$running" "$work/shm-before" "$work/crash.json"; then
		running=
		notok "crash" "no kill mid-decode (above)"
	else
		running=
		echo "    the log directory after the kill:"
		"$moeft" ls "$wal" 2>&1 | sed 's/^/    | /'
		if ! helper prefix "$work/baseline.json" "$work/crash.json"; then
			notok "crash" "the server's output under moeft differs from the baseline's"
		elif ! "$moeft" verify --wal "$wal" >"$work/verify-b.txt" 2>&1; then
			sed 's/^/    | /' "$work/verify-b.txt"
			notok "crash" "moeft verify finds the logs damaged or unreadable"
		else
			ok "crash"
			b_ok=1
			# d and e start from copies of the crashed state.
			has d && cp -a "$wal" "$shm/wal-d1" && cp -a "$wal" "$shm/wal-d2"
			has e && cp -a "$wal" "$shm/wal-e"
		fi
	fi
	took "b"
fi

# c. Restore and resubmit.
if has c; then
	phase "c: restore and resubmit"
	if ((b_ok)); then
		restore_and_check restore "$wal" "$work/server-c.log"
		# The kill in b left the server's files in /dev/shm: moeft
		# restore, alone, removed them by the preload's lists.
		if helper shm-gone "$work/shm-left" "$work/server-c.log"; then
			ok "restore cleans /dev/shm"
		else
			notok "restore cleans /dev/shm" "see above"
		fi
	else
		notok "restore" "no crashed state (phase b)"
	fi
	took "c"
fi

# d. A second crash, during the resubmission, restored the same way.
# second_crash TRY PART: restore a copy of b's logs, kill the server 1/PART
# of the way through the resubmission, restore again, check.  0 passed, 1
# failed, 2 the kill came too late (the requests had finished).
second_crash() {
	local wal=$shm/wal-d$1 rc resub killer i
	if ! start "$work/server-d$1-1.log" -- "$moeft" restore --wal "$wal" --preload "$preload" -- \
			"${server[@]}" "${connector[@]}"; then
		notok "second crash" "the restored server did not come up (log $work/server-d$1-1.log)"
		return 1
	fi
	# 1/PART of the way through what the restored requests had left (the
	# restore's directory says what), from when the server's log says
	# they resumed; the killer watches before the requests start.
	E2E_LEAVE_SHM=$work/shm-left-d$1 helper kill-at "$wal" "$max_tokens" "$work/baseline.json" \
		"$work/server-d$1-1.log" "$running" "$work/shm-before" "$2" "$work/killer-d$1" &
	killer=$!
	for ((i = 0; i < 600; i++)); do
		[[ -e $work/killer-d$1 ]] && break
		kill -0 "$killer" 2>/dev/null || break
		sleep 0.1
	done
	"$moeft" resubmit --wal "$wal" --server "$url" --json \
		>"$work/resubmit-d$1-1.json" 2>"$work/resubmit-d$1-1.err" &
	resub=$!
	wait "$killer"
	rc=$?
	running=
	if ((rc != 0)); then
		wait "$resub"
		notok "second crash" "could not time the kill (above)"
		return 1
	fi
	wait "$resub"
	rc=$?
	echo "    moeft resubmit, cut by the kill, exited $rc"
	if ((rc == 0)); then
		echo "    the resubmitted requests finished before the kill (a busy machine?)"
		return 2
	fi
	echo "    the first restore resumed at $(resume_steps "$wal.restore")"
	restore_and_check "second crash" "$wal" "$work/server-d$1-2.log" || return 1
	echo "    the second at $(resume_steps "$wal.restore")"
	# The restored server's own leftovers, removed by the second restore.
	if helper shm-gone "$work/shm-left-d$1" "$work/server-d$1-2.log"; then
		ok "second crash: restore cleans /dev/shm"
	else
		notok "second crash: restore cleans /dev/shm" "see above"
	fi
}
resume_steps() { cat "$1"/*/manifest.json | grep -o '"resume_step": *[0-9]*' | sort -u | tr '\n' ' '; }

if has d; then
	phase "d: a second crash after a restore"
	if ((!b_ok)); then
		notok "second crash" "no crashed state (phase b)"
	elif ! have_resubmit; then
		notok "second crash" "moeft resubmit missing"
	else
		second_crash 1 8
		if (($? == 2)); then
			echo "    once more, on the other copy of b's logs, killed sooner"
			second_crash 2 32
			(($? == 2)) &&
				notok "second crash" "the resubmitted requests finished before the kill, twice"
		fi
	fi
	took "d"
fi

# e. A damaged KV chunk.
if has e; then
	phase "e: a damaged KV chunk"
	if ((!b_ok)); then
		notok "damaged chunk" "no crashed state (phase b)"
	elif ! helper damage "$moeft" "$shm/wal-e" "$model" $blocks "$work" "$work/damage.json"; then
		notok "damaged chunk" "could not damage a chunk of a request's block"
	elif restore_and_check "damaged chunk" "$shm/wal-e" "$work/server-e.log" \
			"$work/damage.json"; then
		if ! grep -qiE 'chunk.* lost|lost .*chunk' "$work/server-e.log"; then
			notok "damaged chunk: reported" "the restore did not say that a chunk was lost"
		else
			ok "damaged chunk: reported"
		fi
	fi
	took "e"
fi

# f. moeft run --gateway: clients that do not notice two crashes.
if has f; then
	phase "f: moeft run --gateway, 8 streaming clients (4 chats), two crashes"
	gport=$("$py" tests/vllm/e2e.py port)
	gurl=http://127.0.0.1:$gport
	gw() { "$py" "$root/tests/vllm/gateway.py" "$@"; }
	helper prompts "$work/prompts8.json" 8
	helper shm-list "$work/shm-before"
	( exec setsid "$moeft" run --wal "$shm/wal-f" --preload "$preload" \
		--gateway "127.0.0.1:$gport" -- "${server[@]}" "${connector[@]}" \
		>"$work/run-f.log" 2>&1 ) &
	rpid=$!
	disown "$rpid"
	running=$(helper ident "$rpid")
	if ! helper health "$gurl" "$rpid" 400; then
		notok "gateway: two crashes" "the server under moeft run did not come up"
		tail -n 25 "$work/run-f.log" | sed 's/^/    | /'
	elif ! gw clients "$gurl" "$work/prompts8.json" $gmax "$work/gw-base.json"; then
		notok "gateway: two crashes" "the uninterrupted run through the gateway failed"
	elif ! gw clients "$gurl" "$work/prompts8.json" $gmax "$work/gw-got.json" $after \
			"$rpid" 2; then
		notok "gateway: two crashes" "the clients failed (above)"
	else
		grep -E '^moeft (run|restore):' "$work/run-f.log" | head -n 16 | sed 's/^/    | /'
		if gw check "$work/gw-base.json" "$work/gw-got.json" "$work/run-f.log" $block_size \
				16 2; then
			ok "gateway: two crashes"
		else
			notok "gateway: two crashes" "(above)"
		fi
	fi
	kill -TERM "$rpid" 2>/dev/null
	if gw stopped "${running%@*}" "$work/shm-before" 120; then
		ok "moeft run: SIGTERM"
		running=
	else
		notok "moeft run: SIGTERM" "(above)"
	fi
	took "f"
fi

# g. The README's main job on vLLM: moeft demo --engine vllm.
if has g; then
	phase "g: moeft demo --engine vllm (tools/demo.sh)"
	MOEFT_DEMO_MODEL=$model tools/demo.sh --engine vllm "$build" >"$work/demo.out" \
		2>"$work/demo.err"
	rc=$?
	sed 's/^/    | /' "$work/demo.out"
	# per request: the last window, two blocks and a token (as phase f)
	bound=$((8 * (2 * block_size + 16 + 1)))
	sent=$(sed -n 's/^  the gateway sent 8 requests on: \([0-9]*\) prompt tokens sent again, \([0-9]*\) of them cached;$/\1 \2/p' "$work/demo.out")
	if [ $rc != 0 ]; then
		notok "demo --engine vllm" "exit $rc"
		sed 's/^/    | /' "$work/demo.err"
	elif ! grep -qx "RESULT: every client's text equals the uninterrupted pass's (8 of 8), status 200, no error" "$work/demo.out" ||
		! grep -qx "STOP: SIGTERM to moeft run: it ended; 0 of the server's processes left" "$work/demo.out"; then
		notok "demo --engine vllm" "no RESULT or STOP line of success"
	elif [ -z "$sent" ] || [ $(( ${sent% *} - ${sent#* } )) -gt $bound ]; then
		notok "demo --engine vllm" "sent again and cached '$sent': more than $bound computed again"
	else
		ok "demo --engine vllm"
	fi
	took "g"
fi

finish
