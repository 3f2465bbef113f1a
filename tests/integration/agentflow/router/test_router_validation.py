"""Hostile bodies at the router: each malformed field is a 400 naming it, before any engine sees
the request. Bodies are sent raw where a JSON encoder would not write them (NaN, 5000-digit
integers, lone surrogates, nesting thousands deep)."""

from __future__ import annotations

import json

import httpx
import openai
import pytest

from tests.integration.agentflow.router_support import auth, http

LONG_INT = "9" * 5000  # past Python's 4300-digit limit on int(str)
LONE = "\\ud800"  # a lone UTF-16 surrogate, as JSON escapes it


@pytest.fixture(scope="module")
def engine_settings() -> dict:
    return {"max_context": 256}


@pytest.fixture(scope="module")
def router_settings() -> dict:
    return {"max_context": 256}


def _chat_body(extra: str = "", content: str = '"hi"', messages: str | None = None) -> str:
    messages = messages or f'[{{"role": "user", "content": {content}}}]'
    return f'{{"model": "tiny", "messages": {messages}, "max_tokens": 4{extra}}}'


def _post(router, path: str, raw: str | bytes) -> httpx.Response:
    return http().post(
        f"{router.url_for('hostile')}/{path}", content=raw, headers={**auth(router), "content-type": "application/json"}
    )


def _nested(depth: int) -> str:
    return '{"a": ' * depth + "1" + "}" * depth


TOOL = '{{"type": "function", "function": {{"name": "f", "description": {d}, "parameters": {p}}}}}'

CHAT_CASES = [
    # text that cannot be encoded, wherever it sits
    (_chat_body(content=f'"a{LONE}b"'), "messages[0].content"),
    (_chat_body(content=f'[{{"type": "text", "text": "{LONE}"}}]'), "messages[0].content[0].text"),
    (_chat_body(f', "stop": ["ok", "{LONE}"]'), "stop[1]"),
    (_chat_body(f', "tools": [{TOOL.format(d=chr(34) + LONE + chr(34), p="{}")}]'), "tools[0].function.description"),
    (
        _chat_body(f', "tools": [{TOOL.format(d=chr(34) + "d" + chr(34), p="{" + chr(34) + LONE + chr(34) + ": 1}")}]'),
        "tools[0].function.parameters",
    ),
    (_chat_body(f', "user": "{LONE}"'), "user"),
    (f'{{"model": "{LONE}", "messages": []}}', "model"),
    # nesting
    (_chat_body(f', "metadata": {_nested(100)}'), "metadata.a.a"),
    (_nested(100_000), "body"),
    ("[" * 200_000, "body"),
    # integer literals too long to convert
    (_chat_body(f', "seed": {LONG_INT}'), "seed"),
    (_chat_body(f', "max_completion_tokens": -{LONG_INT}'), "max_completion_tokens"),
    (_chat_body(content=LONG_INT), "messages[0].content"),
    # integer ranges
    (_chat_body(f', "seed": {2**63}'), "seed"),
    (_chat_body(f', "seed": {-(2**63) - 1}'), "seed"),
    (_chat_body(f', "top_k": {2**31}'), "top_k"),
    (_chat_body(f', "top_k": {2**70}'), "top_k"),
    (_chat_body(', "top_k": -5'), "top_k"),
    (_chat_body(f', "n": {2**70}'), "n"),
    (_chat_body(', "n": 0'), "n"),
    (_chat_body(f', "max_completion_tokens": {2**64}'), "max_completion_tokens"),
    (_chat_body(', "max_completion_tokens": 0'), "max_completion_tokens"),
    (_chat_body(', "max_completion_tokens": 2.5'), "max_completion_tokens"),
    # negative, NaN and infinite floats
    (_chat_body(', "temperature": NaN'), "temperature"),
    (_chat_body(', "temperature": -0.5'), "temperature"),
    (_chat_body(', "temperature": Infinity'), "temperature"),
    (_chat_body(f', "temperature": {LONG_INT[:400]}'), "temperature"),
    (_chat_body(', "top_p": NaN'), "top_p"),
    (_chat_body(', "top_p": -1'), "top_p"),
    (_chat_body(', "frequency_penalty": NaN'), "frequency_penalty"),
    (_chat_body(', "presence_penalty": -Infinity'), "presence_penalty"),
    # bytes that are not UTF-8
    (_chat_body(content='"\xff"').encode("latin-1"), "body"),
]


@pytest.mark.parametrize("raw, field", CHAT_CASES, ids=[field for _, field in CHAT_CASES])
def test_chat_field_errors_are_400_naming_the_field(router, engine, raw, field):
    response = _post(router, "chat/completions", raw)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["param"].startswith(field) and error["message"].startswith(field), error
    assert engine.requests == []


def _messages_body(fields: str = ', "max_tokens": 4', content: str = '"x"') -> str:
    """An Anthropic messages body: `fields` after the model, one user message of `content`."""
    return f'{{"model": "tiny"{fields}, "messages": [{{"role": "user", "content": {content}}}]}}'


MESSAGES_CASES = [
    (_messages_body(f', "max_tokens": {2**31}'), "max_tokens"),
    (_messages_body(f', "max_tokens": 4, "top_k": {2**70}'), "top_k"),
    (_messages_body(', "max_tokens": 4, "temperature": NaN'), "temperature"),
    (_messages_body(f', "max_tokens": 4, "system": "{LONE}"'), "system"),
    (_messages_body(content=f'[{{"type": "text", "text": "{LONE}"}}]'), "messages[0].content[0].text"),
    (_messages_body(f', "max_tokens": {LONG_INT}'), "max_tokens"),
    (_messages_body(', "max_tokens": 4, "stop_sequences": ["a", ""]'), "stop_sequences[1]"),
]


@pytest.mark.parametrize("raw, field", MESSAGES_CASES, ids=[field for _, field in MESSAGES_CASES])
def test_anthropic_field_errors_are_400_naming_the_field(router, engine, raw, field):
    response = _post(router, "messages", raw)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error" and error["message"].startswith(field), error
    assert engine.requests == []


def test_the_official_client_gets_bad_request_naming_the_field(router, engine):
    client = openai.OpenAI(base_url=router.url_for("sdk"), api_key=router.router.key_for("sdk"), max_retries=0)
    messages = [{"role": "user", "content": "hi"}]
    with pytest.raises(openai.BadRequestError, match="top_k") as raised:
        client.chat.completions.create(model="tiny", messages=messages, max_tokens=4, extra_body={"top_k": 2**70})
    assert raised.value.param == "top_k"
    with pytest.raises(openai.BadRequestError, match="seed"):
        client.chat.completions.create(model="tiny", messages=messages, max_tokens=4, seed=2**64)
    # (The SDK itself refuses to send lone surrogates and NaN: the raw cases above cover those.)
    with pytest.raises(openai.BadRequestError, match="temperature"):
        client.chat.completions.create(model="tiny", messages=messages, max_tokens=4, temperature=-1)
    assert engine.requests == []


def test_tool_call_arguments_too_deep_or_too_long_stay_text(router, engine):
    """Arguments are JSON *inside* a string: the body check cannot see them, the history matching
    parses them; past the limits they are kept as the text they are."""
    for arguments in ("[" * 5000 + "]" * 5000, LONG_INT):
        engine.say("done")
        call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": arguments}}
        body = {
            "model": "tiny",
            "max_tokens": 4,
            "messages": [
                {"role": "user", "content": "x"},
                {"role": "assistant", "content": None, "tool_calls": [call]},
                {"role": "tool", "tool_call_id": "c1", "content": "ok"},
                {"role": "user", "content": "y"},
            ],
        }
        response = _post(router, "chat/completions", json.dumps(body))
        # The long prompt may overflow the context (400); either way it is never a 5xx.
        assert response.status_code in (200, 400), response.text
    engine.reset()
