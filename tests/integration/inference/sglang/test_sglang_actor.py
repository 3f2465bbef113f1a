"""rollout.engine=sglang for real: SglangEngineActor in Ray launching a server process with
SGLang's flags. The embedded engine's CLI stands in for `sglang.launch_server` where a model must
answer; the lifecycle cases use a model-free stand-in server (tests/standins/engine.py)."""

from __future__ import annotations

import os
import shutil
import signal
import sys
import time
from pathlib import Path

import pytest
import ray
import torch
from safetensors.torch import save_file

from loongsage.inference.client import EngineClient, EngineError
from loongsage.inference.embedded.weights import read_safetensors
from loongsage.inference.engines import engine_actor
from loongsage.transfer import push_weights
from tests.integration.inference.embedded.test_engine_memory import _rss_bytes
from tests.integration.transfer.test_weight_sync_distributed import BUCKET_BYTES, greedy
from tests.unit.inference.sglang.test_process import STANDIN, group_members, running

EMBEDDED = [sys.executable, "-m", "loongsage.inference.embedded"]
STARTUP_TIMEOUT_S = 180.0  # a model load on 2 cores shared with other tests


@pytest.fixture(scope="module")
def actor_class(ray_runtime):
    return engine_actor("sglang")  # through the registry, as EngineFleet finds it


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


@pytest.fixture(scope="module")
def perturbed(tiny_model_path, tmp_path_factory) -> tuple[list, str]:
    """The tiny model's tensors moved by noise (as a trainer's step moves them) and a checkpoint
    directory holding the same tensors."""
    generator = torch.Generator().manual_seed(11)
    named = [(name, t + 0.05 * torch.randn(t.shape, generator=generator)) for name, t in read_safetensors(tiny_model_path)]
    directory = tmp_path_factory.mktemp("perturbed")
    for name in ("config.json", "generation_config.json"):  # the architecture and the eos ids
        shutil.copy(Path(tiny_model_path) / name, directory)
    save_file(dict(named), str(directory / "model.safetensors"))
    return named, str(directory)


def test_a_gloo_push_reaches_the_actors_server_and_it_serves_the_new_weights(actor_class, tiny_model_path, perturbed, tmp_path):
    named, directory = perturbed
    actor = actor_class.remote(tiny_model_path, _engine_cfg(tmp_path, command=EMBEDDED))
    url = ray.get(actor.start.remote(), timeout=STARTUP_TIMEOUT_S + 30)
    client = EngineClient(url, timeout=60)
    try:
        before = greedy(url)
        # The trainer's side of trainer.weight_sync=gloo, from this process: /init_weights_update_group
        # on the server the actor launched, one /update_weights_from_distributed per bucket (the last
        # carrying weight_version "7"), then the group destroyed.
        metrics = push_weights(named, [url], 7, BUCKET_BYTES, "gloo", "127.0.0.1")
        pushed = greedy(url)
        answered = _generate(client)["meta_info"]["weight_version"]
        version, info = client.get_weight_version(), client.get_server_info()
        # The reference: the same tensors loaded from disk by the same server.
        client.update_weights_from_disk(directory, weight_version="from-disk")
        expected = greedy(url)
    finally:
        client.close()
        ray.get(actor.stop.remote(), timeout=60)
        ray.kill(actor)

    assert (version, answered) == ("7", "7")
    assert (info["weight_update_groups"], info["weight_update_session"]) == ([], None)  # the push cleaned up
    assert metrics["transfer/bytes"] == sum(t.numel() * t.element_size() for _, t in named)
    assert metrics["transfer/buckets"] > 1  # the per-bucket calls repeated
    assert pushed != before  # the noise changes what the model says...
    for (ids, logprobs), (ref_ids, ref_logprobs) in zip(pushed, expected):  # ...into what the pushed model says
        assert ids == ref_ids
        assert max(abs(a - b) for a, b in zip(logprobs, ref_logprobs)) < 1e-6


@pytest.fixture(scope="module")
def big_model(llama_dir) -> tuple[str, int]:
    """(directory, bytes of its parameters) of the ~130 MB random Llama of the engine's own memory
    test. The tiny model's 13 MB are mostly small tensors, whose partly used first and last pages
    stay resident (measured: 12.25 of 12.28 MB fell), so "the resident size falls by at least the
    weights" cannot hold for it however well the release works."""
    return llama_dir


def test_a_colocated_server_gives_its_weights_memory_back_and_takes_it_again(actor_class, big_model, tmp_path):
    path, weight_bytes = big_model
    actor = actor_class.remote(path, _engine_cfg(tmp_path, command=EMBEDDED, colocated=True))
    url = ray.get(actor.start.remote(), timeout=STARTUP_TIMEOUT_S + 30)
    pid = ray.get(actor.status.remote(), timeout=30)["pid"]  # the server itself (exec'd in place of the guard)
    client = EngineClient(url, timeout=60)
    try:
        saver = client.get_server_info()["enable_memory_saver"]  # the launch flag, as the server parsed it
        before = _generate(client)["output_ids"]
        # The same path once without freeing anything: its first-use allocations are not measured.
        client.release_memory_occupation(["cuda_graph"])
        client.resume_memory_occupation(["cuda_graph"])
        loaded = _rss_bytes(pid)
        client.release_memory_occupation(["weights"])
        released = _rss_bytes(pid)
        client.release_memory_occupation(["kv_cache"])  # EngineFleet.release_memory gives back both
        emptied = _rss_bytes(pid)
        info = client.get_server_info()
        with pytest.raises(EngineError, match="weights released") as refused:
            _generate(client)
        client.resume_memory_occupation(["weights"])
        resumed = _rss_bytes(pid)
        client.resume_memory_occupation(["kv_cache"])
        # Resumed weights hold nothing: the trainer's push (here a reload) must write them first.
        client.update_weights_from_disk(path, weight_version="reloaded")
        after = _generate(client)
    finally:
        client.close()
        ray.get(actor.stop.remote(), timeout=60)
        ray.kill(actor)

    mb = 2**20
    report = (
        f"weights {weight_bytes / mb:.1f} MB; server RSS loaded {loaded / mb:.1f}, weights released {released / mb:.1f}, "
        f"KV cache released too {emptied / mb:.1f}, weights resumed {resumed / mb:.1f} MB"
    )
    print(report)
    assert saver is True  # colocated: the actor passed --enable-memory-saver
    assert (info["memory_released"], info["kv_cache_capacity"]) == (["kv_cache", "weights"], 0)
    assert refused.value.status == 503
    assert loaded - released >= weight_bytes, report
    assert resumed - emptied >= 0.95 * weight_bytes, report  # the storages are resident again
    assert (after["output_ids"], after["meta_info"]["weight_version"]) == (before, "reloaded")


def test_a_death_beyond_max_restarts_fails_the_engine_by_name(actor_class, tmp_path):
    actor = actor_class.remote("unused", _engine_cfg(tmp_path, command=[sys.executable, STANDIN], index=3, max_restarts=0))
    ray.get(actor.start.remote(), timeout=60)
    pid = ray.get(actor.status.remote(), timeout=30)["pid"]
    os.kill(pid, signal.SIGKILL)
    status = _status_when(actor, lambda s: s["failed"] is not None, timeout_s=60)
    assert status["failed"] is not None, status
    assert "sglang engine 3 died 1 time(s), more than rollout.max_engine_restarts=0" in status["failed"]
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
    # The words are joined when the server runs, so they are in its output and not in the
    # command line (which the message also quotes): seeing them proves the log's tail is there.
    command = [sys.executable, "-c", "import time; print('loading' + ' forever', flush=True); time.sleep(600)"]
    actor = actor_class.remote("unused", _engine_cfg(tmp_path, command=command, index=5, startup_timeout_s=2))
    with pytest.raises(ray.exceptions.RayTaskError, match=r"sglang engine 5 did not answer .* within 2 s") as error:
        ray.get(actor.start.remote(), timeout=60)
    assert "loading forever" in str(error.value)  # the log's tail
    assert str(tmp_path / "engine-5.log") in str(error.value)
    assert not running(ray.get(actor.status.remote(), timeout=30)["pid"])
    ray.kill(actor)


def test_killing_the_actor_takes_its_server_with_it(actor_class, tmp_path):
    actor = actor_class.remote("unused", _engine_cfg(tmp_path, command=[sys.executable, STANDIN]))
    ray.get(actor.start.remote(), timeout=60)
    pid = ray.get(actor.status.remote(), timeout=30)["pid"]
    ray.kill(actor)  # no stop(): as when EngineFleet gives up on a hung actor
    assert _gone(pid)


def test_unknown_engine_cfg_key_fails_at_creation(actor_class, tmp_path):
    actor = actor_class.remote("unused", {"sglang": {"max_restart": 1}})
    with pytest.raises(ray.exceptions.RayActorError, match="max_restart"):
        ray.get(actor.start.remote(), timeout=60)
