#!/bin/sh
# online.sh - moeft restore -- CMD when the state cannot be taken: a
# different model (other sizes, more layers) is stopped by the preload with
# status 3 and a message naming what does not match, and --force-fresh runs
# it from scratch; a damaged KV chunk in the last window keeps the command
# from starting (status 1, the chunk named); a log with nothing committed
# starts it fresh, and so does one whose format was interrupted, while one
# with data that is no log is refused.  And when the restored bytes land
# (MOEFT_RESTORE_AT), also for pools zeroed by a memset in graph mode, whose
# first launch is recorded into a graph (a copy behind it would join the
# graph and overwrite the pools at every replay).
#
# Usage: online.sh MOEFT LIBMOEFT SERVE KVTOOL
set -u

moeft=$1 lib=$2 serve=$3 kvtool=$4
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT

fail() {
	echo "restore online.sh: $*" >&2
	exit 1
}

# The crashed process: a finished run stands in for it (its log holds the
# windows up to step 31, its journal all 40 steps).
MOEFT_WAL="$dir/w.wal" LD_PRELOAD="$lib" "$serve" --steps=40 --journal="$dir/j" \
	--truth="$dir/t" >/dev/null || fail "the first run failed"
cp "$dir/w.wal" "$dir/w.wal.orig"
cp "$dir/w.wal.kv" "$dir/w.wal.kv.orig"

# When the restored bytes are there: MOEFT_RESTORE_AT=init (the default)
# puts them right after the pools' initialiser, so the program finds the
# crashed run's pool (its CRC after step 31) before its first step;
# MOEFT_RESTORE_AT=step at its first step, so it finds zeros.  Both runs end
# with the uninterrupted run's output.
want_kv=$(sed -n '/^step 31$/,/^kv /s/^kv //p' "$dir/t")
"$serve" --steps=40 >"$dir/plain"
for at in init step; do
	cp "$dir/w.wal.orig" "$dir/$at.wal"
	cp "$dir/w.wal.kv.orig" "$dir/$at.wal.kv"
	cp "$dir/j" "$dir/j.$at"
	MOEFT_RESTORE_AT=$at "$moeft" restore --wal "$dir/$at.wal" --preload "$lib" -- "$serve" \
		--steps=40 --journal="$dir/j.$at" --truth="$dir/$at.truth" >"$dir/$at.out" \
		2>"$dir/$at.err" || fail "restore at $at: $(cat "$dir/$at.err")"
	cmp -s "$dir/$at.out" "$dir/plain" || fail "restore at $at: output differs"
	got=$(sed -n 's/^resume-kv //p' "$dir/$at.truth")
	case $at in
	init) [ "$got" = "$want_kv" ] ||
		fail "restore at init: the pool before step 32 has CRC $got, want $want_kv" ;;
	step) [ "$got" != "$want_kv" ] && [ -n "$got" ] ||
		fail "restore at step: the pool was restored before the first step ($got)" ;;
	esac
done

args="--mode=graph --kv-init=memset --steps=40"
MOEFT_WAL="$dir/m.wal" LD_PRELOAD="$lib" "$serve" $args --journal="$dir/j.m" >/dev/null ||
	fail "the memset run failed"
"$serve" $args >"$dir/m.plain"
"$moeft" restore --wal "$dir/m.wal" --preload "$lib" -- "$serve" $args --journal="$dir/j.m" \
	>"$dir/m.out" 2>"$dir/m.err" || fail "restore of the memset run: $(cat "$dir/m.err")"
cmp -s "$dir/m.out" "$dir/m.plain" ||
	fail "restore of the memset run: $(cat "$dir/m.out"), want $(cat "$dir/m.plain")"

# other: NAME WANT-LINE SERVE-ARGS...: the restore must stop the command.
# Each case gets a copy of the crashed process's log and journal.
other() {
	name=$1 want=$2
	shift 2
	cp "$dir/j" "$dir/j.$name"
	cp "$dir/w.wal" "$dir/$name.wal"
	cp "$dir/w.wal.kv" "$dir/$name.wal.kv"
	"$moeft" restore --wal "$dir/$name.wal" --preload "$lib" -- "$serve" --steps=40 "$@" \
		--journal="$dir/j.$name" >"$dir/$name.out" 2>"$dir/$name.err"
	status=$?
	[ $status = 3 ] || fail "$name: exit status $status, want 3: $(cat "$dir/$name.err")"
	grep -q "$want" "$dir/$name.err" || fail "$name: no '$want' in: $(cat "$dir/$name.err")"
	[ -s "$dir/$name.out" ] && fail "$name: the stopped command printed $(cat "$dir/$name.out")"
	# --force-fresh: the other model from scratch, as without moeft.
	"$serve" --steps=40 "$@" >"$dir/$name.want"
	"$moeft" restore --wal "$dir/$name.wal" --preload "$lib" --force-fresh -- "$serve" \
		--steps=40 "$@" --journal="$dir/j.$name" >"$dir/$name.fresh" 2>"$dir/$name.ferr" ||
		fail "$name: --force-fresh failed: $(cat "$dir/$name.ferr")"
	cmp -s "$dir/$name.fresh" "$dir/$name.want" || fail "$name: --force-fresh output differs"
	grep -q 'starting .* without restoring' "$dir/$name.ferr" ||
		fail "$name: --force-fresh said: $(cat "$dir/$name.ferr")"
}

other hidden "has no allocation of the same identity here: another model" --hidden=128
other layers "had no such KV pool: another model" --layers=5

# A damaged chunk of the last window: reported, the command not started.
chunk=$("$kvtool" flip "$dir/w.wal" data) || fail "kvtool flip failed"
"$moeft" restore --wal "$dir/w.wal" --preload "$lib" -- "$serve" --steps=40 \
	--journal="$dir/j" >"$dir/bad.out" 2>"$dir/bad.err"
status=$?
[ $status = 1 ] || fail "damaged chunk: exit status $status, want 1: $(cat "$dir/bad.err")"
set -- $chunk
grep -q "pool $1 chunk $2" "$dir/bad.err" ||
	fail "damaged chunk: pool $1 chunk $2 not named in: $(cat "$dir/bad.err")"
grep -q "not starting" "$dir/bad.err" || fail "damaged chunk: $(cat "$dir/bad.err")"
[ -s "$dir/bad.out" ] && fail "damaged chunk: the command ran"

# starts_fresh NAME WHAT: the log NAME.wal has nothing to restore, so the
# command starts fresh (and ends as a run without moeft does).
starts_fresh() {
	"$moeft" restore --wal "$dir/$1.wal" --preload "$lib" -- "$serve" --steps=40 \
		--journal="$dir/j$1" >"$dir/$1.out" 2>"$dir/$1.err" ||
		fail "$2: $(cat "$dir/$1.err")"
	cmp -s "$dir/$1.out" "$dir/n.want" || fail "$2: output differs"
	grep -q "nothing to restore, starting" "$dir/$1.err" || fail "$2: $(cat "$dir/$1.err")"
}

# Nothing committed yet: the command starts fresh.
"$kvtool" fresh "$dir/n.wal" || fail "kvtool fresh failed"
"$serve" --steps=40 >"$dir/n.want"
starts_fresh n "fresh log"

# A format killed before its superblock magic (metadata written, the data
# area zeros, here a hole) is blank, as to the preload, which takes it
# over: the command starts fresh.  One nonzero byte in the data area makes
# it no log: refused (status 2), the command not started, the file as it was.
printf 'half-written metadata' >"$dir/h.wal"
truncate -s 1M "$dir/h.wal"
cp "$dir/h.wal" "$dir/x.wal"
printf x | dd of="$dir/x.wal" bs=1 seek=8192 conv=notrunc 2>/dev/null
cp "$dir/x.wal" "$dir/x.wal.orig"
starts_fresh h "half format"
"$moeft" restore --wal "$dir/x.wal" --preload "$lib" -- "$serve" --steps=40 \
	--journal="$dir/jx" >"$dir/x.out" 2>"$dir/x.err"
ret=$?
[ $ret = 2 ] || fail "data in the data area: status $ret, want 2: $(cat "$dir/x.err")"
[ "$(cat "$dir/x.err")" = "moeft restore: $dir/x.wal: not a moeft log (no superblock magic)" ] ||
	fail "data in the data area: $(cat "$dir/x.err")"
[ -s "$dir/x.out" ] && fail "data in the data area: the command ran"
cmp -s "$dir/x.wal" "$dir/x.wal.orig" || fail "data in the data area: the file was changed"

# Killed with SIGKILL once a window committed: its state is held, and a
# plain run leaves the log alone (one line; the log byte for byte).  The
# restore brings it back and, having run to its end, exits: the next plain
# run is instrumented again and replaces it; its own clean exit holds
# nothing either.  So does MOEFT_FORCE_FRESH=1 over a held log.  A SIGTERM
# that ends the program (no handler of its own) is a stop asked for: its
# state is not held.
long="--steps=3000"
"$serve" $long >"$dir/k.want"
# signal SIG WAL: serve under the preload on WAL, sent SIG once a window
# of it has committed; its pid in victim.
signal() {
	MOEFT_WAL="$2" MOEFT_WAL_SIZE=16M LD_PRELOAD="$lib" "$serve" $long \
		--journal="$dir/jk" >/dev/null 2>&1 &
	victim=$!
	n=0
	until "$moeft" ls --json "$dir" 2>/dev/null | grep -q "\"path\":\"$2\",\"status\":\"live\",[^}]*\"restorable\":true"; do
		n=$((n + 1))
		[ $n -lt 600 ] && kill -0 $victim 2>/dev/null || break
		sleep 0.01
	done
	kill -"$1" $victim 2>/dev/null
	wait $victim
}
signal TERM "$dir/t.wal"
[ $? = 143 ] || fail "SIGTERM: the run ended before a window committed and the signal came"
"$moeft" ls --json "$dir" | grep -q "\"path\":\"$dir/t.wal\",\"status\":\"exited\",[^}]*\"restorable\":true,\"held\":false" ||
	fail "SIGTERM: ls says $("$moeft" ls --json "$dir")"
signal 9 "$dir/k.wal"
[ $? = 137 ] || fail "held: the run ended before a window committed and the kill came"
held() {
	"$moeft" ls --json "$dir" | grep -o "\"path\":\"$dir/k.wal\",\"status\":\"[a-z]*\",[^}]*\"held\":[a-z]*" |
		sed 's/.*"status":"\([a-z]*\)".*"held":\([a-z]*\)$/\1 \2/'
}
[ "$(held)" = "ended true" ] || fail "held: ls says $(held) of the killed run"
cp "$dir/k.wal" "$dir/k.wal.killed"
cp "$dir/k.wal.kv" "$dir/k.wal.kv.killed"
MOEFT_WAL="$dir/k.wal" LD_PRELOAD="$lib" "$serve" --steps=40 >"$dir/k.out" 2>"$dir/k.err" ||
	fail "held: the plain run: $(cat "$dir/k.err")"
cmp -s "$dir/k.out" "$dir/n.want" && [ "$(grep -c . "$dir/k.err")" = 1 ] &&
	grep -q "^moeft: $dir/k.wal holds the state of a run that did not exit (pid $victim, window [0-9]*, resume at step [0-9]*); not writing over it: .* running un-instrumented$" \
		"$dir/k.err" || fail "held: the plain run: $(cat "$dir/k.out" "$dir/k.err")"
cmp -s "$dir/k.wal" "$dir/k.wal.killed" || fail "held: the plain run changed the log"
"$moeft" restore --wal "$dir/k.wal" --preload "$lib" -- "$serve" $long --journal="$dir/jk" \
	>"$dir/k.out" 2>"$dir/k.err" || fail "held: the restore: $(cat "$dir/k.err")"
cmp -s "$dir/k.out" "$dir/k.want" || fail "held: the restored run's output differs"
[ "$(held)" = "exited false" ] || fail "held: ls says $(held) after the restore"
MOEFT_WAL="$dir/k.wal" LD_PRELOAD="$lib" "$serve" --steps=40 >"$dir/k.out" 2>"$dir/k.err" &&
	cmp -s "$dir/k.out" "$dir/n.want" && [ ! -s "$dir/k.err" ] ||
	fail "held: the plain run after the restore: $(cat "$dir/k.out" "$dir/k.err")"
"$moeft" ls "$dir" | grep -A1 "^$dir/k.wal$" | grep -q "; epoch 3, .*; exited; restorable: window [0-9]*, steps 16-31, resume at step 32$" ||
	fail "held: the plain run after the restore did not replace the state: $("$moeft" ls "$dir")"
cp "$dir/k.wal.killed" "$dir/k.wal"
cp "$dir/k.wal.kv.killed" "$dir/k.wal.kv"
MOEFT_FORCE_FRESH=1 MOEFT_WAL="$dir/k.wal" LD_PRELOAD="$lib" "$serve" --steps=40 \
	>"$dir/k.out" 2>"$dir/k.err" && cmp -s "$dir/k.out" "$dir/n.want" && [ ! -s "$dir/k.err" ] ||
	fail "held: MOEFT_FORCE_FRESH=1: $(cat "$dir/k.out" "$dir/k.err")"
[ "$(held)" = "exited false" ] || fail "held: ls says $(held) after MOEFT_FORCE_FRESH=1"
echo "restore online.sh: restore at init and step, other models stopped, --force-fresh," \
	"damage, fresh log, half format, foreign data, a held log, SIGTERM: ok"
