"""Data-parallel wrapping of an HF model: DDP or FSDP2, behind one set of helpers.

Both strategies average gradients over ranks, take full (unsharded, HF-named) state
dicts through `torch.distributed.checkpoint.state_dict`, and can skip the gradient
all-reduce on all but the last micro-batch of a gradient-accumulation window.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch
import torch.distributed as dist
from torch import Tensor, nn

# torch.distributed.checkpoint is imported where a state dict is taken or loaded: it pulls in
# DTensor's op tables and sympy, a second of CPU that the controller (which imports the worker
# only to name its actor class) and a rank that never saves would pay for nothing.

STRATEGIES = ("ddp", "fsdp2")  # trainer.strategy


def wrap_model(model: nn.Module, strategy: str) -> nn.Module:
    if strategy not in STRATEGIES:
        raise ValueError(f"trainer.strategy={strategy!r} is not one of {', '.join(STRATEGIES)}")
    if dist.get_world_size() == 1:
        # Nothing to average or shard; DDP would still copy every gradient into its buckets.
        return model
    if strategy == "ddp":
        return nn.parallel.DistributedDataParallel(model)
    return _fully_shard(model)


@contextmanager
def grad_sync(model: nn.Module, enabled: bool) -> Iterator[None]:
    """Reduce gradients over ranks in this backward only when `enabled`."""
    if isinstance(model, nn.parallel.DistributedDataParallel):
        if enabled:
            yield
        else:
            with model.no_sync():
                yield
        return
    if not hasattr(model, "set_requires_gradient_sync"):  # a single rank's unwrapped model
        yield
        return
    model.set_requires_gradient_sync(enabled)
    try:
        yield
    finally:
        model.set_requires_gradient_sync(True)


def clip_grad_norm(model: nn.Module, max_norm: float) -> float:
    norm = nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    # Under FSDP2 the norm is a DTensor over the shards; the full value is what we report.
    return float(norm.full_tensor() if hasattr(norm, "full_tensor") else norm)


def full_model_state(model: nn.Module) -> dict[str, Tensor]:
    """HF-named full weights on rank 0 (empty elsewhere). Collective: call on every rank."""
    from torch.distributed.checkpoint.state_dict import get_model_state_dict

    return get_model_state_dict(model, options=_full_on_rank0())


def full_weights_in_lockstep(model: nn.Module, skip: set[str]) -> Iterator[tuple[str, Tensor]]:
    """Each full tensor (HF checkpoint-named, contiguous, on the CPU) but those named in `skip`, on every rank,
    one at a time. Collective: every rank reads it to the end, in the same order. A rank that sends
    a share of a weight push keeps only what it sends, where `full_model_state` would hold the
    whole model on rank 0."""
    from transformers.core_model_loading import revert_weight_conversion

    inner = model.module if isinstance(model, nn.parallel.DistributedDataParallel) else model
    for name, value in inner.state_dict().items():
        if name in skip:
            continue
        full = value.full_tensor() if hasattr(value, "full_tensor") else value  # a DTensor under FSDP2
        # Under checkpoint names, which engines load: transformers holds some tensors fused in
        # memory (an MoE layer's experts as one [experts, ...] tensor), and splits them on save.
        for checkpoint_name, tensor in revert_weight_conversion(inner, {name: full.detach()}).items():
            yield checkpoint_name, tensor.cpu().contiguous()


def load_full_model_state(model: nn.Module, state: dict[str, Tensor]) -> None:
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict

    # strict=False: a tied weight (lm_head = embed_tokens) is stored once, as HF does.
    set_model_state_dict(model, state, options=StateDictOptions(full_state_dict=True, strict=False))


def full_optimizer_state(model: nn.Module, optimizer: torch.optim.Optimizer) -> dict:
    from torch.distributed.checkpoint.state_dict import get_optimizer_state_dict

    return get_optimizer_state_dict(model, optimizer, options=_full_on_rank0())


def load_full_optimizer_state(model: nn.Module, optimizer: torch.optim.Optimizer, state: dict) -> None:
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_optimizer_state_dict

    set_optimizer_state_dict(model, optimizer, state, options=StateDictOptions(full_state_dict=True))


def _full_on_rank0():
    from torch.distributed.checkpoint.state_dict import StateDictOptions

    # Gathered to CPU on rank 0 only: the other ranks would just throw their copy away.
    return StateDictOptions(full_state_dict=True, cpu_offload=True)


def tied_parameter_names(model: nn.Module) -> set[str]:
    """Names that alias a parameter already listed under another name (lm_head -> embeddings)."""
    every = {name for name, _ in model.named_parameters(remove_duplicate=False)}
    return every - {name for name, _ in model.named_parameters()}


def _fully_shard(model: nn.Module) -> nn.Module:
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    mesh = init_device_mesh("cpu", (dist.get_world_size(),))
    # One FSDP unit per decoder layer bounds the unsharded memory to one layer at a time;
    # the root unit holds embeddings, final norm and the (possibly tied) LM head.
    for layer in model.model.layers:
        fully_shard(layer, mesh=mesh)
    return fully_shard(model, mesh=mesh)
