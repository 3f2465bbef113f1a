"""A mixture-of-experts policy through the real entry point: the embedded engine serves tiny-moe
and returns its routing with every response, the trainer (fsdp in fully_async, replaying it; or
megatron in sync at tp=2, sequence-parallel, with its experts over the two ranks) compares it with its own
(train/routing_mismatch), and the weights it pushes (per-expert checkpoint names) reach the engine
exactly."""

from __future__ import annotations

from tests.integration.launch.launch_support import TINY_RUN, launch, scalars

MOE_RUN = [*TINY_RUN, "model=tiny-moe", "data.reward=tests.toy_rewards:e_fraction", "run.steps=2"]


def test_fully_async_fsdp_run_replays_the_engines_routing(tmp_path):
    run_dir = tmp_path / "moe"
    result = launch(*MOE_RUN, f"run.dir={run_dir}", "run.mode=fully_async", "algorithm.routing_replay=true")
    assert result.returncode == 0, result.stderr[-4000:]
    logged = scalars(run_dir)
    assert sorted(logged["train/routing_mismatch"]) == [1, 2]
    assert max(logged["async/staleness_max"].values()) <= 1
    # Step 1 trains on samples of the starting weights, which the fp32 trainer routes and scores
    # as the fp32 engine did (a later step's samples may be a version behind).
    assert logged["train/routing_mismatch"][1] == 0.0
    assert logged["train/mismatch_k3_kl"][1] < 1e-6


def test_sync_megatron_run_with_experts_over_two_ranks(tmp_path):
    """trainer.megatron.tp=2 ep=2: each of two ranks holds half the experts and routes half of
    each sequence (sequence parallelism); the engine gets every expert gathered from both and the
    tensor-parallel shards joined (the log-prob gap after each push is float noise)."""
    run_dir = tmp_path / "tp2ep2"
    overrides = ["trainer.backend=megatron", "trainer.megatron.tp=2", "trainer.megatron.ep=2"]
    result = launch(*MOE_RUN, f"run.dir={run_dir}", *overrides)
    assert result.returncode == 0, result.stderr[-4000:]
    logged = scalars(run_dir)
    assert sorted(logged["train/routing_mismatch"]) == [1, 2]
    assert max(logged["train/routing_mismatch"].values()) == 0.0
    assert max(logged["train/mismatch_k3_kl"].values()) < 1e-6


def test_routing_replay_with_a_dense_model_is_refused_by_name(tmp_path):
    result = launch(*TINY_RUN, "run.steps=1", f"run.dir={tmp_path / 'dense'}", "algorithm.routing_replay=true")
    assert result.returncode != 0
    assert "algorithm.routing_replay=true" in result.stderr + result.stdout and "has no experts" in result.stderr + result.stdout
