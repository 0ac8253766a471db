#!/bin/sh
# logdir.sh - MOEFT_WAL naming a directory: each process of a server keeps
# its own log there, named by what it is and the device it works on
# (preload/logname.h), so two programs never share one and a restarted one
# finds its own; a process that records nothing makes nothing; a hostile
# directory is refused with one line (the program runs un-instrumented);
# `moeft verify --wal DIR` checks each log, then the sum; `moeft inspect
# --wal DIR` shows each; `moeft restore --wal DIR` restores each offline,
# and online each for the process of its name; `moeft
# ls DIR` lists each log's writer, how it ended, and what it holds.  A log
# whose writer crashed holds its state for a restore: a plain rerun leaves
# it byte for byte and runs un-instrumented, with one line, unless
# MOEFT_FORCE_FRESH or `moeft restore --force-fresh` says it may go.
#
# Usage: logdir.sh LIBMOEFT SERVE MOEFT
set -u

lib=$1 serve=$2 moeft=$3
dir=$(mktemp -d)
export MOEFT_WAL_SIZE=16M
pid=
# A failing check must not leave the background writer running.
trap '[ -n "$pid" ] && kill -9 $pid 2>/dev/null; chmod -R u+w "$dir"; rm -rf "$dir"' EXIT
# The fixture's one device sits at PCI bus id 0000:3b:00.0.
dev=0000_3b_00_0

fail() {
	echo "capture logdir.sh: $*" >&2
	exit 1
}

# run NAME ARGS...: serve under the name NAME (its process name, comm).
run() {
	name=$1
	shift
	[ -x "$dir/$name" ] || cp "$serve" "$dir/$name"
	LD_PRELOAD="$lib" "$dir/$name" "$@"
}

want=$("$serve" --steps=40)

# A process that makes no CUDA call makes nothing, not even the directory.
MOEFT_WAL="$dir/logs/" LD_PRELOAD="$lib" true || fail "true failed under the preload"
[ ! -e "$dir/logs" ] || fail "a process that recorded nothing made $dir/logs"

# Two programs: two logs, each the program's, in a directory made 0700.
got=$(MOEFT_WAL="$dir/logs/" run alpha --steps=40 2>"$dir/err") || fail "alpha: $(cat "$dir/err")"
[ "$got" = "$want" ] || fail "alpha under the preload printed $got"
[ ! -s "$dir/err" ] || fail "alpha said: $(cat "$dir/err")"
MOEFT_WAL="$dir/logs" run beta --steps=40 >/dev/null 2>"$dir/err" || fail "beta: $(cat "$dir/err")"
[ "$(stat -c %a "$dir/logs")" = 700 ] || fail "logs/ has mode $(stat -c %a "$dir/logs")"
[ "$(cd "$dir/logs" && ls | tr '\n' ' ')" = \
  "alpha.$dev.wal alpha.$dev.wal.kv beta.$dev.wal beta.$dev.wal.kv " ] ||
	fail "logs/ holds: $(ls "$dir/logs")"

# Two programs whose names share their first 15 bytes (all the kernel
# keeps of a process name, as of vLLM's VLLM::Worker_TP0 and _TP1): a log
# each, named in full.
MOEFT_WAL="$dir/long/" run worker-of-a-server-tp0 --steps=8 >/dev/null 2>&1 || fail "tp0 failed"
MOEFT_WAL="$dir/long/" run worker-of-a-server-tp1 --steps=8 >/dev/null 2>&1 || fail "tp1 failed"
[ "$(cd "$dir/long" && ls | tr '\n' ' ')" = \
  "worker-of-a-server-tp0.$dev.wal worker-of-a-server-tp0.$dev.wal.kv worker-of-a-server-tp1.$dev.wal worker-of-a-server-tp1.$dev.wal.kv " ] ||
	fail "long/ holds: $(ls "$dir/long")"

# Two MIG instances of one GPU (one PCI bus id, two compute-instance UUIDs:
# FIXTURE_MIG) running one program at once: a log each, named by the
# instance, and neither says a word.
for mig in 4f1c0e2a9b3d77 0a0b0c0d0e0f11; do
	FIXTURE_MIG=$mig MOEFT_WAL="$dir/mig/" run alpha --steps=400 >"$dir/mig.$mig" \
		2>"$dir/mig.$mig.err" &
done
wait
want400=$("$serve" --steps=400)
for mig in 4f1c0e2a9b3d77 0a0b0c0d0e0f11; do
	[ "$(cat "$dir/mig.$mig")" = "$want400" ] && [ ! -s "$dir/mig.$mig.err" ] ||
		fail "MIG instance $mig: $(cat "$dir/mig.$mig" "$dir/mig.$mig.err")"
done
[ "$(cd "$dir/mig" && ls | tr '\n' ' ')" = \
  "alpha.$dev-mig-0a0b0c0d0e0f.wal alpha.$dev-mig-0a0b0c0d0e0f.wal.kv alpha.$dev-mig-4f1c0e2a9b3d.wal alpha.$dev-mig-4f1c0e2a9b3d.wal.kv " ] ||
	fail "mig/ holds: $(ls "$dir/mig")"

# A restart finds its own log again: a second epoch in alpha's, none in beta's.
MOEFT_WAL="$dir/logs/" run alpha --steps=40 >/dev/null 2>&1 || fail "alpha again failed"
"$moeft" inspect --wal "$dir/logs/alpha.$dev.wal" --json >"$dir/a.json" || fail "inspect alpha"
grep -q '"epochs":\[{"epoch":1,.*},{"epoch":2,' "$dir/a.json" ||
	fail "alpha's log after a restart: $(cat "$dir/a.json")"
"$moeft" inspect --wal "$dir/logs/beta.$dev.wal" --json >"$dir/b.json" || fail "inspect beta"
grep -q '"epoch":2' "$dir/b.json" && fail "beta's log has a second epoch"

# verify --wal DIR: each log, then the sum.
"$moeft" verify --wal "$dir/logs" >"$dir/v.txt" || fail "verify DIR: $(cat "$dir/v.txt")"
[ "$(grep -c '^result  *OK: the committed part is intact$' "$dir/v.txt")" = 2 ] ||
	fail "verify DIR: $(cat "$dir/v.txt")"
grep -q "^logs  *2 in $dir/logs$" "$dir/v.txt" || fail "verify DIR: no sum: $(cat "$dir/v.txt")"
grep -q "^result  *OK: every log's committed part is intact$" "$dir/v.txt" ||
	fail "verify DIR: $(cat "$dir/v.txt")"
"$moeft" verify --wal "$dir/logs/" --json >"$dir/v.json" || fail "verify DIR --json"
grep -q "^{\"dir\":\"$dir/logs/\",\"logs\":\[{\"status\":\"ok\",\"path\":\"$dir/logs/alpha.$dev.wal\",.*},{\"status\":\"ok\",\"path\":\"$dir/logs/beta.$dev.wal\",.*}\],\"status\":\"ok\"}$" \
	"$dir/v.json" || fail "verify DIR --json: $(cat "$dir/v.json")"
# inspect --wal DIR: each log; --heatmap draws one.
"$moeft" inspect --wal "$dir/logs" >"$dir/i.txt" || fail "inspect DIR"
[ "$(grep '^log ' "$dir/i.txt" | tr -s ' ' | tr '\n' ' ')" = \
  "log $dir/logs/alpha.$dev.wal log $dir/logs/beta.$dev.wal " ] ||
	fail "inspect DIR: $(cat "$dir/i.txt")"
"$moeft" inspect --wal "$dir/logs" --json >"$dir/i.json" || fail "inspect DIR --json"
grep -q "^{\"dir\":\"$dir/logs\",\"logs\":\[{\"status\":\"ok\",\"path\":\"$dir/logs/alpha.$dev.wal\",.*\"epochs\":\[{\"epoch\":1,.*},{\"status\":\"ok\",\"path\":\"$dir/logs/beta.$dev.wal\",.*}\]}$" \
	"$dir/i.json" || fail "inspect DIR --json: $(cat "$dir/i.json")"
"$moeft" inspect --wal "$dir/logs" --heatmap "$dir/h.svg" 2>"$dir/i.err"
[ $? = 2 ] && [ ! -e "$dir/h.svg" ] &&
	grep -q -- "--heatmap draws one log; $dir/logs is a directory of 2" "$dir/i.err" ||
	fail "inspect DIR --heatmap: $(cat "$dir/i.err")"

# A damaged member: the worst status, and the sum says which.
printf 'not a log' >"$dir/logs/gamma.$dev.wal"
"$moeft" verify --wal "$dir/logs" >"$dir/v.txt" 2>"$dir/v.err"
[ $? = 2 ] || fail "verify DIR with a foreign file: status not 2"
grep -q "^result  *0 of 3 logs damaged, 1 that cannot be read$" "$dir/v.txt" ||
	fail "verify DIR with a foreign file: $(cat "$dir/v.txt")"
grep -q "gamma.$dev.wal" "$dir/v.err" || fail "verify DIR did not name gamma: $(cat "$dir/v.err")"
rm "$dir/logs/gamma.$dev.wal"
mkdir "$dir/empty"
"$moeft" verify --wal "$dir/empty" 2>"$dir/v.err"
[ $? = 2 ] && grep -q "empty: a directory with no moeft log in it" "$dir/v.err" ||
	fail "verify of an empty directory: $(cat "$dir/v.err")"

# restore --wal DIR --out OUT: each log into OUT/NAME.
"$moeft" restore --wal "$dir/logs" --out "$dir/out" 2>"$dir/r.err" ||
	fail "restore DIR offline: $(cat "$dir/r.err")"
[ "$(cd "$dir/out" && ls | tr '\n' ' ')" = "alpha.$dev beta.$dev set " ] ||
	fail "restore DIR offline wrote: $(ls "$dir/out")"
[ "$(cat "$dir/out/set")" = "moeft-restore-set 1
alpha.$dev
beta.$dev" ] || fail "restore DIR offline: the set file holds $(cat "$dir/out/set")"
for n in alpha beta; do
	grep -q '"resume_step":32,' "$dir/out/$n.$dev/manifest.json" ||
		fail "restore DIR offline: $n: $(cat "$dir/out/$n.$dev/manifest.json")"
done
# Online, each log of a directory of several is restored for the process
# of its name (tests/api runs a server so); a process of another name
# starts fresh, and says so.  Of one log, that log is restored; of none,
# CMD starts fresh and logs there.
got=$("$moeft" restore --wal "$dir/logs" --preload "$lib" -- "$serve" --steps=40 \
	2>"$dir/r.err") || fail "restore of 2 logs online: $(cat "$dir/r.err")"
[ "$got" = "$want" ] &&
	grep -q "^moeft restore: 2 logs restored into $dir/logs.restore; each process of $serve takes the state of its own log" \
		"$dir/r.err" &&
	grep -q "^moeft: restore: the set $dir/logs.restore holds no state of this process's log $dir/logs/serve.$dev.wal: it starts fresh" \
		"$dir/r.err" || fail "restore of 2 logs online: $got $(cat "$dir/r.err")"
mkdir -m 0700 "$dir/one"
cp "$dir/alpha" "$dir/one/alpha"
MOEFT_WAL="$dir/one/" LD_PRELOAD="$lib" "$dir/one/alpha" --steps=40 --journal="$dir/j1" \
	>/dev/null || fail "alpha into one/ failed"
got=$("$moeft" restore --wal "$dir/one" --preload "$lib" -- "$dir/one/alpha" --steps=40 \
	--journal="$dir/j1" 2>"$dir/r.err") || fail "restore of one log online: $(cat "$dir/r.err")"
[ "$got" = "$want" ] && grep -q "resume at step 32" "$dir/r.err" ||
	fail "restore of one log online: $got $(cat "$dir/r.err")"
mkdir -m 0700 "$dir/none"
got=$("$moeft" restore --wal "$dir/none" --preload "$lib" -- "$dir/one/alpha" --steps=40 \
	2>"$dir/r.err") || fail "restore of no log online: $(cat "$dir/r.err")"
[ "$got" = "$want" ] && [ -f "$dir/none/alpha.$dev.wal" ] &&
	grep -q "^moeft restore: $dir/none holds no log: nothing to restore, starting" "$dir/r.err" ||
	fail "restore of no log online: $got $(cat "$dir/r.err")"

# restore -- CMD without --wal: CMD's own log in the preload's default
# directory (a name of this test's own, removed after).
own=rsown$$
cp "$dir/alpha" "$dir/$own"
def=/dev/shm/moeft-$(id -un | tr -c 'A-Za-z0-9._\n-' _)
rm -rf "$def/$own".*
env -u MOEFT_WAL LD_PRELOAD="$lib" "$dir/$own" --steps=40 --journal="$dir/own.j" >/dev/null ||
	fail "$own under the default directory failed"
[ -f "$def/$own.$dev.wal" ] || fail "no $def/$own.$dev.wal: $(ls "$def")"
got=$(env -u MOEFT_WAL "$moeft" restore --preload "$lib" -- "$dir/$own" --steps=40 \
	--journal="$dir/own.j" 2>"$dir/r.err") || fail "restore without --wal: $(cat "$dir/r.err")"
[ "$got" = "$want" ] && grep -q "^moeft restore: restoring $def/$own.$dev.wal, the log of $own$" \
	"$dir/r.err" && grep -q "resume at step 32" "$dir/r.err" ||
	fail "restore without --wal: $got $(cat "$dir/r.err")"
rm -rf "$def/$own".*
# Another program's log there is not CMD's: a CMD that renamed its process
# would take the crashed log for its own, so moeft asks, unless told.
cp "$dir/alpha" "$dir/x$own"
env -u MOEFT_WAL LD_PRELOAD="$lib" "$dir/x$own" --steps=40 >/dev/null || fail "x$own failed"
env -u MOEFT_WAL "$moeft" restore --preload "$lib" -- "$dir/$own" --steps=40 >"$dir/r.out" \
	2>"$dir/r.err"
[ $? = 2 ] && [ ! -s "$dir/r.out" ] && [ ! -e "$def/$own.$dev.wal" ] &&
	grep -q "^moeft restore: no log of $own in $def, which holds .*x$own.$dev.wal.*: name the one to restore with --wal" \
		"$dir/r.err" || fail "restore without --wal, another's log: $(cat "$dir/r.err")"
got=$(env -u MOEFT_WAL "$moeft" restore --force-fresh --preload "$lib" -- "$dir/$own" \
	--steps=40 2>"$dir/r.err") || fail "restore --force-fresh without --wal: $(cat "$dir/r.err")"
[ "$got" = "$want" ] && [ -f "$def/$own.$dev.wal" ] ||
	fail "restore --force-fresh without --wal: $got $(cat "$dir/r.err")"
rm -rf "$def/x$own".*
rm -rf "$def/$own".*

# ls: each log's writer, how it ended, what a restore brings back.  A live
# writer, one killed by SIGSEGV (its crash handler's record), one exited.
mkdir -m 0700 "$dir/ls"
cp "$dir/alpha" "$dir/ls/alpha"
cp "$dir/alpha" "$dir/ls/beta"
MOEFT_WAL="$dir/ls/" LD_PRELOAD="$lib" "$dir/ls/alpha" --steps=40 >/dev/null ||
	fail "alpha into ls/ failed"
MOEFT_WAL="$dir/ls/" LD_PRELOAD="$lib" "$dir/ls/beta" --steps=100000 \
	--journal="$dir/ls.j" >/dev/null 2>&1 &
pid=$!
n=0
while [ "$(cat "$dir/ls.j" 2>/dev/null | grep -c .)" -lt 40 ] && [ $n -lt 2000 ]; do
	sleep 0.01
	n=$((n + 1))
done
"$moeft" ls --json "$dir/ls" >"$dir/ls.json" || fail "ls: $(cat "$dir/ls.json")"
grep -q "^{\"logs\":\[{\"path\":\"$dir/ls/alpha.$dev.wal\",\"status\":\"exited\",\"epoch\":1,\"pid\":[0-9]*,\"started_ns\":[0-9]*,\"restorable\":true,\"held\":false,\"kv_partial\":false,\"window\":[0-9]*,\"first_step\":16,\"last_step\":31,\"resume_step\":32},{\"path\":\"$dir/ls/beta.$dev.wal\",\"status\":\"live\",\"epoch\":1,\"pid\":$pid,.*\"restorable\":true,.*}\]}$" \
	"$dir/ls.json" || fail "ls with a live writer: $(cat "$dir/ls.json")"
kill -SEGV $pid
wait $pid
crashed=$pid pid=
"$moeft" ls "$dir/ls" >"$dir/ls.txt" || fail "ls: $(cat "$dir/ls.txt")"
grep -q "^    no writer; epoch 1, pid $crashed, started .*; crashed (signal 11); restorable: window [0-9]*, steps [0-9]*-[0-9]*, resume at step [0-9]*; held: a new run leaves this log to a restore (MOEFT_FORCE_FRESH=1 lets one replace it)$" \
	"$dir/ls.txt" || fail "ls after a crash: $(cat "$dir/ls.txt")"
grep -q "^    no writer; epoch 1, pid [0-9]*, started .*; exited; restorable: window [0-9]*, steps 16-31, resume at step 32$" \
	"$dir/ls.txt" || fail "ls of an exited run: $(cat "$dir/ls.txt")"
# A plain rerun of the crashed beta leaves its log as it is, byte for byte,
# and runs un-instrumented with one line; with MOEFT_STRICT it does not run.
cp "$dir/ls/beta.$dev.wal" "$dir/beta.crashed"
resume=$(sed -n 's/.*crashed (signal 11); restorable: window \([0-9]*\), .*resume at step \([0-9]*\);.*/window \1, resume at step \2/p' \
	"$dir/ls.txt")
got=$(MOEFT_WAL="$dir/ls/" LD_PRELOAD="$lib" "$dir/ls/beta" --steps=40 2>"$dir/err") ||
	fail "beta after its crash: $(cat "$dir/err")"
[ "$got" = "$want" ] || fail "beta after its crash printed $got"
[ "$(cat "$dir/err")" = "moeft: $dir/ls/beta.$dev.wal holds the state of a run that did not exit (pid $crashed, $resume); not writing over it: \`moeft restore --wal $dir/ls -- CMD\` brings it back, MOEFT_FORCE_FRESH=1 lets a run replace it; running un-instrumented" ] ||
	fail "beta after its crash said: $(cat "$dir/err")"
cmp -s "$dir/ls/beta.$dev.wal" "$dir/beta.crashed" || fail "beta's rerun changed its crashed log"
MOEFT_STRICT=1 MOEFT_WAL="$dir/ls/" LD_PRELOAD="$lib" "$dir/ls/beta" --steps=40 \
	>"$dir/strict.out" 2>"$dir/err"
[ $? = 1 ] && [ ! -s "$dir/strict.out" ] && grep -q "; MOEFT_STRICT is set: exiting$" "$dir/err" ||
	fail "beta after its crash, strict: $(cat "$dir/strict.out" "$dir/err")"
cmp -s "$dir/ls/beta.$dev.wal" "$dir/beta.crashed" || fail "beta's strict rerun changed its log"
# Told that the state may go: the run is instrumented and replaces it, and
# its clean exit holds nothing.
got=$("$moeft" restore --force-fresh --wal "$dir/ls" --preload "$lib" -- "$dir/ls/beta" \
	--steps=40 2>"$dir/err") || fail "beta --force-fresh: $(cat "$dir/err")"
[ "$got" = "$want" ] && [ "$(cat "$dir/err")" = "moeft restore: --force-fresh: starting $dir/ls/beta without restoring" ] ||
	fail "beta --force-fresh: $got $(cat "$dir/err")"
"$moeft" ls --json "$dir/ls" >"$dir/ls.json" || fail "ls: $(cat "$dir/ls.json")"
grep -q "{\"path\":\"$dir/ls/beta.$dev.wal\",\"status\":\"exited\",\"epoch\":2,\"pid\":[0-9]*,\"started_ns\":[0-9]*,\"restorable\":true,\"held\":false,\"kv_partial\":false,\"window\":[0-9]*,\"first_step\":16,\"last_step\":31,\"resume_step\":32}" \
	"$dir/ls.json" || fail "ls after beta --force-fresh: $(cat "$dir/ls.json")"
"$moeft" ls "$dir/ls" "$dir/nonexistent" >/dev/null 2>"$dir/ls.err"
[ $? = 2 ] && grep -q "^moeft ls: $dir/nonexistent: No such file or directory$" "$dir/ls.err" ||
	fail "ls of a missing directory: $(cat "$dir/ls.err")"

# Hostile or missing directories: one line, no log, the program's output.
refused() {
	what=$1 wal=$2 line=$3
	got=$(MOEFT_WAL="$wal" run alpha --steps=40 2>"$dir/err") || fail "$what: alpha failed"
	[ "$got" = "$want" ] || fail "$what: alpha printed $got"
	[ "$(cat "$dir/err")" = "moeft: MOEFT_WAL: $line; running un-instrumented" ] ||
		fail "$what: said $(cat "$dir/err")"
}
mkdir -m 0777 "$dir/open"
chmod 0777 "$dir/open"
refused "a directory others may write" "$dir/open/" \
	"$dir/open: writable by group or others (mode 0777); refusing to use it: others could read or change it"
[ -z "$(ls "$dir/open")" ] || fail "a log was made in a directory others may write"
ln -s logs "$dir/link"
refused "a link" "$dir/link/" "$dir/link: a symbolic link; refusing to follow it"
refused "a missing parent" "$dir/no/such/" \
	"$dir/no/such: no such directory: $dir/no (moeft makes the directory, not its parents)"
[ ! -e "$dir/no" ] || fail "a missing parent was made"
echo "capture logdir.sh: two programs two logs, a restart its own, nothing for no CUDA, verify, inspect, restore and ls of the set, hostile directories: ok"
