"""The router as the router and agent tests start it, and what they put behind it.

`RecordingProxy` forwards `/generate` to a real engine and keeps every request and answer by
rid: "what the engine returned", to check each recorded turn against. (Scripted replies come
from the stand-in engine, tests/standins/engine.py.)
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager

import httpx
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from loongsage.agentflow.router import Router, RouterConfig
from loongsage.agentflow.router.server import RouterServer
from loongsage.http_server import AppServer
from loongsage.inference.embedded.engine import Engine
from loongsage.inference.embedded.server import EmbeddedServer


class RecordingProxy:
    def __init__(self, engine_url: str):
        self.engine_url = engine_url
        self.calls: dict[str, tuple[dict, dict]] = {}  # rid -> (request body, engine answer)
        self._client: httpx.AsyncClient | None = None  # created on the server's own event loop
        app = FastAPI()

        @app.post("/generate")
        async def generate(request: Request):
            body = await request.json()
            response = await self.client().post("/generate", json=body)
            answer = response.json()
            if response.is_success:
                self.calls[body["rid"]] = (body, answer)
            return JSONResponse(answer, status_code=response.status_code)

        @app.get("/get_server_info")
        async def server_info():
            return (await self.client().get("/get_server_info")).json()

        self.server = AppServer(app, name="recording-proxy")
        self.url = self.server.start()

    def client(self) -> httpx.AsyncClient:
        if self._client is None:
            # Idle connections are dropped well before uvicorn's 5 s keep-alive closes them, so a
            # request never races the server closing the connection it reuses.
            limits = httpx.Limits(max_connections=None, keepalive_expiry=2.0)
            self._client = httpx.AsyncClient(base_url=self.engine_url, timeout=120, limits=limits)
        return self._client

    def stop(self) -> None:
        self.server.stop()


@contextmanager
def recorded_embedded_engine(model_path, weight_version: int) -> Iterator[RecordingProxy]:
    """The real embedded engine serving `model_path`, behind a recording proxy."""
    settings = {"max_running": 64, "max_context": 512, "num_threads": 1, "weight_version": str(weight_version)}
    engine = EmbeddedServer(Engine(model_path, settings))
    engine.start()
    recording = RecordingProxy(engine.base_url)
    try:
        yield recording
    finally:
        recording.stop()
        engine.stop()


def start_router(engine_url: str, model_path: str, tokenizer=None, **settings) -> RouterServer:
    router = Router(
        RouterConfig(model=str(model_path), engine_urls=(engine_url,), served_model_names=("tiny",), **settings),
        tokenizer=tokenizer,
    )
    server = RouterServer(router)
    server.start()
    return server


def auth(server: RouterServer) -> dict[str, str]:
    return {"Authorization": f"Bearer {server.router.api_key}"}


_http: httpx.Client | None = None


def http() -> httpx.Client:
    """One client for the tests' own calls: a new httpx client costs ~50 ms (its SSL context)."""
    global _http
    if _http is None:
        _http = httpx.Client(timeout=60)
    return _http


def get_trajectory(server: RouterServer, trajectory_id: str) -> dict:
    response = http().get(server.trajectory_url(trajectory_id), headers=auth(server))
    response.raise_for_status()
    return response.json()


def tool_call(name: str, **arguments) -> str:
    """A scripted engine reply that calls `name`, in the Hermes markup the router parses."""
    return f"<tool_call>\n{json.dumps({'name': name, 'arguments': arguments})}\n</tool_call>"
