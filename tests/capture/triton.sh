#!/bin/sh
# triton.sh - SGLang's Triton router, launched as Triton launches it, on the
# CPU fixture under the preload with the built-in sglang profile.
#
# Usage: triton.sh LIBMOEFT TRITON_ROUTER MOEFT CORPUS
# CORPUS: tests/engines/triton/sglang-0.5.23 (each specialization's IR
# signature line as Triton 3.7.1 wrote it).  Triton's cache holds, as it
# would, the kernel compiled with M > 1 and with M == 1 (M dropped), and
# hostile entries.  The routing records equal the program's truth; the
# program's output is the plain run's.  Without a usable cache entry the
# rule is not evaluated, with one line saying why, and nothing is recorded.
set -eu

lib=$1 prog=$2 moeft=$3 corpus=$4
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
kernel=_router_triton_kernel
steps=6 layers=3 rows=4 k=8

fail() {
	echo "capture triton.sh: $*" >&2
	exit 1
}

"$prog" $steps $layers $rows $k >"$dir/want" || fail "the plain run failed"

# run NAME CACHE [ex]: the program under the preload, Triton's cache at
# CACHE (ex: its module loaded by cuModuleLoadDataEx).
run() {
	rm -f "$dir/$1.wal" "$dir/$1.wal.kv"
	TRITON_CACHE_DIR=$2 MOEFT_WAL="$dir/$1.wal" MOEFT_WINDOW=2 MOEFT_PROFILE=sglang \
		LD_PRELOAD="$lib" "$prog" $steps $layers $rows $k ${3:-} >"$dir/$1.out" \
		2>"$dir/$1.err" || fail "$1: status $? (stderr: $(cat "$dir/$1.err"))"
	cmp -s "$dir/want" "$dir/$1.out" || fail "$1: output differs from the plain run's"
	"$moeft" inspect --wal "$dir/$1.wal" --json --records >"$dir/$1.json" ||
		fail "$1: inspect failed"
}

# said NAME WHY: NAME's stderr is the one line saying the rule is not
# evaluated for the kernel because WHY (a basic regular expression), and
# nothing was recorded.
said() {
	grep -q "^moeft: rule sglang:[0-9]* (Triton) cannot place the arguments of kernel $kernel: $2; it is not evaluated for it\$" \
		"$dir/$1.err" && [ "$(wc -l <"$dir/$1.err")" = 1 ] ||
		fail "$1: stderr: $(cat "$dir/$1.err")"
	[ "$(routed "$1")" = 0 ] || fail "$1: routing recorded"
}

# routed NAME: the number of routing records, each checked against the truth.
routed() {
	python3 - "$dir/want" "$dir/$1.json" <<'EOF'
import json, struct, sys

def f32(x):
    return struct.unpack("f", struct.pack("f", x))[0]

truth = {}
for line in open(sys.argv[1]):
    head, weights = line.split("|")
    f = head.split()
    step, layer, rows, k = map(int, f[1:5])
    truth[(step, layer)] = (rows, k, [int(x) for x in f[5:]],
                            [f32(float.fromhex(x)) for x in weights.split()])
n = 0
for r in json.load(open(sys.argv[2]))["record_list"]:
    if r["type"] != "routing":
        continue
    g = r["routing"]
    rows, k, ids, weights = truth[(g["step"], g["layer"])]
    got = (g["tokens"], g["k"], g["ids"], g.get("weights_dtype"), [f32(w) for w in g["weights"]])
    if got != (rows, k, ids, "f32", weights):
        sys.exit("step %d layer %d: got %r, want %r" % (g["step"], g["layer"], got,
                                                        (rows, k, ids, "f32", weights)))
    n += 1
print(n)
EOF
}

# Triton's cache: both specializations, the kernel's entry holding the
# cubin it is loaded from (the other's is another); an IR that is a
# symbolic link to one that fits the table too but puts stride_im (k) one
# parameter later (followed, it would make the kernel ambiguous), beside
# the same cubin; a directory in an IR's place; garbage.
cache=$dir/cache
mkdir -p "$cache/m8" "$cache/m1" "$cache/link" "$cache/dir/$kernel.source" "$cache/junk"
"$prog" image "$dir/cubin" || fail "no image"
cp "$corpus/deepseek-v3-m8/$kernel.source" "$dir/cubin" "$cache/m8/"
mv "$cache/m8/cubin" "$cache/m8/$kernel.cubin"
cp "$corpus/deepseek-v3-m1/$kernel.source" "$cache/m1/"
echo "another kernel's cubin" >"$cache/m1/$kernel.cubin"
python3 - "$corpus/deepseek-v3-m8/$kernel.source" >"$dir/shifted" <<'EOF'
import re, sys
shift = {"stride_bias_alt": "stride_bias", "stride_input_ids": "stride_bias_alt",
         "stride_sm": "stride_input_ids", "stride_wm": "stride_sm", "stride_im": "stride_wm",
         "stride_pm": "stride_im", "stride_pk": "stride_pm"}
text = open(sys.argv[1]).read()
sys.stdout.write(re.sub(r"\b(stride_[a-z_]+)\b", lambda m: shift.get(m.group(1), m.group(1)), text))
EOF
grep -q 'loc("stride_im"' "$dir/shifted" && ! grep -q stride_pk "$dir/shifted" ||
	fail "the shifted IR was not made"
ln -s "$dir/shifted" "$cache/link/$kernel.source"
cp "$dir/cubin" "$cache/link/$kernel.cubin"
printf 'tt.func public @%s(%%x' "$kernel" >"$cache/junk/$kernel.source"
cp "$dir/cubin" "$cache/junk/$kernel.cubin"

run placed "$cache"
[ ! -s "$dir/placed.err" ] || fail "placed: stderr: $(cat "$dir/placed.err")"
n=$(routed placed) || fail "placed: $n"
# Windows of 2 steps: at least the first 4 steps' 3 layers are committed.
[ "$n" -ge $((4 * layers)) ] || fail "placed: $n routing records, want >= $((4 * layers))"
run placed-ex "$cache" ex
[ ! -s "$dir/placed-ex.err" ] || fail "placed-ex: stderr: $(cat "$dir/placed-ex.err")"
[ "$(routed placed-ex)" = "$n" ] || fail "placed-ex: not the records of placed"

# No cache; a cache of another version of the kernel only; a cache whose
# entry of the kernel was pruned, a sibling of equal parameter sizes left
# (which would put k one parameter later): one line each, nothing recorded.
run nocache "$dir/none"
said nocache "Triton's cache $dir/none: No such file or directory"

mkdir -p "$dir/other/v2"
sed 's/%M: /%num_tokens: /; s/loc("M"/loc("num_tokens"/' "$corpus/deepseek-v3-m8/$kernel.source" \
	>"$dir/other/v2/$kernel.source"
cp "$dir/cubin" "$dir/other/v2/$kernel.cubin"
run other "$dir/other"
said other "1 entry in $dir/other fits its 17 parameters but keeps an argument the rule does not list, or in another order (another version of the kernel?)"

mkdir -p "$dir/pruned/sibling"
cp "$dir/shifted" "$dir/pruned/sibling/$kernel.source"
echo "the sibling's cubin" >"$dir/pruned/sibling/$kernel.cubin"
run pruned "$dir/pruned"
said pruned "no entry in $dir/pruned holds the cubin it was loaded from ($(stat -c %s "$dir/cubin") bytes, CRC-32C [0-9a-f]*)"
echo "triton.sh: $n routing records equal the truth; no cache, another version and a pruned entry refused"
