"""The run's sampling block at the router: a request that leaves temperature, top_p, top_k or
max_tokens unset reaches the engine with the run's values (RouterConfig.sampling); one that
sets them keeps its own. That is what makes rollout.* apply to every agent, black-box too."""

from __future__ import annotations

import openai
import pytest

from loongsage.agentflow.router import SamplingDefaults
from loongsage.inference.embedded.engine import Engine
from loongsage.inference.embedded.server import EmbeddedServer
from tests.integration.agentflow.router_support import RecordingProxy, http, start_router

RUN = SamplingDefaults(temperature=0.7, top_p=0.9, top_k=20, max_new_tokens=7)
MESSAGES = [{"role": "user", "content": "Say hi"}]


@pytest.fixture(scope="module")
def engine_settings() -> dict:
    return {"max_context": 256}


@pytest.fixture(scope="module")
def router_settings() -> dict:
    return {"sampling": RUN}


pytestmark = pytest.mark.usefixtures("fresh_script")


def _openai(router, trajectory_id: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=router.url_for(trajectory_id), api_key=router.router.api_key, max_retries=0)


def _sent(engine) -> dict:
    (request,) = engine.requests
    return request["sampling_params"]


def test_openai_request_without_sampling_gets_the_runs_block(router, engine):
    engine.say("hi")
    _openai(router, "defaults").chat.completions.create(model="tiny", messages=MESSAGES)
    sent = _sent(engine)
    assert (sent["temperature"], sent["top_p"], sent["top_k"], sent["max_new_tokens"]) == (0.7, 0.9, 20, 7)


@pytest.mark.parametrize("length", ["max_tokens", "max_completion_tokens"])
def test_openai_request_with_its_own_sampling_keeps_it(router, engine, length):
    engine.say("hi")
    _openai(router, f"own-{length}").chat.completions.create(
        model="tiny", messages=MESSAGES, temperature=0.3, top_p=0.5, extra_body={"top_k": 5}, **{length: 3}
    )
    sent = _sent(engine)
    assert (sent["temperature"], sent["top_p"], sent["top_k"], sent["max_new_tokens"]) == (0.3, 0.5, 5, 3)


def test_openai_request_setting_one_field_keeps_the_runs_others(router, engine):
    engine.say("hi")
    _openai(router, "one").chat.completions.create(
        model="tiny", messages=MESSAGES, temperature=1.2, extra_body={"top_k": 0}
    )  # 0: off, as OpenAI servers read it
    sent = _sent(engine)
    assert (sent["temperature"], sent["top_p"], sent["top_k"], sent["max_new_tokens"]) == (1.2, 0.9, -1, 7)


def test_anthropic_request_gets_the_runs_block_but_its_own_max_tokens(router, engine):
    engine.say("hi")
    response = http().post(
        f"{router.url_for('claude')}/messages",
        json={"model": "tiny", "max_tokens": 5, "messages": MESSAGES},
        headers={"x-api-key": router.router.api_key, "anthropic-version": "2023-06-01"},
    )
    assert response.status_code == 200, response.text
    sent = _sent(engine)
    assert (sent["temperature"], sent["top_p"], sent["top_k"], sent["max_new_tokens"]) == (0.7, 0.9, 20, 5)


def test_the_runs_max_tokens_shrinks_to_what_fits_the_context(router, engine, tokenizer):
    # An explicit max_tokens past the context is the agent's error (400, tested elsewhere); the
    # run's default is not the agent's ask, so near the limit it becomes the room that is left.
    def room_after(words: str) -> int:
        template = tokenizer.apply_chat_template([{"role": "user", "content": words}], add_generation_prompt=True, tokenize=False)
        return engine.max_context - len(tokenizer.encode(template, add_special_tokens=False))

    words = "word "
    while room_after(words + "word ") > 0:  # the longest message that still leaves room
        words += "word "
    room = room_after(words)
    assert 0 < room < RUN.max_new_tokens
    engine.say("ok")
    _openai(router, "near-limit").chat.completions.create(model="tiny", messages=[{"role": "user", "content": words}])
    assert _sent(engine)["max_new_tokens"] == room


def test_the_embedded_engine_samples_with_the_runs_block(tiny_model_path, tokenizer):
    """End to end on the real engine: the defaults are accepted and the reply is as long as the
    run's max_new_tokens (ignore_eos: whatever is sampled)."""
    engine = EmbeddedServer(Engine(tiny_model_path, {"max_running": 4, "max_context": 256, "num_threads": 1}))
    engine.start()
    proxy = RecordingProxy(engine.base_url)
    router = start_router(
        proxy.url, tiny_model_path, tokenizer, sampling=SamplingDefaults(temperature=0.8, top_p=0.95, top_k=10, max_new_tokens=3)
    )
    try:
        completion = _openai(router, "real").chat.completions.create(
            model="tiny", messages=MESSAGES, extra_body={"ignore_eos": True}
        )
    finally:
        router.stop()
        proxy.stop()
        engine.stop()
    assert completion.usage.completion_tokens == 3
    ((sent, _),) = proxy.calls.values()
    params = sent["sampling_params"]
    assert (params["temperature"], params["top_p"], params["top_k"], params["max_new_tokens"]) == (0.8, 0.95, 10, 3)
