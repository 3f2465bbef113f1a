"""The routes an agent calls, as one table (`MODEL_ROUTES`) that app.py serves twice: under
each trajectory's base URL and anonymously. Every handler takes the request, the trajectory
(None: anonymous, answered but not recorded) and the attempt."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from fastapi import Request

from loongsage.agentflow.router import anthropic_api, completions_api, openai_api, responses_api
from loongsage.agentflow.router.errors import RouterError
from loongsage.agentflow.router.replies import reply
from loongsage.agentflow.router.service import Router
from loongsage.json_input import JsonInputError, read_json

Handler = Callable[[Request, str | None, str], Awaitable]


@dataclass(frozen=True)
class ModelRoute:
    method: str
    path: str  # after the /v1 of a base URL
    handler: Handler  # its name, after "trajectory_" or "anonymous_", is the route's in /openapi.json
    # Anthropic's client appends /v1/messages to the base URL, and users commonly hand it one
    # that already ends in /v1 (as OpenAI clients want): such a route answers under /v1/v1 too.
    under_v1_v1: bool = False


async def chat_completions(request: Request, trajectory_id: str | None, attempt: str):
    router = _router(request)
    model, chat = openai_api.parse_chat_completion(await _json_body(request), router.model_names)
    results = await router.complete_choices(trajectory_id, attempt, chat)
    return reply(
        trajectory_id,
        results,
        chat.stream,
        lambda: openai_api.completion_stream(results, model, chat.include_usage),
        lambda: openai_api.completion_json(results, model),
    )


async def completions(request: Request, trajectory_id: str | None, attempt: str):
    router = _router(request)
    model, batch = completions_api.parse_completion(await _json_body(request), router.model_names)
    per_prompt = await asyncio.gather(*(router.complete_choices(trajectory_id, attempt, one) for one in batch))
    results = [result for choices in per_prompt for result in choices]
    prompts = [one.prompt_text for one in batch]
    return reply(
        trajectory_id,
        results,
        batch[0].stream,
        lambda: completions_api.completion_stream(results, model, prompts, batch[0].include_usage),
        lambda: completions_api.completion_json(results, model, prompts),
    )


async def responses(request: Request, trajectory_id: str | None, attempt: str):
    router = _router(request)
    model, call = responses_api.parse_responses_request(await _json_body(request), router.model_names, router.cfg.hosted_tools)
    threaded = router.responses.thread(trajectory_id, call)
    result = await router.complete(trajectory_id, attempt, threaded.chat)
    response_id = router.responses.keep(threaded, result)
    return reply(
        trajectory_id,
        [result],
        call.chat.stream,
        lambda: responses_api.response_stream(result, model, call, response_id),
        lambda: responses_api.response_json(result, model, call, response_id),
    )


async def messages(request: Request, trajectory_id: str | None, attempt: str):
    router = _router(request)
    model, chat = anthropic_api.parse_messages_request(await _json_body(request), router.model_names, router.cfg.hosted_tools)
    result = await router.complete(trajectory_id, attempt, chat)
    return reply(
        trajectory_id,
        [result],
        chat.stream,
        lambda: anthropic_api.message_stream(result, model),
        lambda: anthropic_api.message_json(result, model),
    )


async def count_tokens(request: Request, trajectory_id: str | None, attempt: str):
    router = _router(request)
    body = await _json_body(request)
    # max_tokens is required by /messages, not by count_tokens
    counted = {**body, "max_tokens": 1} if isinstance(body, dict) else body
    _, chat = anthropic_api.parse_messages_request(counted, router.model_names, router.cfg.hosted_tools)
    return {"input_tokens": router.count_prompt_tokens(trajectory_id, attempt, chat)}


async def models(request: Request, trajectory_id: str | None, attempt: str):
    return openai_api.models_json(_router(request).model_names, request.app.state.started)


MODEL_ROUTES = (
    ModelRoute("POST", "/chat/completions", chat_completions),
    ModelRoute("POST", "/completions", completions),
    ModelRoute("POST", "/responses", responses),
    ModelRoute("POST", "/messages", messages, under_v1_v1=True),
    ModelRoute("POST", "/messages/count_tokens", count_tokens, under_v1_v1=True),
    ModelRoute("GET", "/models", models),
)


def _router(request: Request) -> Router:
    return request.app.state.router


async def _json_body(request: Request):
    try:
        return await read_json(request, _router(request).cfg.max_body_bytes)
    except JsonInputError as exc:
        raise RouterError(exc.status, exc.message, exc.field) from None
