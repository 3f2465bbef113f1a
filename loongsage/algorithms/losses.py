"""Token log-probabilities, entropy, aggregation and KL estimates: what every objective is
built from (the policy losses `algorithm.policy_loss` names are in policy_losses.py).

All per-token tensors are [B, T] over response positions; `mask` is 1 where a token is
trained. Pure tensor code: no Ray, HTTP or config.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

AGGREGATION_MODES = ("token_mean", "seq_mean_token_mean", "seq_mean_token_sum", "seq_mean_token_sum_norm")
# The modes whose constant divisor is algorithm.loss_norm_length.
NORMED_MODES = ("seq_mean_token_sum_norm",)
KL_KINDS = ("k1", "k2", "k3")


def token_logprobs(logits: Tensor, targets: Tensor) -> Tensor:
    """log p(targets) under softmax(logits), in fp32.

    Computed as logit[target] - logsumexp(logits), one sequence at a time: no [B, T, V]
    log-softmax is materialised (nor kept for backward), and a low-precision input is
    upcast one [T, V] row at a time.
    """
    _check_logits(logits, targets)
    rows = []
    for row, row_targets in zip(logits, targets):
        row = row.float()
        picked = row.gather(-1, row_targets.long().unsqueeze(-1)).squeeze(-1)
        rows.append(picked - torch.logsumexp(row, dim=-1))
    return torch.stack(rows)


def entropy_from_logits(logits: Tensor) -> Tensor:
    """Entropy (nats) of softmax(logits) at each position, fp32, one sequence at a time."""
    rows = []
    for row in logits:
        logp = row.float().log_softmax(dim=-1)
        # A -inf logit (masked vocabulary) has p = 0; clamping keeps 0 * log 0 at 0, not NaN.
        finite_logp = logp.clamp(min=torch.finfo(logp.dtype).min)
        rows.append(-(logp.exp() * finite_logp).sum(dim=-1))
    return torch.stack(rows)


def masked_aggregate(
    values: Tensor, mask: Tensor, mode: str, episode_share: Tensor | None = None, norm_length: int | None = None
) -> Tensor:
    """Reduce [B, T] values over masked tokens to a scalar.

    token_mean:              sum of all masked values / number of masked tokens
    seq_mean_token_mean:     mean over episodes of each episode's masked-token mean
    seq_mean_token_sum:      mean over episodes of each episode's masked-token sum
    seq_mean_token_sum_norm: seq_mean_token_sum / norm_length, a constant (Dr. GRPO, Liu et al.
                             2025: dividing by each response's own length favours long wrong
                             answers; a constant, the generation budget, does not)
    An episode is one sequence, unless `episode_share` [B] says which share of its episode's
    masked tokens each sequence holds (an agent episode exported as several branches, see
    Sample.episode_share): then an episode counts once in the means however many sequences
    it spans, and its token mean runs over all of their tokens. Sequences without masked
    tokens take no part in the means. With no masked token at all the result is 0 (still
    attached to the graph).
    """
    if mode not in AGGREGATION_MODES:
        raise ValueError(f"unknown aggregation mode {mode!r}; valid modes: {', '.join(AGGREGATION_MODES)}")
    if mode in NORMED_MODES and not (norm_length and norm_length > 0):
        raise ValueError(f"aggregation mode {mode} divides by a constant length: norm_length must be > 0, got {norm_length}")
    keep = mask.bool()
    # where(), not values * mask: padding positions may hold inf/NaN and 0 * inf is NaN.
    masked = torch.where(keep, values, torch.zeros_like(values))
    counts = keep.sum(dim=-1).to(values.dtype)
    if mode == "token_mean":
        return masked.sum() / counts.sum().clamp(min=1)
    has_tokens = (counts > 0).to(values.dtype)
    episodes = has_tokens if episode_share is None else episode_share.to(values.dtype) * has_tokens
    per_seq = masked.sum(dim=-1)
    if mode == "seq_mean_token_mean":
        # A sequence's token mean times its share of the episode: the episode's token mean.
        per_seq = per_seq / counts.clamp(min=1) * episodes
    elif mode in NORMED_MODES:
        per_seq = per_seq * has_tokens / norm_length
    else:
        per_seq = per_seq * has_tokens
    # A micro-batch may hold a fraction of an episode: the count is not clamped to 1, only kept off 0.
    return per_seq.sum() / episodes.sum().clamp(min=torch.finfo(per_seq.dtype).tiny)


@dataclass(frozen=True)
class Aggregation:
    """How one micro-batch's per-token values become its loss: `masked_aggregate` under `mode`
    (algorithm.loss_aggregation) with the micro-batch's `episode_share` and, for the normed mode,
    `norm_length` (algorithm.loss_norm_length)."""

    mode: str = "token_mean"
    episode_share: Tensor | None = None
    norm_length: int | None = None

    def __call__(self, values: Tensor, mask: Tensor) -> Tensor:
        return masked_aggregate(values, mask, self.mode, self.episode_share, self.norm_length)


def kl_estimate(logprobs: Tensor, ref_logprobs: Tensor, kind: str = "k3") -> Tensor:
    """Per-token estimate of KL(policy || ref) for tokens sampled from the policy
    (Schulman's k1/k2/k3)."""
    log_ratio = logprobs - ref_logprobs
    if kind == "k1":
        return log_ratio
    if kind == "k2":
        return 0.5 * log_ratio.square()
    if kind == "k3":
        return torch.exp(-log_ratio) + log_ratio - 1.0
    raise ValueError(f"unknown KL estimator {kind!r}; valid kinds: {', '.join(KL_KINDS)}")


def mismatch_k3_kl(train_logprobs: Tensor, rollout_logprobs: Tensor, mask: Tensor) -> Tensor:
    """KL(rollout || train) between the engine that sampled the tokens and the trainer's
    recomputation: k3 with the samples drawn from the rollout policy, masked token mean."""
    # In float64: for the ~1e-6 log-ratios of matching engines, exp(r) - 1 - r ~ r^2 / 2
    # cancels to exactly 0 in float32 and the metric would hide a real small gap.
    r = train_logprobs.double() - rollout_logprobs.double()
    return masked_aggregate(torch.expm1(r) - r, mask, "token_mean")


def _check_logits(logits: Tensor, targets: Tensor) -> None:
    if logits.dim() != 3 or logits.shape[:2] != targets.shape:
        raise ValueError(
            f"logits must be [B, T, V] and targets [B, T]; got logits {tuple(logits.shape)} and targets {tuple(targets.shape)}"
        )
