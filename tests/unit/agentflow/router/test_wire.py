"""OpenAI and Anthropic request bodies -> the router's messages, and replies -> wire JSON/SSE."""

from __future__ import annotations

import json

import pytest

from loongsage.agentflow.router import anthropic_api, openai_api
from loongsage.agentflow.router.errors import RouterError
from loongsage.agentflow.router.messages import Message, ToolCall, TurnResult

NAMES = ("tiny", "alias")


def _result(content="Hi", calls=(), finish="stop", stop_sequence=None) -> TurnResult:
    return TurnResult(
        content=content,
        tool_calls=list(calls),
        finish_reason=finish,
        prompt_tokens=7,
        completion_tokens=3,
        cached_tokens=2,
        token_logprobs=[],
        stop_sequence=stop_sequence,
        branch=0,
        turn=0,
    )


def test_openai_request_with_parts_tools_and_sampling():
    body = {
        "model": "alias",
        "max_completion_tokens": 9,
        "temperature": 0.5,
        "top_p": 0.9,
        "stop": "END",
        "seed": 4,
        "messages": [
            {"role": "developer", "content": "Be brief."},
            {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": '{"x": 1}'}}],
            },
            {"role": "tool", "tool_call_id": "c1", "content": "42"},
        ],
        "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}],
        "user": "ignored",
        "parallel_tool_calls": True,
    }
    model, request = openai_api.parse_chat_completion(body, NAMES)
    assert model == "alias"
    assert request.messages == [
        Message("system", "Be brief."),
        Message("user", "a\nb"),
        Message("assistant", "", (ToolCall("c1", "f", '{"x": 1}'),)),
        Message("tool", "42", tool_call_id="c1"),
    ]
    assert request.tools == [{"name": "f", "parameters": {"type": "object"}}]
    s = request.sampling
    assert (s.max_tokens, s.temperature, s.top_p, s.stop, s.seed) == (9, 0.5, 0.9, ("END",), 4)
    assert request.parse_tool_calls and not request.stream


def test_openai_tool_choice_none_turns_parsing_off():
    _, request = openai_api.parse_chat_completion(
        {"model": "tiny", "messages": [{"role": "user", "content": "x"}], "tool_choice": "none"}, NAMES
    )
    assert not request.parse_tool_calls


@pytest.mark.parametrize(
    "body, status, param",
    [
        ([], 400, "body"),
        ({"messages": [{"role": "user", "content": "x"}]}, 400, "model"),
        ({"model": "gpt-9", "messages": [{"role": "user", "content": "x"}]}, 404, "model"),
        ({"model": "tiny"}, 400, "messages"),
        ({"model": "tiny", "messages": []}, 400, "messages"),
        (
            {"model": "tiny", "messages": [{"role": "user", "content": "x"}, {"role": "robot", "content": "x"}]},
            400,
            "messages[1].role",
        ),
        ({"model": "tiny", "messages": [{"role": "user", "content": 5}]}, 400, "messages[0].content"),
        ({"model": "tiny", "messages": [{"role": "user"}]}, 400, "messages[0].content"),
        (
            {"model": "tiny", "messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}]},
            400,
            "messages[0].content[0].type",
        ),
        (
            {"model": "tiny", "messages": [{"role": "assistant", "tool_calls": [{"function": {"arguments": "{}"}}]}]},
            400,
            "messages[0].tool_calls[0].function.name",
        ),
        ({"model": "tiny", "messages": [{"role": "user", "content": "x"}], "n": 129}, 400, "n"),
        ({"model": "tiny", "messages": [{"role": "user", "content": "x"}], "top_logprobs": 2}, 400, "top_logprobs"),
        (
            {"model": "tiny", "messages": [{"role": "user", "content": "x"}], "logprobs": True, "top_logprobs": 21},
            400,
            "top_logprobs",
        ),
        ({"model": "tiny", "messages": [{"role": "user", "content": "x"}], "max_tokens": "9"}, 400, "max_tokens"),
        ({"model": "tiny", "messages": [{"role": "user", "content": "x"}], "max_tokens": 0}, 400, "max_tokens"),
        ({"model": "tiny", "messages": [{"role": "user", "content": "x"}], "temperature": True}, 400, "temperature"),
        ({"model": "tiny", "messages": [{"role": "user", "content": "x"}], "top_p": 0}, 400, "top_p"),
        ({"model": "tiny", "messages": [{"role": "user", "content": "x"}], "stop": [1]}, 400, "stop"),
        ({"model": "tiny", "messages": [{"role": "user", "content": "x"}], "presence_penalty": 1}, 400, "presence_penalty"),
        (
            {"model": "tiny", "messages": [{"role": "user", "content": "x"}], "response_format": {"type": "json_object"}},
            400,
            "response_format.type",
        ),
        (
            {"model": "tiny", "messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function"}]},
            400,
            "tools[0].function",
        ),
    ],
)
def test_openai_bad_requests_name_the_field(body, status, param):
    with pytest.raises(RouterError) as caught:
        openai_api.parse_chat_completion(body, NAMES)
    assert (caught.value.status, caught.value.param) == (status, param)
    assert param in caught.value.message


def test_openai_response_follows_the_schema():
    call = ToolCall("call_1", "f", '{"x": 1}')
    data = openai_api.completion_json([_result("", [call], "tool_calls")], "tiny")
    assert data["object"] == "chat.completion" and data["id"].startswith("chatcmpl-") and data["model"] == "tiny"
    (choice,) = data["choices"]
    assert choice["finish_reason"] == "tool_calls"
    assert choice["message"] == {
        "role": "assistant",
        "content": None,
        "refusal": None,
        "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "f", "arguments": '{"x": 1}'}}],
    }
    assert data["usage"] == {
        "prompt_tokens": 7,
        "completion_tokens": 3,
        "total_tokens": 10,
        "prompt_tokens_details": {"cached_tokens": 2},
    }


def test_openai_stream_chunks_end_with_done():
    events = list(openai_api.completion_stream([_result("Hey", [ToolCall("c", "f", "{}")], "tool_calls")], "tiny", True))
    assert events[-1] == "data: [DONE]\n\n"
    chunks = [json.loads(e[len("data: ") :]) for e in events[:-1]]
    assert all(c["object"] == "chat.completion.chunk" for c in chunks)
    assert len({c["id"] for c in chunks}) == 1
    deltas = [c["choices"][0]["delta"] for c in chunks[:-1]]
    assert deltas[0] == {"role": "assistant", "content": ""} and deltas[1] == {"content": "Hey"}
    assert deltas[2]["tool_calls"][0]["function"] == {"name": "f", "arguments": "{}"}
    assert chunks[-2]["choices"][0]["finish_reason"] == "tool_calls"
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["total_tokens"] == 10


def test_anthropic_request_converts_system_tool_use_and_tool_results():
    body = {
        "model": "tiny",
        "max_tokens": 20,
        "system": [{"type": "text", "text": "Sys"}],
        "stop_sequences": ["###"],
        "messages": [
            {"role": "user", "content": "Weather?"},
            {
                "role": "assistant",
                "content": [
                    {"type": "text", "text": "Checking."},
                    {"type": "tool_use", "id": "tu1", "name": "w", "input": {"c": "P"}},
                ],
            },
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": "tu1", "content": "sunny"},
                    {
                        "type": "tool_result",
                        "tool_use_id": "tu2",
                        "is_error": True,
                        "content": [{"type": "text", "text": "boom"}],
                    },
                    {"type": "text", "text": "And?"},
                ],
            },
        ],
        "tools": [{"name": "w", "description": "weather", "input_schema": {"type": "object"}}],
    }
    _, request = anthropic_api.parse_messages_request(body, NAMES)
    assert request.messages == [
        Message("system", "Sys"),
        Message("user", "Weather?"),
        Message("assistant", "Checking.", (ToolCall("tu1", "w", '{"c": "P"}'),)),
        Message("tool", "sunny", tool_call_id="tu1"),
        Message("tool", "Error: boom", tool_call_id="tu2"),
        Message("user", "And?"),
    ]
    assert request.tools == [{"name": "w", "description": "weather", "parameters": {"type": "object"}}]
    assert request.sampling.max_tokens == 20 and request.sampling.stop == ("###",)


@pytest.mark.parametrize(
    "body, param",
    [
        ({"model": "tiny", "messages": [{"role": "user", "content": "x"}]}, "max_tokens"),
        ({"model": "tiny", "max_tokens": 5, "messages": [{"role": "developer", "content": "x"}]}, "messages[0].role"),
        (
            {"model": "tiny", "max_tokens": 5, "messages": [{"role": "user", "content": [{"type": "image"}]}]},
            "messages[0].content[0].type",
        ),
        (
            {"model": "tiny", "max_tokens": 5, "messages": [{"role": "user", "content": "x"}], "tools": [{"name": "w"}]},
            "tools[0].input_schema",
        ),
    ],
)
def test_anthropic_bad_requests_name_the_field(body, param):
    with pytest.raises(RouterError) as caught:
        anthropic_api.parse_messages_request(body, NAMES)
    assert (caught.value.status, caught.value.param) == (400, param)


def test_anthropic_response_and_stream_events():
    result = _result("Let me look.", [ToolCall("c", "w", '{"c": "P"}')], "tool_calls")
    data = anthropic_api.message_json(result, "tiny")
    assert data["type"] == "message" and data["stop_reason"] == "tool_use"
    assert data["content"] == [
        {"type": "text", "text": "Let me look."},
        {"type": "tool_use", "id": "c", "name": "w", "input": {"c": "P"}},
    ]
    assert data["usage"]["input_tokens"] == 7 and data["usage"]["output_tokens"] == 3
    events = [e.split("\n") for e in anthropic_api.message_stream(result, "tiny")]
    names = [lines[0][len("event: ") :] for lines in events]
    assert names == [
        "message_start",
        "content_block_start",
        "content_block_delta",
        "content_block_stop",
        "content_block_start",
        "content_block_delta",
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]
    payloads = [json.loads(lines[1][len("data: ") :]) for lines in events]
    assert payloads[5]["delta"] == {"type": "input_json_delta", "partial_json": '{"c": "P"}'}
    assert payloads[7]["delta"]["stop_reason"] == "tool_use"
    assert anthropic_api.message_json(_result(finish="length"), "tiny")["stop_reason"] == "max_tokens"
    assert anthropic_api.message_json(_result(stop_sequence="###"), "tiny")["stop_reason"] == "stop_sequence"
