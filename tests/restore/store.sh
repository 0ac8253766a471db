#!/bin/sh
# store.sh - an online restore reads device pools straight from the KV
# store (preload/kvmap.h, preload/copyin.c): `moeft restore -- CMD` writes
# a chunk map per pool and no image; the preload reads exactly the live
# chunks' bytes from the store (the bytes the restore found there), and
# the pools it gives the command are those --images gives.  A chunk whose
# bytes change in the store after the restore checked them (a byte really
# flipped in the file, between the restore and the command's start) stops
# the command with status 3 naming the pool and chunk, as do a map cut one
# byte short, a map with a flipped byte, a map of another pool, and a
# store cut short.
#
# Usage: store.sh MOEFT LIBMOEFT SERVE KVTOOL
set -u

moeft=$1 lib=$2 serve=$3 kvtool=$4
dir=$(mktemp -d /dev/shm/moeft-store-XXXXXX)
trap 'rm -rf "$dir"' EXIT

fail() {
	echo "restore store.sh: $*" >&2
	exit 1
}

# A run that ends mid-window stands in for the crashed one (16 steps past
# the last committed window, uncommitted copies in the store).  Pools of
# 64 KiB chunks that later tokens never reach: runs of zeros to skip.
args="--kv-pool-mib=4 --steps=40"
MOEFT_WAL="$dir/w.wal" LD_PRELOAD="$lib" "$serve" $args --journal="$dir/j" >/dev/null ||
	fail "the first run failed"
cp "$dir/w.wal" "$dir/w.orig" && cp "$dir/w.wal.kv" "$dir/kv.orig" && cp "$dir/j" "$dir/j.orig" ||
	fail "cp"
fresh() {	# the crashed run's files again
	cp "$dir/w.orig" "$dir/w.wal" && cp "$dir/kv.orig" "$dir/w.wal.kv" &&
		cp "$dir/j.orig" "$dir/j" && rm -rf "$dir/out" || fail "cp"
}

# restored HOW [--images]: the restored run, its pool's CRC before its
# first step into $dir/HOW.kv.
restored() {
	how=$1
	shift
	fresh
	MOEFT_LOG=info "$moeft" restore --wal "$dir/w.wal" --out "$dir/out" "$@" --preload "$lib" \
		-- "$serve" $args --journal="$dir/j" --truth="$dir/$how.truth" >/dev/null \
		2>"$dir/$how.err" || fail "$how: moeft restore: $(cat "$dir/$how.err")"
	sed -n 's/^resume-kv //p' "$dir/$how.truth" >"$dir/$how.kv"
	[ -s "$dir/$how.kv" ] || fail "$how: no pool CRC before the first step"
}

restored images --images
ls "$dir/out" | grep -q '\.map$' && fail "--images: a chunk map was written: $(ls "$dir/out")"
restored map
maps=$(ls "$dir/out" | grep -c '^kv-pool-[0-9]*\.map$')
[ "$maps" -gt 0 ] || fail "no chunk map was written: $(ls "$dir/out")"
ls "$dir/out" | grep -q '\.bin$' && [ "$(ls "$dir/out" | grep '\.bin$')" != routing.bin ] &&
	fail "an image was written beside the maps: $(ls "$dir/out")"
cmp -s "$dir/map.kv" "$dir/images.kv" ||
	fail "the pools from the store have CRC $(cat "$dir/map.kv"), from images $(cat "$dir/images.kv")"

# Bytes read from the store: exactly those of the chunks the restore took
# from it (each pool a whole number of chunks), and all of the pools'
# bytes copied or zeroed.
live=$(tr ',' '\n' <"$dir/out/manifest.json" | sed -n 's/.*"stored_chunks":\([0-9]*\).*/\1/p' |
	awk '{ n += $1 } END { print n }')
chunk=$(awk '$1 == "pool" { print $6 }' "$dir/out/plan" | sort -u)
total=$(awk '$1 == "pool" { n += $4 } END { print n }' "$dir/out/plan")
[ "$(echo "$chunk" | wc -l)" = 1 ] || fail "pools of several chunk sizes: $chunk"
[ $((total % chunk)) = 0 ] || fail "pools of $total bytes, not whole chunks of $chunk"
line=$(grep "KV restored in" "$dir/map.err") || fail "no restore line: $(cat "$dir/map.err")"
data=$(echo "$line" | sed -n 's/.*: \([0-9]*\) bytes of data copied.*/\1/p')
zero=$(echo "$line" | sed -n 's/.*, \([0-9]*\) bytes of zeros set.*/\1/p')
read=$(echo "$line" | sed -n 's/.*; \([0-9]*\) bytes read from the KV store;.*/\1/p')
[ "$read" = $((live * chunk)) ] ||
	fail "$read bytes read from the store, the restore took $live chunks of $chunk from it"
[ $((data + zero)) = "$total" ] || fail "$data bytes copied and $zero zeroed, the pools are $total"
[ "$zero" -gt 0 ] || fail "no run of zeros was set on the device: $line"

# The maps, the store and the chunks, damaged after the restore checked
# them: the command run on the plan directly, as moeft restore would start
# it (the plan written for a program of this build that makes no CUDA
# call: a sanitizer build's preload needs its runtime in the program).
fresh
"$moeft" restore --wal "$dir/w.wal" --out "$dir/out" --preload "$lib" -- "$kvtool" crc "$dir/j" \
	>/dev/null 2>"$dir/restore.err" || fail "moeft restore: $(cat "$dir/restore.err")"
cp "$dir/w.wal" "$dir/w.after" && cp "$dir/w.wal.kv" "$dir/kv.after" || fail "cp"
map=$dir/out/kv-pool-0.map
cp "$map" "$dir/map.good"
rerun() {	# rerun WHAT WANT: the command stops with status 3, saying WANT
	cp "$dir/j.orig" "$dir/j"
	MOEFT_RESTORE="$dir/out/plan" MOEFT_WAL="$dir/w.wal" LD_PRELOAD="$lib" "$serve" $args \
		--journal="$dir/j" >"$dir/r.out" 2>"$dir/r.err"
	rc=$?
	[ $rc = 3 ] || fail "$1: status $rc, want 3: $(cat "$dir/r.err")"
	grep -q -- "$2" "$dir/r.err" || fail "$1: not '$2' in: $(cat "$dir/r.err")"
	[ -s "$dir/r.out" ] && fail "$1: the command ran on"
	cp "$dir/map.good" "$map" && cp "$dir/w.after" "$dir/w.wal" &&
		cp "$dir/kv.after" "$dir/w.wal.kv" || fail "cp"
}
# A byte of a chunk the map names, flipped in the store.
set -- $("$kvtool" flip "$dir/w.wal" data) || fail "kvtool flip"
rerun "a chunk changed in the store" \
	"copying the KV in failed: pool $1 chunk $2: its bytes in the KV store fail their CRC-32C"
size=$(stat -c %s "$map")
truncate -s $((size - 1)) "$map"
rerun "a map one byte short" "kv-pool-0.map: $((size - 1)) bytes, not the $size of a map of"
printf '\001' | dd of="$map" bs=1 seek=80 conv=notrunc 2>/dev/null
rerun "a flipped entry" "kv-pool-0.map: its entries fail their CRC-32C"
if [ -e "$dir/out/kv-pool-1.map" ]; then
	cp "$dir/out/kv-pool-1.map" "$map"
	rerun "another pool's map" "kv-pool-0.map: a map of pool 1 "
fi
truncate -s $((2 << 20)) "$dir/w.wal.kv"	# the pool table only
rerun "a store cut short" "kv-pool-0.map: chunk [0-9]*: bytes [0-9]*-[0-9]* past the KV store's end (2097152)"
echo "restore store.sh: $maps pools from the store ($read bytes read, $zero zeroed) == images; changed chunk, damaged maps, short store: refused"
