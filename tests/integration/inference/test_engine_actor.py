"""The engine as a real Ray actor, reached over HTTP from the driver."""

from __future__ import annotations

import pytest
import ray

from loongsage.inference.client import EngineClient
from loongsage.inference.embedded.actor import EmbeddedEngineActor
from loongsage.models import resolve_model_path


@pytest.fixture(scope="module")
def ray_session(ray_runtime):
    return ray_runtime


def test_actor_serves_generate_and_stops(ray_session):
    actor = EmbeddedEngineActor.remote(str(resolve_model_path("tiny")), {"max_running": 4, "num_threads": 1})
    url = ray.get(actor.start.remote(), timeout=120)
    assert url.startswith("http://127.0.0.1:")
    client = EngineClient(url, timeout=30)
    out = client.generate(input_ids=[1, 2, 3], sampling_params={"max_new_tokens": 3, "temperature": 0})
    assert len(out["output_ids"]) == 3
    ray.get(actor.stop.remote(), timeout=30)
    assert not client.health()
    client.close()
    ray.kill(actor)


def test_unknown_engine_cfg_key_fails_at_creation(ray_session):
    actor = EmbeddedEngineActor.remote("unused", {"max_runing": 4})
    with pytest.raises(ray.exceptions.RayActorError, match="max_runing"):
        ray.get(actor.start.remote(), timeout=60)
