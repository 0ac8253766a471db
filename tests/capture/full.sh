#!/bin/sh
# full.sh - a KV store that cannot grow: said once, then counted.
#
# Usage: full.sh LIBMOEFT SERVE MOEFT
#
# The serving program (8 layers, a KV pool each) under the preload with a
# file size limit (ulimit -f, SIGXFSZ ignored: the store's file stops
# growing as on a full disk) that holds the log and some pools, not all.
# The run prints what the plain run prints; the store's failure and the
# preload's "not tracked" are each one line, however many steps hit the
# pools; the exit summary's kv_pools_untracked is the pools that the log's
# restore does not have; every decode window is flagged KV-partial, so the
# restore says so and exits 1 (and an online one would not start).
set -eu

lib=$1 serve=$2 moeft=$3
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
layers=8

fail() {
	echo "capture full.sh: $*" >&2
	exit 1
}

set -- --steps=100 --seqs=32 --layers=$layers
"$serve" "$@" >"$dir/plain" || fail "the plain run failed"
(
	trap '' XFSZ
	ulimit -f 8192	# KiB: the 1 MiB log and some of the pools' 2 x 1 MiB
	env MOEFT_WAL="$dir/s.wal" MOEFT_WAL_SIZE=1M MOEFT_LOG=info LD_PRELOAD="$lib" \
		"$serve" "$@" >"$dir/out" 2>"$dir/err"
) || fail "the run under the preload failed: $(cat "$dir/err")"
cmp -s "$dir/plain" "$dir/out" || fail "the output differs from the plain run's"
n=$(grep -c 's.wal.kv: cannot reserve .* bytes: File too large$' "$dir/err" || true)
[ "$n" = 1 ] || fail "the store's failure said $n times, want once: $(sort "$dir/err" | uniq -c)"
said='not tracked: I/O error; no more pools are tried, and every window from now on is committed KV-partial (a restore refuses it; the exit summary counts the pools not tracked)'
n=$(grep -c "^moeft: KV pool of .* $said\$" "$dir/err" || true)
[ "$n" = 1 ] || fail "'not tracked' said $n times, want once: $(sort "$dir/err" | uniq -c)"
untracked=$(sed -n 's/^moeft: summary: .* kv_pools_untracked=\([0-9]*\)$/\1/p' "$dir/err")
rc=0
"$moeft" restore --wal "$dir/s.wal" --out "$dir/r" 2>"$dir/restore.err" || rc=$?
[ $rc = 1 ] && grep -q 'window [0-9]* is flagged KV-partial' "$dir/restore.err" ||
	fail "restore: exit $rc, want 1 and the window flagged KV-partial: $(cat "$dir/restore.err")"
tracked=$(python3 -c 'import json, sys; print(len(json.load(open(sys.argv[1]))["kv_pools"]))' \
	"$dir/r/manifest.json")
[ "$tracked" -gt 0 ] && [ "${untracked:-x}" = $((layers - tracked)) ] ||
	fail "summary: kv_pools_untracked=${untracked:-none}, but $tracked of $layers pools tracked"
# moeft ls does not call that window restorable.
"$moeft" ls "$dir" >"$dir/ls.txt" || fail "ls: $(cat "$dir/ls.txt")"
grep -q "^    .*; last decode window [0-9]* (steps [0-9]*-[0-9]*) is KV-partial: a restore refuses it$" \
	"$dir/ls.txt" || fail "ls of the KV-partial log: $(cat "$dir/ls.txt")"
echo "capture full.sh: $tracked pools tracked, $untracked untracked, each failure said once"
