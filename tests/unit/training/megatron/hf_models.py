"""Small random HF models of each family the megatron mapping knows, built locally (no hub)."""

from __future__ import annotations

from pathlib import Path

import torch

VOCAB = 1000  # not a multiple of 128: exercises megatron's vocabulary padding

SHAPES = {
    # qkv bias, untied embeddings
    "qwen2": dict(
        vocab_size=VOCAB,
        hidden_size=64,
        intermediate_size=96,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
        tie_word_embeddings=False,
        rope_theta=50000.0,
        rms_norm_eps=1e-6,
    ),
    # qk-norm, head_dim 24 != hidden 64 / heads 4, tied embeddings
    "qwen3": dict(
        vocab_size=VOCAB,
        hidden_size=64,
        intermediate_size=96,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=24,
        max_position_embeddings=256,
        tie_word_embeddings=True,
        rope_theta=1000000.0,
        rms_norm_eps=1e-6,
    ),
    # untied Llama with 4 layers: enough to split over pipeline stages
    "llama": dict(
        vocab_size=VOCAB,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
        tie_word_embeddings=False,
    ),
}


def hf_config(family: str, **overrides):
    from transformers import LlamaConfig, Qwen2Config, Qwen3Config

    classes = {"llama": LlamaConfig, "qwen2": Qwen2Config, "qwen3": Qwen3Config}
    architecture = {"llama": "LlamaForCausalLM", "qwen2": "Qwen2ForCausalLM", "qwen3": "Qwen3ForCausalLM"}[family]
    return classes[family](**(SHAPES[family] | overrides), architectures=[architecture])


def random_hf_model(family: str, seed: int = 0, **overrides):
    """Every weight random (biases and norms too: zeros and ones would hide a wrong layout)."""
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(hf_config(family, **overrides), dtype=torch.float32)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.endswith("norm.weight"):
                param.copy_(1 + 0.1 * torch.randn_like(param))
            else:
                param.copy_(0.05 * torch.randn_like(param))
    return model.eval()


def save_random_hf_model(family: str, out_dir: Path, seed: int = 0, **overrides) -> Path:
    random_hf_model(family, seed, **overrides).save_pretrained(out_dir)
    return out_dir
