"""A bounded fuzz on loopback: some hundreds of generated requests, half-valid and half-hostile,
against the router (OpenAI and Anthropic routes) and the embedded engine's /generate, both real
servers on the tiny model. No answer may be a 5xx, and both servers must serve a plain request
afterwards.

Derandomized, so a run is reproducible and its length fixed; widen `max_examples` locally to
search further (LOONGSAGE_FUZZ_EXAMPLES=5000 runs that many per test, randomized).
"""

from __future__ import annotations

import json
import os

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.integration.inference.embedded.engine_support import running_engine

EXAMPLES = int(os.environ.get("LOONGSAGE_FUZZ_EXAMPLES", "150"))  # per test
FUZZ = settings(
    max_examples=EXAMPLES, deadline=None, derandomize=EXAMPLES <= 150, database=None, suppress_health_check=list(HealthCheck)
)

# ---- values ---------------------------------------------------------------------------------
# Each request is a well-formed body with up to two places (a field, a message's key, a list
# item, anywhere) overwritten by anything at all, then maybe mangled as bytes: about a third
# reach the engine, the rest probe validation one fault at a time.
lone_surrogate = st.sampled_from(["\ud800", "\udfff", "\udbff"])
bad_text = st.builds(lambda a, s, b: a + s + b, st.text(max_size=4), lone_surrogate, st.text(max_size=4))
edge_ints = st.sampled_from([0, -1, 1, 2**31 - 1, 2**31, 2**63 - 1, 2**63, 2**64, -(2**63) - 1, 2**70, 10**30])
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    edge_ints,
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=12),
    bad_text,
)
anything = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6) | bad_text, inner, max_size=3),
    max_leaves=6,
)
small_tokens = st.integers(1, 3)
text = st.text(max_size=24)
word = st.text(st.characters(min_codepoint=97, max_codepoint=122), min_size=1, max_size=6)

part = st.fixed_dictionaries({"type": st.just("text"), "text": text})
tool_call = st.fixed_dictionaries(
    {
        "id": word,
        "type": st.just("function"),
        "function": st.fixed_dictionaries({"name": word, "arguments": st.just('{"a": 1}') | text}),
    }
)
openai_message = st.one_of(
    st.fixed_dictionaries(
        {"role": st.sampled_from(["system", "developer", "user"]), "content": text | st.lists(part, min_size=1, max_size=2)}
    ),
    st.fixed_dictionaries(
        {"role": st.just("assistant"), "content": text}, optional={"tool_calls": st.lists(tool_call, min_size=1, max_size=2)}
    ),
    st.fixed_dictionaries({"role": st.just("tool"), "content": text, "tool_call_id": word}),
)
tool = st.fixed_dictionaries(
    {
        "type": st.just("function"),
        "function": st.fixed_dictionaries(
            {
                "name": word,
                "description": text,
                "parameters": st.just({"type": "object", "properties": {"a": {"type": "integer"}}}),
            }
        ),
    }
)
openai_body = st.fixed_dictionaries(
    {"model": st.just("tiny"), "messages": st.lists(openai_message, min_size=1, max_size=3), "max_tokens": small_tokens},
    optional={
        "temperature": st.floats(0, 2),
        "top_p": st.floats(0.1, 1),
        "top_k": st.integers(-1, 50),
        "seed": st.integers(-(2**63), 2**63 - 1),
        "stop": st.lists(word, max_size=2),
        "n": st.just(1),
        "ignore_eos": st.booleans(),
        "logprobs": st.booleans(),
        "stream": st.booleans(),
        "stream_options": st.just({"include_usage": True}),
        "tools": st.lists(tool, max_size=2),
        "tool_choice": st.sampled_from(["auto", "none", "required"]),
        "user": text,
    },
)

block = st.one_of(
    st.fixed_dictionaries({"type": st.just("text"), "text": text}),
    st.fixed_dictionaries({"type": st.just("tool_result"), "tool_use_id": word, "content": text}),
)
tool_use = st.fixed_dictionaries({"type": st.just("tool_use"), "id": word, "name": word, "input": st.just({"a": 1})})
anthropic_message = st.one_of(
    st.fixed_dictionaries({"role": st.just("user"), "content": text | st.lists(block, min_size=1, max_size=2)}),
    st.fixed_dictionaries({"role": st.just("assistant"), "content": text | st.lists(tool_use, min_size=1, max_size=1)}),
)
anthropic_body = st.fixed_dictionaries(
    {"model": st.just("tiny"), "messages": st.lists(anthropic_message, min_size=1, max_size=3), "max_tokens": small_tokens},
    optional={
        "system": text,
        "temperature": st.floats(0, 1),
        "top_k": st.integers(1, 50),
        "top_p": st.floats(0.1, 1),
        "stop_sequences": st.lists(word, max_size=2),
        "stream": st.booleans(),
    },
)

token_ids = st.lists(st.integers(0, 49151), min_size=1, max_size=12)
generate_params = st.fixed_dictionaries(
    {"max_new_tokens": small_tokens},
    optional={
        "temperature": st.floats(0, 2),
        "top_p": st.floats(0.1, 1),
        "top_k": st.integers(-1, 50),
        "sampling_seed": st.integers(-(2**63), 2**64 - 1),
        "stop": st.lists(word, max_size=2),
        "stop_token_ids": st.lists(st.integers(0, 49151), max_size=2),
        "ignore_eos": st.booleans(),
        "skip_special_tokens": st.booleans(),
        "no_stop_trim": st.booleans(),
    },
)
generate_body = st.one_of(
    st.fixed_dictionaries(
        {"input_ids": token_ids, "sampling_params": generate_params},
        optional={"rid": word, "return_logprob": st.booleans(), "logprob_start_len": st.integers(-1, 0)},
    ),
    st.fixed_dictionaries({"input_ids": st.lists(token_ids, min_size=2, max_size=3), "sampling_params": generate_params}),
    st.fixed_dictionaries({"text": text.filter(bool), "sampling_params": generate_params}),
)
faults = st.one_of(st.just([]), st.just([]), st.lists(st.tuples(st.integers(0, 10_000), anything), min_size=1, max_size=2))


def _paths(value, path=()):
    yield path
    children = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, child in children:
        yield from _paths(child, path + (key,))


def _overwrite(body, faults):
    """`body` with each fault's value put at one of its places (picked by the fault's number), or
    under a new key there when that place is an object and the number is odd."""
    for where, value in faults:
        paths = list(_paths(body))[1:]
        path = paths[where % len(paths)]
        parent = body
        for key in path[:-1]:
            parent = parent[key]
        target = parent[path[-1]]
        if isinstance(target, dict) and where % 2:
            target[f"extra{where}"] = value
        else:
            parent[path[-1]] = value
    return body


def _serialize(body) -> bytes:
    # ensure_ascii writes lone surrogates as \\udXXX escapes; allow_nan writes NaN and Infinity.
    return json.dumps(body, ensure_ascii=True, allow_nan=True).encode()


mutation = st.sampled_from(["none"] * 12 + ["truncate", "deep", "long_int", "bad_utf8", "not_object"])


def _mutate(raw: bytes, how: str, at: int) -> bytes:
    cut = at % max(len(raw), 1)
    if how == "truncate":
        return raw[:cut]
    if how == "deep":
        return b'{"x": ' + b"[" * 5000 + b"]" * 5000 + b", " + raw[1:]
    if how == "long_int":
        return raw.replace(b": 1", b": 1" + b"7" * 5000, 1) if b": 1" in raw else b'{"n": ' + b"1" * 5000 + b"}"
    if how == "bad_utf8":
        return raw[:cut] + b"\xff\xfe" + raw[cut:]
    if how == "not_object":
        return b"[" + raw + b"]"
    return raw


# ---- servers --------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def engine(tiny_model_path):
    with running_engine(tiny_model_path, max_context=192) as server:
        yield server


@pytest.fixture(scope="module")
def engine_url(engine) -> str:
    return engine.base_url


@pytest.fixture(scope="module")
def router_settings() -> dict:
    return {"max_body_bytes": 2**20}


@pytest.fixture(scope="module")
def client():
    with httpx.Client(timeout=60, headers={"content-type": "application/json"}) as c:
        yield c


def _assert_no_5xx(response: httpx.Response) -> None:
    assert response.status_code < 500, response.text
    if response.headers.get("content-type", "").startswith("application/json"):
        response.json()  # every answer, error or not, is JSON that parses


@FUZZ
@given(data=st.data(), faults=faults, how=mutation, at=st.integers(0, 10_000), anthropic=st.booleans())
def test_fuzzed_router_requests_never_get_a_5xx(router, client, data, faults, how, at, anthropic):
    body = _overwrite(data.draw(anthropic_body if anthropic else openai_body), faults)
    trajectory = f"fuzz/{at % 7}"  # shared trajectories: later requests continue or branch earlier ones
    url = f"{router.url_for(trajectory, at % 3)}/{'messages' if anthropic else 'chat/completions'}"
    response = client.post(
        url, content=_mutate(_serialize(body), how, at), headers={"Authorization": f"Bearer {router.router.key_for(trajectory)}"}
    )
    _assert_no_5xx(response)
    assert "engine refused" not in response.text, "the router let through a request the engine refused"


@FUZZ
@given(body=generate_body, faults=faults, how=mutation, at=st.integers(0, 10_000))
def test_fuzzed_generate_requests_never_get_a_5xx(engine, client, body, faults, how, at):
    body = _overwrite(body, faults)
    _assert_no_5xx(client.post(f"{engine.base_url}/generate", content=_mutate(_serialize(body), how, at)))


def test_both_servers_still_serve_after_the_fuzz(router, engine, client):
    body = {"model": "tiny", "messages": [{"role": "user", "content": "still there?"}], "max_tokens": 3}
    response = client.post(
        f"{router.url_for('after-fuzz')}/chat/completions",
        json=body,
        headers={"Authorization": f"Bearer {router.router.key_for('after-fuzz')}"},
    )
    assert response.status_code == 200 and response.json()["usage"]["completion_tokens"] > 0
    generated = client.post(f"{engine.base_url}/generate", json={"input_ids": [1, 2], "sampling_params": {"max_new_tokens": 3}})
    assert generated.status_code == 200 and generated.json()["output_ids"]
    assert client.get(f"{router.base_url}/health").status_code == 200
