"""Reward workers are Ray actors; a reward that raises or hangs costs one sample's reward, and a
worker holding a hung call (or hung itself) is replaced."""

from __future__ import annotations

import time

import pytest
import ray

from loongsage.controller.rewards import RewardPool
from loongsage.sample import Sample


def test_crashing_reward_scores_zero_and_is_counted(ray_runtime):
    pool = RewardPool("tests.toy_rewards:explode_on_sevens", num_workers=2, timeout_s=60)
    samples = [Sample(prompt_ids=[1], response_text=text) for text in ("12", "17", "3", "77")]
    failures = pool.score({"id": "a", "prompt": "?", "label": "x"}, samples)
    assert failures == 2
    assert [s.reward for s in samples] == [1.0, 0.0, 1.0, 0.0]
    assert "cannot handle sevens" in samples[1].metadata["reward_error"]
    assert "reward_error" not in samples[0].metadata


def test_math_reward_through_workers_reads_the_items_label(ray_runtime):
    pool = RewardPool("math", num_workers=1, timeout_s=60)
    samples = [Sample(prompt_ids=[1], response_text=text) for text in ("\\boxed{12}", "it is 11", "", "}{\\boxed{")]
    assert pool.score({"id": "a", "prompt": "?", "label": "12"}, samples) == 0
    assert [s.reward for s in samples] == [1.0, 0.0, 0.0, 0.0]


def test_unknown_reward_is_named_before_workers_start(ray_runtime):
    with pytest.raises(ValueError, match="unknown reward 'nope'"):
        RewardPool("nope", num_workers=1, timeout_s=60)


def test_a_hanging_reward_scores_zero_with_the_reason_and_its_worker_is_replaced(ray_runtime):
    pool = RewardPool("tests.toy_rewards:hang_on_sevens", num_workers=1, timeout_s=1.0)
    hung_worker = pool.workers[0]
    samples = [Sample(prompt_ids=[1], response_text=text) for text in ("12", "17", "3")]
    started = time.monotonic()
    assert pool.score({"id": "a", "prompt": "?", "label": "x"}, samples) == 1
    assert time.monotonic() - started < 10  # the hung call was given up on at 1 s, not waited for
    assert [s.reward for s in samples] == [1.0, 0.0, 1.0]
    assert samples[1].metadata["reward_error"] == "reward timed out: no score within data.reward_timeout_s=1 s"
    assert samples[1].metadata["reward_timed_out"] is True and "reward_timed_out" not in samples[0].metadata
    assert pool.workers[0] != hung_worker
    again = [Sample(prompt_ids=[1], response_text="42")]
    assert pool.score({"id": "b", "prompt": "?", "label": "x"}, again) == 0 and again[0].reward == 1.0
    pool.close()


def test_a_reward_that_stalls_its_whole_worker_is_killed_at_the_deadline(ray_runtime, monkeypatch):
    """The regular expression holds the interpreter lock, so the worker cannot even give up on the
    call: the pool's own deadline (calls x timeout + slack) kills and replaces it."""
    from loongsage.controller import rewards

    monkeypatch.setattr(rewards, "WORKER_DEADLINE_SLACK_S", 2.0)
    pool = RewardPool("tests.toy_rewards:seize_on_sevens", num_workers=1, timeout_s=1.0)
    stalled = pool.workers[0]
    samples = [Sample(prompt_ids=[1], response_text=text) for text in ("7", "8")]
    assert pool.score({"id": "a", "prompt": "?", "label": "x"}, samples) == 2
    assert all(s.reward == 0.0 and s.metadata["reward_timed_out"] for s in samples)
    assert "its worker did not answer within 4 s" in samples[0].metadata["reward_error"]
    with pytest.raises(ray.exceptions.RayActorError):
        ray.get(stalled.score.remote({}, []), timeout=30)
    fresh = [Sample(prompt_ids=[1], response_text="8")]
    assert pool.score({"id": "b", "prompt": "?", "label": "x"}, fresh) == 0 and fresh[0].reward == 1.0
    pool.close()
