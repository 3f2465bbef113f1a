"""The discrete-event async-RL simulator (loongsage/bench/async_simulation.py) driving the real
PipelineBuffer and staleness windows."""

from __future__ import annotations

import json

import pytest

from loongsage.bench.async_simulation import SimConfig, Simulation, Workload, main, simulate

WINDOWS = ["no_window", "window_gated", "windowed_fifo"]


def small(**overrides) -> SimConfig:
    """A small cluster with a heavy tail, so groups straddle steps and some outlive the window."""
    base = dict(
        gpus=8,
        tp=1,
        prompts=8,
        group=4,
        steps=8,
        prompt_len=64,
        median_len=256,
        sigma=1.2,
        max_new_tokens=8192,
        max_running=32,
        train_overhead_s=0.5,
        weight_sync_s=0.5,
        colocate_switch_s=0.5,
        train_tokens_per_s_per_gpu=2000.0,
    )
    base.update(overrides)
    return SimConfig(**base)


def run_async(cfg: SimConfig, window: str, max_staleness: int):
    return Simulation(cfg, colocated=False, window=window, max_staleness=max_staleness).run()


@pytest.mark.parametrize("window", WINDOWS)
def test_every_admitted_group_is_trained_dropped_or_still_in_flight(window):
    r = run_async(small(), window, 1)
    assert r.admitted_groups == r.trained_groups + r.dropped_groups + r.ready_groups + r.running_groups + r.filtered_groups
    assert r.trained_groups == r.steps * 8
    assert len(r.staleness) == r.trained_groups
    assert len(r.step_end_s) == r.steps


@pytest.mark.parametrize("window", WINDOWS)
@pytest.mark.parametrize("max_staleness", [1, 2])
def test_trained_staleness_never_exceeds_the_bound(window, max_staleness):
    r = run_async(small(seed=3), window, max_staleness)
    assert r.staleness and max(r.staleness) <= max_staleness
    assert r.staleness_max <= max_staleness


def test_some_stale_groups_are_dropped_without_a_window():
    # no_window admits as far ahead as the engines allow: what outlives the bound is dropped
    r = run_async(small(), "no_window", 1)
    assert r.dropped_groups > 0
    assert max(r.staleness) == 1


def test_gated_window_with_zero_staleness_never_overlaps_rollout_and_training():
    r = run_async(small(), "window_gated", 0)
    assert r.overlap_s == 0.0
    assert set(r.staleness) == {0}
    assert r.dropped_groups == 0
    assert r.admitted_groups == r.trained_groups  # nothing starts until the previous batch is published
    assert r.running_groups == r.ready_groups == 0


def test_sync_mode_takes_turns_and_async_overlaps():
    results = simulate(small())
    assert results["sync"].overlap_s == 0.0
    assert set(results["sync"].staleness) == {0}
    assert results["async"].overlap_s > 0.0


def test_hand_computed_sync_step():
    # 2 GPUs, 1 prompt x 2 samples of 1000 tokens: each engine prefills one prompt, then decodes
    # 1000 steps with one running sequence; then all 2 GPUs train, then the colocated switch.
    cfg = SimConfig(
        gpus=2,
        tp=1,
        prompts=1,
        group=2,
        steps=1,
        prompt_len=100,
        lengths="constant",
        median_len=1000,
        sigma=0.0,
        step_base_s=0.01,
        step_per_seq_s=0.001,
        prefill_tokens_per_s=1000.0,
        train_tokens_per_s_per_gpu=100.0,
        train_overhead_s=1.0,
        colocate_switch_s=2.0,
    )
    r = Simulation(cfg, colocated=True, window="window_gated", max_staleness=0).run()
    rollout = 100 / 1000 + 1000 * (0.01 + 0.001 * 1)
    train = 2 * (100 + 1000) / (100.0 * 2) + 1.0
    assert r.wall_s == pytest.approx(rollout + train + 2.0)
    assert r.trained_tokens == 2200
    assert r.gpu_util == pytest.approx((2 * rollout + 2 * (train)) / (2 * r.wall_s))


def test_both_modes_see_the_same_workload():
    cfg = small()
    assert Workload(cfg).lengths(5) == Workload(cfg).lengths(5)
    assert all(1 <= n <= cfg.max_new_tokens for i in range(50) for n in Workload(cfg).lengths(i))


def test_gain_comes_from_the_tail():
    # Same cluster, same mean tokens per step: without a tail async at equal GPUs gains little
    # (its trainer slice is smaller); with the long tail the synchronous rollout waits on it.
    cfg = dict(gpus=16, prompts=16, group=16, steps=6, max_running=256)
    flat = simulate(SimConfig(lengths="constant", **cfg))
    tail = simulate(SimConfig(lengths="lognormal", **cfg))
    flat_gain = flat["sync"].wall_s / flat["async"].wall_s
    tail_gain = tail["sync"].wall_s / tail["async"].wall_s
    assert flat_gain < 1.5
    assert tail_gain > flat_gain
    assert tail_gain > 1.5


def test_default_configuration_reaches_the_peer_range():
    results = simulate(SimConfig())
    ratio = results["sync"].wall_s / results["async"].wall_s
    assert ratio >= 2.0
    assert results["async"].gpu_util > results["sync"].gpu_util


def test_main_prints_the_ratio_and_writes_json(capsys, tmp_path):
    out = tmp_path / "sim.json"
    assert main(["--simulate", "--steps", "3", "--gpus", "16", "--prompts", "16", "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "ratio" in printed
    data = json.loads(out.read_text())
    assert data["sync"]["steps"] == 3 and data["async"]["steps"] == 3
    assert data["ratio"] == pytest.approx(data["sync"]["wall_s"] / data["async"]["wall_s"])


def test_bad_config_is_named():
    with pytest.raises(ValueError, match="rollout_gpus"):
        simulate(SimConfig(gpus=8, rollout_gpus=8))
    with pytest.raises(ValueError, match="staleness window"):
        simulate(SimConfig(gpus=8, prompts=4, steps=1, window="nope"))
    assert main(["--gpus", "8", "--rollout-gpus", "8"]) == 2
