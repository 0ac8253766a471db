#!/bin/sh
# check.sh - runs the test serving program in several configurations and
# compares what they produced: the ground-truth files byte for byte, and
# the token hash and KV CRC of their summary lines.
#
# Usage: check.sh CHECK SERVE            CHECK: modes, threads, kv-layout,
#                                        determinism, shapes, usage
#        check.sh names PTX HOST_C KERNELS_H SERVE_CUDA
set -eu

check=$1
serve=$2
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT

fail() {
	echo "check.sh $check: $*" >&2
	exit 1
}

# run NAME ARGS...: NAME.truth and NAME.out in $dir
run() {
	name=$1
	shift
	"$serve" --truth="$dir/$name.truth" "$@" >"$dir/$name.out" ||
		fail "serve $* exited with status $?"
}

# field NAME KEY: KEY's value in NAME's summary line
field() {
	sed -n "s/.* $2=\([0-9a-f]*\).*/\1/p" "$dir/$1.out"
}

# same A B: runs A and B produced the same truth and the same summary
same() {
	cmp -s "$dir/$1.truth" "$dir/$2.truth" ||
		fail "$1 and $2 wrote different truth files: $(cmp "$dir/$1.truth" "$dir/$2.truth")"
	[ "$(field "$1" token-hash)" = "$(field "$2" token-hash)" ] ||
		fail "$1 and $2 emitted different tokens"
	[ "$(field "$1" kv-crc)" = "$(field "$2" kv-crc)" ] ||
		fail "$1 and $2 left different KV pools"
}

# sane NAME STEPS: the truth has every step, and agrees with stdout
sane() {
	n=$(grep -c '^step ' "$dir/$1.truth")
	[ "$n" -eq "$2" ] || fail "$1: $n steps in the truth, want $2"
	[ -n "$(field "$1" token-hash)" ] || fail "$1: no token hash on stdout"
	grep -q "^token-hash $(field "$1" token-hash)\$" "$dir/$1.truth" ||
		fail "$1: the truth's token hash is not stdout's"
}

# matrix NAME ARGS...: every mode x threads x layout, all alike
matrix() {
	base=$1
	shift
	run "$base" "$@"
	for mode in eager graph; do
		for threads in 1 2; do
			for layout in one per-layer; do
				run "$base-$mode-$threads-$layout" "$@" --mode=$mode \
					--threads=$threads --kv-layout=$layout
				same "$base" "$base-$mode-$threads-$layout"
			done
		done
	done
}

case $check in
modes)
	run eager --mode=eager
	run graph --mode=graph
	sane eager 64
	same eager graph
	;;
threads)
	for mode in eager graph; do
		run "$mode-1" --mode=$mode --threads=1
		run "$mode-2" --mode=$mode --threads=2
		same "$mode-1" "$mode-2"
	done
	;;
kv-layout)
	run one --kv-layout=one --mode=graph
	run per-layer --kv-layout=per-layer --mode=graph
	same one per-layer
	;;
determinism)
	for mode in eager graph; do
		run "$mode-a" --mode=$mode --threads=2 --steps=96 --seqs=12
		run "$mode-b" --mode=$mode --threads=2 --steps=96 --seqs=12
		same "$mode-a" "$mode-b"
	done
	# ... and the output is a function of the model, not a constant
	run seed2 --mode=eager --threads=2 --steps=96 --seqs=12 --seed=2
	[ "$(field eager-a token-hash)" != "$(field seed2 token-hash)" ] ||
		fail "seeds 1 and 2 emitted the same tokens"
	;;
shapes)
	matrix odd --layers=3 --experts=7 --topk=7 --hidden=48 --kv-heads=3 --seqs=5 \
		--steps=40 --vocab=97 --seed=7
	sane odd 40
	matrix tiny --seqs=1 --steps=1 --layers=1 --experts=1 --topk=1 --hidden=1 --kv-heads=1
	sane tiny 1
	matrix wide --seqs=33 --steps=50 --experts=64 --topk=8 --hidden=32 --kv-heads=4
	sane wide 50
	;;
usage)
	for bad in --layers=0 --layers=257 --topk=17 --kv-heads=3 --mode=lazy \
		--kv-layout=two --threads=3 --seed=-1 --steps=1x --hidden= --bogus stray \
		"--seqs=4096 --steps=1000000 --layers=256 --hidden=8192"; do
		# unquoted: the last case is several words
		if "$serve" $bad >"$dir/out" 2>&1; then
			fail "serve $bad succeeded"
		else
			status=$?
		fi
		[ "$status" -eq 2 ] || fail "serve $bad: status $status, want 2"
		[ -s "$dir/out" ] || fail "serve $bad: no message"
	done
	"$serve" --help | grep -q -- '--kv-layout' || fail "--help does not list the options"
	;;
names)
	# The fixture build registers its kernels under names of its own
	# writing; they must be the ones nvcc gives the CUDA build's kernels,
	# or the vllm profile would match one build and not the other.
	ptx=$2 host_c=$3 kernels_h=$4 serve_cuda=$5
	sed -n 's/^\.visible \.entry \([A-Za-z0-9_]*\)(.*/\1/p' "$ptx" | sort >"$dir/device"
	{
		sed -n 's/^FIXTURE_KERNEL([a-z_]*, "\([A-Za-z0-9_]*\)".*/\1/p' "$host_c"
		sed -n 's/^#define SERVE_[A-Z_]*_NAME "\([A-Za-z0-9_]*\)"$/\1/p' "$kernels_h"
	} | sort >"$dir/host"
	[ -s "$dir/device" ] || fail "no kernels in $ptx"
	diff "$dir/device" "$dir/host" >&2 || fail "device and fixture kernel names differ"
	# The preload interposes libcudart: a static one would hide every call.
	nm -D "$serve_cuda" | grep -q ' U cudaLaunchKernel' ||
		fail "$serve_cuda does not link libcudart dynamically"
	;;
*)
	fail "unknown check"
	;;
esac
