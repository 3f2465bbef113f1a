"""Reward workers: Ray actors that score single completions, so slow or crashing reward code
runs outside the controller and in parallel. (An agent episode is scored in its own episode
thread, where its workspace is.)"""

from __future__ import annotations

import ray

from loongsage.sample import Sample


@ray.remote(num_cpus=0)
class RewardWorker:
    def __init__(self, reward_name: str):
        from loongsage.tasks.registry import get_reward

        self.reward = get_reward(reward_name)

    def score(self, item: dict, responses: list[str]) -> list[tuple[float, dict, str | None]]:
        from loongsage.agentflow.agents.base import AgentResult
        from loongsage.tasks.scoring import score_safely

        # A single completion is an episode whose answer is the whole response.
        return [score_safely(self.reward, item, AgentResult(exit_status="submitted", answer=response)) for response in responses]


class RewardPool:
    def __init__(self, reward_name: str, num_workers: int):
        from loongsage.tasks.registry import get_reward

        get_reward(reward_name)  # an unknown reward fails here, in the controller, by name
        self.workers = [RewardWorker.remote(reward_name) for _ in range(num_workers)]

    def score(self, item: dict, samples: list[Sample]) -> int:
        """Set `reward` (and `metadata["reward_info"]`) of every sample of `item`; return how many
        reward calls failed."""
        shards = [samples[i :: len(self.workers)] for i in range(len(self.workers))]
        futures = [w.score.remote(item, [s.response_text for s in shard]) for w, shard in zip(self.workers, shards) if shard]
        failures = 0
        for shard, results in zip(shards, ray.get(futures)):
            for sample, (score, info, error) in zip(shard, results):
                sample.reward = score
                if info:
                    sample.metadata["reward_info"] = info
                if error is not None:
                    sample.metadata["reward_error"] = error
                    failures += 1
        return failures

    def close(self) -> None:
        for worker in self.workers:
            ray.kill(worker)
