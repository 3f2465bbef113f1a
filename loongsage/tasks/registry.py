"""Data sources and reward functions chosen in config by name or by import path.

A data source is a callable taking keyword parameters and returning a sequence of items
`{"id", "prompt": [chat messages], "label"}`; a reward function is
`fn(response: str, label: str) -> float`. Anything outside the framework is reached as
"package.module:attribute" without registering it here.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

from loongsage.registry import resolve
from loongsage.tasks.math.jsonl import load_gsm8k_jsonl
from loongsage.tasks.math.reward import answer_reward, math_reward
from loongsage.tasks.math.synthetic import SyntheticArithmetic
from loongsage.tasks.swe.reward import episode_reward as swe_episode_reward
from loongsage.tasks.swe.source import swe_synth, swe_tasks

DATA_SOURCES: dict[str, Callable[..., Any]] = {
    "synthetic_arithmetic": SyntheticArithmetic,
    "gsm8k_jsonl": load_gsm8k_jsonl,
    "swe_tasks": swe_tasks,
    "swe_synth": swe_synth,
}
REWARD_FUNCTIONS: dict[str, Callable[[str, str], float]] = {
    "math": math_reward,
}
# Rewards of agent episodes: `fn(item, agent_result) -> (reward, info)`, item being the data
# source's item and agent_result an AgentResult (answer, patch, exit_status, ...).
EPISODE_REWARDS: dict[str, Callable[[dict, Any], tuple[float, dict]]] = {
    "swe": swe_episode_reward,
    "math": answer_reward,
}


def get_data_source(name_or_path: str) -> Callable[..., Any]:
    return resolve(DATA_SOURCES, name_or_path, "data source")


def get_episode_reward(name_or_path: str) -> Callable[[dict, Any], tuple[float, dict]]:
    return resolve(EPISODE_REWARDS, name_or_path, "episode reward")


def get_reward_fn(name_or_path: str) -> Callable[[str, str], float]:
    return resolve(REWARD_FUNCTIONS, name_or_path, "reward function")
