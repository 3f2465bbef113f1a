"""The smoke run that CI and users rely on, through the real entry point: Hydra, Ray actors,
HTTP engine, trainer, TensorBoard files, checkpoints and resume, and the fully asynchronous mode
held to staleness 0 giving the same run. The smoke run is made once and read by each test here
(one module: pytest-xdist gives it to one worker, so it is not made twice)."""

from __future__ import annotations

import json

import pytest

from tests.integration.launch.launch_support import SMOKE, launch, scalars

TAGS = [
    "rollout/reward_mean",
    "rollout/response_len_mean",
    "train/loss",
    "train/grad_norm",
    "train/mismatch_k3_kl",
    "timing/step_s",
    "timing/rollout_s",
    "timing/train_s",
    "timing/weight_sync_s",
]


@pytest.fixture(scope="module")
def three_step_run(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("uninterrupted")
    result = launch(*SMOKE, "run.steps=3", f"run.dir={run_dir}")
    assert result.returncode == 0, result.stderr[-4000:]
    return run_dir, result


def _responses(run_dir) -> list[tuple[int, str, float]]:
    rows = [json.loads(line) for line in (run_dir / "rollouts.jsonl").read_text().splitlines()]
    return [(r["step"], r["response"], r["reward"]) for r in rows]


def test_smoke_run_writes_everything_a_user_looks_at(three_step_run):
    run_dir, result = three_step_run
    logged = scalars(run_dir)
    for tag in TAGS:
        assert sorted(logged[tag]) == [1, 2, 3], tag
    assert all(0.0 <= v <= 1.0 for v in logged["rollout/reward_mean"].values())
    # Sync mode: the engine sampled with exactly the trainer's weights, so the gap is float noise.
    assert max(logged["train/mismatch_k3_kl"].values()) < 1e-4
    assert "step 3/3" in result.stderr and "ETA" in result.stderr
    assert (run_dir / "config.yaml").read_text().count("name: tiny") == 1
    assert (run_dir / "checkpoints" / "latest").read_text().strip() == "step_000003"
    rollouts = [json.loads(line) for line in (run_dir / "rollouts.jsonl").read_text().splitlines()]
    assert {r["step"] for r in rollouts} == {1, 2, 3}
    assert {"prompt", "response", "label", "reward", "weight_version"} <= set(rollouts[0])
    # Weights move after each step: step s samples with version s - 1.
    assert {(r["step"], r["weight_version"]) for r in rollouts} == {(1, 0), (2, 1), (3, 2)}


def test_the_mesh_plans_routes_at_start_and_reports_every_push(three_step_run):
    """trainer.weight_sync=mesh: the plan is printed and kept in the run dir, and every step's push
    reports its seconds, rate and bytes per route; the one engine on this machine gets shm."""
    run_dir, result = three_step_run
    printed = "trainer.weight_sync=mesh:\nroute plan: 1 source(s), 0 relay(s), 1 engine(s); routes: 1 shm"
    assert printed in result.stdout + result.stderr
    plan = json.loads((run_dir / "transfer_plan.json").read_text())
    assert [(r["sender"], r["receiver"], r["transport"]) for r in plan["routes"]] == [("trainer/0", "engine/0", "shm")]
    logged = scalars(run_dir)
    for tag in ("transfer/seconds", "transfer/gbps", "transfer/bytes/shm", "transfer/failed_receivers"):
        assert sorted(logged[tag]) == [1, 2, 3], tag
    model_bytes = set(logged["transfer/bytes/shm"].values())
    assert len(model_bytes) == 1 and model_bytes.pop() > 0  # the whole model, every push
    assert all(v > 0 for v in logged["transfer/gbps"].values())
    assert set(logged["transfer/failed_receivers"].values()) == {0.0}


def test_resume_gives_the_same_next_step(three_step_run, tmp_path):
    uninterrupted, _ = three_step_run
    first = launch(*SMOKE, "run.steps=2", f"run.dir={tmp_path}")
    assert first.returncode == 0, first.stderr[-4000:]
    second = launch(*SMOKE, "run.steps=3", f"run.dir={tmp_path}")
    assert second.returncode == 0, second.stderr[-4000:]
    assert "resumed from" in second.stdout + second.stderr
    expected, resumed = scalars(uninterrupted), scalars(tmp_path)
    assert sorted(resumed["train/loss"]) == [1, 2, 3]
    for tag in ("rollout/reward_mean", "rollout/response_len_mean", "train/loss", "train/grad_norm"):
        assert resumed[tag][3] == pytest.approx(expected[tag][3], rel=1e-4, abs=1e-6), tag


def test_max_staleness_zero_reproduces_the_synchronous_run(three_step_run, tmp_path):
    sync, _ = three_step_run
    gated = tmp_path / "async0"
    result = launch(
        *SMOKE,
        "run.steps=3",
        f"run.dir={gated}",
        "run.mode=fully_async",
        "pipeline.max_staleness=0",
        "pipeline.window=window_gated",
    )
    assert result.returncode == 0, result.stderr[-4000:]
    assert _responses(gated) == _responses(sync)
    expected, got = scalars(sync), scalars(gated)
    for tag in ("rollout/reward_mean", "rollout/response_len_mean", "train/loss", "train/grad_norm", "train/entropy"):
        for step in (1, 2, 3):
            assert got[tag][step] == pytest.approx(expected[tag][step], rel=1e-5, abs=1e-7), (tag, step)
    assert set(got["async/staleness_max"].values()) == {0.0}


def test_print_config_and_refuse_bad_keys():
    printed = launch("recipe=math_grpo", "--cfg", "job")
    assert printed.returncode == 0 and "group_size: 8" in printed.stdout
    unknown = launch("recipe=math_grpo", "rollout.temprature=0.5", "--cfg", "job")
    assert unknown.returncode != 0 and "temprature" in unknown.stderr
    invalid = launch("recipe=math_grpo", "model=tiny", "rollout.group_size=1", "run.dir=/nonexistent/never-made")
    assert invalid.returncode == 2 and "rollout.group_size=1" in invalid.stderr
