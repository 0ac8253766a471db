#!/bin/sh
# check.sh - runs the test serving program in several configurations and
# compares what they produced: the ground-truth files byte for byte, and
# the token hash and KV CRC of their summary lines.
#
# Usage: check.sh CHECK SERVE            CHECK: modes, threads, kv-layout,
#                                        determinism, shapes, usage, resume
#        check.sh names PTX HOST_C KERNELS_H MOEFT_SERVE
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
	n=$(grep -c '^step ' "$dir/$1.truth" || :) # none: status 1
	[ "$n" -eq "$2" ] || fail "$1: $n steps in the truth, want $2"
	[ -n "$(field "$1" token-hash)" ] || fail "$1: no token hash on stdout"
	grep -q "^token-hash $(field "$1" token-hash)\$" "$dir/$1.truth" ||
		fail "$1: the truth's token hash is not stdout's"
}

# refused WHAT CMD...: CMD exits with status 2 and says why on stderr
refused() {
	what=$1
	shift
	if "$@" >"$dir/out" 2>"$dir/err"; then
		fail "$what succeeded"
	else
		status=$?
	fi
	[ "$status" -eq 2 ] || fail "$what: status $status, want 2"
	[ -s "$dir/err" ] || fail "$what: no message"
}

# resume NAME R ARGS...: run NAME, resumed at step R from NAME.journal
resume() {
	name=$1
	printf '{"resume_step": %s}\n' "$2" >"$dir/$name.json"
	shift 2
	export MOEFT_RESTORE_MANIFEST="$dir/$name.json"
	run "$name" --journal="$dir/$name.journal" "$@"
	unset MOEFT_RESTORE_MANIFEST
}

# journaled NAME R STEPS: NAME.journal is run full's first R lines, then
# the step and tokens lines of NAME's truth (both list a step's tokens in
# ascending sequence order), and the truth's sequences emitted it: the
# journal rebuilt from their lines, per step, is the same file
journaled() {
	head -n "$2" "$dir/full.journal" >"$dir/want"
	awk '/^step /{ s = $0 } /^tokens/{ sub(/^tokens/, ""); print s $0 }' \
		"$dir/$1.truth" >>"$dir/want"
	cmp -s "$dir/want" "$dir/$1.journal" ||
		fail "$1: the journal is not the full run's first $2 steps, then its truth's"
	awk -v steps="$3" '/^seq /{
			n = split($8, tok, ",")
			for (j = 1; j <= n; j++)
				line[$4 + j - 1] = line[$4 + j - 1] " " tok[j]
		}
		END { for (t = 0; t < steps; t++) print "step " t line[t] }' \
		"$dir/$1.truth" >"$dir/want"
	cmp -s "$dir/want" "$dir/$1.journal" ||
		fail "$1: the truth's sequences did not emit the journal's tokens"
}

# broken LINE WHAT: resuming at step 16 from bad.journal is refused at its
# line LINE, and leaves it as it was
broken() {
	cp "$dir/bad.journal" "$dir/want"
	refused "journal $2" env MOEFT_RESTORE_MANIFEST="$dir/r16.json" "$serve" \
		--journal="$dir/bad.journal"
	grep -q "line $1:" "$dir/err" || fail "journal $2: the message names no line $1"
	cmp -s "$dir/want" "$dir/bad.journal" || fail "journal $2: the journal changed"
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
	run graph-side --mode=graph --capture=side
	sane eager 64
	same eager graph
	same eager graph-side
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
		--kv-layout=two --capture=other --threads=3 --seed=-1 --steps=1x --hidden= --bogus stray \
		"--seqs=4096 --steps=1000000 --layers=256 --hidden=8192"; do
		# unquoted: the last case is several words
		refused "serve $bad" "$serve" $bad
	done
	"$serve" --help | grep -q -- '--kv-layout' || fail "--help does not list the options"
	;;
resume)
	# Without moeft nothing restores the KV pool: a resumed run starts
	# from a zeroed one, which is what tells a restore that worked.
	steps=64
	run full --steps=$steps --journal="$dir/full.journal"
	sane full $steps
	journaled full 0 $steps
	run full-graph --steps=$steps --mode=graph --threads=2 --journal="$dir/full-graph.journal"
	cmp -s "$dir/full.journal" "$dir/full-graph.journal" ||
		fail "eager and graph runs journaled different tokens"
	for r in 1 16 $((steps / 2)) $steps; do
		cp "$dir/full.journal" "$dir/r$r.journal"
		resume "r$r" "$r" --steps=$steps
		sane "r$r" $((steps - r))
		journaled "r$r" "$r" $steps
		head -n 1 "$dir/r$r.truth" | grep -q " resume=$r\$" ||
			fail "r$r: no resume=$r in the truth"
	done
	# Past step 16 the tokens depend on the pool: a zeroed one changes them.
	[ "$(field full token-hash)" != "$(field r16 token-hash)" ] ||
		fail "resuming at 16 on a zeroed KV pool emitted the same tokens"
	[ "$(field full kv-crc)" != "$(field r16 kv-crc)" ] ||
		fail "resuming at 16 on a zeroed KV pool left the same pool"
	# ... whatever the mode, and a partial line after the resume point (a
	# run killed in its write) is cut as the extra lines are.
	{
		head -n 16 "$dir/full.journal"
		printf 'step 16 4'
	} >"$dir/r16-graph.journal"
	resume r16-graph 16 --steps=$steps --mode=graph --threads=2 --kv-layout=one
	same r16 r16-graph
	cmp -s "$dir/r16.journal" "$dir/r16-graph.journal" ||
		fail "r16 and r16-graph journaled different tokens"
	# Resumed at the end: the full run's tokens, and the pool as allocated,
	# zeroed, so its CRC is not the full run's nor a function of the model.
	sed -n '/^seq /,$p' "$dir/full.truth" >"$dir/want"
	sed -n '/^seq /,$p' "$dir/r$steps.truth" | cmp -s "$dir/want" - ||
		fail "r$steps: sequences or token hash not the full run's"
	[ "$(field full token-hash)" = "$(field r$steps token-hash)" ] ||
		fail "r$steps: token hash not the full run's"
	[ "$(field full kv-crc)" != "$(field r$steps kv-crc)" ] ||
		fail "r$steps: the full run's KV pool, not a zeroed one"
	cp "$dir/full.journal" "$dir/past.journal"
	resume past $((steps + 5)) --steps=$steps --seed=2
	[ "$(field past kv-crc)" = "$(field r$steps kv-crc)" ] ||
		fail "resumed at the end, seeds 1 and 2 left different KV pools"
	head -n 1 "$dir/past.truth" | grep -q " resume=$steps\$" ||
		fail "a resume_step past the end is not resume=$steps"

	# Refused with exit status 2 and a message, the journal untouched.
	refused "a resume without --journal" env MOEFT_RESTORE_MANIFEST="$dir/r16.json" "$serve"
	grep -q -- --journal "$dir/err" || fail "no --journal: the message does not say so"
	for bad in '{"step": 16}' '{"resume_step": -1}' '{"resume_step": 1.5}' \
		'{"resume_step": "16"}' '{"resume_step": 16' '{"resume_step": 4294967296}' \
		'{"resume_step": 16, "resume_step": 16}' ''; do
		printf '%s' "$bad" >"$dir/bad.json"
		refused "manifest '$bad'" env MOEFT_RESTORE_MANIFEST="$dir/bad.json" "$serve" \
			--journal="$dir/full.journal"
		grep -q resume_step "$dir/err" ||
			fail "manifest '$bad': the message does not say why"
	done
	refused "a missing manifest" env MOEFT_RESTORE_MANIFEST="$dir/none.json" "$serve" \
		--journal="$dir/full.journal"
	# Each edit damages the journal at the line its number names.
	for edit in 4d '12s/ [0-9]*$//' '12s/$/ 7/' '12s/$/ /' '12s/ [0-9]*$/ 512/' \
		'12s/^step 11/step 10/' 11,64d; do
		sed "$edit" "$dir/full.journal" >"$dir/bad.journal"
		broken "${edit%%[!0-9]*}" "edit $edit"
	done
	{
		head -n 9 "$dir/full.journal"
		printf 'step 9 1'
	} >"$dir/bad.journal"
	broken 10 "cut short"
	;;
names)
	# The fixture build registers its kernels under names of its own
	# writing; they must be the ones nvcc gives the CUDA build's kernels,
	# or the vllm profile would match one build and not the other.
	ptx=$2 host_c=$3 kernels_h=$4 moeft_serve=$5
	sed -n 's/^\.visible \.entry \([A-Za-z0-9_]*\)(.*/\1/p' "$ptx" | sort >"$dir/device"
	{
		sed -n 's/^FIXTURE_KERNEL([a-z_]*, "\([A-Za-z0-9_]*\)".*/\1/p' "$host_c"
		sed -n 's/^#define SERVE_[A-Z_]*_NAME "\([A-Za-z0-9_]*\)"$/\1/p' "$kernels_h"
	} | sort >"$dir/host"
	[ -s "$dir/device" ] || fail "no kernels in $ptx"
	diff "$dir/device" "$dir/host" >&2 || fail "device and fixture kernel names differ"
	# The preload interposes libcudart: a static one would hide every call.
	nm -D "$moeft_serve" | grep -q ' U cudaLaunchKernel' ||
		fail "$moeft_serve does not link libcudart dynamically"
	;;
*)
	fail "unknown check"
	;;
esac
