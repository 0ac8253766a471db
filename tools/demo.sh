#!/bin/sh
# demo.sh - `moeft demo` on this repository's build: the demo serving
# program (demo/README.md) crashed under the preload and restored, on the
# GPU build (BUILD/demo/moeft-serve) when nvidia-smi sees a GPU, else on
# moeft's CPU test fixture (BUILD/tests/serve/serve: device memory is host
# memory, kernels run as host functions; the same preload).
#
# Usage: tools/demo.sh [BUILD_DIR]   (default: build, as tools/setup.sh makes)
set -eu

build=${1:-build}
[ -x "$build/tools/moeft" ] ||
	{ echo "demo.sh: no $build/tools/moeft: run tools/setup.sh" >&2; exit 2; }
if [ -x "$build/demo/moeft-serve" ] && nvidia-smi >/dev/null 2>&1; then
	serve=$build/demo/moeft-serve
	echo "demo.sh: on $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)"
else
	serve=$build/tests/serve/serve
	LD_LIBRARY_PATH=$build/tests/fixture${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
	export LD_LIBRARY_PATH
	echo "demo.sh: on the CPU test fixture (no GPU here)"
fi
exec "$build/tools/moeft" demo --preload "$build/preload/libmoeft.so" -- "$serve" \
	--mode=graph --seqs=32 --layers=8
