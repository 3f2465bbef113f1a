"""The router's HTTP routes.

    POST /{trajectory_id}/{attempt}/v1/chat/completions   OpenAI Chat Completions
    POST /{trajectory_id}/{attempt}/v1/completions        OpenAI Completions (legacy: text, no chat template)
    POST /{trajectory_id}/{attempt}/v1/responses          OpenAI Responses
    POST /{trajectory_id}/{attempt}/v1/messages           Anthropic Messages
    POST /{trajectory_id}/{attempt}/v1/messages/count_tokens   Anthropic token counting
    GET  /{trajectory_id}/{attempt}/v1/models
    ...  /v1/...                                          the same, anonymous: answered, not recorded
    GET  /trajectories                                    ids of recorded trajectories
    GET  /trajectories/{id}                               a trajectory as JSON (branches, turns, ids, mask, ...)
    DELETE /trajectories/{id}
    GET  /health, /openapi.json                           no key needed

Anthropic's routes answer under /v1/v1/ too: its client appends /v1/messages to the base URL,
and users commonly hand it one that already ends in /v1 (as OpenAI clients want).

`{trajectory_id}` and `{attempt}` are segments written by `ids.encode_segment` (so any id,
`/`, `.` and `..` included, survives clients and servers). Every route but /health needs a
key, as `Authorization: Bearer <key>` or `x-api-key`: the routes under a trajectory take that
trajectory's own key (`Router.key_for`) or the run's admin key; the others, the admin key.
Errors are JSON in the style of the API that was called (Anthropic's under /messages).
"""

from __future__ import annotations

import asyncio
import time
from contextlib import asynccontextmanager
from typing import Annotated

from fastapi import Depends, FastAPI, Request
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException

from loongsage.agentflow.router import anthropic_api, completions_api, openai_api, responses_api
from loongsage.agentflow.router.errors import RouterError
from loongsage.agentflow.router.export import trajectory_json
from loongsage.agentflow.router.ids import decode_segment
from loongsage.agentflow.router.keys import presented_key
from loongsage.agentflow.router.replies import reply
from loongsage.agentflow.router.service import Router
from loongsage.json_input import JsonInputError, read_json

ANONYMOUS_ATTEMPT = "0"


def build_app(router: Router) -> FastAPI:
    @asynccontextmanager
    async def lifespan(_: FastAPI):
        yield
        await router.engines.aclose()  # its async HTTP clients belong to this event loop

    app = FastAPI(title="LoongSage router", lifespan=lifespan, docs_url=None, redoc_url=None)
    app.state.router = router
    started = int(time.time())
    authorized = [Depends(_admin_check)]

    @app.exception_handler(RouterError)
    async def router_error(request: Request, exc: RouterError):
        return error_response(request, exc)

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, exc: HTTPException):
        return error_response(request, RouterError(exc.status_code, f"{exc.detail}: {request.method} {request.url.path}"))

    async def chat_completions(request: Request, trajectory_id: str | None, attempt: str):
        model, chat = openai_api.parse_chat_completion(await _json_body(request, router.cfg.max_body_bytes), router.model_names)
        results = await router.complete_choices(trajectory_id, attempt, chat)
        return reply(
            trajectory_id,
            results,
            chat.stream,
            lambda: openai_api.completion_stream(results, model, chat.include_usage),
            lambda: openai_api.completion_json(results, model),
        )

    async def completions(request: Request, trajectory_id: str | None, attempt: str):
        body = await _json_body(request, router.cfg.max_body_bytes)
        model, batch = completions_api.parse_completion(body, router.model_names)
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
        body = await _json_body(request, router.cfg.max_body_bytes)
        model, call = responses_api.parse_responses_request(body, router.model_names)
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
        model, chat = anthropic_api.parse_messages_request(
            await _json_body(request, router.cfg.max_body_bytes), router.model_names
        )
        result = await router.complete(trajectory_id, attempt, chat)
        return reply(
            trajectory_id,
            [result],
            chat.stream,
            lambda: anthropic_api.message_stream(result, model),
            lambda: anthropic_api.message_json(result, model),
        )

    @app.post("/{trajectory_id}/{attempt}/v1/chat/completions")
    async def trajectory_chat_completions(request: Request, route: Route):
        return await chat_completions(request, *route)

    @app.post("/v1/chat/completions", dependencies=authorized)
    async def anonymous_chat_completions(request: Request):
        return await chat_completions(request, None, ANONYMOUS_ATTEMPT)

    @app.post("/{trajectory_id}/{attempt}/v1/completions")
    async def trajectory_completions(request: Request, route: Route):
        return await completions(request, *route)

    @app.post("/v1/completions", dependencies=authorized)
    async def anonymous_completions(request: Request):
        return await completions(request, None, ANONYMOUS_ATTEMPT)

    @app.post("/{trajectory_id}/{attempt}/v1/responses")
    async def trajectory_responses(request: Request, route: Route):
        return await responses(request, *route)

    @app.post("/v1/responses", dependencies=authorized)
    async def anonymous_responses(request: Request):
        return await responses(request, None, ANONYMOUS_ATTEMPT)

    async def count_tokens(request: Request, trajectory_id: str | None, attempt: str):
        body = await _json_body(request, router.cfg.max_body_bytes)
        # max_tokens is required by /messages, not by count_tokens
        counted = {**body, "max_tokens": 1} if isinstance(body, dict) else body
        _, chat = anthropic_api.parse_messages_request(counted, router.model_names)
        return {"input_tokens": router.count_prompt_tokens(trajectory_id, attempt, chat)}

    for prefix in ("/v1", "/v1/v1"):
        alias = prefix != "/v1"

        @app.post("/{trajectory_id}/{attempt}" + prefix + "/messages", include_in_schema=not alias)
        async def trajectory_messages(request: Request, route: Route):
            return await messages(request, *route)

        @app.post(prefix + "/messages", dependencies=authorized, include_in_schema=not alias)
        async def anonymous_messages(request: Request):
            return await messages(request, None, ANONYMOUS_ATTEMPT)

        @app.post("/{trajectory_id}/{attempt}" + prefix + "/messages/count_tokens", include_in_schema=not alias)
        async def trajectory_count_tokens(request: Request, route: Route):
            return await count_tokens(request, *route)

        @app.post(prefix + "/messages/count_tokens", dependencies=authorized, include_in_schema=not alias)
        async def anonymous_count_tokens(request: Request):
            return await count_tokens(request, None, ANONYMOUS_ATTEMPT)

    @app.get("/{trajectory_id}/{attempt}/v1/models")
    async def trajectory_models(_: Route):
        return openai_api.models_json(router.model_names, started)

    @app.get("/v1/models", dependencies=authorized)
    async def models():
        return openai_api.models_json(router.model_names, started)

    @app.get("/trajectories", dependencies=authorized, include_in_schema=False)
    async def trajectory_ids():
        return {"ids": router.store.ids()}

    @app.get("/trajectories/{trajectory_id}", dependencies=authorized, include_in_schema=False)
    async def get_trajectory(trajectory_id: str):
        trajectory_id = decode_segment(trajectory_id, "trajectory_id")
        trajectory = router.store.get(trajectory_id)
        if trajectory is None:
            raise RouterError(404, f"trajectory {trajectory_id!r} not found", "trajectory_id")
        return JSONResponse(trajectory_json(trajectory))  # skips FastAPI's slow walk over long id lists

    @app.delete("/trajectories/{trajectory_id}", dependencies=authorized, include_in_schema=False)
    async def delete_trajectory(trajectory_id: str):
        trajectory_id = decode_segment(trajectory_id, "trajectory_id")
        if router.store.pop(trajectory_id) is None:
            raise RouterError(404, f"trajectory {trajectory_id!r} not found", "trajectory_id")
        return {"id": trajectory_id, "deleted": True}

    @app.get("/health")
    async def health():
        return {"status": "ok"}

    return app


def error_response(request: Request, error: RouterError) -> JSONResponse:
    is_anthropic = request.url.path.endswith(("/messages", "/messages/count_tokens"))
    body = anthropic_api.error_json(error) if is_anthropic else openai_api.error_json(error)
    return JSONResponse(body, status_code=error.status)


async def _admin_check(request: Request) -> None:
    request.app.state.router.keys.check(presented_key(request.headers))


async def _trajectory_route(request: Request, trajectory_id: str, attempt: str) -> tuple[str, str]:
    """The decoded (trajectory id, attempt) of a route under a trajectory, once the key is one
    that may use it."""
    given = presented_key(request.headers)  # a missing key is a 401 before anything else
    route = decode_segment(trajectory_id, "trajectory_id"), decode_segment(attempt, "attempt")
    request.app.state.router.keys.check(given, route[0])
    return route


Route = Annotated[tuple[str, str], Depends(_trajectory_route)]


async def _json_body(request: Request, limit: int):
    try:
        return await read_json(request, limit)
    except JsonInputError as exc:
        raise RouterError(exc.status, exc.message, exc.field) from None
