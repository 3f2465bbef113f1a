"""Pure tensor functions for RL post-training: advantages, policy losses, KL, off-policy
corrections."""

from __future__ import annotations

from loongsage.algorithms.advantages import group_reward_std, grpo_advantages, informative_groups
from loongsage.algorithms.losses import (
    AGGREGATION_MODES,
    KL_KINDS,
    entropy_from_logits,
    kl_estimate,
    masked_aggregate,
    mismatch_k3_kl,
    token_logprobs,
)
from loongsage.algorithms.off_policy import (
    IS_LEVELS,
    IS_MODES,
    importance_weights,
    interpolated_proximal_logprobs,
)
from loongsage.algorithms.policy_losses import cispo_loss, gspo_loss, ppo_clip_loss

__all__ = [
    "AGGREGATION_MODES",
    "IS_LEVELS",
    "IS_MODES",
    "KL_KINDS",
    "entropy_from_logits",
    "group_reward_std",
    "grpo_advantages",
    "importance_weights",
    "informative_groups",
    "interpolated_proximal_logprobs",
    "kl_estimate",
    "masked_aggregate",
    "mismatch_k3_kl",
    "cispo_loss",
    "gspo_loss",
    "ppo_clip_loss",
    "token_logprobs",
]
