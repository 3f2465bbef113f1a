"""The asynchronous modes through the real entry point: the async metrics reach TensorBoard with
the staleness bound held, and one-step-off trains one version behind. (That max_staleness=0 is
the synchronous run is checked against the smoke run in test_launch.py; a resume of an
asynchronous run, with the items it had in flight, is test_preemption.py's.)"""

from __future__ import annotations

from tests.integration.launch.launch_support import TINY_RUN, launch, scalars

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


def _run(tmp_path, name: str, *overrides: str):
    run_dir = tmp_path / name
    result = launch(*TINY, f"run.dir={run_dir}", *overrides)
    assert result.returncode == 0, result.stderr[-4000:]
    return run_dir


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
