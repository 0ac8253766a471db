#!/bin/sh
# check.sh - moeft restore end to end: the test serving program under the
# preload on the CPU fixture, its log restored offline and the output held
# to the program's ground truth; then damage, and the errors.
#
# Usage: check.sh LIBMOEFT SERVE MOEFT KVTOOL
#
# Whole logs (eager and graph, per-layer pools and one pool; and a log of
# two processes, the second one's pools the first one's again): exit 0;
# the images in ordinal order have the truth's KV CRC after the window's
# last step, and each the CRC the manifest gives; routing.bin holds
# manifest.routing.records records, as many as the log's ROUTING records
# (the second process's only, for the two); resume_step is last_step + 1;
# a second restore into the same directory writes the same bytes.  A
# restore replaces an earlier one's files and takes over what a killed one
# left.  Damage to the KV store under the last window's first KVREF (its
# data, its slot header): exit 1, that one chunk lost, named, zeros.  Exit
# 2, with a message naming the cause: no decode window, a KV store of
# another log, bad arguments, a directory of other files.
set -eu

lib=$(realpath "$1") serve=$(realpath "$2") moeft=$(realpath "$3") tool=$(realpath "$4")
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT

fail() {
	echo "restore check.sh: $*" >&2
	exit 1
}

# manifest DIR EXPR: a Python expression over the manifest m
manifest() {
	python3 -c 'import json, sys; m = json.load(open(sys.argv[1])); print(eval(sys.argv[2]))' \
		"$1/manifest.json" "$2"
}

# capture NAME SERVE-ARGS...: serve under the preload, logging into NAME.wal
capture() {
	name=$1
	shift
	env MOEFT_WAL="$dir/$name.wal" MOEFT_WAL_SIZE=16M LD_PRELOAD="$lib" "$serve" "$@" \
		--truth="$dir/$name.truth" >/dev/null 2>"$dir/$name.err" ||
		fail "$name: the run under the preload failed: $(cat "$dir/$name.err")"
}

# restore NAME OUT [ARGS...]: sets rc, stderr in OUT.err
restore() {
	name=$1 out=$2
	shift 2
	rc=0
	"$moeft" restore --wal "$dir/$name.wal" --out "$out" "$@" >"$out.stdout" 2>"$out.err" ||
		rc=$?
}

# The images of OUT in ordinal order.
images() {
	manifest "$1" '" ".join(p["file"] for p in sorted(m["kv_pools"], key=lambda p: p["ordinal"]))'
}

# whole NAME: a restore of an undamaged log, checked against the truth.
whole() {
	name=$1 out=$dir/$1.out
	restore "$name" "$out"
	[ "$rc" = 0 ] || fail "$name: exit $rc, want 0: $(cat "$out.err")"
	grep -q "moeft restore: window .* 0 lost" "$out.err" || fail "$name: no summary: $(cat "$out.err")"
	last=$(manifest "$out" 'm["window"]["last_step"]')
	[ "$(manifest "$out" 'm["resume_step"]')" = $((last + 1)) ] || fail "$name: resume_step"
	[ "$(manifest "$out" 'm["lost_chunks"]')" = 0 ] || fail "$name: lost chunks"
	want=$(awk -v s="step $last" '$0 == s { f = 1 } f && /^kv / { print $2; exit }' \
		"$dir/$name.truth")
	# shellcheck disable=SC2046 # one word per image
	got=$(cd "$out" && "$tool" crc $(images .))
	[ "$got" = "$want" ] || fail "$name: pools have CRC $got after step $last, truth says $want"
	for f in $(images "$out"); do
		[ "0x$("$tool" crc "$out/$f")" = "$(manifest "$out" \
			'[p["crc32c"] for p in m["kv_pools"] if p["file"] == "'"$f"'"][0]')" ] ||
			fail "$name: $f: not the CRC the manifest gives"
	done
	records=$(python3 -c '
import struct, sys
b = open(sys.argv[1], "rb").read()
n = i = 0
while i < len(b):
    i += 4 + struct.unpack_from("<I", b, i)[0]
    n += 1
print(n if i == len(b) else -1)' "$out/routing.bin")
	[ "$records" = "$(manifest "$out" 'm["routing"]["records"]')" ] ||
		fail "$name: routing.bin holds $records records, the manifest says otherwise"
	# The routing of the restored process only: all of the log's when
	# it holds one process.
	if [ "${2:-}" != epochs ]; then
		[ "$records" = "$("$tool" routing "$dir/$name.wal")" ] ||
			fail "$name: routing.bin holds $records records, the log more"
	fi
	# Every record carries the router's float32 gating weights (vLLM's rule
	# names them), as manifest.routing.with_weights says; inspect --json
	# shows them as numbers, each one of the truth's (the weights of its
	# steps' rows, float32 bits in hex; eager runs of one process: graph
	# runs route padding rows too, which the truth leaves out, and the
	# truth is the log's last run's).
	[ "$(manifest "$out" 'm["routing"]["with_weights"]')" = "$records" ] ||
		fail "$name: not every routing record has gating weights"
	"$moeft" inspect --wal "$dir/$name.wal" --json --records >"$out.inspect" ||
		fail "$name: inspect --json --records failed"
	python3 - "$out/routing.bin" "$out.inspect" "$dir/$name.truth" "${2:-}$name" <<'PY' ||
import json, struct, sys
b = open(sys.argv[1], "rb").read()
i = 0
while i < len(b):
    n = struct.unpack_from("<I", b, i)[0]
    tokens, k, idb, flags = struct.unpack_from("<IHBB", b, i + 4 + 12)
    assert flags == 1 and n == 24 + tokens * k * (idb + 4), (i, flags, n)
    i += 4 + n
truth = set()
for line in open(sys.argv[3]):
    if line.startswith("weights "):
        for f in line.split()[2:]:
            truth.update(int(w, 16) for w in f.split(","))
if not sys.argv[4].startswith("eager"):
    sys.exit(0)
recs = [r["routing"] for r in json.load(open(sys.argv[2]))["record_list"] if "routing" in r]
assert recs and all(r["weights_dtype"] == "f32" and
                    len(r["weights"]) == len(r["ids"]) == r["tokens"] * r["k"] for r in recs)
# each number, read as a float32, has the bits of one of the truth's
bits = [struct.unpack("<I", struct.pack("<f", w))[0] for r in recs for w in r["weights"]]
bad = [hex(x) for x in bits if x not in truth]
assert not bad, bad[:5]
PY
		fail "$name: the routing records' weights (above)"
	cp -r "$out" "$out.first"
	restore "$name" "$out"
	[ "$rc" = 0 ] || fail "$name: second restore: exit $rc: $(cat "$out.err")"
	[ "$(ls "$out")" = "$(ls "$out.first")" ] || fail "$name: second restore: other files"
	for f in "$out"/*; do
		cmp -s "$f" "$out.first/${f##*/}" || fail "$name: second restore: ${f##*/} differs"
	done
	echo "restore check.sh: $name: window $(manifest "$out" 'm["window"]["id"]'), steps to" \
		"$last, pools $got == truth, $records routing records"
}

for mode in eager graph; do
	capture "$mode" --mode=$mode
	whole "$mode"
	capture "$mode-one" --mode=$mode --kv-layout=one
	whole "$mode-one"
done

# Two processes on one log, the same pools (same call sites and sizes):
# the second one's last window ends before it has touched every chunk the
# first one wrote, and those read as zeros, not as the first one's bytes.
capture epochs --hidden=1024
MOEFT_WINDOW=32 capture epochs --hidden=1024 --seed=9
whole epochs epochs
[ "$(manifest "$dir/epochs.out" 'm["log"]["epoch"]')" = 2 ] || fail "epochs: not the second epoch"
[ "$(manifest "$dir/epochs.out" 'm["routing"]["windows"][0]["first_step"]')" = 0 ] ||
	fail "epochs: routing of the first process"
[ "$(manifest "$dir/epochs.out" 'm["history_complete"]')" = True ] || fail "epochs: history"

# A restore replaces an earlier one's files: 4 per-layer pools, then one.
out=$dir/replace
restore eager "$out"
[ "$rc" = 0 ] && [ -f "$out/kv-pool-3.bin" ] || fail "replace: first restore: $(cat "$out.err")"
: >"$out/kv-pool-9.bin.tmp"
restore eager-one "$out"
[ "$rc" = 0 ] || fail "replace: exit $rc: $(cat "$out.err")"
[ "$(ls "$out" | tr '\n' ' ')" = "kv-pool-0.bin manifest.json routing.bin " ] ||
	fail "replace: left $(ls "$out" | tr '\n' ' ')"

# What a killed first restore leaves is accepted, and cleaned up.
out=$dir/killed
mkdir "$out" && : >"$out/kv-pool-0.bin.tmp" && : >"$out/routing.bin"
restore eager-one "$out"
[ "$rc" = 0 ] || fail "killed: exit $rc: $(cat "$out.err")"
[ "$(ls "$out" | tr '\n' ' ')" = "kv-pool-0.bin manifest.json routing.bin " ] ||
	fail "killed: left $(ls "$out" | tr '\n' ' ')"

# --json: the summary on stdout.
restore eager "$dir/json" --json
[ "$rc" = 0 ] && python3 -c 'import json, sys
s = json.load(open(sys.argv[1]))
assert s["status"] == "ok" and s["lost_chunks"] == 0 and s["pools"] == 4, s' \
	"$dir/json.stdout" || fail "--json: exit $rc: $(cat "$dir/json.stdout" "$dir/json.err")"

# A program killed early in a long run, whose pools (sized for the run)
# hold chunks never written: they are zeros, not counted as restored from
# the store (issue 13): stored + zeros + lost = chunks, stored_bytes below
# the pools' bytes, the same per pool in the manifest, and the summary line
# says so.
MOEFT_WAL="$dir/sparse.wal" MOEFT_WAL_SIZE=16M LD_PRELOAD="$lib" \
	"$serve" --steps=2000 --seqs=64 --journal="$dir/sparse.journal" >/dev/null &
pid=$!
steps=0
while [ "$steps" -lt 40 ]; do
	kill -0 "$pid" 2>/dev/null || fail "sparse: the run ended early"
	sleep 0.01
	steps=$(cat "$dir/sparse.journal" 2>/dev/null | grep -c '^step') || true
done
kill -9 "$pid"
wait "$pid" 2>/dev/null || true
restore sparse "$dir/sparse" --json
[ "$rc" = 0 ] && python3 -c 'import json, sys
s = json.load(open(sys.argv[1]))
m = json.load(open(sys.argv[2]))
assert s["zero_chunks"] > 0 and s["stored_chunks"] > 0, s
assert s["stored_chunks"] + s["zero_chunks"] + s["lost_chunks"] == s["chunks"], s
assert 0 < s["stored_bytes"] < s["bytes"], s
assert sum(p["stored_chunks"] for p in m["kv_pools"]) == s["stored_chunks"], m' \
	"$dir/sparse.stdout" "$dir/sparse/manifest.json" ||
	fail "sparse: exit $rc: $(cat "$dir/sparse.stdout" "$dir/sparse.err")"
restore sparse "$dir/sparse2"
grep -q 'from the store in [0-9]*, [1-9][0-9]* never written (zeros), 0 lost' \
	"$dir/sparse2.err" || fail "sparse: the summary line: $(cat "$dir/sparse2.err")"

# Damage under the last window's first KVREF: one chunk lost, named, zeros.
for what in data header; do
	name=damage-$what
	cp "$dir/eager.wal" "$dir/$name.wal"
	cp "$dir/eager.wal.kv" "$dir/$name.wal.kv"
	at=$("$tool" flip "$dir/$name.wal" $what)
	pool=${at% *} chunk=${at#* } out=$dir/$name.out
	restore "$name" "$out"
	[ "$rc" = 1 ] || fail "$name: exit $rc, want 1: $(cat "$out.err")"
	grep -q "pool $pool chunk $chunk lost" "$out.err" || fail "$name: not named: $(cat "$out.err")"
	python3 -c '
import json, sys
d, pool, chunk = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
m = json.load(open(d + "/manifest.json"))
assert m["lost_chunks"] == 1, m["lost_chunks"]
for p in m["kv_pools"]:
    assert p["lost_chunks"] == ([chunk] if p["pool"] == pool else []), p
    if p["pool"] == pool:
        cb = p["chunk_bytes"]
        img = open(d + "/" + p["file"], "rb").read()
        assert len(img) == p["size"] and not any(img[chunk * cb:(chunk + 1) * cb])
assert m["problems"], m' "$out" "$pool" "$chunk" || fail "$name: manifest or image"
done

# No committed decode window: a fresh log; a run that ends before its first
# window does.
"$tool" fresh "$dir/fresh.wal"
restore fresh "$dir/fresh.out"
[ "$rc" = 2 ] && grep -q "no committed decode window" "$dir/fresh.out.err" ||
	fail "fresh log: exit $rc: $(cat "$dir/fresh.out.err")"
capture short --steps=16
restore short "$dir/short.out"
[ "$rc" = 2 ] && grep -q "no committed decode window" "$dir/short.out.err" ||
	fail "short run: exit $rc: $(cat "$dir/short.out.err")"
[ ! -e "$dir/short.out" ] || fail "short run: made its --out"

# The KV store of another log.
cp "$dir/eager.wal" "$dir/other.wal"
cp "$dir/graph.wal.kv" "$dir/other.wal.kv"
restore other "$dir/other.out"
[ "$rc" = 2 ] && grep -q "KV store of log" "$dir/other.out.err" ||
	fail "another log's store: exit $rc: $(cat "$dir/other.out.err")"

# Usage: each error names its argument.
usage() {
	want=$1
	shift
	rc=0
	"$moeft" restore "$@" >"$dir/usage.out" 2>"$dir/usage.err" || rc=$?
	[ "$rc" = 2 ] && grep -q -- "$want" "$dir/usage.err" ||
		fail "restore $*: exit $rc, want 2 and '$want': $(cat "$dir/usage.err")"
}
usage "--out DIR is required" --wal "$dir/eager.wal"
usage "--wal PATH is required" --out "$dir/u"
usage "unknown option '--bogus'" --wal "$dir/eager.wal" --out "$dir/u" --bogus
usage "--wal $dir/missing.wal: No such file" --wal "$dir/missing.wal" --out "$dir/u"
usage "unexpected argument 'extra'" --wal "$dir/eager.wal" --out "$dir/u" extra
mkdir "$dir/foreign" && : >"$dir/foreign/notes.txt"
usage "--out $dir/foreign: not empty" --wal "$dir/eager.wal" --out "$dir/foreign"
usage "--out $dir/fresh.wal: not a directory" --wal "$dir/eager.wal" --out "$dir/fresh.wal"
usage "--out $dir/no/such: no such directory: $dir/no " --wal "$dir/eager.wal" --out "$dir/no/such"
[ "$(ls "$dir/foreign")" = notes.txt ] || fail "foreign: files were written"

# An output directory another user could have made first, or a link: refused
# with the reason, nothing written.  As root, one of nobody's is the attack.
unsafe="refusing to use it: others could read or change it"
mkdir -m 0777 "$dir/open"
usage "--out $dir/open: writable by group or others (mode 0777); $unsafe" \
	--wal "$dir/eager.wal" --out "$dir/open"
ln -s "$dir/json" "$dir/link"
usage "--out $dir/link: a symbolic link; refusing to follow it" \
	--wal "$dir/eager.wal" --out "$dir/link"
if [ "$(id -u)" = 0 ]; then
	mkdir "$dir/nobody" && chown 65534 "$dir/nobody"
	usage "--out $dir/nobody: owned by uid 65534, not by this user (uid 0); refusing" \
		--wal "$dir/eager.wal" --out "$dir/nobody"
	[ -z "$(ls "$dir/nobody")" ] || fail "nobody's: files were written"
fi
[ -z "$(ls "$dir/open")" ] || fail "open: files were written"
# The default output of an online restore, PATH.restore, likewise; the
# command is not started.
cp "$dir/eager.wal" "$dir/online.wal" && cp "$dir/eager.wal.kv" "$dir/online.wal.kv"
mkdir -m 0777 "$dir/online.wal.restore"
usage "--out $dir/online.wal.restore: writable by group or others (mode 0777); $unsafe" \
	--wal "$dir/online.wal" --preload "$lib" -- touch "$dir/started"
[ ! -e "$dir/started" ] || fail "PATH.restore refused: the command was started"
[ -z "$(ls "$dir/online.wal.restore")" ] || fail "PATH.restore: files were written"
echo "restore check.sh: all checks passed"
