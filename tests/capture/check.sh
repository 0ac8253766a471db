#!/bin/sh
# check.sh - capture end to end: the test serving program under the preload
# on the fixture, its committed windows checked against its ground truth.
#
# Usage: check.sh LIBMOEFT SERVE CHECK_WINDOWS
# For eager and graph mode, --threads=1 and 2, with no configuration but
# the log's path (window 16): the run under the preload prints what the
# plain run prints, with no ring gap, and every committed window holds the
# truth's routing and the KV pool's bytes at its end (check_windows).  Then
# graphs captured on a side stream and replayed on another, other windows
# and layouts, and fail-open runs: the capture kernels
# missing from the fixture, a log too small for the windows, a bad
# variable, pinned memory short of the KV pools.  Each prints what the plain run prints.
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

# run NAME WINDOW SERVE-ARGS...: plain run, run under the preload, checks.
# A boundary that finds the last snapshot still being copied out is
# skipped (its window grows): the checker allows that when the summary
# says so, and every boundary the steps called for is a window or a skip.
run() {
	name=$1 window=$2 skips=
	shift 2
	steps=$(echo " $* " | sed -n 's/.* --steps=\([0-9]*\) .*/\1/p')
	steps=${steps:-64}
	mode=eager
	case "$*" in *--mode=graph*) mode=graph ;; esac
	"$serve" "$@" >"$dir/$name.plain" || fail "$name: plain run failed"
	if [ "$window" = 16 ]; then
		env MOEFT_WAL="$dir/$name.wal" MOEFT_LOG=info LD_PRELOAD="$lib" \
			"$serve" "$@" --truth="$dir/$name.truth" >"$dir/$name.out" \
			2>"$dir/$name.err" || fail "$name: run under the preload failed"
	else
		env MOEFT_WAL="$dir/$name.wal" MOEFT_WINDOW="$window" MOEFT_LOG=info \
			LD_PRELOAD="$lib" "$serve" "$@" --truth="$dir/$name.truth" \
			>"$dir/$name.out" 2>"$dir/$name.err" ||
			fail "$name: run under the preload failed"
	fi
	cmp -s "$dir/$name.plain" "$dir/$name.out" || fail "$name: output differs"
	[ "$(summary "$dir/$name.err" gaps)" = 0 ] || fail "$name: ring gaps: $(cat "$dir/$name.err")"
	[ "$(summary "$dir/$name.err" unplaced)" = 0 ] || fail "$name: unplaced routing"
	skipped=$(summary "$dir/$name.err" skipped)
	windows=$(summary "$dir/$name.err" decode_windows)
	[ $((windows + skipped)) = $(((steps - 1) / window)) ] ||
		fail "$name: $windows windows and $skipped skipped boundaries for $steps steps"
	[ "$skipped" = 0 ] || skips=skips
	"$checker" "$dir/$name.truth" "$dir/$name.wal" "$mode" "$window" $skips ||
		fail "$name: the log is not the truth's (stderr: $(cat "$dir/$name.err"))"
}

# No configuration at all: the default log, window 16, the profile found
# by itself.  (The default is a directory per user, a log per process
# name and device in it; the fixture's device is at PCI 0000:3b:00.0.)
default=/dev/shm/moeft-$(id -un | tr -c 'A-Za-z0-9._\n-' _)/serve.0000_3b_00_0.wal
rm -f "$default" "$default.kv"
"$serve" --mode=graph >"$dir/default.plain"
env -u MOEFT_WAL -u MOEFT_WINDOW -u MOEFT_PROFILE -u MOEFT_LOG LD_PRELOAD="$lib" \
	"$serve" --mode=graph --truth="$dir/default.truth" >"$dir/default.out" ||
	fail "default: run under the preload failed"
cmp -s "$dir/default.plain" "$dir/default.out" || fail "default: output differs"
"$checker" "$dir/default.truth" "$default" graph 16 skips ||
	fail "default: the log at $default is not the truth's"
rm -f "$default" "$default.kv"

# With two host threads, 64 sequences keep both groups busy every step: a
# stream that idles and comes back while another thread runs freely cannot
# be placed in the right step from the host's calls (preload/STEPS.md).
for mode in eager graph; do
	run "$mode-1" 16 --mode=$mode
	run "$mode-2" 16 --mode=$mode --threads=2 --seqs=64
done
# Captured on a side stream, replayed on the group's (torch.cuda.graph).
run graph-side 16 --mode=graph --capture=side --threads=2 --seqs=64
run eager-one-w5 5 --kv-layout=one --steps=50
run graph-one-w1 1 --mode=graph --kv-layout=one --steps=20 --threads=2 --seqs=64
run eager-w64 64 --steps=70 --seqs=5

# Fail open: no capture kernels (one line), a log too small for the KV
# (windows fail to commit), a bad variable (one line, un-instrumented).
args="--mode=graph --threads=2 --seqs=64"
"$serve" $args >"$dir/plain"
FIXTURE_NO_MOEFT_KERNELS=1 MOEFT_WAL="$dir/off.wal" LD_PRELOAD="$lib" \
	"$serve" $args >"$dir/off" 2>"$dir/off.err" || fail "no kernels: run failed"
cmp -s "$dir/plain" "$dir/off" || fail "no kernels: output differs"
[ "$(grep -c 'capture: .*capture stopped' "$dir/off.err")" = 1 ] ||
	fail "no kernels: want one 'capture stopped' line, got: $(cat "$dir/off.err")"
MOEFT_WAL="$dir/bad.wal" MOEFT_WINDOW=0 LD_PRELOAD="$lib" "$serve" $args \
	>"$dir/bad" 2>"$dir/bad.err" || fail "bad window: run failed"
cmp -s "$dir/plain" "$dir/bad" || fail "bad window: output differs"
[ "$(grep -c "MOEFT_WINDOW='0'" "$dir/bad.err")" = 1 ] ||
	fail "bad window: want one line naming MOEFT_WINDOW, got: $(cat "$dir/bad.err")"
# A window larger than the whole log: it cannot commit (one line), the
# program runs on unchanged.
args="--steps=70 --layers=16 --seqs=64 --experts=64 --topk=16"
"$serve" $args >"$dir/plain-big"
MOEFT_WAL="$dir/full.wal" MOEFT_WAL_SIZE=1M MOEFT_WINDOW=64 LD_PRELOAD="$lib" \
	"$serve" $args >"$dir/full" 2>"$dir/full.err" || fail "full log: run failed"
cmp -s "$dir/plain-big" "$dir/full" || fail "full log: output differs"
[ "$(grep -c 'cannot commit the window of steps 0-63' "$dir/full.err")" = 1 ] ||
	fail "full log: want one 'cannot commit' line, got: $(cat "$dir/full.err")"
# ... and that line names the settings to change (issue 13, point 7).
grep -q 'no decode window commits until MOEFT_WAL_SIZE is raised (to at least [0-9]* MiB) or MOEFT_WINDOW lowered' \
	"$dir/full.err" || fail "full log: the line names no setting: $(cat "$dir/full.err")"
# With the size it suggests, the windows commit.
size=$(sed -n 's/.*MOEFT_WAL_SIZE is raised (to at least \([0-9]*\) MiB).*/\1/p' "$dir/full.err")
MOEFT_WAL="$dir/fits.wal" MOEFT_WAL_SIZE="${size}M" MOEFT_WINDOW=64 LD_PRELOAD="$lib" \
	"$serve" $args >"$dir/fits" 2>"$dir/fits.err" || fail "suggested size: run failed"
grep -q 'cannot commit' "$dir/fits.err" &&
	fail "suggested size ${size}M: windows still fail: $(cat "$dir/fits.err")"
# A driver that cannot tell parameter sizes: no rule is evaluated on a
# kernel it owns (it could read past a parameter): one warning per such
# kernel, nothing captured or hit, the program runs on unchanged.
args="--steps=20"
"$serve" $args >"$dir/plain-noparam"
FIXTURE_NO_PARAM_INFO=1 MOEFT_LOG=info MOEFT_WAL="$dir/noparam.wal" LD_PRELOAD="$lib" \
	"$serve" $args >"$dir/noparam" 2>"$dir/noparam.err" || fail "no param info: run failed"
cmp -s "$dir/plain-noparam" "$dir/noparam" || fail "no param info: output differs"
grep -q 'topkGating.*does not report its parameter sizes; it is not evaluated' \
	"$dir/noparam.err" || fail "no param info: no warning: $(cat "$dir/noparam.err")"
grep -q 'summary: .* matched=0 rule_hits=0 captured=0 ' "$dir/noparam.err" ||
	fail "no param info: $(grep summary "$dir/noparam.err")"
# A rule whose positions do not fit the kernel's parameter table (a stale
# rule, another build of the kernel): refused at the kernel's first
# launch with one line naming the kernel and the parameter, never read;
# nothing captured, the program runs on unchanged.
printf 'routing *4vllm3moe10topkGatingI* ids=p4:i32 rows=p3 k=p20\n' >"$dir/misfit.rules"
MOEFT_PROFILE="$dir/misfit.rules" MOEFT_WAL="$dir/misfit.wal" MOEFT_LOG=info LD_PRELOAD="$lib" \
	"$serve" $args >"$dir/misfit" 2>"$dir/misfit.err" || fail "misfit rule: run failed"
cmp -s "$dir/plain-noparam" "$dir/misfit" || fail "misfit rule: output differs"
[ "$(grep -c 'does not fit kernel _ZN4vllm3moe10topkGatingILi128EiEEvPKfPKbPfiPT0_Piiiii: k: p20: the kernel has 10 parameters; it is not evaluated for it' \
	"$dir/misfit.err")" = 1 ] || fail "misfit rule: want one line, got: $(cat "$dir/misfit.err")"
grep -q 'summary: .* matched=0 rule_hits=0 captured=0 ' "$dir/misfit.err" ||
	fail "misfit rule: $(grep summary "$dir/misfit.err")"
# Pinned memory short of what a window changes (the fixture refuses
# pinned allocations over 5 MiB; the ring takes 4): the staging is halved
# until the driver gives it (one warning), the program runs on unchanged,
# and a window that changed more than the staging holds takes several
# passes while the serving streams wait (snapshot.h), so every window is
# still whole and equal to the truth.
args="--layers=16 --seqs=64 --steps=64 --hidden=128"
"$serve" $args >"$dir/plain-pinned"
FIXTURE_PINNED_MAX=$((5 << 20)) MOEFT_WAL="$dir/pinned.wal" MOEFT_LOG=info LD_PRELOAD="$lib" \
	"$serve" $args --truth="$dir/pinned.truth" >"$dir/pinned" 2>"$dir/pinned.err" ||
	fail "short pinned memory: run failed"
cmp -s "$dir/plain-pinned" "$dir/pinned" || fail "short pinned memory: output differs"
[ "$(grep -c 'pinned staging of [0-9]* MiB, less than the [0-9]* MiB a window wants: such windows take several passes' \
	"$dir/pinned.err")" = 1 ] ||
	fail "short pinned memory: want one staging warning, got: $(cat "$dir/pinned.err")"
"$checker" "$dir/pinned.truth" "$dir/pinned.wal" eager 16 ||
	fail "short pinned memory: the windows differ from the truth"
[ "$(summary "$dir/pinned.err" kv_passes)" -gt 0 ] ||
	fail "short pinned memory: no window took a second pass: $(grep summary "$dir/pinned.err")"
[ "$(summary "$dir/pinned.err" kv_pinned_bytes)" -le $((5 << 20)) ] ||
	fail "short pinned memory: $(summary "$dir/pinned.err" kv_pinned_bytes) bytes pinned"
# A launch of the release that fails in a window's third pass (the
# device refused it, the serving streams waiting): capture stops with one
# line, the host releases the streams, and the program runs on to its end
# unchanged; the windows committed before it stand (the summary counts
# them: check_windows wants every window of the run).
FIXTURE_FAIL_LAUNCH=moeft_kv_release:3 FIXTURE_PINNED_MAX=$((5 << 20)) \
	MOEFT_WAL="$dir/relfail.wal" MOEFT_LOG=info LD_PRELOAD="$lib" "$serve" $args \
	>"$dir/relfail" 2>"$dir/relfail.err" || fail "failed release: run failed"
cmp -s "$dir/plain-pinned" "$dir/relfail" || fail "failed release: output differs"
[ "$(grep -c 'launching the release failed (CUresult 701); capture stopped' \
	"$dir/relfail.err")" = 1 ] || fail "failed release: want one line, got: $(cat "$dir/relfail.err")"
[ "$(summary "$dir/relfail.err" kv_passes)" -ge 1 ] &&
	[ "$(summary "$dir/relfail.err" decode_windows)" -ge 1 ] ||
	fail "failed release: $(grep summary "$dir/relfail.err")"
# One hardware queue for every stream (FIXTURE_ONE_QUEUE=all; CUDA
# promises no progress between streams, and a GPU may queue them
# together): a window's second pass waits behind the serving streams that
# wait for it.  Within a second the window is committed KV-partial, the
# streams go on, one line says so, and from then on they wait for each
# snapshot's end; the output is unchanged, and every other window, its
# routing and its KV, is the truth's.  One copy engine for all copies
# (=copies) stalls nothing: a pass moves its header by kernels.
# queue_run KIND MODE WINDOW
queue_run() {
	qargs="--layers=16 --seqs=64 --steps=49 --hidden=128 --mode=$2"
	q="$1 $2 $3"
	"$serve" $qargs >"$dir/plain-queue"
	FIXTURE_ONE_QUEUE=$1 MOEFT_WINDOW=$3 MOEFT_WAL="$dir/queue-$1-$3.wal" MOEFT_LOG=info \
		LD_PRELOAD="$lib" "$serve" $qargs --truth="$dir/queue.truth" \
		>"$dir/queue" 2>"$dir/queue.err" || fail "one queue ($q): run failed"
	cmp -s "$dir/plain-queue" "$dir/queue" || fail "one queue ($q): output differs"
	stalls=$(grep -c 'capture: a KV snapshot pass made no progress in 1000 ms while the serving streams waited for it' \
		"$dir/queue.err" || true)
	want=1
	[ "$1" = copies ] && want=0
	[ "$stalls" = "$want" ] ||
		fail "one queue ($q): $stalls stall lines, want $want: $(cat "$dir/queue.err")"
	[ "$(summary "$dir/queue.err" decode_windows)" = $((48 / $3)) ] &&
		[ "$(summary "$dir/queue.err" skipped)" = 0 ] ||
		fail "one queue ($q): $(grep summary "$dir/queue.err")"
	# The last window whole: the store's pool is the truth's after it.
	"$checker" "$dir/queue.truth" "$dir/queue-$1-$3.wal" "$2" "$3" partial="$want" \
		>"$dir/queue.check" || fail "one queue ($q): the windows differ from the truth"
	grep -q '== truth at step 47$' "$dir/queue.check" ||
		fail "one queue ($q): $(cat "$dir/queue.check")"
}
queue_run all eager 1
queue_run all graph 16
queue_run copies eager 1
# Without stream memory operations the serving streams cannot be held:
# staging is sized to the KV pools' 17 MiB, the two windows that changed
# more than the 4 MiB it got are flagged KV-partial, and capture goes on
# (the first window, and the routing of all three, are the truth's).
FIXTURE_NO_WAIT_VALUE=1 FIXTURE_PINNED_MAX=$((5 << 20)) MOEFT_WAL="$dir/nohold.wal" \
	LD_PRELOAD="$lib" "$serve" $args --truth="$dir/nohold.truth" >"$dir/nohold" \
	2>"$dir/nohold.err" || fail "no stream memory operations: run failed"
cmp -s "$dir/plain-pinned" "$dir/nohold" || fail "no stream memory operations: output differs"
[ "$(grep -c 'pinned staging of 4 MiB, less than the 17 MiB of the KV pools' \
	"$dir/nohold.err")" = 1 ] ||
	fail "no stream memory operations: want one staging warning, got: $(cat "$dir/nohold.err")"
"$checker" "$dir/nohold.truth" "$dir/nohold.wal" eager 16 2>"$dir/nohold.check" &&
	fail "no stream memory operations: check_windows passed a log of KV-partial windows"
grep -q 'decode windows flagged KV-partial, want 0' "$dir/nohold.check" ||
	fail "no stream memory operations: $(cat "$dir/nohold.check")"
grep -q 'capture stopped' "$dir/nohold.err" &&
	fail "no stream memory operations: $(cat "$dir/nohold.err")"
"$checker" "$dir/nohold.truth" "$dir/nohold.wal" eager 16 partial=2 ||
	fail "no stream memory operations: the windows differ from the truth"
# No device memory for the snapshot's own state (chunk sums, the staging
# header's copy): pinned host memory instead, one warning, and every
# window still equal to the truth.
args="--layers=4 --seqs=8 --steps=64"
"$serve" $args >"$dir/plain-nodev"
FIXTURE_DRIVER_ALLOC_FAIL=1 MOEFT_WAL="$dir/nodev.wal" LD_PRELOAD="$lib" \
	"$serve" $args --truth="$dir/nodev.truth" >"$dir/nodev" 2>"$dir/nodev.err" ||
	fail "no device memory: run failed"
cmp -s "$dir/plain-nodev" "$dir/nodev" || fail "no device memory: output differs"
[ "$(grep -c "no device memory for the KV snapshot's chunk state" "$dir/nodev.err")" = 1 ] ||
	fail "no device memory: want one warning, got: $(cat "$dir/nodev.err")"
"$checker" "$dir/nodev.truth" "$dir/nodev.wal" eager 16 ||
	fail "no device memory: the windows differ from the truth"
# KV blocks found by their slots (the default: the rule has stride=) and
# by hashing every chunk (MOEFT_KV_TRACK=hash): the same chunks staged, and
# every window the truth.  Hashing reads the whole pool every window; the
# slots read it whole once, at the first window, and after that only the
# marked blocks: here a block is a chunk and every block written changes,
# so after the first window they read exactly the chunks staged, no more
# than all windows staged.
args="--kv-layout=one --kv-pool-mib=64 --steps=80"
"$serve" $args >"$dir/plain-track"
for track in slots hash; do
	MOEFT_KV_TRACK=$track MOEFT_WAL="$dir/$track.wal" MOEFT_LOG=info LD_PRELOAD="$lib" \
		"$serve" $args --truth="$dir/$track.truth" >"$dir/$track" 2>"$dir/$track.err" ||
		fail "$track: run failed"
	cmp -s "$dir/plain-track" "$dir/$track" || fail "$track: output differs"
	"$checker" "$dir/$track.truth" "$dir/$track.wal" eager 16 ||
		fail "$track: the windows differ from the truth"
done
for key in decode_windows boundaries kv_chunks kv_bytes kv_first_read_bytes; do
	[ "$(summary "$dir/slots.err" $key)" = "$(summary "$dir/hash.err" $key)" ] ||
		fail "slots and hash differ in $key: $(grep summary "$dir/slots.err" "$dir/hash.err")"
done
pool=$(summary "$dir/hash.err" kv_first_read_bytes)
n=$(summary "$dir/hash.err" boundaries)
staged=$(summary "$dir/slots.err" kv_bytes)
after=$(($(summary "$dir/slots.err" kv_read_bytes) - pool))
[ "$pool" -ge $((64 << 20)) ] && [ "$n" -ge 4 ] ||
	fail "track: a pool of $pool bytes, $n boundaries"
[ "$(summary "$dir/hash.err" kv_read_bytes)" = $((n * pool)) ] ||
	fail "hash: read $(summary "$dir/hash.err" kv_read_bytes) bytes, want $n x $pool"
[ "$after" -gt 0 ] && [ "$after" -le "$staged" ] ||
	fail "slots: read $after bytes after the first window, with $staged staged"
# Routing only (a profile without KV rules): steps come from the routing
# launches' ids pointers; windows commit with no KV chunks.
grep '4vllm3moe10topkGatingI' "$(dirname "$0")/../../preload/profiles_builtin.c" >/dev/null ||
	fail "the vLLM topkGating rule moved"
printf 'routing *4vllm3moe10topkGatingI* ids=p4:i32 rows=p3 k=p6\n' >"$dir/routing.rules"
MOEFT_WAL="$dir/routing.wal" MOEFT_PROFILE="$dir/routing.rules" MOEFT_LOG=info \
	LD_PRELOAD="$lib" "$serve" >"$dir/routing" 2>"$dir/routing.err" ||
	fail "routing only: run failed"
"$serve" >"$dir/plain-routing"
cmp -s "$dir/plain-routing" "$dir/routing" || fail "routing only: output differs"
[ "$(summary "$dir/routing.err" decode_windows)" -ge 2 ] &&
	[ "$(summary "$dir/routing.err" kv_chunks)" = 0 ] &&
	[ "$(summary "$dir/routing.err" unplaced)" = 0 ] ||
	fail "routing only: $(cat "$dir/routing.err")"
