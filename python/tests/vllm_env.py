"""A small vLLM engine for the tests, out of vLLM's own classes: a real
VllmConfig and Scheduler (which builds the scheduler's connector through
vLLM's KVConnectorFactory), real Requests and SchedulerOutputs, and a CPU
tensor in the layout of vLLM's CPU KV cache standing in for the worker's.

No model runs: the "forward" writes to each scheduled token's slot a value
made of its layer, position and token id, and the "sampler" derives the
next token from the sequence, so every byte and token is known.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from vllm.config import (
    CacheConfig,
    DeviceConfig,
    KVTransferConfig,
    ModelConfig,
    SchedulerConfig,
    VllmConfig,
)
from vllm.distributed.kv_transfer.kv_connector.factory import KVConnectorFactory
from vllm.distributed.kv_transfer.kv_connector.v1.base import (
    KVConnectorBase_V1,
    KVConnectorRole,
)
from vllm.sampling_params import SamplingParams
from vllm.utils.hashing import get_hash_fn_by_name
from vllm.v1.attention.backends.cpu_attn import CPUAttentionMetadata
from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash
from vllm.v1.core.sched.output import SchedulerOutput
from vllm.v1.core.sched.scheduler import Scheduler
from vllm.v1.kv_cache_interface import (
    FullAttentionSpec,
    KVCacheConfig,
    KVCacheGroupSpec,
    KVCacheTensor,
)
from vllm.v1.outputs import KVConnectorOutput, ModelRunnerOutput
from vllm.v1.request import Request
from vllm.v1.structured_output import StructuredOutputManager

from moeft.vllm import MoeftMeta

# the tiny Qwen3-MoE's config (python/VLLM.md, section 3); only its shape matters
MODEL_CONFIG = {
    "architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe",
    "vocab_size": 1000, "hidden_size": 128, "intermediate_size": 256,
    "moe_intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
    "num_key_value_heads": 2, "head_dim": 64, "num_experts": 8, "num_local_experts": 8,
    "num_experts_per_tok": 2, "decoder_sparse_step": 1, "mlp_only_layers": [],
    "norm_topk_prob": True, "max_position_embeddings": 2048, "rms_norm_eps": 1e-6,
    "tie_word_embeddings": False, "bos_token_id": 1, "eos_token_id": 2,
    "pad_token_id": 3, "dtype": "float32", "hidden_act": "silu",
    "rope_parameters": {"rope_theta": 10000.0, "rope_type": "default"},
}

CONNECTOR: dict[str, Any] = {"kv_connector": "MoeftConnector",
                             "kv_connector_module_path": "moeft.vllm", "kv_role": "kv_both"}


@dataclass(frozen=True)
class Shape:
    """The engine's geometry: a block of one layer is heads x block_size x
    2*head_size float32 = 4 KiB, the smallest chunk libmoeft tracks."""

    block_size: int = 4
    num_blocks: int = 32
    layers: int = 2
    heads: int = 2
    head_size: int = 64
    max_batched: int = 8  # tokens per step: longer prompts are chunked

    @property
    def layer_names(self) -> list[str]:
        return [f"model.layers.{i}.self_attn.attn" for i in range(self.layers)]

    @property
    def block_bytes(self) -> int:
        return self.heads * self.block_size * 2 * self.head_size * 4


def vllm_config(model_dir: Path, shape: Shape) -> VllmConfig:
    model_dir.mkdir(parents=True, exist_ok=True)
    (model_dir / "config.json").write_text(json.dumps(MODEL_CONFIG))
    mc = ModelConfig(model=str(model_dir), skip_tokenizer_init=True, dtype="float32",
                     max_model_len=256)
    vc = VllmConfig(
        model_config=mc,
        cache_config=CacheConfig(block_size=shape.block_size),
        device_config=DeviceConfig("cpu"),
        scheduler_config=SchedulerConfig(max_num_batched_tokens=shape.max_batched,
                                         max_num_seqs=8, max_model_len=256,
                                         is_encoder_decoder=False),
        kv_transfer_config=KVTransferConfig(**CONNECTOR),
    )
    vc.cache_config.num_gpu_blocks = shape.num_blocks
    return vc


def kv_cache_config(shape: Shape) -> KVCacheConfig:
    spec = FullAttentionSpec(block_size=shape.block_size, num_kv_heads=shape.heads,
                             head_size=shape.head_size, dtype=torch.float32)
    layer_bytes = shape.num_blocks * shape.block_bytes
    return KVCacheConfig(
        num_blocks=shape.num_blocks,
        kv_cache_tensors=[KVCacheTensor(size=layer_bytes * shape.layers,
                                        layers=shape.layer_names, layer_stride=layer_bytes,
                                        block_stride=shape.block_bytes)],
        kv_cache_groups=[KVCacheGroupSpec(shape.layer_names, spec)],
    )


class Engine:
    """vLLM's scheduler, as EngineCore drives it."""

    def __init__(self, model_dir: Path, shape: Shape) -> None:
        self.shape = shape
        self.config = vllm_config(model_dir, shape)
        self.scheduler = Scheduler(self.config, kv_cache_config(shape),
                                   StructuredOutputManager(self.config),
                                   block_size=shape.block_size)
        connector = self.scheduler.connector
        assert isinstance(connector, KVConnectorBase_V1)
        self.connector = connector
        hash_fn = get_hash_fn_by_name(self.config.cache_config.prefix_caching_hash_algo)
        init_none_hash(hash_fn)
        self.hasher = get_request_block_hasher(shape.block_size, hash_fn)

    def request(self, rid: str, prompt: list[int], **params: Any) -> Request:
        return Request(rid, prompt, SamplingParams(**params), None, block_hasher=self.hasher)

    def handshake(self, metadata: dict[tuple[int, int], Any]) -> None:
        """What EngineCore does with the workers' handshake metadata."""
        self.connector.set_xfer_handshake_metadata_pp_aware(metadata)

    def blocks(self, rid: str) -> list[int]:
        return list(self.scheduler.kv_cache_manager.get_block_ids(rid)[0])

    def run(self, requests: list[dict[str, Any]], steps: int,
            forward: Callable[[SchedulerOutput, list[int], list[float]], set[int]],
            log: Callable[..., None]) -> None:
        """EngineCore's loop for `steps` turns: requests {"id", "prompt",
        "at": turn, "params"} arrive; each engine step is logged (what the
        connector planned; vLLM's own view of the running requests when a
        window ends), the worker's `forward` runs it and returns its load
        errors.  At the end: the tokens each request got, and which are left."""
        s = self.scheduler
        generated: dict[str, list[int]] = {}
        for turn in range(steps):
            for r in requests:
                if r["at"] == turn:
                    req = self.request(r["id"], r["prompt"], **r["params"])
                    # free of side effects, so it can be asked here as well
                    log(asked=r["id"],
                        answer=list(self.connector.get_num_new_matched_tokens(req, 0)))
                    s.add_request(req)
            if not s.has_requests():  # EngineCore takes no step then
                continue
            so = s.schedule()
            meta = so.kv_connector_metadata
            assert isinstance(meta, MoeftMeta)
            rec: dict[str, Any] = {
                "step": meta.step, "commit": meta.commit and list(meta.commit),
                "loads": [list(p) for p in meta.loads],
                "sync_loads": so.has_sync_kv_loads,
                "preempted": sorted(so.preempted_req_ids or ()),
                "new": {n.req_id: [n.num_computed_tokens, self.blocks(n.req_id)]
                        for n in so.scheduled_new_reqs}}
            if meta.commit:
                rec["running"] = [{
                    "id": r.request_id, "tokens": list(r.all_token_ids),
                    "nprompt": r.num_prompt_tokens, "ncomputed": r.num_computed_tokens,
                    "blocks": self.blocks(r.request_id)} for r in s.running]
            log(**rec)
            errors = forward(so, *self.slots(so))
            for rid, toks in self.finish_step(so, errors).items():
                generated.setdefault(rid, []).extend(toks)
        log(generated=generated, unfinished=sorted(s.requests))

    def slots(self, so: SchedulerOutput) -> tuple[list[int], list[float]]:
        """Slot and KV value of each token the step computes."""
        bs = self.shape.block_size
        slots: list[int] = []
        values: list[float] = []
        for rid, n in so.num_scheduled_tokens.items():
            req = self.scheduler.requests[rid]
            blocks = self.blocks(rid)
            for pos in range(req.num_computed_tokens - n, req.num_computed_tokens):
                slots.append(blocks[pos // bs] * bs + pos % bs)
                values.append(kv_value(pos, req.all_token_ids[pos]))
        return slots, values

    def finish_step(self, so: SchedulerOutput, invalid: set[int]) -> dict[str, list[int]]:
        """The model runner's output: a token for each request past its
        prompt.  Returns the tokens the engine hands out, by request."""
        ids = list(so.num_scheduled_tokens)
        sampled = []
        for rid in ids:
            req = self.scheduler.requests[rid]
            done = req.num_computed_tokens >= req.num_tokens
            sampled.append([next_token(list(req.all_token_ids))] if done else [])
        outputs = self.scheduler.update_from_output(so, ModelRunnerOutput(
            req_ids=ids, req_id_to_index={r: i for i, r in enumerate(ids)},
            sampled_token_ids=sampled,
            kv_connector_output=KVConnectorOutput(invalid_block_ids=invalid)))
        return {o.request_id: list(o.new_token_ids)
                for eco in outputs.values() for o in eco.outputs}


def kv_value(pos: int, token: int) -> float:
    return float(1 + pos * 1024 + token)  # exact in float32 below 2^24


def next_token(tokens: list[int]) -> int:
    return (tokens[-1] * 7 + len(tokens) * 13) % 900 + 10


class KvCache:
    """The CPU KV cache as vLLM's CPU worker allocates it: one storage, per
    layer a [num_blocks, heads, block_size, 2*head_size] view."""

    def __init__(self, shape: Shape) -> None:
        self.shape = shape
        per_layer = shape.num_blocks * shape.block_bytes // 4
        self.storage = torch.zeros(per_layer * shape.layers, dtype=torch.float32)
        self.layers = {
            name: self.storage[i * per_layer:(i + 1) * per_layer].view(
                shape.num_blocks, shape.heads, shape.block_size, 2 * shape.head_size)
            for i, name in enumerate(shape.layer_names)}

    def bytes(self) -> bytes:
        return self.storage.numpy().tobytes()


class Worker:
    """vLLM's model runner around the worker's connector, for one step at a
    time (KVConnectorModelRunnerMixin's order of calls)."""

    def __init__(self, model_dir: Path, shape: Shape) -> None:
        self.shape = shape
        self.config = vllm_config(model_dir, shape)
        self.connector = KVConnectorFactory.create_connector(
            self.config, KVConnectorRole.WORKER, kv_cache_config(shape))
        self.kv = KvCache(shape)
        self.connector.register_kv_caches(self.kv.layers)

    def step(self, so: SchedulerOutput, slots: list[int], values: list[float],
             after_load: Any = None) -> set[int]:
        c = self.connector
        assert so.kv_connector_metadata is not None
        c.bind_connector_metadata(so.kv_connector_metadata)
        if so.has_sync_kv_loads:
            c.start_load_kv(None)  # type: ignore[arg-type]
        if after_load:
            after_load()
        if slots:
            self.forward(slots, values)
        if not so.has_sync_kv_loads:
            c.start_load_kv(None)  # type: ignore[arg-type]
        c.wait_for_save()  # type: ignore[no-untyped-call]
        errors = c.get_block_ids_with_load_errors()
        c.clear_connector_metadata()
        return errors

    def forward(self, slots: list[int], values: list[float]) -> None:
        bs = self.shape.block_size
        # padded as vLLM pads a batch: the padding is past num_actual_tokens
        mapping = torch.tensor(slots + [-1, -1], dtype=torch.int64)
        meta = CPUAttentionMetadata(
            num_actual_tokens=len(slots), max_query_len=len(slots),
            query_start_loc=torch.tensor([0, len(slots)], dtype=torch.int32),
            max_seq_len=0, seq_lens=torch.zeros(1, dtype=torch.int32),
            block_table=torch.zeros((1, 1), dtype=torch.int32), slot_mapping=mapping,
            scheduler_metadata=None)
        for i, (name, layer) in enumerate(self.kv.layers.items()):
            self.connector.wait_for_layer_load(name)
            for slot, v in zip(slots, values, strict=True):
                layer[slot // bs, :, slot % bs, :] = v + i * (1 << 20)
            self.connector.save_kv_layer(name, layer, meta)  # type: ignore[arg-type]
