"""An episode that ends with a request still generating (its program killed mid-call) has that
request aborted on the engine, and is refused any resume of it; an id whose episode ended with
nothing in flight is free again at once."""

from __future__ import annotations

import threading
import time

import openai
import pytest

from tests.integration.agentflow.router_support import auth

pytestmark = pytest.mark.usefixtures("fresh_script")


HI = [{"role": "user", "content": "hi"}]


def _client(router, trajectory: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=router.url_for(trajectory), api_key=auth(router)["Authorization"].split()[1], max_retries=0)


def _wait_for(condition, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def test_ending_an_episode_aborts_its_request_in_flight_and_refuses_the_resume(router, engine):
    engine.hold()
    outcome = {}

    def abandoned_call():
        try:
            _client(router, "killed").chat.completions.create(
                model="tiny", messages=[{"role": "user", "content": "hi"}], max_tokens=64
            )
        except openai.APIStatusError as exc:
            outcome["status"] = exc.status_code
            outcome["message"] = exc.message

    caller = threading.Thread(target=abandoned_call)
    caller.start()
    try:
        _wait_for(lambda: engine.waiting == 1)
        assert router.router.end_trajectory("killed") == 1
        caller.join(timeout=10)
    finally:
        engine.release()
    rid = engine.aborted[0]
    # The engine's abort came back empty-handed; the router did not resume it on the engine.
    assert [body["rid"] for body in engine.requests] == [rid] and len(engine.ports) == 1
    assert outcome["status"] == 409 and "trajectory 'killed' has ended" in outcome["message"]
    assert router.router.store.get("killed") is None  # nothing recorded for a reply nobody read


def test_an_episode_that_ended_idle_leaves_its_id_free(router, engine):
    assert router.router.end_trajectory("quiet") == 0
    engine.say("hello")
    reply = _client(router, "quiet").chat.completions.create(
        model="tiny", messages=[{"role": "user", "content": "hi"}], max_tokens=8
    )
    assert reply.choices[0].message.content == "hello" and engine.aborted == []
