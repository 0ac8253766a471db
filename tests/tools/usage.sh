#!/bin/sh
# usage.sh - what the CLI says about its arguments, exactly.
#
# Usage: usage.sh MOEFT FORGED README
#
# --wal empty or too long, to every command that takes it: exit 2 and one
# line naming the option and what is wrong.  restore --out A/B/C with A/B
# missing: refused, naming A/B, nothing made.  verify's exit statuses as
# the code gives them (an intact log, damage in the committed part, a log
# too damaged to recover, a missing file, not a log, a usage error) are
# the ones 'moeft verify --help' and the README give for each case.
set -eu

moeft=$(realpath "$1") forged=$(realpath "$2") readme=$(realpath "$3")
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT

fail() {
	echo "usage.sh: $*" >&2
	exit 1
}

# said STATUS LINE ARGS...: moeft ARGS exits STATUS, LINE first on stderr
said() {
	status=$1 want=$2
	shift 2
	rc=0
	"$moeft" "$@" >"$dir/stdout" 2>"$dir/stderr" || rc=$?
	[ "$rc" = "$status" ] || fail "moeft $*: exit $rc, want $status: $(cat "$dir/stderr")"
	[ "$(head -n 1 "$dir/stderr")" = "$want" ] ||
		fail "moeft $*: said '$(head -n 1 "$dir/stderr")', want '$want'"
}

"$forged" "$dir/L"

# --wal: empty, too long
long=$(printf '%05000d' 0)
for cmd in verify inspect restore demo bench; do
	case $cmd in
	restore) more="--out $dir/out" max=4087 ;;	# PATH.restore must fit too
	demo) more="-- /bin/true" max=4092 ;;		# PATH.kv must fit too
	bench) more=wal max=4095 ;;
	*) more= max=4095 ;;
	esac
	# shellcheck disable=SC2086 # more: words
	said 2 "moeft $cmd: --wal: the path is empty" $cmd --wal '' $more
	# shellcheck disable=SC2086
	said 2 "moeft $cmd: --wal: the path is too long (5000 bytes, at most $max)" \
		$cmd --wal "$long" $more
done
said 2 "moeft restore: --out: the path is empty" restore --wal "$dir/L" --out ''

# --out A/B/C: DIR is made, its parents are not
said 2 "moeft restore: --out $dir/a/b/c: no such directory: $dir/a/b (moeft makes the directory, \
not its parents)" restore --wal "$dir/L" --out "$dir/a/b/c"
[ ! -e "$dir/a" ] || fail "restore --out a/b/c made a"
"$moeft" restore --wal "$dir/L" --out "$dir/a" 2>"$dir/stderr" ||
	fail "restore --out a (its parent there): $(cat "$dir/stderr")"

# verify: each case's status, and the text --help and the README give it
cp "$dir/L" "$dir/damaged"
# One bit of a committed record flipped (a byte set to a value might be it
# already: the record holds a timestamp).
byte=$(od -An -tu1 -j4140 -N1 "$dir/damaged" | tr -d ' ')
# shellcheck disable=SC2059 # the octal escape is the point
printf "\\$(printf %o $((byte ^ 1)))" | dd of="$dir/damaged" bs=1 seek=4140 conv=notrunc \
	2>/dev/null
cp "$dir/L" "$dir/unrecoverable"
dd if=/dev/zero of="$dir/unrecoverable" bs=1 seek=512 count=128 conv=notrunc 2>/dev/null
printf 'not a log\n' >"$dir/text"
"$moeft" verify --help | tr '\n' ' ' | sed -n 's/.*Exit status: \(.*\)/\1/p' >"$dir/help"
tr '\n' ' ' <"$readme" | sed -n 's/.*`verify` exits \([^`]*\)`inspect.*/\1/p' >"$dir/readme"
[ -s "$dir/help" ] && [ -s "$dir/readme" ] || fail "no exit statuses in --help or the README"
# case ARGS: verify ARGS; the phrase both texts must give its status
while IFS='|' read -r args phrase; do
	rc=0
	# shellcheck disable=SC2086 # args: words
	"$moeft" verify $args >/dev/null 2>&1 || rc=$?
	for doc in help readme; do
		python3 - "$dir/$doc" "$rc" "$phrase" <<'PY' || fail "verify $args: exit $rc, but \
its $doc does not say '$phrase' for $rc: $(cat "$dir/$doc")"
import re, sys
text = " ".join(open(sys.argv[1]).read().split())
# "0 intact, 1 damage ..., 2 usage ...": the text of each status
parts = re.split(r"(?:^|, |exits )([0-9]) (?=[a-z])", text)
said = {parts[i]: parts[i + 1] for i in range(1, len(parts) - 1, 2)}
sys.exit(0 if sys.argv[3] in said.get(sys.argv[2], "") else 1)
PY
	done
done <<EOF2
--wal $dir/L|intact
--wal $dir/damaged|damage inside the committed part
--wal $dir/unrecoverable|too damaged to recover
--wal $dir/none|I/O error
--wal $dir/text|not a moeft log
--json|usage
EOF2
echo "usage.sh: ok"
