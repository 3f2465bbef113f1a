"""Advantages from per-episode rewards, and the registry `algorithm.advantage` chooses from:
grpo, dr_grpo and rloo compare an episode with the others of its group (the responses to one
prompt); reinforce_pp normalises over the whole batch.

Pure tensor code; the controller decides what a group is.
"""

from __future__ import annotations

from typing import Protocol

import torch
from torch import Tensor

from loongsage.registry import Registry


def grpo_advantages(rewards: Tensor, group_size: int, normalize_std: bool = True, eps: float = 1e-6) -> Tensor:
    """Reward minus its group mean, optionally divided by the group std (+eps).

    A group whose rewards are all equal carries no learning signal; its advantages are
    exactly 0 (not rounding noise amplified by 1/eps).
    """
    groups = _as_groups(rewards, group_size)
    advantages = groups - groups.mean(dim=1, keepdim=True)
    if normalize_std:
        advantages = advantages / (_group_std(groups) + eps)
    constant = _constant_groups(groups)
    advantages = torch.where(constant, torch.zeros_like(advantages), advantages)
    return advantages.reshape(-1)


def grouped_advantages(rewards: Tensor, group_ids: Tensor, normalize_std: bool | None = None, eps: float = 1e-6) -> Tensor:
    """GRPO (Shao et al. 2024, DeepSeekMath): `grpo_advantages` for groups named by id instead of
    by position: groups may be interleaved and of different sizes (an agent episode that crashed
    before its first model call leaves its group one member short). normalize_std: None is on.
    rewards, group_ids: [N] -> [N]."""
    normalize_std = True if normalize_std is None else normalize_std
    return _per_group(rewards, group_ids, lambda group: grpo_advantages(group, group.numel(), normalize_std, eps))


def dr_grpo_advantages(rewards: Tensor, group_ids: Tensor, normalize_std: bool | None = None) -> Tensor:
    """Dr. GRPO (Liu et al. 2025, "Understanding R1-Zero-Like Training: A Critical Perspective"):
    reward minus its group's mean, never divided by the std (which weighs questions by how
    (un)certain the model is, easy and hard ones most). Its other half is the loss's constant
    length, algorithm.loss_aggregation=seq_mean_token_sum_norm."""
    if normalize_std:
        raise ValueError("Dr. GRPO divides the advantages by no std: normalize_std must be false or unset")
    return grouped_advantages(rewards, group_ids, normalize_std=False)


def rloo_advantages(rewards: Tensor, group_ids: Tensor, normalize_std: bool | None = None, eps: float = 1e-6) -> Tensor:
    """RLOO (Ahmadian et al. 2024, "Back to Basics: Revisiting REINFORCE Style Optimization for
    Learning from Human Feedback in LLMs"; Kool et al. 2019): each reward minus the mean of the
    other rewards of its group, r_i - (sum_j r_j - r_i) / (G - 1) = G / (G - 1) * (r_i - mean).
    A group of one has no other member to leave out: 0. normalize_std (None: off) also divides
    by the group's std."""

    def leave_one_out(group: Tensor) -> Tensor:
        size = group.numel()
        if size == 1:
            return torch.zeros_like(group)
        advantages = grpo_advantages(group, size, normalize_std=False) * size / (size - 1)
        if normalize_std:
            advantages = advantages / (_group_std(group.reshape(1, -1)).reshape(-1) + eps)
        return advantages

    return _per_group(rewards, group_ids, leave_one_out)


def reinforce_pp_advantages(rewards: Tensor, group_ids: Tensor, normalize_std: bool | None = None, eps: float = 1e-6) -> Tensor:
    """REINFORCE++ (Hu 2025, "REINFORCE++: A Simple and Efficient Approach for Aligning Large
    Language Models"): the return (here the episode's outcome reward) normalised over the whole
    batch, (r - mean_batch) / std_batch, instead of per group: no group statistics, so it needs
    no group and a prompt's lone response still learns. normalize_std (None: on) divides by the
    batch std. `group_ids` is not read. (The KL penalty REINFORCE++ folds into the reward is
    algorithm.kl_coef here, a loss term.)"""
    _check_grouped(rewards, group_ids)
    normalize_std = True if normalize_std is None else normalize_std
    return grpo_advantages(rewards.float(), rewards.numel(), normalize_std, eps)


def _per_group(rewards: Tensor, group_ids: Tensor, estimate) -> Tensor:
    """`estimate(group's rewards) -> its advantages`, for every group."""
    _check_grouped(rewards, group_ids)
    advantages = torch.zeros_like(rewards, dtype=torch.float32)
    for group in group_ids.unique():
        members = group_ids == group
        advantages[members] = estimate(rewards[members].float())
    return advantages


class AdvantageEstimator(Protocol):
    """What `algorithm.advantage` names: per-sample advantages from per-sample rewards and the
    id of each sample's group. rewards, group_ids: [N] -> float [N]; groups may be interleaved
    and of different sizes. The controller calls it as `estimator(rewards, group_ids, normalize_std=...)`
    with algorithm.normalize_std: None leaves the choice to the estimator."""

    def __call__(self, rewards: Tensor, group_ids: Tensor, normalize_std: bool | None) -> Tensor: ...


ADVANTAGE_ESTIMATORS: Registry[AdvantageEstimator] = Registry("advantage estimator")
ADVANTAGE_ESTIMATORS.register("grpo", grouped_advantages)
ADVANTAGE_ESTIMATORS.register("dr_grpo", dr_grpo_advantages)
ADVANTAGE_ESTIMATORS.register("rloo", rloo_advantages)
ADVANTAGE_ESTIMATORS.register("reinforce_pp", reinforce_pp_advantages)
# The estimators that compare an episode with the rest of its group: a group needs two members.
GROUP_RELATIVE = ("grpo", "dr_grpo", "rloo")


def get_advantage(name_or_path: str) -> AdvantageEstimator:
    """The estimator `algorithm.advantage` names: a registered name or "package.module:function"."""
    return ADVANTAGE_ESTIMATORS.get(name_or_path)


def informative_groups(rewards: Tensor, group_ids: Tensor) -> Tensor:
    """Per sample, whether its group's rewards differ (DAPO's dynamic sampling): a group
    whose rewards are all equal has zero advantages and no learning signal, yet still
    dilutes the batch. rewards, group_ids: [N] -> bool [N]."""
    _check_grouped(rewards, group_ids)
    informative = torch.zeros(rewards.shape, dtype=torch.bool)
    for group in group_ids.unique():
        members = group_ids == group
        informative[members] = not _constant_groups(rewards[members].float().reshape(1, -1)).item()
    return informative


def group_reward_std(rewards: Tensor, group_size: int) -> Tensor:
    """Per-group reward std, shape [N // group_size]; exactly 0 for all-equal groups,
    so `(group_reward_std(r, g) == 0).float().mean()` is the zero-variance fraction."""
    groups = _as_groups(rewards, group_size)
    std = _group_std(groups)
    return torch.where(_constant_groups(groups), torch.zeros_like(std), std).reshape(-1)


def _as_groups(rewards: Tensor, group_size: int) -> Tensor:
    if rewards.dim() != 1:
        raise ValueError(f"rewards must be 1-D [N], got shape {tuple(rewards.shape)}")
    if group_size < 1:
        raise ValueError(f"group_size must be >= 1, got {group_size}")
    if rewards.numel() % group_size != 0:
        raise ValueError(f"number of rewards ({rewards.numel()}) is not divisible by group_size={group_size}")
    return rewards.float().reshape(-1, group_size)


def _check_grouped(rewards: Tensor, group_ids: Tensor) -> None:
    if rewards.shape != group_ids.shape or rewards.dim() != 1:
        raise ValueError(f"rewards {tuple(rewards.shape)} and group_ids {tuple(group_ids.shape)} must be the same 1-D shape")


def _group_std(groups: Tensor) -> Tensor:
    # Unbiased std as in the GRPO reference implementations; a group of one sample
    # has no spread to measure, so it is 0 rather than NaN.
    if groups.shape[1] == 1:
        return torch.zeros_like(groups)
    return groups.std(dim=1, keepdim=True)


def _constant_groups(groups: Tensor) -> Tensor:
    return (groups == groups[:, :1]).all(dim=1, keepdim=True)
