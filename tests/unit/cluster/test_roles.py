"""Role partitioning: which devices of a multi-node allocation each role gets (pure arithmetic,
shapes that cannot run on this machine)."""

from __future__ import annotations

import os
import re

import pytest

from loongsage.cluster.placement import bundle_spec, bundles_by_node
from loongsage.cluster.roles import (
    RolePlan,
    Slot,
    allocation_from_ray,
    node_sort_key,
    partition,
)
from loongsage.config import Config, ConfigError, DataMixEntry, TeacherEntry, check, register, to_config
from loongsage.config.roles_rules import config_problems, is_partitioned
from loongsage.config.schema import RoleConfig, RolesConfig, RolloutRoleConfig
from tests.paths import RECIPES_DIR


def nodes(*sizes: int, names: str = "abcdefgh") -> list[tuple[str, list[int]]]:
    return [(names[i], list(range(size))) for i, size in enumerate(sizes)]


def roles(trainer=0, rollout=0, tp=1, teacher=0) -> RolesConfig:
    return RolesConfig(
        trainer=RoleConfig(gpus=trainer), rollout=RolloutRoleConfig(gpus=rollout, tp=tp), teacher=RoleConfig(gpus=teacher)
    )


def config(roles_cfg: RolesConfig, placement="disaggregated", mode="sync", world_size=None, engines=None) -> Config:
    """A config whose trainer ranks and engines fill the roles' devices unless told otherwise."""
    cfg = Config()
    cfg.roles, cfg.run.placement, cfg.run.mode = roles_cfg, placement, mode
    cfg.trainer.world_size = world_size if world_size is not None else max(roles_cfg.trainer.gpus, 1)
    tp = max(roles_cfg.rollout.tp, 1)
    cfg.rollout.num_engines = engines if engines is not None else max(roles_cfg.rollout.gpus // tp, 1)
    # samples per step divisible by any world size used here
    cfg.rollout.prompts_per_step, cfg.rollout.group_size, cfg.trainer.micro_batch_size = 16, 2, 1
    if roles_cfg.teacher.gpus > 0:  # one resident teacher per teacher device, each scoring a source
        count = roles_cfg.teacher.gpus
        cfg.agent.name = "chat"
        cfg.teachers.pool = [TeacherEntry(name=f"t{i}", model="tiny") for i in range(count)]
        cfg.data.mix = [DataMixEntry(name=f"s{i}", source="synthetic_arithmetic", teacher=f"t{i}") for i in range(count)]
    return cfg


def test_four_nodes_of_eight_trainer_rollout_teacher():
    plan = partition(nodes(8, 8, 8, 8), roles(trainer=16, rollout=8, tp=2, teacher=8), colocate=False)
    assert plan.trainer == tuple(Slot(node, (gpu,)) for node in "ab" for gpu in range(8))
    assert plan.rollout == (Slot("c", (0, 1)), Slot("c", (2, 3)), Slot("c", (4, 5)), Slot("c", (6, 7)))
    assert plan.teacher == tuple(Slot("d", (gpu,)) for gpu in range(8))
    assert len(plan.devices()) == 32 and plan.colocate is False


def test_devices_are_sorted_by_node_then_device_whatever_the_input_order():
    allocation = [("node10", [3, 1, 2, 0]), ("node9", [1, 0]), ("node2", [0, 1])]
    plan = partition(allocation, roles(trainer=3, teacher=2), colocate=False)
    assert plan.trainer == (Slot("node2", (0,)), Slot("node2", (1,)), Slot("node9", (0,)))
    assert plan.teacher == (Slot("node9", (1,)), Slot("node10", (0,)))
    # node9 has one GPU left, too few for a tp=2 engine
    with pytest.raises(ValueError, match=r"roles.rollout.tp=2 does not fit on node node9 \(1 GPUs left\)"):
        partition(allocation, roles(trainer=3, rollout=2, tp=2), colocate=False)
    plan = partition(allocation, roles(trainer=2, rollout=4, tp=2, teacher=2), colocate=False)
    assert plan.rollout == (Slot("node9", (0, 1)), Slot("node10", (0, 1)))
    assert plan.teacher == (Slot("node10", (2,)), Slot("node10", (3,)))


def test_ip_addresses_sort_numerically():
    assert sorted(["10.0.0.10", "10.0.0.9", "10.0.1.2"], key=node_sort_key) == ["10.0.0.9", "10.0.0.10", "10.0.1.2"]


def test_colocate_puts_rollout_on_the_trainers_devices():
    plan = partition(nodes(8, 8), roles(trainer=8, rollout=8, tp=4, teacher=4), colocate=True)
    assert [slot.gpus[0] for slot in plan.trainer] == list(range(8)) and {s.node for s in plan.trainer} == {"a"}
    assert plan.rollout == (Slot("a", (0, 1, 2, 3)), Slot("a", (4, 5, 6, 7)))
    assert plan.teacher == tuple(Slot("b", (gpu,)) for gpu in range(4))
    assert plan.roles_on("a", 5) == ["trainer", "rollout"] and plan.roles_on("b", 0) == ["teacher"]
    assert len(plan.devices()) == 12  # shared devices count once


def test_colocate_fits_where_the_sum_would_not():
    plan = partition(nodes(8), roles(trainer=8, rollout=8, tp=2), colocate=True)
    assert len(plan.rollout) == 4 and plan.colocate
    with pytest.raises(ValueError, match=r"= 8 \+ 8 \+ 0 = 16 > 8 GPUs"):
        partition(nodes(8), roles(trainer=8, rollout=8, tp=2), colocate=False)


def test_engine_never_straddles_nodes():
    with pytest.raises(ValueError) as error:
        partition(nodes(8, 8), roles(trainer=6, rollout=4, tp=4), colocate=False)
    message = str(error.value)
    assert "roles.rollout.tp=4 does not fit on node a (2 GPUs left)" in message
    assert "rollout engine 0 would span nodes a and b" in message and "first 6 GPUs" in message
    # the same request fits once the trainer leaves a node boundary at a multiple of tp
    assert partition(nodes(8, 8), roles(trainer=4, rollout=4, tp=4), colocate=False).rollout == (Slot("a", (4, 5, 6, 7)),)


def test_an_engine_larger_than_a_node_spans_whole_nodes():
    plan = partition(nodes(2, 2, 2), roles(trainer=2, rollout=4, tp=4), colocate=False)
    # node rank 0 serves; the further node runs the engine's second server process
    assert plan.rollout == (Slot("b", (0, 1)),)
    assert plan.followers(0) == (Slot("c", (0, 1)),)
    assert ("c", 1) in plan.devices() and plan.roles_on("c", 0) == ["rollout"]
    assert "rollout[0] node rank 1: c GPU 0,1" in plan.describe()
    # part of a node never joins an engine spanning nodes
    with pytest.raises(ValueError, match=r"rollout engine 0 would span nodes a and c taking part of a node"):
        partition(nodes(2, 2, 2), roles(trainer=1, rollout=4, tp=4), colocate=False)
    assert partition(nodes(8, 8), roles(trainer=4, rollout=4, tp=4), colocate=False).followers(0) == ()


def test_uneven_nodes():
    plan = partition(nodes(8, 3, 8), roles(trainer=11, rollout=8, tp=4), colocate=False)
    assert [slot.node for slot in plan.trainer] == ["a"] * 8 + ["b"] * 3
    assert plan.rollout == (Slot("c", (0, 1, 2, 3)), Slot("c", (4, 5, 6, 7)))
    with pytest.raises(ValueError, match=r"roles.rollout.tp=4 does not fit on node b \(3 GPUs left\)"):
        partition(nodes(8, 3, 8), roles(trainer=8, rollout=8, tp=4), colocate=False)
    # the engine after the one that fills c's last four is refused on b, not silently moved
    with pytest.raises(ValueError, match=r"rollout engine 1 would span nodes b and c"):
        partition(nodes(8, 3, 8), roles(trainer=4, rollout=8, tp=4), colocate=False)


def test_too_many_gpus_is_refused_with_the_sum():
    with pytest.raises(
        ValueError,
        match=re.escape(
            "roles.trainer.gpus + roles.rollout.gpus + roles.teacher.gpus = 16 + 8 + 8 = 32 > 24 GPUs in the "
            "allocation (3 nodes x 8)"
        ),
    ):
        partition(nodes(8, 8, 8), roles(trainer=16, rollout=8, tp=2, teacher=8), colocate=False)


def test_too_many_gpus_names_uneven_nodes_and_colocate():
    with pytest.raises(
        ValueError,
        match=re.escape(
            "colocated placement (run.placement=colocate, or auto with run.mode=sync): roles.trainer.gpus (shared "
            "with roles.rollout) + roles.teacher.gpus = 8 + 4 = 12 > 11 GPUs in the allocation (2 nodes: a 8, b 3)"
        ),
    ):
        partition(nodes(8, 3), roles(trainer=8, rollout=8, teacher=4), colocate=True)
    with pytest.raises(ValueError, match=re.escape("= 1 + 0 + 0 = 1 > 0 GPUs in the allocation (no nodes with GPUs)")):
        partition([], roles(trainer=1), colocate=False)
    with pytest.raises(ValueError, match=re.escape("> 8 GPUs in the allocation (1 node x 8)")):
        partition(nodes(8), roles(trainer=9), colocate=False)


COLOCATED_MISMATCH = (
    "colocated placement (run.placement=colocate, or auto with run.mode=sync) puts the rollout "
    "engines on the trainer's devices: roles.trainer.gpus=8 must equal roles.rollout.gpus=4; set "
    "both to the same number, or run.placement=disaggregated"
)


@pytest.mark.parametrize(
    "bad, colocate, message",
    [
        (roles(trainer=-1), False, "roles.trainer.gpus=-1 must be >= 0"),
        (roles(teacher=-2), False, "roles.teacher.gpus=-2 must be >= 0"),
        (roles(rollout=4, tp=0), False, "roles.rollout.tp=0 must be >= 1"),
        (roles(rollout=6, tp=4), False, "roles.rollout.gpus=6 must be divisible by roles.rollout.tp=4"),
        (roles(trainer=8, rollout=4), True, COLOCATED_MISMATCH),
    ],
)
def test_bad_roles_are_refused_by_field_in_config_and_in_partition(bad, colocate, message):
    assert any(message in problem for problem in config_problems(bad, colocate))
    with pytest.raises(ValueError, match=re.escape(message)):
        partition(nodes(8, 8), bad, colocate)
    with pytest.raises(ConfigError, match=re.escape(message)):
        check(config(bad, placement="colocate" if colocate else "disaggregated"))


def test_auto_placement_colocates_roles_in_sync_mode_only():
    mismatched = roles(trainer=8, rollout=4)
    with pytest.raises(ConfigError, match=re.escape(COLOCATED_MISMATCH)):
        check(config(mismatched, placement="auto", mode="sync"))
    check(config(mismatched, placement="auto", mode="fully_async"))


def test_partitioned_trainer_ranks_must_fill_the_trainer_devices():
    with pytest.raises(ConfigError) as error:
        check(config(roles(trainer=4, rollout=2), world_size=2))
    assert (
        "trainer.world_size=2 must equal roles.trainer.gpus=4 (one trainer rank per device once roles are "
        "partitioned); set trainer.world_size=4 or roles.trainer.gpus=2"
    ) in str(error.value)
    # a count of 0 is never suggested
    with pytest.raises(
        ConfigError,
        match=re.escape(
            "trainer.world_size=1 must equal roles.trainer.gpus=0 (one trainer rank per device once roles are "
            "partitioned); set roles.trainer.gpus=1\n"
        ),
    ):
        check(config(roles(teacher=1), world_size=1, engines=1))


def test_partitioned_engines_must_fill_the_rollout_devices():
    with pytest.raises(ConfigError) as error:
        check(config(roles(trainer=2, rollout=8, tp=2), engines=2))
    assert (
        "rollout.num_engines=2 must equal roles.rollout.gpus / roles.rollout.tp = 8 / 2 = 4 (one engine per tp "
        "devices once roles are partitioned); set rollout.num_engines=4 or roles.rollout.gpus=4"
    ) in str(error.value)


def test_partitioned_roles_are_not_pinned_to_this_machines_cores():
    # 16 trainer ranks + 4 engines are far more than this machine's cores: they run elsewhere
    check(config(roles(trainer=16, rollout=8, tp=2, teacher=8)))
    # the same counts on this machine alone are refused: one core each is more than it has
    with pytest.raises(ConfigError, match=r"> \d+ cores on this machine"):
        check(config(RolesConfig(), world_size=len(os.sched_getaffinity(0)), engines=4))


def test_roles_come_from_command_line_overrides():
    from hydra import compose, initialize_config_dir

    register()
    overrides = [
        "roles.trainer.gpus=16",
        "roles.rollout.gpus=8",
        "roles.rollout.tp=2",
        "roles.teacher.gpus=1",
        "teachers.pool=[{name: t, model: tiny}]",
        "data.teacher=t",
        "run.placement=disaggregated",
        "trainer.world_size=16",
        "trainer.micro_batch_size=2",
        "rollout.num_engines=4",
    ]
    with initialize_config_dir(config_dir=str(RECIPES_DIR), version_base=None):
        cfg = to_config(compose(config_name="config", overrides=overrides))
        assert (cfg.roles.trainer.gpus, cfg.roles.rollout.gpus, cfg.roles.rollout.tp, cfg.roles.teacher.gpus) == (16, 8, 2, 1)
        assert len(partition(nodes(8, 8, 8, 8), cfg.roles, colocate=False).rollout) == 4
        with pytest.raises(ConfigError, match=r"roles.rollout.gpus=8 must be divisible by roles.rollout.tp=3"):
            to_config(compose(config_name="config", overrides=["roles.rollout.gpus=8", "roles.rollout.tp=3"]))


def test_default_roles_leave_the_local_machine_alone():
    assert not is_partitioned(RolesConfig())
    assert config_problems(RolesConfig(), colocate=True) == []
    assert partition([], RolesConfig(), colocate=True) == RolePlan(colocate=True)
    assert is_partitioned(roles(teacher=1))


def test_duplicate_nodes_or_devices_are_refused():
    with pytest.raises(ValueError, match="node a appears 2 times"):
        partition([("a", [0]), ("a", [1])], roles(trainer=1), colocate=False)
    with pytest.raises(ValueError, match=r"node a lists a GPU id twice"):
        partition([("a", [0, 0])], roles(trainer=1), colocate=False)


def test_allocation_from_ray_nodes_keeps_alive_nodes_with_gpus():
    reported = [
        {"NodeManagerAddress": "10.0.0.2", "Alive": True, "Resources": {"GPU": 4.0, "CPU": 16.0}},
        {"NodeManagerAddress": "10.0.0.3", "Alive": False, "Resources": {"GPU": 8.0}},
        {"NodeManagerAddress": "10.0.0.4", "Alive": True, "Resources": {"CPU": 8.0}},
    ]
    assert allocation_from_ray(reported) == [("10.0.0.2", (0, 1, 2, 3))]


def test_placement_bundles_follow_the_plan_node_by_node():
    plan = partition(nodes(8, 8, 4), roles(trainer=8, rollout=8, tp=2, teacher=2), colocate=False)
    assert bundles_by_node(plan) == {"a": list(range(8)), "b": list(range(8)), "c": [0, 1]}
    assert bundle_spec("10.0.0.2") == {"GPU": 1, "CPU": 1, "node:10.0.0.2": 0.001}


def test_describe_lists_every_slot():
    text = partition(nodes(2), roles(trainer=1, teacher=1), colocate=False).describe()
    assert text == "trainer[0]: a GPU 0\nteacher[0]: a GPU 1"
    assert RolePlan().describe() == "not partitioned (local machine)"
