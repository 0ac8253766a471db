#!/bin/bash
# kill.sh - kill -9 and restore, over and over: the test serving program
# under the preload (eager and graph mode, one host thread and two, in
# turn) is killed at a random moment (mid-decode, mid-commit, or during a
# restore), `moeft restore -- serve` brings it back, and the
# run it finally completes must print exactly what an uninterrupted run
# prints (every token, the KV pool's final CRC), having recomputed at most
# a window of steps at each kill.
#
# Usage: kill.sh MOEFT LIBMOEFT SERVE
# MOEFT_RESTORE_KILLS (default 50; tests/run gives the sanitizer build 10)
# kills in all; the RPO distribution
# (steps recomputed after each kill) is printed at the end.
set -u

moeft=$1 lib=$2 serve=$3
kills=${MOEFT_RESTORE_KILLS:-${RESTORE_KILLS_DEFAULT:-50}}
unset MOEFT_RESTORE_KILLS	# the preload would warn about it
window=16 steps=160
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT

fail() {
	echo "restore kill.sh: $*" >&2
	exit 1
}

# A random delay in seconds, under $1 milliseconds.
delay() {
	local ms=$((RANDOM % $1))

	printf '%d.%03d' $((ms / 1000)) $((ms % 1000))
}

# The journal's steps: what the killed process had finished.
done_steps() {
	if [ -f "$1" ]; then
		grep -c '^step [0-9]*[ 0-9]*$' "$1" || true
	else
		echo 0
	fi
}

declare -A rpo
total=0
for mode in eager graph; do
	for threads in 1 2; do
		args="--mode=$mode --threads=$threads --steps=$steps"
		"$serve" $args >"$dir/want.$mode.$threads" ||
			fail "$mode, $threads threads: the uninterrupted run failed"
	done
done
# The time of a run under the preload, and of its decode alone (the run
# less one of a single step: the log's creation), to aim the kills.
ms_of() {
	local start

	start=$(date +%s%N)
	rm -f "$dir/time.wal" "$dir/time.wal.kv"
	MOEFT_WAL="$dir/time.wal" LD_PRELOAD="$lib" "$serve" --steps=$1 --journal="$dir/time.j" \
		>/dev/null || fail "a run under the preload failed"
	echo $((($(date +%s%N) - start) / 1000000 + 1))
}
span=$(ms_of $steps)
decode=$((span - $(ms_of 1)))
[ $decode -gt 0 ] || decode=1

i=0
while [ $i -lt "$kills" ]; do
	mode=eager threads=1
	[ $((i % 2)) = 1 ] && mode=graph
	[ $((i / 2 % 2)) = 1 ] && threads=2
	args="--mode=$mode --threads=$threads --steps=$steps"
	wal="$dir/k.wal" journal="$dir/k.journal"
	rm -f "$wal" "$wal.kv" "$journal"
	rm -rf "$wal.restore"
	MOEFT_WAL="$wal" LD_PRELOAD="$lib" "$serve" $args --journal="$journal" \
		>/dev/null 2>"$dir/err" &
	pid=$!
	# One kill in four at any moment from the start; the others once the
	# first step is out, somewhere in the decode.
	if [ $((RANDOM % 4)) != 0 ]; then
		while [ ! -s "$journal" ] && kill -0 $pid 2>/dev/null; do
			sleep 0.001
		done
		sleep "$(delay "$decode")"
	else
		sleep "$(delay "$span")"
	fi
	kill -9 $pid 2>/dev/null
	{ wait $pid; } 2>/dev/null
	i=$((i + 1))
	# Restore until a run completes; some restores are killed too.
	while :; do
		before=$(done_steps "$journal")
		"$moeft" restore --wal "$wal" --preload "$lib" -- "$serve" $args \
			--journal="$journal" >"$dir/out" 2>"$dir/err" &
		pid=$!
		if [ $((RANDOM % 4)) = 0 ] && [ $i -lt "$kills" ]; then
			sleep "$(delay "$span")"
			kill -9 $pid 2>/dev/null
			i=$((i + 1))
		fi
		{ wait $pid; } 2>/dev/null
		status=$?
		# Where this attempt resumed, if it got as far as saying so.
		resumed=$(sed -n 's/.*resume at step \([0-9]*\).*/\1/p' "$dir/err")
		grep -q 'nothing to restore' "$dir/err" && resumed=0
		if [ -n "$resumed" ]; then
			[ "$before" -ge "$resumed" ] ||
				fail "$mode, $threads threads: resumed at step $resumed, but only $before steps had run"
			lost=$((before - resumed))
			# A host wait hands the program no step past a boundary
			# before that window is committed (MOEFT_COMMIT=wait).
			[ $lost -le $window ] || fail "$mode, $threads threads: $lost steps lost, over a window ($window)"
			rpo[$lost]=$((${rpo[$lost]:-0} + 1))
			total=$((total + 1))
		fi
		[ $status = 137 ] && continue
		[ $status = 0 ] || fail "$mode, $threads threads: restore run exited $status: $(cat "$dir/err")"
		cmp -s "$dir/out" "$dir/want.$mode.$threads" ||
			fail "$mode, $threads threads: after restore the output is $(cat "$dir/out"), want $(cat "$dir/want.$mode.$threads")"
		break
	done
done
printf 'restore kill.sh: %d kills, %d restores; steps lost (RPO):' "$kills" "$total"
for k in $(printf '%s\n' "${!rpo[@]}" | sort -n); do
	printf ' %d:%d' "$k" "${rpo[$k]}"
done
printf '\n'
