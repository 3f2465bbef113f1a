"""`tiny`: a random-init small Llama with the default model's tokenizer, for fast tests."""

from __future__ import annotations

from pathlib import Path

from loongsage.models.cache import building, cache_root, is_complete

TINY_SEED = 1234
TINY_SHAPE = dict(
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=2048,
    tie_word_embeddings=True,
)


def tiny_dir() -> Path:
    model_dir = cache_root() / "models" / "tiny"
    if not is_complete(model_dir):
        with building(model_dir) as scratch:
            _build(scratch)
    return model_dir


def _build(out_dir: Path) -> None:
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    from loongsage.models.smollm2 import smollm2_dir

    tokenizer = AutoTokenizer.from_pretrained(smollm2_dir())
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        **TINY_SHAPE,
    )
    torch.manual_seed(TINY_SEED)
    model = LlamaForCausalLM(config)
    model.save_pretrained(out_dir, safe_serialization=True)
    tokenizer.save_pretrained(out_dir)
