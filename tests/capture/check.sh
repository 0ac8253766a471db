#!/bin/sh
# check.sh - routing capture under the test serving program, on the fixture.
#
# Usage: check.sh LIBMOEFT SERVE CHECK_ROUTING
# For eager and graph mode, --threads=1 and 2: the run under the preload
# prints what the plain run prints, captures every routing launch the truth
# lists (check_routing) with no ring gap; and with the capture kernels
# missing from the fixture, the preload fails open: same output, one line.
set -eu

lib=$1 serve=$2 checker=$3
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT

fail() {
	echo "capture check.sh: $*" >&2
	exit 1
}

summary() {
	sed -n "s/.*moeft: summary:.* $2=\([0-9]*\).*/\1/p" "$1"
}

for mode in eager graph; do
	for threads in 1 2; do
		name=$mode-$threads
		args="--mode=$mode --threads=$threads"
		"$serve" $args >"$dir/$name.plain" || fail "$name: plain run failed"
		MOEFT_WAL="$dir/$name.wal" MOEFT_WAL_SIZE=16M MOEFT_LOG=info LD_PRELOAD="$lib" \
			"$serve" $args --truth="$dir/$name.truth" >"$dir/$name.out" \
			2>"$dir/$name.err" || fail "$name: run under the preload failed"
		cmp -s "$dir/$name.plain" "$dir/$name.out" || fail "$name: output differs"
		[ "$(summary "$dir/$name.err" gaps)" = 0 ] || fail "$name: ring gaps"
		[ "$(summary "$dir/$name.err" captured)" -gt 0 ] || fail "$name: nothing captured"
		"$checker" "$dir/$name.truth" "$dir/$name.wal" "$mode" ||
			fail "$name: the log's routing is not the truth's"

		FIXTURE_NO_MOEFT_KERNELS=1 MOEFT_WAL="$dir/$name-off.wal" MOEFT_WAL_SIZE=16M \
			LD_PRELOAD="$lib" "$serve" $args >"$dir/$name.off" 2>"$dir/$name.off.err" ||
			fail "$name: run without capture kernels failed"
		cmp -s "$dir/$name.plain" "$dir/$name.off" || fail "$name: fail-open output differs"
		[ "$(grep -c 'routing capture: .*capture stopped' "$dir/$name.off.err")" = 1 ] ||
			fail "$name: want one 'capture stopped' line, got: $(cat "$dir/$name.off.err")"
	done
done
