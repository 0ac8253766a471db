#!/bin/sh
# cpu_check.sh - check_routing.py on real moeft output: the test serving
# program (eager, one thread) under the preload on the CPU fixture, its log
# restored offline, its --truth converted by serve_truth.py; the check must
# pass, ids and gating weights, and must fail on the same restore with one
# id changed, and with one bit of one weight flipped.
#
# Usage: cpu_check.sh MOEFT LIBMOEFT SERVE
set -eu

moeft=$1 lib=$2 serve=$3
here=$(dirname "$0")
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT

fail() {
	echo "gpu cpu_check.sh: $*" >&2
	exit 1
}

# reported NAME WHAT: check_routing on the restore copied to NAME and
# changed there (WHAT) must exit 1 naming the last record's row.
reported() {
	rc=0
	python3 "$here/check_routing.py" "$dir/$1" "$dir/truth" >"$dir/$1.out" || rc=$?
	if [ $rc != 1 ] || ! grep -q 'MISMATCH: step 47 layer 3 row' "$dir/$1.out"; then
		fail "$2: exit $rc, want 1 and the mismatch: $(cat "$dir/$1.out")"
	fi
	echo "gpu cpu_check.sh: $2 is reported: $(head -1 "$dir/$1.out")"
}

env MOEFT_WAL="$dir/s.wal" LD_PRELOAD="$lib" "$serve" --mode=eager --steps=64 \
	--truth="$dir/serve.truth" >/dev/null 2>"$dir/serve.err" ||
	fail "serve under the preload failed: $(cat "$dir/serve.err")"
"$moeft" restore --wal "$dir/s.wal" --out "$dir/out" 2>"$dir/restore.err" ||
	fail "moeft restore failed: $(cat "$dir/restore.err")"
python3 "$here/serve_truth.py" "$dir/serve.truth" "$dir/truth" >/dev/null
python3 "$here/check_routing.py" "$dir/out" "$dir/truth" >"$dir/check.out" ||
	fail "check_routing on the restore: $(cat "$dir/check.out")"
cat "$dir/check.out"
# 48 steps in 3 windows, of 4 layers (serve's defaults), with the weights.
grep -q 'OK: steps 0-47 (48 steps in 3 windows), 4 layers, .* ids with their gating weights' \
	"$dir/check.out" || fail "not the windows of a 64-step run: $(cat "$dir/check.out")"

# One id of the last record changed to one its row does not hold.
cp -r "$dir/out" "$dir/flipped"
python3 - "$dir/flipped/routing.bin" <<'EOF'
import struct, sys
path = sys.argv[1]
data = bytearray(open(path, "rb").read())
at = last = 0
while at < len(data):
    last = at
    at += 4 + struct.unpack_from("<I", data, at)[0]
k, width, experts = struct.unpack_from("<HBxI", data, last + 4 + 16)
ids = last + 4 + 24
row = [int.from_bytes(data[ids + i * width:ids + (i + 1) * width], "little") for i in range(k)]
new = min(set(range(experts)) - set(row))
data[ids:ids + width] = new.to_bytes(width, "little")
open(path, "wb").write(data)
EOF
reported flipped "a changed id"

# One bit of the last record's last weight flipped (float32 weights: the
# payload's last 4 bytes).
cp -r "$dir/out" "$dir/wflip"
python3 - "$dir/wflip/routing.bin" <<'EOF'
import sys
path = sys.argv[1]
data = bytearray(open(path, "rb").read())
data[-1] ^= 0x01
open(path, "wb").write(data)
EOF
reported wflip "a flipped weight bit"
