"""Batch statistics of a rollout, as TensorBoard scalars."""
from __future__ import annotations

import statistics

from loongsage.sample import Sample


def rollout_metrics(samples: list[Sample], group_size: int) -> dict[str, float]:
    rewards = [s.reward for s in samples]
    lengths = [len(s.response_ids) for s in samples]
    groups = [rewards[i : i + group_size] for i in range(0, len(rewards), group_size)]
    return {
        "rollout/reward_mean": statistics.fmean(rewards),
        "rollout/reward_std": statistics.pstdev(rewards),
        "rollout/response_len_mean": statistics.fmean(lengths),
        "rollout/response_len_max": float(max(lengths)),
        "rollout/truncated_frac": sum(s.finish_reason == "length" for s in samples) / len(samples),
        "rollout/zero_variance_group_frac": sum(max(g) == min(g) for g in groups) / len(groups),
        "rollout/reward_errors": float(sum("reward_error" in s.metadata for s in samples)),
        "rollout/samples": float(len(samples)),
    }
