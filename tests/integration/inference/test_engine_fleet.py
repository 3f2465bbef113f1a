"""EngineFleet's control calls reach every engine: a fleet of two embedded engine actors, each
paused, aborted, continued, released and resumed by the one call the controller makes."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from loongsage.config import RolloutConfig
from loongsage.inference.client import EngineClient
from loongsage.inference.engine_launch import EngineSeats
from loongsage.inference.fleet import EngineFleet
from tests.integration.inference.embedded.engine_support import WAIT_S

PROMPT = [1, 504, 3458, 314, 253, 1345, 30, 198]
MAX_CONTEXT = 1024
# Far more tokens than are generated between seeing a request run and pausing it, however
# loaded the machine: the pause finds it mid-generation.
LONG = MAX_CONTEXT - len(PROMPT)


@pytest.fixture(scope="module")
def rollout(ray_runtime, tiny_model_path):
    cfg = RolloutConfig(engine="embedded", num_engines=2, max_running=4, max_context=MAX_CONTEXT, num_threads=1)
    # Colocated, so that release_memory is not a no-op; it changes nothing else in the fleet.
    fleet = EngineFleet(cfg, [tiny_model_path] * cfg.num_engines, seats=EngineSeats(colocated=True))
    assert len(set(fleet.urls)) == 2  # two engines, two servers
    yield fleet
    fleet.stop()


def _greedy(max_new_tokens: int) -> dict:
    return {"temperature": 0, "max_new_tokens": max_new_tokens, "ignore_eos": True}


def _until_running(clients: list[EngineClient]) -> None:
    deadline = time.monotonic() + WAIT_S
    for client in clients:
        while not client.get_server_info()["running"]:
            assert time.monotonic() < deadline, f"{client.base_url}: no request running within {WAIT_S} s"
            time.sleep(0.01)


def test_an_interrupting_weight_update_pauses_every_engine_and_continues_every_one(rollout, tiny_model_path):
    clients = rollout.clients
    with ThreadPoolExecutor(len(clients) * 2) as pool:
        long = [pool.submit(c.generate, input_ids=PROMPT, sampling_params=_greedy(LONG)) for c in clients]
        _until_running(clients)  # each engine is mid-generation
        with rollout.weight_update(interrupt=True):
            # Pause mode abort: each engine answers what it had in flight at once, and stays paused.
            cut = [future.result(timeout=WAIT_S) for future in long]
            paused = [c.get_server_info() for c in clients]
            late = [pool.submit(c.generate, input_ids=PROMPT, sampling_params=_greedy(3)) for c in clients]
            time.sleep(0.5)  # time enough for a 3-token answer from an engine that was not paused
            held = [future.done() for future in late]
            # The push, while every engine is paused (RolloutPipeline.update_weights does it here).
            for client in clients:
                client.update_weights_from_disk(tiny_model_path, weight_version="1")
            still = [c.get_server_info() for c in clients]
        answered = [future.result(timeout=WAIT_S) for future in late]
    after = [c.get_server_info() for c in clients]

    for out in cut:
        reason = out["meta_info"]["finish_reason"]
        assert reason["type"] == "abort" and "pause_generation" in reason["message"], reason
        assert 0 < len(out["output_ids"]) < LONG
    assert [info["paused"] for info in paused] == [True, True]
    assert held == [False, False]  # a request sent to either engine waited
    assert [info["paused"] for info in still] == [True, True]
    # Not one decode step on either engine while paused (the update included).
    assert [info["stats"]["decode_steps"] for info in still] == [info["stats"]["decode_steps"] for info in paused]
    assert [info["paused"] for info in after] == [False, False]
    for out in answered:  # both continued, on the weights pushed during the pause
        assert out["meta_info"]["finish_reason"]["type"] == "length" and len(out["output_ids"]) == 3
        assert out["meta_info"]["weight_version"] == "1"


def test_release_and_resume_for_a_push_reach_every_colocated_engine(rollout, tiny_model_path):
    clients = rollout.clients
    before = [c.generate(input_ids=PROMPT, sampling_params=_greedy(4))["output_ids"] for c in clients]
    rollout.release_memory()
    released = [c.get_server_info()["memory_released"] for c in clients]
    with rollout.memory_resumed_for_push():
        during = [c.get_server_info()["memory_released"] for c in clients]
        for client in clients:  # the push: resumed weights hold nothing until written
            client.update_weights_from_disk(tiny_model_path, weight_version="2")
    after = [c.get_server_info()["memory_released"] for c in clients]
    outputs = [c.generate(input_ids=PROMPT, sampling_params=_greedy(4)) for c in clients]

    assert released == [["kv_cache", "weights"]] * 2
    assert during == [["kv_cache"]] * 2  # the weights' memory back before the push, the KV cache not yet
    assert after == [[], []]
    assert [out["output_ids"] for out in outputs] == before
    assert [out["meta_info"]["weight_version"] for out in outputs] == ["2", "2"]
