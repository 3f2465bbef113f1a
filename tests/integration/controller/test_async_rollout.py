"""Rollout beside training against a real engine actor: partial rollouts across weight updates
(pause, abort, continue), token versions, and a count of every group started."""

from __future__ import annotations

import time

import pytest

from loongsage.config import Config
from loongsage.controller.completion_rollout import CompletionRolloutSource
from loongsage.controller.completion_sampler import CompletionSampler
from loongsage.controller.data_stream import DataStream
from loongsage.controller.rewards import RewardPool
from loongsage.controller.rollout_pipeline import RolloutPipeline
from loongsage.inference.fleet import EngineFleet

MAX_NEW = 48
HOLD_TIMEOUT_S = 300  # generous: CI runs on 2 loaded cores


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
    cfg = _config("fully_async").rollout
    rollout = EngineFleet(cfg, [tiny_model_path] * cfg.num_engines)
    rollout.urls  # noqa: B018 - wait for the engine
    yield rollout
    rollout.stop()


def _run(cfg: Config, rollout: EngineFleet, model_path: str, steps: int, hold: bool = False):
    """`steps` training steps with a weight update after each. `hold`: before every update but the
    last, pause the engines at a moment a response is part generated (`_pause_mid_generation`), so
    the update interrupts it whatever the load on the machine; the last update is left alone, as
    what it interrupts is never trained. Returns the batches, the pipeline's buffer and how many
    updates were held so."""
    data = DataStream(cfg.data, cfg.rollout.prompts_per_step, seed=0)
    sampler = CompletionSampler(cfg.rollout, rollout, model_path)
    source = CompletionRolloutSource(sampler, RewardPool("tests.toy_rewards:digit_fraction", 1, timeout_s=60), 0)
    version = int(rollout.clients[0].get_weight_version())
    pipeline = RolloutPipeline(cfg, data, source, rollout)
    batches, held = [], 0
    try:
        for step in range(steps):
            samples, metrics = pipeline.take(version)
            batches.append((version, samples, metrics))
            version += 1

            def push(v=version):  # the same weights under a new version: what matters is the bookkeeping
                for client in rollout.clients:
                    client.update_weights_from_disk(model_path, weight_version=str(v))

            if hold and step < steps - 1:
                held += _pause_mid_generation(rollout, pipeline)
            pipeline.update_weights(push)  # pauses (again), aborts what is in flight, pushes, continues
            if hold and step + 1 < steps - 1 and _batch_ready(pipeline, version):
                # The next take needs none of the groups the update just started: keep their requests
                # queued in the engines, so they are still to be generated when the next update comes.
                _set_paused(rollout, True)
    finally:
        _set_paused(rollout, False)
        pipeline.close()
        # The engines are shared with the next test: what this one left generating ends first.
        assert pipeline.wait_for_groups(HOLD_TIMEOUT_S) == 0, "rollout groups still running after the test"
    return batches, pipeline.pipeline.buffer, held


def _pause_mid_generation(rollout: EngineFleet, pipeline: RolloutPipeline) -> bool:
    """Leave the engines paused while one of them holds a response that has sampled tokens and has
    not finished (an engine's `running` requests are exactly those), so the weight update that
    follows interrupts it. Paused, nothing can finish; in between the engines run a few steps at a
    time. False, with the engines running, once no group is left running in the pipeline."""
    deadline = time.monotonic() + HOLD_TIMEOUT_S
    while True:
        _set_paused(rollout, True)
        if any(client.get_server_info()["running"] for client in rollout.clients):
            return True
        _set_paused(rollout, False)
        if pipeline.pipeline.buffer.running == 0:
            return False
        assert time.monotonic() < deadline, f"no response was being generated within {HOLD_TIMEOUT_S} s"
        time.sleep(0.002)


def _set_paused(rollout: EngineFleet, paused: bool) -> None:
    for client in rollout.clients:
        # in_place: held requests stay in flight, for the update's abort-mode pause to interrupt.
        client.pause_generation(mode="in_place") if paused else client.continue_generation()


def _batch_ready(pipeline: RolloutPipeline, version: int) -> bool:
    """Would a take at `version` find its batch among the groups already finished (which only a
    take removes)?"""
    buffer = pipeline.pipeline.buffer
    return bool(buffer.window.select(list(buffer.ready), version)[0])


def test_partial_rollouts_keep_tokens_across_updates_and_lose_nothing(engines, tiny_model_path):
    cfg = _config("fully_async", window="window_gated", max_staleness=2)
    batches, buffer, held = _run(cfg, engines, tiny_model_path, steps=5, hold=True)
    assert held, "no update found a response in flight to interrupt"
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
    batches, _, _ = _run(cfg, engines, tiny_model_path, steps=4)
    for step, (version, samples, _) in enumerate(batches):
        lags = {version - v for s in samples for v in s.weight_versions}
        # The first two batches both start from the first weights; after that exactly one behind.
        assert lags == ({0} if step == 0 else {1}), (step, lags)
        assert all(s.metadata["resumes"] == 0 for s in samples), "one_step_off never interrupts generation"


def test_mask_stale_tokens_masks_what_older_weights_generated(engines, tiny_model_path):
    # Oldest first: groups that lived through an update are the first to be trained.
    cfg = _config("fully_async", window="windowed_fifo", max_staleness=2, mask_stale_tokens=True)
    batches, _, held = _run(cfg, engines, tiny_model_path, steps=8, hold=True)
    assert held, "no update found a response in flight to interrupt"
    samples = [s for _, batch, _ in batches for s in batch]
    for sample in samples:
        newest = max(sample.weight_versions)
        assert sample.loss_mask == [1 if v == newest else 0 for v in sample.weight_versions]
    assert any(0 in s.loss_mask for s in samples), "some response should span a weight update"
