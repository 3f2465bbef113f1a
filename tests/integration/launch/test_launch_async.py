"""The asynchronous modes through the real entry point: max_staleness=0 is the synchronous run,
and the async metrics reach TensorBoard with the staleness bound held."""

from __future__ import annotations

import json

import pytest

from tests.integration.launch.test_launch import TINY_RUN, launch, scalars

TINY = [
    *TINY_RUN,
    "data.reward=tests.toy_rewards:e_fraction",
    "run.steps=3",
]
ASYNC_TAGS = [
    "async/staleness_mean",
    "async/staleness_max",
    "async/trainer_idle_ratio",
    "async/rollout_idle_ratio",
    "async/buffer_ready",
    "async/dropped_stale",
    "async/stale_token_frac",
]


def _responses(run_dir) -> list[tuple[int, str, float]]:
    rows = [json.loads(line) for line in (run_dir / "rollouts.jsonl").read_text().splitlines()]
    return [(r["step"], r["response"], r["reward"]) for r in rows]


def _run(tmp_path, name: str, *overrides: str):
    run_dir = tmp_path / name
    result = launch(*TINY, f"run.dir={run_dir}", *overrides)
    assert result.returncode == 0, result.stderr[-4000:]
    return run_dir


def test_max_staleness_zero_reproduces_the_synchronous_run(tmp_path):
    sync = _run(tmp_path, "sync")
    gated = _run(tmp_path, "async0", "run.mode=fully_async", "pipeline.max_staleness=0", "pipeline.window=window_gated")
    assert _responses(gated) == _responses(sync)
    expected, got = scalars(sync), scalars(gated)
    for tag in ("rollout/reward_mean", "rollout/response_len_mean", "train/loss", "train/grad_norm", "train/entropy"):
        for step in (1, 2, 3):
            assert got[tag][step] == pytest.approx(expected[tag][step], rel=1e-5, abs=1e-7), (tag, step)
    assert set(got["async/staleness_max"].values()) == {0.0}


def test_fully_async_run_logs_its_pipeline_and_holds_the_bound(tmp_path):
    run_dir = _run(
        tmp_path,
        "async2",
        "run.mode=fully_async",
        "pipeline.max_staleness=2",
        "pipeline.window=windowed_fifo",
        "algorithm.is_level=token",
        "algorithm.is_mode=truncate",
    )
    logged = scalars(run_dir)
    for tag in [*ASYNC_TAGS, "train/is_weight_mean", "train/is_clip_frac"]:
        assert sorted(logged[tag]) == [1, 2, 3], tag
    assert max(logged["async/staleness_max"].values()) <= 2
    assert all(0.0 <= v <= 1.0 for tag in ("async/trainer_idle_ratio", "async/rollout_idle_ratio") for v in logged[tag].values())


def test_one_step_off_trains_one_version_behind(tmp_path):
    run_dir = _run(tmp_path, "one_step_off", "run.mode=one_step_off")
    staleness = scalars(run_dir)["async/staleness_max"]
    assert staleness == {1: 0.0, 2: 1.0, 3: 1.0}


def test_colocate_refuses_asynchronous_modes():
    result = launch(*TINY, "run.mode=fully_async", "run.placement=colocate", "run.dir=/nonexistent/never-made")
    assert result.returncode == 2 and "run.placement=colocate needs run.mode=sync" in result.stderr


def test_resume_replays_what_rollout_had_taken_but_not_trained(tmp_path):
    """A checkpoint of an asynchronous run records the items in flight; the resumed run trains
    them, no item is trained twice, and every item taken from the data is accounted for."""
    every_sample = [
        "logging.rollouts_per_step=16",
        "run.save_every=1",
        "run.mode=fully_async",
        "pipeline.max_staleness=3",
        "pipeline.window=windowed_fifo",
    ]
    run_dir = _run(tmp_path, "resumed", *every_sample, "run.steps=2")
    pending = _checkpoint(run_dir, 2)["data"]["pending"]
    assert pending, "rollout runs ahead of training, so the checkpoint must hold items in flight"
    before_resume = {item for _, item in _trained_items(run_dir)}
    result = launch(*TINY, f"run.dir={run_dir}", *every_sample, "run.steps=4")
    assert result.returncode == 0, result.stderr[-4000:]
    after_resume = [item for step, item in _trained_items(run_dir) if step > 2]
    assert len(after_resume) == len(set(after_resume)) == 8 and not before_resume & set(after_resume), "an item was trained twice"
    assert set(_items_at(pending)) & set(after_resume), "the replayed items come first"
    # Conservation across the resume: every item taken from the stream was trained, or is pending
    # in the last checkpoint (nothing is dropped at this staleness bound).
    last = _checkpoint(run_dir, 4)
    assert max(scalars(run_dir)["async/dropped_total"].values()) == 0
    taken = _stream_items(last["data"]["next_index"][""])
    assert before_resume | set(after_resume) | set(_items_at(last["data"]["pending"])) == set(taken)


def _checkpoint(run_dir, step: int) -> dict:
    return json.loads((run_dir / "checkpoints" / f"step_{step:06d}" / "controller.json").read_text())


def _trained_items(run_dir) -> list[tuple[int, str]]:
    rows = [json.loads(line) for line in (run_dir / "rollouts.jsonl").read_text().splitlines()]
    return sorted({(r["step"], r["item_id"]) for r in rows})


def _stream():
    from loongsage.config import DataConfig
    from loongsage.controller.data_stream import DataStream

    return DataStream(DataConfig(source="synthetic_arithmetic"), 4, seed=0)


def _stream_items(count: int) -> list[str]:
    stream = _stream()
    return [stream.take().id for _ in range(count)]


def _items_at(cursors) -> list[str]:
    """The item ids at checkpointed cursors (source, index), read the way the controller reads them."""
    stream = _stream()
    return [stream.sources[source].item_at(index).id for source, index in cursors]
