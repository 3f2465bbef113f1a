"""algorithm.stale_filter=m2po over a whole step: one cutoff for every mini-batch, micro-batch and
data-parallel rank, applied to the loss masks before any update (algorithms/stale_filters.py)."""

from __future__ import annotations

from dataclasses import replace

import torch
import torch.distributed as dist
from torch import Tensor

from loongsage.algorithms.stale_filters import filtered_tokens, m2po_cutoff, m2po_mask, squared_log_ratios
from loongsage.training.batch import PackedBatch


def m2po_masked(
    minis: list[list[PackedBatch]], olds: list[list[Tensor]], threshold: float, group: dist.ProcessGroup | None = None
) -> tuple[list[list[PackedBatch]], float]:
    """The mini-batches with M2PO's mask in their loss masks, and how many trained tokens it took
    out. `olds`: the proximal (recomputed) logprobs of every micro-batch, taken before the step's
    first update; `group`: the data-parallel ranks holding the rest of the batch (None: all)."""
    pairs = [(micro, old) for mini, mini_olds in zip(minis, olds) for micro, old in zip(mini, mini_olds)]
    local = [squared_log_ratios(old, micro.rollout_logprobs, micro.loss_mask) for micro, old in pairs]
    everyone: list[Tensor | None] = [None] * dist.get_world_size(group)
    dist.all_gather_object(everyone, torch.cat(local).cpu() if local else torch.zeros(0, dtype=torch.float64), group=group)
    cutoff = m2po_cutoff(torch.cat(everyone), threshold)
    masked = [
        [replace(micro, loss_mask=m2po_mask(old, micro.rollout_logprobs, micro.loss_mask, cutoff)) for micro, old in zip(*pair)]
        for pair in zip(minis, olds)
    ]
    removed = sum(
        filtered_tokens(before.loss_mask, after.loss_mask) for mini, new in zip(minis, masked) for before, after in zip(mini, new)
    )
    return masked, removed
