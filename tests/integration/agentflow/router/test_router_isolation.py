"""One trajectory cannot disturb another through the router: hostile requests among good ones in
the same engine batch, an engine error (answered to the request that met it, as a 502 and
never as an empty success), and the engine connection such an error may leave broken (never
reused)."""

from __future__ import annotations

import asyncio

import httpx
import openai
import pytest

from loongsage.inference.client import EngineClient, EngineError
from tests.integration.agentflow.router_support import get_trajectory, start_router
from tests.integration.inference.embedded.engine_support import running_engine
from tests.standins.engine import StandinEngine


@pytest.fixture(scope="module")
def engine(tiny_model_path):
    with running_engine(tiny_model_path, max_context=256) as server:
        yield server


@pytest.fixture(scope="module")
def engine_url(engine) -> str:
    return engine.base_url


@pytest.fixture(scope="module")
def scripted(tokenizer):
    double = StandinEngine(tokenizer)
    yield double
    double.stop()


def _agent(router, trajectory_id: str) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=router.url_for(trajectory_id), api_key=router.router.key_for(trajectory_id), max_retries=0)


async def _ask(router, trajectory_id: str, seed: int, **extra):
    async with _agent(router, trajectory_id) as client:
        return await client.chat.completions.create(
            model="tiny",
            messages=[{"role": "user", "content": f"Count to {seed}"}],
            max_tokens=32,
            seed=seed,
            temperature=1.0,
            extra_body={"ignore_eos": True, **extra},
        )


def test_hostile_requests_leave_other_trajectories_untouched(router, engine):
    alone = {seed: asyncio.run(_ask(router, f"alone-{seed}", seed)).choices[0].message.content for seed in range(5)}

    async def together():
        goods = [asyncio.create_task(_ask(router, f"good-{seed}", seed)) for seed in range(5)]
        while not engine.engine.scheduler.running:  # the hostile ones land mid-batch
            await asyncio.sleep(0.005)
        bads = [
            _ask(router, "bad-top-k", 1, top_k=2**70),
            _ask(router, "bad-top-k-32", 1, top_k=2**31),
            _ask(router, "bad-seed", 2**64),
            _ask(router, "bad-n", 1, n=2**70),
        ]
        return await asyncio.gather(*goods), await asyncio.gather(*bads, return_exceptions=True)

    goods, bads = asyncio.run(together())
    assert all(isinstance(b, openai.BadRequestError) for b in bads), bads
    for seed, completion in enumerate(goods):
        assert completion.choices[0].message.content == alone[seed]
        assert completion.choices[0].finish_reason == "length" and completion.usage.completion_tokens == 32
        turn = get_trajectory(router, f"good-{seed}")["branches"][0]["turns"][0]
        assert turn["output_ids"] == get_trajectory(router, f"alone-{seed}")["branches"][0]["turns"][0]["output_ids"]


def test_an_engine_error_is_a_502_for_its_request_only(router, engine):
    model = engine.engine.scheduler.model

    def broken_decode(*args, **kwargs):
        raise RuntimeError("injected decode failure")

    model.decode = broken_decode
    try:
        with pytest.raises(openai.APIStatusError, match="injected decode failure") as raised:
            asyncio.run(_ask(router, "met-the-failure", 1))
        assert raised.value.status_code == 502
    finally:
        del model.decode
    completion = asyncio.run(_ask(router, "after-the-failure", 2))
    assert completion.usage.completion_tokens == 32 and completion.choices[0].message.content


@pytest.mark.parametrize("failure", ["answer", "raise"])
def test_the_connection_of_an_engine_error_is_never_reused(tiny_model_path, tokenizer, scripted, failure):
    """ "answer": a JSON 500 on a connection the engine keeps open; "raise": uvicorn's own 500,
    after which it closes the connection. Either way the next request, another trajectory's,
    goes out on a fresh connection and succeeds."""
    scripted.reset()
    server = start_router(scripted.url, tiny_model_path, tokenizer, max_context=512)
    try:
        client = httpx.Client(base_url=server.base_url, timeout=30)
        body = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}

        def chat(trajectory_id: str) -> httpx.Response:
            return client.post(
                f"{server.url_for(trajectory_id)}/chat/completions",
                json=body,
                headers={"Authorization": f"Bearer {server.router.key_for(trajectory_id)}"},
            )

        scripted.say("one")
        assert chat("first").status_code == 200
        scripted.failures.append(failure)
        failed = chat("unlucky")
        assert failed.status_code == 502 and "HTTP 500" in failed.json()["error"]["message"]
        scripted.say("two")
        after = chat("bystander")
        assert after.status_code == 200, after.text
        assert scripted.ports[2] != scripted.ports[1], "the connection that carried the 500 was reused"
        client.close()
    finally:
        server.stop()


def test_engine_client_retires_its_connections_after_a_5xx(scripted):
    """The sync and the async client: the connection is kept alive across successes, and
    dropped after a 5xx."""
    engine = EngineClient(scripted.url, timeout=30)

    async def three_async_calls():
        scripted.say("a")
        await engine.agenerate(input_ids=[1, 2])
        scripted.failures.append("answer")
        with pytest.raises(EngineError, match="HTTP 500"):
            await engine.agenerate(input_ids=[1, 2])
        scripted.say("b")
        await engine.agenerate(input_ids=[1, 2])

    try:
        scripted.reset()
        scripted.say("a")
        engine.generate(input_ids=[1, 2])
        scripted.failures.append("answer")
        with pytest.raises(EngineError, match="HTTP 500"):
            engine.generate(input_ids=[1, 2])
        scripted.say("b")
        engine.generate(input_ids=[1, 2])
        assert scripted.ports[0] == scripted.ports[1] != scripted.ports[2]
        scripted.reset()
        asyncio.run(three_async_calls())
        assert scripted.ports[0] == scripted.ports[1] != scripted.ports[2]
    finally:
        engine.close()


def test_a_request_aborted_before_any_token_is_an_error_not_an_empty_reply(tiny_model_path, tokenizer, scripted):
    scripted.reset()
    server = start_router(scripted.url, tiny_model_path, tokenizer, max_context=512, max_resumes=1)
    try:
        for _ in range(2):  # the first call and its one resume
            scripted.queue([], {"type": "abort", "message": "aborted by request"})
        client = openai.OpenAI(base_url=server.url_for("aborted"), api_key=server.router.key_for("aborted"), max_retries=0)
        with pytest.raises(openai.APIStatusError, match="aborted the request 2 time") as raised:
            client.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "hi"}], max_tokens=4)
        assert raised.value.status_code == 503 and len(scripted.requests) == 2
        assert server.router.store.get("aborted") is None  # nothing recorded
    finally:
        server.stop()
