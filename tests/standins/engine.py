"""A stand-in SGLang engine over real HTTP, minus the model: /generate, /health,
/health_generate, /model_info (where SGLang 0.5.23 reports the weight version) and
/get_server_info.

/generate answers the replies queued with `say` or `queue`, in order, and one token (<|im_end|>)
when none is queued; each answer is stamped with its weight version. Scripted replies exist
because no real model can be made to emit a given text on demand (a random tiny model never
writes `<tool_call>` markup, nor a word in odd pieces), and those paths of the router must still
be driven end to end over HTTP.

The engine can be told to answer /generate with another status, to fail single calls, to hold
its answers until released, and be stopped (connection refused) and started again on the same
port, as a restarted engine process would be.

Run as a script (`python engine.py --host ... --port ... <SGLang's launch flags>`), it serves as
a process of its own and says on stderr that it serves: what launches SGLang servers is tested
against it without paying for a model load.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
import threading
from collections import deque
from dataclasses import dataclass

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from loongsage.http_server import AppServer

EOS = 2  # <|im_end|> of SmolLM2's tokenizer, shared by the tiny model
STOP_AT_EOS = {"type": "stop", "matched": EOS}


@dataclass
class Reply:
    ids: list[int]
    finish: dict
    version: str | None  # None: the engine's version when it answers


class StandinEngine:
    def __init__(
        self,
        tokenizer=None,
        version: str = "0",
        name: str = "engine",
        max_context: int = 4096,
        host: str = "127.0.0.1",
        port: int = 0,
    ):
        self.tokenizer = tokenizer  # decodes the answers' text; without one the text is empty
        self.version = version
        self.name = name
        self.max_context = max_context
        self.host = host
        self.port = port
        self.status = 200  # what /generate answers
        self.replies: deque[Reply] = deque()
        self.failures: deque[str] = deque()  # "answer": a JSON 500, kept alive; "raise": uvicorn's 500 + close
        self.requests: list[dict] = []  # each /generate body answered, in order
        self.outputs: list[list[int]] = []  # the output ids answered to each
        self.ports: list[int] = []  # the client port each /generate came from: one per connection
        self.waiting = 0  # /generate calls held by `hold()`
        self.aborted: list[str] = []  # the rids /abort_request named; a held call of one answers at once
        self.starts = 0
        self._open = threading.Event()
        self._open.set()
        self._server: AppServer | None = None
        self.url = self.start()

    def start(self) -> str:
        """Serve (again) on the same port as before, if it had one."""
        self._server = AppServer(self._app(), host=self.host, port=self.port, name=f"standin-{self.name}")
        url = self._server.start()
        self.port = int(url.rsplit(":", 1)[1])
        self.starts += 1
        return url

    def stop(self) -> None:
        self.release()
        if self._server is not None:
            self._server.stop()
            self._server = None

    def say(self, text: str | None = None, ids: list[int] | None = None, version: str | None = None) -> list[int]:
        """Queue a reply ending with <|im_end|>; returns its ids."""
        ids = list(ids) if ids is not None else self.tokenizer.encode(text, add_special_tokens=False)
        self.replies.append(Reply(ids + [EOS], STOP_AT_EOS, version))
        return ids + [EOS]

    def queue(self, ids: list[int], finish: dict, version: str | None = None) -> None:
        self.replies.append(Reply(list(ids), finish, version))

    def reset(self) -> None:
        self.replies.clear()
        self.requests.clear()
        self.outputs.clear()
        self.ports.clear()
        self.failures.clear()
        self.aborted.clear()

    def hold(self) -> None:
        """/generate calls wait until `release()`."""
        self._open.clear()

    def release(self) -> None:
        self._open.set()

    def _answer(self, body: dict) -> dict:
        reply = self.replies.popleft() if self.replies else Reply([EOS], STOP_AT_EOS, None)
        self.requests.append(body)
        self.outputs.append(reply.ids)
        text = self.tokenizer.decode(reply.ids, skip_special_tokens=True) if self.tokenizer is not None else ""
        return {
            "text": text,
            "output_ids": reply.ids,
            "meta_info": {
                "id": body.get("rid"),
                "finish_reason": reply.finish,
                "prompt_tokens": len(body.get("input_ids") or []),
                "completion_tokens": len(reply.ids),
                "cached_tokens": 0,
                "weight_version": self.version if reply.version is None else reply.version,
                "output_token_logprobs": [[-0.25 - 0.01 * i, t, None] for i, t in enumerate(reply.ids)],
            },
        }

    def _app(self) -> FastAPI:
        app = FastAPI()

        @app.post("/generate")
        async def generate(request: Request):
            body = await request.json()
            self.ports.append(request.client.port)
            self.waiting += 1
            try:
                while not self._open.is_set() and body.get("rid") not in self.aborted:
                    await asyncio.sleep(0.01)
            finally:
                self.waiting -= 1
            if body.get("rid") in self.aborted:  # SGLang answers an aborted request with what it had
                self.requests.append(body)
                return {"text": "", "output_ids": [], "meta_info": {"id": body["rid"], "finish_reason": {"type": "abort"}}}
            if self.status != 200:
                return JSONResponse({"error": {"message": f"{self.name} answers {self.status}"}}, status_code=self.status)
            if self.failures:
                if self.failures.popleft() == "raise":
                    raise RuntimeError("stand-in engine failure")
                return JSONResponse({"error": {"message": "stand-in engine failure"}}, status_code=500)
            return self._answer(body)

        @app.post("/abort_request")
        async def abort_request(request: Request):
            self.aborted.append((await request.json())["rid"])
            return {}

        @app.get("/health")
        @app.get("/health_generate")
        async def health():
            return {}

        @app.get("/model_info")
        async def model_info():
            return {"model_path": self.name, "weight_version": self.version}

        @app.get("/get_server_info")
        async def server_info():
            return {"max_context": self.max_context}

        return app


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    args, _ = parser.parse_known_args()  # the rest of SGLang's launch flags
    StandinEngine(host=args.host, port=args.port)
    print(f"standin serving on {args.host}:{args.port}", file=sys.stderr, flush=True)
    signal.pause()  # uvicorn serves on its thread; SIGTERM ends the process


if __name__ == "__main__":
    main()
