"""The OpenAI Responses API on the wire (`POST /v1/responses`): request validation into the
router's ChatRequest, and the response object and its streamed events.

Input: a string (one user message) or a list of items: messages (roles user, system,
developer, assistant; text content as a string or input_text / output_text parts),
`function_call` items (an assistant's tool calls; consecutive ones, and an assistant message
right before them, form one assistant turn) and `function_call_output` items (tool results).
`reasoning` items are skipped: clients echo back those the router returned, and the router
restores its own replies, thinking included, from the trajectory.
`instructions` become the system message of this request only (as OpenAI does, they are not
carried over by `previous_response_id`). `previous_response_id` continues a conversation the
router answered (`ResponseHistory`): its input and output come first, then this request's input.

Sampling: `max_output_tokens`, `temperature`, `top_p`, and the extensions `top_k`, `seed` and
`ignore_eos` (as chat completions take them); unset, the run's values apply
(RouterConfig.sampling). Logprobs of the output text when `include` holds
"message.output_text.logprobs" or `top_logprobs` > 0, with that many alternatives per token.
Hosted tools (web_search, file_search, ...) per router.hosted_tools (hosted_tools.py). Refused
with 400, because the router cannot do what they ask: a `text.format` other than text,
`background`, `conversation`. Fields that do not change what is
sampled (store, metadata, the rest of include, reasoning.summary, parallel_tool_calls,
truncation, user, ...) are accepted and ignored. `reasoning.effort` turns the model's thinking
switch on or off where it has one (chat_format.py); the reply's thinking comes back as a
`reasoning` item before the message.

Streaming: the engines answer in one piece, so the events (created, in_progress, each output
item added / delta / done, completed) are all sent once generation has finished.
"""

from __future__ import annotations

import json
import time
import uuid
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from typing import Any

from loongsage.agentflow.router.errors import bad_request
from loongsage.agentflow.router.hosted_tools import hosted_tool
from loongsage.agentflow.router.messages import ChatRequest, Message, Sampling, ToolCall, TurnResult
from loongsage.agentflow.router.openai_api import (
    MAX_TOP_LOGPROBS,
    sampling_top_k,
    text_parts,
    token_logprobs_json,
    tool_choice_mode,
)
from loongsage.agentflow.router.validation import (
    INT32_MAX,
    INT64_MAX,
    INT64_MIN,
    check_model,
    expect,
    get,
    in_range,
    join,
    json_object_body,
)

INPUT_ROLES = {"user": "user", "system": "system", "developer": "system", "assistant": "assistant"}
REFUSED = {
    "background": "background responses are not supported: the router answers while the request is open",
    "conversation": "conversation objects are not supported; pass previous_response_id, or the whole input",
}
TEXT_LOGPROBS = "message.output_text.logprobs"  # the `include` entry that asks for them
THINKING_OFF = ("none", "minimal")  # reasoning.effort values that turn a model's thinking off


@dataclass
class ResponsesCall:
    """A parsed /v1/responses request: its own input as a chat request (ResponseHistory.thread
    puts the instructions and the earlier turns before it), the response it continues, and what
    the response object echoes back."""

    chat: ChatRequest
    previous_response_id: str | None
    instructions: str | None
    echo: dict  # tools, tool_choice, temperature, top_p, max_output_tokens, ... as sent
    # The functions of namespace tool groups, by the name the model sees ("namespace.function"):
    # (namespace, function), the names their calls go back to the program under.
    namespaced: dict[str, tuple[str, str]] = field(default_factory=dict)


def parse_responses_request(body: Any, model_names: tuple[str, ...], hosted_tools: str = "drop") -> tuple[str, ResponsesCall]:
    """`hosted_tools`: what becomes of hosted tools (web_search, ...): router.hosted_tools."""
    body = json_object_body(body)
    model = check_model(body, model_names)
    _refuse_unsupported(body)
    instructions = get(body, "instructions", str)
    raw_input = body.get("input")
    if raw_input is None:
        raise bad_request("input is required", "input")
    items = [Message("user", raw_input)] if isinstance(raw_input, str) else _items(expect(raw_input, list, "input"))
    dropped: list[str] = []
    tools = [
        spec
        for i, raw in enumerate(get(body, "tools", list) or [])
        for spec in _tool(raw, join("tools", i), hosted_tools, dropped)
    ]
    namespaced = {spec["name"]: spec.pop("namespaced") for spec in tools if "namespaced" in spec}
    tool_choice = body.get("tool_choice")
    top_logprobs = in_range(get(body, "top_logprobs", int), 0, MAX_TOP_LOGPROBS, "top_logprobs") or 0
    included = get(body, "include", list) or []
    chat = ChatRequest(
        messages=items,
        tools=tools,
        parse_tool_calls=tool_choice_mode(tool_choice) != "none",
        sampling=Sampling(
            max_tokens=in_range(get(body, "max_output_tokens", int), 1, INT32_MAX, "max_output_tokens"),
            temperature=in_range(get(body, "temperature", float), 0, 2, "temperature"),
            top_p=in_range(get(body, "top_p", float), 0, 1, "top_p", low_open=True),
            top_k=sampling_top_k(get(body, "top_k", int)),
            seed=in_range(get(body, "seed", int), INT64_MIN, INT64_MAX, "seed"),
            ignore_eos=get(body, "ignore_eos", bool),
        ),
        stream=bool(get(body, "stream", bool)),
        logprobs=TEXT_LOGPROBS in included or top_logprobs > 0,
        top_logprobs=top_logprobs,
        dropped_tools=tuple(dropped),
        thinking=_thinking(body),
    )
    echo = {
        "tools": get(body, "tools", list) or [],
        "tool_choice": tool_choice if tool_choice is not None else "auto",
        "temperature": body.get("temperature"),
        "top_p": body.get("top_p"),
        "max_output_tokens": body.get("max_output_tokens"),
        "top_logprobs": top_logprobs,
        "parallel_tool_calls": body.get("parallel_tool_calls", True),
        "metadata": get(body, "metadata", dict) or {},
    }
    return model, ResponsesCall(chat, get(body, "previous_response_id", str), instructions, echo, namespaced)


def _thinking(body: dict) -> bool | None:
    """`reasoning.effort` as the model's thinking switch: none and minimal off, any other effort
    on; no effort, the model's default. (`reasoning.summary` is not honoured: the reasoning item
    carries the thinking text itself.)"""
    reasoning = get(body, "reasoning", dict) or {}
    effort = get(reasoning, "effort", str, "reasoning")
    return None if effort is None else effort not in THINKING_OFF


def _refuse_unsupported(body: dict) -> None:
    for name, why in REFUSED.items():
        if body.get(name) not in (None, False, 0):
            raise bad_request(why, name)
    text = get(body, "text", dict) or {}
    text_format = get(text, "format", dict, "text") or {}
    if text_format.get("type", "text") != "text":
        raise bad_request(
            f"text.format type {text_format.get('type')!r} is not supported: the router cannot constrain decoding",
            "text.format.type",
        )


def _items(raw_items: list) -> list[Message]:
    messages: list[Message] = []
    open_assistant = False  # the last message is an assistant turn that function_call items extend
    for index, raw in enumerate(raw_items):
        path = join("input", index)
        item = expect(raw, dict, path)
        kind = get(item, "type", str, path) or "message"
        if kind == "message":
            message = _message(item, path)
            messages.append(message)
            open_assistant = message.role == "assistant"
        elif kind == "function_call":
            name = get(item, "name", str, path, required=True)
            namespace = get(item, "namespace", str, path)
            call = ToolCall(
                get(item, "call_id", str, path, required=True),
                f"{namespace}.{name}" if namespace else name,
                _arguments(item.get("arguments", "{}"), join(path, "arguments")),
            )
            if open_assistant:
                last = messages.pop()
                messages.append(Message("assistant", last.content, (*last.tool_calls, call)))
            else:
                messages.append(Message("assistant", "", (call,)))
            open_assistant = True
        elif kind == "function_call_output":
            output = item.get("output")
            output_path = join(path, "output")
            text = output if isinstance(output, str) else text_parts(expect(output, list, output_path), output_path)
            messages.append(Message("tool", text, tool_call_id=get(item, "call_id", str, path, required=True)))
            open_assistant = False
        elif kind == "reasoning":
            continue
        else:
            raise bad_request(
                f"input item type {kind!r} is not supported (message, function_call, function_call_output, reasoning)",
                join(path, "type"),
            )
    return messages


def _message(item: dict, path: str) -> Message:
    role = get(item, "role", str, path, required=True)
    if role not in INPUT_ROLES:
        raise bad_request(f"unknown role {role!r} (expected one of {', '.join(INPUT_ROLES)})", join(path, "role"))
    content = item.get("content")
    if content is None:
        raise bad_request(f"{join(path, 'content')} is required", join(path, "content"))
    content_path = join(path, "content")
    text = content if isinstance(content, str) else text_parts(expect(content, list, content_path), content_path)
    return Message(INPUT_ROLES[role], text)


def _arguments(value: Any, path: str) -> str:
    if isinstance(value, dict):  # lenient: some agents send the object itself
        return json.dumps(value, ensure_ascii=False)
    return expect(value, str, path)


def _tool(raw: Any, path: str, hosted_tools: str, dropped: list[str]) -> list[dict]:
    """The function specs a tool of the request gives the model: its own; none for a hosted tool
    (hosted_tools.py)."""
    raw = expect(raw, dict, path)
    kind = get(raw, "type", str, path, required=True)
    if kind == "namespace":
        return _namespace(raw, path, hosted_tools, dropped)
    if kind != "function":
        hosted_tool(kind, path, hosted_tools, dropped)
        return []
    return [_function(raw, path)]


def _namespace(raw: dict, path: str, hosted_tools: str, dropped: list[str]) -> list[dict]:
    """A namespace tool group's functions, each as the model sees it: named "namespace.function"
    (no function name has a dot, so none collides with a plain one), the group's description
    ahead of its own. Each spec carries `namespaced` (namespace, function) for the reply."""
    namespace = get(raw, "name", str, path, required=True)
    group = get(raw, "description", str, path)
    specs = []
    for i, inner in enumerate(get(raw, "tools", list, path, required=True)):
        for spec in _tool(inner, join(join(path, "tools"), i), hosted_tools, dropped):
            if "namespaced" in spec:
                raise bad_request("a namespace inside a namespace is not supported", join(join(path, "tools"), i))
            qualified = f"{namespace}.{spec['name']}"
            description = " ".join(text for text in (group, spec.get("description")) if text)
            specs.append({**spec, "name": qualified, "description": description, "namespaced": (namespace, spec["name"])})
    return specs


def _function(raw: dict, path: str) -> dict:
    spec = {"name": get(raw, "name", str, path, required=True)}
    description = get(raw, "description", str, path)
    if description is not None:
        spec["description"] = description
    spec["parameters"] = get(raw, "parameters", dict, path) or {"type": "object", "properties": {}}
    return spec


# ---- history -------------------------------------------------------------------------------


@dataclass(frozen=True)
class ThreadedCall:
    """A Responses call threaded onto the conversation it continues."""

    trajectory_id: str | None
    conversation: tuple[Message, ...]  # the earlier turns, then this call's input; no instructions
    chat: ChatRequest  # what to answer: the instructions, then the conversation


class ResponseHistory:
    """The conversation behind each response the router gave (its input without instructions,
    and its output), by (trajectory, response id), so `previous_response_id` can continue it.
    Bounded: the oldest are forgotten first. The messages are shared between a conversation's
    responses, so each costs a tuple of references, not a copy of the text."""

    def __init__(self, limit: int = 4096):
        self.limit = limit
        self._kept: OrderedDict[tuple[str | None, str], tuple[Message, ...]] = OrderedDict()

    def thread(self, trajectory_id: str | None, call: ResponsesCall) -> ThreadedCall:
        """`call` after the conversation it continues; a 400 when that one is not kept."""
        earlier = self._conversation(trajectory_id, call.previous_response_id) if call.previous_response_id else ()
        conversation = (*earlier, *call.chat.messages)
        system = (Message("system", call.instructions),) if call.instructions else ()
        return ThreadedCall(trajectory_id, conversation, replace(call.chat, messages=[*system, *conversation]))

    def keep(self, threaded: ThreadedCall, result: TurnResult) -> str:
        """Remembers the conversation with its reply under a new response id, and returns that id."""
        response_id = "resp_" + uuid.uuid4().hex
        self._kept[(threaded.trajectory_id, response_id)] = (*threaded.conversation, _reply_message(result))
        while len(self._kept) > self.limit:
            self._kept.popitem(last=False)
        return response_id

    def _conversation(self, trajectory_id: str | None, response_id: str) -> tuple[Message, ...]:
        kept = self._kept.get((trajectory_id, response_id))
        if kept is None:
            raise bad_request(
                f"previous response {response_id!r} not found: the router keeps the latest {self.limit} responses, "
                "each for the trajectory it was made on",
                "previous_response_id",
            )
        return kept


def _reply_message(result: TurnResult) -> Message:
    """The assistant's reply as the conversation carries it on."""
    return Message("assistant", result.content, tuple(result.tool_calls))


# ---- responses ---------------------------------------------------------------------------


def response_json(result: TurnResult, model: str, call: ResponsesCall, response_id: str) -> dict:
    incomplete = result.finish_reason == "length"
    return {
        **_envelope(model, call, response_id),
        "status": "incomplete" if incomplete else "completed",
        "incomplete_details": {"reason": "max_output_tokens"} if incomplete else None,
        "output": _output_items(result, call.namespaced),
        "usage": {
            "input_tokens": result.prompt_tokens,
            "input_tokens_details": {"cached_tokens": result.cached_tokens},
            "output_tokens": result.completion_tokens,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": result.prompt_tokens + result.completion_tokens,
        },
    }


def response_stream(result: TurnResult, model: str, call: ResponsesCall, response_id: str) -> Iterator[str]:
    whole = response_json(result, model, call, response_id)
    opening = {**whole, "status": "in_progress", "incomplete_details": None, "output": [], "usage": None}
    events = _Events()
    yield events.send("response.created", response=opening)
    yield events.send("response.in_progress", response=opening)
    for index, item in enumerate(whole["output"]):
        yield from _item_events(events, index, item)
    final = "response.incomplete" if whole["status"] == "incomplete" else "response.completed"
    yield events.send(final, response=whole)


def _item_events(events: _Events, index: int, item: dict) -> Iterator[str]:
    where = {"output_index": index, "item_id": item["id"]}
    if item["type"] == "message":
        yield events.send("response.output_item.added", output_index=index, item={**item, "status": "in_progress", "content": []})
        part = item["content"][0]
        yield events.send("response.content_part.added", **where, content_index=0, part={**part, "text": ""})
        logprobs = part["logprobs"]
        yield events.send("response.output_text.delta", **where, content_index=0, delta=part["text"], logprobs=logprobs)
        yield events.send("response.output_text.done", **where, content_index=0, text=part["text"], logprobs=logprobs)
        yield events.send("response.content_part.done", **where, content_index=0, part=part)
    elif item["type"] == "reasoning":
        yield events.send("response.output_item.added", output_index=index, item={**item, "status": "in_progress", "content": []})
        text = item["content"][0]["text"]
        yield events.send("response.reasoning_text.delta", **where, content_index=0, delta=text)
        yield events.send("response.reasoning_text.done", **where, content_index=0, text=text)
    else:
        yield events.send(
            "response.output_item.added", output_index=index, item={**item, "status": "in_progress", "arguments": ""}
        )
        yield events.send("response.function_call_arguments.delta", **where, delta=item["arguments"])
        yield events.send("response.function_call_arguments.done", **where, arguments=item["arguments"], name=item["name"])
    yield events.send("response.output_item.done", output_index=index, item=item)


class _Events:
    """Server-sent events numbered in order, as the Responses stream carries them."""

    def __init__(self):
        self.sequence = 0

    def send(self, kind: str, **payload) -> str:
        event = {"type": kind, "sequence_number": self.sequence, **payload}
        self.sequence += 1
        return f"event: {kind}\ndata: {json.dumps(event, ensure_ascii=False)}\n\n"


def _envelope(model: str, call: ResponsesCall, response_id: str) -> dict:
    return {
        "id": response_id,
        "object": "response",
        "created_at": int(time.time()),
        "model": model,
        "instructions": call.instructions,
        "previous_response_id": call.previous_response_id,
        "error": None,
        "text": {"format": {"type": "text"}},
        "truncation": "disabled",
        "store": True,
        **call.echo,
    }


def _output_items(result: TurnResult, namespaced: dict[str, tuple[str, str]]) -> list[dict]:
    items: list[dict] = []
    if result.thinking:
        reasoning = {"type": "reasoning_text", "text": result.thinking}
        items.append(
            {"type": "reasoning", "id": "rs_" + uuid.uuid4().hex, "summary": [], "content": [reasoning], "status": "completed"}
        )
    if result.content or not result.tool_calls:
        logprobs = token_logprobs_json(result.token_logprobs)
        text = {"type": "output_text", "text": result.content, "annotations": [], "logprobs": logprobs}
        items.append(
            {"type": "message", "id": "msg_" + uuid.uuid4().hex, "status": "completed", "role": "assistant", "content": [text]}
        )
    for call in result.tool_calls:
        item = {
            "type": "function_call",
            "id": "fc_" + uuid.uuid4().hex,
            "call_id": call.id,
            "name": call.name,
            "arguments": call.arguments,
            "status": "completed",
        }
        if call.name in namespaced:  # back under the names the program sent
            item["namespace"], item["name"] = namespaced[call.name]
        items.append(item)
    return items
