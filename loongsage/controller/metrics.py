"""Batch statistics of a rollout, as TensorBoard scalars."""

from __future__ import annotations

import statistics

from loongsage.controller.grading_health import grading_errors
from loongsage.sample import Sample


def rollout_metrics(samples: list[Sample]) -> dict[str, float]:
    rewards = [s.reward for s in samples]
    lengths = [len(s.response_ids) for s in samples]
    groups: dict[int, list[float]] = {}
    for sample in samples:
        groups.setdefault(sample.group_id, []).append(sample.reward)
    return {
        "rollout/reward_mean": statistics.fmean(rewards),
        "rollout/reward_std": statistics.pstdev(rewards),
        "rollout/response_len_mean": statistics.fmean(lengths),
        "rollout/response_len_max": float(max(lengths)),
        "rollout/truncated_frac": sum(s.finish_reason == "length" for s in samples) / len(samples),
        "rollout/zero_variance_group_frac": sum(max(g) == min(g) for g in groups.values()) / len(groups),
        "rollout/reward_errors": float(sum("reward_error" in s.metadata for s in samples)),
        # Of those, the rewards that did not return within data.reward_timeout_s.
        "rollout/reward_timeouts": float(sum(bool(s.metadata.get("reward_timed_out")) for s in samples)),
        # Rewards of 0 because grading broke, not the patch (episodes).
        "rollout/grading_errors": float(grading_errors(samples)),
        "rollout/samples": float(len(samples)),
        **_agent_metrics(samples),
        **_per_source_metrics(samples),
    }


def _per_source_metrics(samples: list[Sample]) -> dict[str, float]:
    """Under data.mix: each source's reward and how many samples it gave."""
    by_source: dict[str, list[float]] = {}
    for sample in samples:
        if sample.metadata.get("source"):
            by_source.setdefault(sample.metadata["source"], []).append(sample.reward)
    metrics = {}
    for source, rewards in by_source.items():
        metrics[f"rollout/reward_mean/{source}"] = statistics.fmean(rewards)
        metrics[f"rollout/samples/{source}"] = float(len(rewards))
    return metrics


def _agent_metrics(samples: list[Sample]) -> dict[str, float]:
    """Per episode (not per sample): how agents ended, how many model calls they made and into
    how many branches the router split them."""
    episodes = {s.metadata["trajectory_id"]: s.metadata for s in samples if "exit_status" in s.metadata}
    if not episodes:
        return {}
    statuses = [meta["exit_status"] for meta in episodes.values()]
    return {
        "agent/episodes": float(len(episodes)),
        "agent/submitted_frac": statuses.count("submitted") / len(statuses),
        "agent/error_frac": statuses.count("error") / len(statuses),
        "agent/turns_mean": statistics.fmean(meta["episode_turns"] for meta in episodes.values()),
        "agent/branches_mean": statistics.fmean(meta["episode_branches"] for meta in episodes.values()),
        # Hosted tools (web_search, ...) the programs sent and the router left out (router.hosted_tools).
        "agent/hosted_tools_dropped": float(
            sum(sum(meta.get("hosted_tools_dropped", {}).values()) for meta in episodes.values())
        ),
        # Episodes whose program asked on past its trajectory's budget (router.max_*_per_trajectory).
        "agent/budget_exhausted_frac": sum(meta.get("budget_refusals", 0) > 0 for meta in episodes.values()) / len(episodes),
    }
