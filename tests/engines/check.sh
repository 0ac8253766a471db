#!/bin/sh
# check.sh - the built-in profiles against the kernels of released engine
# builds (tests/engines/*.tsv, made by tools/engines/corpus.sh).
#   corpus   moeft profile check over every corpus file: exit 0 (no rule
#            misfits a kernel it owns: positions against the parameter
#            tables, types against the demangled signatures), and each
#            rule owns exactly the kernels owners.expect says, per file
#   misfit   a corpus whose kernels a rule misreads (a 4-byte ids param, a
#            bool k, int64 ids read as int32, a table past the params):
#            exit 1, each misfit said
#   usage    a file that is not a corpus, a bad line, a missing file, no
#            FILE, a bad --profile: each message exactly, exit 2
#
# Usage: check.sh CHECK MOEFT ENGINES_DIR
set -u

check=$1 moeft=$2 engines=$3
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT

fail() {
	echo "engines check.sh $check: $*" >&2
	exit 1
}

# expect STATUS MESSAGE ARGS...: moeft profile check ARGS exits STATUS and
# its stderr's first line is MESSAGE.
expect() {
	want_rc=$1 want=$2
	shift 2
	"$moeft" profile check "$@" >"$dir/out" 2>"$dir/err"
	rc=$?
	[ "$rc" = "$want_rc" ] || fail "profile check $*: exit $rc, want $want_rc: $(cat "$dir/err")"
	got=$(head -n 1 "$dir/err")
	[ "$got" = "$want" ] || fail "profile check $*: said '$got', want '$want'"
}

case $check in
corpus)
	"$moeft" profile check "$engines"/*.tsv >"$dir/report" 2>"$dir/err" ||
		fail "exit $?: $(cat "$dir/err") $(grep -A3 MISFIT "$dir/report")"
	cat "$dir/report"
	"$moeft" profile check --json "$engines"/*.tsv >"$dir/json" ||
		fail "--json: exit $?"
	python3 - "$dir/json" "$engines/owners.expect" <<'PY' || fail "(above)"
import json, os, sys
d = json.load(open(sys.argv[1]))
assert d["status"] == "ok" and d["misfits"] == 0 and d["profile"] == "auto", d["status"]
got = {(os.path.basename(f["path"]), r["text"].split()[1], r["matched"])
       for f in d["files"] for r in f["rules"]}
want = set()
for line in open(sys.argv[2]):
    if line.startswith("#") or not line.strip():
        continue
    name, pattern, n = line.rstrip("\n").split("\t")
    want.add((name, pattern, int(n)))
bad = sorted(got ^ want)
for b in bad:
    print(("unexpected: " if b in got else "missing: ") + "\t".join(map(str, b)))
sys.exit(1 if bad else 0)
PY
	;;
misfit)
	# vLLM-named kernels whose tables and types the vllm rules misread
	{
		printf '# package: fake\n# version: 1\n'
		printf 'kernel\tlib.so\t_ZN4vllm3moe10topkGatingILi8ELi4ELi16ELi32Ei6__halfEEvv\tvoid vllm::moe::topkGating<8, 4, 16, 32, int, __half>(__half const*, bool const*, float*, int, int, int*, int)\t0:0:8 1:8:8 2:16:8 3:24:4 4:28:4 5:32:8 6:40:4\n'
		printf 'kernel\tlib.so\t_ZN4vllm3moe7moeTopKILi256EiEEvv\tvoid vllm::moe::moeTopK<256, int>(float const*, bool const*, float*, long*, int*, int, int)\t0:0:8 1:8:8 2:16:8 3:24:8 4:32:8 5:40:4 6:44:4\n'
		printf 'kernel\tlib.so\t_Z21moe_fused_gate_kernelIfEvv\tvoid moe_fused_gate_kernel<float>(void*, void*, float*, int*, long, long, bool)\t0:0:8 1:8:8 2:16:8 3:24:8 4:32:8 5:40:8 6:48:1\n'
		printf 'kernel\tlib.so\t_ZN4vllm24reshape_and_cache_kernelIfEvv\tvoid vllm::reshape_and_cache_kernel<float>(float const*)\t0:0:8\n'
		printf 'kernel\tlib.so\t_ZN4vllm30reshape_and_cache_flash_kernelIfEvv\t_ZN4vllm30reshape_and_cache_flash_kernelIfEvv\t?\n'
	} >"$dir/bad.tsv"
	"$moeft" profile check "$dir/bad.tsv" >"$dir/report" 2>"$dir/err"
	rc=$?
	[ "$rc" = 1 ] || fail "exit $rc, want 1: $(cat "$dir/err")"
	cat "$dir/report"
	for line in \
		"          ids: p4: a pointer is 8 bytes, the parameter 4" \
		"          ids: p3 is long\*, the rule reads int32 elements" \
		"          k: p6 is bool, not a count" \
		"          slots: p4: the kernel has 1 parameters" \
		"          its cubin has no parameter table: the rule cannot be checked" \
		"MISFITS: 5 misfits"; do
		grep -qx "$line" "$dir/report" || fail "no line '$line'"
	done
	"$moeft" profile check --json "$dir/bad.tsv" >"$dir/json"
	[ $? = 1 ] || fail "--json: exit status not 1"
	python3 -c 'import json, sys
d = json.load(open(sys.argv[1]))
assert d["status"] == "misfit" and d["misfits"] == 5, d
f = d["files"][0]
assert f["package"] == "fake" and f["version"] == "1" and f["kernels"] == 5, f
assert [r["misfits"] for r in f["rules"]] == [1] * 5, f["rules"]' "$dir/json" ||
		fail "--json: $(cat "$dir/json")"
	;;
usage)
	printf '# package: x\nkernel\tlib.so\tmangled\tdemangled\t0:0:8 2:8:8\n' >"$dir/gap.tsv"
	printf '# package: x\nkernel\tlib.so\tmangled\n' >"$dir/short.tsv"
	printf '# package: x\nfunction\tlib.so\n' >"$dir/other.tsv"
	printf 'kernel\tlib.so\tmangled\tdemangled\t-\n' >"$dir/nopkg.tsv"
	printf '# package: x\nkernel\tlib.so\tm\td\t0:0:8 1:4:8\n' >"$dir/overlap.tsv"
	expect 2 "moeft profile: $dir/gap.tsv:2: parameter 1: '2:8:8' is out of order, overlaps \
the one before, or passes 32764 bytes" "$dir/gap.tsv"
	expect 2 "moeft profile: $dir/overlap.tsv:2: parameter 1: '1:4:8' is out of order, \
overlaps the one before, or passes 32764 bytes" "$dir/overlap.tsv"
	expect 2 "moeft profile: $dir/short.tsv:2: a kernel line has 5 tab-separated fields: \
kernel, library, mangled name, demangled name, parameters" "$dir/short.tsv"
	expect 2 "moeft profile: $dir/other.tsv:2: 'function': not a line of a corpus file \
(kernel, disagree, lib, sm, others or a # comment)" "$dir/other.tsv"
	expect 2 "moeft profile: $dir/nopkg.tsv: no '# package:' line: not a corpus file \
(tests/engines/README.md)" "$dir/nopkg.tsv"
	expect 2 "moeft profile: $dir/none.tsv: No such file or directory" "$dir/none.tsv"
	expect 2 "moeft profile: no FILE: give corpus files (tests/engines/*.tsv)"
	expect 2 "moeft profile: --profile vlm: unknown profile 'vlm' (built-in: auto, vllm, \
sglang, torch, llamacpp; a file must be given as a path with a '/', e.g. ./vlm)" \
		--profile vlm "$dir/gap.tsv"
	"$moeft" profile list >/dev/null 2>"$dir/err"
	[ "$(head -n 1 "$dir/err")" = "moeft profile: list: want 'moeft profile check FILE...' \
(moeft profile --help)" ] || fail "profile list: $(cat "$dir/err")"
	"$moeft" profile --help | grep -q 'moeft profile check \[--profile SPEC\]' || fail "--help"
	;;
*)
	fail "unknown check"
	;;
esac
