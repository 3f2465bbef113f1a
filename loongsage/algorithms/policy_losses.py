"""The policy losses `algorithm.policy_loss` names, and their registry.

Each takes the same keywords (PolicyLoss) and returns (scalar loss, metrics with "clip_frac").
All per-token tensors are [B, T] over response positions; `mask` is 1 where a token is
trained. Pure tensor code: no Ray, HTTP or config.
"""

from __future__ import annotations

from typing import Protocol

import torch
from torch import Tensor

from loongsage.algorithms.losses import Aggregation, masked_aggregate
from loongsage.registry import Registry

# GSPO's log sequence ratio is clamped here (as the reference does) so exp() cannot overflow.
MAX_SEQUENCE_LOG_RATIO = 10.0


def ppo_clip_loss(
    logprobs: Tensor,
    old_logprobs: Tensor,
    advantages: Tensor,
    mask: Tensor,
    clip_low: float = 0.2,
    clip_high: float = 0.28,
    aggregation: Aggregation = Aggregation(),
    is_weights: Tensor | None = None,
) -> tuple[Tensor, dict[str, float]]:
    """PPO clipped surrogate (Schulman et al. 2017) with DAPO's clip-higher (Yu et al. 2025):
    ratio clipped to [1 - clip_low, 1 + clip_high].

    `advantages` is [B] (one per sequence, broadcast over tokens) or [B, T].
    clip_frac is the fraction of masked tokens where the clipped branch is strictly
    larger, i.e. where the token gets no gradient.

    Decoupled PPO: when `old_logprobs` are a proximal policy's rather than the sampling
    policy's, `is_weights` ([B, T], pi_prox / pi_behav, see off_policy.importance_weights)
    multiply each token's surrogate; the trust region stays around the proximal policy.
    """
    ratio = torch.exp(logprobs - old_logprobs.detach())
    return _clipped_surrogate(ratio, advantages, mask, clip_low, clip_high, aggregation, is_weights)


def gspo_loss(
    logprobs: Tensor,
    old_logprobs: Tensor,
    advantages: Tensor,
    mask: Tensor,
    clip_low: float = 3e-4,
    clip_high: float = 4e-4,
    aggregation: Aggregation = Aggregation("seq_mean_token_mean"),
    is_weights: Tensor | None = None,
) -> tuple[Tensor, dict[str, float]]:
    """GSPO (Zheng et al. 2025, "Group Sequence Policy Optimization"): one ratio per sequence,
    exp of its masked mean token log-ratio, clipped per sequence to [1 - clip_low, 1 + clip_high]
    (the paper's epsilons are 3e-4 / 4e-4, hundreds of times PPO's smaller: a length-normalised
    ratio moves little).

    The gradient reaches every token: each token's ratio is `lp - lp.detach() + seq.detach()`
    in log space, whose value is the sequence's ratio and whose gradient is that ratio times the
    token's own score. Under seq_mean_token_mean that is the paper's gradient,
    s_i * A_i * mean_t grad log pi(y_t); token_mean gives its token-weighted variant.
    """
    keep = mask.bool()
    log_ratio = torch.where(keep, logprobs - old_logprobs.detach(), torch.zeros_like(logprobs))
    sequence_log_ratio = log_ratio.sum(dim=-1, keepdim=True) / keep.sum(dim=-1, keepdim=True).clamp(min=1)
    sequence_log_ratio = sequence_log_ratio.clamp(max=MAX_SEQUENCE_LOG_RATIO)
    ratio = torch.exp(logprobs - logprobs.detach() + sequence_log_ratio.detach())
    return _clipped_surrogate(ratio, advantages, mask, clip_low, clip_high, aggregation, is_weights)


def cispo_loss(
    logprobs: Tensor,
    old_logprobs: Tensor,
    advantages: Tensor,
    mask: Tensor,
    clip_low: float = 1.0,
    clip_high: float = 0.28,
    aggregation: Aggregation = Aggregation(),
    is_weights: Tensor | None = None,
) -> tuple[Tensor, dict[str, float]]:
    """CISPO (MiniMax-M1, MiniMax 2025): REINFORCE with the importance weight clipped to
    [1 - clip_low, 1 + clip_high] and detached, -sg(clip(r)) * A * log pi per token.

    Unlike PPO's clip, a token whose ratio leaves the range still gets gradient (scaled by the
    bound): the rare, high-entropy tokens PPO silences are the ones reflection hinges on.
    MiniMax-M1 sets no lower bound in practice: clip_low=1.0 lets the weight fall to 0.
    clip_frac counts the tokens whose weight was clipped.
    """
    advantages = _per_token(advantages.detach())
    ratio = torch.exp(logprobs.detach() - old_logprobs.detach())
    weight = ratio.clamp(1.0 - clip_low, 1.0 + clip_high)
    terms = -advantages * weight * logprobs
    if is_weights is not None:
        terms = terms * is_weights.detach()
    loss = aggregation(terms, mask)
    clipped = (ratio < 1.0 - clip_low) | (ratio > 1.0 + clip_high)
    return loss, _ratio_metrics(clipped, ratio, mask)


def _clipped_surrogate(
    ratio: Tensor,
    advantages: Tensor,
    mask: Tensor,
    clip_low: float,
    clip_high: float,
    aggregation: Aggregation,
    is_weights: Tensor | None,
) -> tuple[Tensor, dict[str, float]]:
    """max(-A r, -A clip(r)) per token, weighted by `is_weights`, aggregated."""
    advantages = _per_token(advantages.detach())
    unclipped = -advantages * ratio
    clipped = -advantages * ratio.clamp(1.0 - clip_low, 1.0 + clip_high)
    surrogate = torch.maximum(unclipped, clipped)
    if is_weights is not None:
        surrogate = surrogate * is_weights.detach()
    return aggregation(surrogate, mask), _ratio_metrics(clipped > unclipped, ratio, mask)


def _per_token(advantages: Tensor) -> Tensor:
    return advantages.unsqueeze(-1) if advantages.dim() == 1 else advantages


def _ratio_metrics(clipped: Tensor, ratio: Tensor, mask: Tensor) -> dict[str, float]:
    with torch.no_grad():
        clip_frac = masked_aggregate(clipped.float(), mask, "token_mean")
        ratio_mean = masked_aggregate(ratio.detach().float(), mask, "token_mean")
    return {"clip_frac": clip_frac.item(), "ratio_mean": ratio_mean.item()}


class PolicyLoss(Protocol):
    """What `algorithm.policy_loss` names. The trainer calls it with these keywords, whatever
    the loss reads of them: `old_logprobs` are the proximal policy's, `advantages` [B] or
    [B, T], `is_weights` [B, T] or None (importance weights for staleness, times the stale
    filter's keep mask), `aggregation` reduces a [B, T] tensor of per-token terms to the
    micro-batch's loss (`aggregation(values, mask)`, algorithm.loss_aggregation over episodes:
    Aggregation). Returns (scalar loss, metrics), and the metrics hold at least "clip_frac"
    (0.0 for a loss that clips nothing)."""

    def __call__(
        self,
        *,
        logprobs: Tensor,
        old_logprobs: Tensor,
        advantages: Tensor,
        mask: Tensor,
        clip_low: float,
        clip_high: float,
        aggregation: Aggregation,
        is_weights: Tensor | None,
    ) -> tuple[Tensor, dict[str, float]]: ...


POLICY_LOSSES: Registry[PolicyLoss] = Registry("policy loss")
POLICY_LOSSES.register("ppo_clip", ppo_clip_loss)
POLICY_LOSSES.register("gspo", gspo_loss)
POLICY_LOSSES.register("cispo", cispo_loss)


def get_policy_loss(name_or_path: str) -> PolicyLoss:
    """The loss `algorithm.policy_loss` names: a registered name or "package.module:function"."""
    return POLICY_LOSSES.get(name_or_path)
