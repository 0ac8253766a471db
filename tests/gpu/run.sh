#!/usr/bin/env bash
# tests/gpu/run.sh - moeft's GPU tier, on a machine with an NVIDIA H100 and
# no network: builds moeft with nvcc for sm_90 into build-gpu/ (the -dev
# packages from .debs/, unpacked into /tmp/prefix) and runs, by part:
#
#   checks     moe_generate.py (transformers Qwen3-MoE, static KV cache),
#              eager and graph: an uninterrupted reference run; a run under
#              the preload (MOEFT_PROFILE=torch, MOEFT_KV=size=<K/V tensor
#              bytes>) killed with SIGKILL at a random step; the offline
#              restore's routing against the reference's truth
#              (check_routing.py); `moeft restore -- moe_generate.py`, its
#              KV right before the first resumed step R against the
#              reference as of step R-1 (check_kv.py), its tokens and
#              journal against the reference's
#   kernels    test_kernels_gpu: moeft's kernels, from the image the preload
#              loads, against their host references on fresh random inputs
#   serve      tests/restore/kill.sh with build-gpu's moeft-serve
#   sanitizer  compute-sanitizer memcheck on moeft-serve under the preload
#   bench      tests/gpu/bench.py: the figures table
#   all        the five, in that order
#   build      nothing but the build (every part builds first)
#
# Usage, from the repository root: bash tests/gpu/run.sh PART...
# Logs: one per part in $OUT/ when OUT is set (the device tool's folder),
# else build-gpu/gpu-logs/; the summary table is printed last (and kept as
# summary.md beside the logs).  Exit status 0 when every check passed.
# Environment: GPU_STEPS (steps of the checks' runs, default 96),
# GPU_MODES (the checks' modes, default "eager graph"), GPU_BENCH_ARGS
# (more options for bench.py, e.g. --skip-rto),
# GPU_KILLS (kill.sh's kills, default 20), GPU_BUILD (the build directory,
# default build-gpu), GPU_RUN_TIMEOUT (seconds one program run may take before
# it is stopped and its check fails, default 600: device time is short).
set -euo pipefail
cd "$(dirname "$0")/../.."

parts=("$@")
[[ ${#parts[@]} == 0 ]] && parts=(all)
for p in "${parts[@]}"; do
	case $p in
	build|checks|kernels|serve|sanitizer|bench) ;;
	all) parts=(checks kernels serve sanitizer bench) ;;
	*) echo "run.sh: unknown part '$p' (build, checks, kernels, serve, sanitizer, bench, all)" >&2
	   exit 2 ;;
	esac
done

build=${GPU_BUILD:-build-gpu}
logdir=${OUT:-$build/gpu-logs}
prefix=/tmp/prefix
work=$(mktemp -d /dev/shm/moeft-gpu.XXXXXX)
trap 'rm -rf "$work" /dev/shm/moeft-gpu-*.wal*' EXIT
mkdir -p "$logdir"
export PYTHONDONTWRITEBYTECODE=1	# no __pycache__ in the working tree
gen=tests/gpu/moe_generate.py
moeft=$build/tools/moeft lib=$build/preload/libmoeft.so serve=$build/demo/moeft-serve
steps=${GPU_STEPS:-96}
run_timeout=${GPU_RUN_TIMEOUT:-600}
window=16
# Kills land after two windows and before the last steps.
((steps >= 2 * window + 12)) || { echo "run.sh: GPU_STEPS must be at least $((2 * window + 12))" >&2; exit 2; }
results=()

# ---- build ---------------------------------------------------------------

# The -dev packages unpacked into $prefix, their .pc files pointed there.
unpack_debs() {
	local libdir=$prefix/usr/lib/x86_64-linux-gnu f
	ls .debs/*.deb >/dev/null 2>&1 || { echo "run.sh: no .debs/*.deb (carry .debs)" >&2; exit 1; }
	if [[ ! -f $prefix/.unpacked ]]; then
		rm -rf "$prefix"
		for f in .debs/*.deb; do dpkg -x "$f" "$prefix"; done
		sed -i "s|=/usr|=$prefix/usr|" "$libdir"/pkgconfig/*.pc
		touch "$prefix/.unpacked"
	fi
	export PKG_CONFIG=$prefix/usr/bin/pkgconf PKG_CONFIG_PATH=$libdir/pkgconfig
	export LIBRARY_PATH=$libdir${LIBRARY_PATH:+:$LIBRARY_PATH}
	export CPATH=$prefix/usr/include${CPATH:+:$CPATH}
	# pkgconf's own library, and libunwind, which the preload dlopens.
	export LD_LIBRARY_PATH=$libdir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
}

build_moeft() {
	unpack_debs
	# nvcc, and the meson and ninja that pip put beside python3.
	PATH=$PATH:/usr/local/cuda/bin:$(python3 -c 'import sysconfig; print(sysconfig.get_path("scripts"))')
	export PATH
	{
		if [[ -f $build/build.ninja ]]; then
			meson configure "$build" -Dcuda=enabled -Dhttp=disabled
		else
			meson setup "$build" -Dcuda=enabled -Dhttp=disabled
		fi
		ninja -C "$build" tools/moeft preload/libmoeft.so demo/moeft-serve \
			tests/gpu/test_kernels_gpu
	} >"$logdir/build.log" 2>&1 || { tail -30 "$logdir/build.log"; exit 1; }
	{
		nvidia-smi -L
		python3 -c 'import torch, transformers; print("torch", torch.__version__, "transformers", transformers.__version__)'
	} 2>&1 | tee -a "$logdir/build.log"
}

# ---- checks, run one by one --------------------------------------------------

# check PART NAME FUNCTION ARGS...: FUNCTION in a subshell that stops at the
# first failing command, its output appended to the part's log; what it
# wrote to $work/detail goes into the summary.
check() {
	local part=$1 name=$2 log=$logdir/$1.log rc=0 status detail start
	shift 2
	rm -f "$work/detail"
	echo "=== $name" >>"$log"
	start=$(wc -l <"$log")
	# In the background: a subshell whose status is tested would ignore -e.
	(set -euo pipefail; "$@") >>"$log" 2>&1 &
	wait $! || rc=$?
	detail=$(cat "$work/detail" 2>/dev/null || true)
	if [[ $rc == 0 ]]; then
		status=PASS
	else
		status="FAIL ($rc)"
		detail="${detail:+$detail; }$(tail -n +$((start + 1)) "$log" | tail -2 | tr '\n|' ' /')"
	fi
	results+=("| $part | $name | $status | $detail |")
	echo "run.sh: $part: $name: $status${detail:+: $detail}"
}

say() {
	echo "$*" >"$work/detail"
}

# The whole lines of a file (a killed writer may leave a partial one).
lines() {
	if [[ -f $1 ]]; then tr -cd '\n' <"$1" | wc -c; else echo 0; fi
}

field() {	# field FILE PREFIX KEY: KEY's value on the line starting with PREFIX
	sed -n "s/^$2 .*\b$3=\([^ ]*\).*/\1/p" "$1" | head -1
}

# The preload's configuration, for the run and for its restore (which sets
# LD_PRELOAD and MOEFT_WAL itself).  MOEFT_RESTORE_AT=init (the default,
# read by the restored process only): the KV images go in right after
# torch.zeros' fill of the last cache tensor, before any resumed pass.
preload_env() {
	echo MOEFT_PROFILE=torch "MOEFT_KV=size=$(cat "$1/kv_bytes")" MOEFT_WINDOW=$window \
		MOEFT_LOG=info MOEFT_RESTORE_AT=init
}

# The uninterrupted run: truth, journal, the KV cache after the last step.
reference() {
	local d=$work/$1
	rm -rf "$d" && mkdir -p "$d"
	timeout "$run_timeout" python3 "$gen" --mode "$1" --steps "$steps" --journal "$d/ref.journal" \
		--truth "$d/ref.truth" --save-kv "$d/ref.kv" >"$d/ref.out"
	cat "$d/ref.out"
	local kv tensors
	kv=$(field "$d/ref.out" kv tensor-bytes)
	tensors=$(field "$d/ref.out" kv tensors)
	grep -q "^kv at=start .*own-allocations=$tensors other-allocations=0" "$d/ref.out" ||
		{ echo "the K/V tensors are not device allocations of their own"; exit 1; }
	grep -q "^kv at=end .*other-allocations=0" "$d/ref.out" ||
		{ echo "other allocations of the K/V tensors' size appeared during the run"; exit 1; }
	echo "$kv" >"$d/kv_bytes"
	say "$tensors K/V tensors of $kv bytes, $(field "$d/ref.out" times tok-s) tok/s"
}

# same_steps A B N: the first N steps of journals A and B are equal, else
# the first that differs is shown.
same_steps() {
	cmp -s <(head -n "$3" "$1") <(head -n "$3" "$2") && return
	diff <(head -n "$3" "$1") <(head -n "$3" "$2") | head -4
	echo "the journals differ within their first $3 steps"
	return 1
}

# The uninterrupted run again, as the runs under the preload are made: the
# program is deterministic, or no comparison below means anything.
again() {
	local d=$work/$1
	[[ -f $d/kv_bytes ]] || { echo "no reference run"; exit 1; }
	timeout "$run_timeout" python3 "$gen" --mode "$1" --steps "$steps" \
		--journal "$d/again.journal" >"$d/again.out"
	same_steps "$d/ref.journal" "$d/again.journal" "$steps"
	diff <(grep '^result ' "$d/ref.out") <(grep '^result ' "$d/again.out")
	say "$steps steps, each the reference's"
}

# Under the preload, SIGKILL once the journal has a random number of steps.
killed() {
	local d=$work/$1 wal=/dev/shm/moeft-gpu-$1.wal target pid n deadline
	[[ -f $d/kv_bytes ]] || { echo "no reference run"; exit 1; }
	rm -rf "$wal" "$wal.kv" "$wal.restore" "$d/run.journal"
	target=$((2 * window + 2 + RANDOM % (steps - 2 * window - 10)))
	# shellcheck disable=SC2046 # one word per variable
	# env execs python: $! is the process to kill (timeout would fork it).
	env $(preload_env "$d") MOEFT_WAL="$wal" LD_PRELOAD="$(realpath "$lib")" \
		python3 "$gen" --mode "$1" --steps "$steps" --journal "$d/run.journal" \
		>"$d/run.out" 2>"$d/run.err" &
	pid=$!
	deadline=$((SECONDS + run_timeout))
	while [[ $(lines "$d/run.journal") -lt $target ]] && kill -0 $pid 2>/dev/null &&
		((SECONDS < deadline)); do
		sleep 0.01
	done
	kill -9 $pid 2>/dev/null || { cat "$d/run.err"; echo "the run ended before step $target"; exit 1; }
	wait $pid || true
	n=$(lines "$d/run.journal")
	echo "$n" >"$d/killed_at"
	cat "$d/run.err"
	# Until the kill, the run under the preload emitted the reference's tokens.
	same_steps "$d/ref.journal" "$d/run.journal" "$n"
	say "aimed at step $target, killed after $n steps, each the reference's"
}

# The offline restore's routing against the reference's truth.
routing() {
	local d=$work/$1 wal=/dev/shm/moeft-gpu-$1.wal
	[[ -f $d/killed_at ]] || { echo "no killed run"; exit 1; }
	rm -rf "$d/restore"
	"$moeft" restore --wal "$wal" --out "$d/restore"
	python3 tests/gpu/check_routing.py "$d/restore" "$d/ref.truth" | tee "$d/routing.out"
	say "$(sed -n 's/^check_routing: OK: \([^:]*\):.*/\1/p' "$d/routing.out")"
}

# Online restore; its KV as of right before the first resumed step is dumped.
resumed() {
	local d=$work/$1 wal=/dev/shm/moeft-gpu-$1.wal r n
	[[ -f $d/killed_at ]] || { echo "no killed run"; exit 1; }
	rm -f "$d/resume.kv" "$d/resume.kv.json"
	# shellcheck disable=SC2046 # one word per variable
	env $(preload_env "$d") timeout "$run_timeout" "$moeft" restore --wal "$wal" --preload "$lib" -- \
		python3 "$gen" --mode "$1" --steps "$steps" --journal "$d/run.journal" \
		--dump-kv-at-resume "$d/resume.kv" >"$d/resumed.out" 2>"$d/resumed.err" ||
		{ cat "$d/resumed.err"; exit 1; }
	cat "$d/resumed.out" "$d/resumed.err"
	r=$(field "$d/resumed.out" times resumed-at)
	n=$(cat "$d/killed_at")
	echo "resumed at step $r after a kill at step $n: $((n - r)) steps computed again"
	touch "$d/resumed_ok"
	say "resumed at step $r, RPO $((n - r)) steps"
}

# The resumed run's KV before step R against the reference's (of the last
# step) as of step R-1.  Eager mode: a window's snapshot is taken at the next
# step's layer-0 topk, after that step's layer-0 attention wrote position
# p_R, so layer 0 may hold step R's K/V there (check_kv.py's docstring).
kv() {
	local d=$work/$1 allow=() next
	[[ -f $d/resumed_ok ]] || { echo "no resumed run"; exit 1; }
	if [[ $1 == eager ]]; then allow=(--allow-next-layer0); fi
	python3 tests/gpu/check_kv.py ${allow[@]+"${allow[@]}"} "$d/ref.kv" "$d/resume.kv" |
		tee "$d/kv.out"
	next=$(sed -n 's/^check_kv: OK: .*: equal; \(.*\)/; \1/p' "$d/kv.out")
	say "$(sed -n 's/^check_kv: OK: \([^:]*\):.*/\1/p' "$d/kv.out")$next"
}

tokens() {
	local d=$work/$1
	[[ -f $d/resumed_ok ]] || { echo "no resumed run"; exit 1; }
	diff <(grep '^result ' "$d/ref.out") <(grep '^result ' "$d/resumed.out")
	cmp "$d/ref.journal" "$d/run.journal"
	say "token hash $(field "$d/ref.out" result token-hash) and journal equal"
}

part_checks() {
	local mode
	for mode in ${GPU_MODES:-eager graph}; do
		check checks "$mode: reference run" reference "$mode"
		[[ $mode == eager ]] && check checks "$mode: the same run again" again "$mode"
		check checks "$mode: killed under the preload" killed "$mode"
		check checks "$mode: routing of the committed windows" routing "$mode"
		check checks "$mode: moeft restore -- moe_generate.py" resumed "$mode"
		check checks "$mode: KV before the first resumed step" kv "$mode"
		check checks "$mode: tokens of the resumed run" tokens "$mode"
	done
}

# ---- kernels --------------------------------------------------------------------

kernels() {
	timeout "$run_timeout" "$build/tests/gpu/test_kernels_gpu" | tee "$work/kernels.out"
	say "$(head -1 "$work/kernels.out" | sed 's/^test_kernels_gpu: //'): $(tail -1 "$work/kernels.out")"
}

# ---- moeft-serve --------------------------------------------------------------

serve_kills() {
	MOEFT_RESTORE_KILLS=${GPU_KILLS:-20} timeout "$run_timeout" bash tests/restore/kill.sh "$moeft" "$lib" "$serve" |
		tee "$work/kills.out"
	say "$(tail -1 "$work/kills.out" | sed 's/^restore kill.sh: //')"
}

# memcheck's report in FILE holds no error but the shim's end-of-list probe:
# CUDA has no parameter count, so the shim asks cuFuncGetParamInfo (or
# cuKernelGetParamInfo) for one index past the last parameter at a kernel's
# first launch, and the driver's "invalid argument" there is the answer,
# which the sanitizer reports as an API error.  Anything else fails.
only_probes() {
	local errors heads probes
	errors=$(sed -n 's/^========= ERROR SUMMARY: \([0-9]*\) error.*/\1/p' "$1")
	[[ -n $errors ]] || { echo "no ERROR SUMMARY in the sanitizer's report"; return 1; }
	heads=$(grep -E '^========= [^ ]' "$1" | grep -vc -E '^========= (COMPUTE-SANITIZER|ERROR SUMMARY)' || true)
	probes=$(grep -c -E '^========= Program hit CUDA_ERROR_INVALID_VALUE \(error 1\) due to "invalid argument" on CUDA API call to cu(Func|Kernel)GetParamInfo\.$' "$1" || true)
	# Each probe's first frame is the shim's parameter walk.
	[[ $(grep -c 'Host Frame: name_and_params in first_launch.c' "$1" || true) == "$probes" ]] &&
		[[ $heads == "$errors" && $probes == "$errors" ]] && { echo "$probes"; return; }
	grep -E '^========= [^ ]' "$1" | grep -v -E 'GetParamInfo|COMPUTE-SANITIZER' | head -20
	echo "$errors errors, $probes of them parameter probes"
	return 1
}

sanitize() {
	local mode=$1 wal=/dev/shm/moeft-gpu-san.wal rc=0 probes
	rm -f "$wal" "$wal.kv"
	"$serve" --mode="$mode" --steps=64 >"$work/san.plain"
	# The preload goes on the sanitizer's child only, after what the
	# sanitizer itself may have put in LD_PRELOAD.
	# shellcheck disable=SC2016 # expanded by that sh
	MOEFT_WAL=$wal timeout "$run_timeout" compute-sanitizer --tool memcheck --target-processes all \
		--error-exitcode 99 --print-limit 1000 \
		sh -c 'LD_PRELOAD="$0${LD_PRELOAD:+:$LD_PRELOAD}" exec "$@"' "$(realpath "$lib")" \
		"$serve" --mode="$mode" --steps=64 >"$work/san.out" || rc=$?
	[[ $rc == 0 || $rc == 99 ]] || { head -80 "$work/san.out"; echo "exit $rc"; exit 1; }
	probes=$(only_probes "$work/san.out") || { echo "$probes"; exit 1; }
	grep -v '^=========' "$work/san.out" | cmp "$work/san.plain" -
	"$moeft" verify --wal "$wal"
	say "no memory error; $probes API errors, each the shim's parameter-count probe; output as without the preload; log verifies"
}

# ---- bench -----------------------------------------------------------------------

bench() {
	# shellcheck disable=SC2086 # GPU_BENCH_ARGS: words for bench.py
	python3 tests/gpu/bench.py --moeft "$moeft" --lib "$lib" --timeout "$run_timeout" \
		--out "$work/bench.md" --logs "$logdir/bench" ${GPU_BENCH_ARGS:-}
	say "table in bench.log"
}

# ---- main ----------------------------------------------------------------------------

build_moeft
for p in "${parts[@]}"; do
	case $p in
	build) ;;
	checks) part_checks ;;
	kernels) check kernels "test_kernels_gpu" kernels ;;
	serve) check serve "tests/restore/kill.sh, moeft-serve" serve_kills ;;
	sanitizer)
		check sanitizer "memcheck, moeft-serve eager" sanitize eager
		check sanitizer "memcheck, moeft-serve graph" sanitize graph ;;
	bench) check bench "bench.py" bench ;;
	esac
done

{
	echo "| part | check | result | detail |"
	echo "|---|---|---|---|"
	printf '%s\n' "${results[@]}"
	[[ -f $work/bench.md ]] && { echo; cat "$work/bench.md"; }
} >"$logdir/summary.md"
echo
cat "$logdir/summary.md"
! grep -q '| FAIL' "$logdir/summary.md"
