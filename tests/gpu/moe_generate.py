#!/usr/bin/env python3
"""moe_generate.py - greedy decoding with a small random Qwen3-MoE model
(transformers) over a static KV cache.

One forward pass is one step: step 0 is the prefill of the batch's prompts,
every later step decodes one token per sequence.  --mode=eager runs each
pass as it comes; --mode=graph captures the decode pass once into a
torch.cuda.CUDAGraph on static input buffers and replays it each step.  All
device work goes to one stream of the program's own: a capture needs a
stream other than the default one, and a graph is replayed on the stream it
was captured on.

The model is Qwen3MoeForCausalLM from a random config, seeded, so every run
of one configuration on one device has the same weights and prompts (the
weights are drawn by transformers' own initialisation once they are on the
device: drawing them on the CPU took 20 s a run); bf16, SDPA attention,
grouped-mm experts (transformers' default, with no host syncs, so the decode
pass can be captured).  SDPA's cuDNN backend is off: it makes its handle at
first use, which in a resumed graph-mode run (no prefill) would be inside
the capture, where allocating is forbidden.  The KV cache is transformers'
StaticCache, allocated whole before the first pass, right after the
weights: per layer a K and a V
tensor [batch, kv heads, cache len, head dim].  With the defaults each is
12 MiB, a multiple of 2 MiB over 10 MiB, which PyTorch's caching allocator
serves with a device allocation of its own of exactly that size; the run
prints the size and whether that holds (the "kv" line).

Outputs (formats in formats.py): --journal, a line per completed step with
the batch's tokens, each in one write(2); --truth, per step, layer and token
row the top-k expert ids each layer's router returned (a forward hook on
every router keeps a copy of its ids, in every run alike; in graph mode the
copies are captured and hold each replay's ids) and their gating weights:
the router's own softmax and top-k done again on its logits in the hook,
the same kernels on the same inputs, so the same float32 bits (the router
divides its copy in place when norm_topk_prob is set); only runs with
--truth launch those, and none runs under the preload, where they would be
routing of their own); --save-kv, the whole cache after step
--save-kv-step; stdout, a "kv" line, a "result" line (configuration, token
count and hash of every token) and a "times" line (wall-clock seconds since
the epoch, and the decode throughput).

Recovery hook: when MOEFT_RESTORE_MANIFEST names a JSON object, its
"resume_step" R says where to go on.  The tokens of the steps before R come
from the journal's first R lines, which must be whole and well formed (what
follows them is cut); the model and the cache are allocated exactly as in a
fresh run, in the same order and sizes; there is no prefill and the run
continues at step R, with the cache's write position set to P + R - 1 (step
0 writes positions 0 .. P-1, step t >= 1 position P + t - 1).  The cache's
contents are not the program's to restore: whoever set the variable fills
the tensors after the program's own initialisation of them (moeft's preload,
with MOEFT_RESTORE_AT=init, copies its images in on the stream right after
torch.zeros' fill of the last cache tensor, so before any resumed pass).
--dump-kv-at-resume saves the cache as the process holds it right before
step R, once the stream's work so far is done: the state as of step R-1,
positions 0 .. P+R-2 written (its index says step R-1; step -1, nothing
written, for R = 0).  An R past the last step computes nothing.

Exit status: 0; 1 when a step cannot run; 2 on bad usage, a bad manifest or
a bad journal.
"""
import argparse
import contextlib
import json
import math
import os
import sys
import time

T_START = time.time()  # before torch loads: a restarted process starts here

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import formats  # noqa: E402  (after the path)

MIB = 1 << 20


def die(status, msg):
    print("moe_generate: " + msg, file=sys.stderr)
    sys.exit(status)


FILL = -1  # --prompt-len fill


def positive(text):
    try:
        v = int(text, 10)
    except ValueError:
        v = 0
    if v < 1:
        raise argparse.ArgumentTypeError("want a positive integer, got %r" % text)
    return v


def prompt_len(text):
    return FILL if text == "fill" else positive(text)


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--mode", choices=("eager", "graph"), default="eager")
    p.add_argument("--steps", type=positive, default=96, help="steps, the prefill included")
    p.add_argument("--batch", type=positive, default=8)
    p.add_argument("--prompt-len", type=prompt_len, default=64,
                   help="positions of each prompt, or 'fill': the cache's, less the steps'")
    p.add_argument("--cache-len", type=positive, help="cache positions (default 768)")
    p.add_argument("--kv-gib", type=float, help="size the cache to about this many GiB")
    p.add_argument("--layers", type=positive, default=8)
    p.add_argument("--experts", type=positive, default=64)
    p.add_argument("--topk", type=positive, default=8)
    p.add_argument("--hidden", type=positive, default=1024)
    p.add_argument("--heads", type=positive, default=8)
    p.add_argument("--kv-heads", type=positive, default=8)
    p.add_argument("--moe-intermediate", type=positive, default=256)
    p.add_argument("--vocab", type=positive, default=4096)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--device", default="cuda", help="eager mode also runs on cpu")
    p.add_argument("--journal")
    p.add_argument("--truth")
    p.add_argument("--save-kv")
    p.add_argument("--save-kv-step", type=int, help="default: the last step")
    p.add_argument("--dump-kv-at-resume")
    a = p.parse_args(argv)
    if a.hidden % a.heads or a.heads % a.kv_heads:
        p.error("--hidden must be a multiple of --heads, and --heads of --kv-heads")
    if a.topk > a.experts:
        p.error("--topk %d is more than --experts %d" % (a.topk, a.experts))
    if a.mode == "graph" and not a.device.startswith("cuda"):
        p.error("--mode=graph needs a cuda --device")
    if a.kv_gib is not None and a.cache_len is not None:
        p.error("--cache-len and --kv-gib exclude each other")
    a.head_dim = a.hidden // a.heads
    pos_bytes = a.batch * a.kv_heads * a.head_dim * 2  # bf16, one position
    if a.kv_gib is not None:
        if not a.kv_gib > 0:
            p.error("--kv-gib must be positive")
        # Whole 2 MiB of each tensor, as for the default.
        granule = 2 * MIB // math.gcd(pos_bytes, 2 * MIB)
        a.cache_len = int(a.kv_gib * (1 << 30)) // (2 * a.layers * pos_bytes) // granule * granule
    elif a.cache_len is None:
        a.cache_len = 768
    # Step t >= 1 writes position P + t - 1.
    if a.prompt_len == FILL:
        a.prompt_len = max(a.cache_len - a.steps + 1, 1)
    if a.prompt_len + a.steps - 1 > a.cache_len:
        p.error("--prompt-len + --steps - 1 = %d positions, the cache has %d"
                % (a.prompt_len + a.steps - 1, a.cache_len))
    if a.save_kv_step is None:
        a.save_kv_step = a.steps - 1
    if not 0 <= a.save_kv_step < a.steps:
        p.error("--save-kv-step must be a step, 0 to %d" % (a.steps - 1))
    a.kv_bytes = pos_bytes * a.cache_len
    return a


def resume_step(path):
    """R from the manifest, strictly: one "resume_step", an integer >= 0."""
    def no_duplicates(pairs):
        keys = [k for k, _ in pairs]
        if len(set(keys)) != len(keys):
            raise ValueError("duplicate key")
        return dict(pairs)

    want = 'want a JSON object with one "resume_step": N, N >= 0'
    try:
        with open(path, encoding="utf-8") as f:
            obj = json.load(f, object_pairs_hook=no_duplicates)
    except OSError as e:
        die(2, "MOEFT_RESTORE_MANIFEST=%s: %s" % (path, e.strerror))
    except ValueError as e:
        die(2, "MOEFT_RESTORE_MANIFEST=%s: %s (%s)" % (path, want, e))
    r = obj.get("resume_step") if type(obj) is dict else None
    if type(r) is not int or r < 0:
        die(2, "MOEFT_RESTORE_MANIFEST=%s: %s" % (path, want))
    return r


class Journal:
    """The journal's descriptor; resuming, its first `keep` bytes stay."""

    def __init__(self, path, keep):
        self.path = path
        flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | (0 if keep else os.O_TRUNC)
        try:
            self.fd = os.open(path, flags, 0o666)
            if keep:
                os.ftruncate(self.fd, keep)
        except OSError as e:
            die(1, "%s: %s" % (path, e.strerror))

    def step(self, t, tokens):
        line = formats.journal_line(t, tokens).encode()
        try:
            if os.write(self.fd, line) != len(line):
                die(1, "%s: short write" % self.path)
        except OSError as e:
            die(1, "%s: %s" % (self.path, e.strerror))


def build_model(a, torch):
    """The model on the CPU, in bf16, its weights not yet drawn (init_weights
    does that where it runs): built there so that no device memory is
    allocated and freed before the cache (a freed block could hold it)."""
    try:
        from transformers import AutoModelForCausalLM, Qwen3MoeConfig, Qwen3MoeForCausalLM
        from transformers.initialization import no_init_weights
    except ImportError as e:
        die(1, "transformers 5 with Qwen3-MoE is needed: %s" % e)
    config = Qwen3MoeConfig(
        vocab_size=a.vocab, hidden_size=a.hidden, num_hidden_layers=a.layers,
        num_attention_heads=a.heads, num_key_value_heads=a.kv_heads,
        num_experts=a.experts, num_experts_per_tok=a.topk,
        moe_intermediate_size=a.moe_intermediate, norm_topk_prob=True,
        max_position_embeddings=a.cache_len, decoder_sparse_step=1, mlp_only_layers=[])
    with no_init_weights():
        model = AutoModelForCausalLM.from_config(
            config, dtype=torch.bfloat16, attn_implementation="sdpa",
            experts_implementation="grouped_mm")
    if not isinstance(model, Qwen3MoeForCausalLM) or not hasattr(model, "model"):
        die(1, "from_config gave a %s, not a Qwen3MoeForCausalLM with .model"
            % type(model).__name__)
    if model.config._experts_implementation != "grouped_mm":
        die(1, "the experts run %r, not grouped_mm, which graph capture needs"
            % model.config._experts_implementation)
    if any(p.dtype != torch.bfloat16 for p in model.parameters()):
        die(1, "from_config(dtype=bfloat16) left parameters in another dtype")
    routers = [m for m in model.modules() if type(m).__name__ == "Qwen3MoeTopKRouter"]
    if len(routers) != a.layers:
        die(1, "the model has %d Qwen3MoeTopKRouter modules, want one a layer (%d)"
            % (len(routers), a.layers))
    return model.eval(), routers


def build_cache(a, model, torch, device):
    """StaticCache, every layer's K and V allocated now (zeros)."""
    from transformers import StaticCache
    cache = StaticCache(config=model.config, max_cache_len=a.cache_len)
    cache.early_initialization(a.batch, a.kv_heads, a.head_dim, torch.bfloat16, device)
    if len(cache.layers) != a.layers:
        die(1, "StaticCache has %d layers, the model %d" % (len(cache.layers), a.layers))
    shape = (a.batch, a.kv_heads, a.cache_len, a.head_dim)
    for i, layer in enumerate(cache.layers):
        for t in (getattr(layer, "keys", None), getattr(layer, "values", None)):
            if t is None or tuple(t.shape) != shape or not t.is_contiguous():
                die(1, "StaticCache layer %d: want contiguous keys and values of shape %s"
                    % (i, shape))
        # The write position, a device tensor since transformers 5 (resume sets it).
        if not torch.is_tensor(getattr(layer, "cumulative_length", None)):
            die(1, "StaticCache layer %d has no cumulative_length tensor: "
                "this transformers is not the 5.x this program was written for" % i)
    return cache


def kv_tensors(cache):
    return [(i, kind, t) for i, layer in enumerate(cache.layers)
            for kind, t in (("k", layer.keys), ("v", layer.values))]


def kv_line(a, torch, cache, device, at):
    """Whether each cache tensor is a device allocation of its own, and how
    many other allocations have that size (an engine's KV pools are found
    by their size)."""
    tensors = [t for _, _, t in kv_tensors(cache)]
    own = other = 0
    if device.type == "cuda":
        segments = {s["address"]: s["total_size"] for s in torch.cuda.memory_snapshot()}
        own = sum(1 for t in tensors if segments.get(t.data_ptr()) == a.kv_bytes)
        other = sum(1 for size in segments.values() if size == a.kv_bytes) - own
    return "kv at=%s tensor-bytes=%d tensors=%d own-allocations=%d other-allocations=%d" % (
        at, a.kv_bytes, len(tensors), own, other)


def kv_save(torch, path, cache, step, filled):
    tensors = [("layer%d.%s" % (i, kind), tuple(t.shape), "bfloat16", 2,
                t.view(torch.uint8).cpu().numpy())
               for i, kind, t in kv_tensors(cache)]
    try:
        formats.kv_write(path, step, filled, tensors)
    except OSError as e:
        die(1, "%s: %s" % (path, e.strerror))


class Decoder:
    """The forward passes, eager or replayed, and what each step emits."""

    def __init__(self, a, torch, model, routers, cache, device):
        self.a, self.torch, self.model, self.cache, self.device = a, torch, model, cache, device
        self.graph = None
        self.routed, self.weights = [], []
        for r in routers:
            r.register_forward_hook(self.keep_ids)

    def keep_ids(self, module, inputs, output):
        """A router's (logits, scores, ids): a copy of the ids, which the
        caching allocator would hand the next layer once the block is done;
        with --truth, the top-k values of its softmax too."""
        self.routed.append(output[2].clone())
        if self.a.truth:
            probs = self.torch.nn.functional.softmax(output[0], dtype=self.torch.float, dim=-1)
            self.weights.append(self.torch.topk(probs, self.a.topk, dim=-1))

    def forward(self, ids, pos):
        self.routed, self.weights = [], []
        out = self.model.model(input_ids=ids, position_ids=pos, past_key_values=self.cache,
                               use_cache=True)
        logits = self.model.lm_head(out.last_hidden_state[:, -1, :])
        if len(self.routed) != self.a.layers:
            die(1, "the routers ran %d times in a pass, want %d" % (len(self.routed), self.a.layers))
        return logits.argmax(dim=-1), (self.routed, self.weights)

    def prefill(self, prompts):
        pos = self.torch.arange(self.a.prompt_len, device=self.device).unsqueeze(0)
        return self.forward(prompts.to(self.device), pos)

    def capture(self, stream):
        """The decode pass as a graph on static inputs.  cuBLAS makes its
        handle and workspace for a stream on first use, which must not
        happen inside a capture: a fresh run's prefill has done it, a
        resumed run (no prefill) does it with a product of its own."""
        torch = self.torch
        warm = torch.ones(64, 64, dtype=torch.bfloat16, device=self.device)
        (warm @ warm).sum().item()
        self.ids = torch.zeros(self.a.batch, 1, dtype=torch.long, device=self.device)
        self.pos = torch.zeros(1, 1, dtype=torch.long, device=self.device)
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph, stream=stream):
            self.out = self.forward(self.ids, self.pos)

    def decode(self, t, tokens):
        """Step t >= 1 on the previous step's tokens (a device tensor [batch])."""
        if self.graph is None:
            pos = self.torch.full((1, 1), self.a.prompt_len + t - 1, device=self.device)
            return self.forward(tokens.view(-1, 1), pos)
        self.ids.copy_(tokens.view(-1, 1))
        self.pos.fill_(self.a.prompt_len + t - 1)
        self.graph.replay()
        return self.out

    def truth_step(self, t, routed):
        """The truth's line of step t: ids and the weights' float32 bits."""
        ids, topks = routed
        for layer, (i, k) in enumerate(zip(ids, topks)):
            if not self.torch.equal(i, k.indices):
                die(1, "step %d layer %d: the router's softmax top-k done again picks other "
                    "experts than the router did" % (t, layer))
        bits = [(k.values.contiguous().view(self.torch.int32).to(self.torch.int64) &
                 0xFFFFFFFF).tolist() for k in topks]
        return formats.truth_step(t, [i.tolist() for i in ids], bits)


def main(argv):
    a = parse_args(argv)
    manifest = os.environ.get("MOEFT_RESTORE_MANIFEST")
    resume, done, keep = 0, [], 0
    if manifest:
        if not a.journal:
            die(2, "MOEFT_RESTORE_MANIFEST is set: resuming needs --journal")
        resume = min(resume_step(manifest), a.steps)
        try:
            done, keep = formats.journal_read(a.journal, resume, a.batch, a.vocab)
        except formats.FormatError as e:
            die(2, str(e))
        print("moe_generate: resume at step %d" % resume, file=sys.stderr)
    elif a.dump_kv_at_resume:
        die(2, "--dump-kv-at-resume: the run is not resumed (MOEFT_RESTORE_MANIFEST is unset)")

    import torch
    device = torch.device(a.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        die(1, "no CUDA device")
    torch.backends.cuda.enable_cudnn_sdp(False)
    model, routers = build_model(a, torch)
    prompts = torch.randint(0, a.vocab, (a.batch, a.prompt_len),
                            generator=torch.Generator().manual_seed(a.seed + 1))
    stream = torch.cuda.Stream(device) if device.type == "cuda" else None
    with torch.no_grad(), (torch.cuda.stream(stream) if stream else contextlib.nullcontext()):
        model.to(device)
        torch.manual_seed(a.seed)
        model.init_weights()
        cache = build_cache(a, model, torch, device)
        print(kv_line(a, torch, cache, device, "start"), flush=True)
        dec = Decoder(a, torch, model, routers, cache, device)
        journal = Journal(a.journal, keep) if a.journal else None
        truth = None
        if a.truth:
            try:
                truth = open(a.truth, "w", encoding="utf-8")
            except OSError as e:
                die(1, "%s: %s" % (a.truth, e.strerror))
            truth.write(formats.truth_header(a.layers, a.experts, a.topk, weights=True))
        if 0 < resume < a.steps:
            for layer in cache.layers:
                layer.cumulative_length.fill_(a.prompt_len + resume - 1)
            tokens = torch.tensor(done[-1], device=device)
            if a.mode == "graph":
                dec.capture(stream)
        if a.dump_kv_at_resume:
            # The cache right before step R, after everything queued so far
            # (its initialisation and whatever the restorer queued behind it).
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            kv_save(torch, a.dump_kv_at_resume, cache, resume - 1,
                    a.prompt_len + resume - 1 if resume else 0)
        t_ready = time.time()
        t_first, decode_t0, decode_steps = 0.0, None, 0
        prefill_s = 0.0
        for t in range(resume, a.steps):
            t0 = time.time()
            tokens, routed = dec.prefill(prompts) if t == 0 else dec.decode(t, tokens)
            row = tokens.tolist()  # waits for the step
            now = time.time()
            if t == 0:
                prefill_s = now - t0
            if not t_first:
                t_first = now
            if t >= 1:
                # Throughput from the end of the first decode step on.
                if decode_t0 is None:
                    decode_t0 = now
                else:
                    decode_steps += 1
            done.append(row)
            if journal:
                journal.step(t, row)
            if truth:
                truth.write(dec.truth_step(t, routed))
            if a.save_kv and t == a.save_kv_step:
                kv_save(torch, a.save_kv, cache, t, a.prompt_len + t)
            if t == 0 and a.mode == "graph":
                dec.capture(stream)
        decode_s = time.time() - decode_t0 if decode_t0 is not None else 0.0
        end_line = kv_line(a, torch, cache, device, "end")
    if truth:
        truth.close()
    print(end_line)
    print("result mode=%s layers=%d experts=%d topk=%d hidden=%d batch=%d prompt-len=%d "
          "cache-len=%d steps=%d tokens=%d token-hash=%s" % (
              a.mode, a.layers, a.experts, a.topk, a.hidden, a.batch, a.prompt_len,
              a.cache_len, a.steps, sum(len(r) for r in done), formats.token_hash(done)))
    print("times start=%.6f ready=%.6f first=%.6f resumed-at=%d prefill-s=%.6f "
          "decode-steps=%d decode-s=%.6f tok-s=%.1f" % (
              T_START, t_ready, t_first, resume, prefill_s, decode_steps, decode_s,
              a.batch * decode_steps / decode_s if decode_steps else 0.0), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
