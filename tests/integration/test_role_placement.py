"""Role placement on a real Ray with 8 fake GPUs: every actor lands on the bundle the plan gave
it and sees the GPU ids the plan names.

The session's `ray_runtime` has no GPUs, and a second `ray.init` in this process would clobber
it, so the checks run in a child process with a Ray of its own (address="local": never the
session's, nor one a Slurm test started on this machine).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.paths import REPO_ROOT

SCRIPT = r'''
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


def run(roles):
    plan = partition(allocation_from_ray(ray.nodes()), roles)
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
                                teacher=RoleConfig(gpus=1), colocate=True)),
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
'''


@pytest.fixture(scope="module")
def placed() -> dict:
    env = {**os.environ, "PYTHONPATH": f"{REPO_ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
           "OMP_NUM_THREADS": "1"}
    env.pop("RAY_ADDRESS", None)
    done = subprocess.run([sys.executable, "-c", SCRIPT], cwd=REPO_ROOT, env=env, capture_output=True, text=True,
                          timeout=420)
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    assert done.returncode == 0 and lines, f"placement script failed:\n{done.stdout[-3000:]}\n{done.stderr[-5000:]}"
    return json.loads(lines[-1][len("RESULT "):])


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
