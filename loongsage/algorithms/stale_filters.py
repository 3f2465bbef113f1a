"""Stale filters (`algorithm.stale_filter`): tokens or sequences left out of the policy gradient
because the weights that sampled them are too far from the ones being trained. They correct
stale data under any policy loss.

m2po (Zheng et al. 2025, "Prosperity before Collapse: How Far Can Off-Policy RL Reach with
    Stale Data on LLMs?", second-moment trust policy optimization): over the whole batch, the
    tokens with the largest squared log-ratio log pi_prox - log pi_behav are masked until the
    mean squared log-ratio of what remains (its second moment, M2) is at most the threshold
    (0.04 in the reference). The masked tokens leave the loss and its denominator.
opsm (DeepSeek-V3.2, off-policy sequence masking): a sequence whose advantage is negative and
    whose mean divergence from the behaviour policy, mean_t (log pi_behav - log pi_theta),
    exceeds delta (0.1 in the reference) gets no gradient; the loss's denominator is unchanged.

Pure tensor code: no Ray, HTTP or config. Per-token tensors are [B, T]; `mask` is 1 where a
token is trained.
"""

from __future__ import annotations

import torch
from torch import Tensor

STALE_FILTERS = ("none", "m2po", "opsm")
# algorithm.stale_threshold when left unset: the reference's values.
DEFAULT_THRESHOLDS = {"m2po": 0.04, "opsm": 0.1}


def m2po_cutoff(squared_log_ratios: Tensor, threshold: float) -> float:
    """The cutoff c such that dropping every token whose squared log-ratio is >= c leaves a mean
    of at most `threshold`, dropping as few tokens as that takes (the largest first; tokens tied
    with the last one dropped go too, which only lowers the mean). inf when nothing must go.

    `squared_log_ratios`: 1-D, every trained token of the whole batch (all micro-batches and
    data-parallel ranks), so that every rank cuts at the same value.
    """
    values = squared_log_ratios.double().flatten().sort(descending=True).values
    if values.numel() == 0:
        return float("inf")
    # means[k]: the mean of values[k:], what remains after dropping the k largest.
    remaining_sums = values.flip(0).cumsum(0).flip(0)
    means = remaining_sums / torch.arange(values.numel(), 0, -1, dtype=values.dtype)
    within = (means <= threshold).nonzero()
    if within.numel() == 0:
        # Even the smallest alone is above the threshold: every token goes.
        return 0.0
    dropped = int(within[0])
    return float("inf") if dropped == 0 else float(values[dropped - 1])


def squared_log_ratios(proximal_logprobs: Tensor, behaviour_logprobs: Tensor, mask: Tensor) -> Tensor:
    """(log pi_prox - log pi_behav)^2 of the trained tokens, 1-D (what m2po_cutoff takes)."""
    log_ratio = proximal_logprobs.double() - behaviour_logprobs.double()
    return log_ratio[mask.bool()].square()


def m2po_mask(proximal_logprobs: Tensor, behaviour_logprobs: Tensor, mask: Tensor, cutoff: float) -> Tensor:
    """`mask` without the tokens whose squared log-ratio reaches the batch's cutoff, same dtype."""
    log_ratio = proximal_logprobs.double() - behaviour_logprobs.double()
    return mask * (log_ratio.square() < cutoff).to(mask.dtype)


def opsm_keep(current_logprobs: Tensor, behaviour_logprobs: Tensor, advantages: Tensor, mask: Tensor, delta: float) -> Tensor:
    """[B, T] float: 0 on the tokens of a sequence dropped by OPSM, 1 elsewhere; a weight on each
    token's loss term, so the aggregation's denominator still counts them.

    `advantages` [B] or [B, T] (per-token advantages: a token with a negative one is dropped when
    its sequence diverges). The divergence is the masked mean of log pi_behav - log pi_theta with
    the current weights detached: a k1 estimate of KL(behaviour || current) from the behaviour's
    own samples.
    """
    keep = mask.bool()
    with torch.no_grad():
        log_ratio = torch.where(keep, behaviour_logprobs.float() - current_logprobs.float(), 0.0)
        divergence = log_ratio.sum(dim=-1, keepdim=True) / keep.sum(dim=-1, keepdim=True).clamp(min=1)
        advantages = advantages.unsqueeze(-1) if advantages.dim() == 1 else advantages
        dropped = (advantages < 0) & (divergence > delta)
        return (~dropped).float().expand_as(current_logprobs).contiguous()


def filtered_tokens(before: Tensor, kept: Tensor) -> float:
    """How many trained tokens of `before` (a loss mask) have weight 0 in `kept`."""
    return float((before.bool() & (kept == 0)).sum())
