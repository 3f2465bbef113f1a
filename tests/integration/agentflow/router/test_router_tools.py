"""Tool calls, odd token pieces, stop strings and resumed aborts over HTTP, with the official
`openai` client (and raw HTTP for Anthropic) against the router in front of a scripted
engine (see tests/standins/engine.py: no real model emits a chosen text on demand)."""

from __future__ import annotations

import json

import httpx
import openai
import pytest

from tests.integration.agentflow.router_support import get_trajectory
from tests.standins.engine import EOS

HAVING_IN_ODD_PIECES = [56, 12052, 4728]  # "H" + "AV" + "ING"; the text re-tokenizes as "HA" + "V" + "ING"
WEATHER_CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
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
ANTHROPIC_TOOLS = [
    {
        "name": "get_weather",
        "description": "Current weather",
        "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}},
    }
]


pytestmark = pytest.mark.usefixtures("fresh_script")


def _client(router, trajectory_id: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=router.url_for(trajectory_id), api_key=router.router.api_key, max_retries=0)


def _new_ids(engine, tokenizer, k: int) -> str:
    """The text of the ids request k added to request k-1's input + output (checking it extends them)."""
    before, after = engine.requests[k - 1], engine.requests[k]["input_ids"]
    tip = before["input_ids"] + engine.outputs[k - 1]
    assert after[: len(tip)] == tip
    return tokenizer.decode(after[len(tip) :])


def test_tool_calls_and_tool_results_token_in_token_out(router, engine, tokenizer):
    client = _client(router, "weather")
    engine.say(WEATHER_CALL)
    messages = [{"role": "user", "content": "Weather in Paris?"}]
    first = client.chat.completions.create(model="tiny", messages=messages, tools=TOOLS, max_tokens=50)
    choice = first.choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.content is None
    (call,) = choice.message.tool_calls
    assert call.type == "function" and call.function.name == "get_weather"
    assert json.loads(call.function.arguments) == {"city": "Paris"}
    assert "<tools>" in tokenizer.decode(engine.requests[0]["input_ids"])

    engine.say("It is sunny in Paris.")
    messages += [choice.message, {"role": "tool", "tool_call_id": call.id, "content": "sunny, 22C"}]
    second = client.chat.completions.create(model="tiny", messages=messages, tools=TOOLS, max_tokens=50)
    assert second.choices[0].message.content == "It is sunny in Paris."
    assert second.choices[0].finish_reason == "stop"
    assert _new_ids(engine, tokenizer, 1) == (
        "\n<|im_start|>user\n<tool_response>\nsunny, 22C\n</tool_response><|im_end|>\n<|im_start|>assistant\n"
    )

    (branch,) = get_trajectory(router, "weather")["branches"]
    first_turn, second_turn = branch["turns"]
    assert first_turn["output_ids"] == engine.outputs[0] and second_turn["output_ids"] == engine.outputs[1]
    assert first_turn["weight_versions"] == [3] * len(engine.outputs[0])
    inserted = len(second_turn["prompt_ids"]) - len(first_turn["prompt_ids"]) - len(first_turn["output_ids"])
    assert branch["sample"]["loss_mask"] == [1] * len(engine.outputs[0]) + [0] * inserted + [1] * len(engine.outputs[1])


def test_streamed_tool_calls(router, engine):
    engine.say("Let me check.\n" + WEATHER_CALL)
    stream = _client(router, "stream-tools").chat.completions.create(
        model="tiny", messages=[{"role": "user", "content": "Paris?"}], tools=TOOLS, max_tokens=60, stream=True
    )
    chunks = list(stream)
    content = "".join(c.choices[0].delta.content or "" for c in chunks)
    deltas = [tc for c in chunks for tc in (c.choices[0].delta.tool_calls or [])]
    assert content == "Let me check."
    assert [(d.index, d.function.name, json.loads(d.function.arguments)) for d in deltas] == [
        (0, "get_weather", {"city": "Paris"})
    ]
    assert deltas[0].id.startswith("call_")
    assert chunks[-1].choices[0].finish_reason == "tool_calls"


def test_a_word_sampled_in_odd_pieces_reaches_the_next_prompt_intact(router, engine, tokenizer):
    client = _client(router, "odd")
    engine.say(ids=HAVING_IN_ODD_PIECES)
    messages = [{"role": "user", "content": "Shout"}]
    reply = client.chat.completions.create(model="tiny", messages=messages, max_tokens=9).choices[0].message
    assert reply.content == "HAVING" and tokenizer.encode("HAVING", add_special_tokens=False) != HAVING_IN_ODD_PIECES
    engine.say("ok")
    client.chat.completions.create(model="tiny", messages=messages + [reply, {"role": "user", "content": "Again"}], max_tokens=9)
    _new_ids(engine, tokenizer, 1)
    start = len(engine.requests[0]["input_ids"])
    assert engine.requests[1]["input_ids"][start : start + 4] == HAVING_IN_ODD_PIECES + [EOS]


def test_stop_string_is_cut_from_the_reply_but_kept_in_the_ids(router, engine, tokenizer):
    client = _client(router, "stopped")
    ids = tokenizer.encode("Answer: 4 ###", add_special_tokens=False)  # an engine stops right after the match
    engine.queue(ids, {"type": "stop", "matched": "###"})
    messages = [{"role": "user", "content": "2+2?"}]
    reply = client.chat.completions.create(model="tiny", messages=messages, stop=["###"], max_tokens=20)
    assert reply.choices[0].message.content == "Answer: 4 " and reply.choices[0].finish_reason == "stop"
    assert engine.requests[0]["sampling_params"]["stop"] == ["###"]
    engine.say("ok")
    client.chat.completions.create(
        model="tiny", messages=messages + [reply.choices[0].message, {"role": "user", "content": "Sure?"}]
    )
    assert _new_ids(engine, tokenizer, 1).startswith("<|im_end|>\n<|im_start|>user\nSure?")
    assert len(get_trajectory(router, "stopped")["branches"]) == 1


def test_an_aborted_generation_is_resumed_with_per_token_versions(router, engine):
    engine.queue([101, 102, 103], {"type": "abort"}, version="3")
    engine.queue([104, 105], {"type": "length", "length": 2}, version="4")
    completion = _client(router, "resumed").chat.completions.create(
        model="tiny", messages=[{"role": "user", "content": "Long story"}], max_tokens=5
    )
    assert completion.usage.completion_tokens == 5 and completion.choices[0].finish_reason == "length"
    first, second = engine.requests
    assert second["input_ids"] == first["input_ids"] + [101, 102, 103]
    assert (first["sampling_params"]["max_new_tokens"], second["sampling_params"]["max_new_tokens"]) == (5, 2)
    (turn,) = get_trajectory(router, "resumed")["branches"][0]["turns"]
    assert turn["output_ids"] == [101, 102, 103, 104, 105]
    assert turn["weight_versions"] == [3, 3, 3, 4, 4] and len(turn["rids"]) == 2
    assert turn["prompt_ids"] == first["input_ids"]


def test_anthropic_tool_use_round_trip(router, engine, tokenizer):
    url = f"{router.url_for('claude-tools')}/messages"
    headers = {"x-api-key": router.router.api_key, "anthropic-version": "2023-06-01"}
    engine.say("I'll look.\n" + WEATHER_CALL)
    body = {"model": "tiny", "max_tokens": 80, "tools": ANTHROPIC_TOOLS, "messages": [{"role": "user", "content": "Paris?"}]}
    first = httpx.post(url, headers=headers, json=body).json()
    assert first["type"] == "message" and first["stop_reason"] == "tool_use"
    text, tool_use = first["content"]
    assert text == {"type": "text", "text": "I'll look."}
    assert (tool_use["type"], tool_use["name"], tool_use["input"]) == ("tool_use", "get_weather", {"city": "Paris"})

    engine.say("Sunny.")
    body["messages"] += [
        {"role": "assistant", "content": first["content"]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": tool_use["id"], "content": "sunny"}]},
    ]
    body["stream"] = True
    response = httpx.post(url, headers=headers, json=body)
    assert response.headers["content-type"].startswith("text/event-stream")
    events = [block.split("\n", 1) for block in response.text.strip().split("\n\n")]
    names = [name[len("event: ") :] for name, _ in events]
    assert names == [
        "message_start",
        "content_block_start",
        "content_block_delta",
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]
    assert json.loads(events[2][1][len("data: ") :])["delta"] == {"type": "text_delta", "text": "Sunny."}
    assert json.loads(events[4][1][len("data: ") :])["delta"]["stop_reason"] == "end_turn"
    assert _new_ids(engine, tokenizer, 1).startswith("\n<|im_start|>user\n<tool_response>\nsunny\n</tool_response>")
    assert len(get_trajectory(router, "claude-tools")["branches"]) == 1


def test_logprobs_of_the_sampled_tokens_are_returned_when_asked(router, engine, tokenizer):
    ids = engine.say("Fine, thanks.")
    completion = _client(router, "logprobs").chat.completions.create(
        model="tiny", messages=[{"role": "user", "content": "How are you?"}], max_tokens=20, logprobs=True
    )
    entries = completion.choices[0].logprobs.content
    assert [e.token for e in entries] == [tokenizer.decode([t]) for t in ids]
    assert [e.logprob for e in entries] == pytest.approx([-0.25 - 0.01 * i for i in range(len(ids))])
