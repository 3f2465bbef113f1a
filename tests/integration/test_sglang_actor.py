"""rollout.engine=sglang for real: SglangEngineActor in Ray launching a server process with
SGLang's flags. The embedded engine's CLI stands in for `sglang.launch_server` where a model must
answer; the lifecycle cases use a model-free stand-in server (tests/unit/inference/sglang)."""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

import pytest
import ray

from loongsage.inference.client import EngineClient
from loongsage.inference.engines import engine_actor
from tests.unit.inference.sglang.test_process import STANDIN, group_members, running

EMBEDDED = [sys.executable, "-m", "loongsage.inference.embedded"]
STARTUP_TIMEOUT_S = 180.0  # a model load on 2 cores shared with other tests


@pytest.fixture(scope="module")
def actor_class(ray_runtime):
    return engine_actor("sglang")  # through the registry, as RolloutGroup finds it


def _engine_cfg(tmp_path: Path, **sglang) -> dict:
    return {
        "max_running": 4,
        "max_context": 128,
        "num_threads": 1,
        "dtype": "float32",
        "weight_version": "0",
        "sglang": {"log_dir": str(tmp_path), "startup_timeout_s": STARTUP_TIMEOUT_S, **sglang},
    }


def _status_when(actor, predicate, timeout_s: float = STARTUP_TIMEOUT_S) -> dict:
    """The actor's status once `predicate` holds for it (the last one seen, when it never does)."""
    deadline = time.monotonic() + timeout_s
    status = ray.get(actor.status.remote(), timeout=30)
    while not predicate(status) and time.monotonic() < deadline:
        time.sleep(0.2)
        status = ray.get(actor.status.remote(), timeout=30)
    return status


def _gone(pid: int, timeout_s: float = 30.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while running(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    return not running(pid)


def _generate(client: EngineClient) -> dict:
    return client.generate(input_ids=[1, 2, 3], sampling_params={"max_new_tokens": 3, "temperature": 0})


def test_serves_restarts_on_the_same_url_and_stops(actor_class, tiny_model_path, tmp_path):
    actor = actor_class.remote(tiny_model_path, _engine_cfg(tmp_path, command=EMBEDDED, max_restarts=1))
    url = ray.get(actor.start.remote(), timeout=STARTUP_TIMEOUT_S + 30)
    assert url.startswith("http://127.0.0.1:")
    client = EngineClient(url, timeout=60)
    out = _generate(client)
    assert len(out["output_ids"]) == 3 and out["meta_info"]["weight_version"] == "0"

    first = ray.get(actor.status.remote(), timeout=30)
    assert (first["restarts"], first["alive"], first["failed"]) == (0, True, None)
    log = Path(first["log"])
    assert log == tmp_path / "engine-0.log" and "serving" in log.read_text()  # the server's own output

    os.kill(first["pid"], signal.SIGKILL)
    second = _status_when(actor, lambda s: s["restarts"] == 1 and s["alive"])
    assert (second["restarts"], second["alive"], second["failed"]) == (1, True, None), second
    assert second["pid"] != first["pid"]
    assert ray.get(actor.start.remote(), timeout=30) == url  # the same URL, still answering
    assert len(_generate(client)["output_ids"]) == 3
    assert log.read_text().count("serving") == 2  # both starts' output, appended

    ray.get(actor.stop.remote(), timeout=60)
    assert not running(second["pid"]) and group_members(second["pid"]) == []
    assert not client.health()
    ray.get(actor.stop.remote(), timeout=60)  # idempotent
    assert ray.get(actor.status.remote(), timeout=30)["restarts"] == 1  # a stop is no death
    client.close()
    ray.kill(actor)


def test_a_death_beyond_max_restarts_fails_the_engine_by_name(actor_class, tmp_path):
    actor = actor_class.remote("unused", _engine_cfg(tmp_path, command=[sys.executable, STANDIN], index=3, max_restarts=0))
    ray.get(actor.start.remote(), timeout=60)
    pid = ray.get(actor.status.remote(), timeout=30)["pid"]
    os.kill(pid, signal.SIGKILL)
    status = _status_when(actor, lambda s: s["failed"] is not None, timeout_s=60)
    assert status["failed"] is not None, status
    assert "sglang engine 3 died 1 time(s), more than rollout.sglang.max_restarts=0" in status["failed"]
    assert "standin serving" in status["failed"]  # the log's tail
    assert (status["restarts"], status["alive"], status["pid"]) == (0, False, pid)
    ray.get(actor.stop.remote(), timeout=60)
    ray.kill(actor)


def test_a_server_that_exits_fails_start_with_its_output_and_exit_code(actor_class, tmp_path):
    command = [sys.executable, "-c", "import sys; print('boom'); sys.exit(3)"]
    actor = actor_class.remote("unused", _engine_cfg(tmp_path, command=command, index=1))
    with pytest.raises(ray.exceptions.RayTaskError) as error:
        ray.get(actor.start.remote(), timeout=60)
    message = str(error.value)
    assert "sglang engine 1 exited with code 3" in message and "boom" in message
    ray.kill(actor)


def test_a_server_that_never_answers_fails_start_naming_the_timeout(actor_class, tmp_path):
    command = [sys.executable, "-c", "import time; time.sleep(600)"]
    actor = actor_class.remote("unused", _engine_cfg(tmp_path, command=command, index=5, startup_timeout_s=2))
    with pytest.raises(ray.exceptions.RayTaskError, match=r"sglang engine 5 did not answer .* within 2 s"):
        ray.get(actor.start.remote(), timeout=60)
    assert not running(ray.get(actor.status.remote(), timeout=30)["pid"])
    ray.kill(actor)


def test_killing_the_actor_takes_its_server_with_it(actor_class, tmp_path):
    actor = actor_class.remote("unused", _engine_cfg(tmp_path, command=[sys.executable, STANDIN]))
    ray.get(actor.start.remote(), timeout=60)
    pid = ray.get(actor.status.remote(), timeout=30)["pid"]
    ray.kill(actor)  # no stop(): as when RolloutGroup gives up on a hung actor
    assert _gone(pid)


def test_unknown_engine_cfg_key_fails_at_creation(actor_class, tmp_path):
    actor = actor_class.remote("unused", {"sglang": {"max_restart": 1}})
    with pytest.raises(ray.exceptions.RayActorError, match="max_restart"):
        ray.get(actor.start.remote(), timeout=60)
