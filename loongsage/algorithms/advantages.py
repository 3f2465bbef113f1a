"""Group-relative advantages (GRPO), and the registry `algorithm.advantage` chooses from.

Samples of one prompt sit next to each other: rewards[k*group_size:(k+1)*group_size]
is group k. Pure tensor code; the controller decides what a group is.
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


def grouped_advantages(rewards: Tensor, group_ids: Tensor, normalize_std: bool = True, eps: float = 1e-6) -> Tensor:
    """`grpo_advantages` for groups named by id instead of by position: groups may be
    interleaved and of different sizes (an agent episode that crashed before its first model
    call leaves its group one member short). rewards, group_ids: [N] -> [N]."""
    _check_grouped(rewards, group_ids)
    advantages = torch.zeros_like(rewards, dtype=torch.float32)
    for group in group_ids.unique():
        members = group_ids == group
        group_rewards = rewards[members].float()
        advantages[members] = grpo_advantages(group_rewards, group_rewards.numel(), normalize_std, eps)
    return advantages


class AdvantageEstimator(Protocol):
    """What `algorithm.advantage` names: per-sample advantages from per-sample rewards and the
    id of each sample's group. rewards, group_ids: [N] -> float [N]; groups may be interleaved
    and of different sizes. The controller calls it as `estimator(rewards, group_ids, normalize_std=...)`."""

    def __call__(self, rewards: Tensor, group_ids: Tensor, normalize_std: bool) -> Tensor: ...


ADVANTAGE_ESTIMATORS: Registry[AdvantageEstimator] = Registry("advantage estimator")
ADVANTAGE_ESTIMATORS.register("grpo", grouped_advantages)


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
