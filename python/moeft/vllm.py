"""vLLM's KV connector for moeft: ``moeft.vllm.MoeftConnector``.

    --kv-transfer-config '{"kv_connector":"MoeftConnector",
                           "kv_connector_module_path":"moeft.vllm",
                           "kv_role":"kv_both"}'

vLLM builds the connector twice.  The scheduler's (EngineCore process)
numbers the engine steps, one per build_connector_meta call, and commits
the running requests every moeft_window() steps; after `moeft restore` it
tells vLLM how many leading tokens of a resubmitted request the restored
state holds.  The worker's (Worker process) registers the CPU KV cache as
a host pool, commits the blocks written during each of the scheduler's
windows, and copies restored blocks into the blocks vLLM gives a resumed
request.  A device KV cache the preload records and restores itself; the
worker copies its restored blocks on the device (moeft_restored_copy).
What to log and restore is libmoeft's (include/moeft.h); this module only
tells it.  A hook never raises: failures are logged once and vLLM serves
on.
"""

from __future__ import annotations

import errno
import functools
import json
import logging
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar, cast

import torch
from vllm.distributed.kv_transfer.kv_connector.v1.base import (
    KVConnectorBase_V1,
    KVConnectorHandshakeMetadata,
    KVConnectorMetadata,
    KVConnectorRole,
)

from moeft import _lib

if TYPE_CHECKING:
    from vllm.config import VllmConfig
    from vllm.forward_context import ForwardContext
    from vllm.v1.attention.backend import AttentionMetadata
    from vllm.v1.core.kv_cache_manager import KVCacheBlocks
    from vllm.v1.core.sched.output import SchedulerOutput
    from vllm.v1.kv_cache_interface import KVCacheConfig
    from vllm.v1.request import Request

__all__ = ["MoeftConnector", "MoeftHandshake", "MoeftMeta"]

# a child of vLLM's logger, so that its lines come out with vLLM's
logger = logging.getLogger("vllm.moeft")

PARAMS_MAX = 4096  # bytes of a request's params (include/moeft.h)
ID_MAX = 255
TOKENS_MAX = 1 << 22


@dataclass
class MoeftMeta(KVConnectorMetadata):
    """The scheduler's word to the workers for one engine step."""

    step: int
    # (first step, steps) of the window that ends with this step, when the
    # scheduler committed its requests for it: the workers commit its KV
    commit: tuple[int, int] | None = None
    # (crashed engine's block, new block): restored KV to copy before the forward
    loads: list[tuple[int, int]] = field(default_factory=list)


@dataclass
class MoeftHandshake(KVConnectorHandshakeMetadata):
    """A worker's word to the scheduler once its KV cache is registered."""

    restored: bool  # every pool took a crashed process's restored bytes
    damaged: tuple[int, ...] = ()  # old block ids whose restored bytes are lost


class _Once:
    """Logs each key's line once per process."""

    def __init__(self) -> None:
        self._seen: set[str] = set()

    def __call__(self, key: str, level: int, msg: str, *args: object,
                 exc_info: bool = False) -> None:
        if key not in self._seen:
            self._seen.add(key)
            logger.log(level, "moeft: " + msg, *args, exc_info=exc_info)


def _errno_line(once: _Once, key: str, what: str, rc: int, consequence: str) -> None:
    """One ERROR line for the first failure of a kind (key) with errno rc."""
    once(f"{key}:{rc}", logging.ERROR, "%s failed: %s; %s (logged once)",
         what, _lib.strerror(rc), consequence)


F = TypeVar("F", bound=Callable[..., Any])


def _fail_open(fallback: Callable[[Any], object]) -> Callable[[F], F]:
    """A hook that logs its first exception and returns fallback(self)."""

    def wrap(hook: F) -> F:
        @functools.wraps(hook)
        def guarded(self: MoeftConnector, *args: Any, **kwargs: Any) -> Any:
            try:
                return hook(self, *args, **kwargs)
            except Exception:
                self._once(f"raised:{hook.__name__}", logging.ERROR,
                           "%s raised; vLLM serves on (logged once)",
                           hook.__name__, exc_info=True)
                return fallback(self)
        return cast(F, guarded)
    return wrap


# ---------------------------------------------------------------- scheduler


_ALWAYS = ("max_tokens", "temperature", "top_p", "top_k", "min_p")
_UNLESS_DEFAULT: dict[str, object] = {
    "seed": None, "stop": [], "stop_token_ids": [], "ignore_eos": False,
    "min_tokens": 0, "repetition_penalty": 1.0, "presence_penalty": 0.0,
    "frequency_penalty": 0.0,
}


def resend_params(sp: Any) -> dict[str, object]:
    """The sampling parameters /v1/completions needs to send a request again
    (max_tokens: its original budget)."""
    out: dict[str, object] = {k: getattr(sp, k) for k in _ALWAYS}
    for k, default in _UNLESS_DEFAULT.items():
        v = getattr(sp, k, default)
        if v is not None and v != default:
            out[k] = list(v) if isinstance(v, (list, tuple, set)) else v
    return out


@dataclass
class _Running:
    request: Request
    blocks: list[list[int]]  # per KV cache group
    params: bytes


@dataclass
class _Match:
    tokens: int  # of the request, whose KV the restored state holds (cut at damage)
    old_blocks: list[int]  # the crashed engine's, group 0
    damaged_tokens: int  # cut off because a worker found blocks damaged


class _Scheduler:
    """The scheduler side (EngineCore process)."""

    def __init__(self, lib: _lib.Lib | None, vllm_config: VllmConfig,
                 kv_cache_config: KVCacheConfig | None, once: _Once) -> None:
        self.lib = lib
        self.once = once
        groups = kv_cache_config.kv_cache_groups if kv_cache_config else []
        self.block_size = (groups[0].kv_cache_spec.block_size if groups
                           else vllm_config.cache_config.block_size)
        self.ngroups = max(len(groups), 1)
        self.world_size = vllm_config.parallel_config.world_size
        self.window = lib.window() if lib else 0
        restored = lib.restored_step() if lib else None
        self.restored = restored is not None
        self.first_step = restored + 1 if restored is not None else 0
        self.step = self.first_step  # of the next build_connector_meta
        self.running: dict[str, _Running] = {}
        self.matches: dict[tuple[str, int], _Match | None] = {}  # by id, tokens
        self.loads: list[tuple[int, int]] = []
        self.workers: dict[tuple[int, int], MoeftHandshake] | None = None
        self.damaged: frozenset[int] = frozenset()
        if self.restored:
            logger.info("moeft: restored as of engine step %d; numbering steps from %d",
                        restored, self.first_step)

    # -- recording

    def admitted(self, request: Request, blocks: KVCacheBlocks) -> None:
        sp = request.sampling_params
        params = b""
        if sp is not None:
            try:
                params = json.dumps(resend_params(sp), separators=(",", ":"),
                                    ensure_ascii=True, allow_nan=False).encode("ascii")
            except (TypeError, ValueError) as e:
                self.once("params-json", logging.WARNING,
                          "request %s: sampling parameters not JSON (%s); recorded "
                          "without them", request.request_id, e)
            if len(params) > PARAMS_MAX:
                self.once("params-long", logging.WARNING,
                          "request %s: sampling parameters take %d bytes, over %d; "
                          "recorded without them", request.request_id, len(params),
                          PARAMS_MAX)
                params = b""
        self.running[request.request_id] = _Running(
            request, [list(g) for g in blocks.get_block_ids()], params)

    def step_done(self, so: SchedulerOutput) -> MoeftMeta:
        step = self.step
        self.step += 1
        for new in so.scheduled_new_reqs:
            if (r := self.running.get(new.req_id)) is not None:
                r.blocks = [list(g) for g in new.block_ids]
        cached = so.scheduled_cached_reqs
        for rid, new_ids in zip(cached.req_ids, cached.new_block_ids):
            if new_ids is None or (r := self.running.get(rid)) is None:
                continue
            if rid in cached.resumed_req_ids:
                r.blocks = [list(g) for g in new_ids]
            else:
                for have, more in zip(r.blocks, new_ids):
                    have.extend(more)
        for rid in so.finished_req_ids:
            self.forget(rid)
        for rid in so.preempted_req_ids or ():
            if rid not in so.num_scheduled_tokens:  # not resumed in this very step
                self.forget(rid)

        meta = MoeftMeta(step=step, loads=self.loads)
        self.loads = []
        if self.lib and self.window and (step - self.first_step + 1) % self.window == 0:
            first = step - self.window + 1
            rc = self.lib.commit_requests(first, self.window, self.entries(so))
            if rc == 0:
                meta.commit = (first, self.window)
            else:
                # no KV window either: a worker's window without the
                # scheduler's would only push the pair's last good one out
                # of the KV store; its blocks ride along with the next
                _errno_line(self.once, "commit_requests", "moeft_commit_requests", rc,
                            "this window is not recorded, later ones are tried")
        return meta

    def entries(self, so: SchedulerOutput) -> list[_lib.Request]:
        out = []
        bs = self.block_size
        for rid, r in self.running.items():
            req = r.request
            why = self.unrecordable(req)
            if why:
                self.once(f"skip:{why}", logging.WARNING,
                          "request %s is not recorded: %s (said once for all such "
                          "requests)", rid, why)
                continue
            tokens = req.all_token_ids
            # KV after this step: build_connector_meta runs before vLLM adds
            # the scheduled tokens to num_computed_tokens
            computed = min(req.num_computed_tokens + so.num_scheduled_tokens.get(rid, 0),
                           len(tokens))
            nblocks = min([math.ceil(computed / bs)] + [len(g) for g in r.blocks])
            computed = min(computed, nblocks * bs)
            out.append(_lib.Request(
                id=rid.encode("ascii"), tokens=tokens, nprompt=req.num_prompt_tokens,
                ncomputed=computed, block_tokens=bs,
                blocks=[g[:nblocks] for g in r.blocks], params=r.params))
        return out

    @staticmethod
    def unrecordable(req: Request) -> str:
        rid = req.request_id
        if not (0 < len(rid) <= ID_MAX and rid.isascii() and rid.isprintable()):
            return "its id is not 1 to 255 printable ASCII characters"
        if req.num_tokens > TOKENS_MAX:
            return f"it has over {TOKENS_MAX} tokens"
        return _Scheduler.unresumable(req)

    @staticmethod
    def unresumable(req: Request) -> str:
        """Why a prefix of the request's token ids does not name its KV."""
        if req.prompt_token_ids is None or req.prompt_embeds is not None:
            return "it has prompt embeddings"
        if req.mm_features:
            return "it has multimodal inputs"
        if req.lora_request is not None:
            return "it uses a LoRA adapter"
        return ""

    def forget(self, rid: str) -> None:
        self.running.pop(rid, None)
        for key in [k for k in self.matches if k[0] == rid]:
            del self.matches[key]

    # -- restoring

    def set_workers(self, workers: dict[tuple[int, int], MoeftHandshake]) -> None:
        self.workers = workers
        damaged: set[int] = set()
        for w in workers.values():
            damaged.update(w.damaged)
        self.damaged = frozenset(damaged)
        if self.restored and damaged:
            logger.warning("moeft: workers found %d restored KV blocks damaged; requests "
                           "recompute from the first damaged block", len(damaged))

    def can_load(self) -> bool:
        if not (self.lib and self.restored):
            return False
        if self.ngroups != 1:
            self.once("groups", logging.WARNING,
                      "restored KV is offered for one KV cache group only, this model has %d",
                      self.ngroups)
            return False
        w = self.workers
        if w is None or len(w) != self.world_size or not all(x.restored for x in w.values()):
            self.once("workers", logging.WARNING,
                      "restored KV is not offered: %s",
                      "no worker reported its KV pools" if not w else
                      f"{sum(x.restored for x in w.values())} of {self.world_size} "
                      "workers restored their KV pools")
            return False
        return True

    def match(self, request: Request) -> _Match | None:
        if not self.can_load() or self.unresumable(request):
            return None
        key = (request.request_id, request.num_tokens)
        if key in self.matches:
            return self.matches[key]
        assert self.lib is not None
        n, old = self.lib.restored_prefix(request.all_token_ids, 0)
        if n < 0:
            if n != -errno.ENODEV:
                _errno_line(self.once, "restored_prefix", "moeft_restored_prefix", n,
                            "requests are computed without the restored state")
            m = None
        else:
            bs = self.block_size
            cut = n
            for i, b in enumerate(old[: n // bs]):
                if b in self.damaged:
                    cut = i * bs
                    break
            m = _Match(cut, old[: cut // bs], n - cut)
        self.matches[key] = m
        return m

    def matched_tokens(self, request: Request, num_computed_tokens: int) -> int:
        m = self.match(request)
        return max(m.tokens - num_computed_tokens, 0) if m else 0

    def allocated(self, request: Request, blocks: KVCacheBlocks, external: int) -> None:
        m = self.matches.pop((request.request_id, request.num_tokens), None)
        self.admitted(request, blocks)
        if external <= 0:
            return
        if m is None or external > m.tokens:  # never: vLLM asks with what it was told
            self.once("unasked", logging.ERROR, "request %s: vLLM counts %d tokens as "
                      "loaded that were not offered", request.request_id, external)
            return
        bs = self.block_size
        local = m.tokens - external
        new = blocks.get_block_ids()[0]
        pairs = [(m.old_blocks[i], new[i]) for i in range(local // bs, m.tokens // bs)]
        self.loads.extend(pairs)
        logger.info("moeft: resumed request %s: %d tokens from the restored state, %d block%s%s",
                    request.request_id, external, len(pairs), "" if len(pairs) == 1 else "s",
                    f"; {m.damaged_tokens} tokens recomputed because blocks were damaged"
                    if m.damaged_tokens else "")


# ------------------------------------------------------------------- worker


@dataclass
class _Layer:
    pool: int
    base: int  # address of block 0
    offset: int  # of block 0 in the pool
    stride: int  # bytes of a block
    nblocks: int


def _block_slabs(t: torch.Tensor, nblocks: int) -> list[tuple[int, int]] | None:
    """Where tensor t's blocks lie: (address of block 0, bytes from one
    block to the next) for K's and V's blocks of FlashAttention's (2,
    blocks, ...), or for the blocks of FlashInfer's (blocks, 2, ...), each
    block's bytes contiguous; None for another layout, or one that could
    be either (2 blocks)."""
    if not t.is_contiguous() or nblocks <= 2 or t.dim() < 2:
        return None
    size = t.element_size()
    if t.shape[0] == 2 and t.shape[1] == nblocks:
        return [(t.data_ptr() + k * t.stride(0) * size, t.stride(1) * size) for k in (0, 1)]
    if t.shape[0] == nblocks:
        return [(t.data_ptr(), t.stride(0) * size)]
    return None


def _current_stream(t: torch.Tensor) -> int:
    """The CUDA stream vLLM runs its forward on, as a cudaStream_t."""
    return int(torch.cuda.current_stream(t.device).cuda_stream)


@dataclass
class _DeviceSlab:
    base: int  # address of block 0
    stride: int  # bytes of a block


class _Worker:
    """The worker side (Worker process)."""

    def __init__(self, lib: _lib.Lib | None, kv_cache_config: KVCacheConfig | None,
                 vllm_config: VllmConfig, once: _Once) -> None:
        self.lib = lib
        self.once = once
        groups = kv_cache_config.kv_cache_groups if kv_cache_config else []
        self.block_size = (groups[0].kv_cache_spec.block_size if groups
                           else vllm_config.cache_config.block_size)
        self.nblocks = kv_cache_config.num_blocks if kv_cache_config else 0
        self.layers: list[_Layer] = []
        # device KV (the preload records and restores it): where each
        # layer's blocks lie, to copy restored ones into new blocks
        self.slabs: list[_DeviceSlab] = []
        self.device: torch.Tensor | None = None
        self.handshake: MoeftHandshake | None = None
        self.dirty: set[int] = set()
        self.seen: set[int] = set()  # attention metadata read this step
        self.load_errors: set[int] = set()

    def register(self, kv_caches: dict[str, torch.Tensor]) -> None:
        if self.lib is None:
            return
        tensors = list({t.data_ptr(): t for t in kv_caches.values()}.values())
        if not tensors:
            return
        if any(t.device.type != "cpu" for t in tensors):
            self.register_device(tensors)
            return
        bad = [t for t in tensors if t.dim() < 2 or not t.is_contiguous()]
        if bad:
            self.once("layout", logging.WARNING,
                      "KV cache layer of shape %s strides %s is not contiguous; KV is "
                      "not recorded", tuple(bad[0].shape), bad[0].stride())
            return
        storages: dict[int, list[torch.Tensor]] = {}
        for t in tensors:
            storages.setdefault(t.untyped_storage().data_ptr(), []).append(t)
        layers = []
        for base, ts in storages.items():
            ts.sort(key=lambda t: t.data_ptr())
            t0 = ts[0]
            name = (f"vllm-kv {str(t0.dtype).removeprefix('torch.')} {t0.shape[0]}x"
                    f"[{','.join(str(d) for d in t0.shape[1:])}] {len(ts)} layers")
            nbytes = t0.untyped_storage().nbytes()
            pool = self.lib.kv_pool(name.encode("ascii"), base, nbytes, 0)
            if pool < 0:
                _errno_line(self.once, "kv_pool",
                            f"moeft_kv_pool({name!r}, {nbytes} bytes)", pool,
                            "KV is not recorded")
                return
            for t in ts:
                stride = t.stride(0) * t.element_size()
                layers.append(_Layer(pool, t.data_ptr(), t.data_ptr() - base, stride,
                                     t.shape[0]))
        self.layers = layers
        self.handshake = self.check_restored()

    def register_device(self, tensors: list[torch.Tensor]) -> None:
        """Device KV: the preload records it from the kernels and restores
        it in place; restored blocks are copied into the blocks vLLM gives
        a resumed request (load)."""
        assert self.lib is not None
        slabs = []
        for t in tensors:
            found = _block_slabs(t, self.nblocks)
            if found is None:
                self.once("device-layout", logging.WARNING,
                          "device KV cache of shape %s strides %s is neither (2, %d, ...) "
                          "nor (%d, 2, ...), contiguous; restored KV is not offered",
                          tuple(t.shape), t.stride(), self.nblocks, self.nblocks)
                self.handshake = MoeftHandshake(restored=False)
                return
            slabs += [_DeviceSlab(base, stride) for base, stride in found]
        restored = all(self.lib.restored_device(s.base, s.stride * self.nblocks) == 1
                       for s in slabs)
        self.slabs, self.device = slabs, tensors[0]
        self.handshake = MoeftHandshake(restored=restored)
        logger.info("moeft: device KV cache on %s: %d block slabs, %s", tensors[0].device,
                    len(slabs), "restored" if restored else "not restored")

    def check_restored(self) -> MoeftHandshake:
        """Whether the pools hold restored bytes, and which old blocks are lost."""
        assert self.lib is not None
        damaged: set[int] = set()
        for ly in self.layers:
            rc = self.lib.restored_intact(ly.pool, ly.offset, ly.nblocks * ly.stride)
            if rc < 0:
                if rc != -errno.ENODEV:
                    _errno_line(self.once, "restored_intact", "moeft_restored_intact", rc,
                                "restored KV is not offered")
                return MoeftHandshake(restored=False)
            if rc == 0:
                damaged.update(
                    b for b in range(ly.nblocks)
                    if self.lib.restored_intact(ly.pool, ly.offset + b * ly.stride,
                                                ly.stride) != 1)
        logger.info("moeft: KV pools restored (%d layers)%s", len(self.layers),
                    f"; {len(damaged)} blocks damaged" if damaged else "")
        return MoeftHandshake(restored=True, damaged=tuple(sorted(damaged)))

    def saved(self, attn_metadata: Any, layer_name: str) -> None:
        if not self.layers:
            return
        if isinstance(attn_metadata, dict):
            attn_metadata = attn_metadata.get(layer_name)
        if attn_metadata is None or id(attn_metadata) in self.seen:
            return
        self.seen.add(id(attn_metadata))
        slots = attn_metadata.slot_mapping
        n = getattr(attn_metadata, "num_actual_tokens", None)
        if n is not None:
            slots = slots[:n]
        slots = slots[slots >= 0]
        self.dirty.update(torch.unique(slots // self.block_size).tolist())

    def load(self, loads: Sequence[tuple[int, int]]) -> None:
        if not loads:
            return
        if self.slabs:
            self.load_device(loads)
            return
        if not self.layers or self.lib is None:
            self.load_errors.update(new for _, new in loads)
            self.once("load-nothing", logging.ERROR,
                      "asked to load restored KV without registered pools; the blocks "
                      "are reported as load errors")
            return
        for old, new in loads:
            try:
                rc = self.read_block(old, new)
            except Exception:
                self.once("load-raised", logging.ERROR, "loading restored block raised",
                          exc_info=True)
                rc = -errno.EIO
            if rc < 0:
                self.load_errors.add(new)
                _errno_line(self.once, "restored_read",
                            f"moeft_restored_read(old block {old})", rc,
                            "vLLM is told the block failed to load")
            self.dirty.add(new)

    def load_device(self, loads: Sequence[tuple[int, int]]) -> None:
        """Every loaded block's restored bytes into its new block, in one
        call ordered on the forward's stream (so no layer waits apart)."""
        assert self.lib is not None and self.device is not None
        if any(not (0 <= b < self.nblocks) for pair in loads for b in pair):
            self.load_errors.update(new for _, new in loads)
            self.once("load-range", logging.ERROR,
                      "asked to load blocks outside the KV cache's %d: %s; vLLM is told "
                      "they failed to load", self.nblocks, list(loads))
            return
        ranges = [(s.base + old * s.stride, s.base + new * s.stride, s.stride)
                  for old, new in loads for s in self.slabs]
        rc = self.lib.restored_copy(ranges, _current_stream(self.device))
        if rc < 0:
            self.load_errors.update(new for _, new in loads)
            _errno_line(self.once, "restored_copy",
                        f"moeft_restored_copy({len(loads)} blocks)", rc,
                        "vLLM is told the blocks failed to load")

    def read_block(self, old: int, new: int) -> int:
        assert self.lib is not None
        for ly in self.layers:
            if not (0 <= old < ly.nblocks and 0 <= new < ly.nblocks):
                return -errno.EINVAL
            rc = self.lib.restored_read(ly.pool, ly.offset + old * ly.stride,
                                        ly.base + new * ly.stride, ly.stride)
            if rc < 0:
                return rc
        return 0

    def step_done(self, meta: MoeftMeta | None) -> None:
        self.seen.clear()
        if self.lib is None or meta is None or meta.commit is None or not self.layers:
            return
        first, steps = meta.commit
        ranges = [(ly.pool, ly.offset + b * ly.stride, ly.stride)
                  for b in sorted(self.dirty) for ly in self.layers]
        rc = self.lib.commit_kv(first, steps, ranges)
        if rc == 0:
            self.dirty.clear()
        else:  # the blocks ride along with the next window
            _errno_line(self.once, "commit_kv", "moeft_commit_kv", rc,
                        "this window's KV is not recorded, later ones are tried")


# ---------------------------------------------------------------- connector


class MoeftConnector(KVConnectorBase_V1):
    """Logs the engine's requests (and KV on the CPU backend) with libmoeft
    and, in a server that `moeft restore` restarted, resumes resubmitted
    requests from the restored state.  Records nothing, and says why once,
    when libmoeft.so is not preloaded or not instrumenting this process."""

    def __init__(self, vllm_config: VllmConfig, role: KVConnectorRole,
                 kv_cache_config: KVCacheConfig | None = None) -> None:
        super().__init__(vllm_config, role, kv_cache_config)  # type: ignore[arg-type]
        self._once = _Once()
        lib, why = _lib.load()
        if lib is None:
            logger.warning("moeft: recording nothing: %s", why)
        self._sched = (_Scheduler(lib, vllm_config, kv_cache_config, self._once)
                       if role == KVConnectorRole.SCHEDULER else None)
        self._worker = (_Worker(lib, kv_cache_config, vllm_config, self._once)
                        if role == KVConnectorRole.WORKER else None)

    # -- worker side

    def bind_connector_metadata(self, connector_metadata: KVConnectorMetadata) -> None:
        super().bind_connector_metadata(connector_metadata)
        if self._worker:
            self._worker.seen.clear()

    @_fail_open(lambda self: None)
    def register_kv_caches(self, kv_caches: dict[str, torch.Tensor]) -> None:
        if self._worker:
            self._worker.register(kv_caches)

    def get_handshake_metadata(self) -> KVConnectorHandshakeMetadata | None:
        return self._worker.handshake if self._worker else None

    @_fail_open(lambda self: None)
    def start_load_kv(self, forward_context: ForwardContext, **kwargs: Any) -> None:
        meta = self._connector_metadata
        if self._worker and isinstance(meta, MoeftMeta):
            self._worker.load(meta.loads)

    def wait_for_layer_load(self, layer_name: str) -> None:
        return None

    @_fail_open(lambda self: None)
    def save_kv_layer(self, layer_name: str, kv_layer: torch.Tensor,
                      attn_metadata: AttentionMetadata, **kwargs: Any) -> None:
        if self._worker:
            self._worker.saved(attn_metadata, layer_name)

    @_fail_open(lambda self: None)
    def wait_for_save(self) -> None:
        meta = self._connector_metadata
        if self._worker:
            self._worker.step_done(meta if isinstance(meta, MoeftMeta) else None)

    @_fail_open(lambda self: set())
    def get_block_ids_with_load_errors(self) -> set[int]:
        if not self._worker:
            return set()
        errors, self._worker.load_errors = self._worker.load_errors, set()
        return errors

    # -- scheduler side

    @_fail_open(lambda self: (0, False))
    def get_num_new_matched_tokens(self, request: Request,
                                   num_computed_tokens: int) -> tuple[int | None, bool]:
        if not self._sched:
            return 0, False
        return self._sched.matched_tokens(request, num_computed_tokens), False

    @_fail_open(lambda self: None)
    def update_state_after_alloc(self, request: Request, blocks: KVCacheBlocks,
                                 num_external_tokens: int) -> None:
        if self._sched:
            self._sched.allocated(request, blocks, num_external_tokens)

    @_fail_open(lambda self: MoeftMeta(step=-1))
    def build_connector_meta(self, scheduler_output: SchedulerOutput) -> KVConnectorMetadata:
        if not self._sched:
            return MoeftMeta(step=-1)
        return self._sched.step_done(scheduler_output)

    @_fail_open(lambda self: (False, None))
    def request_finished(self, request: Request,
                         block_ids: list[int]) -> tuple[bool, dict[str, Any] | None]:
        if self._sched:
            self._sched.forget(request.request_id)
        return False, None

    @_fail_open(lambda self: None)
    def set_xfer_handshake_metadata(
        self, metadata: dict[int, KVConnectorHandshakeMetadata]
    ) -> None:
        self.set_xfer_handshake_metadata_pp_aware({(0, k): v for k, v in metadata.items()})

    @_fail_open(lambda self: None)
    def set_xfer_handshake_metadata_pp_aware(
        self, metadata: dict[tuple[int, int], KVConnectorHandshakeMetadata]
    ) -> None:
        # every (pipeline, tensor) rank's worker: the base class refuses pp > 0
        if self._sched:
            self._sched.set_workers({k: v for k, v in metadata.items()
                                     if isinstance(v, MoeftHandshake)})
