"""Sparse upcycling (Komatsuzaki et al. 2022): a dense Llama-family model becomes a Qwen2-MoE whose
experts start as copies of each layer's MLP, so at step 0 it computes what the dense model does.

Why exactly the same: every expert is the same MLP and the top-k weights are renormalized to sum
to 1 (norm_topk_prob), so sum_k w_k * MLP(x) = MLP(x) whatever the router picks (up to float
rounding). The router starts small and random, so that tokens spread over the experts and the copies
drift apart as they train, and orthogonal to the mean input of its layer: the inputs share a large
common component (measured on random tokens), and a router that reads it sends most tokens to the
same experts (SmolLM2: the rarest expert of a layer got 0.4% of the picks, 4% with centering).
Why Qwen2-MoE: Qwen3-MoE normalizes each attention head's q and k, which a Llama does not; Qwen2-MoE
attention is Llama's plus q/k/v biases (zero here). Its shared expert, which every Qwen2-MoE layer
has, starts with a zero down projection: it adds exactly nothing until it learns to.

`model=smollm2-moe` is the default model upcycled this way (built once, cached like it).
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import torch
from torch import Tensor

from loongsage.models.cache import building, cache_root, is_complete
from loongsage.models.safetensors_io import SafetensorsReader, write_safetensors

NUM_EXPERTS = 4
TOP_K = 2
# Small: the shared expert only has to exist (the family requires one) and start at zero.
SHARED_EXPERT_SIZE = 64
ROUTER_STD = 0.02
ROUTER_SEED = 0
CALIBRATION_TOKENS = 256
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja", "generation_config.json")
MLP_PROJECTIONS = ("gate_proj", "up_proj", "down_proj")


def smollm2_moe_dir() -> Path:
    from loongsage.models.smollm2 import smollm2_dir

    model_dir = cache_root() / "models" / "smollm2-moe"
    if not is_complete(model_dir):
        with building(model_dir) as scratch:
            upcycle(smollm2_dir(), scratch)
    return model_dir


def upcycle(dense_dir: str | Path, out_dir: str | Path, num_experts: int = NUM_EXPERTS, top_k: int = TOP_K) -> Path:
    dense_dir, out_dir = Path(dense_dir), Path(out_dir)
    dense = json.loads((dense_dir / "config.json").read_text())
    _check_dense(dense, dense_dir)
    config = moe_config(dense, num_experts, top_k)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "config.json").write_text(json.dumps(config, indent=2))
    for name in TOKENIZER_FILES:
        if (dense_dir / name).exists():
            shutil.copy(dense_dir / name, out_dir / name)
    routers = centered_routers(dense_dir, num_experts)
    with SafetensorsReader(dense_dir) as reader:
        write_safetensors(out_dir, upcycled_tensors(reader, config, routers))
    return out_dir


def centered_routers(dense_dir: Path, num_experts: int) -> list[Tensor]:
    """Per layer, a random router [experts, hidden] with the direction of the layer's mean MLP input
    projected out (the dense model run once on random tokens)."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(dense_dir), dtype=torch.float32).eval()
    generator = torch.Generator().manual_seed(ROUTER_SEED)
    tokens = torch.randint(0, model.config.vocab_size, (1, CALIBRATION_TOKENS), generator=generator)
    means: list[Tensor] = []
    hooks = [
        layer.mlp.register_forward_hook(lambda _m, args, _out: means.append(args[0][0].mean(0))) for layer in model.model.layers
    ]
    with torch.no_grad():
        model(tokens)
    for hook in hooks:
        hook.remove()
    routers = []
    for mean in means:
        router = torch.randn(num_experts, mean.shape[0], generator=generator) * ROUTER_STD
        direction = mean / mean.norm()
        routers.append(router - (router @ direction)[:, None] * direction[None])
    return routers


def moe_config(dense: dict, num_experts: int, top_k: int) -> dict:
    """The Qwen2-MoE config.json of the upcycled model: the dense shape, every layer sparse."""
    keep = (
        "vocab_size hidden_size intermediate_size num_hidden_layers num_attention_heads num_key_value_heads "
        "head_dim hidden_act max_position_embeddings initializer_range rms_norm_eps tie_word_embeddings "
        "rope_parameters rope_theta rope_scaling attention_dropout bos_token_id eos_token_id pad_token_id"
    ).split()
    return {name: dense[name] for name in keep if name in dense} | dict(
        architectures=["Qwen2MoeForCausalLM"],
        model_type="qwen2_moe",
        num_experts=num_experts,
        num_experts_per_tok=top_k,
        norm_topk_prob=True,
        moe_intermediate_size=dense["intermediate_size"],
        shared_expert_intermediate_size=SHARED_EXPERT_SIZE,
        decoder_sparse_step=1,
        mlp_only_layers=[],
        qkv_bias=True,
        use_sliding_window=False,
        router_aux_loss_coef=0.001,
        dtype="float32",
    )


def upcycled_tensors(reader: SafetensorsReader, config: dict, routers: list[Tensor]) -> Iterator[tuple[str, Tensor]]:
    """The MoE model's tensors in the dense model's order, each dense MLP projection written once
    per expert; the routers given, the zero biases and the shared expert made alongside."""
    generator = torch.Generator().manual_seed(ROUTER_SEED)
    hidden, experts = config["hidden_size"], config["num_experts"]
    for name in sorted(reader.names):
        tensor = reader.tensor(name)
        prefix, _, leaf = name.partition(".mlp.")
        if leaf and leaf.split(".")[0] in MLP_PROJECTIONS:
            for expert in range(experts):
                # copies: safetensors refuses to write tensors that share memory
                yield f"{prefix}.mlp.experts.{expert}.{leaf}", tensor.clone()
            if leaf.startswith("down_proj"):
                yield f"{prefix}.mlp.gate.weight", routers[int(prefix.rsplit(".", 1)[1])]
                yield from _shared_expert(prefix, hidden, generator)
            continue
        yield name, tensor
        if name.endswith(("self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight")):
            yield name.removesuffix("weight") + "bias", torch.zeros(tensor.shape[0], dtype=tensor.dtype)


def _shared_expert(layer: str, hidden: int, generator) -> Iterator[tuple[str, Tensor]]:
    shared = f"{layer}.mlp.shared_expert."
    yield shared + "gate_proj.weight", torch.randn(SHARED_EXPERT_SIZE, hidden, generator=generator) * ROUTER_STD
    yield shared + "up_proj.weight", torch.randn(SHARED_EXPERT_SIZE, hidden, generator=generator) * ROUTER_STD
    yield shared + "down_proj.weight", torch.zeros(hidden, SHARED_EXPERT_SIZE)
    yield f"{layer}.mlp.shared_expert_gate.weight", torch.zeros(1, hidden)


def _check_dense(config: dict, where: Path) -> None:
    arch = (config.get("architectures") or ["?"])[0]
    if arch != "LlamaForCausalLM" or config.get("attention_bias") or config.get("mlp_bias"):
        raise ValueError(
            f"{where}/config.json: upcycling takes a Llama without biases (architectures={[arch]}, "
            f"attention_bias={config.get('attention_bias')}, mlp_bias={config.get('mlp_bias')})"
        )
