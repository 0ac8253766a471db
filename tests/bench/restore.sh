#!/bin/sh
# restore.sh - 'moeft bench restore' with a build tree's pieces, online
# too: its libmoeft.so, the CPU fixture and the fixture build of the
# serving program.  The README's figures come from this.
#
# Usage: tests/bench/restore.sh [BUILD_DIR] [moeft bench restore OPTIONS]
#        (default build/, as tools/setup.sh makes)
set -eu

build=build
case ${1:-} in -*|'') ;; *) build=$1; shift ;; esac
[ -x "$build/tools/moeft" ] ||
	{ echo "restore.sh: no $build/tools/moeft: run tools/setup.sh" >&2; exit 2; }
exec "$build/tools/moeft" bench restore --preload "$build/preload/libmoeft.so" \
	--fixture "$build/tests/fixture" --serve "$build/tests/serve/serve" "$@"
