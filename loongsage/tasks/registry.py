"""Data sources and rewards chosen in config by name or by import path.

A data source is a callable taking keyword parameters and returning a sequence of items
`{"id", "prompt": [chat messages] or str, "label", ...}`.

A reward has one call shape whatever produced the response: `reward(item, result) ->
(score, info)`, `item` being the data source's dict and `result` an AgentResult (a single
completion arrives as one whose `answer` is the response). `completion_reward` adapts the
common `fn(response, label) -> float`. Anything outside the framework is reached as
"package.module:attribute" without registering it here.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from loongsage.registry import Registry
from loongsage.tasks.math.jsonl import load_gsm8k_jsonl
from loongsage.tasks.math.reward import math_reward
from loongsage.tasks.math.synthetic import SyntheticArithmetic
from loongsage.tasks.swe.reward import episode_reward as swe_episode_reward
from loongsage.tasks.swe.source import swe_synth, swe_tasks

Reward = Callable[[dict, Any], tuple[float, dict]]

DATA_SOURCES: Registry[Callable[..., Any]] = Registry("data source")
REWARDS: Registry[Reward] = Registry("reward")


def completion_reward(score: Callable[[str, str], float]) -> Reward:
    """`score(response, label) -> float` as a reward: the response is what the agent answered
    (empty when it answered nothing), the label the item's."""

    @functools.wraps(score)
    def reward(item: dict, result: Any) -> tuple[float, dict]:
        return score(result.answer or "", str(item["label"])), {}

    return reward


DATA_SOURCES.register("synthetic_arithmetic", SyntheticArithmetic)
DATA_SOURCES.register("gsm8k_jsonl", load_gsm8k_jsonl)
DATA_SOURCES.register("swe_tasks", swe_tasks)
DATA_SOURCES.register("swe_synth", swe_synth)
REWARDS.register("math", completion_reward(math_reward))
REWARDS.register("swe", swe_episode_reward)


def get_data_source(name_or_path: str) -> Callable[..., Any]:
    return DATA_SOURCES.get(name_or_path)


def get_reward(name_or_path: str) -> Reward:
    return REWARDS.get(name_or_path)
