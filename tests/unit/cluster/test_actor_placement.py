"""place_actors on this machine (roles not partitioned), and the groups' per-actor settings.
The partitioned path runs against a real Ray in tests/integration/cluster/test_role_placement.py."""

from __future__ import annotations

import os
from types import SimpleNamespace

import pytest

from loongsage.cluster.actor_placement import place_actors
from loongsage.config import Config, RolloutConfig
from loongsage.config.placement import split_cores
from loongsage.inference.fleet import EngineFleet
from loongsage.training.group import TrainGroup


def config(placement: str, mode: str = "sync", world_size: int = 1, engines: int = 1) -> Config:
    cfg = Config()
    cfg.run.placement, cfg.run.mode = placement, mode
    cfg.trainer.world_size, cfg.rollout.num_engines = world_size, engines
    return cfg


def test_colocated_on_this_machine_pins_nothing_and_reserves_nothing():
    actors = place_actors(config("auto", "sync"))
    assert (actors.placement, actors.trainer_options, actors.engine_options) == ("colocate", None, None)
    assert (actors.trainer_cpus, actors.engine_cpus, actors.seats("trainer")) == (None, None, [])
    assert actors.describe() == "run.placement=colocate: trainer ranks and engines share this machine's cores"
    actors.remove()  # nothing to give back, and no Ray needed to say so


def test_disaggregated_on_this_machine_pins_cores_as_split_cores_does():
    actors = place_actors(config("auto", "fully_async"))
    cores = sorted(os.sched_getaffinity(0))
    expected_trainer, expected_engines = split_cores("disaggregated", 1, 1, cores)
    assert actors.placement == "disaggregated" and actors.trainer_options is None
    assert (actors.trainer_cpus, actors.engine_cpus) == (expected_trainer, expected_engines)
    assert actors.describe() == (
        f"run.placement=disaggregated on this machine: trainer[0] cores "
        f"{','.join(map(str, expected_trainer[0]))}; rollout[0] cores "
        f"{','.join(map(str, expected_engines[0]))}"
    )


def test_groups_refuse_per_actor_settings_of_the_wrong_length_before_starting_anything():
    trainer = SimpleNamespace(world_size=2)
    with pytest.raises(ValueError, match=r"TrainGroup ray_options has 1 entries for trainer.world_size=2: one per actor"):
        TrainGroup("unused", trainer, SimpleNamespace(), seed=0, ray_options=[{}])
    with pytest.raises(ValueError, match=r"TrainGroup cpus has 3 entries for trainer.world_size=2"):
        TrainGroup("unused", trainer, SimpleNamespace(), seed=0, cpus=[[0], [1], [2]])
    rollout = RolloutConfig(num_engines=2)
    with pytest.raises(ValueError, match=r"EngineFleet ray_options has 3 entries for rollout.num_engines=2"):
        EngineFleet(rollout, ["unused"] * rollout.num_engines, ray_options=[{}, {}, {}])
    with pytest.raises(ValueError, match=r"EngineFleet cpus has 1 entries for rollout.num_engines=2"):
        EngineFleet(rollout, ["unused"] * rollout.num_engines, cpus=[[0]])
