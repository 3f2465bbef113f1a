"""Servers the router tests put behind the router.

`RecordingProxy` forwards `/generate` to a real engine and keeps every request and answer by
rid: "what the engine returned", to check each recorded turn against.

`ScriptedEngine` is a test double of an SGLang engine that answers `/generate` with scripted
output ids. It exists because no real model can be made to emit a given text on demand (a
random tiny model never writes `<tool_call>` markup, nor a word in odd pieces), and those
paths of the router must still be driven end to end over HTTP.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import httpx
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from loongsage.agentflow.router import Router, RouterConfig
from loongsage.agentflow.router.server import RouterServer
from loongsage.http_server import AppServer
from loongsage.inference.embedded.engine import Engine
from loongsage.inference.embedded.server import EmbeddedServer

EOS = 2  # <|im_end|> of SmolLM2's tokenizer


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


@dataclass
class Reply:
    ids: list[int]
    finish: dict
    version: str = "3"


class ScriptedEngine:
    def __init__(self, tokenizer, max_context: int = 4096):
        self.tokenizer = tokenizer
        self.max_context = max_context
        self.replies: deque[Reply] = deque()
        self.requests: list[dict] = []  # each /generate body, in order
        self.outputs: list[list[int]] = []  # the output ids answered to each
        self.ports: list[int] = []  # the client port each /generate came from: one per connection
        self.failures: deque[str] = deque()  # "answer": a JSON 500, kept alive; "raise": uvicorn's 500 + close
        app = FastAPI()

        @app.post("/generate")
        async def generate(request: Request):
            body = await request.json()
            self.ports.append(request.client.port)
            if self.failures:
                if self.failures.popleft() == "raise":
                    raise RuntimeError("scripted engine failure")
                return JSONResponse({"error": {"message": "scripted engine failure"}}, status_code=500)
            reply = self.replies.popleft()
            self.requests.append(body)
            self.outputs.append(reply.ids)
            return {
                "text": self.tokenizer.decode(reply.ids, skip_special_tokens=True),
                "output_ids": reply.ids,
                "meta_info": {
                    "id": body.get("rid"),
                    "finish_reason": reply.finish,
                    "prompt_tokens": len(body["input_ids"]),
                    "completion_tokens": len(reply.ids),
                    "cached_tokens": 0,
                    "weight_version": reply.version,
                    "output_token_logprobs": [[-0.25 - 0.01 * i, t, None] for i, t in enumerate(reply.ids)],
                },
            }

        @app.get("/get_server_info")
        async def server_info():
            return {"max_context": self.max_context}

        self.server = AppServer(app, name="scripted-engine")
        self.url = self.server.start()

    def say(self, text: str | None = None, ids: list[int] | None = None, version: str = "3") -> list[int]:
        """Queue a reply ending with <|im_end|>; returns its ids."""
        ids = list(ids) if ids is not None else self.tokenizer.encode(text, add_special_tokens=False)
        self.replies.append(Reply(ids + [EOS], {"type": "stop", "matched": EOS}, version))
        return ids + [EOS]

    def queue(self, ids: list[int], finish: dict, version: str = "3") -> None:
        self.replies.append(Reply(list(ids), finish, version))

    def reset(self) -> None:
        self.replies.clear()
        self.requests.clear()
        self.outputs.clear()
        self.ports.clear()
        self.failures.clear()

    def stop(self) -> None:
        self.server.stop()


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
