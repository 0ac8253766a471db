#!/bin/sh
# demo.sh - moeft's main job on its embedded default: the test serving
# program (an MoE engine in miniature: 4 layers, 16 experts, top-4, a paged
# KV pool, CUDA graphs) decodes under LD_PRELOAD=libmoeft.so, is killed
# with SIGKILL mid-decode, and `moeft restore -- serve` brings it back to
# finish; the report says whether the output equals an uninterrupted run's,
# how many steps were lost (RPO) and how long the restore took (RTO).
#
# Usage: tools/demo.sh [BUILD_DIR]   (default: build, as tools/setup.sh makes)
#
# Without a GPU the program runs on moeft's CPU test fixture (device memory
# is host memory, kernels run as host functions): the same binaries and
# the same preload, minus the GPU.
set -eu

build=${1:-build}
moeft=$build/tools/moeft lib=$build/shim/libmoeft.so
serve=$build/tests/serve/serve
steps=600 mode=graph
for f in "$moeft" "$lib" "$serve"; do
	[ -e "$f" ] || { echo "demo: $f is missing: run tools/setup.sh first" >&2; exit 2; }
done
if [ -x "$build/demo/moeft-serve" ] && nvidia-smi >/dev/null 2>&1; then
	serve=$build/demo/moeft-serve where="on $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)"
else
	LD_LIBRARY_PATH=$build/tests/fixture${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
	export LD_LIBRARY_PATH
	where="on the CPU test fixture (no GPU here)"
fi
dir=$(mktemp -d /dev/shm/moeft-demo.XXXXXX)
trap 'rm -rf "$dir"' EXIT
ms() { date +%s%3N; }
args="--mode=$mode --steps=$steps --seqs=32 --layers=8"

echo "moeft demo: the test serving program, $steps decode steps, $where"
t=$(ms)
"$serve" $args >"$dir/want"
full=$(($(ms) - t))
echo "  uninterrupted run, no preload:           $full ms"

MOEFT_WAL="$dir/serve.wal" LD_PRELOAD="$lib" "$serve" $args --journal="$dir/journal" \
	>/dev/null 2>"$dir/first.err" &
pid=$!
sleep "$(awk "BEGIN { printf \"%.3f\", $full * 0.6 / 1000 }")"
kill -9 $pid 2>/dev/null || true
{ wait $pid; } 2>/dev/null || true
killed=$(grep -c '^step' "$dir/journal" || true)
echo "  run under the preload, SIGKILL at step:  $killed"

t=$(ms)
"$moeft" restore --wal "$dir/serve.wal" --preload "$lib" -- "$serve" $args \
	--journal="$dir/journal" >"$dir/got" 2>"$dir/restore.err" ||
	{ echo "demo: the restored run failed:" >&2; cat "$dir/restore.err" >&2; exit 1; }
rest=$(($(ms) - t))
resume=$(sed -n 's/.*resume at step \([0-9]*\).*/\1/p' "$dir/restore.err")
resume=${resume:-0}
copy=$(sed -n 's/.*KV restored in \([0-9.]*\) s.*/\1/p' "$dir/restore.err")
offline=$(sed -n 's/.*routing records; \([0-9.]*\) s,.*/\1/p' "$dir/restore.err")

echo "  moeft restore: $(sed -n 's/^moeft restore: \(window .*\) ->.*/\1/p' "$dir/restore.err")"
echo "  resumed at step $resume; finished the remaining $((steps - resume)) steps in $rest ms"
echo
if cmp -s "$dir/got" "$dir/want"; then
	echo "RESULT: the restored run's output equals the uninterrupted run's (every token, KV CRC)"
else
	echo "RESULT: the outputs DIFFER"
	cat "$dir/got" "$dir/want"
	exit 1
fi
echo "RPO: $((killed - resume)) steps lost of $killed decoded (window: 16 steps)"
echo "RTO: ${offline:-?} s to read and verify the log and write the state, ${copy:-?} s to copy the KV in;"
redo=$((full * killed / steps))
echo "     without moeft the program would start over: $killed steps to decode again, about"
echo "     $redo ms here ($(awk "BEGIN { r = ${offline:-0} + ${copy:-0}; printf \"%.0f\", (r > 0 ? $redo / 1000 / r : 0) }")x the restore)"
