"""Make the tiny random Qwen3-MoE model the vLLM tests serve, into a directory.

    python make_tiny_moe.py OUT [--force]

4 layers, 8 experts, top-2, vocabulary 1000 (a word-level tokenizer trained
here on random "w<n>" words: nothing is downloaded; a chat template that
joins the messages' contents with spaces), float32 weights, all
from fixed seeds (python/VLLM.md, section 3, but with initializer_range 0.2).  OUT holds config.json,
generation_config.json, model.safetensors, tokenizer.json,
tokenizer_config.json and a stamp: the hash of this script and the versions
of torch, transformers and tokenizers.  An OUT whose stamp matches is reused
as it is (prints "reused"); otherwise it is made anew beside OUT and then
renamed into place, so OUT is never half made.  Runs in about 10 s.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import random
import shutil
import sys
from importlib.metadata import version
from pathlib import Path

STAMP = "moeft-tiny-moe.stamp"
SEED = 0
VOCAB = 1000
SPECIALS = ["<unk>", "<s>", "</s>", "<pad>"]
# A chat is its messages' contents, one after another: the tests' chats
# through vLLM's /v1/chat/completions need a template, and no more.
CHAT_TEMPLATE = ("{% for m in messages %}{{ m['content'] }}"
                 "{% if not loop.last %} {% endif %}{% endfor %}")


def stamp() -> str:
    """What the model is made by: this script and the libraries' versions."""
    digest = hashlib.sha256(Path(__file__).read_bytes()).hexdigest()
    libs = "".join(f"{n} {version(n)}\n" for n in ("torch", "transformers", "tokenizers"))
    return f"script {digest}\n{libs}"


def make(out: Path) -> int:
    """Write the tokenizer and the model into out; returns the vocabulary size."""
    import torch
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast, Qwen3MoeConfig, Qwen3MoeForCausalLM

    rng = random.Random(SEED)
    torch.manual_seed(SEED)

    words = [f"w{i}" for i in range(1200)]
    lines = [" ".join(rng.choice(words) for _ in range(20)) for _ in range(5000)]
    tok = Tokenizer(models.WordLevel(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.train_from_iterator(
        lines, trainers.WordLevelTrainer(vocab_size=VOCAB, special_tokens=SPECIALS)
    )
    fast = PreTrainedTokenizerFast(  # type: ignore[no-untyped-call]
        tokenizer_object=tok, unk_token="<unk>", bos_token="<s>", eos_token="</s>",
        pad_token="<pad>",
    )
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(out)

    vocab = tok.get_vocab_size()
    cfg = Qwen3MoeConfig(  # type: ignore[call-arg]
        vocab_size=vocab, hidden_size=128, intermediate_size=256, moe_intermediate_size=64,
        num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2, head_dim=32,
        num_experts=8, num_experts_per_tok=2, decoder_sparse_step=1, mlp_only_layers=[],
        norm_topk_prob=True, max_position_embeddings=2048, tie_word_embeddings=False,
        bos_token_id=fast.bos_token_id, eos_token_id=fast.eos_token_id,
        pad_token_id=fast.pad_token_id, dtype="float32",
        # Ten times the default spread: greedy decoding then wanders over
        # about 200 distinct tokens in 300 instead of repeating 2 to 10, so
        # the tokens after a restore say whether its KV was right.
        initializer_range=0.2,
    )
    model = Qwen3MoeForCausalLM(cfg).to(torch.float32)  # type: ignore[no-untyped-call,arg-type]
    model.save_pretrained(out)
    return vocab


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out", type=Path, help="the model directory")
    ap.add_argument("--force", action="store_true", help="remake it even if its stamp matches")
    args = ap.parse_args(argv)
    out: Path = args.out.absolute()

    want = stamp()
    have = out / STAMP
    if not args.force and have.is_file() and have.read_text() == want:
        print(f"make_tiny_moe: reused {out}")
        return 0

    tmp = out.with_name(f".{out.name}.tmp{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:
        vocab = make(tmp)
        (tmp / STAMP).write_text(want)
        shutil.rmtree(out, ignore_errors=True)
        tmp.rename(out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"make_tiny_moe: made {out} (vocabulary {vocab})")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
