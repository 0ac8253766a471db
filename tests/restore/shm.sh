#!/bin/bash
# shm.sh - moeft restore, alone (no supervisor saw the server run), removes
# what a killed server's processes left in /dev/shm, by the lists the
# preload keeps beside their logs (wal/shmlist.h): exactly the files they
# created with O_EXCL under the names Python and torch use, still there and
# used by no live process; nothing of a live process, of an orphan that
# still maps a file (until it is gone; a zombie is gone), of a clean exit,
# or of a list that
# is not the preload's (a link, a foreign line, one others may write); a
# pid used again by another process counts as gone, a worker's list
# lives while its server's process group does, a zombie with a running
# thread runs; a list stays small however many names a process makes and
# unlinks; beside a single log only where its directory is its user's
# alone, and nothing with MOEFT_DISABLE=1.
#
# Usage: shm.sh MOEFT LIBMOEFT SHMMAKER
set -u

moeft=$1 lib=$2 maker=$3
dir=$(mktemp -d)		# the directory of logs (0700)
one=$(mktemp -d)		# a single log's directory
tag=shmsh$$			# every name made here ends in -$tag
pids=
cleanup() {
	[ -n "$pids" ] && kill -9 $pids 2>/dev/null
	rm -rf "$dir" "$one"
	rm -f /dev/shm/*-"$tag" /dev/shm/sem.*-"$tag"
}
trap cleanup EXIT

fail() {
	echo "restore shm.sh: $*" >&2
	exit 1
}

# make NAME ACTION... : shmmaker under the preload (and $maker_env), in
# the background, in a process group of its own (as a server is: a list
# is gone only when its group is), until it is ready; its pid (and an
# orphan's) in $maker_pid, $orphan.
make() {
	local ready=$dir/.ready-$1 tag1=$1

	shift
	setsid env MOEFT_WAL="$dir" LD_PRELOAD="$lib" ${maker_env:-} "$maker" "$tag" "$ready" "$@" \
		2>"$dir/.maker.err" &
	maker_pid=$!
	while [ ! -s "$ready" ]; do
		kill -0 $maker_pid 2>/dev/null || fail "$tag1: shmmaker ended: $(cat "$dir/.maker.err")"
		sleep 0.01
	done
	read -r _ orphan <"$ready"
	rm -f "$ready"
	[ "$orphan" = 0 ] && orphan=
	pids="$pids $maker_pid $orphan"
}

# kill -9 the last shmmaker made, and reap it.
kill_maker() {
	kill -9 $maker_pid
	wait $maker_pid 2>/dev/null
}

# The list of process $1 (exactly one), or fail.
list_of() {
	local l=("$dir/$1".*.shm)

	[ ${#l[@]} = 1 ] && [ -f "${l[0]}" ] || fail "no one list of pid $1 in $dir: $(ls -a "$dir")"
	echo "${l[0]}"
}

shm() { [ -e "/dev/shm/$1-$tag" ]; }

# restore NAME: moeft restore --wal DIR -- CMD, CMD a shmmaker that makes
# nothing and exits 0 (a program of this build: under the sanitizers the
# preload needs their runtime in the program); its stderr in
# $dir/NAME.err.
restore() {
	"$moeft" restore --wal "$dir" --preload "$lib" -- "$maker" "$tag" - 2>"$dir/.$1.err" ||
		fail "$1: moeft restore exited $?: $(cat "$dir/.$1.err")"
}

removed() {	# NAME N: restore NAME said it removed N files (0: said nothing)
	local said

	said=$(grep "^moeft restore: removed" "$dir/.$1.err")
	if [ "$2" = 0 ]; then
		[ -z "$said" ] || fail "$1: want nothing removed, got: $said"
	else
		[[ $said =~ ^"moeft restore: removed $2 file"s?" ("[0-9.]+" "[KMG]?i?B") the server's processes left in /dev/shm"$ ]] ||
			fail "$1: want $2 removed, got: $(cat "$dir/.$1.err")"
	fi
}

# 1. A crash: exactly the O_EXCL-created names of the known kinds are
# listed; after kill -9, restore removes those still there; another
# server's file of the same kind (the decoy) stays.
make crash shm psm_a sem mp-b gone psm_c shm torch_d open psm_e shm other_f
list=$(list_of $maker_pid)
want=$(printf '%s\n' psm_a-$tag sem.mp-b-$tag psm_c-$tag torch_d-$tag)
[ "$(cat "$list")" = "$want" ] || fail "crash: the list holds '$(cat "$list")', want '$want'"
[ "$(stat -c %a "$list")" = 600 ] || fail "crash: the list's mode is $(stat -c %a "$list")"
kill_maker
echo decoy >/dev/shm/psm_decoy-$tag
restore crash
removed crash 3
for n in psm_a sem.mp-b torch_d; do
	if [ $n = sem.mp-b ]; then [ ! -e /dev/shm/sem.mp-b-$tag ]; else ! shm $n; fi ||
		fail "crash: /dev/shm/$n-$tag was left"
done
for n in psm_e other_f psm_decoy; do
	shm $n || fail "crash: /dev/shm/$n-$tag, not the dead process's to remove, is gone"
done
[ ! -e "$list" ] || fail "crash: its list was left: $list"
grep -q "nothing to restore, starting $maker fresh" "$dir/.crash.err" ||
	fail "crash: the command did not start: $(cat "$dir/.crash.err")"

# 2. A live process's names stay, and so does its list.
make live shm psm_g
list=$(list_of $maker_pid)
restore live
removed live 0
shm psm_g && [ -f "$list" ] || fail "live: a live process's file or list was removed"
kill_maker
restore live-dead
removed live-dead 1
! shm psm_g && [ ! -e "$list" ] || fail "live: once dead, its file or list was left"

# 2b. A process killed but not reaped (a zombie: its parent, here a sleep,
# never waits, as a container's first process may not) is gone.
( setsid env MOEFT_WAL="$dir" LD_PRELOAD="$lib" "$maker" "$tag" "$dir/.ready-zombie" shm psm_z &
  exec sleep 600 ) &
reaper=$!
pids="$pids $reaper"
while [ ! -s "$dir/.ready-zombie" ]; do sleep 0.01; done
read -r zombie _ <"$dir/.ready-zombie"
list=$(list_of $zombie)
kill -9 $zombie
while [ "$(cut -d' ' -f3 "/proc/$zombie/stat" 2>/dev/null)" != Z ]; do sleep 0.01; done
restore zombie
removed zombie 1
! shm psm_z && [ ! -e "$list" ] || fail "zombie: a zombie's file or list was left"
kill -9 $reaper

# 3. An orphan that still maps a file keeps it (and the list) until it is
# gone; the rest goes at once.
make orphan shm psm_h shm psm_i child psm_h
list=$(list_of $maker_pid)
kill_maker
restore orphan
removed orphan 1
shm psm_h && ! shm psm_i && [ -f "$list" ] ||
	fail "orphan: want psm_h and the list kept, psm_i removed; have $(ls /dev/shm | grep -c -- "-$tag") files"
kill -9 "$orphan"
while kill -0 "$orphan" 2>/dev/null; do sleep 0.01; done
restore orphan-gone
removed orphan-gone 1
! shm psm_h && [ ! -e "$list" ] || fail "orphan: once the orphan is gone, its file or list was left"

# 4. A clean exit leaves no list (and its files to their users).
MOEFT_WAL=$dir LD_PRELOAD=$lib "$maker" "$tag" - shm psm_j || fail "exit: shmmaker failed"
ls "$dir"/*.shm >/dev/null 2>&1 && fail "exit: a list outlived a clean exit: $(ls "$dir")"
shm psm_j || fail "exit: psm_j is gone"
rm -f /dev/shm/psm_j-$tag

# 5. 4000 names made and unlinked (torch's way): the list is compacted to
# what is still there, and restore removes exactly that.
make churn shm psm_k churn 4000
list=$(list_of $maker_pid)
lines=$(wc -l <"$list")
[ "$(head -n1 "$list")" = psm_k-$tag ] && [ "$lines" -lt 3000 ] ||
	fail "churn: $lines lines, first '$(head -n1 "$list")': not compacted"
[ ! -e "$list.new" ] || fail "churn: $list.new was left"
kill_maker
restore churn
removed churn 1
! shm psm_k && [ ! -e "$list" ] || fail "churn: psm_k or the list was left"

# 6. Lists that are not the preload's are named and left alone, with the
# files they name; a live pid with another start time is another process;
# a last line cut short is no name; another pid namespace's list is not
# this one's to judge.
ns=$(stat -L -c %i /proc/self/ns/pid)
gone=2147483000		# a pid and a process group no process has
for n in l m n o x; do echo x >/dev/shm/psm_$n-$tag; done
ln -s /dev/shm/psm_l-$tag "$dir/$gone.1.$gone.$ns.shm"
printf '../../../dev/shm/psm_m-%s\n' $tag >"$dir/$((gone + 1)).1.$gone.$ns.shm"
printf 'psm_o-%s\n' $tag >"$dir/$((gone + 2)).1.$gone.$ns.shm"
chmod 620 "$dir/$((gone + 2)).1.$gone.$ns.shm"
printf 'psm_o-%s' $tag >"$dir/$((gone + 3)).1.$gone.$ns.shm"		# cut short
printf 'psm_n-%s\npsm_o-%s\0x\n' $tag $tag >"$dir/$((gone + 5)).1.$gone.$ns.shm"	# a NUL
printf 'psm_o-%s\n' $tag >"$dir/0$((gone + 4)).1.$gone.$ns.shm"	# not a name the preload writes
printf 'psm_x-%s\n' $tag >"$dir/$((gone + 6)).1.$gone.$((ns + 1)).shm"	# another namespace
printf 'psm_n-%s\n' $tag >"$dir/$$.1.$gone.$ns.shm"		# this shell's pid, not its start
restore hostile
removed hostile 1
shm psm_l && shm psm_m && shm psm_o && shm psm_x && ! shm psm_n ||
	fail "hostile: want psm_n removed and only it; $(ls /dev/shm | grep -- "-$tag")"
e=$dir/.hostile.err
grep -qx "moeft restore: $dir/$gone.1.$gone.$ns.shm: Too many levels of symbolic links; left alone" "$e" &&
grep -qx "moeft restore: $dir/$((gone + 1)).1.$gone.$ns.shm: line 1 is no name of shared memory the preload lists; the list is left alone" "$e" &&
grep -qx "moeft restore: $dir/$((gone + 2)).1.$gone.$ns.shm: not a regular file of this user that only it may write; left alone" "$e" &&
grep -qx "moeft restore: $dir/$((gone + 5)).1.$gone.$ns.shm: line 2 is no name of shared memory the preload lists; the list is left alone" "$e" ||
	fail "hostile: not each list named: $(cat "$e")"
[ "$(grep -c "^moeft restore: $dir/" "$e")" = 4 ] || fail "hostile: more lists named than 4: $(cat "$e")"
for f in $gone.1.$gone.$ns.shm $((gone + 1)).1.$gone.$ns.shm $((gone + 2)).1.$gone.$ns.shm \
	0$((gone + 4)).1.$gone.$ns.shm $((gone + 5)).1.$gone.$ns.shm \
	$((gone + 6)).1.$gone.$((ns + 1)).shm; do
	[ -e "$dir/$f" ] || [ -L "$dir/$f" ] || fail "hostile: $f was removed"
done
[ ! -e "$dir/$$.1.$gone.$ns.shm" ] || fail "hostile: the reused pid's list was left"
[ ! -e "$dir/$((gone + 3)).1.$gone.$ns.shm" ] || fail "hostile: the cut list, naming nothing, was left"
rm -f "$dir"/*.shm

# 6b. A worker that made a file for its server and ended with _exit (its
# list left behind): the file stays while its server's group runs.
make handoff handoff psm_w
list=$(ls "$dir"/*.shm | grep -v "/$maker_pid\.")
[ -f "$list" ] || fail "handoff: no list of the worker: $(ls "$dir")"
restore handoff
removed handoff 0
shm psm_w && [ -f "$list" ] || fail "handoff: the live server's file or its worker's list was removed"
kill_maker
restore handoff-gone
removed handoff-gone 1
! shm psm_w && [ ! -e "$list" ] || fail "handoff: once the server is gone, the file or list was left"

# 6c. A process whose main thread ended (a zombie) while another runs,
# mapping a file a dead process made: it runs, and so the file and its
# own list stay.
make made shm psm_t
made=$maker_pid
make threads shm psm_u hold psm_t threads x
while [ "$(cut -d' ' -f3 "/proc/$maker_pid/stat" 2>/dev/null)" != Z ]; do sleep 0.01; done
kill -9 $made
wait $made 2>/dev/null
restore threads
removed threads 0
shm psm_t && shm psm_u || fail "threads: a file of a process that still runs was removed"
kill -9 $maker_pid
while [ -e "/proc/$maker_pid" ]; do sleep 0.01; done
restore threads-gone
removed threads-gone 2

# 7. Beside a single log, in a directory that is its user's alone, the
# same; nothing in a directory others may write (a single log's
# directory may be anyone's), nor with the preload off.
maker_env=MOEFT_WAL=$one/serve.wal make one shm psm_p
list=$(ls "$one"/*.shm 2>/dev/null)
[ -f "$list" ] || fail "one: no list beside the single log: $(ls -A "$one")"
kill_maker
"$moeft" restore --wal "$one/serve.wal" --preload "$lib" -- "$maker" "$tag" - 2>"$dir/.one.err" ||
	fail "one: moeft restore exited $?: $(cat "$dir/.one.err")"
removed one 1
! shm psm_p && [ ! -e "$list" ] || fail "one: the file or list beside the single log was left"
chmod 1777 "$one"
maker_env=MOEFT_WAL=$one/serve.wal make public shm psm_q
public=$maker_pid
maker_env=MOEFT_DISABLE=1 make off shm psm_r
[ -z "$(ls -A "$one")" ] && ! ls "$dir"/*.shm >/dev/null 2>&1 ||
	fail "a list was made: $(ls -A "$one" "$dir")"
kill -9 $public $maker_pid

echo "restore shm.sh: a crash's files removed by restore alone; live, orphaned, handed-off, threaded, clean, foreign and hostile left; lists compacted; beside a single log only in a private directory"
