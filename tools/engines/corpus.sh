#!/bin/sh
# corpus.sh - what an inference engine's wheel launches, for checking the
# built-in moeft rules against released binaries without a GPU.
#
# usage: tools/engines/corpus.sh PACKAGE VERSION [OUT_DIR]
#
# Fetches PACKAGE==VERSION's wheel from PyPI (cached), and writes
# OUT_DIR/PACKAGE-VERSION.tsv (default OUT_DIR: tests/engines of this
# repository): for each shared library and loose cubin in the wheel, the CUDA
# runtime it binds, the launch entry points it imports, and the parameter
# table (ordinal, offset, size) of each kernel that a built-in rule's glob
# matches or whose name suggests routing or KV-cache writing.  The format is
# described in tests/engines/README.md.
#
# Needs: pip (as a downloader only), unzip, readelf, c++filt, awk, sed, sort,
# sha256sum.
# cuobjdump comes from PyPI (pinned below); /usr/local/cuda/bin/cuobjdump is
# the fallback when that wheel cannot be fetched.
set -eu

LC_ALL=C
export LC_ALL

# Pinned, so that reruns read the tables with the same tool.
CUOBJDUMP_PKG=nvidia-cuda-cuobjdump
CUOBJDUMP_VERSION=13.5.37
# pip resolves wheels for this interpreter, not for the one running pip, so
# the same wheel is chosen on every machine.
TARGET_PYTHON=3.12
# A kernel whose qualified name (demangled, without template arguments)
# contains one of these, ignoring case, is listed even when no rule glob
# matches it: the candidates for new rules.
NAME_WORDS='topk top_k gating gate router moe_align cache kvcache kv_cache set_rows argsort softplus'
# Tables are read from this architecture's cubin when a kernel has one (the
# GPU moeft is tested on); otherwise from the kernel's lowest architecture.
PREFERRED_SM=sm_90

TAB=$(printf '\t')

usage() {
	echo "usage: $0 PACKAGE VERSION [OUT_DIR]" >&2
	exit 2
}

die() {
	printf 'corpus.sh: %s\n' "$*" >&2
	exit 1
}

note() {
	printf 'corpus.sh: %s\n' "$*" >&2
}

need_tools() {
	for t in unzip readelf c++filt awk sed sort sha256sum; do
		command -v "$t" >/dev/null 2>&1 || die "$t not found (needed to read wheels)"
	done
	command -v pip >/dev/null 2>&1 || command -v python3 >/dev/null 2>&1 ||
		die "neither pip nor python3 found (pip downloads the wheels)"
}

pip_cmd() {
	if command -v pip >/dev/null 2>&1; then
		pip "$@"
	else
		python3 -m pip "$@"
	fi
}

# The manylinux tags of an x86_64 Linux machine, old and new glibc alike:
# pip only takes a wheel whose platform tag is listed.
platform_flags() {
	flags='--platform linux_x86_64 --platform manylinux1_x86_64'
	flags="$flags --platform manylinux2010_x86_64 --platform manylinux2014_x86_64"
	n=17
	while [ "$n" -le 40 ]; do
		flags="$flags --platform manylinux_2_${n}_x86_64"
		n=$((n + 1))
	done
	echo "$flags"
}

# cached_wheel NAME VERSION: the one cached wheel of NAME==VERSION, if any,
# so that a rerun needs no network.
cached_wheel() {
	stem=$(printf '%s' "$1" | tr 'A-Z.-' 'a-z__')
	found=''
	for f in "$CACHE/$stem-$2-"*.whl; do
		[ -f "$f" ] || continue
		[ -z "$found" ] || return 1    # several: let pip choose
		found=$f
	done
	[ -n "$found" ] && echo "$found"
}

# fetch_wheel NAME VERSION: print the path of NAME==VERSION's wheel in the
# cache, downloading it first if needed.
fetch_wheel() {
	if cached_wheel "$1" "$2"; then
		return 0
	fi
	log=$WORK/pip-$1.log
	# shellcheck disable=SC2046 # platform_flags is a list of words
	if ! pip_cmd download --no-deps --only-binary=:all: --no-cache-dir \
		--progress-bar off --python-version "$TARGET_PYTHON" \
		--implementation cp $(platform_flags) -d "$CACHE" "$1==$2" \
		>"$log" 2>&1; then
		sed -n '/ERROR/p' "$log" >&2
		return 1
	fi
	sed -n -e 's/^Saved //p' -e 's/^File was already downloaded //p' "$log" |
		tail -n 1
}

# Sets CUOBJDUMP (the binary) and CUOBJDUMP_FROM (where it came from).
setup_cuobjdump() {
	if whl=$(fetch_wheel "$CUOBJDUMP_PKG" "$CUOBJDUMP_VERSION") && [ -n "$whl" ]; then
		mkdir -p "$WORK/bin"
		unzip -q -o -j "$whl" '*/bin/cuobjdump' -d "$WORK/bin" ||
			die "$whl: no bin/cuobjdump inside"
		chmod +x "$WORK/bin/cuobjdump"
		CUOBJDUMP=$WORK/bin/cuobjdump
		CUOBJDUMP_FROM="PyPI $CUOBJDUMP_PKG==$CUOBJDUMP_VERSION"
	elif [ -x /usr/local/cuda/bin/cuobjdump ]; then
		note "cannot fetch $CUOBJDUMP_PKG==$CUOBJDUMP_VERSION; using /usr/local/cuda/bin/cuobjdump"
		CUOBJDUMP=/usr/local/cuda/bin/cuobjdump
		CUOBJDUMP_FROM=/usr/local/cuda/bin/cuobjdump
	else
		die "cannot fetch $CUOBJDUMP_PKG==$CUOBJDUMP_VERSION and there is no /usr/local/cuda/bin/cuobjdump"
	fi
	CUOBJDUMP_VERSION_LINE=$("$CUOBJDUMP" --version | sed -n 's/^Cuda compilation tools, //p')
	[ -n "$CUOBJDUMP_VERSION_LINE" ] || die "$CUOBJDUMP: cannot read its version"
}

# rule_globs FILE: "profile<TAB>statement<TAB>glob" for each rule of the
# built-in profiles, in file order (the order 'auto' tries them in).
rule_globs() {
	awk -v OFS='\t' '
	# Rule text sits in C string literals, one statement a line.
	/^[ \t]*"/ {
		s = $0
		sub(/^[ \t]*"/, "", s)
		sub(/\\n".*$/, "", s)
		n = split(s, f, /[ \t]+/)
		if (f[1] == "profile" && n >= 2)
			prof = f[2]
		else if ((f[1] == "routing" || f[1] == "kv" || f[1] == "step") && n >= 2)
			print prof, f[1], f[2]
	}' "$1"
}

# lib_linkage LIB: "soname<TAB>imports" of a shared library.  The soname is
# the NEEDED libcudart (or the version its symbols are bound to), "static"
# when cudart is linked in, else "none"; imports are the launch entry points
# among its undefined dynamic symbols, with their version.
lib_linkage() {
	readelf -d -W "$1" >"$WORK/dyn" 2>/dev/null || true
	readelf --dyn-syms -W "$1" >"$WORK/dynsym" 2>/dev/null || true
	# The full symbol table, where not stripped, shows a static cudart.
	readelf -s -W "$1" >"$WORK/syms" 2>/dev/null || true
	awk -v OFS='\t' -v has_device_code="$2" '
	FILENAME == ARGV[1] {
		if ($0 ~ /\(NEEDED\)/ && match($0, /\[libcudart\.so[^]]*\]/))
			needed = needed (needed == "" ? "" : ",") substr($0, RSTART + 1, RLENGTH - 2)
		next
	}
	FILENAME == ARGV[2] {
		if ($7 != "UND" || NF < 8)
			next
		name = $8
		base = name
		sub(/@.*/, "", base)
		if (base == "__cudaRegisterFatBinary")
			registers = 1
		if (match(name, /@libcudart\.so[.0-9]*/))
			bound = substr(name, RSTART + 1, RLENGTH - 1)
		if (base ~ /^(__)?(cudaLaunch|cudaGraphLaunch|cudaGetDriverEntryPoint|cudaGetKernel|cuLaunch|cuGraphLaunch|cuGetProcAddress)/)
			imports[name] = 1
		next
	}
	# Defined cudart entry points or its internal namespace: linked in.
	$7 != "UND" && ($8 ~ /^(__cudaRegisterFatBinary|cudaLaunchKernel|cudaGetDriverEntryPoint)(@|$)/ || $8 ~ /^_ZN6cudart/) {
		static = 1
	}
	END {
		if (needed != "")
			rt = needed
		else if (bound != "")
			rt = bound
		else if (static || (has_device_code && !registers))
			rt = "static"    # a fatbin registers itself through a cudart
		else
			rt = "none"
		list = ""
		n = 0
		for (i in imports)
			keys[++n] = i
		# insertion sort: a handful of names
		for (i = 2; i <= n; i++)
			for (j = i; j > 1 && keys[j - 1] > keys[j]; j--) {
				t = keys[j]; keys[j] = keys[j - 1]; keys[j - 1] = t
			}
		for (i = 1; i <= n; i++)
			list = list (i > 1 ? "," : "") keys[i]
		print rt, (list == "" ? "-" : list)
	}' "$WORK/dyn" "$WORK/dynsym" "$WORK/syms"
}

# device_code LIB: write $WORK/elfs ("index<TAB>arch<TAB>elf name") and
# $WORK/kernels ("index<TAB>kernel"); fail when cuobjdump fails other than
# for a file without device code.
device_code() {
	: >"$WORK/elfs"
	: >"$WORK/kernels"
	if ! "$CUOBJDUMP" -lelf "$1" >"$WORK/lelf" 2>"$WORK/err"; then
		grep -q 'does not contain device code' "$WORK/err" && return 0
		die "$PKG $VER: cuobjdump -lelf $2: $(cat "$WORK/err")"
	fi
	awk -v OFS='\t' '/^ELF file/ {
		name = $0
		sub(/^ELF file *[0-9]+: */, "", name)
		arch = name
		sub(/\.cubin$/, "", arch)
		sub(/.*\./, "", arch)
		print ++n, arch, name
	}' "$WORK/lelf" >"$WORK/elfs"
	[ -s "$WORK/elfs" ] || return 0    # PTX only: no tables to read
	"$CUOBJDUMP" -symbols "$1" >"$WORK/symbols" 2>"$WORK/err" ||
		die "$PKG $VER: cuobjdump -symbols $2: $(cat "$WORK/err")"
	# -symbols has one "symbols:" block per ELF, in -lelf order.  A fatbin
	# names each block's arch, more exactly than -lelf's file names do
	# (sm_100f, not sm_100): the numbers must agree, and that arch is kept.
	awk -v OFS='\t' -v elfs="$WORK/elfs" -v fixed="$WORK/elfs.arch" '
	function num(a) { sub(/^sm_/, "", a); return a + 0 }
	BEGIN {
		while ((getline l < elfs) > 0) {
			split(l, f, "\t")
			arch_of[++n] = f[2]
			name_of[n] = f[3]
		}
	}
	/^arch = / { arch = $3 }
	/^symbols:/ {
		blk++
		if (arch != "") {
			if (num(arch) != num(arch_of[blk])) {
				print "ELF " blk " is " arch_of[blk] " in -lelf but " arch " in -symbols" > "/dev/stderr"
				bad = 1
			}
			arch_of[blk] = arch
		}
		arch = ""
	}
	$1 == "FUNC" && $4 == "ENTRY" { print blk, $NF }
	END {
		if (blk != n) {
			print blk " symbol blocks for " n " ELFs" > "/dev/stderr"
			bad = 1
		}
		for (i = 1; i <= n; i++)
			print i, arch_of[i], name_of[i] > fixed
		exit bad
	}' "$WORK/symbols" >"$WORK/kernels" 2>"$WORK/err" ||
		die "$PKG $VER: $2: cuobjdump -lelf and -symbols disagree: $(cat "$WORK/err")"
	mv "$WORK/elfs.arch" "$WORK/elfs"
}

# select_kernels: from $WORK/kernels, write $WORK/selected ("mangled<TAB>
# demangled<TAB>rule|word<TAB>qualified name" of each kernel to list) and
# append to $WORK/hits "glob index<TAB>owned" per (kernel, matching glob);
# print the number of distinct kernels.  Globs match the mangled name, as
# the preload does; words match the demangled qualified name only, so that
# template arguments (cutlass::arch::CacheOperation) do not count.
select_kernels() {
	cut -f2 "$WORK/kernels" | sort -u >"$WORK/unique"
	c++filt <"$WORK/unique" >"$WORK/demangled"
	paste "$WORK/unique" "$WORK/demangled" |
	awk -F'\t' -v OFS='\t' -v globs="$WORK/globs" -v words="$NAME_WORDS" \
		-v sel="$WORK/selected" -v hits="$WORK/hits" '
	function glob2re(g,   re, i, c) {
		re = "^"
		for (i = 1; i <= length(g); i++) {
			c = substr(g, i, 1)
			if (c == "*") re = re ".*"
			else if (c == "?") re = re "."
			else if (c ~ /[A-Za-z0-9_]/) re = re c
			else re = re "[" c "]"
		}
		return re "$"
	}
	# "void ns::f<int, g(x)>(int*)" -> "ns::f"
	function qualified(d) {
		gsub(/\(anonymous namespace\)/, "{anonymous}", d)
		while (gsub(/<[^<>()]*>|\([^<>()]*\)/, "", d))
			;
		sub(/.* /, "", d)
		return d
	}
	# c++filt gives up on some very long names: take the identifiers of
	# the nested name from the mangling ("_ZN7cutlass6KernelI..." ->
	# "cutlass::Kernel").
	function mangled_qualified(m,   q, n) {
		q = ""
		sub(/^_ZN?/, "", m)
		while (match(m, /^L?[0-9]+/)) {
			n = substr(m, RSTART, RLENGTH)
			sub(/^L/, "", n)
			q = q (q == "" ? "" : "::") substr(m, RLENGTH + 1, n + 0)
			m = substr(m, RLENGTH + 1 + n)
		}
		return q
	}
	BEGIN {
		while ((getline l < globs) > 0) {
			split(l, f, "\t")
			re[++ng] = glob2re(f[3])
		}
		nw = split(words, w, " ")
		printf "" > sel
	}
	{
		total++
		how = ""
		for (i = 1; i <= ng; i++)
			if ($1 ~ re[i]) {
				print i, (how == "" ? 1 : 0) >> hits
				how = "rule"
			}
		q = ($2 == $1 && $1 ~ /^_Z/) ? mangled_qualified($1) : qualified($2)
		if (q == "")
			q = $1
		lq = tolower(q)
		for (i = 1; i <= nw && how == ""; i++)
			if (index(lq, w[i]))
				how = "word"
		if (how != "")
			print $1, $2, how, q > sel
	}
	END { print total + 0 }'
}

# kparams SELECTED_IN_THIS_ELF < cuobjdump -elf output: "kernel<TAB>params
# <TAB>toolkit" for each listed kernel: its EIATTR_KPARAM_INFO entries as
# "ordinal:offset:size" (decimal) in ordinal order, "-" for none, "?" when
# the ELF has no .nv.info section for it.
kparams() {
	awk -v OFS='\t' -v want="$1" '
	function hex(s,   i, v) {
		s = tolower(s)
		sub(/^0x/, "", s)
		v = 0
		for (i = 1; i <= length(s); i++)
			v = v * 16 + index("0123456789abcdef", substr(s, i, 1)) - 1
		return v
	}
	function field(line, label,   s) {
		if (!match(line, label " *: *0x[0-9a-fA-F]+"))
			return -1
		s = substr(line, RSTART, RLENGTH)
		sub(/.*: */, "", s)
		return hex(s)
	}
	function flush(   i, out) {
		if (cur == "")
			return
		out = ""
		for (i = 0; i <= maxord; i++)
			if (i in param)
				out = out (out == "" ? "" : " ") param[i]
		table[cur] = (out == "" ? "-" : out)
		split("", param)
		maxord = -1
		cur = ""
	}
	BEGIN { while ((getline l < want) > 0) sel[l] = 1; maxord = -1 }
	/^64-bit ELF:/ && match($0, /toolkit=[0-9.]+/) { tk = substr($0, RSTART + 8, RLENGTH - 8) }
	/^\./ {
		flush()
		name = ($1 == ".section") ? $2 : $1
		if (substr(name, 1, 9) == ".nv.info." && (substr(name, 10) in sel))
			cur = substr(name, 10)
		next
	}
	cur != "" && /Ordinal *:/ {
		o = field($0, "Ordinal")
		param[o] = o ":" field($0, "Offset") ":" field($0, "Size")
		if (o > maxord)
			maxord = o
	}
	END {
		flush()
		for (k in sel)
			print k, ((k in table) ? table[k] : "?"), (tk == "" ? "?" : tk)
	}'
}

# param_tables LIB KIND PATH: write $WORK/tables ("kernel<TAB>arch<TAB>
# params") for every ELF of LIB holding a selected kernel, and add the
# toolkit versions seen to $WORK/toolkits.
param_tables() {
	: >"$WORK/tables"
	# ELF index -> selected kernels inside it
	awk -F'\t' -v sel="$WORK/selected" '
	BEGIN { while ((getline l < sel) > 0) { split(l, f, "\t"); s[f[1]] = 1 } }
	$2 in s' "$WORK/kernels" >"$WORK/wanted"
	[ -s "$WORK/wanted" ] || return 0
	rm -rf "$WORK/elf"
	mkdir "$WORK/elf"
	if [ "$2" = cubin ]; then
		cp "$1" "$WORK/elf/$(cut -f3 "$WORK/elfs")"
	else
		names=$(cut -f1 "$WORK/wanted" | sort -u | awk -F'\t' -v elfs="$WORK/elfs" '
			BEGIN { while ((getline l < elfs) > 0) { split(l, f, "\t"); nm[f[1]] = f[3] } }
			{ printf "%s%s", (NR > 1 ? "," : ""), nm[$1] }')
		(cd "$WORK/elf" && "$CUOBJDUMP" -xelf "$names" "$1" >/dev/null 2>"$WORK/err") ||
			die "$PKG $VER: cuobjdump -xelf $3: $(cat "$WORK/err")"
	fi
	cut -f1 "$WORK/wanted" | sort -u -n | while IFS= read -r idx; do
		arch=$(awk -F'\t' -v i="$idx" '$1 == i { print $2 }' "$WORK/elfs")
		elf=$(awk -F'\t' -v i="$idx" '$1 == i { print $3 }' "$WORK/elfs")
		awk -F'\t' -v i="$idx" '$1 == i { print $2 }' "$WORK/wanted" >"$WORK/want1"
		"$CUOBJDUMP" -elf "$WORK/elf/$elf" >"$WORK/elfdump" 2>"$WORK/err" ||
			die "$PKG $VER: cuobjdump -elf $3 ($elf): $(cat "$WORK/err")"
		kparams "$WORK/want1" <"$WORK/elfdump" |
			awk -F'\t' -v OFS='\t' -v a="$arch" -v tk="$WORK/toolkits" \
				'{ print $1, a, $2; if ($3 != "?") print $3 >> tk }'
		rm -f "$WORK/elf/$elf" "$WORK/elfdump"
	done >"$WORK/tables"
}

# kernel_records PATH: append the kernel, sm and disagree records of one
# library to $WORK/records, each behind a sort key (path, kernel, rank) that
# keeps a library's lines together; print how many kernels were listed.
# A kernel taken for a name word only is listed once per (qualified name,
# parameter table): its other instantiations add nothing to a rule.
kernel_records() {
	awk -F'\t' -v OFS='\t' -v lib="$1" -v pref="$PREFERRED_SM" \
		-v sel="$WORK/selected" -v rec="$WORK/records" '
	function key(a,   n, s) {
		n = a
		sub(/^sm_/, "", n)
		s = n
		sub(/^[0-9]+/, "", s)
		return sprintf("%06d%s", n + 0, s)
	}
	function better(a, b) {    # is arch a a better source than arch b?
		if (a == pref) return b != pref
		if (b == pref) return 0
		return key(a) < key(b)
	}
	BEGIN {
		while ((getline l < sel) > 0) {
			split(l, f, "\t")
			dem[f[1]] = f[2]
			how[f[1]] = f[3]
			qual[f[1]] = f[4]
		}
	}
	{
		row[++n] = $0
		if (!($1 in arch) || better($2, arch[$1])) {
			arch[$1] = $2
			best[$1] = $3
		}
	}
	END {
		for (k in dem) {
			if (!(k in arch)) {    # no ELF held it: cannot happen, say so
				arch[k] = "?"
				best[k] = "?"
			}
			if (how[k] == "word") {
				g = qual[k] SUBSEP best[k]
				if (g in rep && rep[g] < k)
					continue
				if (g in rep)
					delete keep[rep[g]]
				rep[g] = k
			}
			keep[k] = 1
		}
		for (i = 1; i <= n; i++) {
			split(row[i], f, "\t")
			if (!(f[1] in keep) || f[3] == best[f[1]])
				continue
			d = f[1] SUBSEP f[3]
			if (index("," diff[d] ",", "," f[2] ",") == 0)
				diff[d] = diff[d] (diff[d] == "" ? "" : ",") f[2]
		}
		for (k in keep) {
			listed++
			print lib, k, 1, "kernel", lib, k, dem[k], best[k] >> rec
			if (arch[k] != pref)
				print lib, k, 2, "sm", lib, k, arch[k] >> rec
		}
		for (d in diff) {
			split(d, f, SUBSEP)
			print lib, f[1], 3, "disagree", lib, f[1], diff[d], f[2] >> rec
		}
		print listed + 0
	}' "$WORK/tables"
}

# emit_lib PATH RUNTIME IMPORTS KERNELS KIND: append one library's records.
emit_lib() {
	path=$1 rt=$2 imports=$3 total=$4 kind=$5
	listed=$(kernel_records "$path")
	others=$((total - listed))
	if [ "$kind" = cubin ]; then
		# Loose cubins come by the thousand: those with no kernel listed
		# get no lib line, and unlisted kernels are counted per directory.
		printf '%s\t%s\n' "${path%/*}" "$others" >>"$WORK/cubin_others"
		[ "$listed" -eq 0 ] ||
			printf '%s\t\t0\tlib\t%s\t%s\t%s\n' "$path" "$path" "$rt" "$imports" >>"$WORK/records"
	else
		printf '%s\t\t0\tlib\t%s\t%s\t%s\n' "$path" "$path" "$rt" "$imports" >>"$WORK/records"
		printf '%s\t~\t9\tothers\t%s\t%s\n' "$path" "$path" "$others" >>"$WORK/records"
	fi
	LAST_LISTED=$listed
}

# do_lib MEMBER: read one extracted library or cubin.
do_lib() {
	file=$WORK/wheel/$1
	case $1 in
	*.cubin) kind=cubin ;;
	*.fatbin) kind=fatbin ;;
	*) kind=so ;;
	esac
	if [ "$kind" = so ] && ! readelf -h "$file" >/dev/null 2>&1; then
		note "$PKG $VER: $1 is not an ELF file; skipped"
		return 0
	fi
	device_code "$file" "$1"
	total=$(select_kernels)
	if [ "$kind" = so ]; then
		has_code=0
		[ "$total" -eq 0 ] || has_code=1
		linkage=$(lib_linkage "$file" "$has_code")
		rt=${linkage%"$TAB"*}
		imports=${linkage#*"$TAB"}
	else
		rt=none
		imports=-
	fi
	# Neither kernels nor launches: nothing moeft could see.
	[ "$total" -gt 0 ] || [ "$imports" != - ] || return 0
	param_tables "$file" "$kind" "$1"
	emit_lib "$1" "$rt" "$imports" "$total" "$kind"
	[ "$kind" = cubin ] || note "$PKG $VER: $1: $total kernels, $LAST_LISTED listed"
}

# Header facts of the wheel: its CUDA requirements and, where it says so,
# the CUDA it was built for.
wheel_facts() {
	unzip -p "$WHEEL" '*.dist-info/METADATA' 2>/dev/null | tr -d '\r' | awk '
	/^Requires-Dist:/ {
		s = $0
		sub(/^Requires-Dist: */, "", s)
		if (s ~ /extra *==/)
			next    # optional: not what a plain install gets
		sub(/ *;.*/, "", s)
		gsub(/ /, "", s)
		if (tolower(s) ~ /^(torch|nvidia-|nvidia_|cuda-|cuda_)/)
			reqs = reqs (reqs == "" ? "" : ", ") s
	}
	END { print "# requires: " (reqs == "" ? "-" : reqs) }'
	unzip -Z1 "$WHEEL" | grep -E '^[^/]+/version\.py$' | while IFS= read -r v; do
		unzip -p "$WHEEL" "$v" | sed -n "s|^cuda[^=]*= *['\"]\([^'\"]*\)['\"].*|# cuda ($v): \1|p"
	done
}

write_output() {
	nlibs=$(grep -c "${TAB}0${TAB}lib${TAB}" "$WORK/records" || true)
	nkern=$(grep -c "${TAB}1${TAB}kernel${TAB}" "$WORK/records" || true)
	toolkits=$(sort -u "$WORK/toolkits" | paste -s -d, -)
	{
		echo "# moeft engine corpus, made by tools/engines/corpus.sh; format: tests/engines/README.md"
		echo "# package: $PKG"
		echo "# version: $VER"
		echo "# wheel: ${WHEEL##*/}"
		echo "# sha256: $(sha256sum "$WHEEL" | cut -d' ' -f1)"
		wheel_facts
		echo "# cuobjdump: $CUOBJDUMP_FROM ($CUOBJDUMP_VERSION_LINE)"
		echo "# toolkit of the cubins read: ${toolkits:--}"
		echo "# sm: tables from $PREFERRED_SM cubins; a kernel without one has an 'sm' line naming the architecture read"
		echo "# name words (in the qualified name; one instantiation listed per name and table): $NAME_WORDS"
		echo "# libraries: $nlibs, kernels listed: $nkern"
		# per rule glob: kernels it matches, and those it owns (first match)
		awk -F'\t' -v OFS='\t' -v hits="$WORK/hits" '
		BEGIN { while ((getline l < hits) > 0) { split(l, f, "\t"); m[f[1]]++; o[f[1]] += f[2] } }
		{ print "# rule", $1, $2, $3, m[NR] + 0, o[NR] + 0 }' "$WORK/globs"
		echo "# made: $(date -u +%Y-%m-%d)"
		{
			cat "$WORK/records"
			awk -F'\t' -v OFS='\t' '{ n[$1] += $2 }
			END { for (d in n) print d "/*.cubin", "~", 9, "others", d "/*.cubin", n[d] }' \
				"$WORK/cubin_others"
		} | sort | cut -f4-
	} >"$TMP_OUT"
	chmod 0644 "$TMP_OUT"
	mv -f "$TMP_OUT" "$OUT"
	TMP_OUT=''
}

cleanup() {
	[ -z "${WORK:-}" ] || rm -rf "$WORK"
	[ -z "${TMP_OUT:-}" ] || rm -f "$TMP_OUT"
}

main() {
	if [ $# -lt 2 ] || [ $# -gt 3 ]; then
		usage
	fi
	PKG=$1
	VER=$2
	here=$(cd "$(dirname "$0")" && pwd)
	root=$(cd "$here/../.." && pwd)
	out_dir=${3:-$root/tests/engines}
	BUILTIN=$root/preload/profiles_builtin.c
	CACHE=${XDG_CACHE_HOME:-$HOME/.cache}/moeft/wheels
	start=$(date +%s)

	need_tools
	[ -r "$BUILTIN" ] || die "$BUILTIN not found: run the script from its place in the repository"
	[ -d "$out_dir" ] || die "$out_dir: no such directory"
	mkdir -p "$CACHE" || die "$CACHE: cannot create the wheel cache"
	OUT=$out_dir/$PKG-$VER.tsv

	TMP_OUT=''
	WORK=$(mktemp -d "${TMPDIR:-/tmp}/corpus.XXXXXX")
	trap cleanup EXIT
	trap 'exit 130' INT
	trap 'exit 143' TERM HUP
	: >"$WORK/records"
	: >"$WORK/hits"
	: >"$WORK/toolkits"
	: >"$WORK/cubin_others"

	rule_globs "$BUILTIN" >"$WORK/globs"
	[ -s "$WORK/globs" ] || die "$BUILTIN: no rule found (has its layout changed?)"

	setup_cuobjdump
	if ! WHEEL=$(fetch_wheel "$PKG" "$VER") || [ -z "$WHEEL" ]; then
		die "$PKG==$VER: no linux x86_64 wheel for python $TARGET_PYTHON could be fetched"
	fi
	note "$PKG $VER: ${WHEEL##*/}"

	unzip -Z1 "$WHEEL" | grep -E '\.so$|\.so\.[0-9.]+$|\.cubin$|\.fatbin$' |
		sort >"$WORK/members" || true
	if [ -s "$WORK/members" ]; then
		set --
		for pat in '*.so' '*.so.*' '*.cubin' '*.fatbin'; do
			case $pat in
			'*.so') re='\.so$' ;;
			'*.so.*') re='\.so\.[0-9.]+$' ;;
			'*.cubin') re='\.cubin$' ;;
			*) re='\.fatbin$' ;;
			esac
			if grep -Eq "$re" "$WORK/members"; then
				set -- "$@" "$pat"    # unzip fails on a pattern matching nothing
			fi
		done
		unzip -q -o "$WHEEL" "$@" -d "$WORK/wheel" ||
			die "$PKG $VER: cannot unzip ${WHEEL##*/}"
		while IFS= read -r member <&3; do
			do_lib "$member"
			rm -f "$WORK/wheel/$member"    # keep the disk free
		done 3<"$WORK/members"
	else
		note "$PKG $VER: no .so, .cubin or .fatbin in ${WHEEL##*/}"
	fi

	TMP_OUT=$(mktemp "$out_dir/.$PKG-$VER.tsv.XXXXXX")
	write_output
	note "$PKG $VER: wrote $OUT in $(($(date +%s) - start)) s"
}

main "$@"
