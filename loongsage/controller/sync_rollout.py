"""The synchronous rollout source: each step's batch is generated on demand with the
newest weights. Asynchronous sources implement the same two methods."""
from __future__ import annotations

from loongsage.config import RolloutConfig
from loongsage.controller.prompts import Prompt, PromptStream
from loongsage.controller.rewards import RewardPool
from loongsage.controller.rollout import RolloutGroup
from loongsage.sample import Sample


class SyncRolloutSource:
    def __init__(self, cfg: RolloutConfig, prompts: PromptStream, rollout: RolloutGroup, rewards: RewardPool, seed: int):
        self.cfg = cfg
        self.prompts = prompts
        self.rollout = rollout
        self.rewards = rewards
        self.seed = seed

    def next_batch(self, step: int) -> list[Sample]:
        """Sampled and scored responses for `step`, groups consecutive."""
        samples = self.rollout.generate(self.prompts.take(self.cfg.prompts_per_step), step, self.seed)
        self.rewards.score(samples)
        return samples

    def take_items(self, count: int) -> list[Prompt]:
        return self.prompts.take(count)

    def rollout_group(self, index: int, prompt: Prompt) -> list[Sample]:
        """One prompt's group, scored; `index` counts groups over the run (asynchronous modes)."""
        samples = self.rollout.generate_group(prompt, index, self.seed)
        self.rewards.score(samples)
        return samples

    def on_weights_updated(self, version: int) -> None:
        """Nothing is in flight between steps in synchronous mode."""

    def close(self) -> None:
        """Nothing of its own to stop: the engines belong to the RolloutGroup."""
