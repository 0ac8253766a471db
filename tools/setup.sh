#!/usr/bin/env bash
# Set up a fresh Debian/Ubuntu machine for moeft: install the build's
# packages (when any is missing) and build into build/.
#   tools/setup.sh          install + build
#   tools/setup.sh --deps   install only (what CI needs before tests/run)
set -euo pipefail
cd "$(dirname "$0")/.."

# clang and libclang-rt-14-dev: the sanitizer and libFuzzer builds of tests/run;
# libcurl and jansson: moeft resubmit's HTTP and JSON.
packages=(meson ninja-build pkg-config gcc libc6-dev clang libclang-rt-14-dev
          libcunit1-dev libunwind-dev libnuma-dev libcurl4-openssl-dev libjansson-dev python3)

missing=()
for p in "${packages[@]}"; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if ((${#missing[@]})); then
	sudo=""
	[ "$(id -u)" -eq 0 ] || sudo=sudo
	echo "setup: installing ${missing[*]}"
	$sudo apt-get update -qq
	DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
[ "${1:-}" = --deps ] && exit 0

# nvcc, when the CUDA toolkit is installed, builds the device code too.
[ -d /usr/local/cuda/bin ] && export PATH="$PATH:/usr/local/cuda/bin"
[ -f build/build.ninja ] || meson setup build >/dev/null
ninja -C build >/dev/null
echo "setup: built build/tools/moeft"
