#!/bin/sh
# demo.sh - `moeft demo` on this repository's build.
#
#   tools/demo.sh [BUILD_DIR]
#       the demo serving program (demo/README.md) crashed under the preload
#       and restored: the GPU build (BUILD/demo/moeft-serve) when
#       nvidia-smi sees a GPU, else moeft's CPU test fixture
#       (BUILD/tests/serve/serve: device memory is host memory, kernels run
#       as host functions; the same preload)
#   tools/demo.sh --engine vllm [BUILD_DIR]
#       a real vLLM under `moeft run --gateway`, its streaming clients
#       carried over a kill -9: the Python of tools/setup.sh --vllm, on the
#       tiny MoE model the tests make (made here when missing, about 10 s;
#       ~/.cache/moeft/tiny-moe, or MOEFT_DEMO_MODEL); on a machine without
#       a GPU, vLLM's CPU build with the settings the tests use
#
# BUILD_DIR: default build, as tools/setup.sh makes it.
set -eu

engine=serve
if [ "${1:-}" = --engine ]; then
	engine=${2:?"demo.sh: --engine needs serve or vllm"}
	shift 2
fi
build=${1:-build}
[ -x "$build/tools/moeft" ] ||
	{ echo "demo.sh: no $build/tools/moeft: run tools/setup.sh" >&2; exit 2; }
gpu=
nvidia-smi >/dev/null 2>&1 && gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)

case $engine in
serve)
	if [ -x "$build/demo/moeft-serve" ] && [ -n "$gpu" ]; then
		serve=$build/demo/moeft-serve
		echo "demo.sh: on $gpu"
	else
		serve=$build/tests/serve/serve
		LD_LIBRARY_PATH=$build/tests/fixture${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
		export LD_LIBRARY_PATH
		echo "demo.sh: on the CPU test fixture (no GPU here)"
	fi
	exec "$build/tools/moeft" demo --preload "$build/preload/libmoeft.so" -- "$serve" \
		--mode=graph --seqs=32 --layers=8 ;;
vllm)
	env=$(tools/setup.sh --vllm-env) || exit 2
	model=${MOEFT_DEMO_MODEL:-$HOME/.cache/moeft/tiny-moe}
	"$env/bin/python" python/tests/make_tiny_moe.py "$model" >/dev/null ||
		{ echo "demo.sh: could not make the tiny model in $model" >&2; exit 2; }
	export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 VLLM_NO_USAGE_STATS=1
	set --
	if [ -z "$gpu" ]; then
		echo "demo.sh: vLLM's CPU build (no GPU here)"
		export VLLM_TARGET_DEVICE=cpu VLLM_CPU_KVCACHE_SPACE=1 VLLM_CPU_OMP_THREADS_BIND=0
		# float32 and eager: greedy tokens that do not depend on the batch
		set -- --dtype float32 --enforce-eager --block-size 32 --max-model-len 2048
	fi
	exec "$build/tools/moeft" demo --engine vllm --python "$env/bin/python" \
		--model "$model" --preload "$build/preload/libmoeft.so" -- "$@" ;;
*)
	echo "demo.sh: --engine $engine: serve or vllm" >&2
	exit 2 ;;
esac
