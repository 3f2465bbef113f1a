"""How much each micro-batch weighs in the loss of the whole (all-rank) mini-batch."""

from __future__ import annotations

import torch
import torch.distributed as dist

from loongsage.training.batch import PackedBatch


def global_shares(micros: list[PackedBatch], mode: str, group: dist.ProcessGroup | None = None) -> list[float]:
    """Each micro-batch's share of the global mini-batch under `mode`; `group`: the data-parallel
    ranks (None: all ranks, every one holding its own shard of the batch).

    masked_aggregate divides by the micro-batch's own count (tokens for token_mean, episodes
    with trained tokens, the micro-batch's episode shares, for the seq_mean modes); scaling by
    count / global count turns the sum over micro-batches and ranks into the aggregate over the
    whole mini-batch, the same loss as one un-accumulated pass.
    """
    if mode == "token_mean":
        counts = [float(micro.loss_mask.sum()) for micro in micros]
    else:
        counts = [float(((micro.loss_mask.sum(dim=-1) > 0) * micro.episode_share).sum()) for micro in micros]
    total = torch.tensor(sum(counts), dtype=torch.float64)
    dist.all_reduce(total, group=group)
    return [count / max(float(total), 1.0) for count in counts]
