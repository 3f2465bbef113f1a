"""Multi-teacher on-policy distillation through launch.py, tiny: two data sources, each with its
own teacher (the tiny model perturbed two ways), a third source with none, and one resident
teacher engine (teachers.max_resident=1), so every step swaps. Then a resume of the run, its
teachers now held in host memory (teachers.offload=host) and pushed into the slot."""

from __future__ import annotations

import json

import pytest

from tests.integration.launch.launch_support import launch, scalars
from tests.integration.teachers.teacher_support import perturbed_model

SOURCE = "{source: synthetic_arithmetic, reward: math, agent: chat, agent_options: {max_tokens: 12}}"


def mix(*entries: tuple[str, str]) -> str:
    """data.mix with one arithmetic source per (name, teacher)."""
    items = [SOURCE.replace("{", f"{{name: {name}, teacher: '{teacher}', ", 1) for name, teacher in entries]
    return f"data.mix=[{', '.join(items)}]"


@pytest.fixture(scope="module")
def teacher_pool(tiny_model_path, tmp_path_factory) -> str:
    root = tmp_path_factory.mktemp("teachers")
    paths = {name: perturbed_model(tiny_model_path, root / name, seed) for seed, name in enumerate(("adder", "counter"))}
    return "teachers.pool=[" + ", ".join(f"{{name: {n}, model: '{p}'}}" for n, p in paths.items()) + "]"


def overrides(teacher_pool: str, run_dir, steps: int) -> list[str]:
    return [
        "recipe=math_grpo",
        "model=tiny",
        "agent.name=chat",
        mix(("add", "adder"), ("count", "counter"), ("plain", "")),
        teacher_pool,
        "teachers.max_resident=1",
        "rollout.prompts_per_step=3",
        "rollout.group_size=2",
        "trainer.micro_batch_size=2",
        "logging.rollouts_per_step=6",
        f"run.steps={steps}",
        "run.save_every=2",
        f"run.dir={run_dir}",
    ]


def test_two_teachers_through_one_slot_and_a_resume(teacher_pool, tmp_path):
    run_dir = tmp_path / "run"
    first = launch(*overrides(teacher_pool, run_dir, steps=2), timeout=600)
    assert first.returncode == 0, first.stderr[-4000:]
    logged = scalars(run_dir)
    for step in (1, 2):
        # the perturbed teachers disagree with the student: a positive per-token reverse KL each
        assert logged["teacher/reverse_kl/adder"][step] > 0.05 and logged["teacher/reverse_kl/counter"][step] > 0.05
        assert logged["teacher/resident"][step] == 1
        assert logged["teacher/swaps"][step] == 1  # the resident teacher first, then one swap to the other
        assert logged["teacher/samples"][step] == 4  # the "plain" source's 2 samples have no teacher
        assert logged["teacher/swap_s"][step] > 0 and logged["timing/teacher_s"][step] > 0
    # per-domain reward, as for any mix
    assert {"rollout/reward_mean/add", "rollout/reward_mean/count", "rollout/reward_mean/plain"} <= set(logged)

    # resumed from step 2's checkpoint, the run goes on scoring with both teachers, the one not
    # resident now pushed from a teacher store over the route the probed topology gives (shm)
    resumed = launch(*overrides(teacher_pool, run_dir, steps=3), "run.resume=true", "teachers.offload=host", timeout=600)
    assert resumed.returncode == 0, resumed.stderr[-4000:]
    assert "resumed from" in resumed.stdout + resumed.stderr
    logged = scalars(run_dir)
    assert logged["teacher/reverse_kl/adder"][3] > 0.05 and logged["teacher/reverse_kl/counter"][3] > 0.05
    assert logged["teacher/swaps"][3] == 1 and logged["teacher/samples"][3] == 4
    plan = json.loads((run_dir / "teacher_transfer_plan.json").read_text())
    assert [(r["sender"], r["transport"]) for r in plan["routes"]] == [("teacher-store", "shm")]
    steps = {json.loads(line)["step"] for line in (run_dir / "rollouts.jsonl").read_text().splitlines()}
    assert steps == {1, 2, 3}


def test_gkd_style_trains_on_the_teachers_top_k_with_every_teacher_resident(teacher_pool, tmp_path):
    run_dir = tmp_path / "run"
    gkd = ["algorithm.opd.style=gkd", "algorithm.opd.divergence=jsd", "algorithm.opd.top_k=8", "teachers.max_resident=0"]
    result = launch(*overrides(teacher_pool, run_dir, steps=2), *gkd, timeout=600)
    assert result.returncode == 0, result.stderr[-4000:]
    logged = scalars(run_dir)
    # the divergence over the teachers' top-8 is in the loss (JSD(0.5) is at most ln 2)
    assert all(0 < logged["train/gkd_divergence"][step] < 0.7 for step in (1, 2))
    assert logged["teacher/resident"][1] == 2 and logged["teacher/swaps"][1] == 0 == logged["teacher/swaps"][2]
    assert logged["train/loss"][1] != logged["train/pg_loss"][1]


def test_a_teacher_no_source_names_is_refused_before_anything_starts(teacher_pool, tmp_path):
    result = launch(*overrides(teacher_pool, tmp_path / "run", steps=1)[:3], mix(("add", "adder")), teacher_pool, timeout=120)
    assert result.returncode != 0
    assert "teachers.pool[1] (counter) scores no data source" in result.stderr
