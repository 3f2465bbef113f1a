"""Anthropic Messages on the wire: request validation, responses and streaming events.

Supported: `system` as a string or text blocks; user/assistant messages with string content
or text, tool_use and tool_result blocks; `tools` with `input_schema`; `tool_choice`
(type "none" turns tool parsing off; "any"/"tool" cannot be enforced); `max_tokens`
(required, as in Anthropic's API), `temperature`, `top_p`, `top_k`, `stop_sequences`,
`stream`. Unset temperature, top_p or top_k: the run's value (RouterConfig.sampling). Image,
document blocks are refused with 400; server tools per router.hosted_tools (hosted_tools.py).
`thinking` turns the model's thinking switch on or off (chat_format.py); the reply's thinking
comes back as a `thinking` block, and thinking blocks sent back are skipped (the router restores
its own replies from the trajectory). A `system` message inside `messages` is kept (see _messages).

Streaming: all events (message_start, content_block_start/delta/stop per block,
message_delta, message_stop) are sent once generation has finished, since the engines
answer in one piece.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

from loongsage.agentflow.router.errors import RouterError, bad_request
from loongsage.agentflow.router.hosted_tools import hosted_tool
from loongsage.agentflow.router.messages import ChatRequest, Message, Sampling, ToolCall, TurnResult
from loongsage.agentflow.router.validation import INT32_MAX, check_model, expect, get, in_range, join, json_object_body

STOP_REASONS = {"tool_calls": "tool_use", "length": "max_tokens", "stop": "end_turn"}
THINKING_TYPES = {"enabled": True, "adaptive": True, "disabled": False}
# Blocks of an assistant message sent back that the router does not read: its own replies are
# restored token for token from the trajectory (Trajectory.substitute_replies), thinking included.
SKIPPED_ASSISTANT_BLOCKS = ("thinking", "redacted_thinking")


def parse_messages_request(body: Any, model_names: tuple[str, ...], hosted_tools: str = "drop") -> tuple[str, ChatRequest]:
    """`hosted_tools`: what becomes of server and Anthropic-defined tools: router.hosted_tools."""
    body = json_object_body(body)
    model = check_model(body, model_names)
    if get(body, "mcp_servers", list):
        raise bad_request("mcp_servers are not supported: the router calls no MCP servers", "mcp_servers")
    messages: list[Message] = []
    system = _system(body.get("system"))
    if system is not None:
        messages.append(Message("system", system))
    raw_messages = get(body, "messages", list, required=True)
    if not raw_messages:
        raise bad_request("messages must not be empty", "messages")
    for i, raw in enumerate(raw_messages):
        messages.extend(_messages(raw, join("messages", i)))
    dropped: list[str] = []
    tools = [
        spec
        for i, raw in enumerate(get(body, "tools", list) or [])
        for spec in _tool(raw, join("tools", i), hosted_tools, dropped)
    ]
    tool_choice = get(body, "tool_choice", dict) or {}
    stop = get(body, "stop_sequences", list) or []
    for i, s in enumerate(stop):
        if not expect(s, str, join("stop_sequences", i)):
            raise bad_request("a stop sequence must not be empty", join("stop_sequences", i))
    sampling = Sampling(
        max_tokens=in_range(get(body, "max_tokens", int, required=True), 1, INT32_MAX, "max_tokens"),
        temperature=in_range(get(body, "temperature", float), 0, 1, "temperature"),
        top_p=in_range(get(body, "top_p", float), 0, 1, "top_p", low_open=True),
        top_k=in_range(get(body, "top_k", int), 1, INT32_MAX, "top_k"),
        stop=tuple(stop),
    )
    request = ChatRequest(
        messages,
        tools,
        parse_tool_calls=tool_choice.get("type") != "none",
        sampling=sampling,
        stream=bool(get(body, "stream", bool)),
        dropped_tools=tuple(dropped),
        thinking=_thinking(body),
    )
    return model, request


def _thinking(body: dict) -> bool | None:
    """`thinking` as the model's switch: enabled or adaptive turn it on, disabled off. Its
    budget_tokens is not enforced apart from max_tokens (the engines sample thinking and answer
    as one reply)."""
    thinking = get(body, "thinking", dict)
    if thinking is None:
        return None
    kind = get(thinking, "type", str, "thinking", required=True)
    if kind not in THINKING_TYPES:
        raise bad_request(f"thinking.type {kind!r} is not one of {', '.join(THINKING_TYPES)}", "thinking.type")
    return THINKING_TYPES[kind]


def _system(value: Any) -> str | None:
    if value is None or isinstance(value, str):
        return value
    return _text_blocks(expect(value, list, "system"), "system")


def _text_blocks(blocks: list, path: str) -> str:
    texts = []
    for i, block in enumerate(blocks):
        block_path = join(path, i)
        block = expect(block, dict, block_path)
        kind = get(block, "type", str, block_path, required=True)
        if kind != "text":
            raise bad_request(f"block type {kind!r} is not supported here (text only)", join(block_path, "type"))
        texts.append(get(block, "text", str, block_path, required=True))
    return "\n".join(texts)


def _messages(raw: Any, path: str) -> list[Message]:
    """One Anthropic message as router messages: a user message's tool_result blocks become
    `tool` messages, ahead of its text. A `system` message (Claude Code puts some inside
    `messages`; Anthropic's API does not define them there) is kept as one, text only: the chat
    format renders it in place or folds it into the next user turn (chat_format.py)."""
    raw = expect(raw, dict, path)
    role = get(raw, "role", str, path, required=True)
    if role not in ("user", "assistant", "system"):
        raise bad_request(f"unknown role {role!r} (expected 'user', 'assistant' or 'system')", join(path, "role"))
    content = raw.get("content")
    content_path = join(path, "content")
    if role == "system":
        return [
            Message(
                "system", content if isinstance(content, str) else _text_blocks(expect(content, list, content_path), content_path)
            )
        ]
    if isinstance(content, str):
        return [Message(role, content)]
    blocks = expect(content, list, content_path)
    texts: list[str] = []
    calls: list[ToolCall] = []
    results: list[Message] = []
    for i, block in enumerate(blocks):
        block_path = join(content_path, i)
        block = expect(block, dict, block_path)
        kind = get(block, "type", str, block_path, required=True)
        if kind == "text":
            texts.append(get(block, "text", str, block_path, required=True))
        elif kind in SKIPPED_ASSISTANT_BLOCKS and role == "assistant":
            continue
        elif kind == "tool_use" and role == "assistant":
            arguments = get(block, "input", dict, block_path) or {}
            calls.append(
                ToolCall(
                    get(block, "id", str, block_path) or "",
                    get(block, "name", str, block_path, required=True),
                    json.dumps(arguments, ensure_ascii=False),
                )
            )
        elif kind == "tool_result" and role == "user":
            results.append(
                Message("tool", _tool_result_text(block, block_path), tool_call_id=get(block, "tool_use_id", str, block_path))
            )
        else:
            raise bad_request(f"block type {kind!r} is not supported in a {role} message", join(block_path, "type"))
    text = "\n".join(texts)
    if role == "assistant":
        return [Message("assistant", text, tuple(calls))]
    return results + ([Message("user", text)] if texts or not results else [])


def _tool_result_text(block: dict, path: str) -> str:
    content = block.get("content", "")
    text = (
        content if isinstance(content, str) else _text_blocks(expect(content, list, join(path, "content")), join(path, "content"))
    )
    return ("Error: " + text) if block.get("is_error") is True else text


def _tool(raw: Any, path: str, hosted_tools: str, dropped: list[str]) -> list[dict]:
    """The function specs a tool gives the model: a custom tool's own; none for a server tool or
    an Anthropic-defined one (`web_search_20250305`, `bash_20250124`, ...: hosted_tools.py)."""
    raw = expect(raw, dict, path)
    kind = get(raw, "type", str, path)
    if kind not in (None, "custom"):
        hosted_tool(kind, path, hosted_tools, dropped)
        return []
    spec = {"name": get(raw, "name", str, path, required=True)}
    description = get(raw, "description", str, path)
    if description is not None:
        spec["description"] = description
    spec["parameters"] = get(raw, "input_schema", dict, path, required=True)
    return [spec]


# ---- responses ---------------------------------------------------------------------------


def message_json(result: TurnResult, model: str) -> dict:
    return {
        "id": _message_id(),
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": _content_blocks(result),
        "stop_reason": _stop_reason(result),
        "stop_sequence": result.stop_sequence,
        "usage": {
            "input_tokens": result.prompt_tokens,
            "output_tokens": result.completion_tokens,
            "cache_read_input_tokens": result.cached_tokens,
        },
    }


def message_stream(result: TurnResult, model: str) -> Iterator[str]:
    whole = message_json(result, model)
    start = {**whole, "content": [], "stop_reason": None, "stop_sequence": None, "usage": {**whole["usage"], "output_tokens": 0}}
    yield _event("message_start", {"type": "message_start", "message": start})
    for index, block in enumerate(whole["content"]):
        if block["type"] == "text":
            opening, delta = {"type": "text", "text": ""}, {"type": "text_delta", "text": block["text"]}
        elif block["type"] == "thinking":
            opening = {"type": "thinking", "thinking": "", "signature": ""}
            delta = {"type": "thinking_delta", "thinking": block["thinking"]}
        else:
            opening = {**block, "input": {}}
            delta = {"type": "input_json_delta", "partial_json": json.dumps(block["input"], ensure_ascii=False)}
        yield _event("content_block_start", {"type": "content_block_start", "index": index, "content_block": opening})
        yield _event("content_block_delta", {"type": "content_block_delta", "index": index, "delta": delta})
        yield _event("content_block_stop", {"type": "content_block_stop", "index": index})
    yield _event(
        "message_delta",
        {
            "type": "message_delta",
            "delta": {"stop_reason": whole["stop_reason"], "stop_sequence": whole["stop_sequence"]},
            "usage": {"output_tokens": result.completion_tokens},
        },
    )
    yield _event("message_stop", {"type": "message_stop"})


def error_json(error: RouterError) -> dict:
    return {"type": "error", "error": {"type": error.kind, "message": error.message}}


def _content_blocks(result: TurnResult) -> list[dict]:
    blocks: list[dict] = []
    if result.thinking:
        # No signature can be checked here: the router restores its own replies from the trajectory.
        blocks.append({"type": "thinking", "thinking": result.thinking, "signature": ""})
    if result.content or not result.tool_calls:
        blocks.append({"type": "text", "text": result.content})
    for call in result.tool_calls:
        blocks.append({"type": "tool_use", "id": call.id, "name": call.name, "input": call.arguments_object()})
    return blocks


def _stop_reason(result: TurnResult) -> str:
    if result.stop_sequence is not None and result.finish_reason == "stop":
        return "stop_sequence"
    return STOP_REASONS[result.finish_reason]


def _message_id() -> str:
    return "msg_" + uuid.uuid4().hex


def _event(name: str, payload: dict) -> str:
    return f"event: {name}\ndata: {json.dumps(payload, ensure_ascii=False)}\n\n"
