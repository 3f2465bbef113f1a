"""The router's HTTP routes.

    POST /{trajectory_id}/{attempt}/v1/chat/completions   OpenAI Chat Completions
    POST /{trajectory_id}/{attempt}/v1/messages           Anthropic Messages
    GET  /{trajectory_id}/{attempt}/v1/models
    ...  /v1/...                                          the same, anonymous: answered, not recorded
    GET  /trajectories                                    ids of recorded trajectories
    GET  /trajectories/{id}                               a trajectory as JSON (branches, turns, ids, mask, ...)
    DELETE /trajectories/{id}
    GET  /health                                          no key needed

Every other route needs the run's API key, as `Authorization: Bearer <key>` or `x-api-key`.
Errors are JSON in the style of the API that was called (Anthropic's under /messages).
"""
from __future__ import annotations

import hmac
import json
import time
from contextlib import asynccontextmanager

from fastapi import Depends, FastAPI, Request
from fastapi.responses import JSONResponse, Response
from starlette.exceptions import HTTPException

from loongsage.agentflow.router import anthropic_api, openai_api
from loongsage.agentflow.router.errors import RouterError, bad_request
from loongsage.agentflow.router.export import trajectory_json
from loongsage.agentflow.router.service import Router

ANONYMOUS_ATTEMPT = "0"
SSE_HEADERS = {"cache-control": "no-cache"}


def build_app(router: Router) -> FastAPI:
    @asynccontextmanager
    async def lifespan(_: FastAPI):
        yield
        await router.engines.aclose()  # its async HTTP clients belong to this event loop

    app = FastAPI(title="LoongSage router", lifespan=lifespan, docs_url=None, redoc_url=None, openapi_url=None)
    started = int(time.time())
    authorized = [Depends(_key_check(router.api_key))]

    @app.exception_handler(RouterError)
    async def router_error(request: Request, exc: RouterError):
        return error_response(request, exc)

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, exc: HTTPException):
        return error_response(request, RouterError(exc.status_code, f"{exc.detail}: {request.method} {request.url.path}"))

    async def chat_completions(request: Request, trajectory_id: str | None, attempt: str):
        model, chat = openai_api.parse_chat_completion(await _json_body(request, router.cfg.max_body_bytes),
                                                       router.model_names)
        result = await router.complete(trajectory_id, attempt, chat)
        headers = _turn_headers(trajectory_id, result)
        if chat.stream:
            stream = "".join(openai_api.completion_stream(result, model, chat.include_usage))
            return Response(stream, media_type="text/event-stream", headers={**SSE_HEADERS, **headers})
        return JSONResponse(openai_api.completion_json(result, model), headers=headers)

    async def messages(request: Request, trajectory_id: str | None, attempt: str):
        model, chat = anthropic_api.parse_messages_request(await _json_body(request, router.cfg.max_body_bytes),
                                                           router.model_names)
        result = await router.complete(trajectory_id, attempt, chat)
        headers = _turn_headers(trajectory_id, result)
        if chat.stream:
            stream = "".join(anthropic_api.message_stream(result, model))
            return Response(stream, media_type="text/event-stream", headers={**SSE_HEADERS, **headers})
        return JSONResponse(anthropic_api.message_json(result, model), headers=headers)

    @app.post("/{trajectory_id}/{attempt}/v1/chat/completions", dependencies=authorized)
    async def trajectory_chat_completions(request: Request, trajectory_id: str, attempt: str):
        return await chat_completions(request, trajectory_id, attempt)

    @app.post("/v1/chat/completions", dependencies=authorized)
    async def anonymous_chat_completions(request: Request):
        return await chat_completions(request, None, ANONYMOUS_ATTEMPT)

    @app.post("/{trajectory_id}/{attempt}/v1/messages", dependencies=authorized)
    async def trajectory_messages(request: Request, trajectory_id: str, attempt: str):
        return await messages(request, trajectory_id, attempt)

    @app.post("/v1/messages", dependencies=authorized)
    async def anonymous_messages(request: Request):
        return await messages(request, None, ANONYMOUS_ATTEMPT)

    @app.get("/{trajectory_id}/{attempt}/v1/models", dependencies=authorized)
    @app.get("/v1/models", dependencies=authorized)
    async def models():
        return openai_api.models_json(router.model_names, started)

    @app.get("/trajectories", dependencies=authorized)
    async def trajectory_ids():
        return {"ids": router.store.ids()}

    @app.get("/trajectories/{trajectory_id}", dependencies=authorized)
    async def get_trajectory(trajectory_id: str):
        trajectory = router.store.get(trajectory_id)
        if trajectory is None:
            raise RouterError(404, f"trajectory {trajectory_id!r} not found", "trajectory_id")
        return JSONResponse(trajectory_json(trajectory))  # skips FastAPI's slow walk over long id lists

    @app.delete("/trajectories/{trajectory_id}", dependencies=authorized)
    async def delete_trajectory(trajectory_id: str):
        if router.store.pop(trajectory_id) is None:
            raise RouterError(404, f"trajectory {trajectory_id!r} not found", "trajectory_id")
        return {"id": trajectory_id, "deleted": True}

    @app.get("/health")
    async def health():
        return {"status": "ok"}

    return app


def error_response(request: Request, error: RouterError) -> JSONResponse:
    is_anthropic = request.url.path.endswith("/messages")
    body = anthropic_api.error_json(error) if is_anthropic else openai_api.error_json(error)
    return JSONResponse(body, status_code=error.status)


def _key_check(api_key: str):
    expected = api_key.encode()

    async def check(request: Request) -> None:
        given = request.headers.get("x-api-key")
        authorization = request.headers.get("authorization", "")
        if given is None and authorization[:7].lower() == "bearer ":
            given = authorization[7:].strip()
        if given is None:
            raise RouterError(401, "missing API key: send 'Authorization: Bearer <key>' or 'x-api-key: <key>'")
        if not hmac.compare_digest(given.encode(), expected):
            raise RouterError(401, "invalid API key")

    return check


async def _json_body(request: Request, limit: int):
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise _too_large(int(declared), limit)
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise _too_large(size, limit)
        chunks.append(chunk)
    try:
        return json.loads(b"".join(chunks))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise bad_request(f"request body is not valid JSON: {exc}", "body") from exc


def _too_large(size: int, limit: int) -> RouterError:
    return RouterError(413, f"request body of at least {size} bytes exceeds the limit of {limit} bytes", "body")


def _turn_headers(trajectory_id: str | None, result) -> dict[str, str]:
    if trajectory_id is None:
        return {}
    return {"x-loongsage-branch": str(result.branch), "x-loongsage-turn": str(result.turn)}
