#!/bin/sh
# check.sh - moeft demo on the CPU fixture.
#   run     the demo serving program crashed and restored: exit 0, the
#           report's lines, RPO within a window, --json's keys and figures
#   differ  a command whose output changes: RESULT DIFFERS, exit 1, the
#           outputs kept; a command that ends before the kill; one that fails
#   usage   every option and argument error: its exact message, exit 2
#   interrupt  SIGTERM to moeft alone mid-run: its child is killed, its
#           directory removed, and it ends by SIGTERM (a shell ignores
#           SIGINT in its background jobs, so that one is not sent)
#
# Usage: check.sh CHECK MOEFT LIBMOEFT SERVE CHANGING
set -u

check=$1 moeft=$2 lib=$3 serve=$4 changing=$5
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT

fail() {
	echo "demo check.sh $check: $*" >&2
	exit 1
}

# expect STATUS MESSAGE ARGS...: moeft demo ARGS exits STATUS, and its
# stderr's first line is MESSAGE.
expect() {
	want_rc=$1 want=$2
	shift 2
	"$moeft" demo "$@" >"$dir/out" 2>"$dir/err"
	rc=$?
	[ "$rc" = "$want_rc" ] || fail "demo $*: exit $rc, want $want_rc: $(cat "$dir/err")"
	got=$(head -n 1 "$dir/err")
	[ "$got" = "$want" ] || fail "demo $*: said '$got', want '$want'"
}

steps=160
model="--mode=graph --seqs=8 --layers=4"
equal="RESULT: the restored run's output equals the uninterrupted run's (every token, KV CRC)"
rto='^RTO: [0-9.]* s to read and verify the log and write the state, [0-9.]* s to copy the KV in;$'
differ='^RESULT: the outputs DIFFER (kept in \(.*\): want, got, restore.err)$'

case $check in
run)
	# shellcheck disable=SC2086 # $model is words
	"$moeft" demo --preload "$lib" --steps $steps -- "$serve" $model >"$dir/report" \
		2>"$dir/err" || fail "exit $?: $(cat "$dir/err")"
	[ ! -s "$dir/err" ] || fail "messages on stderr: $(cat "$dir/err")"
	cat "$dir/report"
	sed -n 1p "$dir/report" | grep -qx "moeft demo: $serve $model, $steps decode steps" ||
		fail "first line: $(sed -n 1p "$dir/report")"
	grep -qx "$equal" "$dir/report" || fail "no RESULT equal line"
	rpo=$(sed -n 's/^RPO: \([0-9]*\) steps lost of [0-9]* decoded (window: 16 steps)$/\1/p' \
		"$dir/report")
	[ -n "$rpo" ] && [ "$rpo" -le 16 ] || fail "RPO '$rpo', want 0 to 16"
	grep -q "$rto" "$dir/report" || fail "no RTO line with both figures"
	grep -q '^  moeft restore: window [0-9]* (steps [0-9]*-[0-9]*), resume at step ' \
		"$dir/report" || fail "no restore line"

	# shellcheck disable=SC2086
	"$moeft" demo --preload "$lib" --steps $steps --json -- "$serve" $model >"$dir/json" \
		2>"$dir/err" || fail "--json: exit $?: $(cat "$dir/err")"
	if ! python3 - "$dir/json" "$serve $model" "$lib" $steps <<'PY'
import json, os, sys
d = json.load(open(sys.argv[1]))
keys = {"status", "result", "cmd", "preload", "steps", "window_steps", "reference_ms",
        "killed_step", "resume_step", "rpo_steps", "restore_offline_s", "restore_copy_s",
        "resumed_run_ms", "redo_ms", "restore_speedup", "kept_dir"}
assert set(d) == keys, sorted(set(d) ^ keys)
assert d["status"] == "ok" and d["result"] == "equal" and d["kept_dir"] is None, d
assert d["cmd"] == sys.argv[2] and d["preload"] == sys.argv[3], d
steps = int(sys.argv[4])
assert d["steps"] == steps and d["window_steps"] == 16, d
# killed once the journal showed 60% of the steps, before the end
assert steps * 6 // 10 <= d["killed_step"] < steps, d
assert 0 < d["resume_step"] <= d["killed_step"], d
assert d["rpo_steps"] == d["killed_step"] - d["resume_step"] <= 16, d
for k in ("reference_ms", "restore_offline_s", "restore_copy_s", "resumed_run_ms",
          "redo_ms", "restore_speedup"):
    assert isinstance(d[k], float) and d[k] > 0, (k, d)
PY
	then
		fail "--json: $(cat "$dir/json")"
	fi
	;;
differ)
	# No CUDA, so no window commits: the restore starts it afresh, and
	# its output (a process id) differs.
	"$moeft" demo --preload "$lib" --steps 40 -- "$changing" >"$dir/report" 2>"$dir/err"
	rc=$?
	[ "$rc" = 1 ] || fail "changing output: exit $rc, want 1: $(cat "$dir/err")"
	[ ! -s "$dir/err" ] || fail "changing output: messages on stderr: $(cat "$dir/err")"
	cat "$dir/report"
	grep -qx '  moeft restore: no committed window: CMD started afresh' "$dir/report" ||
		fail "no fresh-start line"
	kept=$(sed -n "s/$differ/\\1/p" "$dir/report")
	[ -n "$kept" ] || fail "no RESULT DIFFER line"
	for f in want got restore.err; do
		[ -f "$kept/$f" ] || fail "$kept/$f was not kept"
	done
	! cmp -s "$kept/want" "$kept/got" || fail "kept outputs are the same"
	rm -rf "$kept"
	"$moeft" demo --preload "$lib" --steps 40 --json -- "$changing" >"$dir/json" 2>/dev/null
	rc=$?
	[ "$rc" = 1 ] || fail "--json, changing output: exit $rc, want 1"
	kept=$(python3 -c 'import json, sys
d = json.load(open(sys.argv[1]))
assert d["result"] == "differ" and d["rpo_steps"] == d["killed_step"], d
print(d["kept_dir"])' "$dir/json") || fail "--json: $(cat "$dir/json")"
	[ -f "$kept/got" ] || fail "--json: $kept/got was not kept"
	rm -rf "$kept"

	# A command that does fewer steps ends before the kill; one that fails
	# fails without the preload already.
	expect 1 "moeft demo: under the preload, $changing exited with status 0 before the kill, \
at step 0 of 40 (more --steps?); its messages:" \
		--preload "$lib" --steps 40 -- "$changing" --steps=0
	expect 2 "moeft demo: uninterrupted, without the preload, /bin/false exited with status 1; \
its messages:" \
		--preload "$lib" --steps 40 -- /bin/false
	;;
usage)
	printf 'not a library\n' >"$dir/text"
	: >"$dir/empty.wal"
	expect 2 "moeft demo: --steps: 5 is out of range (32 to 1000000)" \
		--preload "$lib" --steps 5 -- "$serve"
	expect 2 "moeft demo: --steps: '1e3' is not a whole number" \
		--preload "$lib" --steps 1e3 -- "$serve"
	expect 2 "moeft demo: --preload $dir/none.so: No such file or directory" \
		--preload "$dir/none.so" -- "$serve"
	expect 2 "moeft demo: --preload $dir/text: not an ELF file" \
		--preload "$dir/text" -- "$serve"
	expect 2 "moeft demo: --preload $serve: not a shared library" --preload "$serve" -- "$serve"
	expect 2 "moeft demo: --wal $dir/no/x.wal: no such directory: $dir/no" \
		--preload "$lib" --wal "$dir/no/x.wal" -- "$serve"
	expect 2 "moeft demo: --wal $dir/text exists and is not empty; refusing to write \
over it" \
		--preload "$lib" --wal "$dir/text" -- "$serve"
	expect 2 "moeft demo: no-such-command: not found in PATH" \
		--preload "$lib" -- no-such-command
	expect 2 "moeft demo: $dir/text: Permission denied" --preload "$lib" -- "$dir/text"
	expect 2 "moeft demo: a command is missing after \"--\"" --preload "$lib" --
	expect 2 "moeft demo: unexpected argument 'serve' (a command goes after \"--\")" \
		--preload "$lib" serve
	expect 2 "moeft demo: unknown option '--bogus'" --bogus
	# Without a command, the default one: this build's moeft-serve, which
	# needs nvcc to be built and a GPU to run.
	"$moeft" demo --preload "$lib" >/dev/null 2>"$dir/err"
	rc=$?
	line=$(head -n 1 "$dir/err")
	case $rc:$line in
	0:*) [ -e /dev/nvidiactl ] || fail "the default command ran without a GPU" ;;
	"2:moeft demo: no serving program: "*"; give one: moeft demo -- CMD [ARGS...]") ;;
	*) fail "no default command: exit $rc, '$line'" ;;
	esac
	"$moeft" demo --help | grep -q -- '-- CMD \[ARGS...\]' || fail "--help shows no usage"
	;;
interrupt)
	# A run long enough to be interrupted in its first phase.
	# shellcheck disable=SC2086
	"$moeft" demo --preload "$lib" --steps 1000000 -- "$serve" $model >"$dir/out" \
		2>"$dir/err" &
	pid=$!
	child="" run=""
	for _ in $(seq 500); do
		child=$(pgrep -P "$pid" | head -n 1)
		# the child's stdout is DIR/want: the demo's directory
		[ -n "$child" ] && run=$(readlink "/proc/$child/fd/1") && [ -n "$run" ] && break
		sleep 0.02
	done
	run=${run%/want}
	[ -d "$run" ] || fail "no child with its output in the demo's directory ('$run')"
	kill -TERM "$pid"
	wait "$pid"
	rc=$?
	[ "$rc" = 143 ] ||
		fail "exit $rc after SIGTERM, want 143 (ended by SIGTERM): $(cat "$dir/err")"
	[ ! -e "$run" ] || fail "$run left behind"
	! kill -0 "$child" 2>/dev/null || fail "child $child still runs"
	[ ! -s "$dir/err" ] || fail "messages on stderr: $(cat "$dir/err")"
	;;
*)
	fail "unknown check"
	;;
esac
