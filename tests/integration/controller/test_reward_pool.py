"""Reward workers are Ray actors; a reward that raises costs one sample's reward."""

from __future__ import annotations

import pytest

from loongsage.controller.rewards import RewardPool
from loongsage.sample import Sample


def test_crashing_reward_scores_zero_and_is_counted(ray_runtime):
    pool = RewardPool("tests.toy_rewards:explode_on_sevens", num_workers=2)
    samples = [Sample(prompt_ids=[1], response_text=text) for text in ("12", "17", "3", "77")]
    failures = pool.score({"id": "a", "prompt": "?", "label": "x"}, samples)
    assert failures == 2
    assert [s.reward for s in samples] == [1.0, 0.0, 1.0, 0.0]
    assert "cannot handle sevens" in samples[1].metadata["reward_error"]
    assert "reward_error" not in samples[0].metadata


def test_math_reward_through_workers_reads_the_items_label(ray_runtime):
    pool = RewardPool("math", num_workers=1)
    samples = [Sample(prompt_ids=[1], response_text=text) for text in ("\\boxed{12}", "it is 11", "", "}{\\boxed{")]
    assert pool.score({"id": "a", "prompt": "?", "label": "12"}, samples) == 0
    assert [s.reward for s in samples] == [1.0, 0.0, 0.0, 0.0]


def test_unknown_reward_is_named_before_workers_start(ray_runtime):
    with pytest.raises(ValueError, match="unknown reward 'nope'"):
        RewardPool("nope", num_workers=1)
