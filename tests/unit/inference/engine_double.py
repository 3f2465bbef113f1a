"""A stand-in SGLang engine over real HTTP, for the pool and the router: it answers /generate
with one token stamped with the `version` it is told to serve, /health, /model_info (where
SGLang 0.5.23 reports the weight version) and /get_server_info. It can be told to answer
/generate with another status, to hold its /generate answers until released, and be stopped
(connection refused) and started again on the same port, as a restarted engine process would be.
"""

from __future__ import annotations

import asyncio
import threading

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from loongsage.http_server import AppServer

TOKEN = 2  # <|im_end|> of the tiny model's tokenizer: a turn the router can continue on one branch


class EngineDouble:
    def __init__(self, version: str = "0", name: str = "engine", max_context: int = 4096):
        self.version = version
        self.name = name
        self.max_context = max_context
        self.status = 200  # what /generate answers
        self.generated: list[dict] = []  # the body of each /generate answered 200, in order
        self.waiting = 0  # /generate calls held by `hold()`
        self.starts = 0
        self._open = threading.Event()
        self._open.set()
        self._server: AppServer | None = None
        self.port = 0
        self.url = self.start()

    def start(self) -> str:
        """Serve (again) on the same port as before, if it had one."""
        self._server = AppServer(self._app(), port=self.port, name=f"double-{self.name}")
        url = self._server.start()
        self.port = int(url.rsplit(":", 1)[1])
        self.starts += 1
        return url

    def stop(self) -> None:
        self.release()
        if self._server is not None:
            self._server.stop()
            self._server = None

    def hold(self) -> None:
        """/generate calls wait until `release()`."""
        self._open.clear()

    def release(self) -> None:
        self._open.set()

    def _app(self) -> FastAPI:
        app = FastAPI()

        @app.post("/generate")
        async def generate(request: Request):
            body = await request.json()
            self.waiting += 1
            try:
                await asyncio.to_thread(self._open.wait)
            finally:
                self.waiting -= 1
            if self.status != 200:
                return JSONResponse({"error": {"message": f"{self.name} answers {self.status}"}}, status_code=self.status)
            self.generated.append(body)
            prompt = body.get("input_ids") or []
            return {
                "text": "x",
                "output_ids": [TOKEN],
                "meta_info": {
                    "id": body.get("rid"),
                    "finish_reason": {"type": "stop", "matched": TOKEN},
                    "prompt_tokens": len(prompt),
                    "completion_tokens": 1,
                    "cached_tokens": 0,
                    "weight_version": self.version,
                    "output_token_logprobs": [[-0.5, TOKEN, None]],
                },
            }

        @app.get("/health")
        async def health():
            return {}

        @app.get("/model_info")
        async def model_info():
            return {"model_path": self.name, "weight_version": self.version}

        @app.get("/get_server_info")
        async def server_info():
            return {"max_context": self.max_context}

        return app
