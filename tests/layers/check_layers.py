#!/usr/bin/env python3
"""check_layers.py - the layering of DESIGN.md, checked on the tree.

Usage: check_layers.py SOURCE_ROOT [SHIM_ARCHIVE]

1. Every #include of a production folder that names one of the project's
   headers ("..." always, <...> when no system header has that name)
   resolves to a header of a folder it may depend on: dependencies point
   down (tools -> include, preload's plan.h, kvmap.h, reqindex.h, config.h,
   profile.h and triton.h (the rules and their placement on Triton
   kernels, for moeft profile check), wal, kernels;
   preload -> include,
   shim's shim.h and kernel_id.h, wal, kernels; the demo serving program ->
   wal; the shim, wal, kernels and include know only themselves), and none
   names a tests/ file.
2. wal/ includes no CUDA header.
3. The build files of a production folder (every meson.build below it)
   name other folders only where 1 allows, and nothing under tests/; the
   top meson.build names tests/ only to enter it.
4. With SHIM_ARCHIVE: the shim's objects call nothing but themselves and
   the C library, and reference the layer above only through its one
   table, the weak shim_events_above (shim.h).
Prints one line per violation; exit 1 if any.
"""
import os
import re
import subprocess
import sys

ANY = None
# folder -> {folder it may use: ANY header, or the set of header names}
ALLOWED = {
    "shim": {"shim": ANY},
    "kernels": {"kernels": ANY},
    "wal": {"wal": ANY},
    "include": {"include": ANY},
    "preload": {"preload": ANY, "include": ANY, "wal": ANY, "kernels": ANY,
                "shim": {"shim.h", "kernel_id.h"}},
    "tools": {"tools": ANY, "include": ANY, "wal": ANY, "kernels": ANY,
              "preload": {"plan.h", "kvmap.h", "reqindex.h", "config.h", "profile.h", "triton.h"}},
    "demo": {"demo": ANY, "wal": ANY},
}
SYSTEM_DIRS = ["/usr/include", "/usr/local/include", "/usr/local/cuda/include"]
INCLUDE = re.compile(r'^\s*#\s*include\s+([<"])([^>"]+)[>"]', re.M)
STRING = re.compile(r"'([^'\n]*)'|\"([^\"\n]*)\"")


def project_headers(root):
    """Header basename -> the top-level folders holding one."""
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


def system_header(name):
    return any(os.path.exists(os.path.join(d, name)) for d in SYSTEM_DIRS)


def allowed_header(top, home, base):
    rule = ALLOWED[top].get(home, False)
    return rule is ANY or (rule is not False and base in rule)


def check_includes(root, bad):
    where = project_headers(root)
    for top in ALLOWED:
        for dirpath, _, files in os.walk(os.path.join(root, top)):
            for f in files:
                if not f.endswith((".c", ".h", ".cu", ".in")):
                    continue
                path = os.path.join(dirpath, f)
                rel = os.path.relpath(path, root)
                for kind, name in INCLUDE.findall(open(path, encoding="utf-8").read()):
                    base = os.path.basename(name)
                    if top == "wal" and base.startswith("cuda"):
                        bad.append(f"{rel}: wal/ includes the CUDA header {name}")
                    if "tests/" in name or name.startswith(".."):
                        bad.append(f"{rel}: includes {name}, outside its folder's search path")
                        continue
                    if kind == '"' and os.path.exists(os.path.join(dirpath, name)):
                        continue  # its own folder
                    homes = where.get(base, set())
                    if not homes or (kind == "<" and system_header(name)):
                        continue  # a system header
                    if not any(allowed_header(top, h, base) for h in homes):
                        bad.append(f"{rel}: includes {name}, a header of "
                                   f"{', '.join(sorted(homes))}/, which {top}/ may not use")


def strings(path):
    code = re.sub(r"#.*", "", open(path, encoding="utf-8").read())
    return [a or b for a, b in STRING.findall(code)]


def check_meson(root, bad):
    for top in ALLOWED:
        for dirpath, _, files in os.walk(os.path.join(root, top)):
            if "meson.build" not in files:
                continue
            path = os.path.join(dirpath, "meson.build")
            rel = os.path.relpath(path, root)
            for s in strings(path):
                target = os.path.normpath(os.path.join(dirpath, s))
                first = os.path.relpath(target, root).split(os.sep)[0]
                if first == "tests" or re.search(r"(^|/)tests(/|$)", s):
                    bad.append(f"{rel}: names '{s}', under tests/")
                elif ".." in s.split("/") and first != top and first not in ALLOWED[top]:
                    bad.append(f"{rel}: names '{s}' in {first}/, which {top}/ may not use")
    for s in strings(os.path.join(root, "meson.build")):
        if re.search(r"(^|/)tests(/|$)", s) and s != "tests":
            bad.append(f"meson.build: names '{s}', under tests/")


def symbols(archive, flag, kinds=None):
    out = subprocess.run(["nm", "-P", flag, archive], capture_output=True, text=True,
                         check=True).stdout
    return {f[0] for f in (line.split() for line in out.splitlines())
            if len(f) >= 2 and not f[0].endswith(":") and (kinds is None or f[1] in kinds)}


def check_shim_calls(archive, bad):
    libc = subprocess.run(["gcc", "-print-file-name=libc.so.6"], capture_output=True,
                          text=True, check=True).stdout.strip()
    system = {s.split("@")[0] for s in symbols(libc, "-D")}
    defined = symbols(archive, "--defined-only")
    # The one table of the layer above, a weak reference (shim.h).
    defined |= {"shim_events_above"} & symbols(archive, "--undefined-only", {"w", "v"})
    for sym in sorted(symbols(archive, "--undefined-only") - defined):
        if sym in system or sym.startswith(("__asan", "__ubsan", "__sanitizer", "__lsan",
                                            "_GLOBAL_OFFSET_TABLE_", "__tls_get_addr")):
            continue
        bad.append(f"shim: its objects call {sym}, which neither the shim nor libc defines")


def main():
    if len(sys.argv) not in (2, 3):
        sys.exit(__doc__)
    root = sys.argv[1]
    bad = []
    check_includes(root, bad)
    check_meson(root, bad)
    if len(sys.argv) == 3:
        check_shim_calls(sys.argv[2], bad)
    for line in bad:
        print(line)
    print(f"layers: {len(bad)} violation{'s' if len(bad) != 1 else ''}")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
