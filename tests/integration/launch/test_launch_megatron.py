"""trainer.backend=megatron through the real entry point: Hydra, Ray actors for every rank,
the embedded engine fed by weights gathered across tensor-parallel ranks; a mixture of experts
in fully_async (its experts over two ranks: test_launch_moe.py)."""

from __future__ import annotations

import json

from tests.integration.launch.launch_support import scalars
from tests.integration.launch.test_launch_async import ASYNC_TAGS, _run

TRAIN_TAGS = ["train/loss", "train/grad_norm", "train/mismatch_k3_kl", "timing/train_s", "timing/weight_sync_s"]


def test_tensor_parallel_sync_run_hands_the_engine_exactly_its_weights(tmp_path):
    run_dir = _run(tmp_path, "tp2", "trainer.backend=megatron", "trainer.megatron.tp=2")
    logged = scalars(run_dir)
    for tag in TRAIN_TAGS:
        assert sorted(logged[tag]) == [1, 2, 3], tag
    # Sync mode, fp32: each step's rollouts were sampled by the weights the trainer then holds, so
    # after a weight sync from two tensor-parallel shards the gap is float noise only.
    assert max(logged["train/mismatch_k3_kl"].values()) < 1e-6
    state = json.loads((run_dir / "checkpoints" / "step_000003" / "trainer" / "trainer_state.json").read_text())
    assert state == {"step": 3, "megatron": {"tp": 2, "pp": 1, "dp": 1}}


def test_fully_async_moe_run_keeps_the_staleness_bound_and_replays_routing(tmp_path):
    """tiny-moe in fully_async with routing replay: the staleness bound holds and the engine's
    routing reaches the trainer (step 1 trains on samples of the starting weights, which the
    trainer routes alike)."""
    overrides = ["model=tiny-moe", "trainer.backend=megatron", "run.mode=fully_async", "algorithm.routing_replay=true"]
    run_dir = _run(tmp_path, "moe-async", *overrides)
    logged = scalars(run_dir)
    for tag in [*TRAIN_TAGS, *ASYNC_TAGS, "train/routing_mismatch"]:
        assert sorted(logged[tag]) == [1, 2, 3], tag
    assert max(logged["async/staleness_max"].values()) <= 1
    assert logged["train/routing_mismatch"][1] == 0.0
