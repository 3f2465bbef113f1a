"""HF tensors <-> megatron tensors, one parameter at a time, without any process group.

Both conversion directions (convert.py) are made of these pure pieces, so the round trip
HF -> megatron -> tensor-parallel shards -> megatron -> HF is testable in one process:

  rules(...)          which megatron parameter is made of which HF tensors, and how
  to_megatron         HF tensors -> the full (unsharded) megatron tensor
  shard / unshard     full megatron tensor <-> this tensor-parallel rank's piece
  from_megatron       full megatron tensor -> HF tensors

Megatron's layouts, as its modules read them:
- linear_qkv (column-parallel): rows grouped by query group, each group
  [its q heads..., its k head, its v head] x head_dim rows; the bias alike. A tensor-parallel rank
  holds a contiguous block of whole groups, so sharding is a plain split of the rows.
- linear_fc1 with gated_linear_unit: [gate; up]; a rank holds [its gate rows; its up rows].
- linear_proj, linear_fc2 (row-parallel): split along the input dimension.
- word_embeddings, output_layer (vocab-parallel): rows padded to the padded vocabulary, split.
- norms are replicated. With TransformerEngine's spec the pre-attention and pre-MLP norms live
  inside linear_qkv / linear_fc1 as `layer_norm_weight`; with the local spec they are modules.
  An MoE layer keeps its pre-MLP norm a module (`pre_mlp_layernorm`) under either spec.
- MoE layers (names read off the built models): `mlp.router.weight` [E, H] is HF's
  `mlp.gate.weight`, replicated. Each expert is a gated MLP whose linear_fc1 is [gate; up] and
  linear_fc2 its down projection, whole on every tensor-parallel rank (expert tensor parallelism
  1, model._expert_settings). Expert parallelism: ep rank r holds global experts
  [r * E/ep, (r + 1) * E/ep) as its local experts 0..E/ep-1, named
  `mlp.experts.local_experts.<local>.linear_fc{1,2}.weight` (SequentialMLP, the local spec) or
  `mlp.experts.linear_fc{1,2}.weight<local>` (TEGroupedMLP, TransformerEngine's grouped GEMM).
  Qwen2-MoE's shared expert is `mlp.shared_experts.linear_fc{1,2}` (tensor-parallel like a
  dense MLP) and its gate `mlp.shared_experts.gate_weight` [1, H] is HF's
  `mlp.shared_expert_gate.weight`, replicated.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from loongsage.training.megatron.mapping import MegatronModelSpec


class Fusion(enum.Enum):
    COPY = "copy"  # one HF tensor, same layout
    QKV = "qkv"  # q, k, v -> megatron's query-group order
    GATE_UP = "gate_up"  # gate, up -> [gate; up]
    VOCAB = "vocab"  # one HF tensor, rows padded to the padded vocabulary


class TpSplit(enum.Enum):
    REPLICATED = "replicated"
    ROWS = "rows"  # output dim 0, contiguous blocks (column-parallel, vocab-parallel, fused qkv)
    COLUMNS = "columns"  # input dim 1 (row-parallel)
    GATE_UP = "gate_up"  # dim 0, gate and up halves split separately


@dataclass(frozen=True)
class WeightRule:
    megatron: str  # parameter name in this rank's GPTModel (layer index local to the stage, expert local to the ep rank)
    hf: tuple[str, ...]  # the HF tensors it is made of, in fusion order
    fusion: Fusion
    split: TpSplit
    expert: int | None = None  # a routed expert's global index: held by one expert-parallel rank (`expert_owner`)


@dataclass(frozen=True)
class WeightLayout:
    """The model and how its weights are laid out on the megatron side."""

    spec: MegatronModelSpec
    tp: int
    padded_vocab: int
    norms_in_linears: bool  # TransformerEngine's spec: layer norms fused into linear_qkv / linear_fc1
    ep: int = 1  # expert-parallel size: each rank holds spec.num_experts / ep experts per MoE layer
    grouped_experts: bool = False  # TransformerEngine's TEGroupedMLP (weights `weight<i>`), else SequentialMLP

    @property
    def local_experts(self) -> int:
        return self.spec.num_experts // self.ep


def expert_owner(layout: WeightLayout, expert: int) -> int:
    """The expert-parallel rank holding global expert `expert`."""
    return expert // layout.local_experts


# HF files written by older transformers carry RoPE tables as buffers; they are not weights.
IGNORED_HF_SUFFIXES = ("rotary_emb.inv_freq",)


def layer_rules(layout: WeightLayout, layer: int, local_layer: int, ep_rank: int | None = None) -> list[WeightRule]:
    """Rules of decoder layer `layer` (global HF index), held as megatron layer `local_layer`.
    An MoE layer's routed experts: those of expert-parallel rank `ep_rank`, or with None every
    expert (each named by its local index on the rank that holds it), in HF order."""
    hf = f"model.layers.{layer}."
    mg = f"decoder.layers.{local_layer}."
    attention, mlp = mg + "self_attention.", mg + "mlp."
    moe = layer in layout.spec.moe_layers
    if moe:
        input_norm = attention + "linear_qkv.layer_norm_weight" if layout.norms_in_linears else mg + "input_layernorm.weight"
        pre_mlp_norm = mg + "pre_mlp_layernorm.weight"
    elif layout.norms_in_linears:
        input_norm, pre_mlp_norm = attention + "linear_qkv.layer_norm_weight", mlp + "linear_fc1.layer_norm_weight"
    else:
        input_norm, pre_mlp_norm = mg + "input_layernorm.weight", mg + "pre_mlp_layernorm.weight"
    qkv = tuple(f"{hf}self_attn.{p}_proj" for p in "qkv")
    rules = [
        WeightRule(input_norm, (hf + "input_layernorm.weight",), Fusion.COPY, TpSplit.REPLICATED),
        WeightRule(attention + "linear_qkv.weight", tuple(n + ".weight" for n in qkv), Fusion.QKV, TpSplit.ROWS),
    ]
    if layout.spec.qkv_bias:
        rules.append(WeightRule(attention + "linear_qkv.bias", tuple(n + ".bias" for n in qkv), Fusion.QKV, TpSplit.ROWS))
    if layout.spec.qk_norm:
        rules += [
            WeightRule(attention + "q_layernorm.weight", (hf + "self_attn.q_norm.weight",), Fusion.COPY, TpSplit.REPLICATED),
            WeightRule(attention + "k_layernorm.weight", (hf + "self_attn.k_norm.weight",), Fusion.COPY, TpSplit.REPLICATED),
        ]
    rules += [
        WeightRule(attention + "linear_proj.weight", (hf + "self_attn.o_proj.weight",), Fusion.COPY, TpSplit.COLUMNS),
        WeightRule(pre_mlp_norm, (hf + "post_attention_layernorm.weight",), Fusion.COPY, TpSplit.REPLICATED),
    ]
    if moe:
        return rules + moe_rules(layout, hf + "mlp.", mlp, ep_rank)
    return rules + dense_mlp_rules(mlp, hf + "mlp.")


def dense_mlp_rules(mg: str, hf: str) -> list[WeightRule]:
    """A gated MLP split over tensor-parallel ranks: `mg` + linear_fc1/2 from `hf` + gate/up/down_proj."""
    return [
        WeightRule(mg + "linear_fc1.weight", (hf + "gate_proj.weight", hf + "up_proj.weight"), Fusion.GATE_UP, TpSplit.GATE_UP),
        WeightRule(mg + "linear_fc2.weight", (hf + "down_proj.weight",), Fusion.COPY, TpSplit.COLUMNS),
    ]


def moe_rules(layout: WeightLayout, hf: str, mg: str, ep_rank: int | None) -> list[WeightRule]:
    """An MoE block, in HF's order: router, routed experts, shared expert and its gate."""
    rules = [WeightRule(mg + "router.weight", (hf + "gate.weight",), Fusion.COPY, TpSplit.REPLICATED)]
    local = layout.local_experts
    experts = range(layout.spec.num_experts) if ep_rank is None else range(ep_rank * local, (ep_rank + 1) * local)
    for expert in experts:
        source = f"{hf}experts.{expert}."
        if layout.grouped_experts:
            fc1, fc2 = f"{mg}experts.linear_fc1.weight{expert % local}", f"{mg}experts.linear_fc2.weight{expert % local}"
        else:
            fc1, fc2 = (f"{mg}experts.local_experts.{expert % local}.linear_fc{i}.weight" for i in (1, 2))
        rules += [
            WeightRule(fc1, (source + "gate_proj.weight", source + "up_proj.weight"), Fusion.GATE_UP, TpSplit.REPLICATED, expert),
            WeightRule(fc2, (source + "down_proj.weight",), Fusion.COPY, TpSplit.REPLICATED, expert),
        ]
    if layout.spec.shared_expert_size:
        rules += dense_mlp_rules(mg + "shared_experts.", hf + "shared_expert.")
        rules.append(
            WeightRule(mg + "shared_experts.gate_weight", (hf + "shared_expert_gate.weight",), Fusion.COPY, TpSplit.REPLICATED)
        )
    return rules


def embedding_rule() -> WeightRule:
    return WeightRule("embedding.word_embeddings.weight", ("model.embed_tokens.weight",), Fusion.VOCAB, TpSplit.ROWS)


def final_norm_rule() -> WeightRule:
    return WeightRule("decoder.final_layernorm.weight", ("model.norm.weight",), Fusion.COPY, TpSplit.REPLICATED)


def output_rule(layout: WeightLayout) -> WeightRule:
    # Tied: HF has no lm_head; megatron's last stage (when it is not also the first) keeps its
    # own copy of the embedding as output_layer.weight.
    source = "model.embed_tokens.weight" if layout.spec.tie_word_embeddings else "lm_head.weight"
    return WeightRule("output_layer.weight", (source,), Fusion.VOCAB, TpSplit.ROWS)


def stage_rules(
    layout: WeightLayout,
    layers: Iterable[int],
    layer_offset: int,
    pre_process: bool,
    post_process: bool,
    ep_rank: int | None = None,
) -> list[WeightRule]:
    """The rules of one pipeline stage holding global `layers`, in HF order: with `ep_rank` the
    routed experts that expert-parallel rank holds, without it every expert."""
    rules = [embedding_rule()] if pre_process else []
    for layer in layers:
        rules += layer_rules(layout, layer, layer - layer_offset, ep_rank)
    if post_process:
        rules.append(final_norm_rule())
        if not (pre_process and layout.spec.tie_word_embeddings):  # tied on one stage: no second tensor
            rules.append(output_rule(layout))
    return rules


def hf_names(layout: WeightLayout) -> set[str]:
    """Every HF tensor name of the whole model."""
    rules = stage_rules(layout, range(layout.spec.num_layers), 0, pre_process=True, post_process=True)
    return {name for rule in rules for name in rule.hf}


# ---- tensors ----


def to_megatron(layout: WeightLayout, rule: WeightRule, hf: Sequence[Tensor]) -> Tensor:
    """HF tensors (in `rule.hf` order) -> the full megatron tensor."""
    if rule.fusion is Fusion.COPY:
        return hf[0]
    if rule.fusion is Fusion.VOCAB:
        return _pad_rows(hf[0], layout.padded_vocab)
    if rule.fusion is Fusion.GATE_UP:
        return torch.cat(list(hf), dim=0)
    return fuse_qkv(*hf, layout.spec)


def from_megatron(layout: WeightLayout, rule: WeightRule, full: Tensor) -> list[Tensor]:
    """The full megatron tensor -> contiguous HF tensors in `rule.hf` order."""
    if rule.fusion is Fusion.COPY:
        parts = [full]
    elif rule.fusion is Fusion.VOCAB:
        parts = [full[: layout.spec.vocab_size]]
    elif rule.fusion is Fusion.GATE_UP:
        parts = list(full.chunk(2, dim=0))
    else:
        parts = list(split_qkv(full, layout.spec))
    return [part.contiguous() for part in parts]


def shard(layout: WeightLayout, rule: WeightRule, full: Tensor, tp_rank: int) -> Tensor:
    """The piece of the full megatron tensor that tensor-parallel rank `tp_rank` holds."""
    tp = layout.tp
    if rule.split is TpSplit.REPLICATED or tp == 1:
        return full
    if rule.split is TpSplit.ROWS:
        return _chunk(full, tp, 0, rule)[tp_rank]
    if rule.split is TpSplit.COLUMNS:
        return _chunk(full, tp, 1, rule)[tp_rank]
    gate, up = full.chunk(2, dim=0)
    return torch.cat([_chunk(gate, tp, 0, rule)[tp_rank], _chunk(up, tp, 0, rule)[tp_rank]], dim=0)


def unshard(layout: WeightLayout, rule: WeightRule, shards: Sequence[Tensor]) -> Tensor:
    """Every tensor-parallel rank's piece, in rank order -> the full megatron tensor."""
    if rule.split is TpSplit.REPLICATED or len(shards) == 1:
        return shards[0]
    if rule.split is TpSplit.ROWS:
        return torch.cat(list(shards), dim=0)
    if rule.split is TpSplit.COLUMNS:
        return torch.cat(list(shards), dim=1)
    halves = [piece.chunk(2, dim=0) for piece in shards]
    return torch.cat([gate for gate, _ in halves] + [up for _, up in halves], dim=0)


def fuse_qkv(q: Tensor, k: Tensor, v: Tensor, spec: MegatronModelSpec) -> Tensor:
    """HF q [heads*d, ...], k and v [groups*d, ...] -> megatron's [groups*(heads/groups + 2)*d, ...]."""
    groups, d = spec.num_query_groups, spec.head_dim
    rest = q.shape[1:]
    grouped = [q.reshape(groups, -1, d, *rest), k.reshape(groups, 1, d, *rest), v.reshape(groups, 1, d, *rest)]
    return torch.cat(grouped, dim=1).reshape(-1, *rest)


def split_qkv(qkv: Tensor, spec: MegatronModelSpec) -> tuple[Tensor, Tensor, Tensor]:
    """The inverse of `fuse_qkv`."""
    groups, d = spec.num_query_groups, spec.head_dim
    per_group = spec.num_attention_heads // groups
    rest = qkv.shape[1:]
    q, k, v = qkv.reshape(groups, per_group + 2, d, *rest).split([per_group, 1, 1], dim=1)
    return q.reshape(-1, *rest), k.reshape(-1, *rest), v.reshape(-1, *rest)


def _pad_rows(tensor: Tensor, rows: int) -> Tensor:
    if tensor.shape[0] == rows:
        return tensor
    padded = tensor.new_zeros((rows, *tensor.shape[1:]))
    padded[: tensor.shape[0]] = tensor
    return padded


def _chunk(tensor: Tensor, parts: int, dim: int, rule: WeightRule) -> tuple[Tensor, ...]:
    if tensor.shape[dim] % parts:
        raise ValueError(f"{rule.megatron}: dimension {dim} of size {tensor.shape[dim]} does not split over tp={parts}")
    return tensor.chunk(parts, dim=dim)
