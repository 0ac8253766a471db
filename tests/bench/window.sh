#!/bin/sh
# window.sh - 'moeft bench window' with a build tree's pieces: its
# libmoeft.so, the CPU fixture and the fixture build of the serving
# program.  The README's figures come from this.
#
# Usage: tests/bench/window.sh [BUILD_DIR] [moeft bench window OPTIONS]
#        (default build/, as tools/setup.sh makes)
set -eu

build=build
case ${1:-} in -*|'') ;; *) build=$1; shift ;; esac
[ -x "$build/tools/moeft" ] ||
	{ echo "window.sh: no $build/tools/moeft: run tools/setup.sh" >&2; exit 2; }
exec "$build/tools/moeft" bench window --preload "$build/preload/libmoeft.so" \
	--fixture "$build/tests/fixture" --serve "$build/tests/serve/serve" "$@"
