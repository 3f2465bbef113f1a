"""A step's samples as episodes: an agent trajectory exported as several samples (its branches:
a sub-agent, a compaction, a program that rewrote its history) is one episode, and it counts
once, like a sample that is an episode by itself.

- Advantages: each episode's reward enters its group's statistics once, and every branch carries
  the episode's advantage (the reference computes the advantage per trajectory and copies it to
  each segment).
- Loss weight: each branch holds its share of the episode's trained tokens
  (`Sample.episode_share`). Under token_mean every trained token weighs the same, so an
  episode weighs its tokens however it is split; under the seq_mean modes an episode is one
  "sequence", its token mean over all of its branches' tokens (losses.masked_aggregate).

Pure bookkeeping over Sample lists, shared by every run mode.
"""

from __future__ import annotations

from collections.abc import Hashable

import torch

from loongsage.algorithms.advantages import AdvantageEstimator
from loongsage.algorithms.critic import CriticEstimator, explained_variance
from loongsage.config.schema import AlgorithmConfig
from loongsage.sample import Sample


def episode_of(sample: Sample, index: int) -> Hashable:
    """The episode a sample belongs to: its trajectory, else the sample itself."""
    return sample.metadata.get("trajectory_id", ("sample", index))


def assign_episodes(samples: list[Sample], estimator: AdvantageEstimator, normalize_std: bool | None) -> None:
    """Set each sample's `advantage` (its episode's, within the episode's group) and `episode_share`."""
    episodes = [episode_of(sample, index) for index, sample in enumerate(samples)]
    first: dict[Hashable, Sample] = {}
    for episode, sample in zip(episodes, samples):
        first.setdefault(episode, sample)
    rewards = torch.tensor([sample.reward for sample in first.values()], dtype=torch.float32)
    groups = torch.tensor([sample.group_id for sample in first.values()])
    advantages = dict(zip(first, estimator(rewards, groups, normalize_std=normalize_std).tolist()))
    for episode, sample in zip(episodes, samples):
        sample.advantage = advantages[episode]
    set_episode_shares(samples)


def set_episode_shares(samples: list[Sample]) -> None:
    """Each sample's `episode_share`: its part of its episode's trained tokens."""
    episodes = [episode_of(sample, index) for index, sample in enumerate(samples)]
    trained: dict[Hashable, int] = {}
    branches: dict[Hashable, int] = {}
    for episode, sample in zip(episodes, samples):
        trained[episode] = trained.get(episode, 0) + trained_tokens(sample)
        branches[episode] = branches.get(episode, 0) + 1
    for episode, sample in zip(episodes, samples):
        total = trained[episode]
        sample.episode_share = trained_tokens(sample) / total if total else 1.0 / branches[episode]


def trained_tokens(sample: Sample) -> int:
    """Response tokens the loss trains (an empty loss_mask trains them all, as the trainer packs it)."""
    return sum(sample.loss_mask) if sample.loss_mask else len(sample.response_ids)


def assign_critic_advantages(
    samples: list[Sample], values: list[list[float]], estimator: CriticEstimator, algo: AlgorithmConfig
) -> dict[str, float]:
    """With a critic (algorithm.advantage=gae): each sample's per-token advantages and returns from
    its reward and the critic's `values` of its response tokens, over the tokens the loss trains
    (a tool's output between them is not an action); `episode_share` as assign_episodes gives it.
    Each branch of an agent episode is a sequence of its own, paid the episode's reward at its end.
    Returns train/explained_variance (of the returns by the rollout's values)."""
    set_episode_shares(samples)
    trained = [_trained_positions(sample) for sample in samples]
    trained_values = [torch.tensor([row[i] for i in positions], dtype=torch.float32) for row, positions in zip(values, trained)]
    rewards = torch.tensor([sample.reward for sample in samples], dtype=torch.float32)
    advantages, returns = estimator(rewards, trained_values, gamma=algo.gamma, lam=algo.lam, normalize_std=algo.normalize_std)
    for sample, row, positions, sample_advantages, sample_returns in zip(samples, values, trained, advantages, returns):
        length = len(sample.response_ids)
        sample.advantage = 0.0
        # A teacher's per-token advantages (on-policy distillation) add up with the critic's.
        sample.token_advantages = _scattered(sample_advantages, positions, length, sample.token_advantages)
        sample.returns = _scattered(sample_returns, positions, length)
        sample.values = list(row)
    all_returns = torch.cat(returns) if returns else torch.zeros(0)
    return {
        "train/explained_variance": explained_variance(all_returns, torch.cat(trained_values) if trained_values else all_returns)
    }


def _trained_positions(sample: Sample) -> list[int]:
    return [i for i, trained in enumerate(sample.loss_mask or [1] * len(sample.response_ids)) if trained]


def _scattered(per_trained: torch.Tensor, positions: list[int], length: int, base: list[float] | None = None) -> list[float]:
    out = list(base) if base else [0.0] * length
    for position, value in zip(positions, per_trained.tolist()):
        out[position] += value
    return out
