"""Malformed and refused requests over real HTTP: each gets a 4xx (or 503 when no engine
answers) with a JSON message in the style of the API called, and nothing is recorded."""

from __future__ import annotations

import json

import httpx
import openai
import pytest

from tests.integration.agentflow.router_support import auth, start_router

MAX_BODY = 4096
MAX_CONTEXT = 64


@pytest.fixture(scope="module")
def engine_settings() -> dict:
    return {"max_context": MAX_CONTEXT}


@pytest.fixture(scope="module")
def router_settings() -> dict:
    return {"max_body_bytes": MAX_BODY}


def _chat(router, body=None, headers=None, content=None, trajectory="bad") -> httpx.Response:
    headers = auth(router) if headers is None else headers
    url = f"{router.url_for(trajectory)}/chat/completions"
    if content is not None:
        return httpx.post(url, headers={**headers, "content-type": "application/json"}, content=content)
    return httpx.post(url, headers=headers, json=body)


def _error(response: httpx.Response, status: int) -> dict:
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert error["message"]
    return error


def _ok_body(**extra) -> dict:
    return {"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4, **extra}


def test_bad_json_is_400(router):
    error = _error(_chat(router, content=b'{"model": "tiny", "messages": [}'), 400)
    assert error["param"] == "body" and "not valid JSON" in error["message"]


def test_unknown_model_is_404(router):
    error = _error(_chat(router, {**_ok_body(), "model": "gpt-5"}), 404)
    assert error["code"] == "model_not_found" and "'gpt-5' not found" in error["message"]


def test_missing_or_wrong_key_is_401(router):
    error = _error(_chat(router, _ok_body(), headers={}), 401)
    assert error["type"] == "authentication_error" and "missing API key" in error["message"]
    error = _error(_chat(router, _ok_body(), headers={"Authorization": "Bearer nope"}), 401)
    assert error["message"].startswith("invalid API key")
    assert _error(_chat(router, _ok_body(), headers={"x-api-key": "nope"}), 401)
    assert httpx.get(f"{router.base_url}/trajectories", headers={"x-api-key": "nope"}).status_code == 401
    assert httpx.get(f"{router.base_url}/health").status_code == 200  # probes need no key


def test_oversize_body_is_413_declared_or_streamed(router):
    big = _ok_body(messages=[{"role": "user", "content": "x" * MAX_BODY}])
    error = _error(_chat(router, big), 413)
    assert f"limit of {MAX_BODY} bytes" in error["message"]

    def chunks():  # no content-length: the limit is enforced while reading
        yield json.dumps(big).encode()

    response = httpx.post(
        f"{router.url_for('bad')}/chat/completions",
        content=chunks(),
        headers={**auth(router), "content-type": "application/json"},
    )
    assert "transfer-encoding" in response.request.headers
    _error(response, 413)


@pytest.mark.parametrize(
    "body, param",
    [
        (
            {
                "model": "tiny",
                "messages": [
                    {"role": "user", "content": "a"},
                    {"role": "assistant", "content": "b"},
                    {"role": "wizard", "content": "c"},
                ],
            },
            "messages[2].role",
        ),
        ({"model": "tiny", "messages": "hello"}, "messages"),
        ({"model": "tiny", "messages": [{"role": "user", "content": "a"}], "max_tokens": "many"}, "max_tokens"),
        ({"model": "tiny", "messages": [{"role": "user", "content": "a"}], "n": 129}, "n"),
        ({"model": "tiny", "messages": [{"role": "tool", "content": {"x": 1}}]}, "messages[0].content"),
    ],
)
def test_wrong_fields_are_400_naming_them(router, engine, body, param):
    error = _error(_chat(router, body), 400)
    assert error["param"] == param and param in error["message"]
    assert engine.requests == []


def test_max_tokens_past_the_context_is_cut_to_fit_and_a_prompt_past_it_is_400_with_the_numbers(router, engine, tokenizer):
    """A program may ask for more than fits (Claude Code always asks for 32000): the reply ends
    where the context does. A prompt that leaves no room for a reply is refused."""
    template = tokenizer.apply_chat_template([{"role": "user", "content": "hi"}], add_generation_prompt=True, tokenize=False)
    prompt = len(tokenizer.encode(template, add_special_tokens=False))
    engine.say("ok")
    assert _chat(router, _ok_body(max_tokens=32000), trajectory="long-ask").status_code == 200
    assert engine.requests[0]["sampling_params"]["max_new_tokens"] == MAX_CONTEXT - prompt
    long = _ok_body(messages=[{"role": "user", "content": "word " * 100}], max_tokens=None)
    error = _error(_chat(router, long), 400)
    assert error["param"] == "messages" and f"context limit is {MAX_CONTEXT} tokens" in error["message"]
    assert len(engine.requests) == 1


def test_errors_reach_the_official_client_as_its_exceptions(router):
    client = openai.OpenAI(base_url=router.url_for("sdk"), api_key="wrong", max_retries=0)
    with pytest.raises(openai.AuthenticationError):
        client.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "x"}])
    client = openai.OpenAI(base_url=router.url_for("sdk"), api_key=router.router.api_key, max_retries=0)
    with pytest.raises(openai.NotFoundError, match="not found"):
        client.chat.completions.create(model="nope", messages=[{"role": "user", "content": "x"}])
    with pytest.raises(openai.BadRequestError, match=r"messages\[0\]\.role"):
        client.chat.completions.create(model="tiny", messages=[{"role": "narrator", "content": "x"}])


def test_anthropic_errors_use_anthropic_shape(router):
    url = f"{router.url_for('bad')}/messages"
    response = httpx.post(url, json={"model": "tiny", "max_tokens": 5, "messages": []})
    assert response.status_code == 401
    assert response.json()["type"] == "error" and response.json()["error"]["type"] == "authentication_error"
    response = httpx.post(
        url, headers={"x-api-key": router.router.api_key}, json={"model": "tiny", "messages": [{"role": "user", "content": "x"}]}
    )
    assert response.status_code == 400
    assert response.json()["error"] == {"type": "invalid_request_error", "message": "max_tokens is required"}


def test_unknown_routes_and_trajectories_are_404_json(router):
    assert _error(httpx.get(f"{router.base_url}/v2/nothing", headers=auth(router)), 404)
    assert _error(httpx.get(f"{router.base_url}/trajectories/never", headers=auth(router)), 404)["param"] == "trajectory_id"
    assert "bad" not in httpx.get(f"{router.base_url}/trajectories", headers=auth(router)).json()["ids"]


def test_a_dead_engine_is_503_once_the_request_timeout_has_passed(tiny_model_path, tokenizer):
    server = start_router("http://127.0.0.1:9", tiny_model_path, tokenizer, max_context=128, request_timeout_s=1.0)
    try:
        error = _error(_chat(server, _ok_body()), 503)
        assert "http://127.0.0.1:9 (down)" in error["message"]
    finally:
        server.stop()
