"""Pure tensor functions for RL post-training: advantages, policy losses, KL."""
from __future__ import annotations

from loongsage.algorithms.advantages import group_reward_std, grpo_advantages
from loongsage.algorithms.losses import (
    AGGREGATION_MODES,
    KL_KINDS,
    entropy_from_logits,
    kl_estimate,
    masked_aggregate,
    mismatch_k3_kl,
    ppo_clip_loss,
    token_logprobs,
)

__all__ = [
    "AGGREGATION_MODES",
    "KL_KINDS",
    "entropy_from_logits",
    "group_reward_std",
    "grpo_advantages",
    "kl_estimate",
    "masked_aggregate",
    "mismatch_k3_kl",
    "ppo_clip_loss",
    "token_logprobs",
]
