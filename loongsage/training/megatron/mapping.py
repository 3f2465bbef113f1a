"""An HF causal-LM config -> what megatron-core needs to build the same model.

One row per family in `FAMILIES`; everything the families share is mapped once below, the
mixture-of-experts fields too (`_experts`). A setting this mapping does not carry over (a bias
megatron would put elsewhere, a sliding window, experts outside the MoE families, a RoPE variant
megatron cannot compute) is refused by the name of the HF field, never dropped: a model that
silently differs from its checkpoint trains the wrong thing.

Mixtures of experts: Qwen3-MoE and Qwen2-MoE (a softmax router over every expert, top-k, the
top-k weights renormalized or not, layers that stay dense, Qwen2-MoE's shared expert with its
sigmoid gate). DeepSeek-V3's multi-latent attention and its biased sigmoid router (and
Mixtral's experts) stay refused in this mapping: their HF fields (`q_lora_rank`,
`kv_lora_rank`, `n_routed_experts`, `num_local_experts` outside the Qwen MoE families) are
named in the refusal.

The spec holds no parallel sizes and no dtype: the builder (model.py) adds those for its rank.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, replace
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
    experts: bool = False  # mixture-of-experts layers (Qwen-MoE fields: num_experts, ...)
    shared_expert: bool = False  # one always-on expert beside the routed ones, its output gated by sigmoid(x . w) (Qwen2-MoE)


FAMILIES: tuple[Family, ...] = (
    Family("llama", "LlamaForCausalLM", "llama", qkv_bias=False, qk_norm=False, must_be_false=("attention_bias", "mlp_bias")),
    Family("qwen2", "Qwen2ForCausalLM", "qwen2", qkv_bias=True, qk_norm=False),
    Family("qwen3", "Qwen3ForCausalLM", "qwen3", qkv_bias=False, qk_norm=True, must_be_false=("attention_bias",)),
    Family(
        "qwen3_moe",
        "Qwen3MoeForCausalLM",
        "qwen3_moe",
        qkv_bias=False,
        qk_norm=True,
        must_be_false=("attention_bias",),
        experts=True,
    ),
    Family("qwen2_moe", "Qwen2MoeForCausalLM", "qwen2_moe", qkv_bias=True, qk_norm=False, experts=True, shared_expert=True),
)

# HF fields that switch on mixture-of-experts layers (any of them > 0 means experts). Qwen-MoE
# configs say `num_experts`; transformers 5 writes the same count as `num_local_experts` (its
# attribute map's alias), which is also Mixtral's name.
EXPERT_FIELDS = ("num_experts", "num_local_experts", "n_routed_experts")
QWEN_EXPERT_COUNT_FIELDS = ("num_experts", "num_local_experts")
# What the MoE families' mapping does not carry over, refused by name when set (truthy): DeepSeek's
# multi-latent attention and routing (groups, biased sigmoid scores, a scaling factor), Mixtral's
# and others' router jitter, a router z-loss, an expert capacity.
UNMAPPED_EXPERT_FIELDS = (
    "n_routed_experts",
    "q_lora_rank",
    "kv_lora_rank",
    "n_group",
    "topk_group",
    "routed_scaling_factor",
    "n_shared_experts",
    "scoring_func",
    "topk_method",
    "router_jitter_noise",
    "router_z_loss_coef",
    "moe_capacity_factor",
)
# The router computes in fp32 whatever the model's dtype: HF takes the softmax of the router's
# logits in fp32 too (its logits themselves in the model's dtype; in fp32 they are the same).
ROUTER_DTYPE = "fp32"

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

    @property
    def num_experts(self) -> int:
        """Routed experts per MoE layer; 0 for a dense model."""
        return self.transformer.get("num_moe_experts") or 0

    @property
    def is_moe(self) -> bool:
        return self.num_experts > 0

    @property
    def moe_layers(self) -> tuple[int, ...]:
        """The (global, 0-based) layers with experts; the others keep a dense MLP."""
        if not self.is_moe:
            return ()
        return tuple(layer for layer, sparse in enumerate(self.transformer["moe_layer_freq"]) if sparse)

    @property
    def moe_ffn_hidden_size(self) -> int:
        return self.transformer["moe_ffn_hidden_size"]

    @property
    def router_topk(self) -> int:
        return self.transformer["moe_router_topk"]

    @property
    def shared_expert_size(self) -> int:
        """The shared expert's intermediate size; 0 without one."""
        return self.transformer.get("moe_shared_expert_intermediate_size") or 0


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
        **(_experts(config, family) if family.experts else {}),
    )
    gpt = dict(
        vocab_size=_required(config, "vocab_size"),
        max_sequence_length=_required(config, "max_position_embeddings"),
        position_embedding_type="rope",
        share_embeddings_and_output_weights=bool(config.get("tie_word_embeddings", False)),
        **_rope(config),
    )
    return MegatronModelSpec(family=family.name, transformer=transformer, gpt=gpt, hf_config=config)


def with_aux_loss_coeff(spec: MegatronModelSpec, coeff: float | None) -> MegatronModelSpec:
    """`spec` with the routers' load-balancing coefficient set (trainer.moe.aux_loss_coeff; None
    keeps the checkpoint's router_aux_loss_coef). A model with experts (router_settings)."""
    if coeff is None:
        return spec
    return replace(spec, transformer=dict(spec.transformer) | dict(moe_aux_loss_coeff=float(coeff)))


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
    if family.experts:
        for field in UNMAPPED_EXPERT_FIELDS:
            if config.get(field):
                raise ValueError(f"{field}={config[field]!r} is not mapped for {family.architecture} (megatron backend)")
    else:
        for field in EXPERT_FIELDS:
            if config.get(field):
                raise ValueError(
                    f"{field}={config[field]!r}: mixture-of-experts layers are mapped only for "
                    f"Qwen3MoeForCausalLM and Qwen2MoeForCausalLM (megatron backend)"
                )
    if "qkv_bias" in config and bool(config["qkv_bias"]) != family.qkv_bias:
        raise ValueError(f"qkv_bias={config['qkv_bias']!r} is not mapped for {family.architecture} (megatron backend)")
    if config.get("hidden_act", "silu") != "silu":
        raise ValueError(f"hidden_act={config['hidden_act']!r}: only silu (SwiGLU) is mapped (megatron backend)")
    if config.get("partial_rotary_factor", 1.0) != 1.0:
        raise ValueError(f"partial_rotary_factor={config['partial_rotary_factor']!r}: only full RoPE is mapped")


def _experts(config: dict, family: Family) -> dict:
    """HF's MoE fields -> TransformerConfig's.

    HF routes (Qwen2MoeTopKRouter, Qwen3-MoE alike): softmax of the router's logits over every
    expert in fp32, the top-k of it, divided by their sum only when `norm_topk_prob`. megatron's
    TopKRouter computes the same with `moe_router_pre_softmax`: True, softmax over every expert
    then top-k, not renormalized (norm_topk_prob false); False, top-k of the logits then a softmax
    over those k, which is the renormalized top-k of the full softmax (norm_topk_prob true; the
    top-k of the logits and of their softmax are the same experts). Tokens are never dropped
    (no capacity), as in HF.
    """
    experts = _expert_count(config)
    topk = _required(config, "num_experts_per_tok")
    if not 1 <= topk <= experts:
        raise ValueError(f"num_experts_per_tok={topk} must be in [1, num_experts={experts}]")
    if topk == 1 and config.get("norm_topk_prob"):
        # HF weighs the one expert by 1; megatron refuses a softmax over one logit (no gradient).
        raise ValueError("norm_topk_prob=True with num_experts_per_tok=1 is not mapped (megatron backend)")
    kwargs: dict[str, Any] = dict(
        num_moe_experts=experts,
        moe_router_topk=topk,
        moe_ffn_hidden_size=_required(config, "moe_intermediate_size"),
        moe_layer_freq=_moe_layer_pattern(config),
        moe_router_score_function="softmax",
        moe_router_pre_softmax=not bool(config.get("norm_topk_prob", False)),
        moe_router_load_balancing_type="aux_loss",
        moe_aux_loss_coeff=float(config.get("router_aux_loss_coef") or 0.0),
        moe_router_dtype=ROUTER_DTYPE,
    )
    if family.shared_expert:
        shared = config.get("shared_expert_intermediate_size")
        if shared:  # HF builds the shared expert and its gate whatever the size; 0 would be no expert
            kwargs |= dict(moe_shared_expert_intermediate_size=shared, moe_shared_expert_gate=True)
        else:
            raise ValueError(f"shared_expert_intermediate_size={shared!r}: {family.architecture} needs its shared expert's size")
    return kwargs


def _expert_count(config: dict) -> int:
    counts = {field: config[field] for field in QWEN_EXPERT_COUNT_FIELDS if config.get(field) is not None}
    if not counts:
        raise ValueError("num_experts is missing from the model config")
    if len(set(counts.values())) > 1:
        raise ValueError(f"{' and '.join(f'{k}={v!r}' for k, v in counts.items())} disagree: the number of experts is ambiguous")
    experts = next(iter(counts.values()))
    if experts < 1:
        raise ValueError(f"{next(iter(counts))}={experts!r}: a mixture-of-experts model needs experts")
    return experts


def _moe_layer_pattern(config: dict) -> list[int]:
    """1 for each layer with experts, 0 for a dense one, as HF's decoder layers decide: experts
    unless the layer is in `mlp_only_layers`, on every `decoder_sparse_step`-th layer (1-based)."""
    layers = _required(config, "num_hidden_layers")
    step = config.get("decoder_sparse_step") or 1
    dense = set(config.get("mlp_only_layers") or [])
    unknown = sorted(layer for layer in dense if not 0 <= layer < layers)
    if unknown:
        raise ValueError(f"mlp_only_layers={sorted(dense)}: layers {unknown} do not exist (num_hidden_layers={layers})")
    pattern = [int(layer not in dense and (layer + 1) % step == 0) for layer in range(layers)]
    if not any(pattern):
        raise ValueError(
            f"decoder_sparse_step={step}, mlp_only_layers={sorted(dense)}: no layer has experts; "
            "map it as its dense family instead"
        )
    return pattern


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
