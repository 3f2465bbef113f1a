"""Which engines rollout.max_engine_restarts restarts, and that a fleet of one it cannot restart
says so at its start instead of the knob doing nothing silently."""

from __future__ import annotations

import logging

import pytest

from loongsage.config import RolloutConfig
from loongsage.inference.engines import is_restarted, restart_options
from loongsage.inference.fleet import EngineFleet

CUSTOM = "loongsage.inference.embedded.actor:EmbeddedEngineActor"  # the embedded actor, named by import path


def test_ray_restarts_the_embedded_actor_and_sglang_its_server_and_nothing_restarts_an_import_path():
    assert restart_options("embedded", 3) == {"max_restarts": 3}
    assert restart_options("sglang", 3) == {}  # its actor restarts the server process
    assert restart_options(CUSTOM, 3) == {}
    assert is_restarted("embedded") and is_restarted("sglang") and not is_restarted(CUSTOM)


@pytest.mark.parametrize(("engine", "warned"), [(CUSTOM, True), ("embedded", False)])
def test_a_fleet_of_an_engine_that_is_not_restarted_says_so(engine, warned, ray_runtime, tiny_model_path, caplog):
    cfg = RolloutConfig(engine=engine, num_engines=1, max_context=256, num_threads=1)
    with caplog.at_level(logging.WARNING, logger="loongsage.inference.fleet"):
        fleet = EngineFleet(cfg, [tiny_model_path])
    fleet.stop()
    said = f"rollout.engine={engine} is not restarted (rollout.max_engine_restarts=3 applies to embedded and sglang only)"
    assert (said in caplog.text) is warned
