"""Reward workers: Ray actors that score single completions, so slow or crashing reward code
runs outside the controller and in parallel. (An agent episode is scored in its own episode
thread, where its workspace is.)

A reward that hangs scores 0 after data.reward_timeout_s, and its worker (which still holds the
hung call's thread) is replaced; a worker that stops answering altogether (a call that never
yields the interpreter) is killed and replaced at a deadline of its own."""

from __future__ import annotations

import logging
import threading

import ray
from ray.exceptions import GetTimeoutError, RayActorError

from loongsage.sample import Sample

log = logging.getLogger(__name__)

# Beyond a shard's reward calls: Ray's call overhead, and a worker busy with another group's shard.
WORKER_DEADLINE_SLACK_S = 30.0


@ray.remote(num_cpus=0)
class RewardWorker:
    def __init__(self, reward_name: str, timeout_s: float):
        from loongsage.tasks.registry import get_reward

        self.reward = get_reward(reward_name)
        self.timeout_s = timeout_s

    def score(self, item: dict, responses: list[str]) -> list[tuple[float, dict, str | None, bool]]:
        from loongsage.agentflow.agents.base import AgentResult
        from loongsage.tasks.scoring import score_within

        # A single completion is an episode whose answer is the whole response.
        return [
            tuple(score_within(self.reward, item, AgentResult(exit_status="submitted", answer=response), self.timeout_s))
            for response in responses
        ]


class RewardPool:
    def __init__(self, reward_name: str, num_workers: int, timeout_s: float):
        from loongsage.tasks.registry import get_reward

        get_reward(reward_name)  # an unknown reward fails here, in the controller, by name
        self.reward_name, self.timeout_s = reward_name, timeout_s
        self.workers = [self._new_worker() for _ in range(num_workers)]
        self._lock = threading.Lock()  # group threads score at once; a replacement happens once

    def score(self, item: dict, samples: list[Sample]) -> int:
        """Set `reward` (and `metadata["reward_info"]`) of every sample of `item`; return how many
        reward calls failed (raised, returned no number, or timed out)."""
        workers = list(self.workers)
        shards = [samples[i :: len(workers)] for i in range(len(workers))]
        calls = [(w, shard, w.score.remote(item, [s.response_text for s in shard])) for w, shard in zip(workers, shards) if shard]
        failures = 0
        for worker, shard, future in calls:
            results = self._results(item, worker, shard, future)
            for sample, (score, info, error, timed_out) in zip(shard, results):
                sample.reward = score
                if info:
                    sample.metadata["reward_info"] = info
                if error is not None:
                    sample.metadata["reward_error"] = error
                    failures += 1
                if timed_out:
                    sample.metadata["reward_timed_out"] = True
        return failures

    def close(self) -> None:
        for worker in self.workers:
            ray.kill(worker)

    def _results(self, item: dict, worker, shard: list[Sample], future) -> list[tuple]:
        """The shard's scores; a worker with a hung call in it (or hung itself) is replaced. A call
        queued on a worker that another group's thread replaced meanwhile is sent again."""
        deadline = self.timeout_s * len(shard) + WORKER_DEADLINE_SLACK_S
        try:
            results = ray.get(future, timeout=deadline)
        except RayActorError:
            if worker in self.workers:
                raise  # it died of something else: not ours to hide
            replacement = self.workers[0]
            return self._results(item, replacement, shard, replacement.score.remote(item, [s.response_text for s in shard]))
        except GetTimeoutError:
            self._replace(worker)
            reason = (
                f"reward timed out: its worker did not answer within {deadline:g} s (data.reward_timeout_s={self.timeout_s:g})"
            )
            return [(0.0, {}, reason, True)] * len(shard)
        if any(timed_out for *_, timed_out in results):
            self._replace(worker)
        return results

    def _replace(self, worker) -> None:
        with self._lock:
            if worker not in self.workers:
                return  # another group's thread replaced it already
            self.workers[self.workers.index(worker)] = self._new_worker()
        ray.kill(worker)
        log.warning(
            "a %s reward call hung past data.reward_timeout_s=%g s: scored 0, its worker replaced",
            self.reward_name,
            self.timeout_s,
        )

    def _new_worker(self):
        return RewardWorker.remote(self.reward_name, self.timeout_s)
