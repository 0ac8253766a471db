#!/bin/sh
# copyin.sh - the preload's copy of the pool images into device memory
# (preload/copyin.c), byte for byte, into a pool the program filled with
# NaN: a 35 MiB image made sparse, with holes of 2 MiB and 10 MiB (zeroed
# on the device, not read), a 100 KiB hole between data (read with it) and
# a data run of 20 MiB (three 8 MiB pieces).  Twice: through pinned
# buffers with one reading thread (taskset: its two buffers carry four
# pieces, each refilled once), and through pageable buffers, the driver
# short of pinned memory, with as many threads as the CPUs.  Each copy is
# slow to start (FIXTURE_COPY_DELAY_US), so that a buffer refilled before
# its copy ran shows.  The pool the restored program finds before its
# first step must have the image's CRC-32C, and the preload's line must
# count the data and the zeros.
#
# Usage: copyin.sh MOEFT LIBMOEFT SERVE KVTOOL
set -u

moeft=$1 lib=$2 serve=$3 kvtool=$4
dir=$(mktemp -d /dev/shm/moeft-copyin-XXXXXX)   # tmpfs: it keeps holes
trap 'rm -rf "$dir"' EXIT

fail() {
	echo "restore copyin.sh: $*" >&2
	exit 1
}

# NaN in the pools first: a hole the copy left alone would show.
args="--hidden=1024 --kv-heads=8 --seqs=64 --steps=64 --kv-layout=one --kv-init=nan"
MOEFT_WAL="$dir/w.wal" LD_PRELOAD="$lib" "$serve" $args --journal="$dir/j" >/dev/null ||
	fail "the first run failed"
# The plan and the images, written by moeft restore for a command that
# makes no CUDA call (one of this build's: a sanitizer build's preload
# needs its runtime in the program).
"$moeft" restore --wal "$dir/w.wal" --out "$dir/out" --images --preload "$lib" -- "$kvtool" crc "$dir/j" \
	2>"$dir/restore.err" || fail "moeft restore: $(cat "$dir/restore.err")"
image=$dir/out/kv-pool-0.bin
size=$(stat -c %s "$image")
[ "$size" = 36700160 ] || fail "the pool is $size bytes, the forged image needs 36700160"

# The forged image, in KiB: data 0-3072, hole 3072-5120, data 5120-5124,
# hole 5124-5224, data 5224-25600, hole to the end (35840).  The data is
# the run's own (every chunk of a NaN-filled pool was stored, so the image
# has no hole of its own; made sure by copying it whole), the holes are
# punched: the program computes on KV it can read (random bytes would be
# floats out of range of its integer hash, which UBSan reports).
cp --sparse=never "$image" "$image.whole" && mv "$image.whole" "$image" || fail "cp"
hole() {	# hole FROM_KIB TO_KIB
	fallocate --punch-hole --offset $(($1 * 1024)) --length $((($2 - $1) * 1024)) \
		"$image" || fail "fallocate"
}
hole 3072 5120
hole 5124 5224
hole 25600 35840
want_crc=$("$kvtool" crc "$image")
want_zero=$(((2048 + 10240) * 1024))
want_data=$((size - want_zero))

# The command in restore mode, on the forged plan directly (moeft restore
# would make the images again from the log).
for how in pinned pageable; do
	cp "$dir/j" "$dir/j.$how"
	case $how in
	pinned) max= cpus="taskset -c 0" ;;	# one thread: its 2 buffers for 4 pieces
	pageable) max=$(((8 << 20) - 1)) cpus= ;;	# under the 8 MiB buffers, over the ring's 4
	esac
	$cpus env FIXTURE_COPY_DELAY_US=2000 FIXTURE_PINNED_MAX=$max MOEFT_LOG=info \
		MOEFT_RESTORE="$dir/out/plan" MOEFT_WAL="$dir/w.wal" LD_PRELOAD="$lib" "$serve" $args \
		--journal="$dir/j.$how" --truth="$dir/t.$how" >/dev/null 2>"$dir/$how.err" ||
		fail "$how: the restored run failed: $(cat "$dir/$how.err")"
	got=$(sed -n 's/^resume-kv //p' "$dir/t.$how")
	[ "$got" = "$want_crc" ] ||
		fail "$how: the pool before the first step has CRC $got, the image $want_crc"
	grep -q "restore: 1 KV pools of window [0-9]* (steps [0-9-]*): $size bytes of KV restored in .*: $want_data bytes of data copied .*, $want_zero bytes of zeros set" \
		"$dir/$how.err" || fail "$how: no line counting $want_data bytes of data and $want_zero of zeros: $(grep restore: "$dir/$how.err")"
	line=$(grep "reading threads:" "$dir/$how.err")
	case $how:$line in
	"pinned:"*"reading threads: 1, buffers: pinned;"*) ;;
	"pageable:"*", buffers: pageable (no pinned memory);"*) ;;
	*) fail "$how: $line" ;;
	esac
done

# An image one page short is no image of the pool: the command stops.
truncate -s $((size - 4096)) "$image"
cp "$dir/j" "$dir/j.short"
MOEFT_RESTORE="$dir/out/plan" MOEFT_WAL="$dir/w.wal" LD_PRELOAD="$lib" "$serve" $args \
	--journal="$dir/j.short" >/dev/null 2>"$dir/short.err"
rc=$?
[ $rc = 3 ] || fail "a short image: status $rc, want 3"
grep -q "kv-pool-0.bin: not a file of $size bytes" "$dir/short.err" ||
	fail "a short image: $(cat "$dir/short.err")"
exit 0
