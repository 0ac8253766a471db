#!/bin/sh
# dir.sh - one restore directory, many restores: a second restore while one
# writes is refused (the directory is locked); a restore killed after its
# first file landed leaves no manifest and no plan naming a mixed set; the
# next restore of another log leaves exactly its own set, every image the
# CRC its manifest gives, the earlier log's images removed, even after two
# restores killed in a row.
#
# Usage: dir.sh MOEFT LIBMOEFT SERVE KVTOOL DIE_AT
set -u

moeft=$1 lib=$2 serve=$3 kvtool=$4 die_at=$5
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT

fail() {
	echo "restore dir.sh: $*" >&2
	exit 1
}

# Two logs: four pools (one per layer), and one pool.
MOEFT_WAL="$dir/a.wal" MOEFT_WAL_SIZE=16M LD_PRELOAD="$lib" "$serve" --steps=40 >/dev/null ||
	fail "run a failed"
MOEFT_WAL="$dir/b.wal" MOEFT_WAL_SIZE=16M LD_PRELOAD="$lib" "$serve" --steps=40 \
	--kv-layout=one >/dev/null || fail "run b failed"

out=$dir/out
"$moeft" restore --wal "$dir/a.wal" --out "$out" 2>"$dir/a.err" ||
	fail "restore a: exit $?: $(cat "$dir/a.err")"

# Locked while a restore writes it.
flock -x -F "$out" sleep 30 &
holder=$!
sleep 0.2
"$moeft" restore --wal "$dir/b.wal" --out "$out" >/dev/null 2>"$dir/locked.err"
status=$?
kill "$holder"
wait "$holder" 2>/dev/null
[ "$status" = 2 ] || fail "locked: exit $status, want 2: $(cat "$dir/locked.err")"
grep -q "another moeft restore is writing it" "$dir/locked.err" ||
	fail "locked: $(cat "$dir/locked.err")"

# consistent WHAT: a manifest in OUT names only images with its CRCs.
consistent() {
	[ -e "$out/manifest.json" ] || return 0
	for pair in $(python3 -c 'import json, sys
m = json.load(open(sys.argv[1]))
print(" ".join(p["file"] + ":" + p["crc32c"][2:] for p in m["kv_pools"]))' \
		"$out/manifest.json"); do
		got=$("$kvtool" crc "$out/${pair%%:*}") || got=missing
		[ "$got" = "${pair#*:}" ] ||
			fail "$1: the manifest names ${pair%%:*} with CRC ${pair#*:}, it has $got"
	done
}

# Killed after each of its first renames (the retired list, b's image, its
# routing): a manifest left there, if any, names a consistent set, and no
# plan is left once b's first file landed.
for at in 1 2 3; do
	DIE_AT_RENAME=$at LD_PRELOAD="$die_at" "$moeft" restore --wal "$dir/b.wal" --out "$out" \
		>/dev/null 2>&1
	status=$?
	[ "$status" = 9 ] || fail "killed at rename $at: exit $status, want 9"
	consistent "killed at rename $at"
	[ "$at" -gt 1 ] && [ -e "$out/manifest.json" ] &&
		fail "killed at rename $at: a manifest is left beside b's files"
done

# The next restore leaves b's set only, each image as its manifest says.
"$moeft" restore --wal "$dir/b.wal" --out "$out" 2>"$dir/b.err" ||
	fail "restore b after the kills: $(cat "$dir/b.err")"
[ "$(ls "$out" | tr '\n' ' ')" = "kv-pool-0.bin manifest.json routing.bin " ] ||
	fail "left $(ls "$out" | tr '\n' ' ')"
want=$(python3 -c 'import json, sys
m = json.load(open(sys.argv[1]))
print(" ".join(p["crc32c"][2:] for p in m["kv_pools"]))' "$out/manifest.json")
got=$("$kvtool" crc "$out/kv-pool-0.bin")
[ "$got" = "$want" ] || fail "kv-pool-0.bin: CRC $got, the manifest says $want"
# Two kills in a row: a restore of b killed once its manifest landed (the
# fourth rename: retired list, image, routing, manifest), before it removed
# a's images; then one killed right after it put that manifest aside.  The
# next complete restore still removes a's images.
"$moeft" restore --wal "$dir/a.wal" --out "$out" 2>"$dir/a2.err" ||
	fail "restore a again: exit $?: $(cat "$dir/a2.err")"
DIE_AT_RENAME=4 LD_PRELOAD="$die_at" "$moeft" restore --wal "$dir/b.wal" --out "$out" \
	>/dev/null 2>&1
[ -e "$out/manifest.json" ] && [ -e "$out/kv-pool-3.bin" ] ||
	fail "two kills: the first kill did not land between b's manifest and its cleanup"
DIE_AT_RENAME=1 LD_PRELOAD="$die_at" "$moeft" restore --wal "$dir/b.wal" --out "$out" \
	>/dev/null 2>&1
"$moeft" restore --wal "$dir/b.wal" --out "$out" 2>"$dir/b2.err" ||
	fail "two kills: the restore after them: $(cat "$dir/b2.err")"
[ "$(ls "$out" | tr '\n' ' ')" = "kv-pool-0.bin manifest.json routing.bin " ] ||
	fail "two kills: left $(ls "$out" | tr '\n' ' ')"
echo "restore dir.sh: locked, killed at renames 1-3, two kills in a row, the next" \
	"restore's set: ok"
