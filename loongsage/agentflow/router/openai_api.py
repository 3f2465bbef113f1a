"""OpenAI Chat Completions on the wire: request validation and response/stream formatting.

Supported: messages with roles system/developer/user/assistant/tool (text content as a
string or text parts), `tools` of type function, `tool_choice` ("none" turns tool parsing
off; "required" and named choices are accepted but cannot be enforced: decoding is not
constrained), `max_tokens`/`max_completion_tokens`, `temperature`, `top_p`, `top_k`,
`stop`, `seed`, `ignore_eos` (the vLLM/SGLang extension), `logprobs` with `top_logprobs`,
`n` (choices sampled together, each recorded: Router.complete_choices), `stream` with
`stream_options.include_usage`. A request that leaves max_tokens, temperature, top_p or top_k
unset is sampled with the run's value (RouterConfig.sampling, applied in service.py).

Refused with 400 rather than silently ignored, because dropping them would change what is
sampled: non-zero penalties, `logit_bias`, a `response_format` other than text, non-text
content parts. Other fields (user, metadata, store, parallel_tool_calls, ...) do not affect
sampling and are ignored.

Streaming: the engines answer `/generate` in one piece, so the chunks (per choice: role,
content, one delta per tool call, finish; then usage) are all sent once generation has finished.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from typing import Any

from loongsage.agentflow.router.errors import RouterError, bad_request
from loongsage.agentflow.router.messages import ChatRequest, Message, Sampling, TokenLogprob, ToolCall, TurnResult
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

MAX_CHOICES = 128  # OpenAI's bound on n
MAX_TOP_LOGPROBS = 20  # OpenAI's bound on top_logprobs
ROLE_ALIASES = {"system": "system", "developer": "system", "user": "user", "assistant": "assistant", "tool": "tool"}
TEXT_PART_TYPES = ("text", "input_text", "output_text")


def parse_chat_completion(body: Any, model_names: tuple[str, ...]) -> tuple[str, ChatRequest]:
    body = json_object_body(body)
    model = check_model(body, model_names)
    refuse_unsampled(body)
    messages = get(body, "messages", list, required=True)
    if not messages:
        raise bad_request("messages must not be empty", "messages")
    tools = [_tool(t, join("tools", i)) for i, t in enumerate(get(body, "tools", list) or [])]
    stream_options = get(body, "stream_options", dict) or {}
    request = ChatRequest(
        messages=[_message(m, join("messages", i)) for i, m in enumerate(messages)],
        tools=tools,
        parse_tool_calls=tool_choice_mode(body.get("tool_choice")) != "none",
        sampling=sampling_from_body(body),
        stream=bool(get(body, "stream", bool)),
        include_usage=bool(get(stream_options, "include_usage", bool, "stream_options")),
        logprobs=bool(get(body, "logprobs", bool)),
        top_logprobs=_top_logprobs(body),
        n=choice_count(body),
    )
    return model, request


def choice_count(body: dict) -> int:
    n = get(body, "n", int)
    return 1 if n is None else in_range(n, 1, MAX_CHOICES, "n")


def _top_logprobs(body: dict) -> int:
    top = in_range(get(body, "top_logprobs", int), 0, MAX_TOP_LOGPROBS, "top_logprobs") or 0
    if top and not get(body, "logprobs", bool):
        raise bad_request("top_logprobs needs logprobs=true", "top_logprobs")
    return top


def refuse_unsampled(body: dict) -> None:
    """Refuse what would change sampling in a way the engines cannot do."""
    for penalty in ("frequency_penalty", "presence_penalty"):
        if get(body, penalty, float):
            raise bad_request(f"{penalty} is not supported by the engines; leave it 0", penalty)
    if get(body, "logit_bias", dict):
        raise bad_request("logit_bias is not supported by the engines", "logit_bias")
    response_format = get(body, "response_format", dict)
    if response_format and response_format.get("type", "text") != "text":
        raise bad_request(
            f"response_format type {response_format.get('type')!r} is not supported: the router cannot constrain decoding",
            "response_format.type",
        )


def _message(raw: Any, path: str) -> Message:
    raw = expect(raw, dict, path)
    role = get(raw, "role", str, path, required=True)
    if role not in ROLE_ALIASES:
        raise bad_request(f"unknown role {role!r} (expected one of {', '.join(ROLE_ALIASES)})", join(path, "role"))
    role = ROLE_ALIASES[role]
    content = _content(raw.get("content"), join(path, "content"), nullable=role == "assistant")
    tool_calls = (
        tuple(_tool_call(c, join(join(path, "tool_calls"), i)) for i, c in enumerate(get(raw, "tool_calls", list, path) or []))
        if role == "assistant"
        else ()
    )
    return Message(role, content, tool_calls, tool_call_id=get(raw, "tool_call_id", str, path), name=get(raw, "name", str, path))


def _content(value: Any, path: str, nullable: bool) -> str:
    if value is None:
        if nullable:
            return ""
        raise bad_request(f"{path} is required", path)
    if isinstance(value, str):
        return value
    return text_parts(expect(value, (str, list), path), path)


def text_parts(parts: list, path: str) -> str:
    """Content given as parts (text only, in any of the APIs' part types), joined by newlines."""
    texts = []
    for i, part in enumerate(parts):
        part_path = join(path, i)
        part = expect(part, dict, part_path)
        kind = get(part, "type", str, part_path, required=True)
        if kind not in TEXT_PART_TYPES:
            raise bad_request(f"content part type {kind!r} is not supported (text only)", join(part_path, "type"))
        texts.append(get(part, "text", str, part_path, required=True))
    return "\n".join(texts)


def _tool_call(raw: Any, path: str) -> ToolCall:
    raw = expect(raw, dict, path)
    kind = get(raw, "type", str, path) or "function"
    if kind != "function":
        raise bad_request(f"tool call type {kind!r} is not supported (function only)", join(path, "type"))
    function = get(raw, "function", dict, path, required=True)
    function_path = join(path, "function")
    arguments = function.get("arguments", "{}")
    if isinstance(arguments, dict):  # lenient: some agents send the object itself
        arguments = json.dumps(arguments, ensure_ascii=False)
    expect(arguments, str, join(function_path, "arguments"))
    return ToolCall(get(raw, "id", str, path) or "", get(function, "name", str, function_path, required=True), arguments)


def _tool(raw: Any, path: str) -> dict:
    raw = expect(raw, dict, path)
    kind = get(raw, "type", str, path) or "function"
    if kind != "function":
        raise bad_request(f"tool type {kind!r} is not supported (function only)", join(path, "type"))
    function = get(raw, "function", dict, path, required=True)
    function_path = join(path, "function")
    spec = {"name": get(function, "name", str, function_path, required=True)}
    description = get(function, "description", str, function_path)
    if description is not None:
        spec["description"] = description
    spec["parameters"] = get(function, "parameters", dict, function_path) or {"type": "object", "properties": {}}
    return spec


def tool_choice_mode(value: Any) -> str:
    if value is None or value in ("auto", "required", "none"):
        return value or "auto"
    if isinstance(value, dict) and value.get("type") in ("function", "allowed_tools", "custom"):
        return "named"
    raise bad_request(f"tool_choice must be 'auto', 'none', 'required' or a named function, got {value!r}", "tool_choice")


def sampling_from_body(body: dict) -> Sampling:
    max_tokens = get(body, "max_completion_tokens", int)
    field = "max_completion_tokens"
    if max_tokens is None:
        max_tokens, field = get(body, "max_tokens", int), "max_tokens"
    stop = body.get("stop")
    if isinstance(stop, str):
        stop = [stop]
    if stop is not None and (not isinstance(stop, list) or not all(isinstance(s, str) and s for s in stop)):
        raise bad_request("stop must be a non-empty string or an array of them", "stop")
    return Sampling(
        max_tokens=in_range(max_tokens, 1, INT32_MAX, field),
        temperature=in_range(get(body, "temperature", float), 0, 2, "temperature"),
        top_p=in_range(get(body, "top_p", float), 0, 1, "top_p", low_open=True),
        top_k=sampling_top_k(get(body, "top_k", int)),
        stop=tuple(stop or ()),
        seed=in_range(get(body, "seed", int), INT64_MIN, INT64_MAX, "seed"),
        ignore_eos=get(body, "ignore_eos", bool),
    )


def sampling_top_k(value: int | None) -> int | None:
    if value is None or value in (-1, 0):
        return None if value is None else -1  # 0 and -1 both mean "off" across OpenAI-compatible servers
    return in_range(value, 1, INT32_MAX, "top_k")


# ---- responses ---------------------------------------------------------------------------


def completion_json(results: list[TurnResult], model: str) -> dict:
    return {
        "id": _completion_id(),
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "system_fingerprint": None,
        "choices": [
            {
                "index": index,
                "message": message_json(result),
                "logprobs": _logprobs_json(result),
                "finish_reason": result.finish_reason,
            }
            for index, result in enumerate(results)
        ],
        "usage": usage_json(results),
    }


def completion_stream(results: list[TurnResult], model: str, include_usage: bool) -> Iterator[str]:
    base = {
        "id": _completion_id(),
        "object": "chat.completion.chunk",
        "created": int(time.time()),
        "model": model,
        "system_fingerprint": None,
    }
    if include_usage:
        base["usage"] = None

    def chunk(index: int, delta: dict, finish_reason: str | None = None, logprobs=None) -> str:
        choice = {"index": index, "delta": delta, "logprobs": logprobs, "finish_reason": finish_reason}
        return sse({**base, "choices": [choice]})

    for index, result in enumerate(results):
        yield chunk(index, {"role": "assistant", "content": ""})
        if result.content:
            yield chunk(index, {"content": result.content}, logprobs=_logprobs_json(result))
        for call_index, call in enumerate(result.tool_calls):
            function = {"name": call.name, "arguments": call.arguments}
            yield chunk(index, {"tool_calls": [{"index": call_index, "id": call.id, "type": "function", "function": function}]})
        yield chunk(index, {}, result.finish_reason)
    if include_usage:
        yield sse({**base, "choices": [], "usage": usage_json(results)})
    yield "data: [DONE]\n\n"


def models_json(model_names: tuple[str, ...], created: int) -> dict:
    return {
        "object": "list",
        "data": [{"id": name, "object": "model", "created": created, "owned_by": "loongsage"} for name in model_names],
    }


def error_json(error: RouterError) -> dict:
    codes = {401: "invalid_api_key", 404: "model_not_found" if error.param == "model" else "not_found"}
    return {"error": {"message": error.message, "type": error.kind, "param": error.param, "code": codes.get(error.status)}}


def chat_body(request: ChatRequest) -> dict:
    """The Chat Completions body whose messages and tools parse back (parse_chat_completion) into
    `request`'s: a conversation another API carried, for what takes chat requests (a warm start's
    demonstration, Router.demonstrate)."""
    return {
        "messages": [_message_json(message) for message in request.messages],
        "tools": [{"type": "function", "function": tool} for tool in request.tools],
    }


def _message_json(message: Message) -> dict:
    body: dict = {"role": message.role, "content": message.content}
    if message.tool_calls:
        body["tool_calls"] = [
            {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}} for c in message.tool_calls
        ]
    if message.tool_call_id is not None:
        body["tool_call_id"] = message.tool_call_id
    if message.name is not None:
        body["name"] = message.name
    return body


def message_json(result: TurnResult) -> dict:
    """A turn as the assistant message of a Chat Completions response."""
    message: dict = {"role": "assistant", "content": result.content or (None if result.tool_calls else ""), "refusal": None}
    if result.tool_calls:
        message["tool_calls"] = [
            {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}} for c in result.tool_calls
        ]
    return message


def _logprobs_json(result: TurnResult) -> dict | None:
    if not result.token_logprobs:
        return None
    return {"content": token_logprobs_json(result.token_logprobs), "refusal": None}


def token_logprobs_json(logprobs: list[TokenLogprob]) -> list[dict]:
    """Chat Completions' (and the Responses API's) per-token logprobs with their alternatives."""

    def entry(token: str, logprob: float) -> dict:
        return {"token": token, "logprob": logprob, "bytes": list(token.encode("utf-8"))}

    return [{**entry(t.token, t.logprob), "top_logprobs": [entry(*alternative) for alternative in t.top]} for t in logprobs]


def usage_json(results: list[TurnResult]) -> dict:
    """The prompt counted once (the choices share it), the completions together."""
    prompt, completion = results[0].prompt_tokens, sum(r.completion_tokens for r in results)
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
        "prompt_tokens_details": {"cached_tokens": results[0].cached_tokens},
    }


def _completion_id() -> str:
    return "chatcmpl-" + uuid.uuid4().hex


def sse(payload: dict) -> str:
    return f"data: {json.dumps(payload, ensure_ascii=False)}\n\n"
