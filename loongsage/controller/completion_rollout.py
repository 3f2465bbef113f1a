"""Single-completion rollout (no agent): each item's group is `group_size` sampled responses
from the engines, scored by the reward workers."""

from __future__ import annotations

from loongsage.controller.completion_sampler import CompletionSampler
from loongsage.controller.data_stream import Item
from loongsage.controller.rewards import RewardPool
from loongsage.sample import Sample


class CompletionRolloutSource:
    def __init__(self, sampler: CompletionSampler, rewards: RewardPool, seed: int):
        self.sampler = sampler
        self.rewards = rewards
        self.seed = seed

    def rollout_group(self, index: int, item: Item) -> list[Sample]:
        """The `index`-th group of the run (counting from 0): `item`'s responses, scored."""
        samples = self.sampler.generate_group(item, index, self.seed)
        self.rewards.score(item.data, samples)
        return samples

    def close(self) -> None:
        self.sampler.close()
        self.rewards.close()
