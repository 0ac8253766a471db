#!/bin/sh
# devcopy.sh - moeft_restored_device and moeft_restored_copy (devcopy.c):
# a program killed by SIGKILL after 28 steps of windows of 8, restored by
# `moeft restore -- devcopy check`, finds its 24 committed blocks in place
# and copies them again from the restored images into other blocks and
# other memory, after overwriting the pool; outside a restore the calls
# are -ENODEV.
#
# Usage: devcopy.sh MOEFT LIBMOEFT DEVCOPY
set -u

moeft=$1 lib=$2 devcopy=$3
dir=$(mktemp -d /dev/shm/moeft-devcopy-XXXXXX)
trap 'rm -rf "$dir"' EXIT

fail() {
	echo "restore devcopy.sh: $*" >&2
	exit 1
}

printf 'profile devcopy\nstep dc_step\nkv dc_kv_write slots=p1:i64 count=grid.x block=1 pool=p0\n' \
	>"$dir/rules"
export MOEFT_PROFILE="$dir/rules" MOEFT_WINDOW=8

MOEFT_WAL="$dir/w.wal" LD_PRELOAD="$lib" "$devcopy" write 28 2>"$dir/write.err"
rc=$?
[ $rc = 137 ] || fail "the first run: status $rc, want 137 (SIGKILL): $(cat "$dir/write.err")"
"$moeft" restore --wal "$dir/w.wal" --preload "$lib" -- "$devcopy" check \
	>"$dir/check.out" 2>"$dir/check.err" || fail "moeft restore -- devcopy check: exit $?: \
$(cat "$dir/check.err")"
[ "$(cat "$dir/check.out")" = "devcopy: 24 blocks restored, copied and checked" ] ||
	fail "devcopy check said: $(cat "$dir/check.out") $(cat "$dir/check.err")"
echo "restore devcopy.sh: 24 blocks restored, copied into other blocks and memory: ok"
