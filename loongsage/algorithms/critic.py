"""What a value model (critic) adds to RL: advantages from its values (GAE), its clipped value
loss, and how much of the returns it explains. `algorithm.advantage=gae` is PPO with a critic
(Schulman et al. 2017), as verl, AReaL, ROLL, SkyRL and NeMo-RL run it.

The estimators here read a critic, so their signature is not the outcome estimators' of
advantages.py: CRITIC_ESTIMATORS entries take each episode's reward and the critic's value of
each of its trained tokens, and give per-token advantages and returns.

Pure tensor code: no Ray, HTTP or config.
"""

from __future__ import annotations

from typing import Protocol

import torch
from torch import Tensor

from loongsage.algorithms.losses import Aggregation
from loongsage.registry import Registry


def gae(token_rewards: Tensor, values: Tensor, gamma: float, lam: float) -> tuple[Tensor, Tensor]:
    """Generalized advantage estimation (Schulman et al. 2016) over one sequence of actions:
    delta_t = r_t + gamma * V_{t+1} - V_t (V after the last action is 0: the episode ended),
    A_t = sum_l (gamma * lam)^l delta_{t+l}; returns R_t = A_t + V_t (the value loss's target).
    token_rewards, values: [L] -> (advantages [L], returns [L]), float32."""
    values = values.float()
    advantages = torch.zeros_like(values)
    running = torch.zeros(())
    for t in range(len(values) - 1, -1, -1):
        next_value = values[t + 1] if t + 1 < len(values) else torch.zeros(())
        delta = token_rewards[t] + gamma * next_value - values[t]
        running = delta + gamma * lam * running
        advantages[t] = running
    return advantages, advantages + values


def outcome_gae(
    rewards: Tensor, values: list[Tensor], gamma: float, lam: float, normalize_std: bool | None = None, eps: float = 1e-6
) -> tuple[list[Tensor], list[Tensor]]:
    """GAE for outcome rewards: episode i's reward is paid at its last trained token, 0 before.
    `values[i]`: the critic's value of each trained token of episode i (the actions; a tool's
    output between them is not one). normalize_std (None: on) whitens the advantages over every
    token of the batch, (A - mean) / std, as PPO does; returns are left as they are."""
    advantages, returns = [], []
    for reward, episode_values in zip(rewards.tolist(), values):
        token_rewards = torch.zeros(len(episode_values))
        if len(episode_values):
            token_rewards[-1] = reward
        episode_advantages, episode_returns = gae(token_rewards, episode_values, gamma, lam)
        advantages.append(episode_advantages)
        returns.append(episode_returns)
    if normalize_std is None or normalize_std:
        advantages = _whitened(advantages, eps)
    return advantages, returns


def clipped_value_loss(
    values: Tensor, old_values: Tensor, returns: Tensor, mask: Tensor, clip: float, aggregation: Aggregation
) -> Tensor:
    """PPO's value loss: 0.5 * max((V - R)^2, (V_old + clip(V - V_old, -clip, clip) - R)^2) per
    token, aggregated over the trained tokens: the critic moves at most `clip` from the values
    it gave at rollout before the loss stops pulling it. [B, T] -> scalar."""
    old_values, returns = old_values.detach(), returns.detach()
    clipped = old_values + (values - old_values).clamp(-clip, clip)
    per_token = 0.5 * torch.maximum((values - returns).square(), (clipped - returns).square())
    return aggregation(per_token, mask)


# Below this the returns are one value up to float32 rounding (relative 6e-8 of a return near 1).
CONSTANT_RETURNS_VARIANCE = 1e-12


def explained_variance(returns: Tensor, values: Tensor) -> float:
    """1 - Var(R - V) / Var(R) over matching 1-D tensors: 1 when the critic predicts the returns,
    0 when it does no better than their mean, negative when worse. 0.0 when the returns do not vary:
    a batch whose every reward is equal has returns equal up to float32 rounding (R = A + V), and
    dividing by that rounding's variance gave -1.4e10 at the last step of a measured PPO run."""
    variance = returns.double().var(unbiased=False)
    if returns.numel() < 2 or variance <= CONSTANT_RETURNS_VARIANCE:
        return 0.0
    return float(1.0 - (returns.double() - values.double()).var(unbiased=False) / variance)


def _whitened(per_episode: list[Tensor], eps: float) -> list[Tensor]:
    tokens = torch.cat(per_episode) if per_episode else torch.zeros(0)
    if tokens.numel() < 2:
        return per_episode
    mean, std = tokens.mean(), tokens.std()
    return [(episode - mean) / (std + eps) for episode in per_episode]


class CriticEstimator(Protocol):
    """What `algorithm.advantage` names when it reads a critic: per-episode rewards [N] and the
    critic's values of each episode's trained tokens -> (per-token advantages, per-token returns),
    one [L_i] tensor each per episode. Called as `estimator(rewards, values, gamma=..., lam=...,
    normalize_std=...)`."""

    def __call__(
        self, rewards: Tensor, values: list[Tensor], gamma: float, lam: float, normalize_std: bool | None
    ) -> tuple[list[Tensor], list[Tensor]]: ...


CRITIC_ESTIMATORS: Registry[CriticEstimator] = Registry("critic advantage estimator")
CRITIC_ESTIMATORS.register("gae", outcome_gae)


def reads_critic(advantage: str) -> bool:
    """Whether `algorithm.advantage` names a critic's estimator (a value model must be trained)."""
    return advantage in CRITIC_ESTIMATORS
