#!/bin/sh
# pools.sh - the KV store's pool count and its reclaim, end to end (issue
# 13, points 4 and 5).
#
# Usage: pools.sh MOEFT LIBMOEFT SERVE KVTOOL
#
# Many pools: the test serving program with 96 layers, a KV pool each (a
# 48-layer StaticCache has as many, K and V apart), is restored offline
# with all 96 pools, their bytes the truth's after the window's last step,
# and online to the uninterrupted run's output.  Each pool is a chunk of
# 64 KiB and a short one, and a window changes nearly all of them: the
# snapshot's staging must have a table entry for every short chunk.
#
# Many runs on one log: 25 runs of as many models (other hidden sizes, so
# other pools) one after the other, then the last one restored: all of its
# pools, none of the store's left over from the runs before (they are
# reclaimed once a later run has committed a decode window of its own), and
# the store's file holds little more than the last run's pools.  A run that
# ends before its first decode window commits reclaims nothing: the run
# before it is still the one a restore brings back, whole.
set -u

moeft=$(realpath "$1") lib=$(realpath "$2") serve=$(realpath "$3") tool=$(realpath "$4")
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT

fail() {
	echo "restore pools.sh: $*" >&2
	exit 1
}

# manifest DIR EXPR: a Python expression over the manifest m
manifest() {
	python3 -c 'import json, sys; m = json.load(open(sys.argv[1])); print(eval(sys.argv[2]))' \
		"$1/manifest.json" "$2"
}

# run WAL NAME SERVE-ARGS...: serve under the preload on WAL, its truth in
# NAME.truth and its journal in NAME.j; a finished run stands in for a
# crashed one (the steps after its last window are not committed).
run() {
	wal=$1 name=$2
	shift 2
	rm -f "$dir/$name.j"
	env MOEFT_WAL="$wal" MOEFT_WAL_SIZE=16M LD_PRELOAD="$lib" "$serve" "$@" \
		--journal="$dir/$name.j" --truth="$dir/$name.truth" >/dev/null 2>"$dir/$name.err" ||
		fail "$name: the run under the preload failed: $(cat "$dir/$name.err")"
}

# restored WAL NAME POOLS LEFT SERVE-ARGS...: the offline restore of WAL
# holds POOLS pools, whose bytes in ordinal order are NAME's truth after
# the window's last step, and leaves LEFT pools of the store out (those of
# no allocation of NAME's); online, the command ends as the uninterrupted
# run does.
restored() {
	wal=$1 name=$2 pools=$3 left=$4
	shift 4
	out=$dir/$name.out
	"$moeft" restore --wal "$wal" --out "$out" 2>"$out.err" ||
		fail "$name: restore: exit $?: $(cat "$out.err")"
	got=$(manifest "$out" 'len(m["kv_pools"])')
	[ "$got" = "$pools" ] || fail "$name: $got pools restored, want $pools: $(cat "$out.err")"
	if [ "$left" = 0 ]; then
		grep -q "left out" "$out.err" && fail "$name: pools of earlier runs kept: $(cat "$out.err")"
	else
		grep -q "note: $left KV pools of the store left out" "$out.err" ||
			fail "$name: want $left pools left out: $(cat "$out.err")"
	fi
	last=$(manifest "$out" 'm["window"]["last_step"]')
	want=$(awk -v s="step $last" '$0 == s { f = 1 } f && /^kv / { print $2; exit }' \
		"$dir/$name.truth")
	# shellcheck disable=SC2046 # one word per image
	got=$(cd "$out" && "$tool" crc $(manifest . \
		'" ".join(p["file"] for p in sorted(m["kv_pools"], key=lambda p: p["ordinal"]))'))
	[ "$got" = "$want" ] || fail "$name: pools have CRC $got after step $last, truth says $want"
	"$serve" "$@" >"$dir/$name.plain"
	cp "$wal" "$dir/online.wal" && cp "$wal.kv" "$dir/online.wal.kv"
	"$moeft" restore --wal "$dir/online.wal" --preload "$lib" -- "$serve" "$@" \
		--journal="$dir/$name.j" >"$dir/$name.online" 2>"$dir/$name.online.err" ||
		fail "$name: online restore: exit $?: $(cat "$dir/$name.online.err")"
	cmp -s "$dir/$name.online" "$dir/$name.plain" ||
		fail "$name: the restored run's output differs from the uninterrupted run's"
	rm -rf "$dir/online.wal" "$dir/online.wal.kv" "$dir/online.wal.restore"
	echo "restore pools.sh: $name: $pools pools restored, CRC $got == truth after step $last"
}

# 96 pools, one per layer.
set -- --layers=96 --seqs=16 --hidden=50 --steps=40
run "$dir/l.wal" layers "$@"
restored "$dir/l.wal" layers 96 0 "$@"

# 25 runs on one log, each of another model; the last one restored.
i=0
while [ $i -lt 25 ]; do
	run "$dir/m.wal" "run$i" --hidden=$((64 + 2 * i)) --steps=40
	i=$((i + 1))
done
restored "$dir/m.wal" run24 4 0 --hidden=112 --steps=40
# The last run's 4 pools of 71680 bytes, each in 2 chunks of 64 KiB with
# two slots (260 KiB a region), the header and the table page in use:
# about 1 MiB, under 2 MiB.  Without reclaim, 25 runs' pools: 25 MiB.
kib=$(du -k "$dir/m.wal.kv" | cut -f1)
[ "$kib" -lt 2048 ] || fail "the store takes $kib KiB after 25 runs: earlier runs' pools kept"

# A run of yet another model that ends before its first decode window
# (8 steps, window 16) commits nothing of its own: the last run is still
# the one restored, whole.  Once it commits, its model's pools are the
# store's.
run "$dir/m.wal" short --hidden=200 --steps=8
restored "$dir/m.wal" run24 4 4 --hidden=112 --steps=40
run "$dir/m.wal" next --hidden=200 --steps=40
restored "$dir/m.wal" next 4 0 --hidden=200 --steps=40
