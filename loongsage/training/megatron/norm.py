"""The RMSNorm of megatron's local (plain torch) layer spec, made to run under sequence parallelism.

Under sequence parallelism each tensor-parallel rank normalizes its own slice of the sequence, so
a norm's weight gradient on one rank covers only that slice; megatron's `finalize_model_grads`
sums it over the tensor-parallel ranks for every parameter marked `sequence_parallel`, which its
apex and TransformerEngine norms do. The local spec's norm (`WrappedTorchNorm`, the only one on a
machine without either) marks nothing and refuses sequence parallelism outright; `LocalRMSNorm`
is the same torch.nn.RMSNorm with the mark, swapped into the spec by `with_local_norms`.
"""

from __future__ import annotations

import dataclasses

import torch


class LocalRMSNorm(torch.nn.RMSNorm):
    """torch.nn.RMSNorm built the way megatron builds norms (config, hidden_size, eps)."""

    def __init__(self, config, hidden_size: int, eps: float = 1e-5, **_megatron_only):
        if config.normalization != "RMSNorm":
            raise ValueError(f"LocalRMSNorm runs RMSNorm, not megatron's normalization={config.normalization!r}")
        super().__init__(hidden_size, eps=eps)
        self.weight.sequence_parallel = config.sequence_parallel


def with_local_norms(spec):
    """`spec` (a megatron ModuleSpec tree: specs, submodule dataclasses, lists of them) with every
    WrappedTorchNorm replaced by LocalRMSNorm."""
    from megatron.core.transformer.torch_norm import WrappedTorchNorm

    def swap(node):
        if node is WrappedTorchNorm:
            return LocalRMSNorm
        if isinstance(node, list):
            return [swap(item) for item in node]
        if dataclasses.is_dataclass(node) and not isinstance(node, type):
            changed = {field.name: swap(getattr(node, field.name)) for field in dataclasses.fields(node) if field.init}
            return dataclasses.replace(node, **changed)
        return node

    return swap(spec)
