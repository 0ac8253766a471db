#!/bin/sh
# faults.sh - what a running server gets from moeft's files, done for real:
# the log, then the KV store, truncated to nothing mid-run (the process is
# stopped, the file cut, the process continued); a log path pre-created
# writable by others; the application's own SIGBUS; a capture ring too
# small for the routing, and one the driver pins less of.
#
# Usage: faults.sh LIBMOEFT SERVE SIGBUS
# A cut file: the run ends with status 0 and the plain run's output, and
# stderr holds exactly the one line saying capture stopped.  A hostile log:
# one line, the run un-instrumented, the file untouched.  The own SIGBUS
# kills the program by SIGBUS, or reaches its own handler.
set -eu

lib=$1 serve=$2 sigbus=$3
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
steps=1000

fail() {
	echo "capture faults.sh: $*" >&2
	exit 1
}

"$serve" --steps=$steps >"$dir/want" || fail "the plain run failed"

# cut NAME FILE: run under the preload, cut FILE (the log or its KV store)
# to 0 bytes once 32 steps are done, check the run and its one line.
cut() {
	name=$1 file=$2
	rm -f "$dir/$name.wal" "$dir/$name.wal.kv" "$dir/$name.j"
	MOEFT_WAL="$dir/$name.wal" LD_PRELOAD="$lib" "$serve" --steps=$steps \
		--journal="$dir/$name.j" >"$dir/$name.out" 2>"$dir/$name.err" &
	pid=$!
	until [ -f "$dir/$name.j" ] && [ "$(wc -l <"$dir/$name.j")" -ge 32 ]; do
		kill -0 $pid 2>/dev/null || fail "$name: the run ended before the cut"
		sleep 0.01
	done
	kill -STOP $pid
	done=$(wc -l <"$dir/$name.j")
	[ "$done" -lt $((steps - 64)) ] || fail "$name: $done steps done before the cut"
	truncate -s 0 "$file"
	kill -CONT $pid
	rc=0
	wait $pid || rc=$?
	[ $rc = 0 ] || fail "$name: status $rc (stderr: $(cat "$dir/$name.err"))"
	cmp -s "$dir/want" "$dir/$name.out" || fail "$name: output differs"
	printf 'moeft: %s: truncated under this process (SIGBUS in its mapping); %s\n' \
		"$file" "capture stopped, running un-instrumented" >"$dir/$name.want-err"
	cmp -s "$dir/$name.want-err" "$dir/$name.err" ||
		fail "$name: stderr is not the one line: $(cat "$dir/$name.err")"
}

cut log "$dir/log.wal"
cut kv "$dir/kv.wal.kv"

# A log path another user could have made first, empty and writable by
# others: the server runs un-instrumented after one line, and the file is
# untouched (it used to become the log, for its maker to read).
: >"$dir/hostile.wal"
chmod 0666 "$dir/hostile.wal"
MOEFT_WAL="$dir/hostile.wal" LD_PRELOAD="$lib" "$serve" --steps=$steps \
	>"$dir/hostile.out" 2>"$dir/hostile.err" || fail "hostile log: the run failed"
cmp -s "$dir/want" "$dir/hostile.out" || fail "hostile log: output differs"
printf 'moeft: cannot open the log: %s: %s; running un-instrumented\n' "$dir/hostile.wal" \
	"writable by group or others (mode 0666); refusing to use it: others could read or change it" \
	>"$dir/hostile.want-err"
cmp -s "$dir/hostile.want-err" "$dir/hostile.err" ||
	fail "hostile log: stderr is not the one line: $(cat "$dir/hostile.err")"
[ ! -s "$dir/hostile.wal" ] || fail "hostile log: the file was written"
[ ! -e "$dir/hostile.wal.kv" ] || fail "hostile log: a KV store was made beside it"

# The application's own SIGBUS, outside moeft's mappings: its disposition
# (death by SIGBUS: status 128 + 7) or its own handler, as without moeft.
# A sanitizer build's runtime would be the program's first handler: off.
ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}handle_sigbus=0
export ASAN_OPTIONS
rc=0
MOEFT_WAL="$dir/own.wal" LD_PRELOAD="$lib" "$sigbus" "$dir/own.page" default \
	2>"$dir/own.err" || rc=$?
[ $rc = 135 ] || fail "own SIGBUS: status $rc, not death by SIGBUS (135): $(cat "$dir/own.err")"
rc=0
MOEFT_WAL="$dir/own.wal" LD_PRELOAD="$lib" "$sigbus" "$dir/own.page" handler \
	2>"$dir/own.err" || rc=$?
[ $rc = 42 ] || fail "own SIGBUS, own handler: status $rc: $(cat "$dir/own.err")"
[ "$(cat "$dir/own.err")" = "sigbus: own handler" ] ||
	fail "own SIGBUS, own handler: stderr: $(cat "$dir/own.err")"

# A capture ring too small for the routing (a prefill of 1024 sequences
# appends entries larger than 64 KiB): the run's output as without moeft,
# one line naming MOEFT_RING; with the default ring, not a line.
big="--seqs=1024 --topk=8 --steps=40"
"$serve" $big >"$dir/big.want" || fail "small ring: the plain run failed"
for ring in 64K ""; do
	MOEFT_RING=$ring MOEFT_WAL="$dir/ring$ring.wal" LD_PRELOAD="$lib" "$serve" $big \
		>"$dir/ring.out" 2>"$dir/ring.err" || fail "ring '$ring': the run failed"
	cmp -s "$dir/big.want" "$dir/ring.out" || fail "ring '$ring': output differs"
	if [ -n "$ring" ]; then
		[ "$(wc -l <"$dir/ring.err")" = 1 ] && grep -qE "^moeft: capture: the ring of \
65536 bytes was full: [1-9][0-9]* routing entries dropped, their window is flagged \
routing-gap \(a restore refuses it\); give MOEFT_RING more \(a power of two up to 1G\)$" \
			"$dir/ring.err" || fail "small ring: stderr: $(cat "$dir/ring.err")"
	else
		[ ! -s "$dir/ring.err" ] || fail "default ring: stderr: $(cat "$dir/ring.err")"
	fi
done
# Pinned memory short (the fixture pins 3 MiB at most): a smaller ring,
# one line, the run's output as without moeft.
FIXTURE_PINNED_MAX=$((3 << 20)) MOEFT_WAL="$dir/short.wal" LD_PRELOAD="$lib" "$serve" $big \
	>"$dir/ring.out" 2>"$dir/ring.err" || fail "short pinned memory: the run failed"
cmp -s "$dir/big.want" "$dir/ring.out" || fail "short pinned memory: output differs"
[ "$(cat "$dir/ring.err")" = "moeft: capture: could not pin 67108864 bytes for the ring \
(MOEFT_RING); using 2097152: routing is dropped sooner when moeft's thread falls behind" ] ||
	fail "short pinned memory: stderr: $(cat "$dir/ring.err")"
echo "capture faults.sh: log cut, KV store cut, hostile log, own SIGBUS, small ring, short" \
	"pinned memory: ok"
