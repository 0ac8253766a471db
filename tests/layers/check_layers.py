#!/usr/bin/env python3
"""check_layers.py - the layering of DESIGN.md, checked on the tree.

Usage: check_layers.py SOURCE_ROOT SHIM_ARCHIVE

1. Every quoted #include of a production folder resolves to a header of a
   folder it may depend on (dependencies point down: tools -> preload ->
   include, shim, wal, kernels; the demo serving program -> wal; the shim
   knows only itself; wal and kernels know only themselves), and none
   names a tests/ file.
2. wal/ includes no CUDA header.
3. No production meson.build builds or includes anything from tests/.
4. The shim's objects call nothing but themselves and the C library: no
   symbol of another layer (so it calls upward only through its table).
Prints one line per violation; exit 1 if any.
"""
import os
import re
import subprocess
import sys

ALLOWED = {
    "shim": {"shim"},
    "kernels": {"kernels"},
    "wal": {"wal"},
    "include": {"include"},
    "preload": {"preload", "include", "shim", "wal", "kernels"},
    "tools": {"tools", "preload", "wal", "kernels"},
    "demo": {"demo", "wal"},
}
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def headers(root):
    """Header basename -> the folders holding one."""
    where = {}
    for top in os.listdir(root):
        d = os.path.join(root, top)
        if not os.path.isdir(d) or top.startswith((".", "build")):
            continue
        for dirpath, _, files in os.walk(d):
            for f in files:
                if f.endswith((".h", ".def")):
                    where.setdefault(f, set()).add(top)
    return where


def check_includes(root, bad):
    where = headers(root)
    for top, allowed in ALLOWED.items():
        for dirpath, _, files in os.walk(os.path.join(root, top)):
            for f in files:
                if not f.endswith((".c", ".h", ".cu", ".in")):
                    continue
                path = os.path.join(dirpath, f)
                rel = os.path.relpath(path, root)
                for name in INCLUDE.findall(open(path, encoding="utf-8").read()):
                    if "tests/" in name or name.startswith(".."):
                        bad.append(f"{rel}: includes {name}, outside its folder's search path")
                        continue
                    base = os.path.basename(name)
                    if os.path.exists(os.path.join(dirpath, name)):
                        continue  # its own folder
                    homes = where.get(base, set())
                    if not homes & allowed:
                        bad.append(f"{rel}: includes {name}, found only in "
                                   f"{', '.join(sorted(homes)) or 'no folder'}; "
                                   f"{top}/ may include from {', '.join(sorted(allowed))}")
                    if top == "wal" and base.startswith("cuda"):
                        bad.append(f"{rel}: wal/ includes the CUDA header {name}")


def check_meson(root, bad):
    for top in ALLOWED:
        path = os.path.join(root, top, "meson.build")
        code = re.sub(r"#.*", "", open(path).read()) if os.path.exists(path) else ""
        if re.search(r"['\"][^'\"\n]*tests/", code):
            bad.append(f"{top}/meson.build: names something under tests/")


def symbols(archive, flag):
    out = subprocess.run(["nm", "-P", flag, archive], capture_output=True, text=True,
                         check=True).stdout
    return {line.split()[0] for line in out.splitlines()
            if line and not line.endswith(":") and len(line.split()) >= 2}


def check_shim_calls(archive, bad):
    libc = subprocess.run(["gcc", "-print-file-name=libc.so.6"], capture_output=True,
                          text=True, check=True).stdout.strip()
    system = {s.split("@")[0] for s in symbols(libc, "-D")}
    defined = symbols(archive, "--defined-only")
    for sym in sorted(symbols(archive, "--undefined-only") - defined):
        if sym in system or sym.startswith(("__asan", "__ubsan", "__sanitizer", "__lsan",
                                            "_GLOBAL_OFFSET_TABLE_", "__tls_get_addr")):
            continue
        bad.append(f"shim: its objects call {sym}, which neither the shim nor libc defines")


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    root, archive = sys.argv[1], sys.argv[2]
    bad = []
    check_includes(root, bad)
    check_meson(root, bad)
    check_shim_calls(archive, bad)
    for line in bad:
        print(line)
    print(f"layers: {len(bad)} violation{'s' if len(bad) != 1 else ''}")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
