#!/bin/sh
# failclosed.sh - restore fails closed: a command is told to resume only by
# the preload, once the preload has taken the restore plan, and
# `moeft restore -- CMD` starts nothing it cannot restore.  Each case must
# end with a non-zero status, a message naming the cause, and no output of
# the command (it did not resume on zeroed KV):
#   MOEFT_DISABLE=1, a bad MOEFT_* value, a log others can write (which the
#   preload would refuse), a log held by a live writer (an
#   offline restore refuses it too), a --preload that is no moeft library
#   (CMD not started; and the preload
#   itself refuses, status 3, when CMD is started without moeft restore's
#   checks); the KV store gone (status 1, CMD not started); a damaged
#   commit word (verify exits 1: restore must not exit 0, offline or
#   online).
#
# Usage: failclosed.sh MOEFT LIBMOEFT SERVE DROP_PRELOAD
set -u

moeft=$1 lib=$2 serve=$3 drop=$4
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT

fail() {
	echo "restore failclosed.sh: $*" >&2
	exit 1
}

# The crashed process: a finished run stands in for it.
MOEFT_WAL="$dir/w.wal" LD_PRELOAD="$lib" "$serve" --steps=40 --journal="$dir/j" \
	>/dev/null || fail "the first run failed"

# fresh NAME: a copy of the crashed process's log, store and journal.
fresh() {
	cp "$dir/w.wal" "$dir/$1.wal"
	cp "$dir/w.wal.kv" "$dir/$1.wal.kv"
	cp "$dir/j" "$dir/j.$1"
}

# refused NAME STATUS MESSAGE [VAR=VALUE...] -- [RESTORE-OPTIONS]: moeft
# restore of NAME's log with the variables set ends with STATUS, MESSAGE
# on stderr, and the command printed nothing.
refused() {
	name=$1 want=$2 msg=$3
	shift 3
	vars=""
	while [ $# -gt 0 ] && [ "$1" != -- ]; do
		vars="$vars $1"
		shift
	done
	shift
	# shellcheck disable=SC2086 # $vars are words
	env $vars "$moeft" restore --wal "$dir/$name.wal" "$@" -- "$serve" --steps=40 \
		--journal="$dir/j.$name" >"$dir/$name.out" 2>"$dir/$name.err"
	status=$?
	[ "$status" = "$want" ] || fail "$name: exit $status, want $want: $(cat "$dir/$name.err")"
	grep -qF -- "$msg" "$dir/$name.err" || fail "$name: no '$msg' in: $(cat "$dir/$name.err")"
	[ -s "$dir/$name.out" ] && fail "$name: the command printed $(cat "$dir/$name.out")"
	return 0
}

# 1. What would keep the preload from restoring is refused before CMD runs.
fresh disable
refused disable 2 "MOEFT_DISABLE=1 keeps the preload off" MOEFT_DISABLE=1 -- --preload "$lib"
fresh badvar
refused badvar 2 "MOEFT_WINDOW" MOEFT_WINDOW=0 -- --preload "$lib"
fresh held
flock -x -F "$dir/held.wal" sleep 30 &
holder=$!
# Until the holder has the lock (a fixed pause lost the race under load).
while flock -n -x "$dir/held.wal" true; do
	kill -0 $holder 2>/dev/null || fail "held: the lock holder ended"
	sleep 0.05
done
refused held 1 "in use by another writer" -- --preload "$lib"
"$moeft" restore --wal "$dir/held.wal" --out "$dir/held.restore" >/dev/null 2>"$dir/held.off"
status=$?
[ "$status" = 1 ] && grep -q "in use by another writer" "$dir/held.off" ||
	fail "held: the offline restore exits $status: $(cat "$dir/held.off")"
[ -e "$dir/held.restore" ] && fail "held: the offline restore wrote $dir/held.restore"
kill "$holder"
wait "$holder" 2>/dev/null
fresh unsafe
chmod 0666 "$dir/unsafe.wal"
refused unsafe 2 "writable by group or others" -- --preload "$lib"
grep -q "the preload would refuse it" "$dir/unsafe.err" || fail "unsafe: $(cat "$dir/unsafe.err")"
fresh notlib
refused notlib 2 "not a moeft preload library" -- --preload "$(command -v sh)"
fresh libc
refused libc 2 "not a moeft preload library" -- --preload \
	"$(gcc -print-file-name=libc.so.6)"

# ... and the preload refuses by itself (status 3) when a command comes to
# it in restore mode with what moeft restore would have refused.
fresh direct
"$moeft" restore --wal "$dir/direct.wal" --out "$dir/direct.restore" >/dev/null 2>&1 ||
	fail "direct: the offline restore failed"
for vars in MOEFT_DISABLE=1 MOEFT_WINDOW=0; do
	env MOEFT_WAL="$dir/direct.wal" MOEFT_RESTORE="$dir/direct.restore/plan" "$vars" \
		LD_PRELOAD="$lib" "$serve" --steps=40 --journal="$dir/j.direct" \
		>"$dir/direct.out" 2>"$dir/direct.err"
	status=$?
	[ "$status" = 3 ] || fail "direct $vars: exit $status, want 3: $(cat "$dir/direct.err")"
	grep -q "restore: .*${vars%%=*}" "$dir/direct.err" ||
		fail "direct $vars: $(cat "$dir/direct.err")"
	[ -s "$dir/direct.out" ] && fail "direct $vars: the command printed"
done
# A command behind a wrapper that drops the preload (drop_preload.c, as
# env -u LD_PRELOAD does):
# the wrapper's preload handed over its own close-on-exec descriptor of the
# manifest, which names nothing in the command, so the command cannot
# resume on KV nobody restored: it fails to read its resume position.  (When
# moeft restore itself handed out the manifest, it resumed: wrong output,
# status 0.)
fresh nopreload
"$moeft" restore --wal "$dir/nopreload.wal" --preload "$lib" -- "$drop" "$serve" \
	--steps=40 --journal="$dir/j.nopreload" >"$dir/nopreload.out" 2>"$dir/nopreload.err"
status=$?
[ "$status" != 0 ] || fail "no preload: exit 0: $(cat "$dir/nopreload.out")"
grep -q 'MOEFT_RESTORE_MANIFEST=/proc/self/fd/[0-9]*: No such file or directory' \
	"$dir/nopreload.err" || fail "no preload: $(cat "$dir/nopreload.err")"
[ -s "$dir/nopreload.out" ] && fail "no preload: the command printed"
"$serve" --steps=40 >"$dir/plain"

# ... and when nothing can copy the KV in any more (moeft's kernels cannot
# load, so capture never starts; with MOEFT_RESTORE_AT=step the copies
# wait for a step capture would see), the process stops (status 3), never
# ending as if resumed; with init the copies come before capture is needed,
# so the run ends restored, capture off (one line).
"$serve" --steps=40 >"$dir/plain"
fresh nokernels
FIXTURE_NO_MOEFT_KERNELS=1 MOEFT_RESTORE_AT=step "$moeft" restore --wal "$dir/nokernels.wal" \
	--preload "$lib" -- "$serve" --steps=40 --journal="$dir/j.nokernels" \
	>"$dir/nokernels.out" 2>"$dir/nokernels.err"
status=$?
[ "$status" = 3 ] || fail "no kernels, at step: exit $status, want 3: $(cat "$dir/nokernels.err")"
grep -q "restore: capture stopped (.*) before the restored KV was copied in" \
	"$dir/nokernels.err" || fail "no kernels, at step: $(cat "$dir/nokernels.err")"
[ -s "$dir/nokernels.out" ] && fail "no kernels, at step: the command printed"
fresh nokernels
FIXTURE_NO_MOEFT_KERNELS=1 "$moeft" restore --wal "$dir/nokernels.wal" --preload "$lib" -- \
	"$serve" --steps=40 --journal="$dir/j.nokernels" >"$dir/nokernels.out" \
	2>"$dir/nokernels.err" || fail "no kernels, at init: exit $?: $(cat "$dir/nokernels.err")"
cmp -s "$dir/nokernels.out" "$dir/plain" || fail "no kernels, at init: output differs"

# 2. The KV store gone: status 1, the command not started.
fresh nokv
rm "$dir/nokv.wal.kv"
refused nokv 1 "nokv.wal.kv does not exist" -- --preload "$lib"

# 3. A damaged commit word (its check bits): verify exits 1, and so does
# restore, offline and online.  The top byte of the check bits is flipped,
# not overwritten: a fixed value would match them one run in 256.
fresh word
top=$(od -An -tu1 -j647 -N1 "$dir/word.wal" | tr -d ' ')
printf "\\$(printf %03o $((top ^ 255)))" | dd of="$dir/word.wal" bs=1 seek=647 conv=notrunc \
	2>/dev/null
[ "$(od -An -tu1 -j647 -N1 "$dir/word.wal" | tr -d ' ')" = $((top ^ 255)) ] ||
	fail "word: the flip did not land"
"$moeft" verify --wal "$dir/word.wal" >/dev/null 2>&1
[ $? = 1 ] || fail "word: verify does not see the damage"
"$moeft" restore --wal "$dir/word.wal" --out "$dir/word.restore" >/dev/null 2>"$dir/word.off"
status=$?
[ "$status" = 1 ] || fail "word: the offline restore exits $status, want 1: $(cat "$dir/word.off")"
refused word 1 "damage" -- --preload "$lib"

echo "restore failclosed.sh: disabled, bad variable, live writer, no preload library," \
	"the preload's own refusals, no KV store, damaged commit word: ok"
