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
cp "$dir/w.wal" "$dir/w.orig" && cp "$dir/w.wal.kv" "$dir/kv.orig" || fail "cp"

# From the KV store (the default: chunk maps), then from images; then the
# restored process decodes on, and its windows write block 0 into the
# store's slot of its restored copy: copied again, it is refused (-EIO)
# from the store, right from an image; block 1 is right from both.
for how in store images; do
	cp "$dir/w.orig" "$dir/w.wal" && cp "$dir/kv.orig" "$dir/w.wal.kv" && rm -rf "$dir/w.wal.restore" ||
		fail "cp"
	case $how in
	store) opt= want=-5 ;;
	images) opt=--images want=0 ;;
	esac
	"$moeft" restore --wal "$dir/w.wal" $opt --preload "$lib" -- "$devcopy" check reuse \
		>"$dir/check.out" 2>"$dir/check.err" || fail "$how: moeft restore -- devcopy check: exit $?: \
$(cat "$dir/check.err")"
	[ "$(cat "$dir/check.out")" = "devcopy: 24 blocks restored, copied and checked
devcopy: after 25 steps of new work, block 1: 0, block 0: $want" ] ||
		fail "$how: devcopy check said: $(cat "$dir/check.out") $(cat "$dir/check.err")"
	[ $how = images ] ||
		grep -q "copying restored KV failed: pool [0-9]* chunk 0: its copy of window [0-9]* in the KV store was written over since the restore" \
		"$dir/check.err" || fail "$how: no line says why the copy failed: $(cat "$dir/check.err")"
done
echo "restore devcopy.sh: 24 blocks restored, copied into other blocks and memory (from the store and from images); a block the restored process wrote over in the store refused: ok"
