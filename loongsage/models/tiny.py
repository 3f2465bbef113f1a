"""Random-init small models with the default model's tokenizer, for fast tests.

`tiny`: a 2-layer Llama. `tiny-moe`: a 2-layer Qwen3-MoE (4 experts, top-2). `build_tiny` makes
either family, or Qwen2-MoE, with fields overridden, in any directory (tests of one setting).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from loongsage.models.cache import building, cache_root, is_complete

TINY_SEED = 1234
TINY_SHAPE: dict[str, Any] = dict(
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=2048,
    tie_word_embeddings=True,
)
# Experts small enough that a test model stays under a megabyte of weights; top-2 of 4 so that
# routing really chooses, and expert parallelism over 2 ranks holds 2 experts each.
TINY_MOE_SHAPE: dict[str, Any] = TINY_SHAPE | dict(
    head_dim=16,
    moe_intermediate_size=32,
    num_experts=4,
    num_experts_per_tok=2,
    norm_topk_prob=True,
)
SHAPES = {
    "LlamaForCausalLM": TINY_SHAPE,
    "Qwen3MoeForCausalLM": TINY_MOE_SHAPE,
    "Qwen2MoeForCausalLM": TINY_MOE_SHAPE | dict(shared_expert_intermediate_size=48, norm_topk_prob=False),
}


def tiny_dir() -> Path:
    return _cached("tiny", "LlamaForCausalLM")


def tiny_moe_dir() -> Path:
    return _cached("tiny-moe", "Qwen3MoeForCausalLM")


def _cached(name: str, architecture: str) -> Path:
    model_dir = cache_root() / "models" / name
    if not is_complete(model_dir):
        with building(model_dir) as scratch:
            build_tiny(scratch, architecture)
    return model_dir


def build_tiny(out_dir: str | Path, architecture: str, seed: int = TINY_SEED, **fields: Any) -> Path:
    """A random model of `architecture` (a key of SHAPES) with `fields` over its tiny shape,
    saved as an HF directory in `out_dir`."""
    import torch
    import transformers
    from transformers import AutoTokenizer

    from loongsage.models.smollm2 import smollm2_dir

    if architecture not in SHAPES:
        raise ValueError(f"no tiny shape for {architecture!r} (known: {', '.join(SHAPES)})")
    model_cls = getattr(transformers, architecture)
    tokenizer = AutoTokenizer.from_pretrained(smollm2_dir())
    config = model_cls.config_class(
        vocab_size=len(tokenizer),
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        **(SHAPES[architecture] | fields),
    )
    torch.manual_seed(seed)
    model = model_cls(config)
    model.save_pretrained(out_dir, safe_serialization=True)
    tokenizer.save_pretrained(out_dir)
    return Path(out_dir)
