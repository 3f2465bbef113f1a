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

The routes under /v1 are one table (model_routes.MODEL_ROUTES), served under a trajectory and
anonymously; Anthropic's also under /v1/v1/ (see ModelRoute.under_v1_v1), unlisted.

`{trajectory_id}` and `{attempt}` are segments written by `ids.encode_segment` (so any id,
`/`, `.` and `..` included, survives clients and servers). Every route but /health needs a
key, as `Authorization: Bearer <key>` or `x-api-key`: the routes under a trajectory take that
trajectory's own key (`Router.key_for`) or the run's admin key; the others, the admin key.
Errors are JSON in the style of the API that was called (Anthropic's under /messages).
"""

from __future__ import annotations

import time
from contextlib import asynccontextmanager
from typing import Annotated

from fastapi import Depends, FastAPI, Request
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException

from loongsage.agentflow.router import anthropic_api, openai_api
from loongsage.agentflow.router.errors import RouterError
from loongsage.agentflow.router.export import trajectory_json
from loongsage.agentflow.router.ids import decode_segment, readings
from loongsage.agentflow.router.keys import presented_key
from loongsage.agentflow.router.model_routes import MODEL_ROUTES, Handler
from loongsage.agentflow.router.service import Router

TRAJECTORY_PREFIX = "/{trajectory_id}/{attempt}"
ANONYMOUS_ATTEMPT = "0"


def build_app(router: Router) -> FastAPI:
    @asynccontextmanager
    async def lifespan(_: FastAPI):
        yield
        await router.engines.aclose()  # its async HTTP clients belong to this event loop

    app = FastAPI(title="LoongSage router", lifespan=lifespan, docs_url=None, redoc_url=None)
    app.state.router = router
    app.state.started = int(time.time())
    authorized = [Depends(_admin_check)]

    @app.exception_handler(RouterError)
    async def router_error(request: Request, exc: RouterError):
        return error_response(request, exc)

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, exc: HTTPException):
        return error_response(request, RouterError(exc.status_code, f"{exc.detail}: {request.method} {request.url.path}"))

    for route in MODEL_ROUTES:
        for base in ("/v1", "/v1/v1") if route.under_v1_v1 else ("/v1",):
            listed = base == "/v1"  # /v1/v1 is an alias for misconfigured clients, not an API of its own
            name = route.handler.__name__
            app.add_api_route(
                TRAJECTORY_PREFIX + base + route.path,
                _under_trajectory(route.handler),
                methods=[route.method],
                name=f"trajectory_{name}",
                include_in_schema=listed,
            )
            app.add_api_route(
                base + route.path,
                _anonymous(route.handler),
                methods=[route.method],
                name=f"anonymous_{name}",
                dependencies=authorized,
                include_in_schema=listed,
            )

    @app.get("/trajectories", dependencies=authorized, include_in_schema=False)
    async def trajectory_ids():
        return {"ids": router.store.ids()}

    # `:path`: a percent-encoded `/` in the id arrives decoded (ids.readings).
    @app.get("/trajectories/{trajectory_id:path}", dependencies=authorized, include_in_schema=False)
    async def get_trajectory(trajectory_id: str):
        _, trajectory = _first_recorded(trajectory_id, router.store.get)
        return JSONResponse(trajectory_json(trajectory))  # skips FastAPI's slow walk over long id lists

    @app.delete("/trajectories/{trajectory_id:path}", dependencies=authorized, include_in_schema=False)
    async def delete_trajectory(trajectory_id: str):
        trajectory_id, _ = _first_recorded(trajectory_id, router.store.pop)
        return {"id": trajectory_id, "deleted": True}

    @app.get("/health")
    async def health():
        return {"status": "ok"}

    return app


def _first_recorded(segment: str, take):
    """(id, take(id)) for the first reading of `segment` that `take` finds recorded; else a 404."""
    candidates = readings(segment)
    for trajectory_id in candidates:
        found = take(trajectory_id)
        if found is not None:
            return trajectory_id, found
    raise RouterError(404, f"trajectory {' or '.join(map(repr, candidates))} not found", "trajectory_id")


def error_response(request: Request, error: RouterError) -> JSONResponse:
    is_anthropic = request.url.path.endswith(("/messages", "/messages/count_tokens"))
    body = anthropic_api.error_json(error) if is_anthropic else openai_api.error_json(error)
    return JSONResponse(body, status_code=error.status)


def _under_trajectory(handler: Handler):
    async def endpoint(request: Request, route: Route):
        return await handler(request, *route)

    return endpoint


def _anonymous(handler: Handler):
    async def endpoint(request: Request):
        return await handler(request, None, ANONYMOUS_ATTEMPT)

    return endpoint


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
