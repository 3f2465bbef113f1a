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
from loongsage.sample import Sample


def episode_of(sample: Sample, index: int) -> Hashable:
    """The episode a sample belongs to: its trajectory, else the sample itself."""
    return sample.metadata.get("trajectory_id", ("sample", index))


def assign_episodes(samples: list[Sample], estimator: AdvantageEstimator, normalize_std: bool | None) -> None:
    """Set each sample's `advantage` (its episode's, within the episode's group) and `episode_share`."""
    episodes = [episode_of(sample, index) for index, sample in enumerate(samples)]
    first: dict[Hashable, Sample] = {}
    trained: dict[Hashable, int] = {}
    branches: dict[Hashable, int] = {}
    for episode, sample in zip(episodes, samples):
        first.setdefault(episode, sample)
        trained[episode] = trained.get(episode, 0) + trained_tokens(sample)
        branches[episode] = branches.get(episode, 0) + 1
    rewards = torch.tensor([sample.reward for sample in first.values()], dtype=torch.float32)
    groups = torch.tensor([sample.group_id for sample in first.values()])
    advantages = dict(zip(first, estimator(rewards, groups, normalize_std=normalize_std).tolist()))
    for episode, sample in zip(episodes, samples):
        sample.advantage = advantages[episode]
        total = trained[episode]
        sample.episode_share = trained_tokens(sample) / total if total else 1.0 / branches[episode]


def trained_tokens(sample: Sample) -> int:
    """Response tokens the loss trains (an empty loss_mask trains them all, as the trainer packs it)."""
    return sum(sample.loss_mask) if sample.loss_mask else len(sample.response_ids)
