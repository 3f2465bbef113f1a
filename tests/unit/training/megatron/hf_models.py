"""Small random HF models of each family the megatron mapping knows, built locally (no hub)."""

from __future__ import annotations

from pathlib import Path

import torch

VOCAB = 1000  # not a multiple of 128: exercises megatron's vocabulary padding

BASE = dict(
    vocab_size=VOCAB,
    hidden_size=64,
    intermediate_size=96,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=256,
    rms_norm_eps=1e-6,
)
EXPERTS = dict(moe_intermediate_size=32, num_experts=4, num_experts_per_tok=2, router_aux_loss_coef=0.01)
SHAPES = {
    # qkv bias, untied embeddings
    "qwen2": BASE | dict(tie_word_embeddings=False, rope_theta=50000.0),
    # qk-norm, head_dim 24 != hidden 64 / heads 4, tied embeddings
    "qwen3": BASE | dict(head_dim=24, tie_word_embeddings=True, rope_theta=1000000.0),
    # 4 experts, top-2, renormalized; qk-norm; the first layer dense (mlp_only_layers), tied
    "qwen3_moe": BASE
    | EXPERTS
    | dict(norm_topk_prob=True, mlp_only_layers=[0], head_dim=16, tie_word_embeddings=True, rope_theta=1000000.0),
    # 4 experts, top-2, not renormalized; a shared expert with its sigmoid gate; qkv bias, untied
    "qwen2_moe": BASE
    | EXPERTS
    | dict(shared_expert_intermediate_size=48, norm_topk_prob=False, tie_word_embeddings=False, rope_theta=50000.0),
    # untied Llama with 4 layers: enough to split over pipeline stages
    "llama": BASE | dict(intermediate_size=128, num_hidden_layers=4, tie_word_embeddings=False),
}


ARCHITECTURES = {
    "llama": "LlamaForCausalLM",
    "qwen2": "Qwen2ForCausalLM",
    "qwen3": "Qwen3ForCausalLM",
    "qwen3_moe": "Qwen3MoeForCausalLM",
    "qwen2_moe": "Qwen2MoeForCausalLM",
}


def hf_config(family: str, **overrides):
    import transformers

    config_class = getattr(transformers, ARCHITECTURES[family]).config_class
    return config_class(**(SHAPES[family] | overrides), architectures=[ARCHITECTURES[family]])


def random_hf_model(family: str, seed: int = 0, **overrides):
    """Every weight random (biases and norms too: zeros and ones would hide a wrong layout; routers
    too, at a scale that makes routing choose: each token's top-k differ)."""
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(hf_config(family, **overrides), dtype=torch.float32)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.endswith("norm.weight"):
                param.copy_(1 + 0.1 * torch.randn_like(param))
            elif name.endswith("mlp.gate.weight"):
                param.copy_(0.5 * torch.randn_like(param))
            else:
                param.copy_(0.05 * torch.randn_like(param))
    return model.eval()


def save_random_hf_model(family: str, out_dir: Path, seed: int = 0, **overrides) -> Path:
    random_hf_model(family, seed, **overrides).save_pretrained(out_dir)
    return out_dir


def stored_state(hf_dir: Path) -> dict[str, torch.Tensor]:
    """The tensors as the files name them: an MoE's experts one by one (transformers 5 fuses
    them in memory, and writes them back per expert)."""
    from loongsage.models.safetensors_io import SafetensorsReader

    with SafetensorsReader(hf_dir) as reader:
        return {name: reader.tensor(name) for name in reader.names}
