"""HF weights <-> this rank's megatron GPTModel, streaming one tensor at a time.

`load_hf_weights` is local: every rank reads the HF tensors its pipeline stage needs (of an MoE
layer, only its expert-parallel rank's experts), converts each to megatron's layout and copies
its tensor-parallel piece into the parameter.
`hf_weights` is collective over the tensor-, pipeline- and expert-parallel groups: the pieces of
one parameter are gathered, un-fused and sent to global rank 0, which yields full HF-named
tensors; each routed expert is broadcast from the expert-parallel rank that holds it, so that
every expert reaches rank 0 exactly once. The tensor conversions themselves are the pure
functions of weight_layout.py.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import torch
import torch.distributed as dist
from torch import Tensor

from loongsage.models.safetensors_io import SafetensorsReader
from loongsage.training.megatron.mapping import MegatronModelSpec, padded_vocab_size
from loongsage.training.megatron.model import gpt_model
from loongsage.training.megatron.weight_layout import (
    IGNORED_HF_SUFFIXES,
    WeightLayout,
    WeightRule,
    expert_owner,
    from_megatron,
    hf_names,
    output_rule,
    shard,
    stage_rules,
    to_megatron,
    unshard,
)


def weight_layout(model, spec: MegatronModelSpec) -> WeightLayout:
    """How `model` (this rank's GPTModel, possibly wrapped) lays out the weights of `spec`."""
    from megatron.core import parallel_state as ps

    gpt = gpt_model(model)
    tp = ps.get_tensor_model_parallel_world_size()
    if gpt.vocab_size != padded_vocab_size(spec.vocab_size, tp):
        raise ValueError(
            f"the model has {gpt.vocab_size} vocabulary rows, spec vocab_size={spec.vocab_size} pads to "
            f"{padded_vocab_size(spec.vocab_size, tp)} at tp={tp}: build it with model.build_model"
        )
    names = [name for name, _ in gpt.named_parameters()]
    fused = any(name.endswith("linear_qkv.layer_norm_weight") for name in names)
    grouped = any(".mlp.experts.linear_fc1.weight" in name for name in names)
    ep = ps.get_expert_model_parallel_world_size()
    return WeightLayout(spec=spec, tp=tp, padded_vocab=gpt.vocab_size, norms_in_linears=fused, ep=ep, grouped_experts=grouped)


def rank_rules(model, layout: WeightLayout) -> list[WeightRule]:
    """The rules of this rank's pipeline stage and expert-parallel rank."""
    from megatron.core import parallel_state as ps

    gpt = gpt_model(model)
    layers = [layer.layer_number - 1 for layer in gpt.decoder.layers]  # layer_number: global, from 1
    offset = layers[0] if layers else 0
    return stage_rules(layout, layers, offset, gpt.pre_process, gpt.post_process, ps.get_expert_model_parallel_rank())


def load_hf_weights(model, hf_dir: str | Path, spec: MegatronModelSpec) -> None:
    """Fill every parameter of this rank's model from the HF safetensors in `hf_dir`."""
    from megatron.core import parallel_state as ps

    gpt = gpt_model(model)
    layout = weight_layout(gpt, spec)
    rules = rank_rules(gpt, layout)
    params = dict(gpt.named_parameters())
    _check_rules_cover(rules, params)
    tp_rank = ps.get_tensor_model_parallel_rank()
    with SafetensorsReader(hf_dir) as reader:
        _check_hf_names(reader, layout)
        for rule in rules:
            piece = shard(layout, rule, to_megatron(layout, rule, [reader.tensor(name) for name in rule.hf]), tp_rank)
            param = params[rule.megatron]
            if piece.shape != param.shape:
                raise ValueError(
                    f"{rule.megatron}: {'+'.join(rule.hf)} give {tuple(piece.shape)} on tp rank {tp_rank}, "
                    f"the parameter is {tuple(param.shape)}"
                )
            with torch.no_grad():
                param.copy_(piece)


def _check_rules_cover(rules: list[WeightRule], params: dict[str, Tensor]) -> None:
    mapped = {rule.megatron for rule in rules}
    unfilled = sorted(set(params) - mapped)
    if unfilled:
        raise ValueError(f"megatron parameters with no HF source (mapping incomplete): {unfilled}")
    absent = sorted(mapped - set(params))
    if absent:
        raise ValueError(f"the mapping names megatron parameters this model does not have: {absent}")


def _check_hf_names(reader: SafetensorsReader, layout: WeightLayout) -> None:
    expected = hf_names(layout)
    present = {name for name in reader.names if not name.endswith(IGNORED_HF_SUFFIXES)}
    if layout.spec.tie_word_embeddings:
        present.discard("lm_head.weight")  # a tied alias some writers keep; HF ignores it too
    missing = sorted(expected - present)
    unexpected = sorted(present - expected)
    if missing or unexpected:
        experts = f", {layout.spec.num_experts} experts in layers {list(layout.spec.moe_layers)}" if layout.spec.is_moe else ""
        raise ValueError(
            f"{reader.dir} does not match {layout.spec.family} config "
            f"({layout.spec.num_layers} layers, qkv bias {layout.spec.qkv_bias}, qk norm {layout.spec.qk_norm}, "
            f"tied embeddings {layout.spec.tie_word_embeddings}{experts}): "
            f"missing {missing[:8]}{'...' if len(missing) > 8 else ''}, "
            f"unexpected {unexpected[:8]}{'...' if len(unexpected) > 8 else ''}"
        )


def hf_weights(model, spec: MegatronModelSpec, every_replica: bool = False) -> Iterator[tuple[str, Tensor]]:
    """Collective over the tensor-, pipeline- and expert-parallel groups; every rank must run it to the end.

    On global rank 0: (HF name, full contiguous tensor) pairs in HF order, tied embeddings once
    (no lm_head.weight), vocabulary padding dropped, every routed expert once. Other ranks take
    part and yield nothing. Data-parallel (and context-parallel) replicas other than the first
    return at once: their groups never include rank 0, and they hold the same weights... except
    the routed experts, which the other ranks of rank 0's expert-parallel group hold (those with
    expert-data-parallel rank 0): they stay for the experts' broadcasts. `every_replica`: each
    replica gathers its own copy onto its first rank (`holds_full_weights`), so that each can
    send a share of a weight push.
    """
    from megatron.core import parallel_state as ps

    collects = every_replica or ps.get_data_parallel_rank(with_context_parallel=True) == 0
    # Rank 0's expert-parallel group (expert-data-parallel rank 0) holds every expert once; with
    # every_replica each group broadcasts its experts, so that each replica's first rank gets all.
    shares_experts = spec.is_moe and (every_replica or ps.get_expert_data_parallel_rank() == 0)
    if not collects and not shares_experts:
        return
    gpt = gpt_model(model)
    layout = weight_layout(gpt, spec)
    tp_group, tp_rank = ps.get_tensor_model_parallel_group(), ps.get_tensor_model_parallel_rank()
    pp_group, pp_rank = ps.get_pipeline_model_parallel_group(), ps.get_pipeline_model_parallel_rank()
    pp_ranks = dist.get_process_group_ranks(pp_group)
    if tp_rank == 0 and pp_rank == 0 and collects and not every_replica and dist.get_rank() != 0:
        raise RuntimeError(f"expected global rank 0 to be the first tensor- and pipeline-parallel rank, it is {dist.get_rank()}")
    params = dict(gpt.named_parameters())
    device = next(iter(params.values())).device
    skipped = output_rule(layout) if spec.tie_word_embeddings else None  # the last stage's copy of the embedding
    for stage, rule in _model_rules(gpt, layout, pp_group):
        if rule == skipped:
            continue
        if stage == pp_rank:
            if rule.expert is not None:
                if not shares_experts:
                    continue
                full = _broadcast_expert(layout, rule, params[rule.megatron])
            elif collects:
                full = _gather_tp(layout, rule, params[rule.megatron], tp_group)
            else:
                continue
            if tp_rank != 0 or not collects:
                continue
            if pp_rank != 0:
                _send(full, pp_ranks[0], pp_group)
                continue
        elif pp_rank == 0 and tp_rank == 0 and collects:
            full = _recv(pp_ranks[stage], pp_group, device)
        else:
            continue
        yield from zip(rule.hf, from_megatron(layout, rule, full))


def _model_rules(gpt, layout: WeightLayout, pp_group) -> list[tuple[int, WeightRule]]:
    """(pipeline stage, rule) for the whole model, in HF order; the stages' layers are learned
    from each other since megatron may split layers unevenly."""
    layers = [layer.layer_number - 1 for layer in gpt.decoder.layers]
    stages: list = [None] * dist.get_world_size(pp_group)
    dist.all_gather_object(stages, layers, group=pp_group)
    last = len(stages) - 1
    return [
        (stage, rule)
        for stage, stage_layers in enumerate(stages)
        for rule in stage_rules(layout, stage_layers, stage_layers[0] if stage_layers else 0, stage == 0, stage == last)
    ]


def _broadcast_expert(layout: WeightLayout, rule: WeightRule, param: Tensor) -> Tensor:
    """Routed expert `rule.expert` from the expert-parallel rank holding it to its group. Every
    rank holds its local experts in the same shapes, so `param` (this rank's expert of the same
    local index) sizes what arrives. Whole on each rank: experts are not tensor-parallel."""
    from megatron.core import parallel_state as ps

    group = ps.get_expert_model_parallel_group()
    owner = expert_owner(layout, rule.expert)
    if layout.ep == 1:
        return param.detach().contiguous()
    tensor = param.detach().contiguous() if ps.get_expert_model_parallel_rank() == owner else torch.empty_like(param)
    dist.broadcast(tensor, src=dist.get_global_rank(group, owner), group=group)
    return tensor


def _gather_tp(layout: WeightLayout, rule: WeightRule, param: Tensor, tp_group) -> Tensor:
    local = param.detach().contiguous()
    if layout.tp == 1:
        return local
    pieces = [torch.empty_like(local) for _ in range(layout.tp)]
    dist.all_gather(pieces, local, group=tp_group)
    return unshard(layout, rule, pieces)


# Shapes travel ahead of the data: a header of [dtype index, ndim, dims...] padded to a fixed size.
_DTYPES = (torch.float32, torch.bfloat16, torch.float16, torch.float64)
_HEADER = 10


def _send(tensor: Tensor, dst: int, group) -> None:
    header = torch.zeros(_HEADER, dtype=torch.long, device=tensor.device)
    header[0], header[1] = _DTYPES.index(tensor.dtype), tensor.dim()
    header[2 : 2 + tensor.dim()] = torch.tensor(tensor.shape, device=tensor.device)
    dist.send(header, dst, group=group)
    dist.send(tensor.contiguous(), dst, group=group)


def _recv(src: int, group, device: torch.device) -> Tensor:
    header = torch.zeros(_HEADER, dtype=torch.long, device=device)
    dist.recv(header, src, group=group)
    dtype, ndim = _DTYPES[int(header[0])], int(header[1])
    tensor = torch.empty([int(d) for d in header[2 : 2 + ndim]], dtype=dtype, device=device)
    dist.recv(tensor, src, group=group)
    return tensor


def host_weights(model, spec: MegatronModelSpec, every_replica: bool = False) -> Iterator[tuple[str, Tensor]]:
    """`hf_weights` moved to host memory, which transports and safetensors take (collective)."""
    for name, tensor in hf_weights(model, spec, every_replica):
        yield name, tensor.cpu()


def holds_full_weights() -> bool:
    """Whether `hf_weights(..., every_replica=True)` yields on this rank: the first tensor- and
    pipeline-parallel rank of its replica."""
    from megatron.core import parallel_state as ps

    return ps.get_tensor_model_parallel_rank() == 0 and ps.get_pipeline_model_parallel_rank() == 0
