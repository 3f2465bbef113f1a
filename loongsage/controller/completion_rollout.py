"""Single-completion rollout (no agent): each item's group is `group_size` sampled responses
from the engines, scored by the reward workers."""

from __future__ import annotations

from loongsage.controller.data_stream import Item
from loongsage.controller.rewards import RewardPool
from loongsage.controller.rollout import RolloutGroup
from loongsage.sample import Sample


class CompletionRolloutSource:
    def __init__(self, rollout: RolloutGroup, rewards: RewardPool, seed: int):
        self.rollout = rollout
        self.rewards = rewards
        self.seed = seed

    def rollout_group(self, index: int, item: Item) -> list[Sample]:
        """The `index`-th group of the run (counting from 0): `item`'s responses, scored."""
        samples = self.rollout.generate_group(item, index, self.seed)
        self.rewards.score(item.data, samples)
        return samples

    def close(self) -> None:
        self.rewards.close()
