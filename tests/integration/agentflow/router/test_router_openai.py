"""The router in front of the real embedded engine (tiny model), driven by the official
`openai` client. Every recorded turn is checked against what the engine itself returned, as
seen by a recording proxy between router and engine."""

from __future__ import annotations

import asyncio

import httpx
import openai
import pytest

from tests.integration.agentflow.router_support import auth, get_trajectory, recorded_embedded_engine
from tests.standins.engine import EOS

VERSION = 4
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Current weather",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        },
    }
]


@pytest.fixture(scope="module")
def proxy(tiny_model_path):
    with recorded_embedded_engine(tiny_model_path, VERSION) as recording:
        yield recording


@pytest.fixture(scope="module")
def engine_url(proxy) -> str:
    return proxy.url


def _client(router, trajectory_id: str, attempt: int = 0) -> openai.OpenAI:
    return openai.OpenAI(base_url=router.url_for(trajectory_id, attempt), api_key=router.router.api_key, max_retries=0)


def _check_against_engine(proxy, turn: dict) -> None:
    """The turn holds exactly what the engine was sent and what it returned."""
    (rid,) = turn["rids"]
    sent, answer = proxy.calls[rid]
    assert sent["input_ids"] == turn["prompt_ids"]
    assert answer["output_ids"] == turn["output_ids"]
    assert turn["output_logprobs"] == [lp for lp, _, _ in answer["meta_info"]["output_token_logprobs"]]
    assert turn["weight_versions"] == [VERSION] * len(turn["output_ids"])


def _visible(tokenizer, output_ids: list[int]) -> str:
    body = output_ids[:-1] if output_ids[-1:] == [EOS] else output_ids
    return tokenizer.decode(body, skip_special_tokens=True)


def test_plain_chat(router, proxy, tokenizer):
    messages = [{"role": "user", "content": "Say hi"}]
    completion = _client(router, "plain").chat.completions.create(model="tiny", messages=messages, max_tokens=8, seed=1)
    (turn,) = get_trajectory(router, "plain")["branches"][0]["turns"]
    _check_against_engine(proxy, turn)
    template = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert turn["prompt_ids"] == tokenizer.encode(template, add_special_tokens=False)
    choice = completion.choices[0]
    assert choice.message.role == "assistant"
    assert choice.message.content == _visible(tokenizer, turn["output_ids"])
    assert choice.finish_reason == ("stop" if turn["output_ids"][-1] == EOS else "length")
    assert completion.usage.prompt_tokens == len(turn["prompt_ids"])
    assert completion.usage.completion_tokens == len(turn["output_ids"]) <= 8
    assert completion.model == "tiny" and completion.object == "chat.completion"


def test_streaming(router, proxy, tokenizer):
    stream = _client(router, "streamed").chat.completions.create(
        model="tiny",
        messages=[{"role": "user", "content": "Count"}],
        max_tokens=6,
        seed=2,
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    (turn,) = get_trajectory(router, "streamed")["branches"][0]["turns"]
    _check_against_engine(proxy, turn)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == _visible(tokenizer, turn["output_ids"])
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert finishes == ["stop" if turn["output_ids"][-1] == EOS else "length"]
    assert chunks[-1].usage.completion_tokens == len(turn["output_ids"])


def test_multi_turn_token_in_token_out_and_masks(router, proxy):
    client = _client(router, "multi")
    messages = [{"role": "system", "content": "You check the weather."}, {"role": "user", "content": "Paris?"}]
    for question in ("And Rome?", "And Oslo?", None):
        completion = client.chat.completions.create(model="tiny", messages=messages, tools=TOOLS, max_tokens=10, seed=3)
        messages.append(completion.choices[0].message.model_dump(exclude_none=True))  # echoed back as received
        if question:
            messages.append({"role": "user", "content": question})
    (branch,) = get_trajectory(router, "multi")["branches"]
    turns = branch["turns"]
    assert len(turns) == 3
    for earlier, later in zip(turns, turns[1:]):
        _check_against_engine(proxy, earlier)
        tip = earlier["prompt_ids"] + earlier["output_ids"]
        assert later["prompt_ids"][: len(tip)] == tip and later["inherited_prompt_tokens"] == len(tip)
    _check_against_engine(proxy, turns[-1])
    sample = branch["sample"]
    last = turns[-1]
    assert sample["prompt_ids"] + sample["response_ids"] == last["prompt_ids"] + last["output_ids"]
    sampled = [0] * len(sample["prompt_ids"] + sample["response_ids"])
    for turn in turns:
        start = len(turn["prompt_ids"])
        sampled[start : start + len(turn["output_ids"])] = [1] * len(turn["output_ids"])
    assert sample["loss_mask"] == sampled[len(sample["prompt_ids"]) :]
    assert sum(sample["loss_mask"]) == sum(len(t["output_ids"]) for t in turns)
    assert all(lp == 0.0 for lp, m in zip(sample["response_logprobs"], sample["loss_mask"]) if not m)


def test_an_edited_history_starts_a_new_branch(router):
    client = _client(router, "edited")
    first = client.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "Hi"}], max_tokens=5)
    history = [
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "(edited) " + (first.choices[0].message.content or "")},
        {"role": "user", "content": "Go on"},
    ]
    raw = client.chat.completions.with_raw_response.create(model="tiny", messages=history, max_tokens=5)
    assert raw.headers["x-loongsage-branch"] == "1" and raw.headers["x-loongsage-turn"] == "0"
    branches = get_trajectory(router, "edited")["branches"]
    assert len(branches) == 2 and "does not extend branch 0" in branches[1]["reason"]


def test_each_url_is_its_own_trajectory_and_anonymous_calls_are_not_recorded(router):
    before = set(httpx.get(f"{router.base_url}/trajectories", headers=auth(router)).json()["ids"])
    _client(router, "alpha").chat.completions.create(model="tiny", messages=[{"role": "user", "content": "A"}], max_tokens=3)
    _client(router, "beta", attempt=2).chat.completions.create(
        model="tiny", messages=[{"role": "user", "content": "B"}], max_tokens=3
    )
    anonymous = openai.OpenAI(base_url=f"{router.base_url}/v1", api_key=router.router.api_key)
    assert anonymous.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "C"}], max_tokens=3).choices
    after = set(httpx.get(f"{router.base_url}/trajectories", headers=auth(router)).json()["ids"])
    assert after - before == {"alpha", "beta"}
    alpha, beta = get_trajectory(router, "alpha"), get_trajectory(router, "beta")
    assert "user\nA<|im_end|>" in alpha["branches"][0]["turns"][0]["prompt_text"]
    assert "user\nB<|im_end|>" in beta["branches"][0]["turns"][0]["prompt_text"]
    assert beta["attempts"] == ["2"]
    assert httpx.delete(f"{router.base_url}/trajectories/alpha", headers=auth(router)).json()["deleted"]
    assert httpx.get(f"{router.base_url}/trajectories/alpha", headers=auth(router)).status_code == 404
    assert [m.id for m in anonymous.models.list()] == ["tiny"]


def test_anthropic_messages_on_the_real_engine(router, proxy, tokenizer):
    response = httpx.post(
        f"{router.url_for('claude')}/messages",
        headers={"x-api-key": router.router.api_key},
        json={"model": "tiny", "max_tokens": 6, "system": "Be brief.", "messages": [{"role": "user", "content": "Hello"}]},
    )
    assert response.status_code == 200
    data = response.json()
    (turn,) = get_trajectory(router, "claude")["branches"][0]["turns"]
    _check_against_engine(proxy, turn)
    assert data["content"] == [{"type": "text", "text": _visible(tokenizer, turn["output_ids"])}]
    assert data["stop_reason"] == ("end_turn" if turn["output_ids"][-1] == EOS else "max_tokens")
    assert data["usage"]["output_tokens"] == len(turn["output_ids"])


def test_64_concurrent_trajectories_none_lost_or_mixed_up(router, proxy, tokenizer):
    count, turns_each = 64, 2

    async def agent(client: openai.AsyncOpenAI, i: int) -> list[str | None]:
        messages = [{"role": "user", "content": f"This is trajectory {i}."}]
        received = []
        for k in range(turns_each):
            completion = await client.chat.completions.create(model="tiny", messages=messages, max_tokens=6, seed=1000 + i)
            received.append(completion.choices[0].message.content)
            messages += [
                completion.choices[0].message.model_dump(exclude_none=True),
                {"role": "user", "content": f"Turn {k + 1} of trajectory {i}."},
            ]
        return received

    async def run_all():
        # One connection pool; each agent's copy has its own trajectory URL as base_url.
        async with openai.AsyncOpenAI(base_url=router.url_for("unused"), api_key=router.router.api_key, max_retries=0) as shared:
            clients = [shared.with_options(base_url=router.url_for(f"c{i}")) for i in range(count)]
            return await asyncio.gather(*(agent(c, i) for i, c in enumerate(clients)))

    received = asyncio.run(run_all())
    rids = set()
    for i in range(count):
        (branch,) = get_trajectory(router, f"c{i}")["branches"]
        assert len(branch["turns"]) == turns_each
        for k, turn in enumerate(branch["turns"]):
            _check_against_engine(proxy, turn)
            rids.update(turn["rids"])
            assert f"trajectory {i}." in turn["prompt_text"]
            assert all(f"trajectory {j}." not in turn["prompt_text"] for j in range(count) if j != i)
            assert received[i][k] == turn["message"]["content"] == _visible(tokenizer, turn["output_ids"])
        first, second = branch["turns"]
        assert second["prompt_ids"][: len(first["prompt_ids"]) + len(first["output_ids"])] == (
            first["prompt_ids"] + first["output_ids"]
        )
    assert len(rids) == count * turns_each
