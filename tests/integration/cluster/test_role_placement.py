"""Role placement on a real Ray with fake GPUs: every actor lands on the bundle the plan gave
it and sees the GPU ids the plan names; the run's own TrainGroup and EngineFleet, placed by
`place_actors`, sit on their seats and still train and generate there.

The session's `ray_runtime` has no GPUs, and a second `ray.init` in this process would clobber
it, so the checks run in a child process with a Ray of its own (address="local": never the
session's, nor one a Slurm test started on this machine).
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys

import pytest

from tests.paths import REPO_ROOT

SCRIPT = r"""
import json, sys
import ray
from ray.util import placement_group_table
from loongsage.cluster.placement import place
from loongsage.cluster.roles import allocation_from_ray, partition
from loongsage.config.schema import RoleConfig, RolesConfig, RolloutRoleConfig

ray.init(address="local", num_gpus=8, num_cpus=8, include_dashboard=False, log_to_driver=False)


@ray.remote
class Where:
    def report(self):
        return ray.util.get_node_ip_address(), [int(g) for g in ray.get_gpu_ids()]


def run(roles, colocate=False):
    plan = partition(allocation_from_ray(ray.nodes()), roles, colocate)
    placement = place(plan, timeout_s=60)
    seen = {}
    actors = []
    for role in ("trainer", "rollout", "teacher"):
        seats = placement.seats(role)
        role_actors = [Where.options(**seat.actor_options()).remote() for seat in seats]
        actors += role_actors
        reports = ray.get([actor.report.remote() for actor in role_actors], timeout=120)
        seen[role] = [{"plan": [slot.node, list(slot.gpus)], "seat_gpus": list(seat.gpus),
                       "bundles": list(seat.bundle_indices), "share": seat.share,
                       "actor": [ip, gpus]} for slot, seat, (ip, gpus) in zip(plan.slots(role), seats, reports)]
    for actor in actors:
        ray.kill(actor)
    placement.remove()
    return seen


result = {
    "split": run(RolesConfig(trainer=RoleConfig(gpus=2), rollout=RolloutRoleConfig(gpus=4, tp=2),
                             teacher=RoleConfig(gpus=2))),
    "colocate": run(RolesConfig(trainer=RoleConfig(gpus=4), rollout=RolloutRoleConfig(gpus=4, tp=4),
                                teacher=RoleConfig(gpus=1)), colocate=True),
}
try:
    from loongsage.cluster.roles import Slot, RolePlan
    place(RolePlan(trainer=(Slot("no-such-node", (0,)),)))
    result["stranger"] = "placed"
except ValueError as exc:
    result["stranger"] = str(exc)
try:
    ip = allocation_from_ray(ray.nodes())[0].node
    place(RolePlan(trainer=tuple(Slot(ip, (gpu,)) for gpu in range(9))), timeout_s=3)
    result["too_big"] = "placed"
except TimeoutError as exc:
    result["too_big"] = str(exc)
result["groups_left"] = [g["state"] for g in placement_group_table().values() if g["state"] != "REMOVED"]
print("RESULT " + json.dumps(result), flush=True)
ray.shutdown()
"""


# The run's own groups, placed by place_actors on a Ray with 4 fake GPUs (CPU torch ignores
# CUDA_VISIBLE_DEVICES, so the tiny model trains and generates as usual).
GROUPS_SCRIPT = r"""
import json
import ray
from ray.util import placement_group_table
from loongsage.cluster.actor_placement import place_actors
from loongsage.config import Config, check
from loongsage.controller.data_stream import Item
from loongsage.controller.completion_sampler import CompletionSampler
from loongsage.inference.fleet import EngineFleet
from loongsage.models import resolve_model_path
from loongsage.training.group import TrainGroup
from tests.samples import random_samples

ray.init(address="local", num_gpus=4, num_cpus=8, include_dashboard=False, log_to_driver=False)
MODEL = str(resolve_model_path("tiny"))


def config(trainer_gpus, rollout_gpus, placement):
    cfg = Config()
    cfg.model.name = "tiny"
    cfg.run.placement = placement
    cfg.roles.trainer.gpus, cfg.roles.rollout.gpus = trainer_gpus, rollout_gpus
    cfg.trainer.world_size, cfg.trainer.micro_batch_size, cfg.trainer.num_threads = trainer_gpus, 1, 1
    cfg.rollout.num_engines, cfg.rollout.num_threads = rollout_gpus, 1
    cfg.rollout.prompts_per_step, cfg.rollout.group_size = 2, 2
    cfg.rollout.max_new_tokens, cfg.rollout.max_context = 4, 64
    check(cfg)
    return cfg


def live_groups():
    return [g["state"] for g in placement_group_table().values() if g["state"] != "REMOVED"]


def run(cfg):
    actors = place_actors(cfg)
    try:
        rollout = EngineFleet(cfg.rollout, [MODEL] * cfg.rollout.num_engines, actors.engine_cpus, actors.engine_options)
        sampler = CompletionSampler(cfg.rollout, rollout, MODEL)
        trainer = TrainGroup(MODEL, cfg.trainer, cfg.algorithm, 0, ray_options=actors.trainer_options,
                             cpus=actors.trainer_cpus)
        try:
            seen = {"describe": actors.describe(), "pinned": [actors.trainer_cpus, actors.engine_cpus]}
            for role, handles in (("trainer", trainer.workers), ("rollout", rollout.actors)):
                reports = ray.get([handle.gpu_ids.remote() for handle in handles], timeout=300)
                seen[role] = [{"seat": list(seat.gpus), "share": seat.share, "actor": gpus}
                              for seat, gpus in zip(actors.seats(role), reports)]
            items = [Item("", i, {"id": str(i), "prompt": f"question {i}", "label": ""}) for i in range(2)]
            seen["generated"] = [len(sample.response_ids) for i, item in enumerate(items)
                                 for sample in sampler.generate_group(item, i, seed=0)]
            seen["loss"] = trainer.train_step(random_samples(4, 0))["train/loss"]
        finally:
            trainer.shutdown()
            rollout.stop()
            sampler.close()
    finally:
        actors.remove()
    seen["groups_left"] = live_groups()
    return seen


result = {}
try:  # 4 + 2 GPUs asked of 4: refused before any group or actor exists
    place_actors(config(4, 2, "disaggregated"))
    result["too_many"] = "placed"
except ValueError as exc:
    result["too_many"] = str(exc)
result["too_many_groups"] = live_groups()
result["too_many_free_gpus"] = ray.available_resources().get("GPU")
result["disaggregated"] = run(config(2, 2, "disaggregated"))
result["colocate"] = run(config(2, 2, "colocate"))
print("RESULT " + json.dumps(result), flush=True)
ray.shutdown()
"""


def run_child(script: str) -> dict:
    env = {**os.environ, "PYTHONPATH": f"{REPO_ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}", "OMP_NUM_THREADS": "1"}
    env.pop("RAY_ADDRESS", None)
    done = subprocess.run([sys.executable, "-c", script], cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=420)
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    assert done.returncode == 0 and lines, f"placement script failed:\n{done.stdout[-3000:]}\n{done.stderr[-5000:]}"
    return json.loads(lines[-1][len("RESULT ") :])


# Session-scoped though only this module uses them: a pytest-xdist worker tears module fixtures
# down whenever its queue runs dry, and these child runs (a Ray each) are the module's cost.
@pytest.fixture(scope="session")
def placed() -> dict:
    return run_child(SCRIPT)


@pytest.fixture(scope="session")
def groups() -> dict:
    return run_child(GROUPS_SCRIPT)


def test_each_actor_sees_the_gpu_its_plan_names(placed):
    split = placed["split"]
    assert [entry["plan"][1] for entry in split["trainer"]] == [[0], [1]]
    assert [entry["plan"][1] for entry in split["rollout"]] == [[2, 3], [4, 5]]
    assert [entry["plan"][1] for entry in split["teacher"]] == [[6], [7]]
    for role in ("trainer", "rollout", "teacher"):
        for entry in split[role]:
            node, planned = entry["plan"]
            ip, actor_gpus = entry["actor"]
            assert ip == node
            assert entry["seat_gpus"] == planned
            # an engine's actor sits in its first device's bundle; its other bundles are reserved for it
            assert actor_gpus == planned[:1], (role, entry)
            assert entry["share"] == 1.0


def test_devices_are_not_handed_out_twice_when_split(placed):
    split = placed["split"]
    bundles = [b for role in ("trainer", "rollout", "teacher") for entry in split[role] for b in entry["bundles"]]
    assert sorted(bundles) == list(range(8))


def test_colocated_trainer_and_rollout_share_bundles(placed):
    colocate = placed["colocate"]
    trainer_gpus = [entry["actor"][1] for entry in colocate["trainer"]]
    assert trainer_gpus == [[0], [1], [2], [3]]
    (engine,) = colocate["rollout"]
    assert engine["seat_gpus"] == [0, 1, 2, 3] and engine["actor"][1] == [0]
    assert engine["bundles"] == [entry["bundles"][0] for entry in colocate["trainer"]]
    assert {entry["share"] for entry in colocate["trainer"] + colocate["rollout"]} == {0.5}
    assert [entry["actor"][1] for entry in colocate["teacher"]] == [[4]]
    assert colocate["teacher"][0]["share"] == 1.0


def test_a_plan_ray_cannot_meet_fails_and_leaves_no_group_behind(placed):
    assert "placement group of node" in placed["too_big"]
    assert "(9 bundles of 1 GPU + 1 CPU) was not ready within 3 s" in placed["too_big"]
    assert placed["groups_left"] == []


def test_a_plan_on_a_node_ray_does_not_know_is_refused_before_any_group(placed):
    assert "plan nodes ['no-such-node'] are not Ray nodes (Ray knows ['" in placed["stranger"]
    assert "_group_" not in placed["stranger"]  # only nodes are named, not placement-group resources
    assert placed["groups_left"] == []


def assert_generated_and_trained(seen: dict) -> None:
    """2 prompts x group_size 2 responses of 1..max_new_tokens=4 tokens, and a finite loss."""
    assert len(seen["generated"]) == 4 and all(1 <= tokens <= 4 for tokens in seen["generated"])
    assert math.isfinite(seen["loss"])


def test_disaggregated_groups_sit_on_disjoint_seats_and_still_work(groups):
    split = groups["disaggregated"]
    for role in ("trainer", "rollout"):
        assert len(split[role]) == 2
        for entry in split[role]:
            assert entry["actor"] == entry["seat"] and entry["share"] == 1.0, (role, entry)
    trainer_gpus = {gpu for entry in split["trainer"] for gpu in entry["actor"]}
    engine_gpus = {gpu for entry in split["rollout"] for gpu in entry["actor"]}
    assert len(trainer_gpus) == 2 and len(engine_gpus) == 2 and not trainer_gpus & engine_gpus
    assert split["pinned"] == [None, None]  # seats, not this machine's cores
    assert_generated_and_trained(split)
    assert "trainer[1]:" in split["describe"] and "run.placement=disaggregated" in split["describe"]
    assert split["groups_left"] == []


def test_colocated_groups_share_each_trainer_gpu_with_an_engine(groups):
    colocate = groups["colocate"]
    trainer = [entry["actor"] for entry in colocate["trainer"]]
    engines = [entry["actor"] for entry in colocate["rollout"]]
    assert trainer == engines and len({gpu for gpus in trainer for gpu in gpus}) == 2
    assert {entry["share"] for entry in colocate["trainer"] + colocate["rollout"]} == {0.5}
    for entry in colocate["trainer"] + colocate["rollout"]:
        assert entry["actor"] == entry["seat"]
    assert_generated_and_trained(colocate)
    assert colocate["groups_left"] == []


def test_roles_that_do_not_fit_fail_before_anything_is_reserved(groups):
    assert (
        "roles.trainer.gpus + roles.rollout.gpus + roles.teacher.gpus = 4 + 2 + 0 = 6 > 4 GPUs in the allocation (1 node x 4)"
    ) in groups["too_many"]
    assert groups["too_many_groups"] == []
    assert groups["too_many_free_gpus"] == 4.0
