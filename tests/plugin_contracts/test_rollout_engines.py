"""Every `rollout.engine` is a Ray actor class EngineFleet starts one actor of per engine,
called the way EngineFleet and its liveness probe (inference/engine_status.py) call it."""

from __future__ import annotations

import typing

import pytest
from ray.actor import ActorClass

from loongsage.inference.engines import ENGINES, engine_actor
from tests.plugin_contracts.call_shapes import ANY, accepts, method_problems

ROLLOUT_GROUP_CALLS = {"start": (), "stop": (), "gpu_ids": ()}


def python_class(engine) -> type:
    """The class behind a Ray actor class, where its constructor and methods are read."""
    return getattr(engine, "__ray_actor_class__", engine)


@pytest.mark.parametrize("name", sorted(ENGINES))
def test_engine_is_constructed_and_called_the_way_the_engine_fleet_does(name):
    assert isinstance(engine_actor(name), ActorClass)
    cls = python_class(ENGINES[name])
    assert isinstance(cls, type), f"{name}: neither a Ray actor class nor a class"
    # model_path, engine_cfg, cpus
    assert accepts(cls, ANY, ANY, ANY), f"{name}: constructor refuses EngineFleet's three arguments"
    assert method_problems(cls, ROLLOUT_GROUP_CALLS) == []
    # EngineFleet makes EngineClients of what start() returns.
    assert typing.get_type_hints(cls.start).get("return") is str, f"{name}: start() must return the base URL"
