"""OpenAI's legacy Completions on the wire (`POST /v1/completions`): text in, text out.

The prompt is sent to the model as it is, with no chat template; under a trajectory it is
recorded like a chat turn (token in, token out, branches), so an agent that sends the prompt
plus the text it got back continues that turn's ids. `prompt` is a string or a list of them
(a batch: the choices come prompt by prompt, `n` each). Sampling as for chat completions
(`max_tokens` unset takes the run's value, not OpenAI's 16); `logprobs` is the count of
alternatives per token (0: the sampled tokens' only).

Refused with 400: a prompt of token ids (send text), `echo` (the prompt's own logprobs),
`suffix` (insertion), `best_of` other than n, and what chat refuses (penalties, logit_bias).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

from loongsage.agentflow.router.errors import bad_request
from loongsage.agentflow.router.messages import ChatRequest, TurnResult
from loongsage.agentflow.router.openai_api import (
    MAX_TOP_LOGPROBS,
    choice_count,
    refuse_unsampled,
    sampling_from_body,
    sse,
    usage_json,
)
from loongsage.agentflow.router.validation import check_model, expect, get, in_range, join, json_object_body


def parse_completion(body: Any, model_names: tuple[str, ...]) -> tuple[str, list[ChatRequest]]:
    """The model named and one request per prompt (each asking for n choices)."""
    body = json_object_body(body)
    model = check_model(body, model_names)
    refuse_unsampled(body)
    _refuse_unsupported(body)
    prompts = _prompts(body.get("prompt"))
    n = choice_count(body)
    best_of = get(body, "best_of", int)
    if best_of is not None and best_of != n:
        raise bad_request(
            f"best_of={best_of} is not supported (the router returns every choice it samples): leave it unset or n", "best_of"
        )
    logprobs = in_range(get(body, "logprobs", int), 0, MAX_TOP_LOGPROBS, "logprobs")
    stream_options = get(body, "stream_options", dict) or {}
    requests = [
        ChatRequest(
            messages=[],
            parse_tool_calls=False,
            sampling=sampling_from_body(body),
            stream=bool(get(body, "stream", bool)),
            include_usage=bool(get(stream_options, "include_usage", bool, "stream_options")),
            logprobs=logprobs is not None,
            top_logprobs=logprobs or 0,
            n=n,
            prompt_text=prompt,
        )
        for prompt in prompts
    ]
    return model, requests


def _refuse_unsupported(body: dict) -> None:
    if get(body, "echo", bool):
        raise bad_request("echo is not supported: the router returns the completion only", "echo")
    if get(body, "suffix", str):
        raise bad_request("suffix is not supported: the router does not insert text", "suffix")


def _prompts(value: Any) -> list[str]:
    if value is None:
        raise bad_request("prompt is required", "prompt")
    if isinstance(value, str):
        return [value]
    prompts = expect(value, list, "prompt")
    if not prompts:
        raise bad_request("prompt must not be an empty array", "prompt")
    for i, prompt in enumerate(prompts):
        if not isinstance(prompt, str):
            raise bad_request(
                f"prompt[{i}] must be a string (prompts of token ids are not supported: send the text)", join("prompt", i)
            )
    return prompts


def completion_json(results: list[TurnResult], model: str, prompts: list[str]) -> dict:
    """`results` prompt by prompt, `len(results) // len(prompts)` choices each."""
    per_prompt = len(results) // len(prompts)
    return {
        "id": _completion_id(),
        "object": "text_completion",
        "created": int(time.time()),
        "model": model,
        "system_fingerprint": None,
        "choices": [
            {
                "text": result.content,
                "index": index,
                "logprobs": _logprobs_json(result, len(prompts[index // per_prompt])),
                "finish_reason": result.finish_reason,
            }
            for index, result in enumerate(results)
        ],
        "usage": _batch_usage(results, per_prompt),
    }


def completion_stream(results: list[TurnResult], model: str, prompts: list[str], include_usage: bool) -> Iterator[str]:
    whole = completion_json(results, model, prompts)
    base = {key: whole[key] for key in ("id", "object", "created", "model", "system_fingerprint")}
    if include_usage:
        base["usage"] = None
    for choice in whole["choices"]:
        yield sse({**base, "choices": [{**choice, "finish_reason": None}]})
        yield sse({**base, "choices": [{**choice, "text": "", "logprobs": None}]})
    if include_usage:
        yield sse({**base, "choices": [], "usage": whole["usage"]})
    yield "data: [DONE]\n\n"


def _logprobs_json(result: TurnResult, prompt_chars: int) -> dict | None:
    """The legacy shape: parallel lists, alternatives as {token: logprob}, and where each token
    starts in prompt + completion (no echo: the first at the prompt's end)."""
    if not result.token_logprobs:
        return None
    offsets, at = [], prompt_chars
    for token in result.token_logprobs:
        offsets.append(at)
        at += len(token.token)
    return {
        "tokens": [t.token for t in result.token_logprobs],
        "token_logprobs": [t.logprob for t in result.token_logprobs],
        "top_logprobs": [dict(t.top) for t in result.token_logprobs],
        "text_offset": offsets,
    }


def _batch_usage(results: list[TurnResult], per_prompt: int) -> dict:
    """Each prompt counted once, every completion."""
    groups = [usage_json(results[i : i + per_prompt]) for i in range(0, len(results), per_prompt)]
    total = {key: sum(group[key] for group in groups) for key in ("prompt_tokens", "completion_tokens", "total_tokens")}
    return {**total, "prompt_tokens_details": {"cached_tokens": sum(g["prompt_tokens_details"]["cached_tokens"] for g in groups)}}


def _completion_id() -> str:
    return "cmpl-" + uuid.uuid4().hex
