#!/bin/bash
# run.sh - moeft run supervising the test serving program: two kill -9s of
# its process group mid-decode in one run, each restored, and the output
# the uninterrupted run's; the restart limit; SIGTERM passed on, nothing
# restarted, no process left; an ordinary exit's status passed on; a
# restore that refuses (a damaged KV chunk) ends it with the restore's
# status, the server never started; and after a crash of a server whose
# processes outlive it (one in its group, one that left the group), both
# killed and its shared memory in /dev/shm removed, another file there
# left alone.
#
# Usage: run.sh MOEFT LIBMOEFT SERVE KVTOOL FAMILY
set -u

# absolute: one run starts in the library's directory
moeft=$(realpath "$1") lib=$2 serve=$(realpath "$3") kvtool=$4 family=$5
steps=6000
dir=$(mktemp -d)
decoy=/dev/shm/psm_moeft_decoy_$$
family_pids=
cleanup() {
	[ -n "$family_pids" ] && kill -9 $family_pids 2>/dev/null
	rm -rf "$dir" "$decoy"
}
trap cleanup EXIT

fail() {
	echo "restore run.sh: $*" >&2
	exit 1
}

# The child of moeft run (pid $1): the server, or the restore before it.
server_of() {
	local c

	c=$(cat "/proc/$1/task/$1/children" 2>/dev/null)
	echo ${c%% *}
}

# Wait until file $1 has $2 lines, while moeft run (pid $3) lives.
wait_lines() {
	while [ "$({ wc -l <"$1"; } 2>/dev/null || echo 0)" -lt "$2" ]; do
		kill -0 "$3" 2>/dev/null || fail "moeft run ended before $1 had $2 lines: $(cat "$dir"/*.err)"
		sleep 0.01
	done
}

# Kill -9 the process group of moeft run's child (moeft run: pid $1).
crash() {
	local srv

	srv=$(server_of "$1")
	[ -n "$srv" ] || fail "moeft run has no child to kill"
	kill -9 -- "-$srv" || fail "cannot kill the group of $srv"
	# The next start is a new child: wait for it (or for the end).
	while [ "$(server_of "$1")" = "$srv" ]; do
		sleep 0.01
	done
}

# No process of the test's serving program is left.
no_server() {
	pgrep -f "^$serve --steps=$steps --journal=$dir/" >/dev/null &&
		fail "$1: a serving process is left: $(pgrep -af "^$serve")"
	return 0
}

"$serve" --steps=$steps >"$dir/want" || fail "the uninterrupted run failed"

# Two crashes in one run, each restored: the uninterrupted run's output.
"$moeft" run --wal "$dir/a" --preload "$lib" -- "$serve" --steps=$steps \
	--journal="$dir/a.j" >"$dir/a.out" 2>"$dir/a.err" &
run=$!
wait_lines "$dir/a.j" 1000 $run
crash $run
wait_lines "$dir/a.j" 2500 $run
crash $run
wait $run
status=$?
[ $status = 0 ] || fail "two crashes: moeft run exited $status: $(cat "$dir/a.err")"
cmp -s "$dir/a.out" "$dir/want" || fail "two crashes: the output differs from the uninterrupted run's"
n=$(grep -c "was killed by signal 9; restoring it from $dir/a (restart [12] of at most 5 within 600 s)" "$dir/a.err")
[ "$n" = 2 ] || fail "two crashes: $n restores said, want 2: $(cat "$dir/a.err")"
[ "$(grep -c 'resume at step' "$dir/a.err")" = 2 ] ||
	fail "two crashes: not two restores that resumed: $(cat "$dir/a.err")"
no_server "two crashes"

# The restart limit: one restart allowed, two crashes.
"$moeft" run --wal "$dir/b" --preload "$lib" --max-restarts 1 --window 3600 -- "$serve" \
	--steps=$steps --journal="$dir/b.j" >"$dir/b.out" 2>"$dir/b.err" &
run=$!
wait_lines "$dir/b.j" 500 $run
crash $run
wait_lines "$dir/b.j" 1500 $run
crash $run
wait $run
status=$?
[ $status = 1 ] || fail "restart limit: moeft run exited $status, want 1: $(cat "$dir/b.err")"
grep -q "was killed by signal 9, and was restarted 1 times within the last 3600 s already (--max-restarts 1): not restarting it" "$dir/b.err" ||
	fail "restart limit: no refusal in: $(cat "$dir/b.err")"
no_server "restart limit"

# SIGTERM to moeft run goes to the server, which dies of it: status 143,
# no restart, nothing left.  Its --preload given relative, the server has
# it absolute (its processes may run in other directories).
(cd "$(dirname "$lib")" && exec "$moeft" run --wal "$dir/c" --preload "./${lib##*/}" -- \
	"$serve" --steps=$steps --journal="$dir/c.j" >"$dir/c.out" 2>"$dir/c.err") &
run=$!
wait_lines "$dir/c.j" 500 $run
preload=$(tr '\0' '\n' <"/proc/$(server_of $run)/environ" | sed -n 's/^LD_PRELOAD=//p')
[ "$preload" = "$(realpath "$lib")" ] ||
	fail "--preload ./${lib##*/}: the server has LD_PRELOAD='$preload', want $(realpath "$lib")"
kill -TERM $run
wait $run
status=$?
[ $status = 143 ] || fail "SIGTERM: moeft run exited $status, want 143: $(cat "$dir/c.err")"
grep -q "restoring" "$dir/c.err" && fail "SIGTERM: the server was restarted: $(cat "$dir/c.err")"
no_server "SIGTERM"

# An ordinary exit passes through: the server's usage error, status 2.
"$moeft" run --wal "$dir/d" --preload "$lib" -- "$serve" --steps=x >"$dir/d.out" 2>"$dir/d.err"
status=$?
[ $status = 2 ] || fail "an exit with 2: moeft run exited $status: $(cat "$dir/d.err")"
grep -q "^serve: --steps=x: want an integer" "$dir/d.err" ||
	fail "an exit with 2: not the server's message: $(cat "$dir/d.err")"

# A restore that refuses: the crashed server's last window has a damaged
# KV chunk; moeft run stops with the restore's status 1, never starting it.
mkdir "$dir/e"
MOEFT_WAL="$dir/e" LD_PRELOAD="$lib" "$serve" --steps=$steps --journal="$dir/e.j" \
	>/dev/null 2>"$dir/e.err" &
pid=$!
while [ "$({ wc -l <"$dir/e.j"; } 2>/dev/null || echo 0)" -lt 500 ]; do
	sleep 0.01
done
kill -9 $pid
wait $pid 2>/dev/null
log=$(ls "$dir"/e/*.wal)
"$kvtool" flip "$log" data >/dev/null || fail "kvtool flip failed"
"$moeft" run --wal "$dir/e" --preload "$lib" -- "$serve" --steps=$steps --journal="$dir/e.j" \
	>"$dir/e.out" 2>"$dir/e.err"
status=$?
[ $status = 1 ] || fail "a damaged chunk: moeft run exited $status, want 1: $(cat "$dir/e.err")"
grep -q "is not whole" "$dir/e.err" && grep -q "^moeft run: the restore did not start" "$dir/e.err" ||
	fail "a damaged chunk: no refusal in: $(cat "$dir/e.err")"
[ -s "$dir/e.out" ] && fail "a damaged chunk: the server ran: $(cat "$dir/e.out")"

# --gateway: moeft gateway beside the server, in a process group of its own;
# killed, it is started again; SIGTERM ends both.  A gateway that cannot
# listen (its port taken) stops the server: status 2.
gport=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
"$moeft" run --wal "$dir/g" --preload "$lib" --gateway "127.0.0.1:$gport" -- "$serve" \
	--steps=$steps --journal="$dir/g.j" >"$dir/g.out" 2>"$dir/g.err" &
run=$!
wait_lines "$dir/g.j" 200 $run
gw=$(pgrep -P $run -f "gateway --listen 127.0.0.1:$gport") || fail "gateway: none running: $(cat "$dir/g.err")"
[ "$(ps -o pgid= -p "$gw" | tr -d ' ')" = "$gw" ] ||
	fail "gateway: not in a process group of its own"
kill -9 "$gw"
for _ in $(seq 200); do
	grep -q "^moeft run: the gateway was killed by signal 9; started it again$" "$dir/g.err" && break
	sleep 0.02
done
gw2=$(pgrep -P $run -f "gateway --listen 127.0.0.1:$gport") ||
	fail "gateway: not started again: $(cat "$dir/g.err")"
kill -TERM $run
wait $run
status=$?
[ $status = 143 ] || fail "gateway: moeft run exited $status after SIGTERM: $(cat "$dir/g.err")"
kill -0 "$gw2" 2>/dev/null && fail "gateway: it outlived moeft run"
grep -q "restoring" "$dir/g.err" && fail "gateway: the server was restarted: $(cat "$dir/g.err")"
no_server "gateway"
python3 -c 'import socket, sys, time
s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen(); print(s.getsockname()[1], flush=True)
time.sleep(30)' >"$dir/taken" &
holder=$!
while [ ! -s "$dir/taken" ]; do sleep 0.01; done
"$moeft" run --wal "$dir/h" --preload "$lib" --gateway "127.0.0.1:$(cat "$dir/taken")" -- \
	"$serve" --steps=$steps --journal="$dir/h.j" >"$dir/h.out" 2>"$dir/h.err"
status=$?
kill $holder
[ $status = 2 ] || fail "a taken port: moeft run exited $status, want 2: $(cat "$dir/h.err")"
grep -q "^moeft run: the gateway could not serve (above); stopping" "$dir/h.err" ||
	fail "a taken port: not said: $(cat "$dir/h.err")"
no_server "a taken port"

# A crash of a server whose processes outlive it, no restart allowed: both
# killed, the shared memory file it used removed, the decoy kept.
echo decoy >"$decoy"
"$moeft" run --wal "$dir/f" --preload "$lib" --max-restarts 0 -- "$family" "$dir/f.pids" \
	>"$dir/f.out" 2>"$dir/f.err" &
run=$!
while [ ! -s "$dir/f.pids" ]; do
	kill -0 $run 2>/dev/null || fail "family: moeft run ended: $(cat "$dir/f.err")"
	sleep 0.01
done
read -r grouped escaped shm <"$dir/f.pids"
family_pids="$grouped $escaped"
[ -f "/dev/shm/$shm" ] || fail "family: no /dev/shm/$shm"
kill -9 "$(server_of $run)"
wait $run
status=$?
[ $status = 1 ] || fail "family: moeft run exited $status, want 1: $(cat "$dir/f.err")"
for p in $grouped $escaped; do
	kill -0 "$p" 2>/dev/null && fail "family: process $p outlived moeft run"
done
family_pids=
[ -e "/dev/shm/$shm" ] && fail "family: /dev/shm/$shm was left"
[ -f "$decoy" ] || fail "family: $decoy, which the server never used, was removed"
grep -q "^moeft run: removed 1 file (1 MiB) the server's processes left in /dev/shm$" "$dir/f.err" ||
	fail "family: no removal said in: $(cat "$dir/f.err")"
echo "restore run.sh: two crashes restored, the limit, SIGTERM, exits, a refused restore, the gateway, a family cleaned"
