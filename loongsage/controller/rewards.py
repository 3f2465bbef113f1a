"""Reward workers: Ray actors that score responses, so slow or crashing reward code runs
outside the controller and in parallel."""
from __future__ import annotations

import ray

from loongsage.sample import Sample


@ray.remote(num_cpus=0)
class RewardWorker:
    def __init__(self, reward_name: str):
        from loongsage.tasks.registry import get_reward_fn

        self.reward_fn = get_reward_fn(reward_name)

    def score(self, pairs: list[tuple[str, str]]) -> list[tuple[float, str | None]]:
        from loongsage.tasks.scoring import score_safely

        return [score_safely(self.reward_fn, response, label) for response, label in pairs]


class RewardPool:
    def __init__(self, reward_name: str, num_workers: int):
        from loongsage.tasks.registry import get_reward_fn

        get_reward_fn(reward_name)  # an unknown reward fails here, in the controller, by name
        self.workers = [RewardWorker.remote(reward_name) for _ in range(num_workers)]

    def score(self, samples: list[Sample]) -> int:
        """Set `sample.reward` for every sample; return how many reward calls failed."""
        shards = [samples[i :: len(self.workers)] for i in range(len(self.workers))]
        futures = [w.score.remote([(s.response_text, s.label) for s in shard]) for w, shard in zip(self.workers, shards)]
        failures = 0
        for shard, results in zip(shards, ray.get(futures)):
            for sample, (score, error) in zip(shard, results):
                sample.reward = score
                if error is not None:
                    sample.metadata["reward_error"] = error
                    failures += 1
        return failures
