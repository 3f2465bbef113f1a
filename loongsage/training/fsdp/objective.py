"""The policy objective of one micro-batch, from the model's logits."""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from loongsage.algorithms.losses import (
    entropy_from_logits,
    kl_estimate,
    masked_aggregate,
    ppo_clip_loss,
    token_logprobs,
)
from loongsage.training.batch import PackedBatch
from loongsage.config.schema import AlgorithmConfig


@dataclass
class MicroObjective:
    loss: Tensor  # scalar, differentiable, aggregated over this micro-batch by algo.loss_aggregation
    logprobs: Tensor  # [B, T-1], detached
    pg_loss: float
    entropy: float
    clip_frac: float
    kl: float


def micro_objective(
    logits: Tensor,
    batch: PackedBatch,
    old_logprobs: Tensor | None,
    ref_logprobs: Tensor | None,
    algo: AlgorithmConfig,
) -> MicroObjective:
    """PPO-clip loss (+ kl_coef * KL to the reference) - entropy_coef * entropy.

    Without `old_logprobs` the batch is taken as on-policy for the current weights, so
    the old logprobs are this very forward pass, detached: the same numbers a separate
    no-grad pass would give, without paying for it.
    """
    mask, mode = batch.loss_mask, algo.loss_aggregation
    logprobs = token_logprobs(logits, batch.targets)
    old = logprobs.detach() if old_logprobs is None else old_logprobs
    pg_loss, info = ppo_clip_loss(
        logprobs, old, batch.advantages, mask, algo.clip_low, algo.clip_high, mode
    )
    loss = pg_loss
    kl = torch.zeros(())
    if ref_logprobs is not None:
        kl = masked_aggregate(kl_estimate(logprobs, ref_logprobs, algo.kl_kind), mask, mode)
        loss = loss + algo.kl_coef * kl
    with torch.set_grad_enabled(algo.entropy_coef > 0 and torch.is_grad_enabled()):
        entropy = masked_aggregate(entropy_from_logits(logits), mask, mode)
    if algo.entropy_coef > 0:
        loss = loss - algo.entropy_coef * entropy
    return MicroObjective(
        loss=loss,
        logprobs=logprobs.detach(),
        pg_loss=pg_loss.item(),
        entropy=entropy.item(),
        clip_frac=info["clip_frac"],
        kl=kl.item(),
    )


def supervised_objective(logits: Tensor, batch: PackedBatch) -> MicroObjective:
    """Mean negative log-likelihood of the masked tokens: imitation of demonstrations (a warm
    start before RL), token-averaged whatever the RL loss aggregation is."""
    mask = batch.loss_mask
    logprobs = token_logprobs(logits, batch.targets)
    nll = -masked_aggregate(logprobs, mask, "token_mean")
    with torch.no_grad():
        entropy = masked_aggregate(entropy_from_logits(logits), mask, "token_mean")
    return MicroObjective(loss=nll, logprobs=logprobs.detach(), pg_loss=nll.item(), entropy=entropy.item(),
                          clip_frac=0.0, kl=0.0)
