"""Any ASGI app (the embedded engine, the AgentFlow router, test doubles) served by uvicorn on
its own thread."""

from __future__ import annotations

import asyncio
import socket
import threading
import time

import uvicorn


class AppServer:
    """Any ASGI app served by uvicorn on a thread; `start()` returns the base URL once it accepts."""

    def __init__(self, app, host: str = "127.0.0.1", port: int = 0, name: str = "http"):
        # proto=IPPROTO_TCP matters: asyncio sets TCP_NODELAY on accepted connections only for
        # sockets that say they are TCP. Without it every response whose headers and body go out
        # in two writes waits ~40 ms for a delayed ACK (Nagle).
        self._socket = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        self._socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        # Binding here (port 0 = any free port) removes the pick-then-bind race.
        self._socket.bind((host, port))
        self.base_url = "http://{}:{}".format(*self._socket.getsockname()[:2])
        self.port: int = self._socket.getsockname()[1]
        self._server = uvicorn.Server(uvicorn.Config(app, log_level="warning", access_log=False))
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def _run(self) -> None:
        asyncio.run(self._server.serve(sockets=[self._socket]))

    def start(self, timeout: float = 30.0) -> str:
        self._thread.start()
        deadline = time.monotonic() + timeout
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError(f"HTTP server {self._thread.name} did not start on {self.base_url}")
            time.sleep(0.01)
        return self.base_url

    def stop(self) -> None:
        self._server.should_exit = True
        self._thread.join()
        self._socket.close()
