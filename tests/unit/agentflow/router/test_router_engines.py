"""The router in front of several engines over real HTTP (StandinEngine): a trajectory that loses
its engine goes on on another, each turn recording the engine that answered; what cannot be
answered maps to the router's errors (400 refused, 502 failed, 503 no engine)."""

from __future__ import annotations

import httpx
import pytest

from loongsage.agentflow.router import Router, RouterConfig
from loongsage.agentflow.router.server import RouterServer
from loongsage.inference.engine_roster import EngineRoster
from tests.standins.engine import StandinEngine


@pytest.fixture
def engines():
    doubles = [StandinEngine(name=f"e{i}") for i in range(2)]
    yield doubles
    for double in doubles:
        double.stop()


@pytest.fixture
def start(engines, tiny_model_path, tokenizer):
    servers = []

    def start_router(roster: EngineRoster | None = None, **settings) -> RouterServer:
        # A short request timeout: a test that goes wrong fails instead of waiting for an engine.
        settings = {"request_timeout_s": 10.0, **settings}
        cfg = RouterConfig(
            model=tiny_model_path, engine_urls=tuple(e.url for e in engines), served_model_names=("tiny",), **settings
        )
        server = RouterServer(Router(cfg, tokenizer=tokenizer, roster=roster))
        server.start()
        servers.append(server)
        return server

    yield start_router
    for server in servers:
        server.stop()


def chat(server: RouterServer, trajectory_id: str, messages: list[dict], **extra) -> httpx.Response:
    return httpx.post(
        f"{server.url_for(trajectory_id)}/chat/completions",
        json={"model": "tiny", "messages": messages, "max_tokens": 4, **extra},
        headers={"Authorization": f"Bearer {server.router.key_for(trajectory_id)}"},
        timeout=60,
    )


def test_a_trajectory_whose_engine_drops_goes_on_on_another_and_each_turn_names_its_engine(engines, start):
    e0, e1 = engines
    server = start()
    messages = [{"role": "user", "content": "hi"}]
    first = chat(server, "t", messages)
    assert first.status_code == 200, first.text
    e0.stop()
    messages += [first.json()["choices"][0]["message"], {"role": "user", "content": "and?"}]
    second = chat(server, "t", messages)
    assert second.status_code == 200, second.text
    (branch,) = server.router.store.get("t").branches
    assert [turn.engine for turn in branch.turns] == [e0.url, e1.url]
    assert branch.turns[1].prompt_ids[: len(branch.turns[0].prompt_ids)] == branch.turns[0].prompt_ids
    assert len(e1.requests) == 1 and server.router.engines.roster.state(0) == "down"


def test_the_context_limit_is_read_off_an_engine_that_answers(engines, start):
    e0, e1 = engines
    e0.stop()
    e1.max_context = 40
    server = start()  # max_context unset: asked of the engines
    answered = chat(server, "t", [{"role": "user", "content": "hi"}], max_tokens=100)
    assert answered.status_code == 200, answered.text
    (request,) = e1.requests  # cut to the room the engine's context of 40 leaves
    assert request["sampling_params"]["max_new_tokens"] == 40 - len(request["input_ids"])


@pytest.mark.parametrize(
    ("status", "expected", "text"),
    [(400, 400, "the engine refused the request: e0 answers 400"), (500, 502, "HTTP 500: e0 answers 500")],
)
def test_an_engine_refusal_is_400_and_its_failure_502_neither_tried_elsewhere(engines, start, status, expected, text):
    e0, e1 = engines
    e0.status = status
    server = start(max_context=512)
    response = chat(server, "t", [{"role": "user", "content": "hi"}])
    assert response.status_code == expected and text in response.json()["error"]["message"]
    assert e1.requests == [] and server.router.store.get("t") is None


def test_with_no_engine_answering_the_request_is_503_naming_them(engines, start):
    for engine in engines:
        engine.stop()
    server = start(max_context=512, request_timeout_s=1.0)
    response = chat(server, "t", [{"role": "user", "content": "hi"}])
    assert response.status_code == 503
    message = response.json()["error"]["message"]
    assert all(f"{engine.url} (down)" in message for engine in engines)


def test_a_shared_roster_steers_the_router_away_from_an_engine_the_run_found_lagging(engines, start):
    e0, e1 = engines
    e1.version = "1"
    roster = EngineRoster([e.url for e in engines], published=1)
    roster.mark_lagging(0, 0)  # as the controller's own requests would have found it
    server = start(roster=roster, max_context=512)
    assert server.router.engines.roster is roster
    assert chat(server, "t", [{"role": "user", "content": "hi"}]).status_code == 200
    assert e0.requests == [] and len(e1.requests) == 1


def test_a_shared_roster_must_list_the_configured_engines(engines, tiny_model_path, tokenizer):
    cfg = RouterConfig(model=tiny_model_path, engine_urls=(engines[0].url,))
    with pytest.raises(ValueError, match="not the shared roster's engines"):
        Router(cfg, tokenizer=tokenizer, roster=EngineRoster([e.url for e in engines]))
