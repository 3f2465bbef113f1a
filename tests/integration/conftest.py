"""Fixtures the integration tests of several packages share."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="module")
def llama_dir(tmp_path_factory):
    """A random Llama of ~130 MB fp32: well above the noise in a process's resident size
    (the tiny model is 13 MB). Returns (dir, bytes of its parameters)."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(
        vocab_size=8192,
        hidden_size=512,
        intermediate_size=1536,
        num_hidden_layers=8,
        num_attention_heads=8,
        num_key_value_heads=4,
        max_position_embeddings=512,
        tie_word_embeddings=False,
    )
    model = LlamaForCausalLM(cfg).float()
    path = tmp_path_factory.mktemp("llama130m")
    model.save_pretrained(path)
    storages = {p.untyped_storage().data_ptr(): p.untyped_storage().nbytes() for p in model.parameters()}
    return str(path), sum(storages.values())
