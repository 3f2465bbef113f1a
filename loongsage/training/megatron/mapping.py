"""An HF causal-LM config -> what megatron-core needs to build the same model.

One row per family in `FAMILIES`; everything the families share is mapped once below. A
setting this mapping does not carry over (a bias megatron would put elsewhere, a sliding
window, experts, a RoPE variant megatron cannot compute) is refused by the name of the HF
field, never dropped: a model that silently differs from its checkpoint trains the wrong thing.

The spec holds no parallel sizes and no dtype: the builder (model.py) adds those for its rank.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch.nn.functional as F

from loongsage.training.megatron import cpu_shims


@dataclass(frozen=True)
class Family:
    name: str
    architecture: str  # HF `architectures[0]`
    model_type: str  # HF `model_type`, used when a config has no `architectures`
    qkv_bias: bool  # biases on q, k and v only (Qwen2); megatron's add_qkv_bias
    qk_norm: bool  # RMSNorm over each head of q and k before RoPE (Qwen3); megatron's qk_layernorm
    # Boolean HF fields that must be false: megatron has no matching switch for them alone
    # (add_bias_linear would also put biases on the MLP and the output projection).
    must_be_false: tuple[str, ...] = ()


FAMILIES: tuple[Family, ...] = (
    Family("llama", "LlamaForCausalLM", "llama", qkv_bias=False, qk_norm=False, must_be_false=("attention_bias", "mlp_bias")),
    Family("qwen2", "Qwen2ForCausalLM", "qwen2", qkv_bias=True, qk_norm=False),
    Family("qwen3", "Qwen3ForCausalLM", "qwen3", qkv_bias=False, qk_norm=True, must_be_false=("attention_bias",)),
)

# HF fields that switch on mixture-of-experts layers (any of them > 0 means experts).
EXPERT_FIELDS = ("num_experts", "num_local_experts", "n_routed_experts")

# megatron's llama3 RoPE scaling (RotaryEmbedding._apply_scaling) takes the factor only; the
# other three llama3 parameters are fixed at Llama 3.1's values.
MEGATRON_LLAMA3_FIXED = dict(low_freq_factor=1.0, high_freq_factor=4.0, original_max_position_embeddings=8192)


@dataclass(frozen=True)
class MegatronModelSpec:
    """A model as megatron builds it: TransformerConfig and GPTModel keyword arguments."""

    family: str
    transformer: Mapping[str, Any]  # TransformerConfig kwargs, less parallel sizes and dtype
    gpt: Mapping[str, Any]  # GPTModel kwargs, less the layer spec and pre/post_process; vocab unpadded
    hf_config: Mapping[str, Any]  # the config it was made from (config.json form), for export

    @property
    def vocab_size(self) -> int:
        return self.gpt["vocab_size"]

    @property
    def tie_word_embeddings(self) -> bool:
        return self.gpt["share_embeddings_and_output_weights"]

    @property
    def num_layers(self) -> int:
        return self.transformer["num_layers"]

    @property
    def hidden_size(self) -> int:
        return self.transformer["hidden_size"]

    @property
    def num_attention_heads(self) -> int:
        return self.transformer["num_attention_heads"]

    @property
    def num_query_groups(self) -> int:
        return self.transformer["num_query_groups"]

    @property
    def head_dim(self) -> int:
        return self.transformer["kv_channels"]

    @property
    def ffn_hidden_size(self) -> int:
        return self.transformer["ffn_hidden_size"]

    @property
    def qkv_bias(self) -> bool:
        return self.transformer["add_qkv_bias"]

    @property
    def qk_norm(self) -> bool:
        return self.transformer["qk_layernorm"]


def model_spec(hf_config) -> MegatronModelSpec:
    """`hf_config`: a transformers PretrainedConfig or the dict of a config.json."""
    config = dict(hf_config.to_dict() if hasattr(hf_config, "to_dict") else hf_config)
    family = _family(config)
    _refuse_unmapped(config, family)

    hidden = _required(config, "hidden_size")
    heads = _required(config, "num_attention_heads")
    kv_heads = config.get("num_key_value_heads") or heads
    if heads % kv_heads:
        raise ValueError(f"num_attention_heads={heads} is not a multiple of num_key_value_heads={kv_heads}")
    head_dim = config.get("head_dim") or _exact_div(hidden, heads, "hidden_size", "num_attention_heads")

    transformer = dict(
        num_layers=_required(config, "num_hidden_layers"),
        hidden_size=hidden,
        ffn_hidden_size=_required(config, "intermediate_size"),
        num_attention_heads=heads,
        num_query_groups=kv_heads,
        kv_channels=head_dim,
        normalization="RMSNorm",
        layernorm_epsilon=config.get("rms_norm_eps", 1e-6),
        gated_linear_unit=True,  # SwiGLU: linear_fc1 = [gate; up], silu(gate) * up
        activation_func=F.silu,
        add_bias_linear=False,
        add_qkv_bias=family.qkv_bias,
        qk_layernorm=family.qk_norm,
        hidden_dropout=0.0,  # HF decoders of these families have no residual dropout
        attention_dropout=float(config.get("attention_dropout") or 0.0),
        init_method_std=config.get("initializer_range", 0.02),
        # Parameters are created on the CPU and moved by the builder: the same path with and without CUDA.
        use_cpu_initialization=True,
        **cpu_shims.CPU_OFF,
    )
    gpt = dict(
        vocab_size=_required(config, "vocab_size"),
        max_sequence_length=_required(config, "max_position_embeddings"),
        position_embedding_type="rope",
        share_embeddings_and_output_weights=bool(config.get("tie_word_embeddings", False)),
        **_rope(config),
    )
    return MegatronModelSpec(family=family.name, transformer=transformer, gpt=gpt, hf_config=config)


def known_architectures() -> str:
    return ", ".join(f"{f.architecture} (model_type {f.model_type!r})" for f in FAMILIES)


def _family(config: dict) -> Family:
    architectures = config.get("architectures") or []
    if architectures:
        for family in FAMILIES:
            if architectures[0] == family.architecture:
                return family
        field = f"architectures={list(architectures)}"
    else:
        for family in FAMILIES:
            if config.get("model_type") == family.model_type:
                return family
        field = f"model_type={config.get('model_type')!r}"
    raise ValueError(f"{field} is not a model the megatron backend can map; known: {known_architectures()}")


def _refuse_unmapped(config: dict, family: Family) -> None:
    for field in family.must_be_false:
        if config.get(field):
            raise ValueError(f"{field}={config[field]!r} is not mapped for {family.architecture} (megatron backend)")
    if config.get("use_sliding_window"):
        raise ValueError("use_sliding_window=True: sliding-window attention is not mapped (megatron backend)")
    layer_types = config.get("layer_types") or []
    if any(kind != "full_attention" for kind in layer_types):
        raise ValueError(f"layer_types={sorted(set(layer_types))}: only full_attention layers are mapped (megatron backend)")
    for field in EXPERT_FIELDS:
        if config.get(field):
            raise ValueError(f"{field}={config[field]!r}: mixture-of-experts layers are not mapped (megatron backend)")
    if config.get("hidden_act", "silu") != "silu":
        raise ValueError(f"hidden_act={config['hidden_act']!r}: only silu (SwiGLU) is mapped (megatron backend)")
    if config.get("partial_rotary_factor", 1.0) != 1.0:
        raise ValueError(f"partial_rotary_factor={config['partial_rotary_factor']!r}: only full RoPE is mapped")


def _rope(config: dict) -> dict:
    """HF RoPE settings -> GPTModel's rotary kwargs.

    transformers >= 5 keeps theta and scaling together in `rope_parameters`; older config.json
    files have `rope_theta` and `rope_scaling` (whose type key was once `type`).
    """
    if config.get("rope_parameters"):
        field, rope = "rope_parameters", dict(config["rope_parameters"])
    else:
        field, rope = "rope_scaling", dict(config.get("rope_scaling") or {})
    theta = rope.get("rope_theta", config.get("rope_theta", 10000.0))
    rope_type = rope.get("rope_type", rope.get("type", "default"))
    kwargs: dict[str, Any] = dict(rotary_base=theta, rotary_percent=1.0)
    if rope_type == "default":
        return kwargs
    if rope_type == "linear":
        # HF divides the inverse frequencies by the factor; megatron divides the positions: the same angles.
        return kwargs | dict(seq_len_interpolation_factor=float(_required(rope, "factor", field)))
    if rope_type == "llama3":
        for name, fixed in MEGATRON_LLAMA3_FIXED.items():
            if rope.get(name, fixed) != fixed:
                raise ValueError(
                    f"{field}.{name}={rope[name]!r}: megatron's llama3 RoPE scaling fixes it at {fixed} (megatron backend)"
                )
        return kwargs | dict(rope_scaling=True, rope_scaling_factor=float(_required(rope, "factor", field)))
    raise ValueError(f"{field}.rope_type={rope_type!r} is not mapped (megatron backend supports default, linear, llama3)")


def _required(config: Mapping, field: str, parent: str | None = None):
    if config.get(field) is None:
        raise ValueError(f"{parent + '.' if parent else ''}{field} is missing from the model config")
    return config[field]


def _exact_div(a: int, b: int, a_name: str, b_name: str) -> int:
    if a % b:
        raise ValueError(f"{a_name}={a} is not a multiple of {b_name}={b}; the config needs head_dim")
    return a // b


def padded_vocab_size(vocab_size: int, tp: int) -> int:
    """Rows of megatron's embedding and output layer: a multiple of 128 (megatron-LM's
    make-vocab-size-divisible-by) and of tp. For tp a power of two up to 128 the padded size does
    not depend on tp, so a distributed checkpoint written at one tp loads at another."""
    multiple = math.lcm(128, tp)
    return -(-vocab_size // multiple) * multiple
