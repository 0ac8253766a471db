#!/bin/sh
# clobber.sh - no moeft command writes over or removes a moeft log or KV
# store that it did not make in the run, nor the log it reads, whatever
# their names (tools/guard.c).
#
# Usage: clobber.sh MOEFT FORGED
#
# A forged log L and its store L.kv; each command that writes or removes
# files is aimed at them, by their names and by others (a hard link, a
# symbolic link, a copy): exit 2, the exact message on stderr, nothing on
# stdout, L, L.kv and the copy byte for byte as before and L verifying.
# Then what may be written still is: bench wal on a new path (removed
# afterwards) and on an empty file (emptied again), a restore twice into
# one directory; and a restore there removes only what a restore wrote.
set -eu

moeft=$(realpath "$1") forged=$(realpath "$2")
dir=$(mktemp -d -p /dev/shm)	# bench wal's log is 256 MiB: in memory
trap 'rm -rf "$dir"' EXIT
L=$dir/L
keep=" refusing to write over or remove it"

fail() {
	echo "clobber.sh: $*" >&2
	exit 1
}

"$forged" "$L"
cp "$L" "$dir/L.orig"
cp "$L.kv" "$dir/L.kv.orig"
cp "$L" "$dir/copy"
ln "$L" "$dir/link"
ln -s "$L" "$dir/sym"
"$moeft" verify --wal "$L" >/dev/null || fail "the forged log does not verify"

# refused WANT ARGS...: moeft ARGS exits 2, WANT its first line on stderr
refused() {
	want=$1
	shift
	rc=0
	"$moeft" "$@" >"$dir/stdout" 2>"$dir/stderr" || rc=$?
	[ "$rc" = 2 ] || fail "moeft $*: exit $rc, want 2: $(cat "$dir/stderr")"
	[ "$(head -n 1 "$dir/stderr")" = "$want" ] ||
		fail "moeft $*: said '$(cat "$dir/stderr")', want '$want'"
	[ ! -s "$dir/stdout" ] || fail "moeft $*: wrote on stdout: $(cat "$dir/stdout")"
	cmp "$L" "$dir/L.orig" || fail "moeft $*: the log changed"
	cmp "$L.kv" "$dir/L.kv.orig" || fail "moeft $*: the KV store changed"
	cmp "$dir/copy" "$dir/L.orig" || fail "moeft $*: the copy of the log changed"
	"$moeft" verify --wal "$L" >/dev/null || fail "moeft $*: the log no longer verifies"
}

# inspect --heatmap: the log read, by any name; a log or store
for f in "$L" "$dir/link" "$dir/sym"; do
	refused "moeft inspect: --heatmap $f is the log this command reads;$keep" \
		inspect --wal "$L" --heatmap "$f"
done
refused "moeft inspect: --heatmap $L.kv holds a moeft KV store;$keep" \
	inspect --wal "$L" --heatmap "$L.kv"
refused "moeft inspect: --heatmap $dir/copy holds a moeft log;$keep" \
	inspect --wal "$L" --heatmap "$dir/copy"

# demo --wal: an existing log, a KV store where the new log's would go
refused "moeft demo: --wal $L holds a moeft log;$keep" demo --wal "$L" -- /bin/true
ln "$L.kv" "$dir/new.kv"
refused "moeft demo: --wal $dir/new: its KV store: $dir/new.kv holds a moeft KV store;$keep" \
	demo --wal "$dir/new" -- /bin/true
rm "$dir/new.kv"

# bench wal --wal: a log, a store
refused "moeft bench: --wal $L holds a moeft log;$keep" bench wal --wal "$L" --seconds 0.01
refused "moeft bench: --wal $L.kv holds a moeft KV store;$keep" \
	bench wal --wal "$L.kv" --seconds 0.01

# bench wal --peers: a file where libpmemlog's pool would go
cp "$L" "$dir/p.wal.pmemlog"
refused "moeft bench: --peers: $dir/p.wal.pmemlog exists; libpmemlog's pool goes there, and nothing is written over (remove it, or give --wal another path)" \
	bench wal --wal "$dir/p.wal" --peers --seconds 0.01
cmp "$dir/p.wal.pmemlog" "$dir/L.orig" || fail "bench wal --peers: the file there changed"
[ ! -e "$dir/p.wal" ] || fail "bench wal --peers: refused, but made its log"
rm "$dir/p.wal.pmemlog"

# restore --out: files of a restore's names that are the log, a store, a log
mkdir "$dir/r1" "$dir/r2" "$dir/r3"
ln "$L" "$dir/r1/kv-pool-0.bin"
ln "$L.kv" "$dir/r2/routing.bin"
cp "$L" "$dir/r3/manifest.json.tmp"
refused "moeft restore: --out $dir/r1/kv-pool-0.bin is the log this command reads;$keep" \
	restore --wal "$L" --out "$dir/r1"
refused "moeft restore: --out $dir/r2/routing.bin holds a moeft KV store;$keep" \
	restore --wal "$L" --out "$dir/r2"
refused "moeft restore: --out $dir/r3/manifest.json.tmp holds a moeft log;$keep" \
	restore --wal "$L" --out "$dir/r3"
cmp "$dir/r3/manifest.json.tmp" "$dir/L.orig" || fail "restore --out r3: the log there changed"

# What may be written still is.
"$moeft" bench wal --wal "$dir/fresh" --seconds 0.01 >/dev/null ||
	fail "bench wal on a new path failed"
[ ! -e "$dir/fresh" ] || fail "bench wal left its log behind"
: >"$dir/empty"
"$moeft" bench wal --wal "$dir/empty" --seconds 0.01 >/dev/null ||
	fail "bench wal on an empty file failed"
[ -f "$dir/empty" ] && [ ! -s "$dir/empty" ] || fail "bench wal: the empty file is not empty"
for i in 1 2; do
	"$moeft" restore --wal "$L" --out "$dir/ok" 2>"$dir/stderr" ||
		fail "restore $i: $(cat "$dir/stderr")"
done

# restore removes only what a restore wrote: a user's kv-pool-9.bin stays,
# an image the earlier manifest lists and this restore has not goes, one it
# has is written afresh.
printf 'mine\n' >"$dir/ok/kv-pool-9.bin"
sed -i 's/"file":"kv-pool-0.bin"/"file":"kv-pool-5.bin"/' "$dir/ok/manifest.json"
mv "$dir/ok/kv-pool-0.bin" "$dir/ok/kv-pool-5.bin"
"$moeft" restore --wal "$L" --out "$dir/ok" 2>"$dir/stderr" ||
	fail "restore beside a user's files: $(cat "$dir/stderr")"
[ "$(cat "$dir/ok/kv-pool-9.bin")" = mine ] || fail "restore removed a user's kv-pool-9.bin"
[ ! -e "$dir/ok/kv-pool-5.bin" ] || fail "restore left the image its manifest listed"
[ -s "$dir/ok/kv-pool-0.bin" ] || fail "restore did not write kv-pool-0.bin"
echo "clobber.sh: ok"
