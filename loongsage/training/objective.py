"""The policy objective of one micro-batch, from the per-token scores of the model's output (see token_scores)."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import Tensor

from loongsage.algorithms.critic import clipped_value_loss, reads_critic
from loongsage.algorithms.distill import gkd_divergence
from loongsage.algorithms.losses import Aggregation, kl_estimate, masked_aggregate
from loongsage.algorithms.off_policy import importance_weights, interpolated_proximal_logprobs
from loongsage.algorithms.policy_losses import get_policy_loss
from loongsage.algorithms.stale_filters import DEFAULT_THRESHOLDS, filtered_tokens, opsm_keep
from loongsage.config.schema import AlgorithmConfig
from loongsage.sample import Sample
from loongsage.training.batch import PackedBatch
from loongsage.training.token_scores import TokenScores

PROXIMAL_SOURCES = ("recompute", "interpolate", "behaviour")


@dataclass
class MicroObjective:
    loss: Tensor  # scalar, differentiable, aggregated over this micro-batch by algo.loss_aggregation
    logprobs: Tensor  # [B, T-1], detached
    pg_loss: float
    entropy: float
    clip_frac: float
    kl: float
    is_stats: dict[str, float] = field(default_factory=dict)  # importance_weights' stats; empty without IS
    distill: float = 0.0  # the GKD divergence to the teachers (algorithm.opd.style=gkd); 0 without
    stale_filtered: float = 0.0  # trained tokens algorithm.stale_filter=opsm dropped (m2po masks before: 0 here)


def micro_objective(
    scores: TokenScores,
    batch: PackedBatch,
    old_logprobs: Tensor | None,
    ref_logprobs: Tensor | None,
    algo: AlgorithmConfig,
    policy_versions: tuple[float, float] | None = None,
) -> MicroObjective:
    """The policy loss `algo.policy_loss` names (+ kl_coef * KL to the reference) - entropy_coef * entropy
    (+ opd.coef * the GKD divergence to the teachers, where the batch carries their top-k).

    The PPO ratio is taken against the proximal policy chosen by `algo.proximal` (see
    `_proximal`); with `algo.is_level` set, each token's surrogate is also weighted by
    pi_prox / pi_behav for the staleness of the weights that sampled it.
    `policy_versions` = (proximal, current) weight versions, read by proximal=interpolate.
    """
    mask, aggregate = batch.loss_mask, batch.aggregation(algo.loss_aggregation, algo.loss_norm_length)
    logprobs = scores.logprobs(batch.targets)
    proximal = _proximal(logprobs.detach(), batch, old_logprobs, algo.proximal, policy_versions)
    is_weights, is_stats = None, {}
    if algo.is_level != "none":
        is_weights, is_stats = importance_weights(
            proximal, batch.rollout_logprobs, mask, algo.is_level, algo.is_mode, algo.is_low, algo.is_high
        )
    stale_filtered = 0.0
    if algo.stale_filter == "opsm":
        keep = opsm_keep(logprobs.detach(), batch.rollout_logprobs, batch.advantages, mask, stale_threshold(algo))
        stale_filtered = filtered_tokens(mask, keep)
        is_weights = keep if is_weights is None else is_weights * keep
    pg_loss, info = get_policy_loss(algo.policy_loss)(
        logprobs=logprobs,
        old_logprobs=proximal,
        advantages=batch.advantages,
        mask=mask,
        clip_low=algo.clip_low,
        clip_high=algo.clip_high,
        aggregation=aggregate,
        is_weights=is_weights,
    )
    loss = pg_loss
    kl = torch.zeros(())
    if ref_logprobs is not None:
        kl = aggregate(kl_estimate(logprobs, ref_logprobs, algo.kl_kind), mask)
        loss = loss + algo.kl_coef * kl
    distill = torch.zeros(())
    if batch.teacher_top_ids is not None:
        distill = aggregate(_gkd_divergence(scores, batch, algo), mask * batch.teacher_mask)
        loss = loss + algo.opd.coef * distill
    with torch.set_grad_enabled(algo.entropy_coef > 0 and torch.is_grad_enabled()):
        entropy = aggregate(scores.entropy(), mask)
    if algo.entropy_coef > 0:
        loss = loss - algo.entropy_coef * entropy
    return MicroObjective(
        loss=loss,
        logprobs=logprobs.detach(),
        pg_loss=pg_loss.item(),
        entropy=entropy.item(),
        clip_frac=info["clip_frac"],
        kl=kl.item(),
        is_stats=is_stats,
        distill=distill.item(),
        stale_filtered=stale_filtered,
    )


def stale_threshold(algo: AlgorithmConfig) -> float:
    """algorithm.stale_threshold, or the stale filter's reference value when unset."""
    return DEFAULT_THRESHOLDS[algo.stale_filter] if algo.stale_threshold is None else algo.stale_threshold


def _gkd_divergence(scores: TokenScores, batch: PackedBatch, algo: AlgorithmConfig) -> Tensor:
    """[B, C] divergence between student and teacher on the teacher's top-k ids, both renormalised
    there (distill.topk_supports, here from the student's logits at those ids)."""
    student = scores.logits_at(batch.teacher_top_ids).log_softmax(dim=-1)
    teacher = batch.teacher_top_logprobs.float().log_softmax(dim=-1)
    return gkd_divergence(student, teacher, algo.opd.divergence, algo.opd.beta)


def _proximal(
    current: Tensor,
    batch: PackedBatch,
    old_logprobs: Tensor | None,
    source: str,
    policy_versions: tuple[float, float] | None,
) -> Tensor:
    """The logprobs the PPO ratio is taken against.

    recompute:   the trainer's own, from before the step's first update (`old_logprobs`);
                 without them the batch is on-policy for the current weights, so they are
                 this very forward pass, detached: what a separate no-grad pass would give.
    behaviour:   the rollout logprobs, whatever weights sampled them.
    interpolate: between rollout and current logprobs by weight version (no forward pass).
    """
    if source == "recompute":
        return current if old_logprobs is None else old_logprobs
    if source == "behaviour":
        return batch.rollout_logprobs
    if source == "interpolate":
        return interpolated_proximal_logprobs(batch.rollout_logprobs, current, batch.token_versions, *policy_versions)
    raise ValueError(f"unknown algorithm.proximal={source!r}; valid: {', '.join(PROXIMAL_SOURCES)}")


def check_off_policy_inputs(samples: list[Sample], algo: AlgorithmConfig, policy_version: int | None) -> None:
    """Raise ValueError naming the setting when `algo` reads what a sample or the call lacks:
    rollout logprobs (proximal behaviour/interpolate, importance weights), weight versions and
    the trainer's policy_version (interpolate)."""
    if algo.proximal not in PROXIMAL_SOURCES:
        raise ValueError(f"unknown algorithm.proximal={algo.proximal!r}; valid: {', '.join(PROXIMAL_SOURCES)}")
    needs = []
    if algo.proximal != "recompute":
        needs.append((f"algorithm.proximal={algo.proximal}", "response_logprobs", "rollout logprobs"))
    if algo.is_level != "none":
        needs.append((f"algorithm.is_level={algo.is_level}", "response_logprobs", "rollout logprobs"))
    if algo.stale_filter != "none":
        needs.append((f"algorithm.stale_filter={algo.stale_filter}", "response_logprobs", "rollout logprobs"))
    if reads_critic(algo.advantage):
        needs.append((f"algorithm.advantage={algo.advantage}", "returns", "critic's returns (assign_critic_advantages)"))
    if algo.proximal == "interpolate":
        needs.append(("algorithm.proximal=interpolate", "weight_versions", "weight versions"))
        if policy_version is None:
            raise ValueError("algorithm.proximal=interpolate needs train_step's policy_version (the trainer's weight version)")
    for setting, name, what in needs:
        for index, sample in enumerate(samples):
            if not getattr(sample, name):
                raise ValueError(f"{setting} needs the {what} of every sample; sample {index} has none")


def value_objective(values: Tensor, batch: PackedBatch, value_clip: float) -> Tensor:
    """A critic's loss on one micro-batch: PPO's clipped value loss toward the batch's returns,
    token-mean over its trained tokens (the critic's values [B, C], aligned with the columns)."""
    return clipped_value_loss(values, batch.old_values, batch.returns, batch.loss_mask, value_clip, Aggregation())


def supervised_objective(scores: TokenScores, batch: PackedBatch) -> MicroObjective:
    """Mean negative log-likelihood of the masked tokens: imitation of demonstrations (a warm
    start before RL), token-averaged whatever the RL loss aggregation is."""
    mask = batch.loss_mask
    logprobs = scores.logprobs(batch.targets)
    nll = -masked_aggregate(logprobs, mask, "token_mean")
    with torch.no_grad():
        entropy = masked_aggregate(scores.entropy(), mask, "token_mean")
    return MicroObjective(loss=nll, logprobs=logprobs.detach(), pg_loss=nll.item(), entropy=entropy.item(), clip_frac=0.0, kl=0.0)
