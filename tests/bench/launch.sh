#!/bin/sh
# launch.sh - 'moeft bench launch' with a build tree's pieces: its
# libmoeft.so, the CPU fixture, the launch micro-benchmark and the fixture
# build of the serving program.  The README's figures come from this.
#
# Usage: tests/bench/launch.sh [BUILD_DIR] [moeft bench launch OPTIONS]
#        (default build/, as tools/setup.sh makes)
set -eu

build=build
case ${1:-} in -*|'') ;; *) build=$1; shift ;; esac
[ -x "$build/tools/moeft" ] ||
	{ echo "launch.sh: no $build/tools/moeft: run tools/setup.sh" >&2; exit 2; }
exec "$build/tools/moeft" bench launch --preload "$build/preload/libmoeft.so" \
	--fixture "$build/tests/fixture" --bench "$build/tests/bench/launch_bench" \
	--serve "$build/tests/serve/serve" "$@"
