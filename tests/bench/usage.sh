#!/bin/sh
# usage.sh - 'moeft bench launch' and 'moeft bench window' refuse what
# they cannot run: each piece missing or wrong, with its exact message and
# exit status 2.
#
# Usage: usage.sh MOEFT LIBMOEFT FIXTURE_DIR LAUNCH_BENCH SERVE
set -u

moeft=$1 lib=$2 fixture=$3 bench=$4 serve=$5
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT

# expect MESSAGE ARGS...: 'moeft bench $what ARGS' exits 2 and says
# MESSAGE first.
what=launch
expect() {
	want=$1
	shift
	"$moeft" bench "$what" "$@" >/dev/null 2>"$dir/err"
	rc=$?
	got=$(head -n 1 "$dir/err")
	[ "$rc" = 2 ] && [ "$got" = "moeft bench: $want" ] || {
		echo "bench usage.sh: $what $*: exit $rc, '$got'; want 2, 'moeft bench: $want'" >&2
		exit 1
	}
}

printf 'text\n' >"$dir/text"
all="--fixture $fixture --bench $bench --serve $serve"
# shellcheck disable=SC2086 # $all is words (the build's paths have no spaces)
{
	expect "--fixture DIR is required (the CPU fixture's libraries)" --preload "$lib" \
		--bench "$bench" --serve "$serve"
	expect "--fixture $dir: no libcudart.so.13 there" --preload "$lib" --fixture "$dir" \
		--bench "$bench" --serve "$serve"
	expect "--bench PROG is required (the launch micro-benchmark)" --preload "$lib" \
		--fixture "$fixture" --serve "$serve"
	expect "--bench $dir/none: No such file or directory" --preload "$lib" \
		--fixture "$fixture" --bench "$dir/none" --serve "$serve"
	expect "--serve PROG is required (the serving program)" --preload "$lib" \
		--fixture "$fixture" --bench "$bench"
	expect "--serve $dir/text: Permission denied" --preload "$lib" --fixture "$fixture" \
		--bench "$bench" --serve "$dir/text"
	expect "--preload $dir/text: not an ELF file" --preload "$dir/text" $all
	expect "--preload $serve: not a shared library" --preload "$serve" $all
	expect "--launches: 10 is out of range (1000 to 100000000)" --preload "$lib" $all \
		--launches 10
	expect "--steps: 'many' is not a whole number" --preload "$lib" $all --steps many
}
what=window
all="--fixture $fixture --serve $serve"
# shellcheck disable=SC2086 # as above
{
	expect "--fixture DIR is required (the CPU fixture's libraries)" --preload "$lib" \
		--serve "$serve"
	expect "--serve PROG is required (the serving program)" --preload "$lib" \
		--fixture "$fixture"
	expect "--pool-mib: 4 is out of range (8 to 16384)" --preload "$lib" $all --pool-mib 4
	expect "--windows: 1 is out of range (2 to 4096)" --preload "$lib" $all --windows 1
	expect "--windows x --window: 1064960 steps, the serving program takes at most 1000000" \
		--preload "$lib" $all --windows 4095 --window 260
	expect "unexpected argument 'extra'" --preload "$lib" $all extra
}
