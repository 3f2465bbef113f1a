"""Rollout beside training against a real engine actor: partial rollouts across weight updates
(pause, abort, continue), token versions, and a count of every group started."""
from __future__ import annotations

import pytest

from loongsage.config import Config
from loongsage.controller.async_rollout import AsyncRollout
from loongsage.controller.prompts import PromptStream
from loongsage.controller.rewards import RewardPool
from loongsage.controller.rollout import RolloutGroup
from loongsage.controller.sync_rollout import SyncRolloutSource
from loongsage.models import load_tokenizer

MAX_NEW = 48


def _config(mode: str, **pipeline) -> Config:
    cfg = Config()
    cfg.model.name = "tiny"
    cfg.run.mode = mode
    cfg.rollout.prompts_per_step, cfg.rollout.group_size, cfg.rollout.max_new_tokens = 2, 3, MAX_NEW
    cfg.rollout.max_context, cfg.rollout.num_threads = 256, 1
    for key, value in pipeline.items():
        setattr(cfg.pipeline, key, value)
    return cfg


@pytest.fixture(scope="module")
def engines(ray_runtime, tiny_model_path):
    rollout = RolloutGroup(_config("fully_async").rollout, tiny_model_path)
    rollout.urls  # noqa: B018 - wait for the engine
    yield rollout
    rollout.shutdown()


def _run(cfg: Config, rollout: RolloutGroup, model_path: str, steps: int):
    prompts = PromptStream(cfg.data, load_tokenizer(model_path), seed=0)
    source = SyncRolloutSource(cfg.rollout, prompts, rollout, RewardPool("tests.integration.toy_rewards:digit_fraction", 1), 0)
    version = int(rollout.clients[0].get_weight_version())
    pipeline = AsyncRollout(cfg, source, rollout)
    batches = []
    try:
        for _ in range(steps):
            samples, metrics = pipeline.take(version)
            batches.append((version, samples, metrics))
            version += 1

            def push(v=version):  # the same weights under a new version: what matters is the bookkeeping
                for client in rollout.clients:
                    client.update_weights_from_disk(model_path, weight_version=str(v))

            pipeline.update_weights(push)
    finally:
        pipeline.close()
    return batches, pipeline.pipeline.buffer


def test_partial_rollouts_keep_tokens_across_updates_and_lose_nothing(engines, tiny_model_path):
    cfg = _config("fully_async", window="window_gated", max_staleness=2)
    batches, buffer = _run(cfg, engines, tiny_model_path, steps=5)
    trained = [s.group_id for _, samples, _ in batches for s in samples[:: cfg.rollout.group_size]]
    assert len(trained) == len(set(trained)) == 5 * cfg.rollout.prompts_per_step, "a group trained twice"
    # Every group started is trained, dropped, ready or still running: none lost.
    assert buffer.next_index == buffer.trained + buffer.dropped_stale + buffer.filtered + len(buffer.ready) + buffer.running
    resumed = [s for _, samples, _ in batches for s in samples if s.metadata["resumes"] > 0]
    assert resumed, "no generation was in flight at a weight update"
    for version, samples, metrics in batches:
        assert metrics["async/staleness_max"] <= 2
        for sample in samples:
            n = len(sample.response_ids)
            assert n <= MAX_NEW and len(sample.response_logprobs) == len(sample.weight_versions) == n
            assert sample.weight_versions == sorted(sample.weight_versions), "versions must only move forward"
            assert version - sample.weight_versions[0] <= 2
    mixed = [s for s in resumed if len(set(s.weight_versions)) > 1]
    assert mixed, "a resumed response should carry tokens of two versions"
    assert sum(m["async/resumed_requests"] for _, _, m in batches) >= len(resumed)


def test_one_step_off_trains_on_the_previous_version_only(engines, tiny_model_path):
    cfg = _config("one_step_off")
    batches, _ = _run(cfg, engines, tiny_model_path, steps=4)
    for step, (version, samples, metrics) in enumerate(batches):
        lags = {version - v for s in samples for v in s.weight_versions}
        # The first two batches both start from the first weights; after that exactly one behind.
        assert lags == ({0} if step == 0 else {1}), (step, lags)
        assert all(s.metadata["resumes"] == 0 for s in samples), "one_step_off never interrupts generation"


def test_mask_stale_tokens_masks_what_older_weights_generated(engines, tiny_model_path):
    # Oldest first: groups that lived through an update are the first to be trained.
    cfg = _config("fully_async", window="windowed_fifo", max_staleness=2, mask_stale_tokens=True)
    batches, _ = _run(cfg, engines, tiny_model_path, steps=8)
    samples = [s for _, batch, _ in batches for s in batch]
    for sample in samples:
        newest = max(sample.weight_versions)
        assert sample.loss_mask == [1 if v == newest else 0 for v in sample.weight_versions]
    assert any(0 in s.loss_mask for s in samples), "some response should span a weight update"
